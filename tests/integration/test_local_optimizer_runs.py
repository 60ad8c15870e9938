"""The `local.optimizer` block end to end: refused by the UDP family (000 Thm 1 assumes plain
GD) in a run and in a dry run, accepted by an algorithm that clips the update (DP-FedAvg), whose
certificates do not depend on the optimizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpfl.cli import main
from dpfl.store import RunStore


def _cfg(data_dir: Path, algorithm: dict, local: dict) -> dict:
    return {
        "name": "optimizer",
        "seed": 2,
        "rounds": 2,
        "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 30},
        "model": {"name": "mlp", "options": {"hidden": 8}},
        "algorithm": algorithm,
        "local": local,
    }


def _write(tmp: Path, cfg: dict, name: str = "cfg.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(cfg))
    return path


UDP_LOCAL = {"lr": 0.1, "batch_size": None}


@pytest.mark.parametrize("algo", ["udp", "udp-crd", "udp-lei"])
@pytest.mark.parametrize("optimizer", [{"name": "adam"}, {"name": "sgd", "momentum": 0.9},
                                       {"name": "sgd", "weight_decay": 0.001}])
def test_udp_family_refuses_any_optimizer_but_plain_sgd(algo: str, optimizer: dict, mnist_fixture: Path,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    alg = {"name": algo, "options": {"epsilon": 5.0, "clip_norm": 1.0}}
    cfg = _write(tmp_path, _cfg(mnist_fixture, alg, {**UDP_LOCAL, "optimizer": optimizer}))
    for argv in (["run", str(cfg), "--store", str(tmp_path / "s.sqlite")], ["account", str(cfg)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{algo}: `local.optimizer` must be sgd" in err and "Thm 1" in err, err
        assert err.count("\n") == 1
    assert not RunStore(tmp_path / "s.sqlite").list()  # refused before the run was registered


def test_udp_with_explicit_plain_sgd_runs(mnist_fixture: Path, tmp_path: Path) -> None:
    alg = {"name": "udp", "options": {"epsilon": 5.0, "clip_norm": 1.0}}
    cfg = _write(tmp_path, _cfg(mnist_fixture, alg, {**UDP_LOCAL, "optimizer": {"name": "sgd"}}))
    assert main(["run", str(cfg), "--store", str(tmp_path / "s.sqlite")]) == 0


def test_dp_fedavg_with_adam_runs_and_certifies_as_with_sgd(mnist_fixture: Path, tmp_path: Path) -> None:
    alg = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}}
    store = tmp_path / "s.sqlite"
    results = {}
    for name, optimizer in (("sgd", {"name": "sgd"}), ("adam", {"name": "adam", "betas": [0.9, 0.99]})):
        cfg = _write(tmp_path, _cfg(mnist_fixture, alg, {"lr": 0.01, "batch_size": 10, "optimizer": optimizer}),
                     f"{name}.yaml")
        assert main(["run", str(cfg), "--store", str(store)]) == 0
    records = {r.config["local"].get("optimizer", {}).get("name", "sgd"): r for r in RunStore(store).list()}
    assert set(records) == {"sgd", "adam"} and all(r.status == "finished" for r in records.values())
    for name, r in records.items():
        results[name] = r.result
    # the update is clipped and noised the same way: the certificates do not depend on the optimizer
    assert results["adam"]["privacy"] == results["sgd"]["privacy"]
    assert results["adam"]["params_sha256"] != results["sgd"]["params_sha256"]
