"""Notices raised when a privacy formula is used outside the range it was proven for.

A paper's noise formula is implemented faithfully even where its proof does not reach (003 runs
the classical Gaussian constant at ε = 50; 000 picks a moment order below 1 for large ε). dpfl
never refuses such a run silently and never silently under-noises: the formula emits a
:class:`FormulaRangeWarning` naming the formula, the parameter, its value and the proven range, and
the run records it next to the certified ε that a rigorous accountant gives for the same noise.

To record every notice (the default warning filter shows each call site only once), wrap the
computation in ``warnings.catch_warnings(record=True)`` with ``warnings.simplefilter("always",
FormulaRangeWarning)``; see :func:`collect_range_warnings`.

This module imports nothing from dpfl.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "FormulaRangeWarning",
    "collect_range_warnings",
    "warn_out_of_range",
]


class FormulaRangeWarning(UserWarning):
    """A privacy formula was evaluated outside the range its proof covers.

    Attributes:
        formula: short name of the formula and its source, e.g. ``"003 eq. 10 (classical c)"``.
        parameter: the name of the offending parameter, e.g. ``"epsilon / exposures"``.
        value: the offending value.
        valid_range: the proven range, in words, e.g. ``"< 1"``.
    """

    def __init__(
        self,
        message: str,
        *,
        formula: str = "",
        parameter: str = "",
        value: float = math.nan,
        valid_range: str = "",
    ) -> None:
        super().__init__(message)
        self.formula = formula
        self.parameter = parameter
        self.value = value
        self.valid_range = valid_range

    def to_dict(self) -> dict[str, object]:
        """A JSON-serializable record for the run store."""
        return {
            "message": str(self),
            "formula": self.formula,
            "parameter": self.parameter,
            "value": self.value,
            "valid_range": self.valid_range,
        }


def warn_out_of_range(
    formula: str,
    parameter: str,
    value: float,
    valid_range: str,
    consequence: str,
    *,
    stacklevel: int = 3,
) -> None:
    """Emit a :class:`FormulaRangeWarning` whose message names the value and the proven range.

    Args:
        formula: the formula and its source (paper file and equation).
        parameter: the parameter that is out of range.
        value: its value.
        valid_range: the range the formula was proven for, e.g. ``"< 1"``.
        consequence: one sentence on what this means for the guarantee.
        stacklevel: passed to :func:`warnings.warn`; the default points at the caller of the
            calibration function that called this helper.
    """
    message = (
        f"{formula}: `{parameter}` = {value:.6g} is outside the proven range ({parameter} "
        f"{valid_range}). {consequence} Compare with the certified epsilon."
    )
    warnings.warn(
        FormulaRangeWarning(
            message,
            formula=formula,
            parameter=parameter,
            value=float(value),
            valid_range=valid_range,
        ),
        stacklevel=stacklevel,
    )


@contextmanager
def collect_range_warnings() -> Iterator[list[FormulaRangeWarning]]:
    """Collect every :class:`FormulaRangeWarning` raised inside the block (none is lost to the
    once-per-location default filter); other warnings pass through unchanged.

    >>> with collect_range_warnings() as notices:
    ...     warn_out_of_range("demo", "epsilon", 50.0, "< 1", "Unproven.")
    >>> [n.value for n in notices]
    [50.0]
    """
    collected: list[FormulaRangeWarning] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FormulaRangeWarning)
        yield collected
    for item in caught:
        if isinstance(item.message, FormulaRangeWarning):
            collected.append(item.message)
        else:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
