"""Checks of the certified GDP parameter of the Skellam unit shift (``docs/proofs/skellam-gdp.md``,
:mod:`dpfl.privacy.releases.skellam_gdp`).

Every inequality the certificate uses is checked against an independent evaluation: mpmath's
``besseli`` at 40 digits (and, where mpmath's Bessel series is too slow, a Miller recurrence
written out here, cross-checked against ``besseli``), scipy's ``ive`` for large arguments, and a
brute force on the lattice for the trade-off curve. The exact η₁ (``exact_unit_eta``, mpmath over
the window 0 ≤ j ≤ ⌈10√V⌉ + 10) is shown to reach its maximum at j = 0, far inside the window,
D falling toward the window's end; since the certificate (which covers every j) is above it and
within a relative 1e-8 of it, the window's maximum is η₁ to that accuracy.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import special

from dpfl.privacy.releases import skellam_gdp as sg
from dpfl.privacy.releases.skellam_gdp import EtaCertificate, certified_unit_eta, exact_unit_eta

MAIN_JOB_VARIANCE = (1.5 * 65536.59792279471) ** 2  # docs/proofs/skellam-subsampling.md §5


# ----------------------------------------------------------------------------------------------
# independent references
# ----------------------------------------------------------------------------------------------


def _reference_pmf_tails(v: float, n: int, dps: int = 40) -> tuple[list[mpmath.mpf], list[mpmath.mpf]]:
    """p(0..n) and S(j) = P(Z > j), 0 ≤ j ≤ n, by Miller's recurrence normalized by p(0) from
    mpmath.besseli (an independent normalization from the module's, which uses Σ p = 1)."""
    with mpmath.workdps(dps):
        mv = mpmath.mpf(v)
        top = n + int(40 * math.sqrt(v)) + 100
        y = [mpmath.mpf(0)] * (top + 2)
        y[top] = mpmath.mpf(10) ** -30
        for i in range(top, 0, -1):  # I_{i−1} = (2i/V) I_i + I_{i+1}
            y[i - 1] = (2 * i / mv) * y[i] + y[i + 1]
        p0 = mpmath.besseli(0, mv) * mpmath.exp(-mv)
        pmf = [p0 * y[j] / y[0] for j in range(top + 1)]
        tail = [mpmath.mpf(0)] * (top + 1)
        for j in range(top - 1, -1, -1):
            tail[j] = tail[j + 1] + pmf[j + 1]
        return pmf[: n + 1], tail[: n + 1]


def _isf(s: mpmath.mpf) -> mpmath.mpf:
    """Φ̄⁻¹(s) in mpmath: Newton's method on Φ̄(x) = s itself, from scipy's double-precision start
    (written independently of the module's Newton on log Φ̄)."""
    x = mpmath.mpf(-float(special.ndtri(float(s)))) if float(s) > 0 else mpmath.sqrt(-2 * mpmath.log(s))
    for _ in range(60):
        step = (mpmath.erfc(x / mpmath.sqrt(2)) / 2 - s) / mpmath.npdf(x)
        x += step
        if abs(step) < mpmath.mpf(10) ** (-mpmath.mp.dps + 4) * (1 + abs(x)):
            break
    return x


def _exact_differences(v: float, n: int, at: np.ndarray | None = None) -> np.ndarray:
    """D(1..n) from the independent reference, 40 digits (or D(j) for j in ``at``, 1 <= j <= n)."""
    _, tail = _reference_pmf_tails(v, n)
    js = np.arange(1, n + 1) if at is None else np.asarray(at)
    with mpmath.workdps(40):
        cache: dict[int, mpmath.mpf] = {}

        def x(k: int) -> mpmath.mpf:
            if k not in cache:
                cache[k] = _isf(tail[k])
            return cache[k]

        return np.array([float(x(int(k)) - x(int(k) - 1)) for k in js])


# ----------------------------------------------------------------------------------------------
# the figures η₁·√V at V = 100 and 1000 and the exact η₁
# ----------------------------------------------------------------------------------------------


def test_the_figures_at_v_100_and_1000() -> None:
    # η₁·√(2μ) for Poisson(μ) − Poisson(μ): μ = 50 is V = 100, μ = 500 is V = 1000
    assert round(exact_unit_eta(100.0) * 10.0, 7) == 1.0016757
    assert round(exact_unit_eta(1000.0) * math.sqrt(1000.0), 7) == 1.0001668


@pytest.mark.parametrize("variance", [4.0, 10.0, 100.0, 1000.0, 1e4])
def test_certified_is_above_the_exact_and_close_to_it(variance: float) -> None:
    diffs = sg.exact_unit_differences(variance, dps=30)
    exact = max(diffs)
    # the window's maximum is at j = 0 and D falls toward its end
    assert int(np.argmax(diffs)) == 0
    assert diffs[-1] < diffs[len(diffs) // 2] < exact
    cert = certified_unit_eta(variance)
    assert isinstance(cert, EtaCertificate)
    # η₁ lies in [exact, cert.eta] (the certificate covers every j), an interval of relative
    # width 1e-8: the window is wide enough, and the window route is essentially exact
    assert cert.eta >= exact
    assert cert.eta <= exact * (1.0 + 1e-8)
    assert cert.ratio == pytest.approx(cert.eta * math.sqrt(variance), rel=1e-15)
    assert cert.method == "window+closed-form"


def test_exact_against_an_independent_evaluation() -> None:
    # D(0..40) at V = 30 by the module (Miller normalized by Σp = 1, Newton) and here (besseli
    # normalization, bisection)
    mine = np.array(sg.exact_unit_differences(30.0, dps=40)[1:41])
    ref = _exact_differences(30.0, 40)
    np.testing.assert_allclose(mine, ref, rtol=1e-20, atol=1e-25)


def test_symmetry_of_the_lattice_differences() -> None:
    # D(j) = D(−j) (Lemma 3), on the two-sided cdf computed term by term
    v = 10.0
    with mpmath.workdps(40):
        pmf = {j: mpmath.besseli(abs(j), v) * mpmath.exp(-v) for j in range(-80, 81)}
        cdf = {}
        run = mpmath.mpf(0)
        for j in range(-80, 81):
            run += pmf[j]
            cdf[j] = run
        def d(j: int) -> mpmath.mpf:
            return _isf(1 - cdf[j]) - _isf(1 - cdf[j - 1])
        for j in range(0, 8):
            assert abs(d(j) - d(-j)) < mpmath.mpf(10) ** -25


def test_gdp_on_the_lattice_brute_force() -> None:
    # Lemma 2: (Z, Z+1) is η-GDP iff F(k−2) >= Φ(Φ⁻¹(F(k−1)) − η) at every lattice point; the
    # certified η passes, 0.999·η₁ fails (at the centre)
    v = 4.0
    cert = certified_unit_eta(v)
    assert cert is not None
    j = np.arange(-200, 201)
    pmf = special.ive(np.abs(j), v)
    cdf = np.cumsum(pmf)
    alpha = 1.0 - cdf[:-1]  # P(Z >= k) for k = j + 1
    beta = np.concatenate([[0.0], cdf[:-2]])  # P(Z <= k − 2)
    inside = (alpha > 1e-12) & (alpha < 1 - 1e-12)
    gaussian = special.ndtr(special.ndtri(1.0 - alpha) - cert.eta)
    assert np.all(beta[inside] >= gaussian[inside] - 1e-13)
    # a grid of α between the lattice points: the chord polygon stays above G_η (G_η convex)
    grid = np.linspace(1e-9, 1 - 1e-9, 20001)
    order = np.argsort(alpha)
    polygon = np.interp(grid, alpha[order], beta[order])
    assert np.all(polygon >= special.ndtr(special.ndtri(1.0 - grid) - cert.eta) - 1e-12)
    tight = 0.999 * exact_unit_eta(v, dps=30)
    assert np.any(beta[inside] < special.ndtr(special.ndtri(1.0 - alpha) - tight)[inside] - 1e-9)


# ----------------------------------------------------------------------------------------------
# the inequalities the certificate uses
# ----------------------------------------------------------------------------------------------

NUS = [0, 1, 2, 3, 5, 10, 30, 100, 300, 1000, 3000]
XS = [0.05, 0.5, 1.0, 4.0, 10.0, 37.5, 100.0, 1000.0, 1e4]


def test_ratio_bounds_R_against_mpmath() -> None:
    # (R): V/(ν + 1/2 + √((ν+3/2)² + V²)) <= I_{ν+1}(V)/I_ν(V) <= V/(ν + 1/2 + √((ν+1/2)² + V²)),
    # the consequence (6.1) and the monotonicity in ν (log-concavity, Lemma 1)
    with mpmath.workdps(40):
        for x in XS:
            mx = mpmath.mpf(x)
            previous = None
            for nu in NUS:
                ratio = mpmath.besseli(nu + 1, mx) / mpmath.besseli(nu, mx)
                upper = mx / (nu + mpmath.mpf(0.5) + mpmath.sqrt((nu + mpmath.mpf(0.5)) ** 2 + mx * mx))
                lower = mx / (nu + mpmath.mpf(0.5) + mpmath.sqrt((nu + mpmath.mpf(1.5)) ** 2 + mx * mx))
                assert lower < ratio < upper, (nu, x)
                assert mpmath.log(1 / lower) <= mpmath.asinh((nu + mpmath.mpf(0.5)) / mx) + (nu + 1) / mx**2
                if previous is not None:
                    assert ratio < previous
                previous = ratio


def test_ratio_bounds_R_at_large_arguments_with_scipy() -> None:
    nu = np.array([0, 1, 10, 100, 1000, 3000, 10_000], dtype=float)
    for x in [1e5, 3e5]:
        ratio = special.ive(nu + 1, x) / special.ive(nu, x)
        upper = x / (nu + 0.5 + np.sqrt((nu + 0.5) ** 2 + x * x))
        lower = x / (nu + 0.5 + np.sqrt((nu + 1.5) ** 2 + x * x))
        assert np.all(ratio <= upper * (1 + 1e-14)) and np.all(ratio >= lower * (1 - 1e-14))


@pytest.mark.parametrize("variance", [4.0, 10.0, 100.0, 1999.5, 2000.0, 2000.5, 1e4, 1e6, 1e9, 1e12, 1e14])
def test_p0_enclosure(variance: float) -> None:
    lo, up = sg._p0_enclosure(variance)
    with mpmath.workdps(40):
        exact = mpmath.besseli(0, mpmath.mpf(variance)) * mpmath.exp(-mpmath.mpf(variance))
        assert lo <= exact <= up
    assert (up - lo) / float(exact) < 1e-13


@pytest.mark.parametrize("variance", [50.0, 3000.0, 2e5])
def test_closed_form_bounds_bracket_the_exact_values(variance: float) -> None:
    sd = math.sqrt(variance)
    n = int(min(40 * sd, 12 * variance))
    pmf, tail = _reference_pmf_tails(variance, n + 1)
    lo, up = sg._p0_enclosure(variance)
    closed = sg._ClosedForms(variance, lo, up)
    j = np.unique(np.linspace(1, n, 400).astype(np.int64))
    f = j.astype(float)
    log_p = np.array([float(mpmath.log(pmf[k])) for k in j])
    log_r = np.array([float(mpmath.log(tail[k - 1] / pmf[k])) for k in j])
    log_r_minus_1 = np.array([float(mpmath.log(tail[k] / pmf[k])) for k in j])
    assert np.all(closed.log_p_lo(f) <= log_p) and np.all(log_p <= closed.log_p_up(f))  # Lemma 5
    r_lo, r_minus_1_lo = closed.log_r_lo_pair(f)
    assert np.all(r_lo <= log_r) and np.all(log_r <= closed.log_r_up(f))  # Lemma 6
    assert np.all(r_minus_1_lo <= log_r_minus_1)
    # the width of (6.2)–(6.3) is the proof's, j(j+1)/(2V²) + 1/(4V), plus the §8 widenings
    gap = closed.log_p_up(f) - closed.log_p_lo(f)
    assert np.all(gap <= f * (f + 1) / (2 * variance**2) + 0.25 / variance + 1e-11 * (1 + np.abs(log_p)))


@pytest.mark.parametrize("variance", [10.0, 300.0, 2e5])
def test_pointwise_and_block_bounds_cover_the_exact_differences(variance: float) -> None:
    sd = math.sqrt(variance)
    n = int(min(30 * sd, 10 * variance))
    rng = np.random.default_rng(7)
    first = rng.integers(1, n - 40, 60)
    last = first + rng.integers(0, 40, 60)
    points = np.unique(np.concatenate([np.arange(1, 40), rng.integers(1, n, 60)]))
    needed = np.unique(np.concatenate([points] + [np.arange(a, b + 1) for a, b in zip(first, last, strict=True)]))
    exact = dict(zip(needed.tolist(), _exact_differences(variance, n, needed).tolist(), strict=True))
    lo, up = sg._p0_enclosure(variance)
    closed = sg._ClosedForms(variance, lo, up)
    assert np.all(closed.point(points) >= np.array([exact[k] for k in points]))  # Lemmas 7–9 at points
    left, right = closed.left(first), closed.right(last)
    point = sg._pointwise(closed, left, closed.right(first))
    target = max(exact.values()) * (1 + 1e-9)
    value = sg._block_value(closed, first, last, left, right, point, target)
    block_max = np.array([max(exact[k] for k in range(a, b + 1)) for a, b in zip(first, last, strict=True)])
    assert np.all(closed.block(first, last) >= block_max)  # Lemma 8
    assert np.all(value >= block_max)  # Lemma 9 (under the hypothesis where it closes)


@pytest.mark.parametrize("variance", [30.0, 500.0])
def test_window_route_covers_the_exact_differences(variance: float) -> None:
    lo, up = sg._p0_enclosure(variance)
    bound, start = sg._window_bound(variance, lo, up)
    exact = _exact_differences(variance, start - 1)
    assert bound >= exact.max()
    assert bound <= exact.max() * (1 + 1e-9)


def test_far_tail_lemma_10() -> None:
    # (10.4): G(u) = √(2u(ln 2u − 1)) − 1/2 − ln(5u) >= 0 for u >= 10, increasing
    u = np.geomspace(10.0, 1e15, 2000)
    g = np.sqrt(2 * u * (np.log(2 * u) - 1)) - 0.5 - np.log(5 * u)
    assert np.all(g > 0) and np.all(np.diff(g) > 0)
    # and the exact D(j) at j >= 10V is below 1/√V and below the closed form (10.3)
    for v in (4.0, 12.0):
        n = int(13 * v)
        exact = _exact_differences(v, n)
        for k in range(int(10 * v), n + 1):
            uu = k / v
            closed = math.log(5 * uu) / (math.sqrt(2 * v * uu * (math.log(2 * uu) - 1)) - 1)
            assert exact[k - 1] <= closed <= 1 / math.sqrt(v)


def test_euler_maclaurin_constant_and_bounds() -> None:
    # Lemma 6 (a): max|B_3| on [0, 1] is √3/36; Σ f(k) within the bounds for Gaussian-exponential f
    s = np.linspace(0.0, 1.0, 200_001)
    assert np.max(np.abs(s**3 - 1.5 * s**2 + 0.5 * s)) == pytest.approx(math.sqrt(3) / 36, rel=1e-9)
    for alpha, sigma in [(0.0, 3.0), (0.01, 30.0), (0.3, 10.0), (2.0, 5.0), (1e-3, 1e3)]:
        k = np.arange(0, int(40 * sigma + 40 / max(alpha, 1e-3)))
        total = math.fsum(np.exp(-alpha * k - k * k / (2 * sigma * sigma)))
        integral = sigma * float(sg._mills(np.array(alpha * sigma)))
        rem = sg._EM3 * (alpha * alpha + 5 / sigma**2)
        assert integral + 0.5 + alpha / 12 - rem <= total <= integral + 0.5 + alpha / 12 + rem


def test_floating_point_assumptions_of_section_8() -> None:
    # ndtri, ndtri_exp within 1e-12·(1 + |x|) of Φ̄⁻¹; erfcx and erfinv within 1e-13 relative
    with mpmath.workdps(40):
        for log_s in list(-np.geomspace(1e-6, 1e12, 120)) + [math.log(0.5)]:
            x = -float(special.ndtri_exp(log_s))
            err = (mpmath.log(mpmath.erfc(mpmath.mpf(x) / mpmath.sqrt(2)) / 2) - log_s) / (
                mpmath.npdf(x) / (mpmath.erfc(mpmath.mpf(x) / mpmath.sqrt(2)) / 2))
            assert abs(err) <= 1e-12 * (1 + abs(x))
        for s in np.geomspace(1e-300, 0.5, 120):
            x = -float(special.ndtri(s))
            err = (mpmath.erfc(mpmath.mpf(x) / mpmath.sqrt(2)) / 2 - s) / mpmath.npdf(x)
            assert abs(err) <= 1e-12 * (1 + abs(x))
        for z in list(np.linspace(-5, 5, 41)) + list(np.geomspace(1e-3, 1e9, 60)):
            exact = mpmath.exp(mpmath.mpf(z) ** 2) * mpmath.erfc(mpmath.mpf(z))
            assert abs(special.erfcx(z) / exact - 1) < 1e-13
        for p in np.geomspace(1e-9, 0.5, 60):
            assert abs(special.erfinv(p) / mpmath.erfinv(mpmath.mpf(p)) - 1) < 1e-13


# ----------------------------------------------------------------------------------------------
# the certificate as a whole
# ----------------------------------------------------------------------------------------------


def test_ratio_decreases_toward_one_and_stays_close() -> None:
    small = [1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8]
    ratios = [certified_unit_eta(v).ratio for v in small]  # type: ignore[union-attr]
    assert all(b < a for a, b in zip(ratios, ratios[1:], strict=False))
    assert ratios[-1] < 1 + 1e-6
    for v in [1e4, 1e6, 1e9, 1e10, 1e12, 1e14]:
        cert = certified_unit_eta(v)
        assert cert is not None and 1.0 < cert.ratio <= 1.0001
    assert certified_unit_eta(1e10).ratio < 1 + 1e-3  # type: ignore[union-attr]


def test_main_job_variance() -> None:
    cert = certified_unit_eta(MAIN_JOB_VARIANCE)
    assert cert is not None and cert.method == "closed-form"
    assert 1.0 < cert.ratio < 1.0001


@pytest.mark.parametrize("variance", [3.99, 0.0, -1.0, math.nan, math.inf, 1.01e14, "100", True, None])
def test_none_outside_the_certified_range(variance: object) -> None:
    assert certified_unit_eta(variance) is None  # type: ignore[arg-type]


def test_certificate_is_cached() -> None:
    first = certified_unit_eta(12345.0)
    hits = sg._certified.cache_info().hits
    second = certified_unit_eta(12345.0)
    assert second is first
    assert sg._certified.cache_info().hits == hits + 1
    assert certified_unit_eta(np.float64(12345.0)) is first
    assert certified_unit_eta(4) == certified_unit_eta(4.0)
