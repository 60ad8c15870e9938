"""dpfl.theory."""
