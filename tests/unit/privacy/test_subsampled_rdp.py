"""The binomial-expansion RDP of a Poisson-subsampled symmetric-noise mechanism
(:mod:`dpfl.privacy.accounting.subsampled_rdp`; proof in docs/proofs/skellam-subsampling.md),
checked against values computed independently:

* brute force on the integer lattice (d = 1 and 2): the exact Rényi divergences between Skellam
  sums and their integer shifts (scipy's Bessel functions), in both directions of the subsampled
  pair;
* the pointwise inequality behind the reflection lemma, and a pair without the symmetry where
  the other direction is the larger one (why the general bound keeps its factor 3);
* dp-accounting's exact sampled-Gaussian RDP (Gaussian base ε(k) = k/(2z²));
* the main job's figure recomputed with mpmath from the formulas written out again.

Tolerances are stated at each assertion; nothing here is random.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable

import dp_accounting as dpa
import mpmath
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from scipy.special import ive, logsumexp

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS
from dpfl.privacy.accounting.subsampled_rdp import (
    binomial_subsampled_rdp,
    binomial_subsampled_rdp_curve,
)
from dpfl.privacy.releases.skellam import (
    SkellamDpEvent,
    skellam_rdp,
    skellam_rdp_vector,
    subsampled_rdp,
)

ALPHAS = tuple(range(2, 13))

# --------------------------------------------------------------------------------------------
# Exact divergences on the integer lattice
# --------------------------------------------------------------------------------------------


def _log_pmf_1d(mu: float, points: np.ndarray) -> np.ndarray:
    """log P(X = k) for X ~ Sk(μ) = Poisson(μ/2) − Poisson(μ/2): e^{−μ} I_|k|(μ) (−inf where it
    underflows, far out in the tail)."""
    with np.errstate(divide="ignore"):
        return np.log(ive(np.abs(points), mu))


@functools.cache
def _lattice_pair(mu: float, shift: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """log P and log Q on a box of Z^d (d = len(shift)): P = Sk(μ)^d, Q = P shifted by ``shift``.

    The box reaches 20√μ + 40 + |shift| from 0: the mass left out, weighted by the likelihood
    ratios up to order 12, is below e^{-80} for μ in [4, 50] and shifts up to 3 (Chernoff bound
    of the Skellam tail), far below the 1e-9 tolerances."""
    half = int(20 * math.sqrt(mu)) + 40 + max(abs(s) for s in shift)
    k = np.arange(-half, half + 1)
    lp_axes = [_log_pmf_1d(mu, k) for _ in shift]
    lq_axes = [_log_pmf_1d(mu, k - s) for s in shift]
    if len(shift) == 1:
        lp, lq = lp_axes[0], lq_axes[0]
    else:
        lp = (lp_axes[0][:, None] + lp_axes[1][None, :]).ravel()
        lq = (lq_axes[0][:, None] + lq_axes[1][None, :]).ravel()
    ok = np.isfinite(lp) & np.isfinite(lq)
    return lp[ok], lq[ok]


def _renyi(log_a: np.ndarray, log_b: np.ndarray, alpha: float) -> float:
    """D_α(A‖B) = 1/(α−1) log Σ A^α B^{1−α}, from log pmfs on the same points."""
    return float(logsumexp(alpha * log_a + (1 - alpha) * log_b) / (alpha - 1))


def _mixture(lp: np.ndarray, lq: np.ndarray, q: float) -> np.ndarray:
    """log of (1 − q)P + qQ."""
    return np.logaddexp(math.log1p(-q) + lp, math.log(q) + lq)


LATTICE_CASES = [(mu, shift) for mu in (4.0, 12.5, 50.0) for shift in ((1,), (3,), (1, 1), (2, -1))]
QS = (0.05, 0.3, 0.9)


@pytest.mark.parametrize(("mu", "shift"), LATTICE_CASES)
def test_the_binomial_sum_of_exact_divergences_is_the_exact_subsampled_divergence(
        mu: float, shift: tuple[int, ...]) -> None:
    lp, lq = _lattice_pair(mu, shift)
    exact_base = [_renyi(lq, lp, k) for k in ALPHAS]  # D_k(Q‖P)
    for q in QS:
        lm = _mixture(lp, lq, q)
        expected = np.array([_renyi(lm, lp, a) for a in ALPHAS])  # D_α(M‖P)
        got = binomial_subsampled_rdp_curve(q, exact_base)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=0)


@pytest.mark.parametrize(("mu", "shift"), LATTICE_CASES)
def test_the_other_direction_is_never_the_larger(mu: float, shift: tuple[int, ...]) -> None:
    lp, lq = _lattice_pair(mu, shift)
    for q in QS:
        lm = _mixture(lp, lq, q)
        for a in ALPHAS + (1.5, 2.5):  # the lemma holds at every order > 1
            remove, add = _renyi(lm, lp, a), _renyi(lp, lm, a)
            assert add <= remove * (1 + 1e-12), (q, a, add, remove)


@pytest.mark.parametrize(("mu", "shift"), LATTICE_CASES)
def test_the_skellam_bound_covers_the_exact_divergences(mu: float, shift: tuple[int, ...]) -> None:
    lp, lq = _lattice_pair(mu, shift)
    v = np.abs(np.array(shift, dtype=float))
    event = SkellamDpEvent(mu, float(np.sqrt(np.sum(v * v))), float(np.sum(v)))
    base = [skellam_rdp(k, event) for k in ALPHAS]
    for k, eps in zip(ALPHAS, base, strict=True):
        # AKL21 Thm 3.5 against the exact divergence, both directions (equal by the reflection)
        assert _renyi(lq, lp, k) <= eps * (1 + 1e-12)
        assert _renyi(lp, lq, k) <= eps * (1 + 1e-12)
    for q in QS:
        lm = _mixture(lp, lq, q)
        bound = binomial_subsampled_rdp_curve(q, base)
        for a, b in zip(ALPHAS, bound, strict=True):
            assert max(_renyi(lm, lp, a), _renyi(lp, lm, a)) <= b * (1 + 1e-12)


# --------------------------------------------------------------------------------------------
# The reflection lemma: where its inequality comes from, and why symmetry is needed
# --------------------------------------------------------------------------------------------


def test_the_pointwise_inequality_of_the_reflection_lemma() -> None:
    """φ(x) = g(m(x)) + x g(m(1/x)) >= 0 with g(t) = t^α − t^{1−α}, m(x) = 1 − q + qx (Lemma 2's
    integrand), on a grid of x from e^-40 to e^40; tolerance 1e-12 of the largest term."""
    x = np.exp(np.linspace(-40.0, 40.0, 4001))
    for alpha in (1.01, 1.5, 2.0, 3.0, 7.0, 12.0, 64.0, 256.0):
        for q in (1e-6, 0.01, 0.2, 0.5, 0.9, 1.0 - 1e-9):
            m_x = np.log1p(q * (x - 1.0))
            m_inv = np.log1p(q * (1.0 / x - 1.0))
            logs = np.stack([alpha * m_x, np.log(x) + alpha * m_inv,
                             (1 - alpha) * m_x, np.log(x) + (1 - alpha) * m_inv])
            top = logs.max(axis=0)
            w = np.exp(logs - top)
            phi = w[0] + w[1] - w[2] - w[3]
            assert phi.min() >= -1e-12, (alpha, q, x[np.argmin(phi)])


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0, 10.0])
def test_randomized_response_the_extreme_symmetric_pair(eps: float) -> None:
    """Any pair swapped by a reflection mixes two-point pairs of this form (Lemma 2's proof)."""
    lp = np.log(np.array([1.0, math.exp(eps)]) / (1 + math.exp(eps)))
    lq = lp[::-1].copy()
    for q in (0.01, 0.2, 0.5, 0.95):
        lm = _mixture(lp, lq, q)
        for a in (1.5, 2, 3, 8, 32):
            assert _renyi(lp, lm, a) <= _renyi(lm, lp, a) * (1 + 1e-12)


def test_without_the_symmetry_the_other_direction_can_be_larger() -> None:
    """P = (1/2, 1/2), Q = (0.001, 0.999) are not reflections of each other: D_α(P‖M) exceeds
    D_α(M‖P), which is what Zhu & Wang's factor 3 pays for in general."""
    lp, lq = np.log([0.5, 0.5]), np.log([0.001, 0.999])
    lm = _mixture(lp, lq, 0.5)
    assert _renyi(lp, lm, 8) > _renyi(lm, lp, 8) + 0.2


# --------------------------------------------------------------------------------------------
# The Gaussian limit: dp-accounting's exact sampled-Gaussian RDP
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("z", [0.5, 1.0, 1.5, 4.0])
@pytest.mark.parametrize("q", [0.01, 0.2, 0.7])
def test_with_the_gaussian_base_it_is_dp_accountings_sampled_gaussian(z: float, q: float) -> None:
    orders = list(range(2, 257))
    base = [k / (2 * z * z) for k in orders]
    got = binomial_subsampled_rdp_curve(q, base)
    accountant = dpa.rdp.RdpAccountant(orders)
    accountant.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)))
    np.testing.assert_allclose(got, accountant.rdp, rtol=1e-9, atol=0)


def test_the_skellam_figure_converges_to_the_gaussians_from_above() -> None:
    """Δ fixed (Δ2 = Δ1 = 4, one coordinate), μ growing: the Skellam ε after 100 rounds at
    δ = 1e-5 is never below the Gaussian of the same standard deviation (dp-accounting), and the
    relative gap shrinks to below 1e-4."""
    orders = list(range(2, 65))
    gaps = []
    for mu in (16.0, 160.0, 1600.0, 16000.0, 160000.0):
        event = SkellamDpEvent(mu, 4.0, 4.0)
        sk = binomial_subsampled_rdp_curve(0.2, [skellam_rdp(a, event) for a in orders])
        gauss = rdp_acc._compute_rdp_poisson_subsampled_gaussian(0.2, math.sqrt(mu) / 4.0, orders)
        assert np.all(sk >= gauss * (1 - 1e-12))
        e_sk = rdp_acc.compute_epsilon(orders, 100 * sk, 1e-5)[0]
        e_g = rdp_acc.compute_epsilon(orders, 100 * gauss, 1e-5)[0]
        assert e_sk >= e_g * (1 - 1e-12)
        gaps.append((e_sk - e_g) / e_g)
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False)), gaps
    assert gaps[-1] < 1e-4


# --------------------------------------------------------------------------------------------
# Against the general bound, and the arithmetic itself
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [4.0, 100.0, 1e4, 9663852751.411636])
@pytest.mark.parametrize("q", [0.001, 0.05, 0.2, 0.6, 0.99])
def test_never_above_zhu_and_wangs_general_bound(mu: float, q: float) -> None:
    d2 = math.sqrt(mu) / 1.5
    event = SkellamDpEvent(mu, d2, min(d2 * d2, math.sqrt(50_890) * d2))
    base = [skellam_rdp(a, event) for a in range(2, 129)]
    new = binomial_subsampled_rdp_curve(q, base)
    old = np.array([subsampled_rdp(a, q, base) for a in range(2, 129)])
    # equal at α = 2 (no term k >= 3): the old sum is taken as log of a number near 1, so its
    # relative precision is about 1e-16 / ε' (1e-9 at q = 0.001); hence the tolerance 1e-8
    assert np.all(new <= old * (1 + 1e-8))
    assert np.all(new[1:] < old[1:])  # strictly below from α = 3 on
    assert np.all(new <= np.array(base))


def test_the_scalar_and_the_curve_agree_with_a_sum_written_out() -> None:
    """math.comb and math.exp on a small case (no log space), relative tolerance 1e-12."""
    base = [0.3 * a + 0.01 * a * a for a in range(2, 21)]
    curve = binomial_subsampled_rdp_curve(0.1, base)
    for alpha in range(2, 21):
        q = 0.1
        total = (1 - q) ** alpha + alpha * (1 - q) ** (alpha - 1) * q
        total += sum(math.comb(alpha, k) * (1 - q) ** (alpha - k) * q ** k * math.exp((k - 1) * base[k - 2])
                     for k in range(2, alpha + 1))
        expected = min(math.log(total) / (alpha - 1), base[alpha - 2])
        assert binomial_subsampled_rdp(alpha, q, base) == pytest.approx(expected, rel=1e-12)
        assert curve[alpha - 2] == pytest.approx(expected, rel=1e-12)
    picked = binomial_subsampled_rdp_curve(0.1, base, [7, 3, 7, 20])
    np.testing.assert_array_equal(picked, curve[[5, 1, 5, 18]])


def test_edge_cases() -> None:
    assert binomial_subsampled_rdp_curve(1.0, [0.5, 1.0, 2.0]).tolist() == [0.5, 1.0, 2.0]
    # an infinite base at order 3 leaves only the unsampled ε(α) from order 3 on
    out = binomial_subsampled_rdp_curve(0.1, [0.5, math.inf, 2.0])
    assert math.isfinite(out[0]) and out[0] < 0.5
    assert out[1] == math.inf and out[2] == 2.0
    assert binomial_subsampled_rdp_curve(0.3, [0.5], []).shape == (0,)
    assert binomial_subsampled_rdp(2, 0.3, [0.0]) == pytest.approx(0.0, abs=1e-15)
    integral_float = binomial_subsampled_rdp(2.0, 0.3, np.array([0.4, 9.0]))  # type: ignore[arg-type]
    assert integral_float == binomial_subsampled_rdp(2, 0.3, [0.4])


@pytest.mark.parametrize(("call", "named"), [
    (lambda: binomial_subsampled_rdp(1, 0.1, [0.5]), "1"),
    (lambda: binomial_subsampled_rdp(2.5, 0.1, [0.5, 1.0]), "2.5"),  # type: ignore[arg-type]
    (lambda: binomial_subsampled_rdp(True, 0.1, [0.5]), "True"),
    (lambda: binomial_subsampled_rdp(2, 0.0, [0.5]), "0.0"),
    (lambda: binomial_subsampled_rdp(2, 1.5, [0.5]), "1.5"),
    (lambda: binomial_subsampled_rdp(2, math.nan, [0.5]), "nan"),
    (lambda: binomial_subsampled_rdp(4, 0.1, [0.5, 1.0]), "2..4"),
    (lambda: binomial_subsampled_rdp(3, 0.1, [0.5, math.nan]), "ε(3) = nan"),
    (lambda: binomial_subsampled_rdp(2, 0.1, [-0.5]), "ε(2) = -0.5"),
    (lambda: binomial_subsampled_rdp_curve(0.1, [0.5], [3]), "2..3"),
    (lambda: binomial_subsampled_rdp_curve(0.1, []), "order 2"),
])
def test_bad_input_is_named(call: Callable[[], object], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        call()


# --------------------------------------------------------------------------------------------
# The main job: DP-FedAvg on MNIST with secure aggregation (src/dpfl/configs/default.yaml)
# --------------------------------------------------------------------------------------------

#: MLP 784-64-10: 784·64 + 64 + 64·10 + 10 weights
MAIN_DIM = 784 * 64 + 64 + 64 * 10 + 10
#: γ = 2^16, Δ2 and Δ1 = min(Δ2², √d·Δ2) of the integer pipeline, μ = (1.5·Δ2)²
MAIN_L2 = 65536.59792279471
MAIN_L1 = 14784277.93328422
MAIN_MU = 9663852751.411636
MAIN_Q, MAIN_ROUNDS, MAIN_DELTA = 0.2, 100, 1e-5
MAIN_INTS = [max(2, int(math.ceil(o - 1e-12))) for o in DEFAULT_RDP_ORDERS]


def test_the_main_jobs_parameters_are_the_codes() -> None:
    from dpfl.algorithms.dp_fedavg import SecureSumOptions, secure_sum_calibration

    cal = secure_sum_calibration(SecureSumOptions(), dim=MAIN_DIM, clip_norm=1.0, noise_multiplier=1.5,
                                 num_clients=1000, max_cohort=1000, hidden=True, colluding=0)
    assert (cal.scale, cal.l2_sensitivity, cal.l1_sensitivity, cal.variance) == pytest.approx(
        (2.0 ** 16, MAIN_L2, MAIN_L1, MAIN_MU), rel=1e-12)


def _independent_main_job_epsilon() -> float:
    """The main job's ε written out again in mpmath (40 digits): AKL21 Thm 3.5 at each integer
    order, the binomial sum with exact binomial coefficients, 100-fold composition, and the
    RDP → (ε, δ) conversion of Canonne, Kamath, Steinke 2020 (Prop. 12), ε = r + log(1 − 1/α)
    − log(δα)/(α − 1) at the fractional order α with r priced at ⌈α⌉, minimised over the orders."""
    with mpmath.workdps(40):
        mu, d2, d1 = mpmath.mpf(MAIN_MU), mpmath.mpf(MAIN_L2), mpmath.mpf(MAIN_L1)
        q = mpmath.mpf(MAIN_Q)

        def eps(k: int) -> mpmath.mpf:
            return k * d2 ** 2 / (2 * mu) + min(((2 * k - 1) * d2 ** 2 + 6 * d1) / (4 * mu ** 2), 3 * d1 / (2 * mu))

        rdp: dict[int, mpmath.mpf] = {}
        for a in sorted(set(MAIN_INTS)):
            total = mpmath.mpf(0)
            for k in range(a + 1):
                moment = mpmath.exp((k - 1) * eps(k)) if k >= 2 else mpmath.mpf(1)
                total += mpmath.binomial(a, k) * (1 - q) ** (a - k) * q ** k * moment
            rdp[a] = min(mpmath.log(total) / (a - 1), eps(a))
        best = min(MAIN_ROUNDS * rdp[a] + mpmath.log(1 - 1 / mpmath.mpf(o))
                   - mpmath.log(MAIN_DELTA * mpmath.mpf(o)) / (mpmath.mpf(o) - 1)
                   for o, a in zip(DEFAULT_RDP_ORDERS, MAIN_INTS, strict=True))
        return float(best)


def test_the_main_jobs_epsilon() -> None:
    event = SkellamDpEvent(MAIN_MU, MAIN_L2, MAIN_L1)
    base = [skellam_rdp(a, event) for a in range(2, max(MAIN_INTS) + 1)]
    new = binomial_subsampled_rdp_curve(MAIN_Q, base, MAIN_INTS)
    after, order = rdp_acc.compute_epsilon(DEFAULT_RDP_ORDERS, MAIN_ROUNDS * new, MAIN_DELTA)
    assert after == pytest.approx(_independent_main_job_epsilon(), rel=1e-9)
    assert after == pytest.approx(8.4676, abs=5e-5) and order == 3.0
    # the ledger's Skellam pricing is this curve
    wired = skellam_rdp_vector(dpa.PoissonSampledDpEvent(MAIN_Q, event), "add_remove", DEFAULT_RDP_ORDERS)
    np.testing.assert_array_equal(wired, new)
    # what Zhu & Wang's general bound (factor 3) gave, and the Gaussian of the same σ at the same
    # (⌈α⌉) orders: the new figure sits just above the latter
    old = np.array([subsampled_rdp(a, MAIN_Q, base) for a in MAIN_INTS])
    before = rdp_acc.compute_epsilon(DEFAULT_RDP_ORDERS, MAIN_ROUNDS * old, MAIN_DELTA)[0]
    assert before == pytest.approx(11.2113, abs=5e-5)
    gauss = rdp_acc._compute_rdp_poisson_subsampled_gaussian(MAIN_Q, 1.5, MAIN_INTS)
    at_ceil = rdp_acc.compute_epsilon(DEFAULT_RDP_ORDERS, MAIN_ROUNDS * gauss, MAIN_DELTA)[0]
    assert at_ceil <= after <= at_ceil * (1 + 1e-8)
