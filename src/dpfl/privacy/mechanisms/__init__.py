"""dpfl.privacy.mechanisms."""
