"""dpfl.experiments."""
