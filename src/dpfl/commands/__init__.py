"""dpfl.commands."""
