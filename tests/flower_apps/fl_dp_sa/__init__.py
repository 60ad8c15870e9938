"""fl_dp_sa: central DP with client-side clipping and SecAgg+, in Flower's example layout."""
