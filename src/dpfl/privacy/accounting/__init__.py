"""dpfl.privacy.accounting."""
