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
    the quadrature at these settings): never below the definition — a certificate built on it
    cannot under-state ε."""
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
