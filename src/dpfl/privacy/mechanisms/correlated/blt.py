"""Buffered linear Toeplitz (BLT) factorizations: closed forms, the d-buffer noise stream, the optimizer.

References (lemma and algorithm numbers as jax-privacy's ``buffered_toeplitz.py`` / ``toeplitz.py``
cite them; every formula below is also derived here, so each can be checked on its own):

* [DMPST24] Dvijotham, McMahan, Pillutla, Steinke, Thakurta, "Efficient and near-optimal noise
  generation for streaming differential privacy", arXiv 2404.16706 — the BLT family, its
  streaming multiplication, the inverse of a BLT (Lemma 5.2, Prop. 5.6: the reciprocal of a
  rational generating function) and Opt-BLT (optimizing the parameters by gradient descent).
* [MXZ24] McMahan, Xu, Zhang, "A hassle-free algorithm for private learning in practice: don't use
  tree aggregation, use BLTs", arXiv 2408.08868 — Alg. 2 (C·x) and Alg. 3 (C⁻¹·z) with d buffers;
  the multi-participation loss sens² × ‖A C⁻¹‖_F².
* [MP25] McMahan, Pillutla, "An inversion theorem for BLT matrices", arXiv 2504.21413 — eq. (1)
  (the definition below), Thm. 1 (the inverse of a degree-d BLT is a degree-d BLT; under
  θ ∈ (0,1), ω > 0, Σ ω/θ < 1 its decays are in (0,1) and its scales negative; a BLT and its
  inverse are equally described by the pair of decay vectors).
* [KL24] Kalinin, Lampert, "Banded square root matrix factorization", arXiv 2405.13763, Thm. 2 —
  the min-separation sensitivity of a Toeplitz C with non-negative non-increasing coefficients
  (the formula jax-privacy's ``toeplitz.minsep_sensitivity_squared`` computes).

Definition ([MP25] eq. 1; [DMPST24]). With buffer decays θ ∈ (0,1)^d (distinct) and output
scales ω ∈ (ℝ∖{0})^d, C = BLT(θ, ω) is the n × n lower-triangular Toeplitz matrix with

    c_0 = 1,   c_j = Σ_i ω_i θ_i^{j−1}  (j >= 1),                                  (B1)

i.e. the generating function C(x) = 1 + Σ_i ω_i x / (1 − θ_i x); with λ = 1/x,
C = 1 + Σ_i ω_i / (λ − θ_i) = Π_i (λ − θ̂_i) / Π_i (λ − θ_i).                         (B2)

Inverse ([DMPST24] Lemma 5.2 / Prop. 5.6, [MP25] Thm. 1). W = C⁻¹ is BLT(θ̂, ω̂): θ̂ are the zeros
of (B2), the d roots of the secular equation Σ_k ω_k / (θ_k − λ) = 1, and ω̂ the residues of 1/C:

    ω̂_i = 1 / C'(θ̂_i) = −1 / Σ_k ω_k / (θ̂_i − θ_k)².                                  (B3)

For ω > 0 the secular function increases between consecutive poles, so there is exactly one root
below θ_(1) and one in each gap (θ_(i−1), θ_(i)): the decays interlace, θ̂_(1) < θ_(1) < θ̂_(2) < …,
every ω̂_i < 0, and θ̂_(1) > 0 iff the "Pillutla score" Σ ω_i/θ_i < 1 ([MP25] Thm. 1a). They are
found here by bisection on each bracket (exact to the last bit); for other signs of ω by the
eigenvalues of diag(θ) − 1ωᵀ (the state matrix of Alg. 3 below), which must then be real,
distinct and inside (−1, 1) (else the noise would grow without bound: :class:`ConfigError`).
Conversely, an interlaced pair 0 < θ̂_1 < θ_1 < … < θ̂_d < θ_d < 1 defines, by (B2)'s residues,

    ω_i = Π_j (θ_i − θ̂_j) / Π_{j≠i} (θ_i − θ_j) > 0,   ω̂_i = Π_j (θ̂_i − θ_j) / Π_{j≠i} (θ̂_i − θ̂_j) < 0,   (B4)

with Σ ω_i = Σ θ_i − Σ θ̂_i < 1 and 1 − Σ ω_i/θ_i = Π θ̂ / Π θ > 0: exactly the class of [MP25]
Thm. 1a, in which C's coefficients are positive and non-increasing. :func:`optimize_blt`
optimizes over this pair of decay vectors (the "buf_decay_pair" parameterization of [MP25]).

Noise stream ([MXZ24] Alg. 3). w = C⁻¹ z streamed with d buffers S_i (vectors of |θ|):

    w_t = z_t − Σ_i ω_i S_i,   then  S_i ← θ_i S_i + w_t                                (B5)

(S_i = Σ_{s<t} θ_i^{t−1−s} w_s, so z_t = w_t + Σ_{s<t} c_{t−s} w_s: row t of C·w = z).

Gram entries (closed form, O(d²)). For s <= t, Δ = t − s and L = n − t rows below both:

    G_st = Σ_{m=0}^{L−1} c_{m+Δ} c_m = c_Δ + Σ_{p,q} ω_p ω_q θ_p^Δ · geo(θ_p θ_q, L − 1),   (B6)

geo(q, N) = Σ_{m<N} q^m = (1 − q^N)/(1 − q) (evaluated as −expm1(N log q)/(1 − q), with
1 − θ_pθ_q = (1 − θ_p) + θ_p(1 − θ_q) so that decays near 1 lose no digits).

Min-separation sensitivity. A client takes part at most k times, consecutive rounds at least b
apart; its squared sensitivity is at most Σ_{i,j} |G_{s_i s_j}| (see base.py). If the coefficients
c_0, …, c_{n−1} are non-negative and non-increasing ([KL24] Thm. 2), the maximum over patterns is
attained at 0, b, 2b, …, (k'−1)b with k' = min(k, ⌈n/b⌉), and is exact: G >= 0, moving every
participation from some point on one round earlier never lowers any Gram entry (each gains a row,
and c_{m+Δ−1} >= c_{m+Δ}), and adding a participation adds non-negative terms. Summing (B6) over
that pattern in closed form (the inner sums over i < j are geometric in θ_p^b):

    sens² = Σ_{j<k'} [ 1 + Σ_{p,q} ω_p ω_q geo(θ_pθ_q, n − jb − 1) (1 + 2 θ_p^b geo(θ_p^b, j))
                       + 2 Σ_p ω_p θ_p^{b−1} geo(θ_p^b, j) ],                          (B7)

O(k'·d²). When the coefficients are not non-negative and non-increasing (possible only for a BLT
with some ω_i < 0, or Σ ω_i >= 1), :meth:`BltStrategy.max_sensitivity` returns an upper bound, never
an under-estimate: it replaces c by its smallest non-negative non-increasing majorant
c̃_j = max_{j<=m<n} |c_m| (so |G_st| <= G̃_st entrywise; c̃ = c when c is already non-negative and
non-increasing) and returns the exact maximum for c̃, its 0, b, …, (k'−1)b pattern's
‖Σ_{i<k'} C̃[:, ib]‖₂ (O(n)). :attr:`BltStrategy.sensitivity_is_exact` says which applies.

Workload error ([MXZ24], [DMPST24] Opt-BLT). For a lower-triangular Toeplitz workload A with
coefficients a_j, A·W is lower-triangular Toeplitz with e = a * ĉ (the first n terms of the
convolution) and ‖A W‖_F² = Σ_{j<n} (n − j) e_j². For prefix sums (a_j = 1), e_j = Σ_{m<=j} ĉ_m:

    e_j = W(1) + Σ_i (−ω̂_i)/(1 − θ̂_i) · θ̂_i^j,   W(1) = Π (1 − θ_i) / Π (1 − θ̂_i),           (B8)

a sum of positive terms in the regular class (no cancellation; O(n·d)). ("momentum", β) is the
server's SGD-with-momentum map from the rounds' sums to the parameters (Denisov et al. 2022,
arXiv 2202.08312): A[t, s] = Σ_{τ=s}^{t} β^{τ−s}, i.e. a_j = Σ_{r<=j} β^r = (1 − β^{j+1})/(1 − β),
evaluated by FFT convolution. :func:`optimize_blt` minimizes max_sensitivity(b, k)² × ‖A C⁻¹‖_F²
([MXZ24]'s loss).

Optimum. Over the regular class the optimum often has fewer than d effective buffers (pairs with
θ_i ≈ θ̂_j, ω_i ≈ 0 cancel in (B2)): :func:`optimize_blt` then drops them and returns a BLT with
fewer buffers. For some settings (small n, momentum workloads) it lies on the class's boundary
Σ ω/θ → 1 (θ̂_(1) → 0), as the constraint of [MP25] Thm. 1a (which jax-privacy's optimizer also
imposes) binds.

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (where its normals are drawn) (and its sibling base.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import NoiseStream, Strategy
from dpfl.privacy.mechanisms.draw import check_noise_generator, randn
from dpfl.rng import NoiseGenerator

__all__ = [
    "BltNoiseStream",
    "BltStrategy",
    "WorkloadSpec",
    "blt_loss",
    "initial_blts",
    "max_participations",
    "optimize_blt",
]

WorkloadSpec = str | tuple[str, float]  # "prefix" or ("momentum", β); a JSON list ["momentum", β] works too

_MAX_BUFFERS = 16
_INVERSE_CHECK_RTOL = 1e-8
_PRUNE_RTOL = 1e-8  # log-loss slack for dropping a cancelling buffer pair (relative loss 1e-8) ...
_PRUNE_TRY = 1e-3  # ... and for trying it (before the other buffers are re-optimized)


# ---------------------------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------------------------


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"`{name}` must be an integer >= {minimum}. Found {value!r}.")
    if int(value) < minimum:
        raise ConfigError(f"`{name}` must be >= {minimum}. Found {value!r}.")
    return int(value)


def _float_tuple(name: str, values: object) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise ConfigError(f"`{name}` must be a sequence of floats. Found {values!r}.")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise ConfigError(f"`{name}` must contain only floats. Found {v!r} in {values!r}.")
        f = float(v)
        if not math.isfinite(f):
            raise ConfigError(f"`{name}` must contain only finite floats. Found {v!r} in {values!r}.")
        out.append(f)
    return tuple(out)


def max_participations(n: int, min_separation: int) -> int:
    """⌈n/b⌉: the most rounds out of n that a client can take part in, b = ``min_separation`` apart."""
    n = _int("n", n, 1)
    b = _int("min_separation", min_separation, 1)
    return -(-n // b)


def _effective_k(n: int, b: int, k: int | None) -> int:
    kmax = max_participations(n, b)
    return kmax if k is None else min(_int("max_participations", k, 1), kmax)


def _workload_coefficients(workload: WorkloadSpec, n: int) -> np.ndarray | None:
    """The Toeplitz coefficients a_0..a_{n−1} of a named workload; None for prefix sums."""
    if isinstance(workload, str):
        if workload == "prefix":
            return None
        raise ConfigError(f"unknown workload {workload!r}; valid: 'prefix' or ('momentum', beta).")
    if isinstance(workload, (tuple, list)) and len(workload) == 2 and workload[0] == "momentum":
        beta = workload[1]
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= float(beta) < 1.0:
            raise ConfigError(f"the momentum workload's beta must be a float in [0, 1). Found {beta!r}.")
        j = np.arange(1, n + 1, dtype=np.float64)
        beta = float(beta)
        # a_j = Σ_{r<=j} β^r = (1 − β^{j+1})/(1 − β)
        return np.ones(n) if beta == 0.0 else -np.expm1(j * math.log(beta)) / (1.0 - beta)
    raise ConfigError(f"unknown workload {workload!r}; valid: 'prefix' or ('momentum', beta).")


# ---------------------------------------------------------------------------------------------
# closed forms shared by the strategy (float64, no gradient) and the optimizer (autograd)
# ---------------------------------------------------------------------------------------------


def _geo(one_minus_q: torch.Tensor, log_q: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """geo(q, N) = Σ_{m<N} q^m = (1 − q^N)/(1 − q), q in (0, 1), N >= 0 (broadcasting)."""
    return -torch.expm1(count * log_q) / one_minus_q


def _minsep_sens2(theta: torch.Tensor, omt: torch.Tensor, omega: torch.Tensor, n: int, b: int,
                  k: int) -> torch.Tensor:
    """(B7): Σ_{i,j<k} G_{ib, jb} for BLT(θ, ω) (θ in (0,1), omt = 1 − θ), k <= ⌈n/b⌉."""
    j = torch.arange(k, dtype=torch.float64)
    log_t = torch.log1p(-omt)
    omt_pq = omt[:, None] + theta[:, None] * omt[None, :]  # 1 − θ_p θ_q
    log_pq = log_t[:, None] + log_t[None, :]
    rows = (n - 1 - j * b)[:, None, None]  # n − jb − 1 >= 0
    geo_pq = _geo(omt_pq[None], log_pq[None], rows)  # [k, d, d]
    log_tb = b * log_t
    geo_b = _geo(-torch.expm1(log_tb)[None], log_tb[None], j[:, None])  # geo(θ_p^b, j): [k, d]
    factor = 1.0 + 2.0 * torch.exp(log_tb)[None] * geo_b  # [k, d] (index p)
    ww = omega[:, None] * omega[None, :]
    quad = (ww[None] * geo_pq * factor[:, :, None]).sum()
    lin = 2.0 * (omega * torch.exp((b - 1) * log_t) * geo_b).sum()
    return k + quad + lin


def _inverse_coefficients_t(theta_hat: torch.Tensor, omega_hat: torch.Tensor, n: int) -> torch.Tensor:
    """ĉ_0..ĉ_{n−1} of BLT(θ̂, ω̂) (θ̂ in (0,1))."""
    m = torch.arange(n - 1, dtype=torch.float64)
    powers = torch.exp(m[:, None] * torch.log(theta_hat)[None, :])  # θ̂^(j−1), j = 1..n−1
    return torch.cat([torch.ones(1, dtype=torch.float64), (powers * omega_hat).sum(1)])  # no BLAS: see optimize_blt


def _fft_lower_toeplitz_product(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The first n terms of the convolution a * c (both of length n)."""
    n = a.shape[0]
    size = 1 << max(1, (2 * n - 1).bit_length())
    return torch.fft.irfft(torch.fft.rfft(a, size) * torch.fft.rfft(c, size), size)[:n]


def _error_from_coefficients(e: torch.Tensor) -> torch.Tensor:
    n = e.shape[0]
    weights = torch.arange(n, 0, -1, dtype=torch.float64)  # n − j
    return (weights * e * e).sum()


def _prefix_error_t(omt: torch.Tensor, omt_hat: torch.Tensor, omega_hat: torch.Tensor, n: int) -> torch.Tensor:
    """(B8): ‖A W‖_F² for prefix sums, W = BLT(θ̂, ω̂) = BLT(θ, ω)⁻¹."""
    j = torch.arange(n, dtype=torch.float64)
    powers = torch.exp(j[:, None] * torch.log1p(-omt_hat)[None, :])  # θ̂^j
    w1 = torch.prod(omt) / torch.prod(omt_hat)
    e = w1 + (powers * (-omega_hat / omt_hat)).sum(1)
    return _error_from_coefficients(e)


# ---------------------------------------------------------------------------------------------
# the inverse's parameters
# ---------------------------------------------------------------------------------------------


def _bisect_secular(ts: np.ndarray, ws: np.ndarray, lo: float, hi: float) -> float:
    """The root of Σ_k ws_k/(ts_k − λ) = 1 in (lo, hi), where the left side increases (ω > 0)."""

    def f(lam: float) -> float:
        return float(np.sum(ws / (ts - lam))) - 1.0

    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if f(mid) < 0.0:
            lo = mid
        else:
            hi = mid
    # the two neighbouring floats bracket the root; keep the one with the smaller residual
    return lo if abs(f(lo)) <= abs(f(hi)) else hi


def _inverse_parameters(theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(θ̂, ω̂) of BLT(θ, ω)⁻¹ ([DMPST24] Lemma 5.2, [MP25] Thm. 1; module docstring (B2)–(B3))."""
    d = theta.shape[0]
    if np.all(omega > 0):
        order = np.argsort(theta)
        ts, ws = theta[order], omega[order]
        brackets = [(float(ts[0]) - float(ws.sum()) - 1.0, float(ts[0]))]
        brackets += [(float(ts[i - 1]), float(ts[i])) for i in range(1, d)]
        theta_hat = np.array([_bisect_secular(ts, ws, lo, hi) for lo, hi in brackets])
    else:
        eig = np.linalg.eigvals(np.diag(theta) - np.outer(np.ones(d), omega))
        if np.max(np.abs(eig.imag)) > 1e-12 * max(1.0, float(np.max(np.abs(eig)))):
            raise ConfigError(
                f"the inverse of BLT(buffer_decays={tuple(theta.tolist())}, output_scales="
                f"{tuple(omega.tolist())}) is not a real BLT (complex decays {eig.tolist()}): "
                "choose output_scales > 0."
            )
        theta_hat = np.sort(eig.real)
    gaps = np.abs(theta_hat[:, None] - np.concatenate([theta_hat, theta])[None, :])
    gaps[np.arange(d), np.arange(d)] = np.inf
    if d and float(gaps.min()) < 1e-12:
        raise ConfigError(
            f"the inverse of BLT(buffer_decays={tuple(theta.tolist())}, output_scales="
            f"{tuple(omega.tolist())}) has (nearly) repeated decays {theta_hat.tolist()}: not a BLT of degree {d}."
        )
    omega_hat = -1.0 / np.sum(omega[None, :] / (theta_hat[:, None] - theta[None, :]) ** 2, axis=1)
    return theta_hat, omega_hat


def _coefficients_np(theta: np.ndarray, omega: np.ndarray, n: int) -> np.ndarray:
    """(B1) for j < n (θ may be negative here: the inverse's decays outside the regular class)."""
    j = np.arange(n - 1, dtype=np.float64)
    powers = np.power(theta[None, :], j[:, None]) if n > 1 else np.zeros((0, theta.shape[0]))
    return np.concatenate([[1.0], (powers * omega).sum(axis=1)])  # elementwise: no BLAS, thread-independent


def _recurrence_inverse_coefficients(theta: np.ndarray, omega: np.ndarray, count: int) -> np.ndarray:
    """ĉ_0..ĉ_{count−1} by running (B5) on the impulse z = e_0 (the check of the closed form)."""
    state = np.zeros_like(theta)
    out = np.empty(count)
    for t in range(count):
        w = (1.0 if t == 0 else 0.0) - float(np.sum(omega * state))
        state = theta * state + w
        out[t] = w
    return out


# ---------------------------------------------------------------------------------------------
# the strategy
# ---------------------------------------------------------------------------------------------


class BltStrategy(Strategy):
    """C = BLT(θ, ω) over ``n`` rounds (module docstring (B1)); noise w = C⁻¹z streamed with d buffers.

    Args:
        n: the number of rounds (>= 1).
        buffer_decays: θ, d >= 1 distinct values in (0, 1).
        output_scales: ω, d non-zero finite values. With ω > 0 the inverse is always a real BLT;
            with other signs it must be one (real, distinct decays) and its decays must lie in
            (−1, 1), else :class:`ConfigError`.

    Raises:
        ConfigError: any of the above fails (the message names the value).
    """

    kind: ClassVar[str] = "blt"

    def __init__(self, n: int, buffer_decays: Sequence[float], output_scales: Sequence[float]) -> None:
        self.n = _int("n", n, 1)
        decays = _float_tuple("buffer_decays", buffer_decays)
        scales = _float_tuple("output_scales", output_scales)
        if len(decays) != len(scales):
            raise ConfigError(
                f"`buffer_decays` and `output_scales` must have the same length. Found {len(decays)} "
                f"({decays!r}) and {len(scales)} ({scales!r})."
            )
        if not 1 <= len(decays) <= _MAX_BUFFERS:
            raise ConfigError(f"a BLT needs 1 to {_MAX_BUFFERS} buffers. Found {len(decays)} ({decays!r}).")
        bad = [t for t in decays if not 0.0 < t < 1.0]
        if bad:
            raise ConfigError(f"`buffer_decays` must lie in (0, 1). Found {bad!r} in {decays!r}.")
        if len(set(decays)) != len(decays):
            raise ConfigError(f"`buffer_decays` must be distinct. Found {decays!r}.")
        if any(w == 0.0 for w in scales):
            raise ConfigError(f"`output_scales` must be non-zero (a zero drops its buffer). Found {scales!r}.")
        self.buffer_decays: tuple[float, ...] = decays
        self.output_scales: tuple[float, ...] = scales
        self._theta = np.array(decays, dtype=np.float64)
        self._omega = np.array(scales, dtype=np.float64)
        self._omt = 1.0 - self._theta  # exact for θ >= 1/2 (Sterbenz), a few ulps relative below
        theta_hat, omega_hat = _inverse_parameters(self._theta, self._omega)
        if np.any(np.abs(theta_hat) >= 1.0):
            raise ConfigError(
                f"BLT(buffer_decays={decays!r}, output_scales={scales!r}) has an inverse with decays "
                f"{theta_hat.tolist()} outside (-1, 1): its noise would grow without bound."
            )
        # the closed form must reproduce the recurrence (B5): guards the eigenvalue path
        count = min(self.n, 64)
        ref = _recurrence_inverse_coefficients(self._theta, self._omega, count)
        got = _coefficients_np(theta_hat, omega_hat, count)
        if not np.allclose(got, ref, rtol=_INVERSE_CHECK_RTOL, atol=_INVERSE_CHECK_RTOL * float(np.abs(ref).max())):
            raise ConfigError(
                f"the inverse of BLT(buffer_decays={decays!r}, output_scales={scales!r}) is numerically "
                "ill-conditioned (its closed form disagrees with the recurrence): choose better separated decays."
            )
        self._theta_hat, self._omega_hat = theta_hat, omega_hat
        # exactness of max_sensitivity: c_0..c_{n−1} non-negative and non-increasing
        if bool(np.all(self._omega > 0)) and math.fsum(scales) < 1.0:
            self._monotone = True  # c_1 = Σω < 1 = c_0 and each c_j (j >= 1) a positive mix of decreasing powers
        else:
            c = _coefficients_np(self._theta, self._omega, self.n)
            self._monotone = bool(np.all(c >= 0.0) and np.all(np.diff(c) <= 0.0))
        self._omt_pq = self._omt[:, None] + self._theta[:, None] * self._omt[None, :]
        # log(θ_p θ_q) as a sum of logs: 1 − θ_p θ_q rounds to 1 for tiny decays (log1p(−1) = −∞
        # would make 0·log = NaN in the geometric sums of column_inner)
        log_theta = np.log1p(-self._omt)
        self._log_pq = log_theta[:, None] + log_theta[None, :]

    # -- parameters ------------------------------------------------------------------------

    @property
    def num_buffers(self) -> int:
        """d, the number of buffers."""
        return len(self.buffer_decays)

    @property
    def memory_vectors(self) -> int:
        """d: the stream's buffers S_1..S_d ((B5))."""
        return self.num_buffers

    def inverse(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(θ̂, ω̂) with C⁻¹ = BLT(θ̂, ω̂) ((B3); θ̂ ascending)."""
        return tuple(self._theta_hat.tolist()), tuple(self._omega_hat.tolist())

    @property
    def pillutla_score(self) -> float:
        """Σ ω_i/θ_i; < 1 (with ω > 0) iff the inverse's decays are all positive ([MP25] Thm. 1a)."""
        return float(np.sum(self._omega / self._theta))

    @property
    def sensitivity_is_exact(self) -> bool:
        """True when c_0..c_{n−1} are non-negative and non-increasing: :meth:`max_sensitivity` is then
        the exact maximum over patterns; otherwise it is an upper bound (module docstring)."""
        return self._monotone

    def coefficients(self) -> np.ndarray:
        """c_0..c_{n−1} ((B1)), float64."""
        return _coefficients_np(self._theta, self._omega, self.n)

    def inverse_coefficients(self) -> np.ndarray:
        """ĉ_0..ĉ_{n−1}, the Toeplitz coefficients of C⁻¹ from its closed form BLT(θ̂, ω̂)."""
        return _coefficients_np(self._theta_hat, self._omega_hat, self.n)

    # -- sensitivity -----------------------------------------------------------------------

    def _round(self, name: str, value: int) -> int:
        v = _int(name, value, 0)
        if v >= self.n:
            raise ConfigError(f"`{name}` must be a round in [0, {self.n}). Found {value!r}.")
        return v

    def column_inner(self, s: int, t: int) -> float:
        """G_st = ⟨C[:, s], C[:, t]⟩ by (B6), O(d²)."""
        s, t = self._round("s", s), self._round("t", t)
        lo, hi = min(s, t), max(s, t)
        delta, rows = hi - lo, self.n - hi
        geo = -np.expm1((rows - 1) * self._log_pq) / self._omt_pq
        lead = np.power(self._theta, delta)  # θ_p^Δ
        if delta == 0:
            c_delta = 1.0
        else:
            c_delta = float(np.sum(self._omega * np.power(self._theta, delta - 1)))
        return float(c_delta + np.sum((self._omega * lead)[:, None] * geo * self._omega[None, :]))

    def max_sensitivity(self, min_separation: int, max_participations: int) -> float:
        """The largest sqrt(Σ_{i,j}|G_{s_i s_j}|) over patterns of at most ``max_participations`` rounds
        ``min_separation`` apart: exact by (B7) when :attr:`sensitivity_is_exact`, else the upper bound
        of the module docstring (the majorant c̃). Clip norm 1."""
        b = _int("min_separation", min_separation, 1)
        k = _effective_k(self.n, b, _int("max_participations", max_participations, 1))
        if self._monotone:
            with torch.no_grad():
                s2 = _minsep_sens2(torch.from_numpy(self._theta), torch.from_numpy(self._omt),
                                   torch.from_numpy(self._omega), self.n, b, k)
            return math.sqrt(float(s2))
        c = np.abs(self.coefficients())
        c_major = np.maximum.accumulate(c[::-1])[::-1]  # max_{m >= j} |c_m|
        # v_r = Σ_{i<k, ib<=r} c̃_{r−ib}: per-residue cumulative sums, minus those past k terms (O(n))
        padded = np.zeros(-(-self.n // b) * b)
        padded[: self.n] = c_major
        sums = padded.reshape(-1, b).cumsum(axis=0).ravel()[: self.n]
        v = sums.copy()
        v[k * b:] -= sums[: max(self.n - k * b, 0)]
        return float(np.linalg.norm(v))

    # -- noise ------------------------------------------------------------------------------

    def noise_stream(self, num_params: int, *, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> BltNoiseStream:
        """A fresh stream of w = C⁻¹z ((B5)) for vectors of ``num_params`` entries."""
        return BltNoiseStream(self.n, self.buffer_decays, self.output_scales, num_params, dtype=dtype, device=device)

    def encoder_matrix(self) -> np.ndarray:
        """Dense C (n × n), from (B1)."""
        return _lower_toeplitz(self.coefficients())

    def noise_matrix(self) -> np.ndarray:
        """Dense W = C⁻¹ (n × n) from the inverse's closed form BLT(θ̂, ω̂) ((B3))."""
        return _lower_toeplitz(self.inverse_coefficients())

    def workload_error(self, workload: np.ndarray | WorkloadSpec | None = None) -> float:
        """‖A·C⁻¹‖_F²: A = prefix sums for None or "prefix" (O(n·d)), ("momentum", β) (FFT, O(n log n)),
        or a dense n × n array (O(n³))."""
        c_hat = self.inverse_coefficients()
        if isinstance(workload, np.ndarray):
            if workload.shape != (self.n, self.n):
                raise ConfigError(f"`workload` must be an {self.n} x {self.n} matrix. Found shape {workload.shape}.")
            return float(np.sum((np.asarray(workload, dtype=np.float64) @ _lower_toeplitz(c_hat)) ** 2))
        a = _workload_coefficients("prefix" if workload is None else workload, self.n)
        if a is None:
            e = np.cumsum(c_hat)
        else:
            with torch.no_grad():
                e = _fft_lower_toeplitz_product(torch.from_numpy(a), torch.from_numpy(c_hat)).numpy()
        weights = np.arange(self.n, 0, -1, dtype=np.float64)
        return float(np.sum(weights * e * e))

    # -- serialization -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "blt", "n", "buffer_decays", "output_scales"}`` (floats as JSON floats)."""
        return {"kind": self.kind, "n": self.n, "buffer_decays": list(self.buffer_decays),
                "output_scales": list(self.output_scales)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BltStrategy:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping) or data.get("kind") != cls.kind:
            raise ConfigError(f"not a BLT strategy: {data!r}.")
        missing = [key for key in ("n", "buffer_decays", "output_scales") if key not in data]
        extra = sorted(set(data) - {"kind", "n", "buffer_decays", "output_scales"})
        if missing or extra:
            raise ConfigError(f"a BLT strategy needs exactly n, buffer_decays, output_scales. Missing {missing}, "
                              f"unknown {extra} in {dict(data)!r}.")
        return cls(data["n"], data["buffer_decays"], data["output_scales"])

    def __repr__(self) -> str:
        return f"BltStrategy(n={self.n}, buffer_decays={self.buffer_decays!r}, output_scales={self.output_scales!r})"


def _lower_toeplitz(coef: np.ndarray) -> np.ndarray:
    n = coef.shape[0]
    idx = np.arange(n)
    lag = idx[:, None] - idx[None, :]
    return np.where(lag >= 0, coef[np.clip(lag, 0, None)], 0.0)


class BltNoiseStream(NoiseStream):
    """w = C⁻¹z for C = BLT(θ, ω), by [MXZ24] Alg. 3 ((B5)): its state is the d buffers only.

    Round t draws z_t = ``torch.randn(num_params, generator=generator)`` (in ``dtype`` on ``device``)
    and returns w_t = z_t − Σ_i ω_i S_i; then S_i ← θ_i S_i + w_t. The state is one [d, num_params]
    tensor (the d vectors of :attr:`memory_vectors`), kept in ``dtype``.
    """

    def __init__(self, n: int, buffer_decays: Sequence[float], output_scales: Sequence[float], num_params: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        self.n = _int("n", n, 1)
        self.num_params = _int("num_params", num_params, 1)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ConfigError(f"`dtype` must be a floating torch dtype. Found {dtype!r}.")
        self.next_round = 0
        self._d = len(buffer_decays)
        self._theta = torch.tensor(list(buffer_decays), dtype=dtype, device=device)
        self._omega = torch.tensor(list(output_scales), dtype=dtype, device=device)
        self._dtype, self._device = dtype, torch.device(device)
        self._buffers = torch.zeros(self._d, self.num_params, dtype=dtype, device=device)

    @property
    def memory_vectors(self) -> int:
        return self._d

    def next(self, round_idx: int, generator: NoiseGenerator) -> torch.Tensor:
        """w_{round_idx} (shape [num_params]); rounds must come in order 0, 1, …, n − 1."""
        check_noise_generator(generator)
        if isinstance(round_idx, bool) or not isinstance(round_idx, (int, np.integer)) or round_idx != self.next_round:
            raise ConfigError(f"BLT noise for round {round_idx!r} requested; the stream is at round {self.next_round}.")
        if round_idx >= self.n:
            raise ConfigError(f"BLT noise for round {round_idx} requested past the strategy's n = {self.n} rounds.")
        w = randn(self.num_params, generator, dtype=self._dtype, device=self._device)
        w.addmv_(self._buffers.t(), self._omega, alpha=-1.0)  # w_t = z_t − Σ_i ω_i S_i
        self._buffers.mul_(self._theta[:, None]).add_(w)  # S_i ← θ_i S_i + w_t
        self.next_round += 1
        return w


# ---------------------------------------------------------------------------------------------
# loss and optimizer
# ---------------------------------------------------------------------------------------------


def blt_loss(strategy: BltStrategy, *, min_separation: int, max_participations: int | None = None,
             workload: WorkloadSpec = "prefix") -> float:
    """[MXZ24]'s loss max_sensitivity(b, k)² × ‖A C⁻¹‖_F² (k = ⌈n/b⌉ when None)."""
    k = _effective_k(strategy.n, _int("min_separation", min_separation, 1), max_participations)
    return strategy.max_sensitivity(min_separation, k) ** 2 * strategy.workload_error(workload)


def _points_from_logits(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 2d interlaced points P (ascending in (0,1)) and 1 − P from free logits u ∈ ℝ^{2d}:
    the 2d + 1 gaps between 0, P_1, …, P_2d, 1 are softmax([u, 0])."""
    gaps = torch.softmax(torch.cat([u, torch.zeros(1, dtype=u.dtype)]), dim=0)
    points = torch.cumsum(gaps, 0)[:-1]
    one_minus = torch.flip(torch.cumsum(torch.flip(gaps, [0]), 0), [0])[1:]
    return points, one_minus


def _pair_parameters(points: torch.Tensor, one_minus: torch.Tensor) -> dict[str, torch.Tensor]:
    """θ̂ = P_1, P_3, …; θ = P_2, P_4, … and ω, ω̂ by (B4)."""
    theta_hat, theta = points[0::2], points[1::2]
    omt_hat, omt = one_minus[0::2], one_minus[1::2]
    d = theta.shape[0]
    eye = torch.eye(d, dtype=torch.bool)
    # differences from the complements (θ_i − θ̂_j = (1 − θ̂_j) − (1 − θ_i)): exact digits near 1
    t_th = omt_hat[None, :] - omt[:, None]
    t_t = torch.where(eye, torch.ones((), dtype=points.dtype), omt[None, :] - omt[:, None])
    th_t = omt[None, :] - omt_hat[:, None]
    th_th = torch.where(eye, torch.ones((), dtype=points.dtype), omt_hat[None, :] - omt_hat[:, None])
    omega = torch.prod(t_th, 1) / torch.prod(t_t, 1)
    omega_hat = torch.prod(th_t, 1) / torch.prod(th_th, 1)
    return {"theta": theta, "omt": omt, "omega": omega, "theta_hat": theta_hat, "omt_hat": omt_hat,
            "omega_hat": omega_hat}


def _logits_from_points(points: np.ndarray) -> np.ndarray:
    gaps = np.diff(np.concatenate([[0.0], points, [1.0]]))
    return np.log(gaps[:-1]) - math.log(gaps[-1])


def _initial_points(n: int, d: int) -> list[np.ndarray]:
    """Fixed starts: 1 − θ log-spaced from ``hi`` down to ``lo``/n, θ̂_i halfway (in log(1 − x))
    between θ_{i−1} and θ_i (θ_0 := 0)."""
    starts: list[np.ndarray] = []
    for hi, lo in ((0.5, 1.0), (0.2, 0.2), (0.8, 5.0)):
        low = min(lo / n, hi * 0.5 ** (2 * d))
        omt = np.geomspace(hi, low, d) if d > 1 else np.array([math.sqrt(hi * low)])
        prev = np.concatenate([[1.0], omt[:-1]])
        omt_hat = np.sqrt(prev * omt)
        points = np.empty(2 * d)
        points[0::2], points[1::2] = 1.0 - omt_hat, 1.0 - omt
        starts.append(points)
    return starts


def initial_blts(n: int, num_buffers: int = 4) -> list[BltStrategy]:
    """The BLTs :func:`optimize_blt` starts from (fixed, for determinism)."""
    n, d = _int("n", n, 1), _int("num_buffers", num_buffers, 1)
    out = []
    for points in _initial_points(n, d):
        with torch.no_grad():
            p = _pair_parameters(*_points_from_logits(torch.from_numpy(_logits_from_points(points))))
        out.append(BltStrategy(n, tuple(p["theta"].tolist()), tuple(p["omega"].tolist())))
    return out


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a * b))  # elementwise + numpy's pairwise sum: no BLAS, no thread dependence


def _lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, *, max_iterations: int,
           ftol: float, gtol: float, memory: int = 20) -> tuple[float, np.ndarray]:
    """Minimize ``fun`` (value, gradient) by L-BFGS (Nocedal & Wright, Numerical Optimization, 2nd ed.,
    Alg. 7.4 two-loop recursion, Alg. 3.5/3.6 strong-Wolfe line search with c1 = 1e-4, c2 = 0.9).

    Written here rather than scipy's L-BFGS-B because that one's end point depends on OpenBLAS's
    thread count (``OMP_NUM_THREADS``), and the optimized BLT must not. Stops when max |gradient|
    <= gtol, the relative decrease of an iteration is <= ftol, the line search finds no decrease,
    or after ``max_iterations``. Returns the best (value, x)."""
    c1, c2 = 1e-4, 0.9
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    if not math.isfinite(f):
        return f, x
    history: list[tuple[np.ndarray, np.ndarray, float]] = []

    def line_search(p: np.ndarray, dg0: float, step: float) -> tuple[float, float, np.ndarray] | None:
        def at(a: float) -> tuple[float, np.ndarray, float]:
            fa, ga = fun(x + a * p)
            return fa, ga, (_dot(ga, p) if math.isfinite(fa) else math.nan)

        def zoom(lo: float, f_lo: float, g_lo: np.ndarray, hi: float) -> tuple[float, float, np.ndarray] | None:
            for _ in range(40):
                a = 0.5 * (lo + hi)
                fa, ga, dga = at(a)
                if not math.isfinite(fa) or fa > f + c1 * a * dg0 or fa >= f_lo:
                    hi = a
                else:
                    if abs(dga) <= -c2 * dg0:
                        return a, fa, ga
                    if dga * (hi - lo) >= 0:
                        hi = lo
                    lo, f_lo, g_lo = a, fa, ga
            return (lo, f_lo, g_lo) if lo > 0 and f_lo < f else None

        a_prev, f_prev, g_prev = 0.0, f, g
        a = step
        for i in range(40):
            fa, ga, dga = at(a)
            if not math.isfinite(fa) or fa > f + c1 * a * dg0 or (i > 0 and fa >= f_prev):
                return zoom(a_prev, f_prev, g_prev, a)
            if abs(dga) <= -c2 * dg0:
                return a, fa, ga
            if dga >= 0:
                return zoom(a, fa, ga, a_prev)
            a_prev, f_prev, g_prev = a, fa, ga
            a *= 2.0
        return (a_prev, f_prev, g_prev) if a_prev > 0 else None

    for _ in range(max_iterations):
        if float(np.max(np.abs(g))) <= gtol:
            break
        q = g.copy()
        alphas = []
        for s_vec, y_vec, rho in reversed(history):
            a_i = rho * _dot(s_vec, q)
            alphas.append(a_i)
            q = q - a_i * y_vec
        if history:
            s_last, y_last, _ = history[-1]
            q = q * (_dot(s_last, y_last) / _dot(y_last, y_last))
            step = 1.0
        else:
            step = 1.0 / max(1.0, float(np.sqrt(_dot(g, g))))
        for (s_vec, y_vec, rho), a_i in zip(history, reversed(alphas), strict=True):
            q = q + s_vec * (a_i - rho * _dot(y_vec, q))
        p = -q
        dg = _dot(g, p)
        if not dg < 0:  # not a descent direction: restart from the gradient
            history.clear()
            p, dg, step = -g, -_dot(g, g), 1.0 / max(1.0, float(np.sqrt(_dot(g, g))))
        found = line_search(p, dg, step)
        if found is None:
            break
        a, f_new, g_new = found
        x_new = x + a * p
        s_vec, y_vec = x_new - x, g_new - g
        sy = _dot(s_vec, y_vec)
        if sy > 1e-12 * math.sqrt(_dot(s_vec, s_vec) * _dot(y_vec, y_vec)):
            history.append((s_vec, y_vec, 1.0 / sy))
            if len(history) > memory:
                history.pop(0)
        decrease = (f - f_new) / max(abs(f), abs(f_new), 1.0)
        x, f, g = x_new, f_new, g_new
        if decrease <= ftol:
            break
    return f, x


def optimize_blt(n: int, *, min_separation: int, max_participations: int | None = None, num_buffers: int = 4,
                 workload: WorkloadSpec = "prefix", max_iterations: int = 2000) -> BltStrategy:
    """The BLT minimizing max_sensitivity(b, k)² × ‖A C⁻¹‖_F² ([MXZ24]; [DMPST24] Opt-BLT).

    Optimizes over the interlaced decay pair (θ̂, θ) ((B4), [MP25] Thm. 1's class: C's coefficients
    positive and non-increasing, so the sensitivity (B7) is exact), parameterized smoothly by the
    softmax of 2d free logits; the loss's logarithm is minimized by L-BFGS (:func:`_lbfgs`) in float64
    with torch autograd gradients, from each of the fixed starts of :func:`initial_blts`; the best end point
    (the first on ties) is kept. Each evaluation is O(n·d + k·d²) (prefix; FFT O(n log n) for momentum).
    Deterministic: the same arguments give the same parameters bit for bit on the same platform,
    whatever the thread settings (torch runs on one thread during the call and is set back after;
    the L-BFGS is numpy without BLAS). Cancelling pole-zero pairs are dropped afterwards (module
    docstring, "Optimum"), so the result may have fewer than ``num_buffers`` buffers; its loss is
    within a relative 1e-8 of the best d-buffer point found.

    Args:
        n: rounds.
        min_separation: b >= 1.
        max_participations: k (None: ⌈n/b⌉).
        num_buffers: d (1 to 16; 3 to 5 is the useful range).
        workload: "prefix" or ("momentum", β).
        max_iterations: L-BFGS iterations per start.

    Returns:
        the optimized :class:`BltStrategy`.
    """
    n = _int("n", n, 1)
    b = _int("min_separation", min_separation, 1)
    k = _effective_k(n, b, max_participations)
    d = _int("num_buffers", num_buffers, 1)
    if d > _MAX_BUFFERS:
        raise ConfigError(f"`num_buffers` must be <= {_MAX_BUFFERS}. Found {num_buffers!r}.")
    iters = _int("max_iterations", max_iterations, 1)
    a = _workload_coefficients(workload, n)
    a_t = None if a is None else torch.from_numpy(a)

    def log_loss(u: torch.Tensor) -> torch.Tensor:
        p = _pair_parameters(*_points_from_logits(u))
        sens2 = _minsep_sens2(p["theta"], p["omt"], p["omega"], n, b, k)
        if a_t is None:
            err = _prefix_error_t(p["omt"], p["omt_hat"], p["omega_hat"], n)
        else:
            c_hat = _inverse_coefficients_t(p["theta_hat"], p["omega_hat"], n)
            err = _error_from_coefficients(_fft_lower_toeplitz_product(a_t, c_hat))
        return torch.log(sens2) + torch.log(err)

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        u = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        value = log_loss(u)
        (grad,) = torch.autograd.grad(value, u)
        v, g = float(value.detach()), grad.numpy().copy()
        if not (math.isfinite(v) and np.all(np.isfinite(g))):
            return math.inf, np.zeros_like(x)
        return v, g

    def polish(x0: np.ndarray, ftol: float = 1e-12) -> tuple[float, np.ndarray]:
        return _lbfgs(fun, x0, max_iterations=iters, ftol=ftol, gtol=1e-11)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # reductions over n entries must not depend on the thread count
    try:
        candidates = _optimize(fun, polish, _initial_points(n, d))
    finally:
        torch.set_num_threads(threads)
    # the optimum first, then the polished starts by loss: the first whose inverse is well conditioned
    # (a degenerate optimum, e.g. a decay -> 1 when every round may hold a participation, b = 1)
    problems = []
    for x in candidates:
        with torch.no_grad():
            p = _pair_parameters(*_points_from_logits(torch.from_numpy(x)))
        try:
            return BltStrategy(n, tuple(p["theta"].tolist()), tuple(p["omega"].tolist()))
        except ConfigError as err:
            problems.append(str(err))
    raise ConfigError(f"BLT optimization for n = {n}, min_separation = {b}, k = {k} found no well-conditioned BLT "
                      f"({problems[0]}); use the banded mechanism for this schema.")


def _optimize(fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
              polish: Callable[..., tuple[float, np.ndarray]], starts: list[np.ndarray]) -> list[np.ndarray]:
    """optimize_blt's search: polish every start, keep the best, drop cancelling pairs, polish last.
    Returns that optimum first, then every polished start by increasing loss (fallbacks)."""
    best: tuple[float, np.ndarray] | None = None
    polished: list[tuple[float, int, np.ndarray]] = []
    for i, points in enumerate(starts):
        value, x = polish(_logits_from_points(points))
        if math.isfinite(value):
            polished.append((value, i, x))
        if math.isfinite(value) and (best is None or value < best[0]):
            best = (value, x)
    if best is None:  # pragma: no cover - every start is finite by construction
        raise ConfigError("BLT optimization failed: no start has a finite loss.")
    # Drop cancelling pole-zero pairs (θ_i ≈ θ̂_j, ω_i ≈ 0: the optimum often has a lower degree
    # than d): merge the two adjacent points of the interlaced sequence that cost least (at most a
    # relative _PRUNE_TRY before, and _PRUNE_RTOL after re-polishing, against the best one found).
    reference, (value, x) = best[0], best
    while x.shape[0] > 2:
        gaps = torch.softmax(torch.cat([torch.from_numpy(x), torch.zeros(1, dtype=torch.float64)]), 0).numpy()
        trials = []
        for i in range(x.shape[0] - 1):
            merged = np.concatenate([gaps[:i], [gaps[i:i + 3].sum()], gaps[i + 3:]])
            x_try = np.log(merged[:-1]) - math.log(merged[-1])
            trials.append((fun(x_try)[0], i, x_try))
        v_try, _, x_try = min(trials, key=lambda item: (item[0], item[1]))
        if not v_try <= reference + _PRUNE_TRY:  # the remaining buffers may make up for the rest
            break
        v_try, x_try = polish(x_try)
        if not v_try <= reference + _PRUNE_RTOL:
            break
        value, x = v_try, x_try
    value, x = polish(x, ftol=0.0)  # to the last digits (until the gradient or the line search stalls)
    return [x] + [x_i for _, _, x_i in sorted(polished, key=lambda item: (item[0], item[1]))]
