"""Release types: Gaussian, two-point and exact releases, their JSON form and the former format.

The "former" dicts below were written by the single string-tagged ``Release`` class these types
replaced (every field present; an exact release was a zero-noise Gaussian of sensitivity 1).
Checkpoints and stored ledgers of running experiments hold them, so they must keep loading, and
a ledger rebuilt from them must certify what the former code certified (the numbers were
computed by that code on the same receipts).
"""

from __future__ import annotations

import json

import dp_accounting as dpa
import pytest

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import ExactRelease, GaussianRelease, Release, TwoPointRelease
from dpfl.sampling import FixedSizeSampler

FORMER_ROUND_0 = [
    {"observer": "server", "kind": "gaussian", "noise_std": 2.0, "sensitivity": 1.0, "client_ids": [0, 1],
     "epsilon": None, "num_coordinates": 1, "amplifiable": False},
    {"observer": "public", "kind": "gaussian", "noise_std": 3.0, "sensitivity": 0.5, "client_ids": None,
     "epsilon": None, "num_coordinates": 1, "amplifiable": True},
    {"observer": "server", "kind": "two_point", "noise_std": 0.0, "sensitivity": 0.0, "client_ids": [1],
     "epsilon": 0.5, "num_coordinates": 3, "amplifiable": False},
    # the former Release.exact("public", [0])
    {"observer": "public", "kind": "gaussian", "noise_std": 0.0, "sensitivity": 1.0, "client_ids": [0],
     "epsilon": None, "num_coordinates": 1, "amplifiable": False},
]
FORMER_ROUND_1 = [FORMER_ROUND_0[0] | {"client_ids": [2, 3]}, FORMER_ROUND_0[1]]


def _former_ledger_dict() -> dict:
    fresh = PrivacyLedger(num_clients=4, sampler=FixedSizeSampler(2), delta=1e-5, relation="replace_one",
                          privacy_unit="client", pld_every=0).to_dict()
    fresh["rounds"] = [
        {"round": 0, "participants": [0, 1], "releases": FORMER_ROUND_0, "claimed_epsilon": None},
        {"round": 1, "participants": [2, 3], "releases": FORMER_ROUND_1, "claimed_epsilon": None},
    ]
    return fresh


def test_the_constructors_build_the_types() -> None:
    g = Release.gaussian("server", 2.0, 1.0, [3, 1, 3])
    assert isinstance(g, GaussianRelease) and g.client_ids == (1, 3) and g.noise_multiplier == 2.0
    t = Release.two_point("public", 0.5, 7, [2])
    assert isinstance(t, TwoPointRelease) and (t.epsilon, t.num_coordinates) == (0.5, 7)
    e = Release.exact("server", [4, 2])
    assert isinstance(e, ExactRelease) and e.client_ids == (2, 4)
    assert e.event() == dpa.NonPrivateDpEvent() == Release.gaussian("server", 0.0, 1.0, [2]).event()


@pytest.mark.parametrize("rel", [
    Release.gaussian("public", 3.0, 0.5, None, amplifiable=True),
    Release.gaussian("server", 0.0, 2.0, [0, 5]),
    Release.two_point("server", 0.25, 11, [1, 2]),
    Release.exact("public", [0, 3]),
])
def test_json_round_trip(rel: Release) -> None:
    again = Release.from_dict(json.loads(json.dumps(rel.to_dict())))
    assert again == rel and type(again) is type(rel) and again.event() == rel.event()


def test_former_dicts_load_as_the_same_events() -> None:
    loaded = [Release.from_dict(d) for d in FORMER_ROUND_0]
    assert [type(r) for r in loaded] == [GaussianRelease, GaussianRelease, TwoPointRelease, GaussianRelease]
    assert loaded[2] == Release.two_point("server", 0.5, 3, [1])
    assert loaded[3].event() == Release.exact("public", [0]).event()
    # Gaussian and two-point releases write the former layout exactly (older readers load them)
    assert [r.to_dict() for r in loaded[:3]] == FORMER_ROUND_0[:3]


def test_a_former_ledger_loads_and_certifies_as_before() -> None:
    ledger = PrivacyLedger.from_dict(json.loads(json.dumps(_former_ledger_dict())), sampler=FixedSizeSampler(2))
    # values computed by the former Release class on the same receipts, to a relative 1e-9 as the
    # golden ledgers (a PLD figure moved by 4e-11 relative with the numerical libraries' versions)
    assert ledger.certify("server", None, "best").epsilon == pytest.approx(3.493976999107376, rel=1e-9)
    assert ledger.certify("public", None, "best").epsilon == float("inf")
    assert ledger.certify("public", 1, "best").epsilon == pytest.approx(0.6066085282328175, rel=1e-9)
    assert ledger.certify("server", 2, "rdp").epsilon == pytest.approx(2.165715659029443, rel=1e-9)


def test_for_clients_restricts_and_keeps_the_numbers() -> None:
    bcast = Release.gaussian("public", 3.0, 0.5, None, amplifiable=True)
    mine = bcast.for_clients([4, 2])
    assert mine == Release.gaussian("public", 3.0, 0.5, [2, 4])  # named clients: never amplified
    assert Release.two_point("server", 0.5, 3, [1, 2, 3]).for_clients([2]) == Release.two_point("server", 0.5, 3, [2])
    assert Release.exact("server", [1, 2]).for_clients([1]) == Release.exact("server", [1])


def test_invalid_releases_name_the_value() -> None:
    with pytest.raises(ConfigError, match="analyst"):
        Release.gaussian("analyst", 1.0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="-1"):
        Release.exact("server", [-1])
    with pytest.raises(ConfigError, match="laplace"):
        Release.from_dict({"observer": "server", "kind": "laplace"})
    with pytest.raises(ConfigError, match="epsilon"):
        Release.from_dict({"observer": "server", "kind": "two_point", "epsilon": None})
    with pytest.raises(TypeError):
        Release()  # type: ignore[abstract]
