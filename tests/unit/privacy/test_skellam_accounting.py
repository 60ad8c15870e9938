"""The Skellam mechanism's RDP (AKL21 Thm 3.5) and its Poisson amplification (the binomial
expansion without the factor 3 of Zhu & Wang 2019's general bound, which is also kept and checked
here: docs/proofs/skellam-subsampling.md), checked against values computed independently: the
exact Rényi divergence of the
Skellam distribution and its shifts (scipy's Bessel functions), the exact privacy-loss
distribution of a concrete neighbouring pair (dp-accounting's PLD from two probability mass
functions), and dp-accounting's Gaussian accountant in the limit where Skellam is Gaussian."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_mod
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from scipy.special import ive, logsumexp

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS, certify, rdp_vector
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release, SkellamRelease
from dpfl.privacy.releases.skellam import (
    SkellamDpEvent,
    skellam_rdp,
    skellam_rdp_vector,
    skellam_tail_log_probability,
    subsampled_rdp,
)


def _log_pmf(mu: float, half_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and log pmf of Sk(μ) (variance μ): P(k) = e^{-μ} I_|k|(μ)."""
    k = np.arange(-half_width, half_width + 1)
    with np.errstate(divide="ignore"):
        return k, np.log(ive(np.abs(k), mu))


def _exact_divergence(mu: float, shift: int, alpha: int, q: float = 1.0) -> float:
    """max over both directions of D_α between Sk(μ) and (1−q)·Sk(μ) + q·Sk(μ)+shift (1-D, exact
    up to the mass beyond ±(30√μ + 50), which underflows to 0 in double precision)."""
    half = int(30 * math.sqrt(mu)) + abs(shift) + 50
    k, lp = _log_pmf(mu, half)
    shifted = np.roll(lp, shift)
    inner = slice(abs(shift), len(k) - abs(shift))
    lp, lm = lp[inner], shifted[inner]
    lmix = np.logaddexp(math.log1p(-q) + lp, math.log(q) + lm) if q < 1 else lm
    ok = np.isfinite(lp) & np.isfinite(lmix)
    lp, lmix = lp[ok], lmix[ok]
    one = logsumexp(alpha * lmix + (1 - alpha) * lp) / (alpha - 1)
    two = logsumexp(alpha * lp + (1 - alpha) * lmix) / (alpha - 1)
    return float(max(one, two))


@pytest.mark.parametrize("mu", [2.0, 10.0, 100.0])
@pytest.mark.parametrize("shift", [1, 2, 5])
@pytest.mark.parametrize("alpha", [2, 3, 8, 32])
def test_the_bound_is_above_the_exact_divergence_in_one_dimension(mu: float, shift: int, alpha: int) -> None:
    exact = _exact_divergence(mu, shift, alpha)
    bound = skellam_rdp(alpha, SkellamDpEvent(mu, float(shift), float(shift)))
    assert exact <= bound * (1 + 1e-9)


@pytest.mark.parametrize("vector", [(1, 1), (2, 1), (3, 2, 1)])
@pytest.mark.parametrize("alpha", [2, 4, 16])
def test_the_bound_covers_multi_dimensional_shifts(vector: tuple[int, ...], alpha: int) -> None:
    # independent coordinates: the divergence of the product is the sum of the coordinates'
    mu = 20.0
    exact = sum(_exact_divergence(mu, j, alpha) for j in vector)
    l2, l1 = math.sqrt(sum(j * j for j in vector)), float(sum(vector))
    assert exact <= skellam_rdp(alpha, SkellamDpEvent(mu, l2, l1)) * (1 + 1e-9)


def test_the_bound_is_tight_where_skellam_is_nearly_gaussian() -> None:
    # μ = 100, shift 1: within 4% of the exact divergence at every order up to 32
    for alpha in (2, 4, 8, 16, 32):
        exact = _exact_divergence(100.0, 1, alpha)
        assert skellam_rdp(alpha, SkellamDpEvent(100.0, 1.0, 1.0)) <= exact * 1.04


@pytest.mark.parametrize("mu", [4.0, 50.0, 200.0])
@pytest.mark.parametrize("shift", [1, 3])
@pytest.mark.parametrize("q", [0.01, 0.2, 0.5])
@pytest.mark.parametrize("alpha", [2, 4, 16])
def test_the_subsampled_bound_is_above_the_exact_subsampled_divergence(mu: float, shift: int, q: float,
                                                                      alpha: int) -> None:
    event = SkellamDpEvent(mu, float(shift), float(shift))
    base = [skellam_rdp(a, event) for a in range(2, alpha + 1)]
    assert _exact_divergence(mu, shift, alpha, q) <= subsampled_rdp(alpha, q, base) * (1 + 1e-9)


@pytest.mark.parametrize(("mu", "shift", "q", "rounds"), [(25.0, 5, 1.0, 10), (400.0, 20, 1.0, 20),
                                                          (100.0, 10, 0.2, 20)])
def test_the_certificate_is_above_the_exact_privacy_loss_of_a_concrete_pair(mu: float, shift: int, q: float,
                                                                             rounds: int) -> None:
    delta = 1e-5
    half = int(12 * math.sqrt(mu)) + shift + 10
    k, lp = _log_pmf(mu, half)
    shifted = np.roll(lp, shift)
    lmix = np.logaddexp(math.log1p(-q) + lp, math.log(q) + shifted) if q < 1 else shifted
    base = {int(x): float(v) for x, v in zip(k, lp, strict=True) if np.isfinite(v)}
    mix = {int(x): float(v) for x, v in zip(k, lmix, strict=True) if np.isfinite(v)}
    exact = 0.0
    for upper, lower in ((mix, base), (base, mix)):
        pld = pld_mod.from_two_probability_mass_functions(lower, upper, value_discretization_interval=1e-3)
        exact = max(exact, pld.self_compose(rounds).get_epsilon_for_delta(delta))
    event: dpa.DpEvent = SkellamDpEvent(mu, float(shift), float(shift))
    if q < 1:
        event = dpa.PoissonSampledDpEvent(q, event)
    cert = certify(dpa.SelfComposedDpEvent(event, rounds), delta, relation="add_remove", privacy_unit="client")
    # the certificate is the PLD of the dominating Gaussian pair, below the RDP route; both above the exact
    assert cert.method == "pld" and cert.epsilon_pld is not None and cert.epsilon_rdp is not None
    assert exact <= cert.epsilon <= cert.epsilon_rdp
    # and neither absurdly loose: the RDP route pays its conversion and the integer orders; the PLD
    # route only the Gaussian pair's heavier tails (a 1-D shift, any dimension's worst case priced)
    assert cert.epsilon_rdp <= exact * (1.6 if q == 1 else 2.5)
    assert cert.epsilon <= exact * 1.15


def test_skellam_converges_to_the_gaussian_of_dp_accounting() -> None:
    # Δ2 = 1000 integer units, noise multiplier z = 1.5: μ = (zΔ2)²; the discrete correction is tiny
    z, d2, rounds, delta = 1.5, 1000.0, 34, 1e-5
    event = SkellamDpEvent((z * d2) ** 2, d2, d2 * 200)
    ours = certify(dpa.SelfComposedDpEvent(event, rounds), delta, relation="add_remove", privacy_unit="client")
    # the certificate: the dominating Gaussian's PLD (unsampled: a Gaussian of μ = √T/z', exact), within
    # 1e-4 of the Gaussian's at the same variance and never below it
    gaussian_pld = certify(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), rounds), delta, relation="add_remove",
                           privacy_unit="client").epsilon
    assert ours.method == "pld" and gaussian_pld <= ours.epsilon <= gaussian_pld * (1 + 1e-4)
    acc = rdp_acc.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), rounds))
    gaussian = acc.get_epsilon(delta)
    # the RDP route: never below the Gaussian's RDP (the bound adds a positive discrete term); within
    # 2% of it — the Skellam bound is priced at integer orders only (1.1% here: the optimum order is fractional)
    assert ours.epsilon_rdp is not None and gaussian <= ours.epsilon_rdp <= gaussian * 1.02
    integer_orders = [float(a) for a in range(2, 257)]
    acc = rdp_acc.RdpAccountant(integer_orders)
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), rounds))
    ours_int = certify(dpa.SelfComposedDpEvent(event, rounds), delta, relation="add_remove", privacy_unit="client",
                       rdp_orders=integer_orders)
    assert ours_int.epsilon_rdp is not None
    assert acc.get_epsilon(delta) <= ours_int.epsilon_rdp <= acc.get_epsilon(delta) * 1.001


def test_the_sampled_bound_is_never_below_dp_accountings_sampled_gaussian() -> None:
    z, q, rounds, delta = 1.5, 0.2, 100, 1e-5
    event = dpa.PoissonSampledDpEvent(q, SkellamDpEvent((z * 1000.0) ** 2, 1000.0, 1000.0 * 200))
    ours = certify(dpa.SelfComposedDpEvent(event, rounds), delta, relation="add_remove", privacy_unit="client")
    acc = rdp_acc.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), rounds))
    assert ours.epsilon_rdp is not None and ours.epsilon_rdp >= acc.get_epsilon(delta)
    # the certificate (PLD) is never below dp-accounting's PLD of the sampled Gaussian either
    gaussian_pld = certify(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), rounds),
                           delta, relation="add_remove", privacy_unit="client").epsilon
    assert ours.method == "pld" and gaussian_pld <= ours.epsilon <= gaussian_pld * 1.001


def test_zhu_wang_by_hand() -> None:
    # α = 3, q = 0.5, ε(2) = 0.1, ε(3) = 0.2, computed term by term
    terms = 0.5 ** 2 * (3 * 0.5 - 0.5 + 1) + 3 * 0.25 * 0.5 * math.exp(0.1) + 3 * 1 * 0.125 * math.exp(2 * 0.2)
    assert subsampled_rdp(3, 0.5, [0.1, 0.2]) == pytest.approx(min(math.log(terms) / 2, 0.2), rel=1e-12)


def test_fractional_orders_are_priced_at_the_next_integer() -> None:
    event = SkellamDpEvent(50.0, 2.0, 3.0)
    vec = rdp_vector(event, "add_remove", (1.5, 2.0, 2.5, 3.0))
    assert list(vec) == pytest.approx([skellam_rdp(2, event), skellam_rdp(2, event),
                                       skellam_rdp(3, event), skellam_rdp(3, event)])


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigError, match="l2_sensitivity"):
        SkellamDpEvent(1.0, 0.0, 1.0)
    with pytest.raises(ConfigError, match="l1_sensitivity"):
        SkellamDpEvent(1.0, 2.0, 1.0)
    with pytest.raises(ConfigError, match="integer order"):
        skellam_rdp(1, SkellamDpEvent(1.0, 1.0, 1.0))
    # a Poisson-sampled Skellam sum is priced under add/remove only (the zero-out binomial expansion)
    with pytest.raises(PrivacyPreconditionError, match="add/remove"):
        skellam_rdp_vector(dpa.PoissonSampledDpEvent(0.5, SkellamDpEvent(1.0, 1.0, 1.0)), "replace_one", (2.0,))


def test_an_unsampled_skellam_event_is_priced_the_same_under_replace_one() -> None:
    # unsampled, the divergences depend only on the shift between the neighbours' integer queries,
    # bounded by (Δ2, Δ1) under either relation (a lattice upload under replace-one)
    event = SkellamDpEvent(1e4, 10.0, 30.0)
    orders = (2.0, 3.0, 8.0)
    assert np.array_equal(rdp_vector(event, "replace_one", orders), rdp_vector(event, "add_remove", orders))


def test_zero_variance_is_not_private() -> None:
    rel = SkellamRelease("server", 0.0, 10.0, 10.0, (0,))
    assert math.isinf(certify(rel.event(), 1e-5, relation="add_remove", privacy_unit="client").epsilon)


def test_the_tail_bound_holds_against_scipys_exact_tail() -> None:
    from scipy.stats import skellam

    for mu in (10.0, 1e4):
        for t in (3 * math.sqrt(mu), 6 * math.sqrt(mu)):
            exact = 2 * skellam.sf(math.ceil(t) - 1, mu / 2, mu / 2)
            assert exact <= math.exp(skellam_tail_log_probability(mu, t))
            # and within two orders of magnitude (a Chernoff bound)
            assert math.exp(skellam_tail_log_probability(mu, t)) <= max(exact * 100, 1e-300)


def test_the_ledger_amplifies_hidden_participation_for_the_server_too() -> None:
    ledger = PrivacyLedger(num_clients=10, sampler={"kind": "poisson", "sample_rate": 0.3}, delta=1e-5,
                           relation="add_remove", privacy_unit="client", pld_every=0)
    for t in range(5):
        rels = [SkellamRelease("server", 900.0, 10.0, 30.0, None, amplifiable=True),
                SkellamRelease("public", 900.0, 10.0, 30.0, None, amplifiable=True)]
        ledger.record_round(t, rels, sampling={"kind": "poisson", "sample_rate": 0.3}, participants=[1, 2])
    server, public = ledger.certify("server"), ledger.certify("public")
    assert server.epsilon == pytest.approx(public.epsilon, rel=1e-12)
    assert server.basis == "ex-ante" and "hidden participation" in " ".join(server.notes)
    direct = certify(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.3, SkellamDpEvent(900.0, 10.0, 30.0)), 5),
                     1e-5, relation="add_remove", privacy_unit="client")
    assert server.epsilon == pytest.approx(direct.epsilon, rel=1e-9)
    # the JSON form round-trips
    assert Release.from_dict(rels[0].to_dict()) == rels[0]
