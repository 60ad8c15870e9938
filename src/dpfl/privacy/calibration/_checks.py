"""Validation at the boundary, shared by every calibration module and by
:mod:`dpfl.privacy.accounting.claimed`: each names the parameter, the rule and the value."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpfl.errors import ConfigError


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"`{name}` must be a real number. Found {value!r}.")
    result = float(value)
    if math.isnan(result):
        raise ConfigError(f"`{name}` must be a number, not NaN. Found {value!r}.")
    return result


def _positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A finite (or, if allowed, infinite) number > 0."""
    result = _real(name, value)
    if not result > 0 or (math.isinf(result) and not allow_inf):
        rule = "> 0" if allow_inf else "finite and > 0"
        raise ConfigError(f"`{name}` must be {rule}. Found {value!r}.")
    return result


def _non_negative(name: str, value: object) -> float:
    result = _real(name, value)
    if not (result >= 0 and math.isfinite(result)):
        raise ConfigError(f"`{name}` must be finite and >= 0. Found {value!r}.")
    return result


def _delta(name: str, value: object) -> float:
    result = _real(name, value)
    if not 0 < result < 1:
        raise ConfigError(f"`{name}` must be in (0, 1). Found {value!r}.")
    return result


def _sample_rate(name: str, value: object) -> float:
    result = _real(name, value)
    if not 0 < result <= 1:
        raise ConfigError(f"`{name}` must be in (0, 1]. Found {value!r}.")
    return result


def _weight(name: str, value: object) -> float:
    return _sample_rate(name, value)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    if int(value) < 1:
        raise ConfigError(f"`{name}` must be a positive integer (>= 1). Found {value!r}.")
    return int(value)


def _weights(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Aggregation weights: a non-empty 1-D sequence of numbers in (0, 1] summing to 1."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ConfigError(f"`{name}` must be a non-empty 1-D sequence. Found shape {array.shape}.")
    if not np.all(np.isfinite(array)) or np.any(array <= 0) or np.any(array > 1):
        bad = array[~(np.isfinite(array) & (array > 0) & (array <= 1))]
        raise ConfigError(f"`{name}` must all be in (0, 1]. Found {bad[:5].tolist()}.")
    total = math.fsum(array.tolist())
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"`{name}` must sum to 1 (aggregation weights). Found sum {total!r}.")
    return array


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x > 0 without overflow (large x) or cancellation (small x)."""
    return x + math.log(-math.expm1(-x))


def _midp_denominator_log(epsilon_nats: float, dim: int) -> float:
    """log(d·(e^{2ε/d} − 1)), the denominator of 002 eq. 4.7–4.11 and 5.32, in log-space."""
    return math.log(dim) + _log_expm1(2.0 * epsilon_nats / dim)
