"""000 end to end: a recipe at smoke scale through `reproduce`, and CRD ending a run early."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpfl.config import parse_config
from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import GIVEN_COHORTS_MARK, GIVEN_COHORTS_NOTE, reproduce
from dpfl.rounds import run_experiment
from dpfl.store import RunStore


def test_fig8_smoke_reproduces_with_both_epsilons(tmp_path: Path, shared_data: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    path = reproduce(get_recipe("000/fig8"), "smoke", store, tmp_path / "reports", data_dir=str(shared_data),
                     run_one=lambda c: run_experiment(c, store))
    text = path.read_text()
    assert "| CRD beats original UDP |" in text and "comes close to optimal UDP" in text
    assert "claimed ε" in text and "certified ε server" in text
    assert (path.parent / "comparison.png").stat().st_size > 1000
    records = store.list()
    assert len(records) == 5 and all(r.status == "finished" for r in records)
    crd = [r for r in records if r.algorithm == "udp-crd"]
    assert len(crd) == 2 and all(any(n["kind"] == "not-covered" for n in store.notices(r.run_id)) for r in crd)
    # the loss-rise variant stands next to Alg. 2, labelled, and certifies infinity
    assert "| (not a paper claim) CRD as printed (Alg. 2) against the CRD, loss-rise variant |" in text
    row = next(line for line in text.splitlines() if line.startswith("| CRD, loss-rise variant (β = 0.9; certified ∞)"))
    assert "| inf / inf | inf |" in row, row  # certified server (best / RDP) and public
    # fixed-size sampling: UDP's certificates compose the cohorts drawn (marked, footnoted); CRD's is
    # the ex-ante budget of its Rényi filter (unmarked)
    udp = next(line for line in text.splitlines() if line.startswith("| original UDP (T = "))
    assert udp.count(GIVEN_COHORTS_MARK) == 3, udp  # server best / RDP, public
    assert GIVEN_COHORTS_MARK not in row
    assert GIVEN_COHORTS_NOTE in text


def test_crd_discounts_T_and_the_run_ends_early(tmp_path: Path, shared_data: Path) -> None:
    cfg = parse_config({
        "rounds": 6,
        "data": {"name": "mnist", "dir": str(shared_data)},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 30},
        "algorithm": {"name": "udp-crd", "options": {"epsilon": 4.0, "clip_norm": 1.0, "threshold": 10.0,
                                                     "discount": 0.5}},
        "privacy": {"delta": 1e-3},
        "sampling": {"kind": "fixed", "clients_per_round": 2},
        "local": {"lr": 0.5, "batch_size": None},
    })
    store = RunStore(tmp_path / "runs.sqlite")
    res = run_experiment(cfg, store)
    # zeta = 10 always triggers: T = floor(0.5 (6 - 0)) + 0 = 3, then floor(0.5 (3 - 1)) + 1 = 2
    assert res.rounds_done == 2
    assert [r["crd_T"] for r in res.history] == [3, 2]
    assert "discounted from 6 to 2" in res.final["stop_reason"]
    priv = res.final["privacy"]
    assert max(float(v) for v in priv["claimed_epsilon"].values()) <= 4.0 + 1e-9
    assert priv["certified"]["observers"]["server"]["epsilon"] > 0
    assert res.history[1]["noise_std_mean"] < res.history[0]["noise_std_mean"]  # Thm 4: fewer rounds left


@pytest.mark.parametrize("key", ["000/fig5", "000/fig10"])
def test_recipes_build_at_every_scale(key: str) -> None:
    recipe = get_recipe(key)
    for scale in ("smoke", "reduced", "full"):
        runs = recipe.build(scale)
        assert runs and all(r.config.local.batch_size is None for r in runs)
