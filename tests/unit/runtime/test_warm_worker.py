"""The warm client worker: same upload as a cold ClientApp, kept loaded between rounds, gone
with its SuperNode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpfl.runtime.flower.warm import WarmClient, train_round


def _rc(shared: Path, round_idx: int) -> dict:
    cfg = {
        "name": "warm", "seed": 5, "rounds": 3,
        "data": {"name": "mnist", "dir": str(shared)},
        "partition": {"kind": "iid", "num_clients": 3, "samples_per_client": 50},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 25},
        "engine": "sequential", "threads": 1, "privacy": {"delta": 0.01},
    }
    return {"round": round_idx, "client": 1, "cohort-size": 3, "num-clients": 3, "config": json.dumps(cfg),
            "state": {}, "reproducible": True}


def test_the_warm_worker_returns_the_cold_upload_and_ends_with_its_node(shared_data: Path) -> None:
    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # stands in for flower-superexec
    try:
        client = WarmClient(f"test-{os.getpid()}-{node.pid}", node.pid)
        params = np.zeros(7850, dtype=np.float32)
        for t in range(2):  # the second round reuses the loaded run
            meta, vector = client.train(_rc(shared_data, t), params, 1, None)
            want_meta, want = train_round(_rc(shared_data, t), params, 1, None)
            assert np.array_equal(vector, want) and vector.dtype == np.float32
            assert meta["declared"] == want_meta["declared"] and meta["num_samples"] == 50
            params = vector
        assert client.path.exists()
        bad = _rc(shared_data, 0)
        bad["num-clients"] = 4
        with pytest.raises(RuntimeError, match="the data sets differ"):
            client.train(bad, params, 1, None)
    finally:
        node.kill()
        node.wait()
    end = time.monotonic() + 20
    while client.path.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert not client.path.exists(), "the worker outlived its SuperNode"


def test_a_private_client_keeps_its_training_loss_a_plain_one_reports_it(shared_data: Path) -> None:
    """The training loss is a function of the client's data with no noise on it: a private
    algorithm's client sends NaN in its place (the certificate against the server covers only
    the noised upload); plain FedAvg's client reports it."""
    params = np.zeros(7850, dtype=np.float32)
    private_meta, _ = train_round(_rc(shared_data, 0), params, 1, None)
    assert np.isnan(private_meta["train_loss"])
    rc = _rc(shared_data, 0)
    cfg = json.loads(rc["config"])
    cfg["algorithm"] = {"name": "fedavg"}
    rc["config"] = json.dumps(cfg)
    plain_meta, _ = train_round(rc, params, 1, None)
    assert np.isfinite(plain_meta["train_loss"]) and plain_meta["train_loss"] > 0
