"""dpfl.models."""
