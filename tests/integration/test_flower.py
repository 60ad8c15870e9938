"""dpfl on Flower's deployment engine: a real SuperLink and SuperNodes as separate processes on
127.0.0.1 (started with Flower's own commands by :class:`dpfl.runtime.flower.LocalFederation`).

What is checked:
* NbAFL and DP-FedAvg, 2 rounds on 3 SuperNodes with ``reproducible = true``, end with
  *bit-identical* global parameters and the same certified ε as the simulator for the same seed.
  Randomness is drawn in the same
  places: every noise draw comes from the stream (round, client, purpose) — on the SuperNode for
  the client's noise, in the ServerApp for the server's — and both sides use the sequential
  engine, whose per-client arithmetic is the same in a one-client process as in a cohort. With
  the vectorized engine (the default) a cohort is one batched matmul, so a one-client process sums
  in another order: the same cohorts and noise, the model equal within float32 rounding (what
  ``dpfl federate local --reproducible`` promises, tested here too).
* The other tests run as a deployment does (noise from the OS CSPRNG); NbAFL's and UDP's uploads
  are then lattice releases (``privacy.gaussian_noise`` unset in a deployment), whose certificates
  equal the simulated twin's.
* A SuperNode SIGKILLed mid-round (when it signals that it started round 2: no timing
  assumption): the round goes on without it, logged as a dropout (never as a rejected upload),
  and none of its processes outlives it; DP-FedAvg tops the noise up so the public guarantee is
  the planned one, and the ledger charges the server-observer release only to clients whose
  upload reached the server. Slow (opt-in, ``-m slow``): the SuperLink declares a killed node
  unavailable only when it misses two of its heartbeats, 40-60 s after the kill (Flower 1.42's
  interval of 30 s is fixed). The same dropout, as the SuperLink reports it, is checked against a
  stand-in Grid in tests/unit/runtime/test_flower_cohort.py.
* Bad uploads (NaN, wrong shape, a declared noise std off the plan, a vector ×10⁶) are rejected
  and logged with the client's id; the round goes on with the valid ones, and the rejected
  uploads, which the server did see, are charged to the server observer.
* Rounds in which every upload is late: skipped, the late uploads charged to the server, and
  the run reported ``failed`` rather than ``finished`` (NbAFL's ServerApp crashed on them).
* LDP-FL's reports sealed for a shuffler SuperNode give the simulator's model.

Time goes to Flower's processes and polls, not to training: a SuperNode with nothing to do asks
the SuperLink for work every 3 s, and every message starts a ClientApp process. So the tests that
need plain SuperNodes share one federation (``federation``: clients 0-2 and a shuffler), runs use
as few rounds as the property needs, and Flower's SuperExec looks for processes to start every
0.1 s instead of every second.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("flwr")

from dpfl.config import load_config  # noqa: E402
from dpfl.rounds import run_experiment  # noqa: E402
from dpfl.runtime.flower import timing  # noqa: E402
from dpfl.runtime.flower.local import LocalFederation  # noqa: E402
from dpfl.runtime.flower.warm import process_alive  # noqa: E402
from dpfl.sim.checkpoint import load_checkpoint  # noqa: E402
from dpfl.store import RunStore  # noqa: E402

pytestmark = pytest.mark.usefixtures("prompt_superexec")


def _config(tmp: Path, data: Path, name: str, algorithm: dict, num_clients: int = 3, rounds: int = 3,
            sampling: dict | None = None, engine: str = "sequential", sizes: list[int] | None = None,
            threads: int = 1) -> Path:
    cfg = {
        "name": name, "seed": 5, "rounds": rounds,
        "data": {"name": "mnist", "dir": str(data), "verify": False},
        "partition": ({"kind": "iid", "num_clients": num_clients, "samples_per_client": 100} if sizes is None
                      else {"kind": "iid", "num_clients": num_clients, "sizes": sizes}),
        "model": {"name": "mlp"},
        "algorithm": algorithm,
        "sampling": sampling or {"kind": "all"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 50},
        "engine": engine,
        "threads": threads,
        "privacy": {"delta": 0.01},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


NBAFL = {"name": "nbafl", "options": {"epsilon": 60.0, "clip_norm": 10.0, "prox_mu": 0.1}}
DPFEDAVG = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}}


@pytest.fixture(scope="module")
def federation(prompt_superexec: None, tmp_path_factory: pytest.TempPathFactory,
               mnist_fixture: Path) -> Iterator[LocalFederation]:
    """SuperNodes holding clients 0, 1 and 2 and a shuffler SuperNode, shared by the tests that
    need nothing else: their runs go one after another, each with its own store. (Starting a
    federation and warming its nodes' workers costs about as much as a run.)"""
    with LocalFederation(3, data_dir=mnist_fixture, workdir=tmp_path_factory.mktemp("fed"), shuffler=True) as fed:
        yield fed


def _simulate(path: Path, store: Path) -> dict:
    return run_experiment(load_config(path), RunStore(store)).final


def _certified(final: dict, observer: str) -> float:
    return float(final["privacy"]["certified"]["observers"][observer]["epsilon"])


def _notices(store: Path, kind: str) -> list[str]:
    with sqlite3.connect(store) as con:
        return [m for (m,) in con.execute("SELECT message FROM notices WHERE kind = ?", (kind,))]


def test_nbafl_and_dp_fedavg_on_flower_equal_the_simulator(tmp_path: Path, mnist_fixture: Path,
                                                           federation: LocalFederation) -> None:
    """Two rounds: the second starts from the aggregate of the first, on both sides."""
    nb = _config(tmp_path, mnist_fixture, "nbafl", NBAFL, rounds=2)
    dp = _config(tmp_path, mnist_fixture, "dpfedavg", DPFEDAVG, rounds=2)
    flower_store = tmp_path / "flower.sqlite"
    fed = federation
    got_nb = fed.run(nb, store=flower_store, round_timeout=300, connect_timeout=120, timeout=900, reproducible=True)
    got_dp = fed.run(dp, store=flower_store, round_timeout=300, connect_timeout=120, timeout=900, reproducible=True)
    for path, got in ((nb, got_nb), (dp, got_dp)):
        want = _simulate(path, tmp_path / "sim.sqlite")
        assert got["status"] == "finished" and got["rounds"] == 2
        assert got["params_sha256"] == want["params_sha256"], path.name
        final = RunStore(flower_store).get(got["run_id"]).result
        for observer in ("server", "public"):
            assert _certified(final, observer) == pytest.approx(_certified(want, observer), rel=1e-12)
        assert final["privacy"]["claimed_epsilon"] == pytest.approx(want["privacy"]["claimed_epsilon"], rel=1e-12)
    assert "all 3 clients connected" in got_nb["log"]


@pytest.mark.slow  # two deployed runs (~70 s); fast equivalents: test_lattice_runs.py, test_flower_federate.py
def test_lattice_uploads_deployed_in_secure_mode_certify_what_the_simulated_twin_certifies(
        tmp_path: Path, mnist_fixture: Path, federation: LocalFederation) -> None:
    """A deployment (fresh ChaCha20 keys; ``privacy.gaussian_noise`` unset → "lattice"): NbAFL's
    and UDP's uploads are lattice releases (replace-one, integers plus Skellam noise sent as
    integer/γ) and the certificates equal the simulated twin's (``lattice`` + ``csprng``) per
    observer — every client takes part, so they do not depend on the cohorts."""
    udp = {"name": "udp", "options": {"epsilon": 5.0, "clip_norm": 1.0}}
    for name, algorithm in (("nbafl-lattice", NBAFL), ("udp-lattice", udp)):
        path = _config(tmp_path, mnist_fixture, name, algorithm, rounds=2)
        raw = yaml.safe_load(path.read_text())
        if name.startswith("udp"):  # full-batch gradient descent (000 Alg. 1)
            raw["local"].update({"batch_size": None})
            path.write_text(yaml.safe_dump(raw))
        store = tmp_path / f"{name}.sqlite"
        got = federation.run(path, store=store, round_timeout=300, connect_timeout=120, timeout=900)
        assert got["status"] == "finished" and got["rounds"] == 2, got.get("log", "")[-2000:]
        final = RunStore(store).get(got["run_id"]).result
        assert final["privacy"]["gaussian_noise"] == "lattice" and got["run_id"].endswith("-secure")
        raw["privacy"].update({"gaussian_noise": "lattice", "noise_generator": "csprng"})
        twin_path = tmp_path / f"{name}-twin.yaml"
        twin_path.write_text(yaml.safe_dump(raw))
        want = _simulate(twin_path, tmp_path / "sim.sqlite")
        for observer in ("server", "public"):
            assert _certified(final, observer) == pytest.approx(_certified(want, observer), rel=1e-9), (name, observer)


def test_reproducible_with_the_vectorized_engine_has_the_same_noise_and_a_close_model(
        tmp_path: Path, mnist_fixture: Path, federation: LocalFederation) -> None:
    """`--reproducible` with the default engine and two threads: the same cohorts and noise as the
    simulation (the same certified epsilon; a different noise draw would move parameters by ~1),
    the model only close to it: the simulation trains the cohort in one batched step, a SuperNode
    its client alone, and with several threads the two round differently (what the help and the
    README say; bit-identical needs engine: sequential, tested above)."""
    algorithm = {"name": "dp-fedavg", "options": {"noise_multiplier": 0.3, "clip_norm": 5.0}}  # updates unclipped
    dp = _config(tmp_path, mnist_fixture, "dpfedavg-vectorized", algorithm, rounds=2, engine="vectorized",
                 sizes=[60, 100, 140], threads=2)
    store = tmp_path / "flower.sqlite"
    got = federation.run(dp, store=store, round_timeout=300, connect_timeout=120, timeout=900, reproducible=True)
    assert got["status"] == "finished" and got["rounds"] == 2
    want = run_experiment(load_config(dp), RunStore(tmp_path / "sim.sqlite"))
    rec = RunStore(store).get(got["run_id"])
    flower_model = load_checkpoint(Path(rec.result["model_path"]))["global_params"]
    sim_model = load_checkpoint(Path(want.final["model_path"]))["global_params"]
    # measured here: max difference 1.4e-6 after 2 rounds (parameters up to 3.3); local training can
    # amplify a rounding difference (2.7e-4 seen in one client's local model, batch 20), hence the margin
    torch.testing.assert_close(flower_model, sim_model, rtol=0, atol=1e-4)
    for observer in ("server", "public"):
        assert _certified(rec.result, observer) == pytest.approx(_certified(want.final, observer), rel=1e-12)


@pytest.mark.slow  # 40-60 s until Flower's SuperLink declares the killed node unavailable (module docstring)
def test_client_killed_mid_round_is_dropped_and_the_ledger_stays_true(tmp_path: Path, mnist_fixture: Path) -> None:
    dp = _config(tmp_path, mnist_fixture, "dpfedavg-drop", DPFEDAVG)
    store = tmp_path / "flower.sqlite"
    signals = tmp_path / "signals"
    signals.mkdir()
    # client 2 signals that it started round 2 and never replies; it is killed on that signal.
    # The round timeout is far above any round's duration: only the kill makes client 2 miss
    # rounds 2 and 3, however loaded the machine is.
    node_config = {2: {"fault": "block:2", "signal-dir": str(signals)}}
    with LocalFederation(3, data_dir=mnist_fixture, workdir=tmp_path / "fed", node_config=node_config) as fed:
        proc = fed.submit(dp, store=store, round_timeout=600, connect_timeout=300)
        deadline = time.monotonic() + 900
        while not (signals / "client-2-round-2").exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("client 2 never started round 2")
            time.sleep(0.1)
        processes = fed.node_processes(2)
        blocked = int((signals / "client-2-round-2").read_text())  # the ClientApp process, blocked
        assert blocked in processes and len(processes) >= 3  # the SuperNode, its executor, the ClientApp
        fed.kill_node(2)
        end = time.monotonic() + 30
        while any(process_alive(p) for p in processes) and time.monotonic() < end:
            time.sleep(0.1)
        assert not [p for p in processes if process_alive(p)], "a process of the killed SuperNode outlived it"
        out, _ = proc.communicate(timeout=900)
    assert "dpfl-result" in out, out[-3000:]
    rec = RunStore(store).list()[0]
    assert rec.status == "finished"
    rounds = RunStore(store).rounds(rec.run_id)
    assert [r["arrived"] for r in rounds] == [3, 2, 2]
    assert [r.get("topped_up_clients", 0) for r in rounds] == [0, 1, 1]
    partial = _notices(store, "round-partial")
    assert len(partial) == 2 and all("without clients [2]" in m for m in partial)
    # the SuperLink's "node unavailable" replies are the dropout they are, not rejected uploads
    assert not _notices(store, "rejected-upload")
    dropouts = _notices(store, "dropout")
    assert dropouts and all("client 2 " in m for m in dropouts)
    # the public sees the planned noise every round (topped up): its ε equals the simulator's
    sim = _simulate(dp, tmp_path / "sim.sqlite")
    final = rec.result
    assert _certified(final, "public") == pytest.approx(_certified(sim, "public"), rel=1e-9)
    # against the server, client 2 released one upload instead of three
    per_client = final["privacy"]["client_epsilons_rdp"]["server"]
    assert per_client["2"] < per_client["0"] == pytest.approx(per_client["1"])
    assert per_client["0"] == pytest.approx(sim["privacy"]["client_epsilons_rdp"]["server"]["0"], rel=1e-9)


@pytest.mark.slow  # a federation of its own per isolation (~17 s each); the shared `federation` runs fork
@pytest.mark.parametrize("isolation", ["fork", "subprocess"])
def test_both_isolations_fork_or_spawn_every_clientapp_and_equal_the_simulator(
        tmp_path: Path, mnist_fixture: Path, monkeypatch: pytest.MonkeyPatch, isolation: str) -> None:
    """``fork`` (the default: ``--isolation process`` with dpfl's executor) forks every ClientApp
    process from its fork server; ``subprocess`` (Flower's default) starts ``flwr-clientapp`` per
    message. Each ClientApp process says which it was (``forked`` in its timings); both end with
    the simulator's parameters."""
    timings = tmp_path / "timings.jsonl"
    monkeypatch.setenv(timing.TIMINGS_ENV, str(timings))
    dp = _config(tmp_path, mnist_fixture, f"dpfedavg-{isolation}", DPFEDAVG, num_clients=2, rounds=1)
    store = tmp_path / "flower.sqlite"
    with LocalFederation(2, data_dir=mnist_fixture, workdir=tmp_path / "fed", isolation=isolation) as fed:
        got = fed.run(dp, store=store, round_timeout=300, connect_timeout=120, timeout=900, reproducible=True)
    assert got["status"] == "finished"
    assert got["params_sha256"] == _simulate(dp, tmp_path / "sim.sqlite")["params_sha256"]
    apps = [e for e in timing.load(timings) if e["event"] == "clientapp"]
    assert {e["kind"] for e in apps} >= {"query", "train"} and len({e["pid"] for e in apps}) == len(apps)
    assert [e["forked"] for e in apps] == [isolation == "fork"] * len(apps)


@pytest.mark.slow  # a federation of 5 of its own (~30 s); the rejections on a stand-in Grid: test_flower_cohort.py
def test_bad_uploads_are_rejected_with_the_client_id(tmp_path: Path, mnist_fixture: Path) -> None:
    nb = _config(tmp_path, mnist_fixture, "nbafl-bad", NBAFL, num_clients=5, rounds=1)
    store = tmp_path / "flower.sqlite"
    faults = {1: {"fault": "nan"}, 2: {"fault": "shape"}, 3: {"fault": "noise"}, 4: {"fault": "scale"}}
    with LocalFederation(5, data_dir=mnist_fixture, workdir=tmp_path / "fed", node_config=faults) as fed:
        got = fed.run(nb, store=store, round_timeout=600, connect_timeout=300, timeout=1200)
    assert got["status"] == "finished"
    rejected = sorted(_notices(store, "rejected-upload"))
    assert len(rejected) == 4, rejected
    assert "client 1: 1 non-finite entries" in rejected[0]
    assert "client 2: vector of shape" in rejected[1]
    assert "client 3: declares noise_std" in rejected[2]
    assert "client 4: L2 norm" in rejected[3] and "the most its clipping and declared noise allow" in rejected[3]
    rec = RunStore(store).get(got["run_id"])
    assert [r["arrived"] for r in RunStore(store).rounds(rec.run_id)] == [1]
    assert [r["charged_unaggregated"] for r in RunStore(store).rounds(rec.run_id)] == [4]
    # the server saw all five uploads: each one is charged to the server observer as planned
    eps = rec.result["privacy"]["client_epsilons_rdp"]["server"]
    assert sorted(eps) == ["0", "1", "2", "3", "4"] and eps["0"] > 0
    assert all(eps[c] == pytest.approx(eps["0"], rel=1e-12) for c in eps)


@pytest.mark.slow  # a federation of its own (~20 s); late uploads on a stand-in Grid: test_flower_cohort.py
def test_rounds_where_every_upload_is_late_fail_the_run_and_are_charged(tmp_path: Path, mnist_fixture: Path) -> None:
    """Every client straggles 8 s, the round timeout is 1 s: no round aggregates anything. NbAFL's
    ServerApp used to crash on the empty round; dp-fedavg used to report "finished"."""
    nb = _config(tmp_path, mnist_fixture, "nbafl-late", NBAFL, rounds=2)
    store = tmp_path / "flower.sqlite"
    slow = {i: {"fault": "delay:8"} for i in range(3)}
    with LocalFederation(3, data_dir=mnist_fixture, workdir=tmp_path / "fed", node_config=slow) as fed:
        got = fed.run(nb, store=store, round_timeout=1, connect_timeout=300, timeout=900)
    assert got["status"] == "failed", got["log"][-3000:]
    assert "no upload arrived in any of the 2 rounds" in got["stop_reason"]
    rec = RunStore(store).get(got["run_id"])
    assert [r["arrived"] for r in RunStore(store).rounds(rec.run_id)] == [0, 0]
    assert len(_notices(store, "round-empty")) == 2
    # every upload reached the SuperLink late (or may still have): charged to the server observer
    late = _notices(store, "late-upload")
    assert len(late) == 6, late
    eps = rec.result["privacy"]["client_epsilons_rdp"]["server"]
    assert sorted(eps) == ["0", "1", "2"] and all(e > 0 for e in eps.values())


def test_ldp_fl_reports_go_sealed_through_a_shuffler_node(tmp_path: Path, mnist_fixture: Path,
                                                          federation: LocalFederation) -> None:
    """Split & shuffle across processes: 3 clients seal their two-point reports for a shuffler
    SuperNode; the ServerApp relays ciphertext and aggregates the per-id multisets it gets back.
    Same model as the simulator (whose trusted shuffler runs in process) up to the summation order
    of the per-id means (float32 rounding)."""
    import torch

    from dpfl.sim.checkpoint import load_checkpoint

    ldp = {"name": "ldp-fl", "options": {"epsilon": 5.0, "range": "fixed", "center": 0.0, "radius": 0.075}}
    cfg = _config(tmp_path, mnist_fixture, "ldpfl", ldp, rounds=2)
    store = tmp_path / "flower.sqlite"
    got = federation.run(cfg, store=store, round_timeout=300, connect_timeout=120, timeout=900, reproducible=True)
    assert got["status"] == "finished" and got["rounds"] == 2
    assert "shuffler: node" in got["log"]
    assert not _notices(store, "no-shuffler") and not _notices(store, "rejected-upload")
    rec = RunStore(store).get(got["run_id"])
    assert [r["arrived"] for r in RunStore(store).rounds(rec.run_id)] == [3, 3]
    want = run_experiment(load_config(cfg), RunStore(tmp_path / "sim.sqlite"))
    flower_model = load_checkpoint(Path(rec.result["model_path"]))["global_params"]
    sim_model = load_checkpoint(Path(want.final["model_path"]))["global_params"]
    torch.testing.assert_close(flower_model, sim_model, rtol=0, atol=1e-6)
    assert _certified(rec.result, "server") == pytest.approx(_certified(want.final, "server"), rel=1e-12)


@pytest.mark.slow
def test_twenty_supernodes_on_one_machine(tmp_path: Path, shared_data: Path) -> None:
    """20 SuperNodes + a SuperLink on 127.0.0.1 (slow: opt-in, ``-m slow``). With the SuperLink's
    state in an on-disk SQLite file, 15 nodes already failed with "database is locked"."""
    dp = _config(tmp_path, shared_data, "dpfedavg-20", DPFEDAVG, num_clients=20, rounds=2)
    store = tmp_path / "flower.sqlite"
    with LocalFederation(20, data_dir=shared_data, workdir=tmp_path / "fed") as fed:
        got = fed.run(dp, store=store, round_timeout=1200, connect_timeout=600, timeout=3600)
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "fed").glob("*.log"))
    assert "database is locked" not in logs + got["log"]
    assert got["status"] == "finished" and got["rounds"] == 2, got["log"][-3000:]
    rec = RunStore(store).get(got["run_id"])
    assert [r["arrived"] for r in RunStore(store).rounds(rec.run_id)] == [20, 20]
    assert not _notices(store, "rejected-upload") and not _notices(store, "dropout")
