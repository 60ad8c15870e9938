"""One writer per run: the store's lease (``RunStore.lease``, taken by ``run_experiment``).

A run being written by a live process is refused to a second writer with one line naming the
process; a lease whose process is gone (``kill -9``) or that was not refreshed for
``LEASE_STALE_SECONDS`` (a writer on another host) is taken over; a finished run releases it.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dpfl.cli import main
from dpfl.config import load_config
from dpfl.errors import ConfigError
from dpfl.rounds import build_experiment, run_experiment
from dpfl.store import LEASE_STALE_SECONDS, RunStore

HOLD = """
import sys
from dpfl.store import RunStore
lease = RunStore(sys.argv[1]).lease(sys.argv[2])
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin (or kills this process)
lease.release()
"""


def _config(tmp: Path, data: Path) -> Path:
    cfg = {
        "name": "lease", "seed": 3, "rounds": 2,
        "data": {"name": "mnist", "dir": str(data), "verify": False},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 50},
        "model": {"name": "logistic"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 25},
        "engine": "sequential", "threads": 1,
    }
    path = tmp / "lease.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _hold(store: Path, run_id: str) -> subprocess.Popen[str]:
    """Another process holding the run's lease (it says so on stdout: no waiting on time)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(store), run_id], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_and_a_dead_writers_lease_is_taken_over(
        mnist_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _config(tmp_path, mnist_fixture)
    config = load_config(path)
    rid = build_experiment(config).run_id
    store_path = tmp_path / "runs.sqlite"
    holder = _hold(store_path, rid)
    try:
        with pytest.raises(ConfigError, match=rf"^run {rid} is being written by pid {holder.pid} on host "
                                              rf"{socket.gethostname()} since .* UTC \(store .*\); wait or stop it$"):
            run_experiment(config, RunStore(store_path))
        assert RunStore(store_path).find(rid) is None  # refused before anything was written
        # the command line: one line, exit status 2
        assert main(["run", str(path), "--store", str(store_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"is being written by pid {holder.pid}" in err
    finally:
        holder.kill()  # SIGKILL: its lease stays in the store, held by a dead process
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    row = RunStore(store_path).lease_holder(rid)
    assert row is not None and row["pid"] == holder.pid and row["live"] is False
    result = run_experiment(config, RunStore(store_path))  # taken over
    assert result.status == "finished" and result.rounds_done == 2
    assert RunStore(store_path).lease_holder(rid) is None  # released when the run ended


def test_a_lease_released_on_exit_lets_the_next_writer_in(mnist_fixture: Path, tmp_path: Path) -> None:
    path = _config(tmp_path, mnist_fixture)
    store_path = tmp_path / "runs.sqlite"
    holder = _hold(store_path, "some-run")
    assert holder.stdin is not None
    holder.stdin.close()  # it releases the lease and ends
    assert holder.wait(60) == 0
    assert RunStore(store_path).lease_holder("some-run") is None
    with RunStore(store_path).lease("some-run"):
        pass
    assert run_experiment(load_config(path), RunStore(store_path)).status == "finished"


def _plant(store: Path, run_id: str, host: str, refreshed_ago: float) -> None:
    """A lease row of a writer on another host (whose pid cannot be checked from here)."""
    RunStore(store).lease("creates-the-table").release()
    now = time.time()
    with sqlite3.connect(store) as db:
        db.execute("INSERT INTO leases (run_id, token, pid, host, process_start, taken_at, refreshed_at) "
                   "VALUES (?, 'other', 4242, ?, NULL, ?, ?)",
                   (run_id, host, now - refreshed_ago - 60, now - refreshed_ago))


def test_a_lease_of_another_host_holds_until_it_is_not_refreshed(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    other = socket.gethostname() + "-elsewhere"
    _plant(store, "fresh", other, refreshed_ago=5.0)
    with pytest.raises(ConfigError, match=f"is being written by pid 4242 on host {other} since"):
        RunStore(store).lease("fresh")
    _plant(store, "stale", other, refreshed_ago=LEASE_STALE_SECONDS + 5.0)
    with RunStore(store).lease("stale"):
        assert RunStore(store).lease_holder("stale")["host"] == socket.gethostname()
