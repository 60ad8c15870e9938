"""The ledger vectorized over clients certifies what a per-client recomposition certifies.

Each client's receipts are rebuilt from the stored rounds (``to_dict``) with plain Counters and
priced by :func:`dpfl.privacy.accounting.certify.certify` / dp-accounting directly; the ledger's
per-client certificates, its grouping into release multisets and its answers before a round must
agree with that reference. The RDP-to-ε conversion is dp-accounting's, bit for bit.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dpfl.privacy.accounting.certify import (
    DEFAULT_RDP_ORDERS,
    epsilon_from_rdp,
    epsilons_from_rdp,
    rdp_epsilon,
)
from dpfl.privacy.accounting.events import compose
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release


def test_the_rdp_conversion_is_dp_accountings_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    orders = np.asarray(DEFAULT_RDP_ORDERS)
    checked = 0
    for delta in (1e-9, 1e-5, 1e-3, 0.05, 0.5):
        for scale in (1e-12, 1e-8, 1e-4, 1e-1, 1.0, 50.0, 1e4):
            rdp = rng.random((120, len(orders))) * scale * orders
            rdp[::9] = rng.random((rdp[::9].shape[0], len(orders))) * scale  # not increasing in the order
            rdp[3, 7] = np.inf
            rdp[4] = np.inf
            rdp[5, 0] = 0.0
            rdp[6, 2] = -1e-6  # dp-accounting warns and counts that order as 0
            rdp[7] = 0.0
            batch = epsilons_from_rdp(DEFAULT_RDP_ORDERS, rdp, delta)
            for i, row in enumerate(rdp):
                want = 0.0 if not np.any(row) else float(rdp_acc.compute_epsilon(orders, row, delta)[0])
                assert batch[i] == want, (delta, scale, i)
                if np.any(row):
                    assert epsilon_from_rdp(DEFAULT_RDP_ORDERS, row, delta) == want, (delta, scale, i)
                checked += 1
    assert checked == 5 * 7 * 120


def _receipts(ledger: PrivacyLedger, observer: str) -> tuple[dict[int, Counter[Any]], Counter[Any]]:
    """Each client's own receipts and the shared ones, rebuilt from the stored rounds."""
    own: dict[int, Counter[Any]] = {}
    shared: Counter[Any] = Counter()
    for r in ledger.to_dict()["rounds"]:
        parts = tuple(r["participants"])
        for rel in (Release.from_dict(x) for x in r["releases"]):
            if rel.observer != observer:
                continue
            shared_event, clients, event = ledger._targets(rel, parts)
            if shared_event is not None:
                shared[shared_event] += 1
            if not isinstance(event, dpa.NoOpDpEvent):
                for c in clients:
                    own.setdefault(int(c), Counter())[event] += 1
    return own, shared


def _random_ledger(seed: int, n: int, rounds: int) -> PrivacyLedger:
    rng = random.Random(seed)
    q = 0.3
    ledger = PrivacyLedger(num_clients=n, sampler={"kind": "poisson", "sample_rate": q}, delta=1e-5,
                           relation="add_remove", privacy_unit="client", pld_every=0, pld_discretization=1e-2)
    for t in range(rounds):
        parts = sorted(c for c in range(n) if rng.random() < q)
        rel: list[Release] = [Release.gaussian("public", 2.0, 1.0, None, amplifiable=True)]
        if parts:
            # the cohort's share of the noise, and a personalized release for a few clients
            rel.append(Release.gaussian("server", 1.5 / math.sqrt(len(parts)), 1.0, parts))
            few = [c for c in parts if c % 5 == 0]
            if few:
                rel.append(Release.gaussian("server", 0.5 + (t % 3), 1.0, few))
        ledger.record_round(t, rel, sampling=ledger.sampling, participants=parts, certify_round=False)
    return ledger


@pytest.mark.parametrize("seed", [0, 1])
def test_every_clients_certificate_is_its_own_recomposition(seed: int) -> None:
    ledger = _random_ledger(seed, n=40, rounds=30)
    own, shared = _receipts(ledger, "server")
    assert not shared
    rdp_table = ledger.client_epsilons("server", "rdp")
    best_table = ledger.client_epsilons("server", "best")
    assert sorted(rdp_table) == sorted(own)
    for cid, counts in own.items():
        event = compose(e if k == 1 else dpa.SelfComposedDpEvent(e, k) for e, k in counts.items())
        want_rdp, _ = rdp_epsilon(event, 1e-5, "add_remove")
        assert want_rdp is not None
        cert = ledger.certify("server", cid, "best")
        assert cert.epsilon_rdp == pytest.approx(want_rdp, rel=1e-9)
        assert rdp_table[cid] == pytest.approx(want_rdp, rel=1e-9)
        assert best_table[cid] == cert.epsilon
    # one history per distinct release multiset, its first client in the order clients were charged
    hist = ledger._state["server"].histories()
    distinct = {frozenset(c.items()) for c in own.values()}
    assert len(hist.representatives) == len(distinct)
    # the worst client is the exhaustive maximum
    worst = max((ledger.certify("server", c, "best") for c in own), key=lambda c: c.epsilon)
    assert ledger.certify("server", None, "best").epsilon == worst.epsilon


def test_a_resumed_ledger_certifies_exactly_what_an_uninterrupted_one_does() -> None:
    whole = _random_ledger(3, n=30, rounds=24)
    half = PrivacyLedger.from_dict(_random_ledger(3, n=30, rounds=12).to_dict())
    rest = whole.to_dict()["rounds"][12:]
    for r in rest:
        half.record_round(r["round"], [Release.from_dict(x) for x in r["releases"]], sampling=half.sampling,
                          participants=r["participants"], certify_round=False)
    assert half.to_dict()["rounds"] == whole.to_dict()["rounds"]
    for obs in ("server", "public"):
        assert half.certify(obs).to_dict() == whole.certify(obs).to_dict()
        assert half.client_epsilons(obs) == whole.client_epsilons(obs)  # type: ignore[arg-type]


def test_checking_a_round_equals_recording_it_on_a_copy() -> None:
    """``would_exceed`` and ``within_budget`` answer what recording the round on a rebuilt copy
    (from ``to_dict``) and certifying it answers, at targets just below and above the result."""
    ledger = _random_ledger(5, n=25, rounds=15)
    nxt = [Release.gaussian("server", 0.9, 1.0, [1, 2, 24]), Release.gaussian("public", 2.0, 1.0, None,
                                                                                amplifiable=True)]
    copy = PrivacyLedger.from_dict(ledger.to_dict())
    copy.record_round(99, nxt, sampling=copy.sampling, participants=[1, 2, 24], certify_round=False)
    for method in ("rdp", "best"):
        for obs in ("server", "public", None):
            after = copy.certify(obs, None, method).epsilon  # type: ignore[arg-type]
            for target, exceeds in ((after * (1 - 1e-9), True), (after * (1 + 1e-9), False)):
                got = ledger.would_exceed(nxt, target, participants=[1, 2, 24], method=method,  # type: ignore[arg-type]
                                          observer=obs)  # type: ignore[arg-type]
                assert got is exceeds, (method, obs, target)
    assert ledger.rounds_recorded == 15  # nothing recorded
    assert ledger.within_budget(copy, nxt, participants=[1, 2, 24])
    assert not ledger.within_budget(copy, nxt + nxt, participants=[1, 2, 24])


def test_many_clients_with_one_history_each_are_grouped_once() -> None:
    """Full participation of identical clients: one multiset, one PLD, whatever the number of clients."""
    n = 3000
    ledger = PrivacyLedger(num_clients=n, sampler={"kind": "all"}, delta=1e-5, relation="add_remove",
                           privacy_unit="client", pld_every=0)
    everyone = list(range(n))
    for t in range(20):
        ledger.record_round(t, [Release.gaussian("server", 1.0 + (t % 2), 1.0, everyone)], sampling={"kind": "all"},
                            participants=everyone, certify_round=False)
    assert len(ledger._state["server"].histories().representatives) == 1
    cert = ledger.certify("server")
    # 10 rounds at z = 1 and 10 at z = 2: one Gaussian of 1/z² = 10 + 10/4 (closed-form PLD)
    want = float(dpa.get_epsilon_gaussian(1 / math.sqrt(12.5), 1e-5))
    assert cert.epsilon_pld == pytest.approx(want, rel=1e-9)
    assert set(ledger.client_epsilons("server", "best").values()) == {cert.epsilon}


def _everything(ledger: PrivacyLedger) -> list[Any]:
    out: list[Any] = []
    for obs in ("server", "public"):
        for method in ("rdp", "best"):
            out.append(ledger.certify(obs, None, method).to_dict())  # type: ignore[arg-type]
            out.append(ledger.client_epsilons(obs, method))  # type: ignore[arg-type]
        out += [ledger.certify(obs, c, "best").to_dict() for c in range(ledger.num_clients)]  # type: ignore[arg-type]
    return out


def test_the_receipt_log_alone_certifies_what_the_dense_counts_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a size the dense count matrix is dropped and the receipts are grouped from the log:
    the same certificates, bit for bit, whether it is dropped early or mid-run."""
    from dpfl.privacy.accounting import receipts as ledger_mod

    dense = _everything(_random_ledger(8, n=30, rounds=25))
    assert _random_ledger(8, n=30, rounds=25)._state["server"].dense is not None
    for cells in (0, 200):
        monkeypatch.setattr(ledger_mod, "_DENSE_MAX_CELLS", cells)
        logged = _random_ledger(8, n=30, rounds=25)
        assert logged._state["server"].dense is None
        assert _everything(logged) == dense


def test_pure_composition_is_priced_only_for_pure_receipts() -> None:
    """Two-point reports alone have a pure bound (d·T·ε); a Gaussian among them removes it."""
    ledger = PrivacyLedger(num_clients=3, sampler={"kind": "all"}, delta=1e-5, relation="replace_one",
                           privacy_unit="client", pld_every=0)
    for t in range(3):
        rel = [Release.two_point("server", 0.5, 4, [0, 1, 2])]
        if t == 1:
            rel.append(Release.gaussian("server", 2.0, 1.0, [2]))
        ledger.record_round(t, rel, sampling={"kind": "all"}, participants=[0, 1, 2])
    for method in ("rdp", "best"):
        pure = ledger.certify("server", 0, method)  # type: ignore[arg-type]
        assert pure.epsilon_pure == pytest.approx(3 * 4 * 0.5, rel=1e-12)
        assert ledger.certify("server", 2, method).epsilon_pure is None  # type: ignore[arg-type]


def test_the_check_before_a_round_when_no_client_dominates_at_every_order() -> None:
    """Clients whose RDP curves cross (sampled DP-SGD steps against plain Gaussians): the answer
    from the pointwise maximum must be the exhaustive one at every target around the worst."""
    from dpfl.privacy.releases import SampledGaussianRelease

    ledger = PrivacyLedger(num_clients=3, sampler={"kind": "all"}, delta=1e-5, relation="add_remove",
                           privacy_unit="record", pld_every=0)
    rel: list[Release] = [SampledGaussianRelease("server", 1.0, 0.01, 20, (0,)),
                          Release.gaussian("server", 4.0, 1.0, [1])]
    ledger.record_round(0, rel, sampling={"kind": "all"}, participants=[0, 1, 2])
    nxt = [Release.gaussian("server", 40.0, 1.0, [1, 2])]
    copy = PrivacyLedger.from_dict(ledger.to_dict())
    copy.record_round(1, nxt, sampling={"kind": "all"}, participants=[0, 1, 2], certify_round=False)
    rows = copy._state["server"].rows[:3]
    assert not np.any(np.all(rows == rows.max(axis=0), axis=1))  # no dominant client: the exhaustive path
    worst = copy.certify("server", None, "rdp").epsilon
    envelope = ledger._eps(rows.max(axis=0))
    assert envelope > 1.1 * worst  # the pointwise maximum alone would overstate it
    for target in np.linspace(0.5 * worst, 1.5 * envelope, 41):
        got = ledger.would_exceed(nxt, float(target), participants=[0, 1, 2], observer="server")
        assert got is bool(worst > target), target
