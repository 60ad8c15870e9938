"""Brute-force check of the Skellam → Gaussian domination behind the Skellam release's PLD route
(:func:`dpfl.privacy.releases.skellam_gdp.certified_unit_eta` is the only dpfl code
used here — everything else is computed again from the definitions).

The claim under test: with η = ``certified_unit_eta(V).eta`` for Z ~ Sk(V) = Poisson(V/2) −
Poisson(V/2) (pmf e^{−V} I_|j|(V), variance V), every integer shift v ∈ Z^d with ‖v‖₂ ≤ Δ2, in
any dimension d, Poisson-sampled with probability q under add/remove of one client, is dominated
by dp-accounting's ``PoissonSampledDpEvent(q, GaussianDpEvent(1/(η·Δ2)))``.

The check, for d = 1 and 2, V ∈ {4, 8, 20, 50, 100}, Δ2 ∈ {1, 2, √5, 3} (every nonzero integer
vector of norm ≤ Δ2), q ∈ {0.05, 0.2, 0.5, 0.9, 1} and 31 values of ε in [0, 4]:

* the two neighbours' output laws are P = law(Z) (client absent) and Q = (1−q)·law(Z) +
  q·law(Z+v) (present with probability q); their hockey-stick divergences H_{e^ε}(Q‖P) and
  H_{e^ε}(P‖Q) are sums of non-negative terms max(0, ·) over the lattice, computed term by term
  from scipy's ``ive`` on a box [−W, W]^d. Leaving the terms outside the box out gives a **lower
  bound** of the true δ(ε), and that lower bound is what is asserted ≤ the claimed δ: a failure is
  then a genuine counterexample to the claim, never an artefact of the truncation. The box is
  chosen so that the omitted part is ≤ 1e-30 (Chernoff bound for the Skellam tail,
  P(Z ≥ t) ≤ exp(−t·asinh(t/V) + √(t²+V²) − V), asserted below), so the lower bound is also the
  exact δ to within 1e-30;
* the claimed δ is dp-accounting's PLD of the sampled Gaussian (``from_gaussian_mechanism``,
  add/remove, pessimistic estimate, discretization 1e-4; its ``get_delta_for_epsilon`` is the
  maximum of the remove and add directions), and, for q = 1, the exact analytic Gaussian δ of
  Balle & Wang 2018, δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) with μ = η·Δ2 (mpmath, no
  discretization at all).

Tolerance: the comparisons allow a relative 1e-12 for floating-point rounding, and nothing for
dp-accounting's discretization (``pessimistic_estimate=True`` only overestimates δ). Rounding
does need an allowance: at ε = 0 the domination is tight — δ(0) of the unit pair is the total
variation p(0) = F(0) − F(−1), and with F(−1) = 1 − F(0) the centre gap that defines η₁ gives
2Φ(η₁/2) − 1, the Gaussian's δ(0), exactly — so with η = η₁ the two sides agree to the last
bits (dp-accounting's pessimistic PLD came out 1.7e-15 relative *below* the brute force there).
1e-12 is far above that rounding and far below any real violation (0.9·η misses by a factor
1.17 at V = 4 to 16 at V = 100); η ≥ η₁ is also checked directly, below.

The check is shown not to be vacuous: the claimed δ is within a few per cent of the exact
Skellam δ at moderate ε (V = 100, d = 1, q = 1, unit shift), and with η replaced by 0.9·η (an
under-estimate) the same comparison fails, for every V. η itself is checked against an
independent mpmath evaluation of η₁ = max_j [Φ⁻¹(F(j)) − Φ⁻¹(F(j−1))] (F the Skellam cdf) on a
window of ±12 standard deviations: the certified η must not be below it, nor more than 0.1%
above it.
"""

from __future__ import annotations

import functools
import itertools
import math

import mpmath
import numpy as np
import pytest
from dp_accounting import privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.special import ive

from dpfl.privacy.releases.skellam_gdp import certified_unit_eta

VARIANCES = (4.0, 8.0, 20.0, 50.0, 100.0)
SAMPLING_PROBS = (0.05, 0.2, 0.5, 0.9, 1.0)
DELTA2_SQUARED = (1, 4, 5, 9)  # Δ2 ∈ {1, 2, √5, 3}, as integers so ‖v‖² ≤ Δ2² is exact
EPSILONS = np.unique(np.concatenate([np.linspace(0.0, 4.0, 21), np.geomspace(0.01, 1.0, 11)]))
PLD_INTERVAL = 1e-4
TAIL_TOLERANCE = 1e-30  # mass left outside the lattice box
RTOL = 1e-12  # floating-point rounding only (see the module docstring)
# (ε, factor): at V = 100, d = 1, q = 1, unit shift, the claimed δ is at most factor × the exact
# Skellam δ (observed with η = η₁: 1.0000, 1.0037, 1.0325; the Skellam's lighter tails make
# the ratio grow beyond ε ≈ 0.25: 1.47 at 0.4, 6.1 at 0.6).
NON_VACUITY_FACTORS = ((0.0, 1.01), (0.1, 1.02), (0.2, 1.05))


# --------------------------------------------------------------------------------------------
# The Skellam law on the lattice
# --------------------------------------------------------------------------------------------


def _skellam_upper_tail_bound(variance: float, t: float) -> float:
    """Chernoff bound on P(Z ≥ t), t ≥ 0, for Z ~ Sk(V): E e^{λZ} = exp(V(cosh λ − 1)), optimal
    λ = asinh(t/V)."""
    if t <= 0:
        return 1.0
    exponent = t * math.asinh(t / variance) - (math.hypot(t, variance) - variance)
    return math.exp(-exponent)


def _box_half_width(variance: float, max_shift: int, d: int) -> int:
    """Smallest W with 2d·P(Z ≥ W + 1 − max_shift) ≤ TAIL_TOLERANCE: both P and the shifted law
    put at most that much mass outside [−W, W]^d (union bound over coordinates and signs)."""
    w = max_shift
    while 2 * d * _skellam_upper_tail_bound(variance, w + 1 - max_shift) > TAIL_TOLERANCE:
        w += 1
    return w


def _pmf_1d(variance: float, points: np.ndarray) -> np.ndarray:
    """P(Z = j) = e^{−V} I_|j|(V) (``ive`` is the exponentially scaled Bessel I)."""
    return ive(np.abs(points).astype(float), variance)


def _shifts(d: int, max_norm_sq: int) -> list[tuple[int, ...]]:
    """Every nonzero integer vector of Z^d with squared norm ≤ max_norm_sq."""
    r = math.isqrt(max_norm_sq)
    return [v for v in itertools.product(range(-r, r + 1), repeat=d) if 0 < sum(c * c for c in v) <= max_norm_sq]


def _brute_force_delta(
    variance: float, shift: tuple[int, ...], width: int, q: float, epsilons: np.ndarray
) -> np.ndarray:
    """max(H_{e^ε}(Q‖P), H_{e^ε}(P‖Q)) summed over the box [−W, W]^d only: a lower bound of the
    true δ(ε) of the pair P = Sk(V)^d, Q = (1−q)P + q·P(· − v) (every omitted term is ≥ 0)."""
    points = np.arange(-width, width + 1)
    p = np.ones(1)
    p_shifted = np.ones(1)
    for coordinate in shift:  # product law, laid out flat
        p = np.multiply.outer(p, _pmf_1d(variance, points)).ravel()
        p_shifted = np.multiply.outer(p_shifted, _pmf_1d(variance, points - coordinate)).ravel()
    q_law = (1.0 - q) * p + q * p_shifted
    exp_eps = np.exp(epsilons)[:, None]
    forward = np.maximum(q_law[None, :] - exp_eps * p[None, :], 0.0).sum(axis=1)
    backward = np.maximum(p[None, :] - exp_eps * q_law[None, :], 0.0).sum(axis=1)
    return np.maximum(forward, backward)


@functools.cache
def _brute_force_deltas(variance: float, d: int, q: float) -> dict[tuple[int, ...], np.ndarray]:
    """Lower-bound δ(ε) on EPSILONS for every nonzero shift of norm ≤ 3 in Z^d."""
    max_norm_sq = max(DELTA2_SQUARED)
    width = _box_half_width(variance, math.isqrt(max_norm_sq), d)
    return {v: _brute_force_delta(variance, v, width, q, EPSILONS) for v in _shifts(d, max_norm_sq)}


# --------------------------------------------------------------------------------------------
# The claimed (Gaussian) figures
# --------------------------------------------------------------------------------------------


@functools.cache
def _eta(variance: float) -> float:
    certificate = certified_unit_eta(variance)
    assert certificate is not None, f"certified_unit_eta({variance}) gave no certificate"
    return float(certificate.eta)


@functools.cache
def _claimed_pld_delta(mu: float, q: float) -> np.ndarray:
    """dp-accounting's pessimistic PLD δ(ε) on EPSILONS for PoissonSampled(q, Gaussian) with
    noise multiplier 1/μ (add/remove; max of the two directions)."""
    pld = pld_lib.from_gaussian_mechanism(
        standard_deviation=1.0 / mu,
        sensitivity=1.0,
        pessimistic_estimate=True,
        value_discretization_interval=PLD_INTERVAL,
        sampling_prob=q,
        neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    return np.asarray(pld.get_delta_for_epsilon(EPSILONS), dtype=float)


@functools.cache
def _gaussian_delta_exact(mu: float) -> np.ndarray:
    """Balle & Wang 2018, Theorem 8: the μ-GDP pair's δ(ε), in 40-digit arithmetic."""
    with mpmath.workdps(40):
        m = mpmath.mpf(mu)
        out = []
        for eps in EPSILONS:
            e = mpmath.mpf(float(eps))
            out.append(float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)))
    return np.asarray(out)


@functools.cache
def _eta1_mpmath(variance: float, dps: int = 40) -> float:
    """η₁ = max_j [Φ⁻¹(F(j)) − Φ⁻¹(F(j−1))] over j within ±12 standard deviations (where F stays
    inside [1e-25, 1 − 1e-25]); pmf by backward recurrence I_{n−1} = I_{n+1} + (2n/V)·I_n from
    two of mpmath's Bessel values. An independent evaluation, not a certificate."""
    with mpmath.workdps(dps):
        x = mpmath.mpf(variance)
        k = int(12 * math.sqrt(variance)) + 30
        bessel = [mpmath.mpf(0)] * (k + 2)
        bessel[k + 1] = mpmath.besseli(k + 1, x)
        bessel[k] = mpmath.besseli(k, x)
        for n in range(k, 0, -1):
            bessel[n - 1] = bessel[n + 1] + (2 * n / x) * bessel[n]
        scale = mpmath.exp(-x)
        pmf = [scale * bessel[abs(j)] for j in range(-k, k + 1)]
        cdf = list(itertools.accumulate(pmf))
        lo, hi = mpmath.mpf("1e-25"), 1 - mpmath.mpf("1e-25")

        def probit(p: mpmath.mpf) -> mpmath.mpf:
            return mpmath.sqrt(2) * mpmath.erfinv(2 * p - 1)

        best = max(probit(cdf[i]) - probit(cdf[i - 1]) for i in range(1, len(cdf)) if cdf[i - 1] >= lo and cdf[i] <= hi)
        return float(best)


def _comparisons(variance: float, d: int, q: float, eta: float) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, brute-force lower bound, claimed δ) on EPSILONS for every shift v ∈ Z^d of norm
    ≤ 3, every Δ2 ≥ ‖v‖ and both references (PLD always, the analytic Gaussian at q = 1)."""
    out = []
    for v, brute in _brute_force_deltas(variance, d, q).items():
        norm_sq = sum(c * c for c in v)
        for delta2_sq in DELTA2_SQUARED:
            if norm_sq > delta2_sq:
                continue
            mu = eta * math.sqrt(delta2_sq)
            label = f"V={variance:g} v={v} Δ2²={delta2_sq} q={q}"
            out.append((f"{label} PLD", brute, _claimed_pld_delta(mu, q)))
            if q == 1.0:
                out.append((f"{label} analytic", brute, _gaussian_delta_exact(mu)))
    return out


def _violations(comparisons: list[tuple[str, np.ndarray, np.ndarray]]) -> list[str]:
    """Every (case, ε) where the brute-force lower bound exceeds the claimed δ (beyond RTOL)."""
    return [
        f"{label} ε={eps:.3f}: brute {b:.6g} > claimed {c:.6g}"
        for label, brute, claimed in comparisons
        for eps, b, c in zip(EPSILONS, brute, claimed, strict=True)
        if not b <= c * (1.0 + RTOL)
    ]


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

# Most of the time goes into dp-accounting's PLDs at small V (fine discretization of a wide
# privacy-loss range): the default set keeps every V, every Δ2, d = 1 and 2, with q spread over
# the cases (four at V = 100, the main job's scale, every q at least once); the other (V, q)
# pairs are marked slow (`pytest -m ""` runs all 25, ~95 s).
DEFAULT_CASES = {
    (100.0, 0.05), (100.0, 0.2), (100.0, 0.5), (100.0, 1.0),
    (50.0, 0.9), (20.0, 0.2), (8.0, 0.05), (4.0, 1.0),
}  # fmt: skip
DOMINATION_CASES = [
    pytest.param(
        variance,
        q,
        marks=[] if (variance, q) in DEFAULT_CASES else [pytest.mark.slow],
        id=f"V{variance:g}-q{q:g}",
    )
    for variance in VARIANCES
    for q in SAMPLING_PROBS
]


@pytest.mark.parametrize(("variance", "q"), DOMINATION_CASES)
def test_sampled_skellam_is_dominated_by_the_claimed_gaussian(variance: float, q: float) -> None:
    eta = _eta(variance)
    for d in (1, 2):
        # The box holds all but ≤ TAIL_TOLERANCE of both laws, so the lower bound is tight.
        max_shift = math.isqrt(max(DELTA2_SQUARED))
        width = _box_half_width(variance, max_shift, d)
        assert 2 * d * _skellam_upper_tail_bound(variance, width + 1 - max_shift) <= TAIL_TOLERANCE
        box_mass = _pmf_1d(variance, np.arange(-width, width + 1)).sum() ** d
        assert box_mass == pytest.approx(1.0, abs=1e-14)

        comparisons = _comparisons(variance, d, q, eta)
        # d = 1: 6 shifts (±1, ±2, ±3); d = 2: 28 (every nonzero vector of norm ≤ 3).
        assert len(_brute_force_deltas(variance, d, q)) == (6 if d == 1 else 28)
        assert len(EPSILONS) >= 20
        violations = _violations(comparisons)
        assert not violations, "\n".join(violations[:20])


@pytest.mark.parametrize("variance", VARIANCES)
def test_certified_eta_is_not_below_an_independent_evaluation(variance: float) -> None:
    certificate = certified_unit_eta(variance)
    assert certificate is not None
    eta1 = _eta1_mpmath(variance)
    # η must be at least the largest lattice gap (or the unit pair is not η-GDP), and the
    # discreteness factor η₁·√V is above 1 (the Gaussian of the same variance) and modest.
    assert certificate.eta >= eta1 * (1.0 - 1e-12)
    assert 1.0 < eta1 * math.sqrt(variance) < 1.06
    # ... and not far above it: every 0.1% of slack in η costs ε at every round (at V = 100,
    # q = 1, ε = 0.2 the claimed δ grows by ~0.4% per 0.1% of η).
    assert certificate.eta <= eta1 * (1.0 + 1e-3), (certificate.eta, eta1)


def test_eta1_reproduces_the_figure_at_v_100() -> None:
    # Issue #53: η₁·√(2μ) = 1.0016757 for Poisson rates μ = 50 (variance 100).
    assert _eta1_mpmath(100.0) * 10.0 == pytest.approx(1.0016757, abs=5e-8)


def test_domination_is_not_vacuous() -> None:
    """V = 100, d = 1, q = 1, unit shift, Δ2 = 1: the claimed δ is close to the exact Skellam δ
    at moderate ε, so the check above has teeth."""
    variance = 100.0
    eta = _eta(variance)
    brute = _brute_force_deltas(variance, 1, 1.0)[(1,)]
    pld = _claimed_pld_delta(eta, 1.0)
    analytic = _gaussian_delta_exact(eta)
    for eps_value, factor in NON_VACUITY_FACTORS:
        i = int(np.argmin(np.abs(EPSILONS - eps_value)))
        assert EPSILONS[i] == pytest.approx(eps_value)
        assert brute[i] > 0
        assert analytic[i] <= factor * brute[i], (eps_value, analytic[i] / brute[i])
        assert pld[i] <= factor * brute[i], (eps_value, pld[i] / brute[i])


@pytest.mark.parametrize("variance", VARIANCES)
def test_an_underestimated_eta_is_caught(variance: float) -> None:
    # With η scaled by 0.9 the claimed Gaussian no longer dominates: the brute force finds
    # violations already for the unit shift, d = 1, q = 1, against both references.
    mu = 0.9 * _eta(variance)
    brute = _brute_force_deltas(variance, 1, 1.0)[(1,)]
    for claimed in (_claimed_pld_delta(mu, 1.0), _gaussian_delta_exact(mu)):
        assert _violations([("under-estimate", brute, claimed)])
