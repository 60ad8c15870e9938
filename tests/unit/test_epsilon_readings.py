"""A certified ε too large to read as a number comes with one plain line: what it means and what
changes it (issue: "reading a huge ε")."""

from __future__ import annotations

import math

from dpfl.privacy.accounting.certify import Certificate
from dpfl.rounds.result import PrivacySummary


def _cert(observer: str, eps: float, notes: tuple[str, ...] = ()) -> Certificate:
    return Certificate(epsilon=eps, delta=1e-5, method="pld", observer=observer, privacy_unit="client",
                       relation="add_remove", epsilon_rdp=eps, epsilon_pld=eps, epsilon_pure=None, notes=notes)


def _summary(server: float, public: float) -> PrivacySummary:
    return PrivacySummary(certified={"server": _cert("server", server), "public": _cert("public", public)},
                          claimed_epsilon=8.3, claim_notion="004", claim_comparable=True, delta=1e-5)


def test_the_main_jobs_server_epsilon_without_secure_aggregation_is_read_out() -> None:
    lines = _summary(1750.36, 7.55).readings()
    assert len(lines) == 1  # the public's 7.55 needs no words
    assert lines[0].startswith("ε = 1,750 against the server: no meaningful protection")
    assert "privacy.secure_aggregation: true" in lines[0]


def test_weak_and_infinite_epsilons() -> None:
    weak, inf = _summary(23.5, math.inf).readings()
    assert "weak protection" in weak and "e^23.5" in weak
    assert inf.startswith("ε = ∞ against the public: no meaningful protection") and "secure aggregation" not in inf
    assert _summary(9.9, 1.0).readings() == []


def test_run_and_report_print_the_reading() -> None:
    from dpfl.commands.run import _privacy_summary

    text = _privacy_summary(_summary(1750.36, 7.55))
    assert "no meaningful protection" in text


def test_the_hint_knows_whether_the_server_already_sees_only_a_secure_sum() -> None:
    skellam = "PLD: not available for the Skellam mechanism (dp-accounting has no Skellam PLD); certified by RDP."
    visible = PrivacySummary(certified={"server": _cert("server", 25.2, (skellam,))}, claimed_epsilon=8.3,
                             claim_notion="004", claim_comparable=True, delta=1e-5).readings()
    assert "hidden participation" in visible[0] and "gives it only the sum" not in visible[0]
    hidden = PrivacySummary(certified={"server": _cert("server", 11.2, (skellam, "hidden participation: …"))},
                            claimed_epsilon=8.3, claim_notion="004", claim_comparable=True, delta=1e-5).readings()
    assert "secure aggregation" not in hidden[0] and "add noise" in hidden[0]
