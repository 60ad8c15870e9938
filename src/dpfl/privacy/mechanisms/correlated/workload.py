"""Workloads (the matrix A of A = B·C) and lower-triangular Toeplitz algebra on coefficients.

Workloads. :func:`prefix_workload` is the n × n lower-triangular matrix of ones (A·x = prefix sums:
what plain SGD's model moves by; the workload of Kairouz et al. 2021, arXiv 2103.00039, and of
Choquette-Choo et al. 2023, arXiv 2306.08153). :func:`momentum_workload` is the map from the
rounds' gradients to the model's total movement under heavy-ball momentum (the momentum workload
those papers and Denisov et al. 2022, arXiv 2202.08312, optimize for; derived here): with
m_τ = β·m_{τ−1} + g_τ and θ_{τ+1} = θ_τ − η_τ·m_τ, m_τ = Σ_{s<=τ} β^{τ−s} g_s and

    θ_0 − θ_{t+1} = Σ_{s<=t} A[t, s]·g_s,   A[t, s] = Σ_{τ=s}^{t} η_τ·β^{τ−s}        (1)

(η_τ = 1 when no learning rates are given: then A is Toeplitz with coefficients
a_k = Σ_{j<=k} β^j = (1 − β^{k+1})/(1 − β), :func:`momentum_coefficients`).

Toeplitz algebra. A lower-triangular Toeplitz n × n matrix T is its first column, the coefficients
t_0..t_{n−1} (T[i, j] = t_{i−j} for i >= j); equivalently the power series t(x) = Σ t_k x^k taken
mod x^n. Then (jax-privacy's ``toeplitz.py`` uses the same representation):

* the product of two such matrices has the coefficients of t(x)·u(x) mod x^n (a truncated
  convolution, :func:`toeplitz_multiply`);
* the inverse has those of 1/t(x) mod x^n (t_0 != 0), i.e. the solution d of the forward
  substitution Σ_{j<=k} t_j·d_{k−j} = [k = 0] (:func:`toeplitz_inverse`);
* the square root (t_0 > 0) has r with r(x)² = t(x) mod x^n:
  r_0 = √t_0, r_k = (t_k − Σ_{j=1}^{k−1} r_j r_{k−j}) / (2 r_0) (:func:`toeplitz_sqrt`; for the
  prefix matrix, 1/(1 − x), r_k = Π_{1<=j<=k} (2j − 1)/(2j), the coefficients of (1 − x)^{−1/2}:
  Fichtenberger et al. 2023, arXiv 2202.11205, jax-privacy's ``optimal_max_error_strategy_coefs``);
* ‖T‖_F² = Σ_k (n − k)·t_k² (the coefficient t_k appears on n − k entries,
  :func:`toeplitz_frobenius_sq`).

RMSE. :func:`prefix_rmse` is the figure the banded/BLT papers report (2306.08153; McKenna et al.
2024, arXiv 2405.15913; jax-privacy's ``per_query_error`` averaged, times the squared sensitivity,
square-rooted): √(‖A·W‖_F²/n) × sensitivity, the root-mean-square error of the n estimates of A·x
at noise multiplier 1 against the worst participation pattern's sensitivity.

This module imports nothing from dpfl except :mod:`dpfl.errors` (and its own package).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy import signal

from dpfl.errors import ConfigError

if TYPE_CHECKING:
    from dpfl.privacy.mechanisms.correlated.base import Strategy

__all__ = [
    "check_rounds",
    "is_lower_toeplitz",
    "momentum_coefficients",
    "momentum_workload",
    "prefix_rmse",
    "prefix_workload",
    "toeplitz_frobenius_sq",
    "toeplitz_inverse",
    "toeplitz_matrix",
    "toeplitz_multiply",
    "toeplitz_sqrt",
]


def check_rounds(n: object, name: str = "n") -> int:
    """``n`` as an int >= 1, or a ConfigError naming it."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) < 1:
        raise ConfigError(f"`{name}` must be an integer >= 1. Found {n!r}.")
    return int(n)


def prefix_workload(n: int) -> np.ndarray:
    """The n × n prefix-sum workload: lower-triangular ones (float64)."""
    n = check_rounds(n)
    return np.tril(np.ones((n, n)))


def _momentum(momentum: object) -> float:
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float, np.floating)):
        raise ConfigError(f"`momentum` must be a float in [0, 1). Found {momentum!r}.")
    beta = float(momentum)
    if not (0.0 <= beta < 1.0):
        raise ConfigError(f"`momentum` must be in [0, 1). Found {momentum!r}.")
    return beta


def momentum_coefficients(n: int, momentum: float) -> np.ndarray:
    """The Toeplitz coefficients a_k = Σ_{j<=k} β^j of eq. (1) with η = 1 (a_k = 1 for β = 0)."""
    n = check_rounds(n)
    beta = _momentum(momentum)
    return np.cumsum(beta ** np.arange(n, dtype=np.float64))


def momentum_workload(n: int, momentum: float,
                      learning_rates: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """A[t, s] = Σ_{τ=s}^{t} η_τ·β^{τ−s} (eq. (1)); η_τ = 1 when ``learning_rates`` is None."""
    n = check_rounds(n)
    beta = _momentum(momentum)
    if learning_rates is None:
        return toeplitz_matrix(momentum_coefficients(n, beta), n)
    eta = np.asarray(learning_rates, dtype=np.float64)
    if eta.shape != (n,) or not np.all(np.isfinite(eta)):
        raise ConfigError(f"`learning_rates` must be {n} finite numbers (one per round). Found shape {eta.shape}.")
    # A[t, s] = Σ_{τ=s}^{t} η_τ β^{τ−s} = β^{−s}·(P_t − P_{s−1}) with P_t = Σ_{τ<=t} η_τ β^τ would
    # overflow for small β; build it column by column from the recursion A[t, s] = A[t−1, s] + η_t β^{t−s}.
    lags = np.subtract.outer(np.arange(n), np.arange(n))  # t − s
    terms = np.where(lags >= 0, eta[:, None] * beta ** np.maximum(lags, 0), 0.0)  # η_t β^{t−s}
    return np.cumsum(terms, axis=0) * (lags >= 0)


def _coefficients(coefficients: Sequence[float] | np.ndarray, n: int, name: str = "coefficients") -> np.ndarray:
    c = np.asarray(coefficients, dtype=np.float64).reshape(-1)
    if c.size == 0 or not np.all(np.isfinite(c)):
        raise ConfigError(f"`{name}` must be a non-empty sequence of finite numbers. Found {coefficients!r}.")
    out = np.zeros(n)
    out[: min(n, c.size)] = c[:n]
    return out


def toeplitz_matrix(coefficients: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """The dense n × n lower-triangular Toeplitz matrix with first column ``coefficients`` (zero-padded)."""
    n = check_rounds(n)
    c = _coefficients(coefficients, n)
    lags = np.subtract.outer(np.arange(n), np.arange(n))
    return np.where(lags >= 0, c[np.clip(lags, 0, n - 1)], 0.0)


def toeplitz_multiply(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """Coefficients of T(a)·T(b) (n × n): the convolution of a and b truncated to n terms."""
    n = check_rounds(n)
    return fft_convolve(_coefficients(a, n, "a"), _coefficients(b, n, "b"), n)


def toeplitz_inverse(coefficients: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """Coefficients of T(c)⁻¹ (n × n): 1/c(x) mod x^n by forward substitution (O(n·len(c)))."""
    n = check_rounds(n)
    c = np.asarray(coefficients, dtype=np.float64).reshape(-1)[:n]
    if c.size == 0 or not np.all(np.isfinite(c)) or c[0] == 0.0:
        raise ConfigError(f"Toeplitz coefficients must be finite with a non-zero first entry. Found {coefficients!r}.")
    impulse = np.zeros(n)
    impulse[0] = 1.0
    # lfilter(b=[1], a=c) solves Σ_j c_j d_{k−j} = impulse_k: exactly the forward substitution
    return np.asarray(signal.lfilter([1.0], c, impulse), dtype=np.float64)


def toeplitz_sqrt(coefficients: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """Coefficients r of the lower-triangular Toeplitz square root: r(x)² = c(x) mod x^n (c_0 > 0)."""
    n = check_rounds(n)
    c = _coefficients(coefficients, n)
    if not c[0] > 0:
        raise ConfigError(f"the square root needs a positive first coefficient. Found {c[0]!r}.")
    r = np.zeros(n)
    r[0] = math.sqrt(c[0])
    for k in range(1, n):
        r[k] = (c[k] - float(np.dot(r[1:k], r[k - 1 : 0 : -1]))) / (2.0 * r[0])
    return r


def toeplitz_frobenius_sq(coefficients: Sequence[float] | np.ndarray, n: int) -> float:
    """‖T(c)‖_F² = Σ_k (n − k)·c_k² for the n × n lower-triangular Toeplitz T(c)."""
    n = check_rounds(n)
    c = _coefficients(coefficients, n)
    return float(np.dot(np.arange(n, 0, -1, dtype=np.float64), c * c))


def fft_convolve(a: np.ndarray, b: np.ndarray, n_out: int) -> np.ndarray:
    """(a * b)[:n_out] for 1-D float64 arrays, by a real FFT of a power-of-two length (deterministic)."""
    size = a.size + b.size - 1
    if min(a.size, b.size) <= 64:
        return np.convolve(a, b)[:n_out]
    length = 1 << (size - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(a, length) * np.fft.rfft(b, length), length)[:n_out]
    if out.size < n_out:
        out = np.concatenate([out, np.zeros(n_out - out.size)])
    return np.asarray(out, dtype=np.float64)


def is_lower_toeplitz(a: np.ndarray) -> bool:
    """Whether the square matrix ``a`` is lower-triangular Toeplitz (exactly)."""
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        return False
    return bool(np.array_equal(a, toeplitz_matrix(a[:, 0], a.shape[0]))) if a.shape[0] > 0 else False


def check_workload(workload: np.ndarray | None, n: int) -> np.ndarray | None:
    """``workload`` as an n-column float64 matrix (None stays None: the prefix workload)."""
    if workload is None:
        return None
    a = np.asarray(workload, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != n or not np.all(np.isfinite(a)):
        raise ConfigError(f"`workload` must be a finite matrix with {n} columns (one per round). Found {a.shape}.")
    return a


def prefix_rmse(strategy: Strategy, min_separation: int, max_participations: int,
                workload: np.ndarray | None = None) -> float:
    """√(‖A·W‖_F² / n) × max sensitivity: the RMSE of the n estimates of A·x at noise multiplier 1
    (the papers' RMSE, see the module), A = prefix sums when None."""
    error = strategy.workload_error(workload)
    return math.sqrt(error / strategy.n) * strategy.max_sensitivity(min_separation, max_participations)
