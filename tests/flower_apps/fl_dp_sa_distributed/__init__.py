"""fl_dp_sa_distributed: the fl_dp_sa pattern with dpfl's distributed DP (Skellam shares in SecAgg+)
instead of Flower's central noise."""
