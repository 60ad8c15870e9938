"""Typed reads of Flower record values.

A ``RecordDict`` maps names to array, metric or config records, and a record's value is any of
the types those records hold (``Array``, numbers, strings, bytes, lists of them). The message
layout (:mod:`.codec`) fixes which one each field is; these functions narrow a value read from a
message to that type, raising ``TypeError`` if the sender put something else there.

No torch here: the ClientApp (:mod:`.client_app`) imports this module.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, Error

__all__ = ["as_array", "as_bytes", "as_float", "as_int", "as_list", "error_reason"]


def _wrong(value: object, expected: str) -> TypeError:
    return TypeError(f"expected {expected} in the record, found {type(value).__name__}")


def as_int(value: object) -> int:
    """``int(value)`` of a number (or a numeric string) in a record."""
    if isinstance(value, int | float | str | bytes):
        return int(value)
    raise _wrong(value, "an integer")


def as_float(value: object) -> float:
    """``float(value)`` of a number (or a numeric string) in a record."""
    if isinstance(value, int | float | str | bytes):
        return float(value)
    raise _wrong(value, "a number")


def as_bytes(value: object) -> bytes:
    """A bytes value of a config record."""
    if isinstance(value, bytes):
        return value
    raise _wrong(value, "bytes")


def as_list(value: object) -> list[object]:
    """A list value of a metric or config record."""
    if isinstance(value, list):
        return value
    raise _wrong(value, "a list")


def as_array(value: object) -> np.ndarray:
    """The numpy array of an ``Array`` of an array record."""
    if isinstance(value, Array):
        return value.numpy()
    raise _wrong(value, "an array")


def error_reason(error: Error, limit: int = 300) -> str:
    """The first ``limit`` characters of an error reply's reason (its code if it gave none)."""
    return (error.reason if error.reason is not None else f"error code {error.code}")[:limit]
