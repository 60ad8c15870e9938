"""The claim check of the privacy gate tells the RDP order grid's gap from a real excess.

DP-FedAvg's claim (004, moments accountant) is dp-accounting's RDP accountant at its default
orders, fractional ones included. The Poisson-sampled Skellam sum of secure aggregation is proven
at integer orders only (docs/proofs/skellam-subsampling.md), so at the same noise it certifies
what the claim's formula gives at integer orders — above the claim by the grid, not by weaker
noise. The gate notes that as ``claim-order-grid``; an excess beyond the grid (a coarse integer
encoding) stays ``claim-exceeded``; strict mode refuses both.
"""

from __future__ import annotations

from typing import Any

import dp_accounting
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from dpfl.privacy.accounting.claimed import dpfedavg_claimed_epsilon


def _dp_accounting(z: float, q: float, rounds: int, delta: float, orders: list[float]) -> float:
    acc = dp_accounting.rdp.RdpAccountant(orders=orders)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds)
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize(("z", "q", "rounds"), [(1.5, 0.2, 100), (1.5, 0.2, 3), (1.0, 0.04, 1000), (0.8, 0.5, 7)])
def test_the_claim_at_integer_orders_is_dp_accountings_accountant_on_the_integer_orders(
        z: float, q: float, rounds: int) -> None:
    orders = [float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS]
    ints = [a for a in orders if a.is_integer()]
    assert ints[:3] == [2.0, 3.0, 4.0] and len(ints) < len(orders)
    got = dpfedavg_claimed_epsilon(z, q, rounds, 1e-5, integer_orders=True)
    assert got == pytest.approx(_dp_accounting(z, q, rounds, 1e-5, ints), rel=1e-9)
    # the claim itself keeps the fractional orders, and the grid can only make it larger
    claim = dpfedavg_claimed_epsilon(z, q, rounds, 1e-5)
    assert claim == pytest.approx(_dp_accounting(z, q, rounds, 1e-5, orders), rel=1e-9)
    assert got >= claim


def test_the_main_jobs_figures_by_hand() -> None:
    # σ = 1.5, q = 0.2, T = 100, δ = 1e-5: the claim 8.298 and the integer-order figure 8.468
    # that the main job's Skellam certificate reaches (README)
    assert dpfedavg_claimed_epsilon(1.5, 0.2, 100, 1e-5) == pytest.approx(8.29787, abs=5e-5)
    assert dpfedavg_claimed_epsilon(1.5, 0.2, 100, 1e-5, integer_orders=True) == pytest.approx(8.46762, abs=5e-5)


def _secure(rounds: int, **secure_sum: Any) -> tuple[Any, list[str]]:
    from dpfl.config import load_config, parse_config
    from dpfl.rounds import build_plan, dry_run

    raw = load_config("default", []).model_dump(mode="json")
    raw["rounds"] = rounds
    raw["partition"]["num_clients"] = 200
    if secure_sum:
        raw["algorithm"]["options"]["secure_sum"] = {**(raw["algorithm"]["options"].get("secure_sum") or {}),
                                                    **secure_sum}
    config = parse_config(raw)
    notices: list[str] = []
    out = dry_run(config, notices.append, per_round=True,
                  experiment=build_plan(config, [60] * 200, 784 * 64 + 64 + 64 * 10 + 10))
    return out, notices


def test_the_secure_sum_at_the_main_jobs_scale_is_not_noted_its_certificate_is_below_the_claim() -> None:
    """The RDP route lies within 1e-6 of the claim's formula at integer orders (above the claim by
    the order grid only); the certificate, the PLD of the Gaussian pair dominating the Skellam sum, is
    below the claim: nothing is noted."""
    out, notices = _secure(12)
    kinds = [n.split(":")[0] for n in notices]
    assert "claim-exceeded" not in kinds and "claim-order-grid" not in kinds, notices
    for row in out.per_round:  # the per-round figures are the RDP route's
        t = row["round"]
        grid = dpfedavg_claimed_epsilon(1.5, 0.2, t, 1e-5, integer_orders=True)
        assert row["public"] <= grid * (1 + 1e-6)
        assert row["public"] >= grid * (1 - 1e-6)
    assert out.per_round[-1]["public"] > dpfedavg_claimed_epsilon(1.5, 0.2, 12, 1e-5)
    assert out.privacy is not None and out.privacy.certified is not None
    cert = out.privacy.certified["public"]
    assert cert.method == "pld" and cert.epsilon < dpfedavg_claimed_epsilon(1.5, 0.2, 12, 1e-5)


def test_a_coarse_integer_encoding_costs_real_epsilon_and_is_noted_as_an_excess() -> None:
    # γ = 2: few integer units per unit of update, so the rounding's share of the sensitivity and
    # the Skellam bound's 1/μ terms are no longer negligible
    out, notices = _secure(12, scale=2.0)
    kinds = [n.split(":")[0] for n in notices]
    assert kinds.count("claim-exceeded") == 1, notices
    assert "claim-order-grid" not in kinds
    last = out.per_round[-1]["public"]
    assert last > dpfedavg_claimed_epsilon(1.5, 0.2, 12, 1e-5, integer_orders=True) * (1 + 1e-6)


def test_strict_runs_a_secure_sum_whose_certificate_is_below_the_claim() -> None:
    """privacy.strict refuses a certificate above the claim; the main job's RDP route is above it by
    the order grid only and its certificate (PLD) below it, so a strict dry run goes through."""
    from dpfl.config import load_config, parse_config
    from dpfl.rounds import build_plan, dry_run

    raw = load_config("default", []).model_dump(mode="json")
    raw["rounds"] = 5
    raw["privacy"]["strict"] = True
    config = parse_config(raw)
    out = dry_run(config, experiment=build_plan(config, [60] * 1000, 784 * 64 + 64 + 64 * 10 + 10))
    assert out.privacy is not None and out.privacy.certified is not None
    assert out.privacy.certified["public"].epsilon < dpfedavg_claimed_epsilon(1.5, 0.2, 5, 1e-5)
