"""dpfl.server."""
