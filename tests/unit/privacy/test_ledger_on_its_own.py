"""The ledger outside the round loop: a hand-fed sequence of releases certifies what dp-accounting,
called directly on the same events, gives; a mechanism the ledger does not know by name is one
class; the saved form with charges ahead is the ledger's own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting as dpa
import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant as pld_acc
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dpfl.errors import ConfigError
from dpfl.privacy import GaussianRelease, PrivacyLedger, Release, SkellamRelease
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS
from dpfl.privacy.releases import release_kinds

DELTA = 1e-5


def _pld(event: dpe.DpEvent) -> float:
    acc = pld_acc.PLDAccountant(value_discretization_interval=1e-4)
    return float(acc.compose(event).get_epsilon(DELTA))


def _rdp(event: dpe.DpEvent) -> float:
    return float(rdp_acc.RdpAccountant(list(DEFAULT_RDP_ORDERS)).compose(event).get_epsilon(DELTA))


def test_a_hand_fed_poisson_run_certifies_what_dp_accounting_gives() -> None:
    # 100 rounds of a Gaussian broadcast (z = 1.5) over a secret Poisson(0.2) sample of 50 clients
    ledger = PrivacyLedger(num_clients=50, sampler={"kind": "poisson", "sample_rate": 0.2}, delta=DELTA,
                           pld_every=0, pld_discretization=1e-4)
    for _ in range(100):
        ledger.record([GaussianRelease("public", noise_std=1.5, sensitivity=1.0, amplifiable=True)])
    assert ledger.rounds_recorded == 100
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(1.5)), 100)
    cert = ledger.certify("public")
    assert cert.epsilon_rdp == pytest.approx(_rdp(event), rel=1e-9)
    assert cert.epsilon_pld == pytest.approx(_pld(event), rel=1e-6)
    assert cert.epsilon == pytest.approx(min(_rdp(event), _pld(event)), rel=1e-6)
    assert cert.basis == "ex-ante"


def test_per_client_server_receipts_compose_as_dp_accounting_composes_them() -> None:
    # client 0 is seen by the server three times at z = 2 and once at z = 1; client 1 once at z = 2
    ledger = PrivacyLedger(num_clients=2, sampler={"kind": "all"}, delta=DELTA, pld_every=0,
                           pld_discretization=1e-4)
    ledger.record([GaussianRelease("server", 2.0, 1.0, client_ids=[0, 1])])
    ledger.record([GaussianRelease("server", 2.0, 1.0, client_ids=[0])], participants=[0, 1])
    ledger.record([GaussianRelease("server", 1.0, 1.0, client_ids=[0])], participants=[0])
    ledger.record([GaussianRelease("server", 4.0, 2.0, client_ids=[0])])
    zero = dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 3), dpa.GaussianDpEvent(1.0)])
    assert ledger.certify("server", client_id=0, method="rdp").epsilon == pytest.approx(_rdp(zero), rel=1e-9)
    # unsampled Gaussians compose to a Gaussian of mu = sqrt(sum 1/z^2): the PLD is exact there
    assert ledger.certify("server", client_id=0).epsilon == pytest.approx(_pld(zero), rel=1e-3)
    assert ledger.certify("server", client_id=1).epsilon == pytest.approx(_pld(dpa.GaussianDpEvent(2.0)), rel=1e-3)
    assert ledger.certify("server").epsilon == ledger.certify("server", client_id=0).epsilon


def test_charged_ahead_is_the_saved_form_with_the_charges_recorded() -> None:
    ledger = PrivacyLedger(num_clients=4, sampler={"kind": "all"}, delta=DELTA, pld_every=0)
    ledger.record([GaussianRelease("server", 2.0, 1.0, client_ids=range(4))])
    ahead = ledger.charged_ahead([(1, [3, 1], [GaussianRelease("server", 1.0, 1.0, client_ids=[1, 3])])])
    assert ledger.rounds_recorded == 1  # the ledger itself is unchanged
    restored = PrivacyLedger.from_dict(ahead)
    assert restored.rounds_recorded == 2
    assert ahead["rounds"][1] == {"round": 1, "participants": [1, 3], "claimed_epsilon": None,
                                  "releases": [GaussianRelease("server", 1.0, 1.0, client_ids=[1, 3]).to_dict()]}
    ledger.record([GaussianRelease("server", 1.0, 1.0, client_ids=[1, 3])], participants=[1, 3])
    for cid in range(4):
        assert restored.certify("server", cid, "rdp").epsilon == ledger.certify("server", cid, "rdp").epsilon


@dataclass(frozen=True)
class _LaplaceRelease(Release):
    """A mechanism the ledger has never heard of: Laplace noise of a given scale on an L1 query."""

    kind: ClassVar[str] = "laplace_for_test"
    observer: str
    scale: float
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> _LaplaceRelease:
        return cls(data["observer"], float(data["scale"]), client_ids, amplifiable)

    def event(self) -> dpe.DpEvent:
        return dpa.LaplaceDpEvent(self.scale)

    def to_dict(self) -> dict[str, Any]:
        return {"observer": self.observer, "kind": self.kind, "scale": self.scale,
                "client_ids": None if self.client_ids is None else list(self.client_ids),
                "amplifiable": self.amplifiable}


def test_a_new_mechanism_is_one_class_the_ledger_composes_and_restores() -> None:
    assert "laplace_for_test" in release_kinds()
    ledger = PrivacyLedger(num_clients=3, sampler={"kind": "all"}, delta=DELTA, pld_every=0,
                           pld_discretization=1e-4)
    for _ in range(5):
        ledger.record([_LaplaceRelease("server", 2.0, client_ids=(0, 1, 2))])
    event = dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(2.0), 5)
    assert ledger.certify("server").epsilon == pytest.approx(min(_pld(event), _rdp(event), 5 * 0.5), rel=1e-3)
    restored = PrivacyLedger.from_dict(ledger.to_dict())
    assert restored.certify("server", method="rdp").epsilon == ledger.certify("server", method="rdp").epsilon


def test_an_unknown_kind_names_the_kinds_it_knows() -> None:
    with pytest.raises(ConfigError, match="'nope'") as info:
        Release.from_dict({"observer": "server", "kind": "nope"})
    assert "skellam" in str(info.value) and "gaussian" in str(info.value)


def test_a_registered_mechanism_prices_without_the_certifier_naming_it() -> None:
    # the Skellam sum is priced by what its own module registered: its RDP, and for the PLD the Gaussian
    # event that dominates it, with the note naming the proof
    ledger = PrivacyLedger(num_clients=10, sampler={"kind": "poisson", "sample_rate": 0.5}, delta=DELTA, pld_every=0)
    ledger.record([SkellamRelease("server", variance=400.0, l2_sensitivity=10.0, l1_sensitivity=40.0,
                                  amplifiable=True)])
    cert = ledger.certify("server")
    assert cert.method == "pld" and cert.epsilon_rdp is not None and cert.epsilon <= cert.epsilon_rdp
    assert any("Gaussian pairs that dominate" in n and "skellam-gdp" in n for n in cert.notes)
    assert any("hidden participation" in n for n in cert.notes)
