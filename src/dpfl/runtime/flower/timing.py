"""Where a deployed round's time goes: timestamps of the Flower processes, behind an environment variable.

With ``DPFL_FLOWER_TIMINGS=FILE`` in the environment of a federation's processes (Flower passes
its environment on to the ServerApp and ClientApp processes it starts, and a ClientApp to the
warm worker), each of them appends one JSON object per event to FILE (``O_APPEND``: the lines of
concurrent processes do not interleave). Without it :func:`record` does nothing and costs one
dictionary lookup. ``./dev bench flower`` reads the file and prints the breakdown
(:func:`load`); nothing in a run depends on it.

Events (every one has ``event``, ``pid`` and ``t``, a Unix time in seconds):

* ``serverapp`` — the ServerApp process: ``proc`` (process start), ``loaded`` (dpfl's ServerApp
  module imported), ``built`` (the run built: data, partition, model), ``connected`` (every
  client's SuperNode answered), ``done``.
* ``pulled`` — a reply reached the ServerApp: ``reply_to`` (the id of the message it answers),
  ``sent`` (when the server created that message), ``created`` (when the ClientApp created
  the reply).
* ``clientapp`` — one message handled by a ClientApp process: ``node`` (the dpfl client id, or
  ``"shuffler"``), ``kind`` (``query``, ``train``, or ``secagg-<stage>`` of SecAgg+),
  ``round`` (0-based, when the message says), ``id`` (the message id), ``sent`` (the server
  created the message), ``proc`` (the ClientApp process started), ``loaded`` (dpfl's ClientApp
  module imported; in a process forked by dpfl's executor: the fork), ``forked`` (whether it was),
  ``start`` and ``end`` of the handler, and, for a training message, the warm
  worker's ``worker`` breakdown (below) and ``connect`` (seconds to reach the worker, starting
  it if there was none).
* the ``worker`` breakdown (seconds): ``imports`` (torch and dpfl, once per worker), ``build``
  (load the data set, partition it, build model and algorithm: 0 when the run was cached),
  ``train`` (local training) and ``train_cpu`` (the CPU seconds it took), ``step`` (the
  algorithm's ``client_step``: clip, noise, randomize, encode), ``first`` (whether this was the worker's first request).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["TIMINGS_ENV", "enabled", "load", "process_start", "record"]

TIMINGS_ENV = "DPFL_FLOWER_TIMINGS"


def enabled() -> bool:
    """Whether this process records timings (``DPFL_FLOWER_TIMINGS`` is set)."""
    return bool(os.environ.get(TIMINGS_ENV))


def record(event: str, **fields: Any) -> None:
    """Append one event to the timings file, if there is one (module docstring); never raises."""
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **fields}, default=str) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:  # a timing that cannot be written is lost, never the round
        pass


_PROC_START: float | None = None


def process_start() -> float | None:
    """When this process started (Unix time, 10 ms resolution; Linux /proc), None elsewhere."""
    global _PROC_START
    if _PROC_START is None:
        try:
            ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[-1].split()[19])  # since boot
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            _PROC_START = time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError):
            return None
    return _PROC_START


def load(path: str | Path) -> list[dict[str, Any]]:
    """The events of a timings file, in file order (a torn last line is skipped)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
