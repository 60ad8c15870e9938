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


def test_a_node_trains_with_its_threads_not_the_configs(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build sets torch's threads to the config's ``threads``; a node's DPFL_NODE_THREADS wins
    over it (``dpfl federate local`` sets cores // nodes), unset leaves the config's, a bad value
    fails the message before the run is cached."""
    import torch

    from dpfl.errors import ConfigError
    from dpfl.runtime.flower import warm

    rc = _rc(shared_data, 0)
    cfg = json.loads(rc["config"])
    cfg["threads"] = 3
    rc["config"] = json.dumps(cfg)
    params = np.zeros(7850, dtype=np.float32)
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(warm, "_CACHE", {})
        monkeypatch.setenv(warm.NODE_THREADS_ENV, "1")
        train_round(rc, params, 1, None)
        assert torch.get_num_threads() == 1
        monkeypatch.setattr(warm, "_CACHE", {})
        monkeypatch.delenv(warm.NODE_THREADS_ENV)
        train_round(rc, params, 1, None)
        assert torch.get_num_threads() == 3
        monkeypatch.setattr(warm, "_CACHE", {})
        monkeypatch.setenv(warm.NODE_THREADS_ENV, "0")
        with pytest.raises(ConfigError, match=r"\$DPFL_NODE_THREADS must be a positive integer\. Found 0"):
            train_round(rc, params, 1, None)
        assert warm._CACHE == {}
    finally:
        torch.set_num_threads(before)
