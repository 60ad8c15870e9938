"""`dpfl account CONFIG` is a dry run of the run's own code: for every private algorithm its
certificates equal the ledger of `dpfl run CONFIG` (same ε to 1e-9), and the claimed ε too."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.rounds import dry_run, run_experiment
from dpfl.store import RunStore

SIZES = [20, 35, 12, 50, 28, 40]
EPS6 = [1.0, 3.0, 9.0, 2.0, 20.0, 5.0]
UDP_LOCAL = {"local": {"lr": 0.1, "epochs": 1, "batch_size": None, "steps": None}}
POISSON = {"sampling": {"kind": "poisson", "sample_rate": 0.5}}

CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "dp-fedavg": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5}, POISSON),
    "dp-fedavg-adaptive": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5,
                                         "adaptive_clip": {"count_noise_std": 1.0}}, POISSON),
    "dp-fedavg-central-fixed": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5, "variant": "central"}, {}),
    "dp-fedavg-blur-lus": ("dp-fedavg-blur-lus", {"noise_multiplier": 1.0, "clip_norm": 0.5}, POISSON),
    "dp-fedavg-secure": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5},
                         {**POISSON, "privacy": {"delta": 1e-5, "secure_aggregation": True}}),
    "dp-fedavg-secure-hidden": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5},
                                {**POISSON, "privacy": {"delta": 1e-5, "secure_aggregation": True,
                                                        "participation": "hidden", "colluding_clients": 1}}),
    "nbafl": ("nbafl", {"epsilon": 2.0, "clip_norm": 10.0, "downlink_noise": "none"}, {}),
    "nbafl-all": ("nbafl", {"epsilon": 2.0, "clip_norm": 10.0}, {"sampling": {"kind": "all"}}),
    "udp": ("udp", {"epsilon": 5.0, "clip_norm": 1.0}, UDP_LOCAL),
    "udp-crd": ("udp-crd", {"epsilon": 5.0, "clip_norm": 1.0, "threshold": 10.0}, UDP_LOCAL),
    "udp-lei": ("udp-lei", {"epsilon": 5.0, "clip_norm": 1.0}, UDP_LOCAL),
    "ldp-fl": ("ldp-fl", {"epsilon": 1.0, "radius": 0.1}, {}),
    "ldp-fl-private-minmax": ("ldp-fl", {"epsilon": 1.0, "range": "private-minmax", "range_noise_multiplier": 2.0}, {}),
    "midp-server": ("midp-server", {"epsilons": EPS6, "clip_norm": 1.0}, {}),
    "midp-client": ("midp-client", {"epsilons": EPS6, "clip_norm": 1.0}, {}),
    "pmidp-fl": ("pmidp-fl", {"epsilons": EPS6, "clip_norm": 1.0}, {}),
    "pmidp-fl-adaptive": ("pmidp-fl", {"epsilons": EPS6, "clip_norm": 1.0, "clip_lr": 0.3}, {}),
    # q_k = batch_size / |D_k| (per client) and ⌈|D_k|/B⌉ steps; then a fixed q with local.steps
    "dp-sgd-fedavg": ("dp-sgd-fedavg", {"noise_multiplier": 1.1, "clip_norm": 1.0}, {}),
    # correlated noise under participation schemas (fleets that cannot be sampled)
    "dp-ftrl-blt": ("dp-ftrl", {"mechanism": "blt", "noise_multiplier": 2.0, "clip_norm": 0.5, "buffers": 2},
                    {"sampling": {"kind": "min_separation", "min_separation": 2}}),
    "dp-ftrl-banded-amplified": ("dp-ftrl", {"mechanism": "banded", "noise_multiplier": 1.5, "clip_norm": 0.5},
                                 {"sampling": {"kind": "cyclic_poisson", "min_separation": 2, "sample_rate": 0.6}}),
    "dp-ftrl-tree-availability": ("dp-ftrl", {"mechanism": "tree", "noise_multiplier": 2.0, "clip_norm": 0.5},
                                  {"sampling": {"kind": "availability", "min_separation": 2,
                                                "availability": {"period": 2, "window": 1.0, "checkin_rate": 0.7}}}),
    "dp-ftrl-independent": ("dp-ftrl", {"mechanism": "independent", "target_epsilon": 6.0, "clip_norm": 0.5,
                                        "server_momentum": 0.5},
                            {"sampling": {"kind": "min_separation", "min_separation": 1}}),
    "dp-sgd-fedavg-fixed-rate": ("dp-sgd-fedavg",
                                 {"noise_multiplier": 0.9, "clip_norm": 1.0, "record_sample_rate": 0.2},
                                 {"local": {"lr": 0.1, "batch_size": None, "steps": 4}, **POISSON}),
}


def _config(name: str, options: dict[str, Any], extra: dict[str, Any], data_dir: Path) -> Any:
    raw: dict[str, Any] = {
        "name": f"account-{name}", "seed": 7, "rounds": 3,
        "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "model": {"name": "logistic"},
        "algorithm": {"name": name, "options": options},
        "sampling": {"kind": "fixed", "clients_per_round": 4},
        "privacy": {"delta": 1e-5},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 10},
        "eval_every": 3,
    }
    raw.update(extra)
    return parse_config(raw)


def _same(a: float, b: float) -> bool:
    return (math.isinf(a) and math.isinf(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_account_dry_run_equals_the_run_ledger(case: str, mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _config(*CASES[case], mnist_fixture)
    run = run_experiment(cfg, RunStore(tmp_path / "s.sqlite")).final["privacy"]
    dry = dry_run(cfg).privacy.to_dict()
    assert dry is not None and run["certified"] is not None
    for obs in ("server", "public"):
        r, d = run["certified"]["observers"][obs], dry["certified"]["observers"][obs]
        for key in ("epsilon", "epsilon_rdp"):
            assert _same(float(r[key]), float(d[key])), (obs, key, r[key], d[key])
        assert (r["method"], r["delta"], r["relation"], r["privacy_unit"]) == (
            d["method"], d["delta"], d["relation"], d["privacy_unit"])
    if case == "udp-crd":
        # CRD's claim is the paper's formula for the rounds it ran, which the test loss decided;
        # a dry run cannot know them (its certified headline, the ex-ante budget, is equal above)
        return
    claimed_run, claimed_dry = run["claimed_epsilon"], dry["claimed_epsilon"]
    if isinstance(claimed_run, dict):
        assert claimed_run.keys() == claimed_dry.keys()
        assert all(_same(float(claimed_run[k]), float(claimed_dry[k])) for k in claimed_run)
    else:
        assert _same(float(claimed_run), float(claimed_dry))


def test_account_config_on_the_command_line(
        mnist_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dpfl account CONFIG --json` prints the dry run (the short form of `dpfl account config`)."""
    import json

    import yaml

    from dpfl.cli import main

    cfg = _config(*CASES["dp-fedavg"], mnist_fixture)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    assert main(["account", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rounds"] == 3
    direct = dry_run(cfg).privacy.to_dict()["certified"]["headline"]["epsilon"]
    assert out["privacy"]["certified"]["headline"]["epsilon"] == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_a_plan_from_shapes_equals_the_config_dry_run(case: str, mnist_fixture: Path) -> None:
    """The per-paper shortcuts dry-run a plan built from shapes only (client sizes, number of
    parameters): it must equal the dry run of the built config."""
    from dpfl.rounds import build_plan

    cfg = _config(*CASES[case], mnist_fixture)
    full = dry_run(cfg).privacy.to_dict()
    if case == "ldp-fl-private-minmax":
        # its range reports are per layer: a plan from shapes has no layout, and says so
        with pytest.raises(ConfigError, match="parameter layout"):
            dry_run(cfg, experiment=build_plan(cfg, SIZES, 785 * 10))
        return
    # logistic on 28×28, 10 classes
    shapes = dry_run(cfg, experiment=build_plan(cfg, SIZES, 785 * 10)).privacy.to_dict()
    for obs in ("server", "public"):
        a, b = full["certified"]["observers"][obs], shapes["certified"]["observers"][obs]
        assert _same(float(a["epsilon"]), float(b["epsilon"])), (obs, a["epsilon"], b["epsilon"])
        assert a["method"] == b["method"]


def test_per_round_epsilons_end_at_the_summary(mnist_fixture: Path) -> None:
    cfg = _config(*CASES["dp-fedavg-central-fixed"], mnist_fixture)
    out = dry_run(cfg, per_round=True)
    assert [r["round"] for r in out.per_round] == [1, 2, 3]
    assert out.privacy is not None and out.privacy.certified is not None
    for obs in ("server", "public"):
        eps = [float(r[obs]) for r in out.per_round]
        assert eps == sorted(eps)  # composition never lowers ε
        assert eps[-1] == pytest.approx(out.privacy.certified[obs].epsilon_rdp, rel=1e-9)
