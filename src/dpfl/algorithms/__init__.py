"""dpfl.algorithms."""
