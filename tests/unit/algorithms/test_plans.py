"""Per-round plans: calibration is visible, and no question about a round depends on call order.

For every private algorithm migrated to a plan (UDP and its variants, NbAFL, MI-DP, PMIDP-FL,
LDP-FL):

* ``calibration()`` returns the numbers fixed before the run, printable as JSON;
* the releases of a round — before training, after ``aggregate`` moved the algorithm's state
  on (PMIDP's thresholds, CRD's T), and for the arrivals after dropouts — are the same
  whether asked before or after ``aggregate``, and ``declared_plan`` matches the plan.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from dpfl.algorithms.private import Calibration, PrivateAlgorithm
from dpfl.algorithms.registry import BuildContext, build_algorithm, build_sampler
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.config import parse_config
from dpfl.rng import SeedSequence

SIZES = [20, 35, 12, 50, 28, 40]
P = 64

CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "udp": ("udp", {"epsilon": 4.0, "clip_norm": 1.0}, {}),
    "udp-lei": ("udp-lei", {"epsilon": 4.0, "clip_norm": 1.0}, {}),
    "nbafl": ("nbafl", {"epsilon": 5.0, "clip_norm": 10.0, "exposures": 1}, {"sampling": {"kind": "all"}}),
    "midp-server": ("midp-server", {"epsilons": [2.0, 3.0, 4.0, 5.0, 6.0, 8.0], "clip_norm": 1.0}, {}),
    "midp-client": ("midp-client", {"epsilon": 3.0, "clip_norm": 1.0}, {}),
    "pmidp-fl": ("pmidp-fl", {"epsilons": [2.0, 3.0, 4.0, 5.0, 6.0, 8.0], "clip_norm": 1.0, "clip_lr": 0.5}, {}),
    "ldp-fl": ("ldp-fl", {"epsilon": 1.0, "range": "fixed", "radius": 0.1}, {}),
}


def _build(case: str) -> PrivateAlgorithm:
    name, options, extra = CASES[case]
    raw = {
        "rounds": 10,
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "algorithm": {"name": name, "options": options},
        "privacy": {"delta": 1e-5},
        "sampling": extra.get("sampling", {"kind": "fixed", "clients_per_round": 4}),
        "local": {"lr": 0.1, "batch_size": None},
    }
    cfg = parse_config(raw)
    algo = build_algorithm(cfg.algorithm, build_sampler(cfg.sampling, len(SIZES)),
                           BuildContext(cfg, len(SIZES), torch.tensor(SIZES), P))
    assert isinstance(algo, PrivateAlgorithm)
    return algo


def _dicts(releases: list) -> list[dict[str, Any]]:
    return [r.to_dict() for r in releases]


@pytest.mark.parametrize("case", list(CASES))
def test_calibration_is_exposed_and_printable(case: str) -> None:
    algo = _build(case)
    cal = algo.calibration()  # type: ignore[attr-defined]
    assert isinstance(cal, Calibration) and type(cal).__dataclass_params__.frozen  # type: ignore[attr-defined]
    as_dict = cal.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict


@pytest.mark.parametrize("case", list(CASES))
def test_releases_do_not_depend_on_aggregate_having_run(case: str) -> None:
    algo = _build(case)
    seeds = SeedSequence(5)
    clients = algo.sample(0, len(SIZES), seeds)
    info = RoundInfo(0, len(SIZES), clients, seeds)
    info = info.with_plan(algo.plan(info))  # as the round loop does: one plan for the round
    k = int(clients.numel())
    sizes = torch.tensor([SIZES[c] for c in clients.tolist()])
    before = _dicts(algo.releases(info, sizes, False))
    gen = torch.Generator().manual_seed(0)
    local = LocalResult(0.05 * torch.randn(k, P, generator=gen), torch.zeros(k), sizes)
    uploads = algo.client_step(torch.zeros(P), local, info)
    for row, c in enumerate(clients.tolist()):
        declared = algo.declared_plan(info, c)
        if "noise_std" in uploads.declared:
            assert declared["noise_std"] == float(uploads.declared["noise_std"][row])
    arrived = uploads.select(torch.tensor([0, 2]))
    arrivals_before = _dicts(algo.releases_for_arrivals(info, arrived.clients, arrived.num_samples, False))
    algo.aggregate(torch.zeros(P), arrived, info)
    assert _dicts(algo.releases(info, sizes, False)) == before
    assert _dicts(algo.releases_for_arrivals(info, arrived.clients, arrived.num_samples, False)) == arrivals_before
