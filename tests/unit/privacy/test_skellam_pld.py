"""The Skellam sum's PLD route (issue: secure aggregation at the Gaussian's price).

dpfl prices a Skellam release by PLD as the Gaussian pair of noise multiplier 1/(η̄·Δ2) that
dominates it, η̄ the certified unit-shift GDP parameter of Sk(μ)
(:mod:`dpfl.privacy.releases.skellam_gdp`, ``docs/proofs/skellam-gdp.md``). These tests compute
the same figure by calling dp-accounting directly (the hand computation), and check the three
orderings the proof implies: the Gaussian of the same variance ≤ the new certificate ≤ the RDP
route, with the first within a stated margin.
"""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant as pld_acc

from dpfl.privacy.accounting.certify import DEFAULT_PLD_DISCRETIZATION, certify, rdp_epsilon
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import skellam as skellam_module
from dpfl.privacy.releases.skellam import SkellamDpEvent, SkellamRelease
from dpfl.privacy.releases.skellam_gdp import certified_unit_eta

ADD_REMOVE = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE


def _pld_direct(event: dpa.DpEvent, delta: float) -> float:
    acc = pld_acc.PLDAccountant(ADD_REMOVE, value_discretization_interval=DEFAULT_PLD_DISCRETIZATION)
    return float(acc.compose(event).get_epsilon(delta))


def _main_job_numbers() -> tuple[float, float, float]:
    """(μ, Δ2, Δ1) of the main job's secure sum (``configs/default.yaml``: MLP 784-64-10, 50,890
    coordinates, S = 1, z = 1.5, 1,000 clients under hidden participation), as dp-fedavg
    calibrates its integer pipeline."""
    from dpfl.algorithms.dp_fedavg import secure_sum_calibration
    from dpfl.algorithms.options import SecureSumOptions

    cal = secure_sum_calibration(SecureSumOptions(), dim=50_890, clip_norm=1.0, noise_multiplier=1.5,
                                 num_clients=1000, max_cohort=1000, hidden=True, colluding=0)
    return cal.variance, cal.l2_sensitivity, cal.l1_sensitivity


def test_a_sampled_skellam_sum_is_priced_as_the_dominating_sampled_gaussian() -> None:
    mu, d2, d1, q, rounds, delta = 4.0e6, 1500.0, 9000.0, 0.2, 100, 1e-5
    eta = certified_unit_eta(mu)
    assert eta is not None
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, SkellamDpEvent(mu, d2, d1)), rounds)
    cert = certify(event, delta, relation="add_remove", privacy_unit="client")
    hand = _pld_direct(dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(1.0 / (eta.eta * d2))), rounds), delta)
    assert cert.method == "pld"
    assert cert.epsilon_pld == pytest.approx(hand, rel=1e-12)
    assert any("pairs that dominate" in n and "skellam-gdp" in n for n in cert.notes)
    # the Gaussian of the same variance (noise multiplier √μ/Δ2) is a lower reference; RDP an upper one
    same_variance = _pld_direct(dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(math.sqrt(mu) / d2)), rounds), delta)
    eps_rdp, _ = rdp_epsilon(event, delta, "add_remove")
    assert eps_rdp is not None
    assert same_variance <= cert.epsilon <= eps_rdp


def test_the_main_jobs_certificate_is_within_one_percent_of_the_gaussians() -> None:
    mu, d2, d1 = _main_job_numbers()
    eta = certified_unit_eta(mu)
    assert eta is not None and eta.ratio < 1 + 1e-3
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.2, SkellamDpEvent(mu, d2, d1)), 100)
    cert = certify(event, 1e-5, relation="add_remove", privacy_unit="client")
    gaussian = _pld_direct(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(1.5)), 100), 1e-5)
    assert cert.epsilon_rdp == pytest.approx(8.4676, abs=5e-4)  # the RDP route, unchanged
    assert gaussian <= cert.epsilon <= gaussian * 1.01
    assert cert.epsilon <= 7.6


def test_visible_participation_is_the_exact_gaussian_composition() -> None:
    # the unamplified pairs compose to a Gaussian of μ_total = η̄Δ2·√T: closed form, no grid
    mu, d2, d1, rounds, delta = 2.5e7, 4000.0, 20_000.0, 30, 1e-5
    eta = certified_unit_eta(mu)
    assert eta is not None
    cert = certify(dpa.SelfComposedDpEvent(SkellamDpEvent(mu, d2, d1), rounds), delta, relation="add_remove",
                   privacy_unit="client")
    gdp_mu = eta.eta * d2 * math.sqrt(rounds)
    # Balle & Wang 2018, Thm 8: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2); the certificate's ε solves it
    from scipy.stats import norm

    def delta_at(e: float) -> float:
        return float(norm.cdf(-e / gdp_mu + gdp_mu / 2) - math.exp(e) * norm.cdf(-e / gdp_mu - gdp_mu / 2))

    assert cert.method == "pld"
    assert delta_at(cert.epsilon) == pytest.approx(delta, rel=1e-6)


def test_an_uncertified_variance_falls_back_to_rdp_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skellam_module, "certified_unit_eta", lambda variance: None)
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.3, SkellamDpEvent(900.0, 10.0, 30.0)), 5)
    cert = certify(event, 1e-5, relation="add_remove", privacy_unit="client")
    assert cert.method == "rdp" and cert.epsilon_pld is None
    assert any("no certified Gaussian domination" in n and "900" in n for n in cert.notes)


def test_a_ledger_of_hidden_participation_prices_server_and_public_by_the_pld() -> None:
    mu, d2, d1, q = 4.0e6, 1500.0, 9000.0, 0.3
    ledger = PrivacyLedger(num_clients=10, sampler={"kind": "poisson", "sample_rate": q}, delta=1e-5,
                           relation="add_remove", privacy_unit="client", pld_every=0)
    for t in range(5):
        rels = [SkellamRelease("server", mu, d2, d1, None, amplifiable=True),
                SkellamRelease("public", mu, d2, d1, None, amplifiable=True)]
        ledger.record_round(t, rels, sampling={"kind": "poisson", "sample_rate": q}, participants=[1, 2])
    eta = certified_unit_eta(mu)
    assert eta is not None
    hand = _pld_direct(dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(1.0 / (eta.eta * d2))), 5), 1e-5)
    for observer in ("server", "public"):
        cert = ledger.certify(observer)
        assert cert.method == "pld" and cert.epsilon == pytest.approx(hand, rel=1e-9)
