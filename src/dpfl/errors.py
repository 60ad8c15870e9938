"""The exception hierarchy of dpfl.

Every error a user can cause derives from :class:`DpflError`; the CLI prints its message on one
line and exits with status 2. Messages name the parameter, the rule and the offending value.
This module imports nothing else from dpfl.
"""

from __future__ import annotations


class DpflError(Exception):
    """Base class of every error dpfl raises on purpose."""


class ConfigError(DpflError, ValueError):
    """A configuration value or combination is invalid (unknown name, out-of-range number...)."""


class PrivacyPreconditionError(DpflError, ValueError):
    """A privacy formula cannot be applied to the given settings (budget exhausted, log of a
    negative number, a sensitivity that the code does not enforce...)."""


class DataFormatError(DpflError, ValueError):
    """A data file is missing, corrupt, or not in the format its reader expects."""
