"""dpfl.privacy."""
