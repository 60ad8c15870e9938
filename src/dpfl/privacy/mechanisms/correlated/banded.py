"""Banded Toeplitz matrix factorization (DP-BandMF with a Toeplitz C) and its optimizer.

Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization: A unified approach to private
training" (arXiv 2306.08153), and McKenna 2024, "Scaling up the Banded Matrix Factorization
Mechanism for Differentially Private ML" (arXiv 2405.15913), which restricts C to banded *Toeplitz*
matrices; jax-privacy's ``matrix_factorization/toeplitz.py`` implements the same objects.

Strategy. C is the n × n lower-triangular Toeplitz matrix with the b coefficients c_0..c_{b−1}
(C[i, j] = c_{i−j} for 0 <= i − j < b, else 0: b bands). Its inverse is lower-triangular Toeplitz
with the coefficients d of 1/c(x) mod x^n (:func:`.workload.toeplitz_inverse`).

Stream (2306.08153 Algorithm 9, jax-privacy's ``inverse_as_streaming_matrix``): w = C⁻¹z by forward
substitution, w_t = (z_t − Σ_{j=1}^{b−1} c_j w_{t−j}) / c_0 — the last b − 1 outputs are the state
(b − 1 vectors, kept in a ring buffer, a copy of each output). Round t draws one
``torch.randn(num_params)`` from its generator.

Gram and sensitivity. For s <= t, Δ = t − s:

    G_st = ⟨C[:, s], C[:, t]⟩ = Σ_{j=0}^{min(b−1−Δ, n−1−t)} c_j·c_{j+Δ}   (0 when Δ >= b)        (1)

(rows t + j, j >= 0, where both columns are non-zero and inside the matrix); the column norms²
ν_t = G_tt = Σ_{j<min(b, n−t)} c_j² are non-increasing in t. :meth:`BandedToeplitzStrategy.max_sensitivity`
under (k, b_sep)-min-separation (:mod:`.common`):

* b <= b_sep: participations' columns have disjoint supports (they are >= b apart), so
  sensitivity² = max Σ_i ν_{s_i}; ν is non-increasing, so the earliest pattern 0, b_sep, 2·b_sep, …
  (k' = min(k, ⌈n/b_sep⌉) of them) attains it (2306.08153's banded sensitivity, jax-privacy's
  ``get_sensitivity_banded``): exact;
* b > b_sep with coefficients of one sign and |c| non-increasing: (1) is then >= 0 (so more
  participations never lower the sum) and non-increasing in Δ and in t; the earliest pattern
  s'_i = i·b_sep has s'_i <= s_i and gaps s'_j − s'_i <= s_j − s_i against any pattern s, hence
  G_{s'_i s'_j} >= G_{s_i s_j} term by term: it is the worst, sensitivity² = ‖Σ_{i<k'} C[:, i·b_sep]‖²
  (arXiv 2405.13763, Theorem 2, as cited by jax-privacy's ``minsep_sensitivity_squared``): exact;
* otherwise an upper bound, the smaller of two: the previous formula on the non-increasing majorant
  m_j = max_{i>=j} |c_i| (entrywise |G| <= G(m); jax-privacy's ``compute_banded_inverse_sensitivity``)
  and the tightened Algorithm 4 of :mod:`.common` on the banded |G|.
  :meth:`BandedToeplitzStrategy.max_sensitivity_is_exact` says which case applies.

Error. ‖A·C⁻¹‖_F² for a Toeplitz workload with coefficients a is Σ_k (n − k)·e_k² with
e = (a * d)[:n] (:mod:`.workload`; jax-privacy's ``per_query_error`` summed): O(n log n).

Optimizer (:func:`optimize_banded_toeplitz`). The papers' objective for b <= b_sep is
sensitivity² × E, E = ‖A·C⁻¹‖_F², with k = ⌈n/b_sep⌉ participations (or fewer if asked); here
sensitivity² = Σ_j ω_j c_j², ω_j = #{i < k : j < n − i·b_sep} = min(k, ⌈(n − j)/b_sep⌉) (the first
case above written per coefficient; ω_j = k when every column of the pattern is whole, e.g.
n = 2,000, b_sep = 100), and

    ∂E/∂c_j = −Σ_{m>=j} g_m·q_{m−j},  q = (d * d)[:n],  g_p = Σ_{m>=p} 2(n − m)·e_m·a_{m−p}        (2)

(from ∂d(x)/∂c_j = −x^j·d(x)², since c(x)·d(x) = 1). Both correlations are FFTs, so one
evaluation is O(n log n + n·b). The loss is scale-invariant, so c_0 is fixed to 1 and the b − 1
others are optimized by L-BFGS on log(sensitivity²) + log(E), from the first b coefficients of the
workload's Toeplitz square root (for prefix sums (1 − x)^{−1/2}: Fichtenberger et al., arXiv
2202.11205, optimal for max error under single participation when b = n; also jax-privacy's
start); the result is returned with ‖c‖ = 1. Measured on one core: 12–16 L-BFGS iterations,
0.01–0.03 s at n = 2,000, b = 100 and 0.03–0.07 s at n = 2,052, b = 342
(``benchmarks/correlated_optimize.py``); other starts (zeros, 0.1s) reach the same loss. jax-privacy's
``optimize_banded_toeplitz`` minimizes mean error × ‖c‖² (single participation): the same
minimizer whenever ω is constant (every pattern column whole). Deterministic: fixed start, numpy
FFTs and scipy's L-BFGS-B, no randomness.

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (where its normals are drawn).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from scipy import optimize

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import NoiseStream, Strategy
from dpfl.privacy.mechanisms.correlated.common import (
    check_generator,
    check_num_params,
    check_round,
    check_schema,
    minsep_upper_bound_sq,
    participations_that_fit,
)
from dpfl.privacy.mechanisms.correlated.workload import (
    check_rounds,
    check_workload,
    fft_convolve,
    is_lower_toeplitz,
    momentum_coefficients,
    toeplitz_inverse,
    toeplitz_matrix,
    toeplitz_sqrt,
)
from dpfl.privacy.mechanisms.draw import randn
from dpfl.rng import NoiseGenerator

__all__ = ["BandedToeplitzStrategy", "banded_toeplitz_loss", "optimize_banded_toeplitz", "workload_coefficients"]

WorkloadSpec = str | tuple[str, float] | Sequence[float] | np.ndarray


class _BandedStream(NoiseStream):
    def __init__(self, coefficients: np.ndarray, n: int, num_params: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self._n = n
        self.num_params = num_params
        self._dtype = dtype
        self._device = device
        self._bands = coefficients.size
        self._c0 = float(coefficients[0])
        self._lags = torch.tensor(coefficients[1:], dtype=dtype, device=device)  # c_1..c_{b−1}
        # ring buffer: slot t mod (b − 1) holds w_t until round t + b − 1 overwrites it
        self._buffer = torch.zeros((self._bands - 1, num_params), dtype=dtype, device=device)
        self.next_round = 0

    def next(self, round_idx: int, generator: NoiseGenerator) -> torch.Tensor:
        t = check_round(self.next_round, round_idx, self._n)
        check_generator(generator, self._device)
        z = randn(self.num_params, generator, dtype=self._dtype, device=self._device)
        memory = self._bands - 1
        if memory == 0:
            w = z / self._c0
        else:
            # slot p holds w_{t − j} with j = ((t − p − 1) mod (b − 1)) + 1 (zeros before round 0)
            slots = torch.arange(memory, device=self._device)
            lag = torch.remainder(t - slots - 1, memory) + 1
            w = (z - self._lags[lag - 1] @ self._buffer) / self._c0
            self._buffer[t % memory].copy_(w)
        self.next_round += 1
        return w

    @property
    def memory_vectors(self) -> int:
        return self._bands - 1


class BandedToeplitzStrategy(Strategy):
    """Lower-triangular banded Toeplitz C over ``n`` rounds with ``coefficients`` c_0..c_{b−1} (kind ``"banded"``)."""

    kind: ClassVar[str] = "banded"

    def __init__(self, n: int, coefficients: Sequence[float] | np.ndarray) -> None:
        self.n = check_rounds(n)
        try:
            c = np.array(coefficients, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"`coefficients` must be a sequence of numbers. Found {coefficients!r}.") from exc
        if c.size == 0 or c.size > self.n:
            raise ConfigError(f"`coefficients` must have 1..n = {self.n} entries (the bands). Found {c.size}.")
        if not np.all(np.isfinite(c)) or c[0] == 0.0:
            raise ConfigError(f"`coefficients` must be finite with c_0 != 0. Found {c.tolist()!r}.")
        self._c = c
        self._c.setflags(write=False)
        self._inverse: np.ndarray | None = None
        self._norms = np.cumsum(c * c)  # ν for a column with j + 1 rows left: _norms[j]

    def __repr__(self) -> str:
        return f"BandedToeplitzStrategy(n={self.n}, bands={self.bands})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, BandedToeplitzStrategy) and other.n == self.n
                and np.array_equal(other._c, self._c))

    def __hash__(self) -> int:
        return hash((self.kind, self.n, self._c.tobytes()))

    @property
    def bands(self) -> int:
        """b, the number of non-zero diagonals of C (main one included)."""
        return int(self._c.size)

    @property
    def coefficients(self) -> np.ndarray:
        """c_0..c_{b−1} (a read-only float64 array)."""
        return self._c

    def inverse_coefficients(self) -> np.ndarray:
        """d_0..d_{n−1}: the first column of C⁻¹ (= W)."""
        if self._inverse is None:
            self._inverse = toeplitz_inverse(self._c, self.n)
            self._inverse.setflags(write=False)
        return self._inverse

    def column_norm_sq(self, t: int) -> float:
        """ν_t = G_tt = Σ_{j<min(b, n−t)} c_j²."""
        if not 0 <= t < self.n:
            raise ConfigError(f"rounds must be in 0..{self.n - 1}. Found {t!r}.")
        return float(self._norms[min(self.bands, self.n - t) - 1])

    def column_inner(self, s: int, t: int) -> float:
        if not (0 <= s < self.n and 0 <= t < self.n):
            raise ConfigError(f"rounds must be in 0..{self.n - 1}. Found ({s!r}, {t!r}).")
        s, t = min(s, t), max(s, t)
        lag = t - s
        if lag >= self.bands:
            return 0.0
        last = min(self.bands - 1 - lag, self.n - 1 - t)  # eq. (1)
        return float(np.dot(self._c[: last + 1], self._c[lag: lag + last + 1]))

    # ----------------------------------------------------------------- sensitivity

    def _earliest_pattern_sq(self, coefficients: np.ndarray, b: int, k: int) -> float:
        """‖Σ_{i<k} T(coefficients)[:, i·b]‖² (the earliest pattern, columns summed)."""
        total = np.zeros(self.n)
        for i in range(k):
            start = i * b
            stop = min(self.n, start + coefficients.size)
            total[start:stop] += coefficients[: stop - start]
        return float(np.dot(total, total))

    def _monotone(self) -> bool:
        c = self._c
        same_sign = bool(np.all(c >= 0) or np.all(c <= 0))
        magnitude = np.abs(c)
        return same_sign and bool(np.all(magnitude[1:] <= magnitude[:-1]))

    def max_sensitivity_is_exact(self, min_separation: int, max_participations: int) -> bool:
        """Whether :meth:`max_sensitivity` is exact (else the module's upper bound)."""
        b, k = check_schema(min_separation, max_participations, self.n)
        return self.bands <= b or k == 1 or self._monotone()

    def max_sensitivity(self, min_separation: int, max_participations: int) -> float:
        b, k = check_schema(min_separation, max_participations, self.n)
        if self.bands <= b or k == 1:
            # orthogonal participations; ν non-increasing: the earliest pattern is the worst
            return math.sqrt(sum(self.column_norm_sq(i * b) for i in range(k)))
        if self._monotone():
            return math.sqrt(self._earliest_pattern_sq(np.abs(self._c), b, k))
        majorant = np.flip(np.maximum.accumulate(np.flip(np.abs(self._c))))
        bound = min(self._earliest_pattern_sq(majorant, b, k),
                    minsep_upper_bound_sq(self._abs_gram_rows, self.n, self.bands - 1, b, k))
        return math.sqrt(bound)

    def _abs_gram_rows(self, i0: int, i1: int) -> np.ndarray:
        """|G| rows i0..i1−1 as windows of half-width b − 1 (common's format), from eq. (1)."""
        b, n, c = self.bands, self.n, self._c
        # prods[Δ, m] = Σ_{j<=m} c_j c_{j+Δ} (m <= b − 1 − Δ)
        prods = np.zeros((b, b))
        for lag in range(b):
            prods[lag, : b - lag] = np.cumsum(c[: b - lag] * c[lag:])
        rows = np.arange(i0, i1)[:, None]
        offsets = np.arange(-(b - 1), b)[None, :]
        cols = rows + offsets
        lags = np.abs(offsets)
        later = np.maximum(rows, cols)
        last = np.minimum(b - 1 - lags, n - 1 - later)
        valid = (cols >= 0) & (cols < n) & (last >= 0)
        values = prods[np.broadcast_to(lags, last.shape), np.clip(last, 0, b - 1)]
        return np.where(valid, np.abs(values), 0.0)

    # ----------------------------------------------------------------- matrices, error

    def encoder_matrix(self) -> np.ndarray:
        return toeplitz_matrix(self._c, self.n)

    def noise_matrix(self) -> np.ndarray:
        return toeplitz_matrix(self.inverse_coefficients(), self.n)

    def workload_error(self, workload: np.ndarray | None = None) -> float:
        a = check_workload(workload, self.n)
        d = self.inverse_coefficients()
        if a is None:
            return _toeplitz_error(np.ones(self.n), d)
        if a.shape[0] == self.n and is_lower_toeplitz(a):
            return _toeplitz_error(a[:, 0].copy(), d)
        aw = a @ toeplitz_matrix(d, self.n)
        return float(np.sum(aw * aw))

    # ----------------------------------------------------------------- stream, JSON

    def noise_stream(self, num_params: int, *, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> NoiseStream:
        return _BandedStream(self._c, self.n, check_num_params(num_params), dtype, torch.device(device))

    @property
    def memory_vectors(self) -> int:
        return self.bands - 1

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "coefficients": [float(x) for x in self._c]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BandedToeplitzStrategy:
        if data.get("kind") != cls.kind:
            raise ConfigError(f"not a banded strategy: kind {data.get('kind')!r}.")
        return cls(data.get("n"), data.get("coefficients"))  # type: ignore[arg-type]


def _toeplitz_error(a: np.ndarray, d: np.ndarray) -> float:
    """‖T(a)·T(d)‖_F² = Σ_k (n − k)·e_k², e = (a * d)[:n]."""
    n = d.size
    e = np.cumsum(d) if np.all(a == 1.0) else fft_convolve(a, d, n)
    return float(np.dot(np.arange(n, 0, -1, dtype=np.float64), e * e))


def workload_coefficients(n: int, workload: WorkloadSpec) -> np.ndarray:
    """The Toeplitz coefficients a_0..a_{n−1} of ``workload``: ``"prefix"`` (ones), ``("momentum", β)``
    (:func:`.workload.momentum_coefficients`) or the coefficients themselves (zero-padded to n)."""
    n = check_rounds(n)
    wrong = f"`workload` must be 'prefix', ('momentum', beta) or Toeplitz coefficients. Found {workload!r}."
    if isinstance(workload, str):
        if workload != "prefix":
            raise ConfigError(wrong)
        return np.ones(n)
    if isinstance(workload, tuple) and len(workload) == 2 and isinstance(workload[0], str):
        if workload[0] != "momentum":
            raise ConfigError(wrong)
        return momentum_coefficients(n, workload[1])
    a = np.asarray(workload, dtype=np.float64).reshape(-1)
    if a.size == 0 or a.size > n or not np.all(np.isfinite(a)) or not a[0] > 0:
        raise ConfigError(f"Toeplitz workload coefficients must be 1..{n} finite numbers with a_0 > 0. Found {a.size}.")
    out = np.zeros(n)
    out[: a.size] = a
    return out


def _sensitivity_weights(n: int, bands: int, min_separation: int, participations: int) -> np.ndarray:
    """ω_j = min(k, ⌈(n − j)/b_sep⌉), j < bands: sensitivity² = Σ_j ω_j c_j² (module docstring)."""
    j = np.arange(bands)
    return np.minimum(participations, -(-(n - j) // min_separation)).astype(np.float64)


def _objective(theta: np.ndarray, n: int, a: np.ndarray, weights: np.ndarray,
               prefix: bool) -> tuple[float, np.ndarray]:
    """log(Σ ω_j c_j²) + log(Σ (n − k) e_k²) and its gradient in c_1..c_{b−1} (c_0 = 1), eq. (2)."""
    c = np.concatenate([[1.0], theta])
    d = toeplitz_inverse(c, n)
    e = np.cumsum(d) if prefix else fft_convolve(a, d, n)
    rows = np.arange(n, 0, -1, dtype=np.float64)
    error = float(np.dot(rows, e * e))
    sens = float(np.dot(weights, c * c))
    u = 2.0 * rows * e
    g = np.cumsum(u[::-1])[::-1] if prefix else fft_convolve(u[::-1], a, n)[::-1]
    q = fft_convolve(d, d, n)
    h = fft_convolve(g[::-1], q, n)
    grad_error = -h[::-1][: c.size]  # ∂E/∂c_j = −Σ_{m>=j} g_m q_{m−j}
    grad = 2.0 * weights * c / sens + grad_error / error
    return math.log(sens) + math.log(error), grad[1:]


def banded_toeplitz_loss(coefficients: Sequence[float] | np.ndarray, n: int, *, min_separation: int | None = None,
                         max_participations: int | None = None, workload: WorkloadSpec = "prefix") -> float:
    """The optimizer's objective, sensitivity² × ‖A·C⁻¹‖_F², for b <= b_sep (as
    :func:`optimize_banded_toeplitz`'s arguments; k defaults to ⌈n/b_sep⌉)."""
    c = np.asarray(coefficients, dtype=np.float64).reshape(-1)
    n, bands, b_sep, k = _setting(n, c.size, min_separation, max_participations)
    a = workload_coefficients(n, workload)
    if c[0] == 0 or not np.all(np.isfinite(c)):
        raise ConfigError(f"`coefficients` must be finite with c_0 != 0. Found {c.tolist()!r}.")
    value, _ = _objective(c[1:] / c[0], n, a, _sensitivity_weights(n, bands, b_sep, k), bool(np.all(a == 1.0)))
    return math.exp(value)


def _setting(n: int, bands: int, min_separation: int | None,
             max_participations: int | None) -> tuple[int, int, int, int]:
    n = check_rounds(n)
    bands = check_rounds(bands, "bands")
    if bands > n:
        raise ConfigError(f"`bands` must be <= n = {n}. Found {bands}.")
    b_sep = bands if min_separation is None else min_separation
    k_in = participations_that_fit(n, check_rounds(b_sep, "min_separation")) if max_participations is None \
        else max_participations
    b_sep, k = check_schema(b_sep, k_in, n)
    if bands > b_sep:
        raise ConfigError(f"the banded optimizer needs bands <= min_separation (orthogonal participations). "
                          f"Found bands {bands} > min_separation {b_sep}.")
    return n, bands, b_sep, k


def optimize_banded_toeplitz(
    n: int,
    bands: int,
    *,
    min_separation: int | None = None,
    max_participations: int | None = None,
    workload: WorkloadSpec = "prefix",
    max_iterations: int = 3000,
    gradient_tolerance: float = 1e-10,
) -> BandedToeplitzStrategy:
    """The banded Toeplitz C (``bands`` coefficients, ‖c‖ = 1) minimizing sensitivity² × ‖A·C⁻¹‖_F².

    Args:
        n: rounds.
        bands: b, the number of coefficients (memory b − 1 vectors); b <= ``min_separation``.
        min_separation: b_sep of the schema (default ``bands``).
        max_participations: k (default ⌈n/b_sep⌉, also its cap).
        workload: ``"prefix"``, ``("momentum", β)`` or a Toeplitz workload's coefficients.
        max_iterations: L-BFGS iterations at most.
        gradient_tolerance: stop when every gradient entry of the log-loss is below this.

    Returns:
        The optimized :class:`BandedToeplitzStrategy` (deterministic: same inputs, same bits).
    """
    n, bands, b_sep, k = _setting(n, bands, min_separation, max_participations)
    a = workload_coefficients(n, workload)
    start = toeplitz_sqrt(a, bands)
    start = start / start[0]
    if bands == 1:
        return BandedToeplitzStrategy(n, [1.0])
    weights = _sensitivity_weights(n, bands, b_sep, k)
    prefix = bool(np.all(a == 1.0))
    result = optimize.minimize(
        _objective, start[1:], args=(n, a, weights, prefix), jac=True, method="L-BFGS-B",
        options={"maxiter": int(max_iterations), "maxcor": 30, "gtol": float(gradient_tolerance), "ftol": 1e-15,
                 "maxls": 50},
    )
    c = np.concatenate([[1.0], np.asarray(result.x, dtype=np.float64)])
    if not np.all(np.isfinite(c)) or result.fun > _objective(start[1:], n, a, weights, prefix)[0]:
        c = start  # never worse than the start (cannot happen for a descent method; a guard)
    return BandedToeplitzStrategy(n, c / np.linalg.norm(c))
