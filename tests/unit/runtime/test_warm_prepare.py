"""A node's warm worker started and prepared at the server's first question (the ``query``
message carries the run's config): one worker, which has built the run before the first round's
request is read, and whose upload is the cold one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from dpfl.runtime.flower.warm import WarmClient, train_round


def _rc(shared: Path) -> dict:
    cfg = {
        "name": "warm-prepare", "seed": 5, "rounds": 2,
        "data": {"name": "mnist", "dir": str(shared)},
        "partition": {"kind": "iid", "num_clients": 3, "samples_per_client": 50},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 25},
        "engine": "sequential", "threads": 1, "privacy": {"delta": 0.01},
    }
    return {"round": 0, "client": 2, "cohort-size": 3, "num-clients": 3, "config": json.dumps(cfg),
            "state": {}, "reproducible": True}


def _workers(socket_path: Path) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dpfl.runtime.flower.warm" in args and str(socket_path).encode() in args:
            found.append(int(cmdline.parent.name))
    return found


def test_a_prepared_worker_is_the_only_one_and_has_built_the_run(shared_data: Path) -> None:
    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # stands in for flower-superexec
    try:
        client = WarmClient(f"test-prepare-{os.getpid()}-{node.pid}", node.pid)
        rc = _rc(shared_data)
        client.prepare(rc["config"], None)
        client.prepare(rc["config"], None)  # a second query (or a race): no second worker
        params = np.zeros(7850, dtype=np.float32)
        meta, vector = client.train(rc, params, 2, None)  # waits for the starting worker, never starts another
        assert len(_workers(client.path)) == 1
        assert meta["seconds"]["first"] is True and meta["seconds"]["build"] == 0.0  # built before the request
        _, want = train_round(rc, params, 2, None)
        assert np.array_equal(vector, want)
        assert not client.path.with_suffix(".prepare.json").exists()
    finally:
        node.kill()
        node.wait()
