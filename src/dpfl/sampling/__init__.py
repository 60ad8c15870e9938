"""dpfl.sampling."""
