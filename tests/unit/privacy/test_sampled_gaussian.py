"""The vectorized RDP of the (Poisson-sampled) Gaussian against dp-accounting and against the
definition integrated numerically."""

from __future__ import annotations

import logging
import math
import warnings

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from scipy import integrate, stats

from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS, rdp_vector
from dpfl.privacy.accounting.sampled_gaussian import gaussian_rdp, sampled_gaussian_rdp

RATES = [1e-5, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.9, 0.999]
SIGMAS = [0.1, 0.5, 0.8, 1.0, 2.0, 5.0, 20.0, 1000.0]


def _reference(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(rdp_acc._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders), dtype=np.float64)


@pytest.mark.parametrize("q", RATES)
def test_equals_dp_accounting_at_every_default_order(q: float) -> None:
    """Same ∞ orders (series not converged) and the same finite values: within 1e-15 absolute
    (the curve is often 1e-12 or less, where both lose their relative digits to rounding) plus
    1e-10 relative."""
    for sigma in SIGMAS:
        ref = _reference(q, sigma, DEFAULT_RDP_ORDERS)
        got = sampled_gaussian_rdp(q, sigma, DEFAULT_RDP_ORDERS)
        assert np.array_equal(np.isinf(got), np.isinf(ref)), (q, sigma)
        finite = ~np.isinf(ref)
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-10, atol=1e-15, err_msg=f"q={q} sigma={sigma}")


def test_unconverged_orders_are_infinite_and_logged_as_in_dp_accounting(caplog: pytest.LogCaptureFixture) -> None:
    ref = _reference(0.9, 1.0, (1.05, 1.5, 2.0))
    assert np.isinf(ref[0]) and np.isfinite(ref[2])
    with caplog.at_level(logging.DEBUG, logger="dpfl.privacy.accounting.sampled_gaussian"):
        got = sampled_gaussian_rdp(0.9, 1.0, (1.05, 1.5, 2.0))
    assert np.array_equal(np.isinf(got), np.isinf(ref))
    assert "did not converge after 1000 terms with q=0.9, sigma=1.0, alpha=1.05" in caplog.text


def _rdp_by_integration(q: float, sigma: float, alpha: float) -> float:
    """RDP of order α of the sampled Gaussian from its definition (add/remove one: the worse of
    D_α(μ‖μ₀) and D_α(μ₀‖μ) with μ₀ = N(0, σ²), μ = (1−q) N(0, σ²) + q N(1, σ²); Mironov, Talwar,
    Zhang 2019, Sec. 3 shows the first is the larger) by adaptive quadrature of A − 1 (A is close
    to 1: integrating A itself would lose the digits that matter)."""
    def log_ratio(x: float) -> float:  # log μ(x)/μ₀(x)
        return math.log1p(q * math.expm1((2 * x - 1) / (2 * sigma**2)))

    def excess(power: float) -> float:
        def f(x: float) -> float:
            return float(stats.norm.pdf(x, scale=sigma)) * math.expm1(power * log_ratio(x))
        lo, hi = -40 * sigma, 40 * sigma + 1
        return integrate.quad(f, lo, hi, points=[0.0, 0.5, 1.0], limit=1000, epsabs=1e-300, epsrel=1e-13)[0]

    return max(math.log1p(excess(alpha)), math.log1p(excess(1 - alpha))) / (alpha - 1)


@pytest.mark.parametrize(("q", "sigma", "alpha"), [(0.1, 1.0, 2.0), (0.1, 1.0, 8.0), (0.3, 1.5, 5.0), (0.5, 4.0, 12.0)])
def test_integer_orders_equal_the_definition_integrated_numerically(q: float, sigma: float, alpha: float) -> None:
    """An independent check of the formulas (not of dp-accounting's code): at integer orders the
    binomial expansion is exact, within 1e-10 relative of the quadrature."""
    got = float(sampled_gaussian_rdp(q, sigma, (alpha,))[0])
    assert got == pytest.approx(_rdp_by_integration(q, sigma, alpha), rel=1e-10)


@pytest.mark.parametrize(("q", "sigma", "alpha"), [(0.1, 1.0, 2.5), (0.01, 2.0, 3.7), (0.05, 0.8, 4.5),
                                                   (0.2, 3.0, 1.8)])
def test_fractional_orders_bound_the_definition_from_above(q: float, sigma: float, alpha: float) -> None:
    """At fractional orders the series (Sec. 3.3, as dp-accounting sums it) adds the binomial
    coefficients' absolute values, so it bounds the RDP from above (measured: 5e-7 to 42% above
    the quadrature at these settings) up to its truncated tail (about 1e-13 relative, when it
    stops before i > α + 1): a certificate built on it does not under-state ε beyond that."""
    got = float(sampled_gaussian_rdp(q, sigma, (alpha,))[0])
    exact = _rdp_by_integration(q, sigma, alpha)
    assert got >= exact * (1 - 1e-10)
    assert got <= 1.5 * exact


def test_edges() -> None:
    orders = (1.5, 2.0, 32.0, math.inf)
    assert np.array_equal(sampled_gaussian_rdp(0.0, 1.0, orders), np.zeros(4))
    np.testing.assert_array_equal(sampled_gaussian_rdp(1.0, 2.0, orders), [1.5 / 8, 2.0 / 8, 32.0 / 8, math.inf])
    assert np.isinf(sampled_gaussian_rdp(0.1, 0.0, orders)).all()
    assert np.isinf(sampled_gaussian_rdp(0.1, 1.0, orders)[3])
    np.testing.assert_array_equal(gaussian_rdp(0.5, orders), np.asarray(orders) / 0.5)
    with pytest.raises(ValueError, match="Sampling rate must be in"):
        sampled_gaussian_rdp(1.5, 1.0, orders)
    with pytest.raises(ValueError, match="non-negative"):
        sampled_gaussian_rdp(0.1, -1.0, orders)


def test_rdp_vector_of_a_mixed_event_equals_the_accountant() -> None:
    """The certificate's curve: Gaussians and sampled Gaussians by the closed forms, the other
    leaves (here a Laplace) by dp-accounting's accountant, summed; against the accountant
    composing the whole event."""
    event = dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.0)), 500),
        dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(0.3), 7),
        dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(0.7)),
        dpa.LaplaceDpEvent(2.0),
    ])
    acc = rdp_acc.RdpAccountant(list(DEFAULT_RDP_ORDERS), dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(event)
    np.testing.assert_allclose(rdp_vector(event, "add_remove"), acc._rdp, rtol=1e-10, atol=1e-15)


def _stop_index_by_definition(q: float, sigma: float, alpha: float) -> int | None:
    """The fractional series' stopping index from the module's text, one term at a time: the
    first i >= 1 at which both terms fell and the larger is 30 nats below the running total."""
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    a0 = a1 = -math.inf
    last = (-math.inf, -math.inf)
    for i in range(1000):
        j = alpha - i
        coef = math.lgamma(alpha + 1) - math.lgamma(i + 1) - math.lgamma(alpha - i + 1)
        # ½ erfc(x / √2σ) = Φ(−x / σ)
        s0 = coef + i * math.log(q) + j * math.log1p(-q) + (i * i - i) / (2 * sigma**2) + float(
            stats.norm.logcdf(-(i - z0) / sigma))
        s1 = coef + j * math.log(q) + i * math.log1p(-q) + (j * j - j) / (2 * sigma**2) + float(
            stats.norm.logcdf(-(z0 - j) / sigma))
        a0, a1 = np.logaddexp(a0, s0), np.logaddexp(a1, s1)
        if i >= 1 and s0 < last[0] and s1 < last[1] and max(s0, s1) < np.logaddexp(a0, a1) - 30:
            return i
        last = (s0, s1)
    return None


@pytest.mark.parametrize(("q", "sigma", "alpha"), [(0.1, 1.0, 2.5), (0.01, 2.0, 3.7), (0.05, 0.8, 4.5),
                                                   (0.2, 3.0, 1.8), (0.05, 5.0, 20.5), (0.5, 0.5, 7.3),
                                                   (1e-4, 30.0, 1.2), (0.9, 1.0, 1.07)])
def test_fractional_series_stops_where_the_rule_says(q: float, sigma: float, alpha: float) -> None:
    """The vectorized series stops at the first index the rule allows (found by giving it k terms
    and finding the smallest k that stops), and at none when the rule never fires (∞)."""
    from dpfl.privacy.accounting import sampled_gaussian as sg

    expected = _stop_index_by_definition(q, sigma, alpha)
    a = np.asarray([alpha])
    stops = [k for k in range(1, 1001) if bool(sg._frac_series(q, sigma, a, k)[1][0])]
    got = stops[0] - 1 if stops else None
    assert got == expected
    if expected is None:
        assert np.isinf(sampled_gaussian_rdp(q, sigma, (alpha,))[0])


def test_integer_orders_with_tied_largest_terms() -> None:
    """q = 1/2 without noise (σ = ∞): the binomial terms are symmetric, tied at their peak for odd
    α, and sum to exactly 1: RDP 0 (the module's log-sum must count every tied term)."""
    got = sampled_gaussian_rdp(0.5, math.inf, (2.0, 3.0, 5.0, 64.0))
    np.testing.assert_allclose(got, 0.0, atol=1e-15)


def test_a_failed_computation_is_infinite_never_zero() -> None:
    """σ so small that σ² underflows: dp-accounting's arithmetic gives NaN, which its conversion
    would read as ε = 0; here every such order is ∞, and so is ε."""
    from dpfl.privacy.accounting.certify import epsilons_from_rdp

    event = dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1e-170))
    vec = rdp_vector(event, "add_remove")
    assert not np.isnan(vec).any() and np.isinf(vec).all()
    assert np.isinf(epsilons_from_rdp(DEFAULT_RDP_ORDERS, vec[None, :], 1e-5)[0])
    # a NaN at one order excludes that order only
    curve = rdp_vector(dpa.GaussianDpEvent(1.0), "add_remove")
    with_nan = curve.copy()
    with_nan[5] = np.nan
    dropped = curve.copy()
    dropped[5] = np.inf
    assert epsilons_from_rdp(DEFAULT_RDP_ORDERS, with_nan[None, :], 1e-5)[0] == epsilons_from_rdp(
        DEFAULT_RDP_ORDERS, dropped[None, :], 1e-5)[0]
