"""A certified GDP parameter for the unit shift of the Skellam law: the Gaussian domination behind
the Skellam release's PLD route. The proof is ``docs/proofs/skellam-gdp.md``; the
section, lemma and equation numbers below are that page's.

Sk(V) is the symmetric Skellam law of variance V per coordinate, Poisson(V/2) − Poisson(V/2),
pmf p(j) = e^{−V} I_|j|(V). For Z ~ Sk(V) the pair (Z, Z+1) is η₁-GDP (Dong, Roth, Su,
"Gaussian differential privacy", arXiv 1905.02383, JRSS-B 2022) with

    η₁(V) = max_{j ≥ 0} D(j),   D(j) = Φ⁻¹(F(j)) − Φ⁻¹(F(j−1)) = D(−j)          (Lemma 2, (2.3))

(F the cdf of Z; Sk(V) is log-concave, so the optimal tests are thresholds). An integer vector
shift of L2 norm ≤ Δ2 of Sk(V)^{⊗d} is then (η₁·Δ2)-GDP (§3). :func:`certified_unit_eta` returns a
certified upper bound η̄(V) ≥ η₁(V), the largest of:

* D(0) = 2√2·erfinv(p(0)) at the upper end of an interval-arithmetic enclosure of p(0) (§4,
  Lemma 4: the power series of I_0 for V ≤ 2000, a Laplace-type expansion with explicit remainders
  above);
* **window route**, V ≤ 10^6 (§5): D(j) for 1 ≤ j ≤ W = ⌈12√V⌉ + 12 from enclosures of
  ρ(i) = I_{i+1}(V)/I_i(V) carried down the exact recurrence ρ(i−1) = 1/(2i/V + ρ(i)) in floating-
  point interval arithmetic (each IEEE operation moved one ulp outward);
* **closed forms** (§6), every j from 1 (or W + 1) to 10V − 1, on blocks of consecutive j: with the
  Bessel-ratio bounds (R) of Amos 1974 / Segura 2011, closed-form bounds of p(j) and of
  R(j) = P(Z ≥ j)/p(j) (Lemmas 5, 6), a direct block bound (Lemma 8: log-concavity of φ and of Φ̄,
  monotone in j) and a chained one (Lemma 9: the exact inversion D(j) = Δ(a_j, p(j)) along the
  block), blocks split until they fall below the running maximum (times 1 + τ) or a budget is spent;
* **far tail** j ≥ 10V: D(j) ≤ 1/√V (§7, Lemma 10);

times (1 + 10⁻⁹) for floating-point evaluation (§8 states what is assumed of scipy's and numpy's
special functions; ``tests/unit/privacy/test_skellam_gdp.py`` checks them against mpmath).
Certified range: MIN_VARIANCE ≤ V ≤ MAX_VARIANCE (4 to 10^14); outside it the result is None.

:func:`exact_unit_eta` computes η₁(V) itself in mpmath (not certified: a high-precision maximum of
D over a window), for tests and for the published figures of η₁·√V.

This module imports nothing from dpfl.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np
from mpmath.ctx_iv import MPIntervalContext
from scipy import special

__all__ = [
    "MAX_VARIANCE",
    "MIN_VARIANCE",
    "EtaCertificate",
    "certified_unit_eta",
    "exact_unit_eta",
]

MIN_VARIANCE = 4.0
"""Smallest variance certified (Lemma 10, the far tail, uses V ≥ 4)."""
MAX_VARIANCE = 1e14
"""Largest variance certified (the blocks run to 10V, which must stay far below 2^53)."""

_WINDOW_MAX_VARIANCE = 1e6  # at or below: the window route (§5) on 0 <= j <= W
_SERIES_MAX_VARIANCE = 2000.0  # p(0) by Lemma 4 (a) at or below, by Lemma 4 (b) above
_FAR_TAIL_U = 10  # Lemma 10 covers j >= 10 V
_MARGIN = 1e-9  # final relative margin (§8)
_LOG_MARGIN = 1e-12  # widening of the closed-form logarithms, absolute plus relative (§8)
_SHIFT = 1e-12  # widening of ndtri / ndtri_exp values: 1e-12·(1 + |x|) (§8)
_CHAIN_MARGIN = 1e-13  # widening of log U in the chained bound (§8)
_TAU = 1e-7  # a block is split while its value exceeds (running maximum)·(1 + τ)  (§6.7)
_BUDGET = 250_000  # block-end evaluations at most; the result is valid whenever refinement stops
_INITIAL_BLOCKS = 4096
_HORNER_SMALL_V = 12  # explicit steps of R(j) = 1 + ρ(j)R(j+1) (Lemma 6 (d)) for V <= 10^5
_HORNER_LARGE_V = 2
_CHAIN_ROUNDS = 1
_EM3 = math.sqrt(3.0) / 216.0 * (1.0 + 1e-12)  # max|B_3|/6, the Euler–Maclaurin remainder (Lemma 6 (a))


@dataclass(frozen=True)
class EtaCertificate:
    """A certified GDP parameter for the unit shift of Sk(variance) (docs/proofs/skellam-gdp.md).

    Attributes:
        eta: η̄, a certified upper bound of η₁: the pair (Z, Z+1), Z ~ Sk(variance), is η̄-GDP, and
            an integer shift of L2 norm ≤ Δ2 of Sk(variance)^{⊗d} is (η̄·Δ2)-GDP.
        variance: V, the variance per coordinate of the Skellam noise.
        method: how η̄ was certified: "window+closed-form" (V ≤ 10^6) or "closed-form".
        ratio: η̄·√V (the Gaussian of the same variance has 1; slightly above 1 here).
    """

    eta: float
    variance: float
    method: str
    ratio: float


def certified_unit_eta(variance: float) -> EtaCertificate | None:
    """A certified upper bound of the GDP parameter of (Z, Z+1), Z ~ Sk(variance), or None.

    Certified for MIN_VARIANCE ≤ variance ≤ MAX_VARIANCE (4 ≤ V ≤ 10^14). None outside that range,
    for a non-finite or non-numeric variance, or if an evaluation is not finite: the far-tail
    Lemma 10 needs V ≥ 4, and the block range 1..10V must stay within the integers a float holds
    exactly. Cached per variance (about 0.01–0.5 s for a new one).

    >>> cert = certified_unit_eta(100.0)
    >>> 1.0016757 < cert.ratio < 1.0016758
    True
    """
    if isinstance(variance, bool) or not isinstance(variance, (int, float, np.floating, np.integer)):
        return None
    v = float(variance)
    if not math.isfinite(v) or not MIN_VARIANCE <= v <= MAX_VARIANCE:
        return None
    return _certified(v)


@functools.lru_cache(maxsize=512)
def _certified(v: float) -> EtaCertificate | None:
    p0_lo, p0_up = _p0_enclosure(v)
    # D(0) = 2Φ⁻¹((1 + p(0))/2) = 2√2·erfinv(p(0)), increasing in p(0)  (2.4)
    best = 2.0 * math.sqrt(2.0) * float(special.erfinv(p0_up))
    best = max(best, 1.0 / math.sqrt(v))  # Lemma 10: D(j) <= 1/√V for j >= 10V
    closed = _ClosedForms(v, p0_lo, p0_up)
    if v <= _WINDOW_MAX_VARIANCE:
        window, j_start = _window_bound(v, p0_lo, p0_up)
        best = max(best, window)
        method = "window+closed-form"
    else:
        j_start, method = 1, "closed-form"
    j_end = math.ceil(_FAR_TAIL_U * v) - 1  # the blocks cover j_start..j_end, Lemma 10 j >= 10V
    if j_start <= j_end:
        best = max(best, _blocks_max(closed, j_start, j_end, best))
    eta = best * (1.0 + _MARGIN)
    if not math.isfinite(eta) or eta <= 0.0:
        return None
    return EtaCertificate(eta=eta, variance=v, method=method, ratio=eta * math.sqrt(v))


# --------------------------------------------------------------------------------------------
# p(0) in interval arithmetic (§4, Lemma 4)
# --------------------------------------------------------------------------------------------


def _outward(interval: object) -> tuple[float, float]:
    """Float bounds of an mpmath interval, each moved one ulp outward (float() rounds to nearest)."""
    lo = math.nextafter(float(interval.a), -math.inf)  # type: ignore[attr-defined]
    up = math.nextafter(float(interval.b), math.inf)  # type: ignore[attr-defined]
    return lo, up


def _c(k: int) -> Fraction:
    """c_k = C(2k, k)/4^k: (1 − s)^{−1/2} = Σ_k c_k s^k  (4.2)."""
    return Fraction(math.comb(2 * k, k), 4**k)


def _p0_enclosure(v: float) -> tuple[float, float]:
    """Float bounds p0_lo ≤ p(0) = e^{−V} I_0(V) ≤ p0_up (Lemma 4), in a private interval context
    (mpmath's ``iv`` arithmetic, exp and sqrt are outward-rounded)."""
    ctx = MPIntervalContext()
    ctx.prec = 160
    x = ctx.mpf(v)
    if v <= _SERIES_MAX_VARIANCE:
        # (4.1): e^{−V} Σ_m (V/2)^{2m}/(m!)²; for m >= V the ratio of consecutive terms is
        # (V/2)²/(m+1)² <= 1/4, so what follows term m is at most term/3
        q = (x / 2) ** 2
        term = ctx.exp(-x)
        total = term
        m = 0
        while True:
            m += 1
            term = term * q / (m * m)
            total = total + term
            if m >= v and term.b < total.a * ctx.mpf(2) ** -150:
                break
        return _outward(ctx.mpf([total.a, total.b + term.b / 3]))
    # (4.3)–(4.5): e^{−x}I_0(x) = (1/π)∫_0^2 e^{−xt} t^{−1/2}(2 − t)^{−1/2} dt, (2 − t)^{−1/2} expanded
    root = ctx.sqrt(2 * ctx.pi * x)
    big_k = 12
    upper = ctx.mpf(0)
    for k in range(big_k):
        a_k = _c(k) ** 2 * math.factorial(k) / 2**k
        upper = upper + ctx.mpf(a_k.numerator) / a_k.denominator / x**k
    upper = upper / root
    c_big = _c(big_k) * math.factorial(big_k) / 2**big_k
    upper = upper + ctx.mpf(c_big.numerator) / c_big.denominator / (ctx.sqrt(ctx.pi * x) * x**big_k)
    upper = upper + ctx.exp(-x)
    lower = ctx.mpf(0)
    for k in range(big_k):
        a_k = _c(k) ** 2 * math.factorial(k) / 2**k
        lower = lower + ctx.mpf(a_k.numerator) / a_k.denominator / x**k
    lower = lower / root
    y = 2 * x
    for k in range(big_k):
        s = k + 0.5
        # Γ(s, y) <= y^{s−1}e^{−y} (s <= 1), <= y^{s−1}e^{−y}/(1 − (s−1)/y) (s > 1, y > s − 1)  (4.6)
        gamma_up = y ** ctx.mpf(s - 1) * ctx.exp(-y)
        if s > 1:
            gamma_up = gamma_up / (1 - (s - 1) / y)
        c_k = _c(k) / 2**k
        lower = lower - ctx.mpf(c_k.numerator) / c_k.denominator * gamma_up / (
            ctx.pi * ctx.sqrt(ctx.mpf(2)) * x ** ctx.mpf(s))
    return _outward(ctx.mpf([lower.a, upper.b]))


# --------------------------------------------------------------------------------------------
# The window route (§5): floating-point interval arithmetic, one ulp outward per operation
# --------------------------------------------------------------------------------------------


def _dn(x: float) -> float:
    return math.nextafter(x, -math.inf)


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


def _ratio_start(v: float, n: int) -> tuple[float, float]:
    """Enclosure of ρ(n) by (R), rounded outward."""
    s, t = n + 0.5, n + 1.5
    den_dn = _dn(s + _dn(math.sqrt(_dn(_dn(s * s) + _dn(v * v)))))
    den_up = _up(s + _up(math.sqrt(_up(_up(t * t) + _up(v * v)))))
    return _dn(v / den_up), _up(v / den_dn)


def _window_bound(v: float, p0_lo: float, p0_up: float) -> tuple[float, int]:
    """max over 1 ≤ j ≤ W of the bound (5.3) of D(j), and W + 1 (where the blocks start)."""
    sd = math.sqrt(v)
    w = math.ceil(12.0 * sd) + 12
    n = w + math.ceil(4.0 * sd) + 30
    rho_lo = [0.0] * (n + 1)
    rho_up = [0.0] * (n + 1)
    rho_lo[n], rho_up[n] = _ratio_start(v, n)
    for i in range(n, 0, -1):  # (5.1): ρ(i−1) = 1/(2i/V + ρ(i)), decreasing in ρ(i)
        q_dn, q_up = _dn(2.0 * i / v), _up(2.0 * i / v)
        rho_lo[i - 1] = _dn(1.0 / _up(q_up + rho_up[i]))
        rho_up[i - 1] = _up(1.0 / _dn(q_dn + rho_lo[i]))
    p_lo = [0.0] * (n + 1)
    p_up = [0.0] * (n + 1)
    p_lo[0], p_up[0] = p0_lo, p0_up
    for i in range(n):
        p_lo[i + 1] = _dn(p_lo[i] * rho_lo[i])
        p_up[i + 1] = _up(p_up[i] * rho_up[i])
    # (5.2): S(n−1) = Σ_{i >= n} p(i) lies in [p(n), p(n)/(1 − ρ(n))] (ρ non-increasing)
    s_lo = [0.0] * n
    s_up = [0.0] * n
    s_lo[n - 1] = p_lo[n]
    s_up[n - 1] = _up(p_up[n] / _dn(1.0 - rho_up[n]))
    for j in range(n - 2, -1, -1):
        s_lo[j] = _dn(s_lo[j + 1] + p_lo[j + 1])
        s_up[j] = _up(s_up[j + 1] + p_up[j + 1])
    s_lo[0] = max(s_lo[0], _dn(_dn(1.0 - p0_up) / 2.0))  # S(0) = (1 − p(0))/2
    s_up[0] = min(s_up[0], _up(_up(1.0 - p0_lo) / 2.0))
    lo = np.asarray(s_lo[: w + 1])
    up = np.asarray(s_up[: w + 1])
    b_up = -special.ndtri(lo[1:])  # Φ̄⁻¹(S_lo(j)) >= b_j = Φ̄⁻¹(S(j)), j = 1..W
    a_lo = -special.ndtri(up[:-1])  # Φ̄⁻¹(S_up(j−1)) <= a_j = Φ̄⁻¹(S(j−1))
    d = (b_up - a_lo) + _SHIFT * (2.0 + np.abs(a_lo) + np.abs(b_up))  # (5.3), §8
    if not np.all(np.isfinite(d)):
        return math.inf, w + 1
    return float(d.max()), w + 1


# --------------------------------------------------------------------------------------------
# Closed forms (§6)
# --------------------------------------------------------------------------------------------


def _h(u: np.ndarray) -> np.ndarray:
    """H(u) = ∫_0^u asinh(t) dt = u·asinh(u) − √(1+u²) + 1, without cancellation at small u."""
    return u * np.arcsinh(u) - u * u / (np.sqrt(1.0 + u * u) + 1.0)  # type: ignore[no-any-return]


def _mills(z: np.ndarray) -> np.ndarray:
    """M(z) = Φ̄(z)/φ(z) = √(π/2)·erfcx(z/√2), for every real z."""
    return math.sqrt(math.pi / 2.0) * special.erfcx(z / math.sqrt(2.0))  # type: ignore[no-any-return]


def _lam(z: np.ndarray) -> np.ndarray:
    """λ(z) = φ(z)/Φ̄(z) = 1/M(z), for every real z."""
    return math.sqrt(2.0 / math.pi) / special.erfcx(z / math.sqrt(2.0))  # type: ignore[no-any-return]


def _widen(x: np.ndarray, sign: float) -> np.ndarray:
    return x + sign * _LOG_MARGIN * (1.0 + np.abs(x))  # type: ignore[no-any-return]


def _widen_scalar(x: float, sign: float) -> float:
    return x + sign * _LOG_MARGIN * (1.0 + abs(x))


def _shift(x: np.ndarray, sign: float) -> np.ndarray:
    """Move a value of ndtri_exp outward by 1e-12·(1 + |x|) (§8)."""
    return x + sign * _SHIFT * (1.0 + np.abs(x))  # type: ignore[no-any-return]


def _centre(a: np.ndarray, log_m: np.ndarray) -> np.ndarray:
    """log(1 + a·m)/a (m at a = 0): (7.1), decreasing in a >= 0 and increasing in m."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        m = np.exp(log_m)
        out = np.where(a > 0.0, np.log1p(a * m) / np.where(a > 0.0, a, 1.0), m)
    return np.where(np.isfinite(out), out, np.inf)  # type: ignore[no-any-return]


def _quadratic_range(q1: np.ndarray, q2: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """max and min of t·q1 + t²·q2 over 0 <= t <= w (the end points and the vertex)."""
    at_w = q1 * w + q2 * w * w
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.clip(np.where(q2 != 0.0, -q1 / (2.0 * np.where(q2 != 0.0, q2, 1.0)), 0.0), 0.0, w)
    at_v = q1 * vertex + q2 * vertex * vertex
    return np.maximum(np.maximum(0.0, at_w), at_v), np.minimum(np.minimum(0.0, at_w), at_v)


class _Ends(dict):  # type: ignore[type-arg]
    """Named arrays of one end of a list of blocks."""

    def take(self, mask: np.ndarray) -> _Ends:
        return _Ends({k: val[mask] for k, val in self.items()})

    def join(self, other: _Ends) -> _Ends:
        return _Ends({k: np.concatenate([val, other[k]]) for k, val in self.items()})


class _ClosedForms:
    """The closed-form bounds of §6 at one variance, vectorized over integer arrays j >= 1."""

    def __init__(self, v: float, p0_lo: float, p0_up: float) -> None:
        self.v = v
        self.log_p0_lo = _widen_scalar(math.log(p0_lo), -1.0)
        self.log_p0_up = _widen_scalar(math.log(p0_up), 1.0)
        self.log_s0_up = _widen_scalar(math.log(_up(_up(1.0 - p0_lo) / 2.0)), 1.0)  # S(0) = (1 − p(0))/2
        self.big_k = math.ceil(12.0 * math.sqrt(v))
        self.tau = v / math.sqrt(v + 1.0)
        self.horner = _HORNER_SMALL_V if v <= 1e5 else _HORNER_LARGE_V

    # Lemma 5 ----------------------------------------------------------------------------------

    def log_p_up(self, j: np.ndarray) -> np.ndarray:
        """(6.2): log p(j) <= log p(0) − V·H(j/V)."""
        return _widen(self.log_p0_up - self.v * _h(j / self.v), 1.0)

    def log_p_lo(self, j: np.ndarray) -> np.ndarray:
        """(6.3): log p(j) >= log p(0) − V·H(j/V) − 1/(4V) − j(j+1)/(2V²)."""
        v = self.v
        return _widen(self.log_p0_lo - v * _h(j / v) - 0.25 / v - j * (j + 1.0) / (2.0 * v * v), -1.0)

    # Lemma 6 ----------------------------------------------------------------------------------

    def _r_up_integral(self, j: np.ndarray) -> np.ndarray:
        """(6.6): an upper bound of R(j) = S(j−1)/p(j) (and the geometric one, (6.5))."""
        v, big_k = self.v, self.big_k
        geometric = 1.0 / -np.expm1(-np.arcsinh((j + 0.5) / v))
        alpha = np.arcsinh(j / v)
        sigma2 = np.sqrt(v * v + (j + big_k) ** 2)
        sigma = np.sqrt(sigma2)
        series = sigma * _mills(alpha * sigma) + 0.5 + alpha / 12.0 + _EM3 * (alpha * alpha + 5.0 / sigma2)
        alpha_k = np.arcsinh((j + big_k) / v)
        rest = np.exp(-big_k * alpha - big_k * big_k / (2.0 * sigma2) - alpha_k) / -np.expm1(-alpha_k)
        return np.minimum(geometric, series + rest)  # type: ignore[no-any-return]

    def _r_lo_integral(self, j: np.ndarray) -> np.ndarray:
        """(6.7): a lower bound of R(j)."""
        v, tau = self.v, self.tau
        beta = np.arcsinh(j / v) + (j + 0.5) / (v * v)
        series = tau * _mills(beta * tau) + 0.5 + beta / 12.0 - _EM3 * (beta * beta + 5.0 / (tau * tau))
        return np.maximum(1.0, 1.0 + math.exp(-0.25 / v) * (series - 1.0))  # type: ignore[no-any-return]

    def log_r_up(self, j: np.ndarray) -> np.ndarray:
        """log of an upper bound of R(j): R(j) = 1 + ρ(j)R(j+1) unrolled ``horner`` times with the
        upper bound of (R), then (6.6)  (6.8)."""
        v = self.v
        r = self._r_up_integral(j + self.horner)
        for k in range(self.horner - 1, -1, -1):
            r = 1.0 + np.exp(-np.arcsinh((j + k + 0.5) / v)) * r
        return _widen(np.log(r), 1.0)

    def log_r_lo_pair(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """logs of lower bounds of R(j) and of R(j) − 1 = ρ(j)R(j+1) = S(j)/p(j), unrolled with the
        lower bound of (R), then (6.7)  (6.8)."""
        v = self.v
        r = self._r_lo_integral(j + self.horner)
        for k in range(self.horner - 1, 0, -1):
            i = j + k
            r = 1.0 + v / (i + 0.5 + np.sqrt((i + 1.5) ** 2 + v * v)) * r
        rest = v / (j + 0.5 + np.sqrt((j + 1.5) ** 2 + v * v)) * r  # ρ_lo(j)·R_lo(j+1)
        return _widen(np.log1p(rest), -1.0), _widen(np.log(rest), -1.0)

    # block ends (§6.5) ------------------------------------------------------------------------

    def left(self, j: np.ndarray) -> _Ends:
        """The quantities of a block's left end j1 >= 1."""
        f = j.astype(np.float64)
        log_p_up, log_p_lo = self.log_p_up(f), self.log_p_lo(f)
        log_r_up, log_r_lo = self.log_r_up(f), self.log_r_lo_pair(f)[0]
        # a_j = Φ̄⁻¹(S(j−1)), S(j−1) = p(j)R(j) <= S(0)
        a_lo = _shift(-special.ndtri_exp(np.minimum(log_p_up + log_r_up, self.log_s0_up)), -1.0)
        # (9.5): the end points of a_j over {p·R_lo : p_lo <= p <= p_up, p·R_lo <= S(0)}
        a1 = _shift(-special.ndtri_exp(np.minimum(log_p_up + log_r_lo, self.log_s0_up)), -1.0)
        a2 = _shift(-special.ndtri_exp(np.minimum(log_p_lo + log_r_lo, self.log_s0_up)), 1.0)
        return _Ends({"a_lo": a_lo, "a1": a1, "a2": a2, "log_p_up": log_p_up, "log_r_lo": log_r_lo,
                      "log_r_up": log_r_up, "alpha": np.arcsinh(f / self.v)})

    def right(self, j: np.ndarray) -> _Ends:
        """The quantities of a block's right end j2 >= 1: −log(1 − 1/R_lo(j2)) and
        b_up(j2) >= Φ̄⁻¹(S(j2)), S(j2) = p(j2)(R(j2) − 1)."""
        f = j.astype(np.float64)
        log_r, log_r_minus_1 = self.log_r_lo_pair(f)
        numerator = -np.log1p(-np.exp(-log_r))
        b_up = np.maximum(_shift(-special.ndtri_exp(self.log_p_lo(f) + log_r_minus_1), 1.0), 0.0)
        return _Ends({"numerator": numerator, "b_up": b_up, "j": f})

    # Lemma 8 ----------------------------------------------------------------------------------

    @staticmethod
    def direct(left: _Ends, right: _Ends) -> np.ndarray:
        """(8.1): a bound of D(j) for every j of a block [j1, j2] from left(j1) and right(j2): the
        smaller of the tail bound (7.2) and the centre bound (7.1) at the block's ends."""
        a_lo, log_p1 = left["a_lo"], left["log_p_up"]
        numerator, b_up = right["numerator"], right["b_up"]
        tail = numerator / _lam(a_lo)
        log_m = log_p1 + 0.5 * b_up * b_up + 0.5 * math.log(2.0 * math.pi)  # p_up(j1)/φ(b_up(j2))
        log_m = log_m + _LOG_MARGIN * (1.0 + np.abs(log_p1) + b_up * b_up)
        out = np.minimum(tail, _centre(np.maximum(a_lo, 0.0), log_m))
        return np.where(np.isfinite(out) & (out >= 0.0), out, np.inf)  # type: ignore[no-any-return]

    # Lemma 9 ----------------------------------------------------------------------------------

    def chain_step(self, left: _Ends, right: _Ends, w: np.ndarray, hyp: np.ndarray | float) -> np.ndarray:
        """(9.9): a bound of D(j) for every j = j1 + t, 0 <= t <= w (w = right's j − j1), when
        D(i) <= ``hyp`` for j1 <= i < j. At w = 0 no hypothesis is used."""
        v = self.v
        a_lo, a1, a2, alpha = left["a_lo"], left["a1"], left["a2"], left["alpha"]
        inv_sigma2 = 1.0 / np.sqrt(v * v + right["j"] ** 2)
        hyp = np.where(w > 0, hyp, 0.0)
        q2 = 0.5 * (hyp * hyp - inv_sigma2)
        slack = _CHAIN_MARGIN * (1.0 + w * (np.abs(a2 * hyp) + alpha) + w * w * (hyp * hyp + inv_sigma2))
        # (9.6): log(y·M(A)) <= −log R_lo + log M(a_i) + t(a_i·T − α) + t²(T² − 1/σ²)/2, i = 1, 2
        log_u = np.full(np.shape(a1), -np.inf)
        for a_i in (a1, a2):
            log_u = np.maximum(log_u, np.log(_mills(a_i)) + _quadratic_range(a_i * hyp - alpha, q2, w)[0])
        log_u = log_u - left["log_r_lo"]
        log_u = log_u + slack + _CHAIN_MARGIN * (1.0 + np.abs(log_u))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            u = np.exp(log_u)
            lam_max = _lam(a2 + w * hyp)
            y_max = u * lam_max  # (9.7)
            k_bar = u * -np.log1p(-y_max) / y_max  # (9.8)
            y_min = np.exp(-w * alpha - 0.5 * w * w * inv_sigma2 - left["log_r_up"] - slack)
            x_max = a2 + w * hyp + k_bar
            ell = _lam(a_lo) * np.maximum(_lam(x_max) - x_max, 0.0)
            z = ell * y_min / (lam_max * lam_max)  # (9.9)
            out = k_bar * 2.0 / (1.0 + np.sqrt(1.0 + 2.0 * z))
        ok = (y_max < 1.0) & np.isfinite(out) & (out > 0.0)
        return np.where(ok, out, np.inf)  # type: ignore[no-any-return]

    def chained(self, left: _Ends, right: _Ends, width: np.ndarray, direct: np.ndarray,
                hypotheses: tuple[np.ndarray | float, ...] = ()) -> np.ndarray:
        """The smallest valid bound of D on blocks [j1, j1 + width] from Lemma 9: first with the
        (valid) ``direct`` bound as hypothesis, then under each of ``hypotheses`` where the result
        closes the induction (result <= hypothesis), then _CHAIN_ROUNDS rounds with the best."""
        w = width.astype(np.float64)
        finite = np.isfinite(direct)
        bound = np.minimum(direct, self.chain_step(left, right, w, np.where(finite, direct, 0.0)))
        bound = np.where(finite | (w == 0), bound, np.inf)
        for hyp in hypotheses:
            first = self.chain_step(left, right, w, hyp)
            bound = np.where(first <= hyp, np.minimum(bound, first), bound)
        for _ in range(_CHAIN_ROUNDS):
            known = np.isfinite(bound)
            step = self.chain_step(left, right, w, np.where(known, bound, 0.0))
            bound = np.where(known, np.minimum(bound, step), bound)
        return bound

    # helpers for checks -----------------------------------------------------------------------

    def block(self, j1: np.ndarray, j2: np.ndarray) -> np.ndarray:
        """The direct bound (8.1) of D(j) for every j1 ≤ j ≤ j2 (1 ≤ j1 ≤ j2)."""
        return self.direct(self.left(j1), self.right(j2))

    def point(self, j: np.ndarray) -> np.ndarray:
        """The pointwise bound of D(j) (j >= 1): min of the direct and the chained bound at width 0."""
        return _pointwise(self, self.left(j), self.right(j))


def _pointwise(closed: _ClosedForms, left: _Ends, right: _Ends) -> np.ndarray:
    direct = closed.direct(left, right)
    zero = np.zeros(direct.shape, dtype=np.int64)
    return np.minimum(direct, closed.chained(left, right, zero, direct))  # type: ignore[no-any-return]


def _block_value(closed: _ClosedForms, lo: np.ndarray, hi: np.ndarray, left: _Ends, right: _Ends,
                 point: np.ndarray, target: float) -> np.ndarray:
    """A valid bound of D on each block [lo, hi]: min of the direct bound and the chained one, the
    latter also tried under the target and under the block's own pointwise bound times
    1 + τ + r²/24 (r = lo/V; §6.7)."""
    direct = closed.direct(left, right)
    r2 = (lo / closed.v) ** 2
    return closed.chained(left, right, hi - lo, direct, (target, point * (1.0 + _TAU + r2 / 24.0)))


def _blocks_max(closed: _ClosedForms, j_start: int, j_end: int, floor: float) -> float:
    """The maximum of the block values over a cover of j_start..j_end, refined adaptively (§6.7).

    Blocks start log-spaced; every block above the target (the running maximum of the pointwise
    bounds and ``floor``, times 1 + τ) is split at its middle, until none is left or the budget is
    spent. The result is the maximum over the final cover and the pointwise bounds computed: a
    valid bound of D on j_start..j_end whenever the refinement stops.
    """
    edges = np.unique(np.round(np.geomspace(j_start, j_end + 1, _INITIAL_BLOCKS)).astype(np.int64))
    edges[0], edges[-1] = j_start, j_end + 1
    edges = np.unique(edges)
    lo, hi = edges[:-1], edges[1:] - 1
    left, right = closed.left(lo), closed.right(hi)
    point = _pointwise(closed, left, closed.right(lo))
    pointwise = max(floor, float(point.max()))
    value = _block_value(closed, lo, hi, left, right, point, pointwise * (1.0 + _TAU))
    done = 0.0
    used = 3 * lo.size
    while True:
        target = pointwise * (1.0 + _TAU)
        open_ = (value > target) & (hi > lo)
        done = max(done, float(value[~open_].max(initial=0.0)))
        lo, hi, left, right = lo[open_], hi[open_], left.take(open_), right.take(open_)
        point, value = point[open_], value[open_]
        if lo.size == 0 or used > _BUDGET:
            return max(done, float(value.max(initial=0.0)), pointwise)
        mid = (lo + hi) // 2
        left_new, right_mid = closed.left(mid + 1), closed.right(mid)
        point_new = _pointwise(closed, left_new, closed.right(mid + 1))
        pointwise = max(pointwise, float(point_new.max()))
        used += 3 * mid.size
        lo, hi = np.concatenate([lo, mid + 1]), np.concatenate([mid, hi])
        left, right, point = left.join(left_new), right_mid.join(right), np.concatenate([point, point_new])
        value = _block_value(closed, lo, hi, left, right, point, pointwise * (1.0 + _TAU))


# --------------------------------------------------------------------------------------------
# η₁ itself, in mpmath (not certified)
# --------------------------------------------------------------------------------------------


def exact_unit_eta(variance: float, dps: int = 50) -> float:
    """η₁(V) = max_j D(j) in mpmath at ``dps`` digits over the window 0 ≤ j ≤ ⌈10√V⌉ + 10.

    Not a certificate: the pmf comes from Miller's backward recurrence (:func:`_mp_pmf_and_tails`),
    Φ̄⁻¹ from Newton's method on mpmath's ``erfc``, and j beyond the window is not looked at (D(j) =
    D(−j) covers j < 0). A maximum over part of Z is ≤ η₁, so this is a lower reference for
    :func:`certified_unit_eta`; ``tests/unit/privacy/test_skellam_gdp.py`` checks that the window's
    maximum is at j = 0, far inside it, for the variances it uses.

    >>> round(exact_unit_eta(100.0) * 10.0, 7)
    1.0016757
    """
    v = float(variance)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"the variance must be finite and > 0. Found {variance!r}.")
    return float(max(exact_unit_differences(v, dps)))


def exact_unit_differences(variance: float, dps: int = 50) -> list[float]:
    """D(0), D(1), …, D(W) in mpmath at ``dps`` digits, W = ⌈10√V⌉ + 10 (not certified)."""
    v = float(variance)
    with mpmath.workdps(dps + 10):
        sd = math.sqrt(v)
        w = math.ceil(10.0 * sd) + 10
        _, tail = _mp_pmf_and_tails(v, w + math.ceil(12.0 * sd) + 60)
        xs = [_inverse_survival(tail[j]) for j in range(w + 1)]  # Φ̄⁻¹(S(j)) = Φ⁻¹(F(j))
        # D(0) = Φ̄⁻¹(S(0)) − Φ̄⁻¹(1 − S(0)) = 2Φ̄⁻¹(S(0)); D(j) = Φ̄⁻¹(S(j)) − Φ̄⁻¹(S(j−1))
        return [float(2 * xs[0])] + [float(xs[j] - xs[j - 1]) for j in range(1, w + 1)]


def _mp_pmf_and_tails(v: float, n: int) -> tuple[list[mpmath.mpf], list[mpmath.mpf]]:
    """p(j) and S(j) = Σ_{i>j} p(i) for 0 ≤ j ≤ n at mpmath's current precision (not certified).

    Miller's algorithm: the ratios ρ(i−1) = 1/(2i/V + ρ(i)) (DLMF 10.29.1) from ρ(n) = 0, then
    p(j)/p(0) = Π_{i<j} ρ(i), normalized by p(0)(1 + 2Σ_{j≥1} p(j)/p(0)) = 1; the start error
    decays like (p(n)/p(j))² going down, and the mass beyond n is left out (n far out).
    """
    mv = mpmath.mpf(v)
    rho = [mpmath.mpf(0)] * (n + 1)
    for i in range(n, 0, -1):
        rho[i - 1] = 1 / (2 * i / mv + rho[i])
    rel = [mpmath.mpf(1)] * (n + 1)
    for i in range(n):
        rel[i + 1] = rel[i] * rho[i]
    p0 = 1 / (1 + 2 * mpmath.fsum(rel[1:]))
    pmf = [r * p0 for r in rel]
    tail = [mpmath.mpf(0)] * (n + 1)
    for j in range(n - 1, -1, -1):
        tail[j] = tail[j + 1] + pmf[j + 1]
    return pmf, tail


def _inverse_survival(s: mpmath.mpf) -> mpmath.mpf:
    """Φ̄⁻¹(s): the x with erfc(x/√2)/2 = s, by Newton's method on log Φ̄ (mpmath precision)."""
    fs = float(s)
    guess = float(-special.ndtri(fs)) if fs > 0 else float(mpmath.sqrt(-2 * mpmath.log(s)))
    x = mpmath.mpf(guess)
    target = mpmath.log(s)
    sq2 = mpmath.sqrt(2)
    for _ in range(100):
        sf = mpmath.erfc(x / sq2) / 2
        step = (mpmath.log(sf) - target) * sf / mpmath.npdf(x)
        x = x + step
        if abs(step) < mpmath.mpf(10) ** (-mpmath.mp.dps + 3) * (1 + abs(x)):
            break
    return x
