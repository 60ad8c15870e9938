"""dpfl.sim."""
