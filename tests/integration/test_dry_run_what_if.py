"""``dry_run(..., what_if_uplink_sensitivity=s)``: the server is certified as if every upload had
L2 sensitivity ``s`` (003's 2C/m instead of the enforced 2C), over the cohorts the config draws.

The reference values come from dp-accounting called directly, not from dpfl's ledger: the
busiest client's T_k uploads are T_k × Gaussian(σ_U / s) (replace-one, no amplification: the
server knows whom it sampled).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import dp_accounting as dpa
import pytest

from dpfl.algorithms.nbafl import NbAfl
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.rounds import build_plan, dry_run

logging.getLogger("absl").setLevel(logging.ERROR)

N, M, CLIP, DELTA = 8, 20, 1.0, 0.01


def _config(*, rounds: int, sampled: int | None, downlink: str) -> Any:
    return parse_config({
        "name": "what-if-uplink", "seed": 5, "rounds": rounds,
        "data": {"name": "mnist", "dir": "data"},
        "partition": {"kind": "iid", "num_clients": N, "samples_per_client": M},
        "model": {"name": "logistic"},
        "algorithm": {"name": "nbafl", "options": {"epsilon": 50.0, "clip_norm": CLIP, "downlink_noise": downlink}},
        "sampling": {"kind": "all"} if sampled is None else {"kind": "fixed", "clients_per_round": sampled},
        "privacy": {"delta": DELTA},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 10},
    })


def _reference(z: float, count: int) -> tuple[float, float]:
    """(RDP ε, exact ε) of ``count`` × Gaussian(z) under replace-one, from dp-accounting directly:
    its RDP accountant, and its analytic Gaussian for the composition (one Gaussian of multiplier
    z / sqrt(count)). dp-accounting's discretized PLDAccountant is not the reference here: at these
    ε (tens) its pessimistic grid lies ~10% above the exact value."""
    event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), count)
    rdp = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    rdp.compose(event)
    return rdp.get_epsilon(DELTA), dpa.get_epsilon_gaussian(z / math.sqrt(count), DELTA)


@pytest.mark.parametrize(("rounds", "sampled", "downlink"), [
    (4, None, "paper"),  # every client in every round: T uploads each, ex ante
    (9, 3, "none"),      # K-random: the busiest client's uploads in the cohorts drawn from the seed
])
def test_what_if_uplink_sensitivity_against_dp_accounting(rounds: int, sampled: int | None, downlink: str) -> None:
    cfg = _config(rounds=rounds, sampled=sampled, downlink=downlink)
    plan = build_plan(cfg, [M] * N, 7850)
    algo = plan.algorithm
    assert isinstance(algo, NbAfl)
    cal = algo.calibration()
    assert cal.paper_sensitivity == pytest.approx(2 * CLIP / M, rel=1e-12)  # 003 eq. 5–6
    what_if = dry_run(cfg, experiment=plan, what_if_uplink_sensitivity=cal.paper_sensitivity)
    plain = dry_run(cfg, experiment=build_plan(cfg, [M] * N, 7850))
    assert what_if.privacy is not None and what_if.privacy.certified is not None
    assert plain.privacy is not None and plain.privacy.certified is not None
    server = what_if.privacy.certified["server"]

    counts = Counter(c for t in range(rounds) for c in algo.sample(t, N, plan.seeds).tolist())
    busiest = max(counts.values())
    if sampled is None:
        assert set(counts.values()) == {rounds} and len(counts) == N
    else:
        assert len(set(counts.values())) > 1  # the clients took part unequally: the worst one is priced
    eps_rdp, eps_exact = _reference(cal.uplink_noise_std / cal.paper_sensitivity, busiest)
    assert server.epsilon_rdp == pytest.approx(eps_rdp, rel=1e-6)
    assert server.method == "pld" and server.epsilon == pytest.approx(eps_exact, rel=1e-6)  # the tightest: exact
    assert server.basis == ("ex-ante" if sampled is None else "given-cohorts")

    # without the what-if the server is charged the enforced 2C: the same composition at z = σ_U / 2C
    enforced = plain.privacy.certified["server"]
    # (exact; its RDP lies below dp-accounting's default orders', as dpfl adds orders 1.01-1.09)
    enforced_rdp, enforced_exact = _reference(cal.uplink_noise_std / (2 * CLIP), busiest)
    assert enforced.epsilon == pytest.approx(enforced_exact, rel=1e-6)
    assert enforced.epsilon_rdp is not None and enforced.epsilon_rdp <= enforced_rdp
    assert server.epsilon < enforced.epsilon
    # the public's releases (the broadcasts) are the algorithm's, untouched by the what-if
    assert what_if.privacy.certified["public"].epsilon == plain.privacy.certified["public"].epsilon
    # per client: each client's uploads at the what-if sensitivity
    table = what_if.privacy.client_epsilons_rdp
    assert table is not None
    for client, k in counts.items():
        assert table["server"][client] == pytest.approx(
            _reference(cal.uplink_noise_std / cal.paper_sensitivity, k)[0], rel=1e-6)


def test_what_if_uplink_sensitivity_refusals() -> None:
    cfg = _config(rounds=2, sampled=None, downlink="none")
    plan = build_plan(cfg, [M] * N, 7850)
    with pytest.raises(ConfigError, match="one what-if at a time"):
        dry_run(cfg, experiment=plan, what_if_uplink_sensitivity=0.1, what_if_secure_aggregation=True)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="finite number > 0"):
            dry_run(cfg, experiment=plan, what_if_uplink_sensitivity=bad)
