"""dpfl.client."""
