"""Checkpoints belong to a run store: a run in store B never resumes from store A's checkpoint;
a resumed run keeps its "noted once" notices once; a crafted checkpoint runs no code on resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from dpfl.config import parse_config
from dpfl.errors import DataFormatError
from dpfl.rounds import checkpoint_path, run_experiment
from dpfl.store import RunStore


def _cfg(shared: Path, **over: Any) -> Any:
    raw = {
        "name": "ckpt-tiny", "seed": 4, "rounds": 6,
        "data": {"name": "mnist", "dir": str(shared)},
        "partition": {"kind": "iid", "num_clients": 6, "samples_per_client": 30},
        "model": {"name": "logistic"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 10},
        "checkpoint_every": 2,
    }
    raw.update(over)
    return parse_config(raw)


def _kill_after(n: int):
    def progress(done: int, total: int, metrics: dict, seconds: float) -> None:
        if done == n:
            raise KeyboardInterrupt

    return progress


def test_a_run_in_store_b_does_not_resume_from_store_a(shared_data: Path, tmp_path: Path) -> None:
    cfg = _cfg(shared_data)
    a, b = RunStore(tmp_path / "A.sqlite"), RunStore(tmp_path / "B.sqlite")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, a, progress=_kill_after(4))
    seen: list[int] = []
    res_b = run_experiment(cfg, b, progress=lambda d, *_: seen.append(d))
    assert seen == [1, 2, 3, 4, 5, 6]  # from round 0: A's checkpoint is not B's
    assert res_b.status == "finished" and res_b.rounds_done == 6
    assert [r["round"] for r in b.rounds(res_b.run_id)] == list(range(6))
    # A still resumes from its own checkpoint, to the same model
    seen.clear()
    res_a = run_experiment(cfg, a, progress=lambda d, *_: seen.append(d))
    assert seen == [5, 6]
    assert res_a.final["params_sha256"] == res_b.final["params_sha256"]
    assert not list((tmp_path / "checkpoints").glob("*"))  # both finished: nothing left behind


def test_a_checkpoint_the_store_does_not_know_is_refused(shared_data: Path, tmp_path: Path) -> None:
    cfg = _cfg(shared_data)
    a = RunStore(tmp_path / "A.sqlite")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, a, progress=_kill_after(4))
    (ckpt,) = (tmp_path / "checkpoints").glob("*.pt")
    fresh = tmp_path / "other" / "A.sqlite"  # same store file name, another folder, no rounds
    (fresh.parent / "checkpoints").mkdir(parents=True)
    os.replace(ckpt, fresh.parent / "checkpoints" / ckpt.name)
    with pytest.raises(Exception, match="holds 0 rounds"):
        run_experiment(cfg, RunStore(fresh))


def test_resume_cleans_orphan_temporary_files(shared_data: Path, tmp_path: Path) -> None:
    cfg = _cfg(shared_data)
    store = RunStore(tmp_path / "s.sqlite")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, store, progress=_kill_after(2))
    (ckpt,) = (tmp_path / "checkpoints").glob("*.pt")
    orphan = ckpt.with_name(ckpt.name + ".tmp999999999")  # a writer killed mid-write (no such pid)
    orphan.write_bytes(b"partial")
    model_orphan = tmp_path / "models" / f"{store.list()[0].run_id}.pt.tmp999999999"
    model_orphan.parent.mkdir()
    model_orphan.write_bytes(b"partial")
    run_experiment(cfg, store)
    assert not orphan.exists() and not model_orphan.exists()


def test_claim_exceeded_is_noted_once_across_resumes(shared_data: Path, tmp_path: Path) -> None:
    # UDP's claim (against the server) amortizes the rounds a client sat out (q = 10/50); the
    # server, which knows whom it sampled, gets no such amplification: exceeded from round 1
    cfg = _cfg(shared_data, partition={"kind": "iid", "num_clients": 50, "samples_per_client": 20},
               algorithm={"name": "udp", "options": {"epsilon": 4.0, "clip_norm": 1.0}},
               sampling={"kind": "fixed", "clients_per_round": 10}, privacy={"delta": 1e-3},
               local={"lr": 0.05, "batch_size": None}, checkpoint_every=1)
    store = RunStore(tmp_path / "s.sqlite")
    for n in (2, 4):
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg, store, progress=_kill_after(n))
    res = run_experiment(cfg, store)
    assert res.status == "finished"
    kinds = [n["kind"] for n in store.notices(res.run_id)]
    assert kinds.count("claim-exceeded") == 1, store.notices(res.run_id)


def test_a_crafted_checkpoint_runs_no_code_on_resume(shared_data: Path, tmp_path: Path) -> None:
    cfg = _cfg(shared_data)
    store = RunStore(tmp_path / "s.sqlite")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, store, progress=_kill_after(2))
    (ckpt,) = (tmp_path / "checkpoints").glob("*.pt")
    assert ckpt == checkpoint_path(store, store.list()[0].run_id)
    marker = tmp_path / "pwned"

    class RunsACommand:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    torch.save({"run_id": store.list()[0].run_id, "rounds_done": 2, "x": RunsACommand()}, ckpt)
    with pytest.raises(DataFormatError, match="not a dpfl checkpoint"):
        run_experiment(cfg, store)
    assert not marker.exists()
