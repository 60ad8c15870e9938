"""Deployment round time: the timings behind ``DPFL_FLOWER_TIMINGS`` and the prompter polls.

* Without the variable nothing is written; with it each event is one JSON line, and a process's
  start time is its own (not the interpreter's import of the module).
* The ServerApp's grid (``PromptGrid``) waits :data:`POLL_SECONDS` between polls for replies,
  not Flower's 3 s (SecAgg+ runs four such exchanges per round), returns every reply, and
  records when each arrived.
* A local federation's SuperExecs ask for work every 0.25 s (Flower: 1 s), less often the more
  SuperNodes there are, and a caller's own setting wins.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Message, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from dpfl.runtime.flower import timing, transport  # noqa: E402
from dpfl.runtime.flower.local import TASK_POLL_ENV, LocalFederation, superexec_poll_seconds  # noqa: E402


def test_timings_are_written_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.jsonl"
    monkeypatch.delenv(timing.TIMINGS_ENV, raising=False)
    timing.record("x", a=1)
    assert not path.exists() and not timing.enabled()
    monkeypatch.setenv(timing.TIMINGS_ENV, str(path))
    timing.record("x", a=1)
    timing.record("y", b=[1, 2])
    with open(path, "a") as f:
        f.write('{"event": "torn')  # a writer killed mid-line
    events = timing.load(path)
    assert [(e["event"], e.get("a"), e.get("b")) for e in events] == [("x", 1, None), ("y", None, [1, 2])]
    assert all(isinstance(e["t"], float) and isinstance(e["pid"], int) for e in events)


def test_a_process_start_is_before_its_imports() -> None:
    """A child that sleeps before importing the module: its start time is before the sleep
    (from /proc), not when the module was imported."""
    code = ("import time; t0 = time.time(); time.sleep(0.5); from dpfl.runtime.flower.timing import process_start; "
            "print(t0 - process_start())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 0.0 <= float(out) < 5.0  # the interpreter's own start-up, 10 ms ticks; never after the sleep began


class _SlowGrid:
    """A Grid stand-in whose replies arrive on the third pull."""

    def __init__(self) -> None:
        self.pulls = 0
        self.pushed: list[Message] = []

    def push_messages(self, messages: list[Message]) -> list[str]:
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        self.pushed += messages
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, ids: Any) -> list[Message]:
        self.pulls += 1
        if self.pulls < 3:
            return []
        want = set(ids)
        return [Message(RecordDict({"r": ConfigRecord({"ok": 1})}), reply_to=m) for m in self.pushed
                if m.metadata.message_id in want]


@pytest.fixture
def _task_identity() -> Any:
    before = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)  # type: ignore[attr-defined]
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1  # needed to build Messages
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = before  # type: ignore[attr-defined]


@pytest.mark.usefixtures("_task_identity")
def test_the_serverapp_grid_polls_promptly_and_records_arrivals(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(transport.time, "sleep", slept.append)
    monkeypatch.setenv(timing.TIMINGS_ENV, str(tmp_path / "t.jsonl"))
    inner = _SlowGrid()
    grid = transport.PromptGrid(inner)  # type: ignore[arg-type]
    msgs = [Message(RecordDict({"q": ConfigRecord({"n": i})}), 10 + i, "query") for i in range(3)]
    replies = list(grid.send_and_receive(msgs, timeout=3600))
    assert (sorted(r.metadata.reply_to_message_id for r in replies)
            == sorted(m.metadata.message_id for m in inner.pushed))
    assert inner.pulls == 3 and slept == [transport.POLL_SECONDS] * 2 and transport.POLL_SECONDS < 3
    pulled = [e for e in timing.load(tmp_path / "t.jsonl") if e["event"] == "pulled"]
    assert sorted(e["reply_to"] for e in pulled) == sorted(m.metadata.message_id for m in inner.pushed)
    assert all(e["sent"] == next(m.metadata.created_at for m in msgs if m.metadata.message_id == e["reply_to"])
               for e in pulled)


def test_superexecs_poll_faster_in_small_federations_and_the_caller_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [superexec_poll_seconds(n) for n in (1, 4, 8, 16, 1000)] == [0.25, 0.25, 0.5, 1.0, 1.0]
    monkeypatch.delenv(TASK_POLL_ENV, raising=False)
    fed = LocalFederation(4)
    try:
        assert fed.env[TASK_POLL_ENV] == "0.25"
    finally:
        fed.stop()
    monkeypatch.setenv(TASK_POLL_ENV, "2")
    fed = LocalFederation(4)
    try:
        assert fed.env[TASK_POLL_ENV] == "2"
    finally:
        fed.stop()
