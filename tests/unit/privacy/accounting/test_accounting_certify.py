"""Certified epsilon (dpfl.privacy.accounting.certify) against dp_accounting called directly and
against published reference values."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from scipy import optimize, stats

from dpfl.errors import ConfigError
from dpfl.privacy.accounting import calibrate as cal
from dpfl.privacy.accounting import certify as cf
from dpfl.privacy.accounting.events import drop_sampling, gaussian_rounds_event

COARSE = 1e-2  # PLD grid in tests (pessimistic: coarser only over-estimates epsilon)
ADD, REPLACE = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, dpa.NeighboringRelation.REPLACE_ONE


def _f(x: float | None) -> float:
    assert x is not None
    return x


def _poisson(z: float, q: float, t: int) -> dpa.DpEvent:
    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), t)


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """Independent exact epsilon of a Gaussian with shift/std = mu (Balle & Wang 2018, Thm 8):
    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)."""

    def gap(eps: float) -> float:
        return stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu) - delta

    return optimize.brentq(gap, 0.0, 10 * mu * mu + 50)


# ---------------------------------------------------------------- against dp_accounting directly


def test_poisson_gaussian_matches_dp_accounting() -> None:
    event, delta = _poisson(1.0, 0.04, 300), 1e-5
    cert = cf.certify(event, delta, relation="add_remove", privacy_unit="client", pld_discretization=COARSE)
    direct_rdp = rdp.RdpAccountant().compose(event).get_epsilon(delta)
    direct_pld = pld.PLDAccountant(ADD, value_discretization_interval=COARSE).compose(event).get_epsilon(delta)
    assert cert.epsilon_rdp == pytest.approx(direct_rdp, rel=1e-12)
    assert cert.epsilon_pld == pytest.approx(direct_pld, rel=1e-12)
    assert cert.epsilon == min(direct_rdp, direct_pld)
    assert cert.method == "pld" and cert.relation == "add_remove" and cert.privacy_unit == "client"


@pytest.mark.parametrize("z", [0.7, 1.0, 3.0])
def test_single_gaussian_is_exact(z: float) -> None:
    # the tight single-release delta(eps) of the Gaussian mechanism (Balle & Wang 2018)
    cert = cf.certify(dpa.GaussianDpEvent(z), 1e-5, relation="add_remove", privacy_unit="record")
    assert cert.epsilon_pld == pytest.approx(_exact_gaussian_epsilon(1 / z, 1e-5), rel=1e-7)
    direct = pld.PLDAccountant(ADD, value_discretization_interval=1e-3).compose(dpa.GaussianDpEvent(z))
    assert cert.epsilon_pld == pytest.approx(direct.get_epsilon(1e-5), abs=2e-3)
    assert _f(cert.epsilon_rdp) >= _f(cert.epsilon_pld)  # the RDP conversion is never tighter than exact


def test_replace_one_gaussian_uses_the_shift_not_dp_accountings_norm_bound() -> None:
    # dpfl's multiplier is noise / (replace-one sensitivity). dp_accounting's PLD under REPLACE_ONE
    # reads a multiplier relative to a norm bound (shift 2/z) and would over-charge by 2x shift.
    z, delta = 2.0, 1e-5
    cert = cf.certify(dpa.GaussianDpEvent(z), delta, relation="replace_one", privacy_unit="record")
    assert cert.epsilon_pld == pytest.approx(_exact_gaussian_epsilon(1 / z, delta), rel=1e-7)
    raw = pld.PLDAccountant(REPLACE, value_discretization_interval=1e-3).compose(dpa.GaussianDpEvent(z))
    assert raw.get_epsilon(delta) == pytest.approx(_exact_gaussian_epsilon(2 / z, delta), abs=2e-3)
    # RDP reads the shift under both relations
    assert cert.epsilon_rdp == pytest.approx(
        rdp.RdpAccountant(neighboring_relation=REPLACE).compose(dpa.GaussianDpEvent(z)).get_epsilon(delta)
    )


def test_changing_noise_is_composed_as_it_happened() -> None:
    # CRD: 120 rounds at z = 4, then T shrinks and 30 rounds at z = 3 (noise recomputed, eq. 25)
    zs = [4.0] * 120 + [3.0] * 30
    cert = cf.certify(gaussian_rounds_event(zs), 1e-3, relation="replace_one", privacy_unit="record")
    mu = math.sqrt(sum(1 / z**2 for z in zs))  # composition of Gaussians is Gaussian
    assert cert.epsilon_pld == pytest.approx(_exact_gaussian_epsilon(mu, 1e-3), rel=1e-7)
    direct = rdp.RdpAccountant(neighboring_relation=REPLACE)
    for z in zs:
        direct.compose(dpa.GaussianDpEvent(z))
    assert cert.epsilon_rdp == pytest.approx(direct.get_epsilon(1e-3), rel=1e-10)
    constant = cf.certify(gaussian_rounds_event([4.0] * 150), 1e-3, relation="replace_one", privacy_unit="record")
    assert cert.epsilon > constant.epsilon


# ---------------------------------------------------------------- published reference values


TF_PRIVACY_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


@pytest.mark.parametrize(
    ("noise_multiplier", "epochs", "published"),
    [(1.12, 60, 2.92), (0.6, 30, 9.74), (1.2, 10, 1.20)],
)
def test_tf_privacy_tutorial_table(noise_multiplier: float, epochs: int, published: float) -> None:
    """TensorFlow Privacy, tutorials/README.md, "Select Parameters" table (MNIST, 60000 examples,
    batch 256, delta = 1e-5, RDP accountant with orders 1.1..10.9, 12..63 and the classical
    conversion eps = min_a rdp(a) + ln(1/delta)/(a - 1))."""
    steps = math.ceil(epochs * 60000 / 256)
    event = _poisson(noise_multiplier, 256 / 60000, steps)
    curve = cf.rdp_vector(event, "add_remove", TF_PRIVACY_ORDERS)
    classical = float(np.min(curve + math.log(1 / 1e-5) / (np.array(TF_PRIVACY_ORDERS) - 1)))
    assert classical == pytest.approx(published, abs=0.03)
    # dpfl's certificate uses dp_accounting's improved conversion and PLD: never looser
    cert = cf.certify(event, 1e-5, relation="add_remove", privacy_unit="record", pld_discretization=COARSE)
    assert cert.epsilon <= published + 0.01


def test_abadi_2016_moments_accountant_example() -> None:
    """Abadi et al. 2016, "Deep Learning with Differential Privacy", §3.1: q = 0.01, sigma = 4,
    delta = 1e-5, T = 10000 gives eps ~ 1.26 by the moments accountant (an upper bound)."""
    cert = cf.certify(_poisson(4.0, 0.01, 10000), 1e-5, relation="add_remove", privacy_unit="record", pld=False)
    assert 0.9 < _f(cert.epsilon_rdp) <= 1.26


def test_udp_theorem_1_noise_at_q_1_certifies_about_30() -> None:
    """Audit of 000 (issue 3): Thm 1 noise for eps = 20, q = 1, T = 200, delta = 1e-3 certifies ~30."""
    z = math.sqrt(2 * 1.0 * 200 * math.log(1e3)) / 20  # sigma / Delta of eq. 10
    event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), 200)
    cert = cf.certify(event, 1e-3, relation="replace_one", privacy_unit="record")
    assert 29.0 < cert.epsilon < 32.0
    assert cert.epsilon_rdp == pytest.approx(
        rdp.RdpAccountant(neighboring_relation=REPLACE).compose(event).get_epsilon(1e-3)
    )


def test_udp_theorem_1_noise_under_fixed_size_sampling_certifies_about_twice() -> None:
    """Issue 3: Thm 1 noise for eps = 20, q = 0.6 (30 of 50), T = 200 certifies roughly 2x."""
    z = math.sqrt(2 * 0.6 * 200 * math.log(1e3)) / 20
    event = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(50, 30, dpa.GaussianDpEvent(z)), 200)
    cert = cf.certify(event, 1e-3, relation="replace_one", privacy_unit="record")
    assert 35.0 < cert.epsilon < 50.0  # ~44.8: about twice the claimed 20
    direct_rdp = rdp.RdpAccountant(neighboring_relation=REPLACE).compose(event).get_epsilon(1e-3)
    assert cert.epsilon_rdp == pytest.approx(direct_rdp)
    # PLD cannot amplify sampling without replacement: it is computed without it, and says so
    assert cert.epsilon_pld == pytest.approx(
        cf.certify(drop_sampling(event), 1e-3, relation="replace_one", privacy_unit="record").epsilon_pld
    )
    assert any("without the amplification" in n for n in cert.notes)
    assert cert.epsilon == min(_f(cert.epsilon_rdp), _f(cert.epsilon_pld))


def test_unsupported_amplification_is_dropped_with_a_note() -> None:
    event = _poisson(1.0, 0.1, 10)
    cert = cf.certify(event, 1e-5, relation="replace_one", privacy_unit="record", pld_discretization=COARSE)
    plain = cf.certify(drop_sampling(event), 1e-5, relation="replace_one", privacy_unit="record")
    assert cert.epsilon_rdp == pytest.approx(plain.epsilon_rdp)
    assert any("not certified under replace_one" in n for n in cert.notes)


def test_two_point_best_of_pure_rdp_pld() -> None:
    rr = dpa.RandomizedResponseDpEvent(2 / (1 + math.e), 2)  # eps = 1 per report
    cert = cf.certify(dpa.SelfComposedDpEvent(rr, 50), 1e-6, relation="replace_one", privacy_unit="client",
                      pld_discretization=COARSE)
    assert cert.epsilon_pure == pytest.approx(50.0)
    # Independent PLD: dp-accounting's own randomized-response PLD composed 50 times (its
    # PLDAccountant would compose the event only once, see the test below).
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    direct = pld_mod.from_randomized_response(
        noise_parameter=rr.noise_parameter, num_buckets=2, value_discretization_interval=COARSE,
        neighboring_relation=REPLACE,
    ).self_compose(50).get_epsilon_for_delta(1e-6)
    assert cert.epsilon_pld == pytest.approx(direct)
    assert 20.0 < cert.epsilon_pld < 50.0
    assert cert.epsilon == min(_f(cert.epsilon_pure), _f(cert.epsilon_rdp), _f(cert.epsilon_pld)) < 50.0


def test_non_private_release_is_infinite() -> None:
    cert = cf.certify(dpa.NonPrivateDpEvent(), 1e-5, relation="add_remove", privacy_unit="client")
    assert math.isinf(cert.epsilon)
    assert cert.to_dict()["epsilon"] == "inf"
    assert cf.Certificate.from_dict(cert.to_dict()) == cert


# ---------------------------------------------------------------- inverse


def test_calibration_meets_the_target_tightly_rdp() -> None:
    def make(z: float) -> dpa.DpEvent:
        return _poisson(z, 0.05, 200)

    z = cal.calibrate_noise_multiplier(make, 3.0, 1e-5, relation="add_remove", method="rdp")
    assert rdp.RdpAccountant().compose(make(z)).get_epsilon(1e-5) <= 3.0
    assert rdp.RdpAccountant().compose(make(z * 0.995)).get_epsilon(1e-5) > 3.0


def test_calibration_of_unsampled_gaussians_matches_the_analytic_gaussian() -> None:
    # T Gaussians at z compose to one at z / sqrt(T): z = sqrt(T) * sigma_analytic(eps, delta)
    t = 25
    z = cal.calibrate_noise_multiplier(
        lambda x: dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(x), t), 2.0, 1e-5, relation="replace_one", method="pld"
    )
    assert z == pytest.approx(math.sqrt(t) * dpa.get_sigma_gaussian(2.0, 1e-5), rel=1e-4)


def test_calibration_best_is_the_smaller_valid_answer() -> None:
    def make(z: float) -> dpa.DpEvent:
        return _poisson(z, 0.05, 100)

    best = cal.calibrate_noise_multiplier(make, 2.0, 1e-5, relation="add_remove", pld_discretization=COARSE)
    by_rdp = cal.calibrate_noise_multiplier(make, 2.0, 1e-5, relation="add_remove", method="rdp")
    assert best <= by_rdp
    assert cf.certify(make(best), 1e-5, relation="add_remove", privacy_unit="client",
                      pld_discretization=COARSE).epsilon <= 2.0 + 1e-9


def test_calibration_rejects_bad_targets() -> None:
    with pytest.raises(ConfigError, match="target_epsilon"):
        cal.calibrate_noise_multiplier(lambda z: dpa.GaussianDpEvent(z), 0.0, 1e-5, relation="add_remove")


# ---------------------------------------------------------------- participation bound


@pytest.mark.parametrize(("t", "q", "tail"), [(200, 0.6, 5e-4), (1000, 0.04, 1e-5), (10, 0.5, 0.1)])
def test_binomial_upper_bound_is_the_smallest_valid_k(t: int, q: float, tail: float) -> None:
    k = cal.binomial_upper_bound(t, q, tail)
    assert stats.binom.sf(k, t, q) <= tail
    assert k == 0 or stats.binom.sf(k - 1, t, q) > tail


def test_certify_validates_inputs() -> None:
    with pytest.raises(ConfigError, match="delta"):
        cf.certify(dpa.GaussianDpEvent(1.0), 1.5, relation="add_remove", privacy_unit="client")
    with pytest.raises(ConfigError, match="relation"):
        cf.certify(dpa.GaussianDpEvent(1.0), 1e-5, relation="swap", privacy_unit="client")
    with pytest.raises(ConfigError, match="privacy_unit"):
        cf.certify(dpa.GaussianDpEvent(1.0), 1e-5, relation="add_remove", privacy_unit="user")


def test_composed_two_point_reports_are_not_certified_as_one() -> None:
    """dp-accounting 0.6.0's PLDAccountant composes a randomized-response event once whatever
    its count; the certificate must still compose all 100 reports (limits: RDP above, pure
    composition 100·ε = 100 above, and far more than the single-report ε = 1 below)."""
    import math

    from dpfl.privacy.accounting.certify import certify

    rr = dpa.RandomizedResponseDpEvent(2 / (1 + math.e), 2)  # ε = 1 per report
    cert = certify(dpa.SelfComposedDpEvent(rr, 100), 1e-6, relation="replace_one",
                   privacy_unit="client", observer="server")
    assert cert.epsilon_pld is not None
    assert 50.0 < cert.epsilon <= 100.0
    assert cert.epsilon <= cert.epsilon_rdp + 1e-9
    # three reports at δ = 0 compose exactly to 3 (pure composition is tight for RR)
    three = certify(dpa.SelfComposedDpEvent(rr, 3), 1e-12, relation="replace_one",
                    privacy_unit="client", observer="server")
    assert three.epsilon == pytest.approx(3.0, rel=1e-5)
