"""A non-default local optimizer on Flower's deployment engine: DP-FedAvg with Adam on 3
SuperNodes (``reproducible = true``) ends with the simulator's bits. Each SuperNode builds the
same per-client optimizer state a sequential-engine client builds in simulation, fresh every
round (clients are stateless across rounds)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("flwr")

from dpfl.config import load_config  # noqa: E402
from dpfl.rounds import run_experiment  # noqa: E402
from dpfl.runtime.flower.local import LocalFederation  # noqa: E402
from dpfl.store import RunStore  # noqa: E402


@pytest.mark.slow  # ~1.5 min of SuperNodes; the default suite's Flower tests cover the wire with SGD
def test_dp_fedavg_with_adam_on_flower_equals_the_simulator(tmp_path: Path, mnist_fixture: Path) -> None:
    cfg = {
        "name": "dpfedavg-adam", "seed": 5, "rounds": 2,
        "data": {"name": "mnist", "dir": str(mnist_fixture), "verify": False},
        "partition": {"kind": "iid", "num_clients": 3, "samples_per_client": 100},
        "model": {"name": "mlp", "options": {"hidden": 32}},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "sampling": {"kind": "all"},
        "local": {"lr": 0.01, "epochs": 1, "batch_size": 25,
                  "optimizer": {"name": "adam", "betas": [0.9, 0.99], "weight_decay": 0.001}},
        "engine": "sequential",
        "threads": 1,
        "privacy": {"delta": 0.01},
    }
    path = tmp_path / "adam.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with LocalFederation(3, data_dir=mnist_fixture, workdir=tmp_path / "fed") as fed:
        got = fed.run(path, store=tmp_path / "flower.sqlite", round_timeout=300, connect_timeout=120, timeout=900,
                      reproducible=True)
    want = run_experiment(load_config(path), RunStore(tmp_path / "sim.sqlite")).final
    assert got["status"] == "finished" and got["rounds"] == 2
    assert got["params_sha256"] == want["params_sha256"]
