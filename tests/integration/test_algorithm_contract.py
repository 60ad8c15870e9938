"""The round-plan contract, over every registered private algorithm (not a hand-kept subset):

* every registered private algorithm has an account = run case
  (``test_account_equals_run.CASES``) — a new algorithm without one fails here;
* ``calibration()`` is a frozen :class:`Calibration`; ``plan(info)`` is a frozen :class:`RoundPlan`,
  a pure function of the round (asked twice: equal);
* the algorithm's releases are its plan's (nothing privacy-relevant computed beside the plan);
* the round loop fixes one plan per round and every part reads it: a run's releases equal the
  releases of the plans the loop fixed;
* under Poisson sampling the broadcast release (amplified by the secret sample) is the same
  event for the empty, a single-client and the full cohort — the realized sample never chooses a
  cheaper event than the noise the round draws (the empty-round under-certification).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from test_account_equals_run import CASES, SIZES, _config  # the account = run cases

from dpfl.algorithms.private import Calibration, PrivateAlgorithm, RoundPlan
from dpfl.algorithms.registry import algorithms
from dpfl.client.context import RoundInfo
from dpfl.rng import SeedSequence
from dpfl.rounds.build import build_experiment, plan_of

logging.getLogger("absl").setLevel(logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NUM_PARAMS = 50


def _algorithm(case: str, data_dir: Path) -> PrivateAlgorithm:
    # built as a dry run builds it (the model's layout known: LDP-FL's private ranges need it)
    algo = plan_of(build_experiment(_config(*CASES[case], data_dir), train=False)).algorithm
    assert isinstance(algo, PrivateAlgorithm)
    return algo


def _dicts(releases: list[Any]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in releases]


def test_every_registered_private_algorithm_has_a_contract_case(mnist_fixture: Path) -> None:
    covered = {CASES[c][0] for c in CASES}
    private = set()
    for name in algorithms():
        if name == "fedavg":
            continue
        private.add(name)
    assert private <= covered, f"registered private algorithms without an account = run case: {private - covered}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_plan_is_frozen_pure_and_the_source_of_the_releases(case: str, mnist_fixture: Path) -> None:
    algo = _algorithm(case, mnist_fixture)
    seeds = SeedSequence(3)
    for t in range(2):
        clients = algo.sample(t, len(SIZES), seeds)
        info = RoundInfo(t, len(SIZES), clients, seeds)
        cal = algo.calibration()
        assert isinstance(cal, Calibration) and type(cal).__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert algo.calibration() == cal  # fixed before the run
        plan = algo.plan(info)
        assert isinstance(plan, RoundPlan) and dataclasses.is_dataclass(plan)
        assert type(plan).__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert algo.plan(info) == plan  # the same public facts, the same plan
        sizes = torch.tensor(SIZES)[clients]
        fixed = info.with_plan(plan)
        expected = plan.releases([int(c) for c in clients.tolist()], sizes, False)
        got = algo.releases(fixed, sizes, False)
        # an algorithm may add releases its plan cannot know (CRD's train-loss variant), never drop any
        assert _dicts(expected) == _dicts(got)[: len(expected)]


@pytest.mark.parametrize("case", [c for c, (_, _, extra) in CASES.items()
                                  if extra.get("sampling", {}).get("kind") == "poisson"])
def test_the_broadcast_event_does_not_depend_on_the_drawn_cohort(case: str, mnist_fixture: Path) -> None:
    algo = _algorithm(case, mnist_fixture)
    seeds = SeedSequence(0)
    n = len(SIZES)
    cohorts = [[0], list(range(n))] + ([[]] if algo.releases_empty_rounds else [])
    public = []
    for ids in cohorts:
        clients = torch.tensor(ids, dtype=torch.long)
        info = RoundInfo(0, n, clients, seeds)
        rels = algo.releases(info.with_plan(algo.plan(info)), torch.tensor(SIZES)[clients], False)
        shared = [r for r in rels if r.observer == "public" and r.client_ids is None]
        assert len(shared) <= 1, (case, ids, _dicts(rels))
        # no broadcast event (per-participant charges, e.g. DP-SGD's record-level releases):
        # nothing is amplified by the sample, so nothing can get cheaper with it
        public.append(shared[0].to_dict() if shared else None)
    assert all(p == public[0] for p in public), (case, public)
    if public[0] is None:
        assert all(r.client_ids is not None for r in rels if r.observer == "public")


@pytest.mark.parametrize("case", list(CASES))
def test_the_loop_fixes_one_plan_per_round_and_the_ledger_records_its_releases(
        case: str, mnist_fixture: Path) -> None:
    from dpfl.rounds import dry_run

    cfg = _config(*CASES[case], mnist_fixture)
    built = plan_of(build_experiment(cfg, train=False))
    algo = built.algorithm
    assert isinstance(algo, PrivateAlgorithm)
    seen: list[RoundPlan] = []
    original = algo.plan

    def recording_plan(info: RoundInfo) -> RoundPlan:
        p = original(info)
        seen.append(p)
        return p

    algo.plan = recording_plan  # type: ignore[method-assign]
    done = dry_run(cfg, experiment=built).rounds
    assert done >= 1
    # once per round: the gate, the cohort and the ledger used the loop's plan, never a fresh one
    # (a run that stops early — Lei's budget spent — plans the round it stops before, no more)
    assert [p.round_idx for p in seen][:done] == list(range(done)) and len(seen) <= done + 1
