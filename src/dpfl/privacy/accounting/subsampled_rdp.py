"""RDP of a Poisson-subsampled mechanism whose noise is symmetric: the binomial expansion at
integer orders, without the factor 3 of the general bound.

Let P be the output law without one unit's contribution and Q the law with it, L = Q/P, and
M = (1 − q)P + qQ what an observer sees when the unit is in the release with probability q. For
integer α >= 2 the binomial theorem gives (eq. (4) of ``docs/proofs/skellam-subsampling.md``;
the expansion Mironov, Talwar, Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian
Mechanism", use for the Gaussian and dp-accounting's ``_compute_log_a_int`` sums; the identity
holds for any P, Q with Q << P):

    E_P[(1 − q + qL)^α] = Σ_{k=0}^{α} C(α,k) (1 − q)^{α−k} q^k E_P[L^k],
    E_P[L^0] = E_P[L] = 1,   E_P[L^k] = exp((k − 1) D_k(Q‖P))  (k >= 2),

so, every coefficient being >= 0, an RDP bound ε(k) >= D_k(Q‖P) at orders 2..α bounds

    D_α(M‖P) <= 1/(α−1) log[ (1−q)^{α−1}(αq − q + 1)
                              + Σ_{k=2}^{α} C(α,k) (1−q)^{α−k} q^k e^{(k−1)ε(k)} ].        (B)

This is the expression Zhu & Wang ("Poisson Subsampled Rényi Differential Privacy", ICML 2019)
show tight for mechanisms meeting a condition (Theorem 8 of the PMLR version, as the texts that
cite it number it; the proof's §6 says what was read), and their general bound for *any*
mechanism (Theorem 5 there) multiplies the terms k >= 3 by 3 (what
:func:`dpfl.privacy.releases.skellam.subsampled_rdp` computes), because the other direction,
D_α(P‖M), can be the larger one in general. For an *additive noise symmetric about 0, with the
same law in both neighbours and full support on the lattice of outputs* — the Skellam sum of
secure aggregation — it never is: the reflection y ↦ 2f + v − y swaps P and Q, and then
D_α(P‖M) <= D_α(M‖P) for every α > 1 (proof: ``docs/proofs/skellam-subsampling.md``, Lemma 2).
So (B), taken as the minimum with the unsampled ε(α), is a valid RDP bound of the
Poisson-subsampled Skellam mechanism under add/remove, at integer orders.

Do not use this module for a mechanism whose noise is not symmetric in that sense: such a
mechanism keeps the general bound with the factor 3.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln, logsumexp

from dpfl.errors import ConfigError

__all__ = [
    "binomial_subsampled_rdp",
    "binomial_subsampled_rdp_curve",
]


def _checked_q(q: float) -> float:
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0 < q <= 1:
        raise ConfigError(f"the sampling probability must be in (0, 1]. Found {q!r}.")
    return float(q)


def _checked_alpha(alpha: int) -> int:
    if (isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha)
            or alpha < 2 or int(alpha) != alpha):
        raise ConfigError(f"the subsampled RDP bound needs an integer order >= 2. Found {alpha!r}.")
    return int(alpha)


def _checked_base(base: Sequence[float] | np.ndarray, top: int) -> np.ndarray:
    """ε(2..top) as floats; NaN or negative values are refused (an RDP bound is a number >= 0)."""
    eps = np.asarray(base, dtype=float).reshape(-1)
    if eps.shape[0] < top - 1:
        raise ConfigError(f"need the base RDP at orders 2..{top}; got {eps.shape[0]} values.")
    eps = eps[: top - 1]
    bad = np.flatnonzero(np.isnan(eps) | (eps < 0))
    if bad.size:
        i = int(bad[0])
        raise ConfigError(f"the base RDP must be a number >= 0 at every order; ε({i + 2}) = {float(eps[i])!r}.")
    return eps


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x − 1) for x >= 0 without overflow or cancellation (−inf at 0, inf at inf)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        small = np.log(np.expm1(np.minimum(x, 1.0)))
        large = x + np.log1p(-np.exp(-np.maximum(x, 1.0)))
    return np.where(x > 1.0, large, small)


def _log_binomial_excess(alphas: np.ndarray, q: float, eps: np.ndarray) -> np.ndarray:
    """log(S_α − 1) for each integer α in ``alphas`` (all <= len(eps) + 1), 0 < q < 1, where S_α
    is the bracket of (B).

    The binomial weights C(α,k)(1−q)^{α−k}q^k sum to 1, so S_α − 1 = Σ_{k=2}^{α} C(α,k)(1−q)^{α−k}
    q^k (e^{(k−1)ε(k)} − 1), a sum of terms >= 0: summed in log space and then D = log1p(S_α − 1)
    /(α − 1), it keeps full relative precision when D is tiny (small q or a large noise).
    One (len(alphas), max α + 1) array: row α, column k holds the log of the k-th term
    (−inf for k < 2 and for k > α).
    """
    top = int(alphas.max())
    k = np.arange(top + 1, dtype=float)
    excess = np.full(top + 1, -np.inf)
    excess[2:] = _log_expm1((k[2:] - 1.0) * eps[: top - 1])  # log(E_P[L^k] − 1)
    a = alphas.astype(float)[:, None]
    valid = (k[None, :] >= 2) & (k[None, :] <= a)
    kk = np.where(valid, k[None, :], 0.0)
    terms = (gammaln(a + 1.0) - gammaln(kk + 1.0) - gammaln(a - kk + 1.0)
             + (a - kk) * math.log1p(-q) + kk * math.log(q) + excess[None, :])
    terms = np.where(valid, terms, -np.inf)
    return logsumexp(terms, axis=1)


def binomial_subsampled_rdp_curve(q: float, base: Sequence[float] | np.ndarray,
                                  orders: Sequence[int] | None = None) -> np.ndarray:
    """RDP of Poisson(q)-subsampling a symmetric-noise mechanism whose RDP at orders 2, 3, … is
    ``base`` (``base[l-2]`` = ε(l)): bound (B) of the module docstring at every integer order,
    each the minimum with the unsampled ε(α).

    ``docs/proofs/skellam-subsampling.md``: eq. (B) of Theorem 1, from the binomial expansion
    (4) of E_P[(1−q+qL)^α] (as Mironov, Talwar, Zhang 2019 expand it for the Gaussian) and the
    reflection Lemma 2; the bound holds for both directions of add/remove only for noise
    symmetric about 0 with the same law in both neighbours. With the Gaussian's
    ε(k) = k/(2z²) it is dp-accounting's exact sampled-Gaussian RDP at integer orders.

    Args:
        q: the sampling probability, in (0, 1].
        base: ε(2), ε(3), … of the unsampled mechanism (>= 0; ``inf`` allowed).
        orders: the integer orders wanted (each in 2..len(base)+1); default every order
            2..len(base)+1, so that ``out[α-2]`` is ε'(α).

    Returns:
        ε'(α) at each order, as a float array: where some ε(k), k <= α, is infinite, (B) is
        and ε'(α) = ε(α) (``inf`` exactly where ε(α) is).

    Raises:
        ConfigError: q outside (0, 1], an order that is not an integer >= 2 or beyond the base,
            a base value that is NaN or negative (each message names the value).

    >>> binomial_subsampled_rdp_curve(1.0, [0.5, 1.0]).tolist()
    [0.5, 1.0]
    """
    q = _checked_q(q)
    n = len(base)
    if n < 1:
        raise ConfigError("need the base RDP at order 2 at least; got no values.")
    if orders is None:
        alphas = np.arange(2, n + 2)
    else:
        alphas = np.array([_checked_alpha(a) for a in orders], dtype=int)
        if alphas.size == 0:
            return np.zeros(0)
        if int(alphas.max()) > n + 1:
            raise ConfigError(f"need the base RDP at orders 2..{int(alphas.max())}; got {n} values.")
    eps = _checked_base(base, int(alphas.max()))
    unsampled = eps[alphas - 2]
    if q == 1.0:
        return unsampled.copy()
    # where ε(k) is infinite for some k <= α, (B) is infinite: the unsampled ε(α) is what is left
    first_inf = np.flatnonzero(np.isinf(eps))
    finite_rows = alphas < (int(first_inf[0]) + 2 if first_inf.size else np.iinfo(int).max)
    bound = np.full(alphas.shape, np.inf)
    if finite_rows.any():
        fa = alphas[finite_rows]
        # log S = log(1 + (S − 1)) = logaddexp(0, log(S − 1))
        bound[finite_rows] = np.logaddexp(0.0, _log_binomial_excess(fa, q, eps)) / (fa - 1.0)
    return np.minimum(bound, unsampled)


def binomial_subsampled_rdp(alpha: int, q: float, base: Sequence[float] | np.ndarray) -> float:
    """RDP at integer ``alpha`` of Poisson(q)-subsampling a symmetric-noise mechanism whose RDP at
    orders 2, 3, …, alpha is ``base`` (``base[l-2]`` = ε(l)), min with the unsampled ε(α):

        ε'(α) = min( ε(α), 1/(α−1) log[ (1−q)^{α−1}(αq − q + 1)
                                      + Σ_{k=2}^{α} C(α,k) (1−q)^{α−k} q^k e^{(k−1)ε(k)} ] ),

    the sum computed in log space: eq. (B) of ``docs/proofs/skellam-subsampling.md``, Theorem 1
    (the binomial expansion (4), as Mironov, Talwar, Zhang 2019 expand it for the Gaussian, and
    the reflection Lemma 2). Valid under add/remove for additive noise symmetric about 0 with the
    same law in both neighbours and full support on the lattice, such as the Skellam sum; for any
    other mechanism use Zhu & Wang 2019's general bound (Theorem 5, with the factor 3).

    Raises:
        ConfigError: ``alpha`` not an integer >= 2, q outside (0, 1], fewer than alpha − 1 base
            values, a base value NaN or negative.

    >>> round(binomial_subsampled_rdp(2, 1.0, [0.5]), 6)
    0.5
    >>> # α = 2, q = 1/2, ε(2) = log 3: log[(1/2)(3/2) + (1/4)·3] = log(3/2)
    >>> round(binomial_subsampled_rdp(2, 0.5, [math.log(3.0)]) - math.log(1.5), 12)
    0.0
    """
    alpha = _checked_alpha(alpha)
    _checked_q(q)
    eps = _checked_base(base, alpha)
    return float(binomial_subsampled_rdp_curve(q, eps, [alpha])[0])
