"""`dpfl federate local` ends like `dpfl run` and writes the same per-round CSV (issue #30).

The same config (every client every round, so both runs have the same cohorts and so the same
certificates) run by ``dpfl run --csv`` and by ``dpfl federate local --csv``: the federated
command's privacy lines (claimed and certified epsilon, each observer, what secure aggregation
buys) are the simulated command's, and its CSV has one row per round with the same certified
epsilons (and the deployment's own columns, e.g. ``arrived``; the simulation's experimenter-only
columns such as ``update_norm_mean`` are not in a deployment's rounds).
Slow (opt-in, ``-m slow``): a SuperLink and two SuperNodes.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("flwr")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prompt_superexec")]

DPFL = [sys.executable, "-m", "dpfl"]


def _privacy_lines(out: str) -> list[str]:
    keep = ("claimed epsilon", "certified epsilon", "  observer", "secure aggregation:", "  with", "  without",
            "not covered")
    return [line for line in out.splitlines() if line.startswith(keep)]


def test_federate_local_ends_like_dpfl_run_and_writes_the_csv(tmp_path: Path, mnist_fixture: Path) -> None:
    cfg = {
        "name": "federate-outputs", "seed": 5, "rounds": 2,
        "data": {"name": "mnist", "dir": str(mnist_fixture), "verify": False},
        "partition": {"kind": "iid", "num_clients": 2, "samples_per_client": 50},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "sampling": {"kind": "all"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 25},
        "engine": "sequential", "threads": 1, "privacy": {"delta": 0.01, "secure_aggregation": True},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    sim = subprocess.run([*DPFL, "run", str(path), "--store", str(tmp_path / "sim.sqlite"),
                          "--csv", str(tmp_path / "sim.csv")], capture_output=True, text=True, timeout=600)
    assert sim.returncode == 0, sim.stdout[-3000:] + sim.stderr[-3000:]
    fed = subprocess.run([*DPFL, "federate", "local", str(path), "--store", str(tmp_path / "fed.sqlite"),
                          "--csv", str(tmp_path / "metrics" / "{run_id}.csv"), "--timeout", "900"],
                         capture_output=True, text=True, timeout=1200)
    assert fed.returncode == 0, fed.stdout[-3000:] + fed.stderr[-3000:]
    want = _privacy_lines(sim.stdout)
    assert any(line.startswith("certified epsilon") for line in want)
    assert any(line.startswith("secure aggregation:") for line in want)
    assert _privacy_lines(fed.stdout) == want
    (written,) = (tmp_path / "metrics").glob("*.csv")
    assert written.name.endswith("-flower-secure.csv")
    with open(written) as f:
        rows = list(csv.DictReader(f))
    with open(tmp_path / "sim.csv") as f:
        sim_rows = list(csv.DictReader(f))
    assert [r["round"] for r in rows] == ["1", "2"]
    eps = sorted(k for k in sim_rows[0] if k.startswith("epsilon_certified"))
    assert eps and [[r[k] for k in eps] for r in rows] == [[r[k] for k in eps] for r in sim_rows]
    assert {"arrived", "test_accuracy"} <= set(rows[0])  # the deployment's own columns too
