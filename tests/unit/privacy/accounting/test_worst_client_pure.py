"""The worst client under ``method="rdp"`` is the worst certificate, not the worst RDP curve: a
client whose receipts are all pure DP (randomized response) can have the largest RDP ε and yet a
smaller certificate (its pure composition), below another client's."""

from __future__ import annotations

import pytest

from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(num_clients=2, sampler={"kind": "all"}, delta=1e-5, relation="replace_one",
                         privacy_unit="client", pld_every=0)


def test_the_worst_rdp_certificate_is_the_largest_per_client_certificate() -> None:
    ledger = _ledger()
    ledger.record_round(0, [Release.two_point("server", 5.0, 1, [0])], sampling={"kind": "all"}, participants=[0, 1])
    c0 = ledger.certify("server", 0, "rdp")
    assert c0.epsilon_pure is not None and c0.epsilon_pure < c0.epsilon_rdp  # pure is tighter for client 0
    target = (c0.epsilon_rdp + c0.epsilon_pure) / 2
    # a Gaussian for client 1 whose RDP ε sits between client 0's pure and RDP bounds (bisection)
    lo, hi = 0.01, 100.0
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        probe = _ledger()
        probe.record_round(0, [Release.gaussian("server", mid, 1.0, [1])], sampling={"kind": "all"},
                           participants=[0, 1])
        lo, hi = (mid, hi) if probe.certify("server", 1, "rdp").epsilon > target else (lo, mid)
    ledger.record_round(1, [Release.gaussian("server", hi, 1.0, [1])], sampling={"kind": "all"}, participants=[0, 1])
    c0, c1 = ledger.certify("server", 0, "rdp"), ledger.certify("server", 1, "rdp")
    assert c0.epsilon_rdp > c1.epsilon > c0.epsilon  # client 0: worst RDP curve, smaller certificate
    worst = ledger.certify("server", None, "rdp")
    assert worst.epsilon == pytest.approx(max(c0.epsilon, c1.epsilon), rel=1e-12) == pytest.approx(c1.epsilon)
    assert ledger.certify(None, None, "rdp").epsilon == pytest.approx(c1.epsilon, rel=1e-12)
