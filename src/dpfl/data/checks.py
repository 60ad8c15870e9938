"""Checks of a run's data made when the run is built, before any round.

Bad data otherwise surfaces late and under another name: a NaN input as "clients [0..4] have a
non-finite L2 norm" at round 1, an infinite test input as a run that finishes at chance
accuracy, a stray label as a model "with the wrong number of outputs". Each check here is one
pass over a tensor (a sum, a min/max, a count); only when it fails is the offending value looked
for, so that the error can name it.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from dpfl.errors import ConfigError

__all__ = ["check_client_sizes", "check_finite_inputs", "check_labels", "delta_notice"]


def _position(flat_index: int, shape: Sequence[int]) -> str:
    """Sample and feature position of a flat index into a ``[N, *input_shape]`` tensor."""
    per_sample = 1
    for s in shape[1:]:
        per_sample *= int(s)
    sample, rest = divmod(flat_index, max(per_sample, 1))
    feature = []
    for s in reversed(list(shape[1:])):
        rest, r = divmod(rest, int(s))
        feature.append(r)
    where = ", ".join(str(f) for f in reversed(feature))
    return f"sample {sample}" + (f", feature [{where}]" if feature else "")


def check_finite_inputs(x: torch.Tensor, which: str) -> None:
    """Refuse NaN or ±inf anywhere in ``x`` [N, ...], naming the first one and the count.

    One pass in the common case: a sum of finite floats is finite unless it overflows, and any NaN
    or inf makes it non-finite; only a non-finite sum is followed by the element-wise search.

    Raises:
        ConfigError: ``which`` (e.g. "training inputs"), the first bad value with its sample and
            feature position, and how many samples hold one.
    """
    if not x.is_floating_point() or x.numel() == 0:
        return
    if bool(torch.isfinite(x.sum())):
        return
    bad = ~torch.isfinite(x)
    if not bool(bad.any()):
        return  # the sum overflowed, every value is finite
    first = int(bad.reshape(-1).nonzero()[0, 0])
    value = {True: "NaN", False: "inf"}[bool(torch.isnan(x.reshape(-1)[first]))]
    if value == "inf" and float(x.reshape(-1)[first]) < 0:
        value = "-inf"
    samples = int(bad.reshape(x.shape[0], -1).any(1).sum())
    raise ConfigError(f"the {which} hold {value} at {_position(first, tuple(x.shape))} ({samples} of {x.shape[0]} "
                      "samples have NaN or inf): remove or impute them before training.")


def check_labels(y: torch.Tensor, num_classes: int, which: str) -> None:
    """Refuse labels outside ``0..num_classes-1``, naming the first one and the count.

    Raises:
        ConfigError: ``which`` (e.g. "training labels"), the first bad label and its sample index.
    """
    if y.numel() == 0:
        return
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.dtype.is_complex:
        raise ConfigError(f"the {which} must be integer class indices 0..{num_classes - 1}. Found dtype {y.dtype}.")
    lo, hi = (int(v) for v in torch.aminmax(y))
    if lo >= 0 and hi < num_classes:
        return
    bad = (y < 0) | (y >= num_classes)
    first = int(bad.nonzero()[0, 0])
    raise ConfigError(f"the {which} must lie in 0..{num_classes - 1} ({num_classes} classes). Found label "
                      f"{int(y[first])} at sample {first} ({int(bad.sum())} of {y.numel()} labels outside).")


def check_client_sizes(parts: Sequence[Any]) -> None:
    """Refuse a partition with clients that hold no sample, naming every such client id.

    Raises:
        ConfigError: the ids of the empty clients (the first 20) and how many there are.
    """
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if not empty:
        return
    shown = ", ".join(str(i) for i in empty[:20]) + (", ..." if len(empty) > 20 else "")
    raise ConfigError(f"client{'s' if len(empty) > 1 else ''} [{shown}] hold{'' if len(empty) > 1 else 's'} no "
                      f"samples ({len(empty)} of {len(parts)} clients): every client needs at least one; change the "
                      "partition or drop those clients.")


def delta_notice(delta: float, units: int, unit: str) -> str | None:
    """The warning for a δ of at least 1/n, where n is the number of privacy units, else None.

    A mechanism that publishes each unit's data outright with probability δ is (0, δ)-DP, so
    with δ ≥ 1/n the guarantee allows one unit's data to be published in expectation (Dwork and
    Roth 2014, "The Algorithmic Foundations of Differential Privacy", §2.3: δ must be less than
    the inverse of any polynomial in the size of the database).
    """
    if units < 1 or delta < 1.0 / units:
        return None
    plural = {"client": "clients", "record": "records"}.get(unit, f"{unit}s")
    return (f"δ = {delta:g} is at least 1/n = 1/{units} (n = {units} {plural}, the privacy unit): (ε, δ)-DP then "
            f"admits publishing each {unit}'s data outright with probability δ, {delta * units:.3g} of them in "
            f"expectation; use δ well below 1/n (e.g. {_suggest(units):g}).")


def _suggest(units: int) -> float:
    """dpfl's default 1e-5, or a power of ten at most 1/(10·n) when n is larger."""
    return min(1e-5, 10.0 ** math.floor(math.log10(0.1 / units)))
