"""dpfl.plots."""
