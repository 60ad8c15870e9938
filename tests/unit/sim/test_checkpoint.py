"""Checkpoints hold data only, are verified before use, and belong to one run in one store."""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dpfl.client.layout import ParamLayout
from dpfl.errors import DataFormatError
from dpfl.sim.checkpoint import MAGIC, clean_orphans, load_checkpoint, save_checkpoint


class _RunsACommand:
    """A pickle payload that runs a shell command when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _malicious_files(tmp_path: Path) -> list[tuple[Path, Path]]:
    """(file, marker) pairs: a torch.save zip and a raw pickle, each running ``touch marker``."""
    out = []
    for kind in ("torch", "pickle"):
        marker = tmp_path / f"pwned-{kind}"
        path = tmp_path / f"ckpt-{kind}.pt"
        state = {"run_id": "r", "rounds_done": 1, "global_params": torch.zeros(3), "x": _RunsACommand(marker)}
        if kind == "torch":
            torch.save(state, path)
        else:
            path.write_bytes(pickle.dumps(state))
        out.append((path, marker))
    return out


def test_a_malicious_pickle_runs_no_command(tmp_path: Path) -> None:
    for path, marker in _malicious_files(tmp_path):
        with pytest.raises(DataFormatError, match="not a dpfl checkpoint"):
            load_checkpoint(path, run_id="r")
        assert not marker.exists(), f"loading {path.name} ran a command"


def test_final_model_files_of_the_former_format_are_read_as_data_only(tmp_path: Path) -> None:
    layout = ParamLayout(("w",), ((3,),), (0,), 3)
    old = tmp_path / "model.pt"
    torch.save({"run_id": "r", "global_params": torch.ones(3), "layout": layout}, old)
    got = load_checkpoint(old, legacy=True)
    assert got is not None and got["layout"] == layout and torch.equal(got["global_params"], torch.ones(3))
    for path, marker in _malicious_files(tmp_path):
        with pytest.raises(DataFormatError, match="cannot be read as data only"):
            load_checkpoint(path, legacy=True)
        assert not marker.exists()


def test_a_malicious_pickle_disguised_with_the_magic_runs_no_command(tmp_path: Path) -> None:
    """The magic followed by a pickle where the JSON header should be: refused, nothing run."""
    marker = tmp_path / "pwned"
    blob = pickle.dumps({"run_id": "r", "x": _RunsACommand(marker)})
    path = tmp_path / "c.pt"
    path.write_bytes(MAGIC + bytes([2]) + struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(DataFormatError, match="unreadable header"):
        load_checkpoint(path, run_id="r")
    assert not marker.exists()


def test_round_trip_of_tensors_json_values_and_layout(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    params = torch.randn(7, generator=g)
    layout = ParamLayout(("w", "b"), ((2, 3), (1,)), (0, 6), 7)
    state = {"run_id": "abc-flower", "rounds_done": 4, "global_params": params, "layout": layout,
             "algorithm": {"history": [[1.0, 2.5]], "clip": float("inf"), "counts": torch.arange(3)},
             "ledger": None}
    path = tmp_path / "c.pt"
    save_checkpoint(path, state, owner="a.sqlite")
    got = load_checkpoint(path, run_id="abc-flower", owner="a.sqlite", check_owner=True)
    assert got is not None
    assert torch.equal(got["global_params"], params) and got["global_params"].dtype == torch.float32
    assert got["layout"] == layout
    assert got["algorithm"]["history"] == [[1.0, 2.5]] and got["algorithm"]["clip"] == float("inf")
    assert torch.equal(got["algorithm"]["counts"], torch.arange(3))
    assert got["rounds_done"] == 4 and got["ledger"] is None
    assert load_checkpoint(tmp_path / "missing.pt") is None


def test_run_id_owner_and_digest_are_checked_before_use(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"run_id": "r1", "global_params": torch.ones(100)}, owner="a.sqlite")
    with pytest.raises(DataFormatError, match="belongs to run r1, not r2"):
        load_checkpoint(path, run_id="r2")
    with pytest.raises(DataFormatError, match="belongs to 'a.sqlite', not 'b.sqlite'"):
        load_checkpoint(path, run_id="r1", owner="b.sqlite", check_owner=True)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x01  # one bit of one tensor value
    path.write_bytes(bytes(raw))
    with pytest.raises(DataFormatError, match="digest mismatch"):
        load_checkpoint(path, run_id="r1")
    path.write_bytes(bytes(raw[:-3]))
    with pytest.raises(DataFormatError, match="truncated"):
        load_checkpoint(path, run_id="r1")


def test_values_that_are_not_data_are_refused_with_their_key(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"state\.algorithm\.fn: builtin_function_or_method cannot be stored"):
        save_checkpoint(tmp_path / "c.pt", {"run_id": "r", "algorithm": {"fn": print}})
    assert not list(tmp_path.iterdir())


def test_orphan_temporary_files_of_dead_writers_are_cleaned(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    orphan = tmp_path / f"r@a.sqlite.pt.tmp{int(dead.stdout)}"
    live = tmp_path / f"r@a.sqlite.pt.tmp{os.getppid()}"  # a running writer's file is left alone
    other = tmp_path / f"q@a.sqlite.pt.tmp{int(dead.stdout)}"  # another run's: not asked about
    for p in (orphan, live, other):
        p.write_bytes(b"partial")
    assert clean_orphans(tmp_path, prefix="r@a.sqlite.pt") == [orphan]
    assert not orphan.exists() and live.exists() and other.exists()
