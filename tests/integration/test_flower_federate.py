"""`dpfl federate local` as a user runs it: a subprocess, relative paths, a failing ServerApp, kill -9.

* A deployment in secure mode draws its Gaussian releases on the lattice (``privacy.gaussian_noise``
  unset) and certifies exactly what its simulated twin (``lattice`` + ``csprng``) certifies.
* Relative paths are the caller's: the config, ``--store`` and ``data.dir`` given relative to a
  working directory that is neither the repository's nor Flower's reach every process absolute
  (the ServerApp read ``data.dir`` in Flower's working directory and failed).
* A ServerApp failure is one line on stderr naming the error and the file with the full log
  (Flower's traceback was printed twice, 86 lines each); a relative ``--data-dir`` reaches the
  ServerApp too, resolved against the caller's working directory.
* ``kill -9`` of the command ends its whole federation: the SuperLink, the SuperNodes, Flower's
  SuperExec and ServerApp processes, the dpfl warm workers (their orphans went on writing rounds
  to the store). Slow (opt-in, ``-m slow``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("flwr")

from dpfl.config import parse_config  # noqa: E402
from dpfl.errors import ConfigError  # noqa: E402
from dpfl.rounds import run_experiment  # noqa: E402
from dpfl.runtime.flower.local import FEDERATION_ENV, federation_processes  # noqa: E402
from dpfl.runtime.flower.warm import process_alive  # noqa: E402
from dpfl.store import RunStore  # noqa: E402

pytestmark = pytest.mark.usefixtures("prompt_superexec")

DPFL = [sys.executable, "-m", "dpfl"]


def _config(folder: Path, data_dir: str, rounds: int = 1) -> Path:
    cfg = {
        "name": "federate-cli", "seed": 5, "rounds": rounds,
        "data": {"name": "mnist", "dir": data_dir, "verify": False},
        "partition": {"kind": "iid", "num_clients": 2, "samples_per_client": 50},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "sampling": {"kind": "all"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 25},
        "engine": "sequential", "threads": 1,
        "privacy": {"delta": 0.01},
    }
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_relative_paths_are_the_callers(tmp_path: Path, mnist_fixture: Path) -> None:
    """`dpfl federate local cfg.yaml --store runs/fed.sqlite` with ``data.dir: data`` (as
    `dpfl federate local default` from the repository root): everything relative to the caller."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").symlink_to(mnist_fixture, target_is_directory=True)
    _config(work, "data")
    proc = subprocess.run([*DPFL, "federate", "local", "cfg.yaml", "--store", "runs/fed.sqlite", "--timeout", "900"],
                          cwd=work, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    (rec,) = RunStore(work / "runs" / "fed.sqlite").list()
    assert rec.status == "finished" and rec.run_id.endswith("-flower-secure")
    assert "certified epsilon" in proc.stdout
    # a deployment in secure mode: its Gaussian releases are lattice releases (unset in the config),
    # and its certificates are the simulated twin's (gaussian_noise: lattice, noise_generator: csprng;
    # every client takes part, so the certificate does not depend on the cohorts)
    final = RunStore(work / "runs" / "fed.sqlite").get(rec.run_id).result
    assert final["privacy"]["gaussian_noise"] == "lattice"
    raw = yaml.safe_load((work / "cfg.yaml").read_text())
    raw["data"]["dir"] = str(mnist_fixture)
    raw["privacy"].update({"gaussian_noise": "lattice", "noise_generator": "csprng"})
    twin = run_experiment(parse_config(raw), RunStore(tmp_path / "twin.sqlite")).final
    for observer in ("server", "public"):
        got = float(final["privacy"]["certified"]["observers"][observer]["epsilon"])
        want = float(twin["privacy"]["certified"]["observers"][observer]["epsilon"])
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12) or got == want == float("inf"), observer


@pytest.mark.slow  # a federation of its own (~13 s); `dpfl federate local` runs by default in the test above
def test_a_serverapp_failure_is_one_line_and_a_relative_data_dir_reaches_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _config(work, "data")
    proc = subprocess.run([*DPFL, "federate", "local", "cfg.yaml", "--data-dir", "../nowhere",
                           "--store", "runs/fed.sqlite", "--timeout", "900"],
                          cwd=work, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    nowhere = tmp_path / "nowhere" / "mnist"  # the caller's ../nowhere, not Flower's
    match = re.fullmatch(rf"dpfl: error: the ServerApp failed: data set 'mnist': file .* is missing "
                         rf"\(looked for {re.escape(str(nowhere))}/.*; full log: (\S+)", lines[0])
    assert match is not None, lines[0]
    log = Path(match[1])
    assert log.is_file() and log.parent.name.startswith("dpfl-flower-")  # the temporary folder, kept
    assert "Traceback (most recent call last)" in log.read_text()  # the full story is there
    shutil.rmtree(log.parent)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _token(pid: int) -> str:
    for child in _children(pid):
        try:
            env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(f"{FEDERATION_ENV}=".encode()):
                return item.split(b"=", 1)[1].decode()
    raise AssertionError(f"no child of {pid} carries {FEDERATION_ENV}")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _rounds(store: Path) -> int:
    try:
        return sum(len(RunStore(store).rounds(r.run_id)) for r in RunStore(store).list())
    except ConfigError:  # the file exists, its tables not yet
        return 0


@pytest.mark.slow  # a federation run to its first round, then the kill
def test_kill_9_of_federate_ends_its_whole_federation(tmp_path: Path, mnist_fixture: Path) -> None:
    cfg = _config(tmp_path, str(mnist_fixture), rounds=200)
    store = tmp_path / "runs" / "fed.sqlite"
    out = tmp_path / "federate.out"
    with open(out, "w") as sink:
        cmd = subprocess.Popen([*DPFL, "federate", "local", str(cfg), "--store", str(store), "--timeout", "1800"],
                               stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while _rounds(store) < 1:  # a round stored: the server and the clients' workers are all up
            assert cmd.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, "no round stored within 900 s"
            time.sleep(0.1)
        token = _token(cmd.pid)
        members = federation_processes(token)
        names = " | ".join(_cmdline(p) for p in members)
        for part in ("flower-superlink", "dpfl.runtime.flower.supernode", "flower-superexec", "flwr-serverapp",
                     "dpfl.runtime.flower.executor", "forkserver", "dpfl.runtime.flower.warm"):
            assert part in names, f"{part} not among the federation's processes: {names}"
        watchdogs = [p for p in _children(cmd.pid) if "--watchdog" in _cmdline(p)]
        assert len(watchdogs) == 1
        workdir = re.search(r"installed dpfl-flower to (\S+)/flwr-home", out.read_text())
        assert workdir is not None
    finally:
        os.kill(cmd.pid, signal.SIGKILL)
        cmd.wait()
    deadline = time.monotonic() + 120
    while federation_processes(token) or any(process_alive(p) for p in [*members, *watchdogs]):
        assert time.monotonic() < deadline, [_cmdline(p) for p in federation_processes(token)]
        time.sleep(0.1)
    while Path(workdir[1]).exists():  # the watchdog removes the temporary directory after the processes
        assert time.monotonic() < deadline, f"{workdir[1]} left behind"
        time.sleep(0.1)
    # nothing that could write the store is left; the run stays `running` with a dead writer's lease,
    # which the same command takes over to resume
    (rec,) = RunStore(store).list()
    assert rec.status == "running"
    lease = RunStore(store).lease_holder(rec.run_id)
    assert lease is not None and lease["pid"] in members and lease["live"] is False
