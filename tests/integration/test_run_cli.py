"""End-to-end: `dpfl run` on the tiny MNIST-format fixture, the run store, bad input, kill -9 and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dpfl.cli import main
from dpfl.store import RunStore


def _tiny(shared: Path, **over: object) -> dict:
    cfg = {
        "name": "tiny",
        "seed": 3,
        "rounds": 3,
        "data": {"name": "mnist", "dir": str(shared), "verify": False},
        "partition": {"kind": "iid", "num_clients": 10, "samples_per_client": 60},
        "model": {"name": "mlp", "options": {"hidden": 32}},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 16},
        "checkpoint_every": 1,
    }
    cfg.update(over)
    return cfg


def _write(tmp: Path, cfg: dict) -> Path:
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_run_stores_rounds_result_and_plot(mnist_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _write(tmp_path, _tiny(mnist_fixture))
    store_path = tmp_path / "runs" / "dpfl.sqlite"
    assert main(["run", str(cfg), "--store", str(store_path), "--set", "rounds=4"]) == 0
    out = capsys.readouterr().out
    store = RunStore(store_path)
    (record,) = store.list()
    assert record.status == "finished"
    rounds = store.rounds(record.run_id)
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    assert all(0.0 <= r["test_accuracy"] <= 1.0 for r in rounds)
    assert rounds[-1]["test_accuracy"] > 0.5  # 600 fixture samples, 4 rounds: far above chance (0.1)
    assert record.env["torch"].startswith("2.") and "git_commit" in record.env
    assert record.config["rounds"] == 4
    assert f"run {record.run_id}" in out and "final test accuracy" in out
    assert (tmp_path / "runs" / "plots" / f"{record.run_id}.png").stat().st_size > 1000
    assert "stored result" not in out
    # same command again: nothing recomputed, the stored result is shown and says it is one
    assert main(["run", str(cfg), "--store", str(store_path), "--set", "rounds=4"]) == 0
    assert len(store.list()) == 1
    again = capsys.readouterr().out
    assert f"stored result of run {record.run_id} (finished " in again and "--restart" in again
    assert main(["runs", "--store", str(store_path)]) == 0
    assert record.run_id in capsys.readouterr().out


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"data": {"name": "mnits", "dir": "x"}}, "unknown data set 'mnits'"),
        ({"model": {"name": "mlpp"}}, "Found 'mlpp'"),
        ({"algorithm": {"name": "fedsgd"}}, "unknown algorithm 'fedsgd'"),
        ({"local": {"lr": -0.1}}, "local.lr"),
        ({"lcoal": {"lr": 0.1}}, "unknown key `lcoal`"),
        ({"local": {"lr": 0.1, "epoch": 2}}, "unknown key `local.epoch`"),
        ({"sampling": {"kind": "fixed", "clients_per_round": 11}}, "exceeds the number of clients (10)"),
    ],
)
def test_bad_input_is_one_line_exit_2(mnist_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                      override: dict, needle: str) -> None:
    cfg = _tiny(mnist_fixture)
    cfg.update(override)
    code = main(["run", str(_write(tmp_path, cfg)), "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_data_says_how_to_fetch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _tiny(tmp_path / "nowhere")
    assert main(["run", str(_write(tmp_path, cfg)), "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "dpfl data fetch mnist" in err and "Traceback" not in err


def test_bad_input_keeps_existing_store(mnist_fixture: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "s.sqlite"
    assert main(["run", str(_write(tmp_path, _tiny(mnist_fixture, rounds=1))), "--store", str(store_path)]) == 0
    before = RunStore(store_path).list()
    bad = _tiny(mnist_fixture)
    bad["rounds"] = 0
    assert main(["run", str(_write(tmp_path, bad)), "--store", str(store_path)]) == 2
    assert RunStore(store_path).list() == before


def test_cli_subprocess_error_has_no_traceback(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rounds: 2\nmodel: {name: nosuchmodel}\ndata: {dir: /nonexistent}\n")
    proc = subprocess.run([sys.executable, "-m", "dpfl", "run", str(cfg), "--store", str(tmp_path / "s.sqlite")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("dpfl: error:")


def _run_to_end(cfg: Path, store: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "dpfl", "run", str(cfg), "--store", str(store)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (rec,) = RunStore(store).list()
    return rec.result["params_sha256"]


def test_kill_9_then_same_command_resumes_to_the_same_model(mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _tiny(mnist_fixture, rounds=40, checkpoint_every=4)
    cfg["partition"] = {"kind": "iid", "num_clients": 20, "samples_per_client": 50}
    cfg["model"] = {"name": "mlp"}
    cfg["threads"] = 2  # the engine's chunk threads: a resumed run is the fresh one bit for bit on them too
    path = _write(tmp_path, cfg)
    killed_store = tmp_path / "killed" / "dpfl.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "dpfl", "run", str(path), "--store", str(killed_store)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt_dir = killed_store.parent / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not list(ckpt_dir.glob("*.pt")):
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    (rec,) = RunStore(killed_store).list()
    assert rec.status == "running"  # it really died mid-run
    done_before = len(RunStore(killed_store).rounds(rec.run_id))
    assert 4 <= done_before < 40
    resumed = _run_to_end(path, killed_store)
    rounds = RunStore(killed_store).rounds(rec.run_id)
    assert [r["round"] for r in rounds] == list(range(40))
    fresh = _run_to_end(path, tmp_path / "fresh" / "dpfl.sqlite")
    assert resumed == fresh
    json.dumps(rounds)  # the stored metrics are plain JSON


# two fresh processes (~14 s); threaded training equals sequential in tests/unit/sim/test_sgd_kernel.py
@pytest.mark.slow
def test_fresh_processes_of_one_config_on_two_threads_end_in_the_same_model(
        mnist_fixture: Path, tmp_path: Path) -> None:
    """A run is bit-reproducible from one process to the next on the engine's chunk threads: the
    first kernel call of a process made from two threads at once once ended some runs of this
    config in other last bits (docs/architecture.md, "Chunks")."""
    cfg = _tiny(mnist_fixture, rounds=3, checkpoint_every=3)
    cfg["partition"] = {"kind": "iid", "num_clients": 20, "samples_per_client": 50}
    cfg["model"] = {"name": "mlp"}
    cfg["threads"] = 2
    path = _write(tmp_path, cfg)
    shas = {_run_to_end(path, tmp_path / f"p{i}" / "dpfl.sqlite") for i in range(4)}
    assert len(shas) == 1, shas


def test_algorithm_can_end_the_run_early(mnist_fixture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpfl.algorithms.fedavg import FedAvg
    from dpfl.config import parse_config
    from dpfl.rounds import run_experiment

    monkeypatch.setattr(FedAvg, "should_stop", lambda self, t: "T lowered to 2" if t >= 2 else None)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(parse_config(_tiny(mnist_fixture, rounds=5)), store)
    assert res.rounds_done == 2 and res.final["stop_reason"] == "T lowered to 2"
    assert [r["round"] for r in store.rounds(res.run_id)] == [0, 1]
    assert "test_accuracy" in res.final
