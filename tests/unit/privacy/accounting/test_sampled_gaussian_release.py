"""SampledGaussianRelease: a client's DP-SGD steps (Poisson-sampled Gaussians) in the ledger —
its event, JSON form, restriction to clients, and what the ledger certifies from it, against
dp_accounting called here on the same composed event."""

from __future__ import annotations

import json

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release, SampledGaussianRelease
from dpfl.sampling import FixedSizeSampler


def test_event_is_count_poisson_sampled_gaussians() -> None:
    rel = SampledGaussianRelease("server", 1.1, 0.25, 7, (2, 0))
    assert rel.client_ids == (0, 2)
    assert rel.event() == dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.25, dpa.GaussianDpEvent(1.1)), 7)
    # q = 1: every record every step, an unsampled Gaussian; z = 0: no guarantee
    assert SampledGaussianRelease("server", 1.1, 1.0, 3, (0,)).event() == dpa.SelfComposedDpEvent(
        dpa.GaussianDpEvent(1.1), 3)
    assert SampledGaussianRelease("public", 0.0, 0.25, 3, (0,)).event() == dpa.NonPrivateDpEvent()


def test_json_round_trip_and_for_clients() -> None:
    rel = SampledGaussianRelease("public", 0.8, 0.1, 12, (1, 4, 5))
    back = Release.from_dict(json.loads(json.dumps(rel.to_dict())))
    assert back == rel and isinstance(back, SampledGaussianRelease)
    sub = rel.for_clients([4])
    assert isinstance(sub, SampledGaussianRelease) and sub.client_ids == (4,)
    assert (sub.noise_multiplier, sub.sample_rate, sub.count, sub.observer) == (0.8, 0.1, 12, "public")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"noise_multiplier": -1.0}, r"noise_multiplier.*-1\.0"),
    ({"sample_rate": 0.0}, r"sample_rate.*0\.0"),
    ({"sample_rate": 1.5}, r"sample_rate.*1\.5"),
    ({"count": 0}, "count.*0"),
    ({"client_ids": None}, "names the clients"),
    ({"observer": "everyone"}, "observer.*everyone"),
])
def test_invalid_releases_name_the_value(kwargs: dict, message: str) -> None:
    base = {"observer": "server", "noise_multiplier": 1.0, "sample_rate": 0.5, "count": 2, "client_ids": (0,)}
    with pytest.raises(ConfigError, match=message):
        SampledGaussianRelease(**(base | kwargs))


def _ledger(relation: str = "add_remove") -> PrivacyLedger:
    return PrivacyLedger(num_clients=4, sampler=FixedSizeSampler(2), delta=1e-5, relation=relation,
                         privacy_unit="record", pld_every=0)


def test_the_ledger_certifies_the_composed_event_per_client() -> None:
    """Client 0 takes part in rounds 0 and 1 (5 steps at q = 0.1, z = 1.0 each), client 1 in
    round 0 (8 steps at q = 0.2): the ledger's RDP and PLD ε equal dp_accounting's on
    SelfComposed(PoissonSampled(q, Gaussian(z)), steps × rounds), worst client for the headline."""
    led = _ledger()
    r0 = [SampledGaussianRelease(obs, 1.0, 0.1, 5, (0,)) for obs in ("server", "public")] + [
        SampledGaussianRelease(obs, 1.0, 0.2, 8, (1,)) for obs in ("server", "public")]
    led.record_round(0, r0, sampling=FixedSizeSampler(2), participants=[0, 1])
    r1 = [SampledGaussianRelease(obs, 1.0, 0.1, 5, (0,)) for obs in ("server", "public")]
    led.record_round(1, r1, sampling=FixedSizeSampler(2), participants=[0])
    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE

    def direct(q: float, count: int) -> tuple[float, float]:
        event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(1.0)), count)
        rdp = rdp_privacy_accountant.RdpAccountant(list(DEFAULT_RDP_ORDERS), rel).compose(event).get_epsilon(1e-5)
        pld = pld_privacy_accountant.PLDAccountant(rel, value_discretization_interval=1e-3).compose(
            event).get_epsilon(1e-5)
        return rdp, pld

    c0, c1 = direct(0.1, 10), direct(0.2, 8)
    for obs in ("server", "public"):
        for cid, (rdp, pld) in ((0, c0), (1, c1)):
            cert = led.certify(obs, cid)
            assert cert.epsilon_rdp == pytest.approx(rdp, rel=1e-9)
            assert cert.epsilon_pld == pytest.approx(pld, rel=1e-9)
            assert cert.epsilon == pytest.approx(min(rdp, pld), rel=1e-9)
        assert led.certify(obs).epsilon == pytest.approx(max(min(*c0), min(*c1)), rel=1e-9)
        assert led.certify(obs, 2).epsilon == 0.0  # never took part
    # a stored ledger replays to the same certificate
    again = PrivacyLedger.from_dict(json.loads(json.dumps(led.to_dict())))
    assert again.certify().epsilon == pytest.approx(led.certify().epsilon, rel=1e-12)


def test_a_replace_one_ledger_refuses_poisson_sampled_releases() -> None:
    led = _ledger("replace_one")
    with pytest.raises(PrivacyPreconditionError, match="add/remove"):
        led.record_round(0, [SampledGaussianRelease("server", 1.0, 0.1, 5, (0,))], sampling=FixedSizeSampler(2),
                         participants=[0])
