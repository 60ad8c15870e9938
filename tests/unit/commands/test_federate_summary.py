"""`dpfl federate local` ends with the run's privacy, as `dpfl run` prints it (its JSON summary had
no epsilon)."""

from __future__ import annotations

from pathlib import Path

from dpfl.commands.federate import _privacy_of
from dpfl.config import parse_config
from dpfl.rounds import run_experiment
from dpfl.store import RunStore


def test_the_summary_carries_both_epsilons_and_the_run_lines(mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = parse_config({
        "name": "fed-summary", "seed": 1, "rounds": 2,
        "data": {"name": "mnist", "dir": str(mnist_fixture), "verify": False},
        "partition": {"kind": "iid", "num_clients": 10, "samples_per_client": 20},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "sampling": {"kind": "poisson", "sample_rate": 0.5},
        "privacy": {"delta": 1e-3},
        "local": {"lr": 0.1, "steps": 1, "batch_size": 10},
    })
    store = tmp_path / "s.sqlite"
    res = run_experiment(cfg, RunStore(store))
    lines, certified = _privacy_of({"run_id": res.run_id, "store": str(store), "status": "finished"})
    assert res.privacy is not None and res.privacy.certified is not None
    assert certified == {obs: c.epsilon for obs, c in res.privacy.certified.items()}
    assert "certified epsilon:" in lines and "observer server" in lines and "observer public" in lines
    assert _privacy_of({"run_id": res.run_id, "store": str(tmp_path / "absent.sqlite")}) == ("", {})
