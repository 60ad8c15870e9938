"""The exception hierarchy of dpfl.

Every error a user can cause derives from :class:`DpflError`; the CLI prints its message on one
line and exits with status 2. Messages name the parameter, the rule and the offending value.
This module imports nothing else from dpfl.
"""

from __future__ import annotations

from collections.abc import Mapping


class DpflError(Exception):
    """Base class of every error dpfl raises on purpose."""


class ConfigError(DpflError, ValueError):
    """A configuration value or combination is invalid (unknown name, out-of-range number...)."""


class PrivacyPreconditionError(DpflError, ValueError):
    """A privacy formula cannot be applied to the given settings (budget exhausted, log of a
    negative number, a sensitivity that the code does not enforce...)."""


class DataFormatError(DpflError, ValueError):
    """A data file is missing, corrupt, or not in the format its reader expects."""


def env_positive_int(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """The positive integer in environment variable ``name`` (of ``environ``, default this
    process's); None when it is unset or blank.

    Raises:
        ConfigError: the value is not a whole number >= 1 (naming the variable and the value).
    """
    import os

    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"${name} must be a positive integer. Found {raw!r}.") from None
    if value < 1:
        raise ConfigError(f"${name} must be a positive integer. Found {value}.")
    return value
