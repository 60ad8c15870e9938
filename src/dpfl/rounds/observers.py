"""Round observers: per-round metrics of a run to a CSV file or to TensorBoard.

Both are :class:`~dpfl.rounds.loop.RoundObserver` s, the one hook through which the loop's
recorder shows each recorded round (``dpfl.train(..., observers=[...])``, ``dpfl run --csv FILE
--tensorboard DIR``). They see the rounds already stored first, so the file or log of a resumed
run, or of a finished run returned from the store, holds every round once.

A metric that is a mapping (the certified ε per observer) becomes one column per key, named
``epsilon_certified_rdp.server``; rounds are 1-based, as printed.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

from dpfl.errors import ConfigError


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": 2}`` → ``{"a.b": 1, "c": 2}`` (lists are kept whole)."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _target(path: str | Path, run_id: str) -> Path:
    return Path(str(path).replace("{run_id}", run_id))


class CsvMetrics:
    """Write each round's metrics to a CSV file, one row per round (column ``round`` first).

    ``path`` may contain ``{run_id}`` (e.g. ``"metrics/{run_id}.csv"``). The file is rewritten
    whole after each round (through a temporary file and a rename: a reader never sees half a
    file), so a column that appears late (test accuracy every 10 rounds) gets a header.

    Args:
        path: the CSV file; ``{run_id}`` in it is replaced by the run's id.
    """

    def __init__(self, path: str | Path) -> None:
        self.template = str(path)
        self.path: Path | None = None
        self._rows: dict[int, dict[str, Any]] = {}

    def open(self, run_id: str) -> None:
        self.path = _target(self.template, run_id)
        self._rows = {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"cannot write the metrics CSV {self.path}: {err.strerror or err}") from None

    def log_round(self, round_idx: int, metrics: dict[str, Any]) -> None:
        self._rows[int(round_idx)] = {"round": int(round_idx) + 1, **flatten(metrics)}
        self._write()

    def close(self) -> None:
        pass

    def _write(self) -> None:
        assert self.path is not None, "open() first"
        columns: dict[str, None] = {}
        for row in self._rows.values():
            columns.update(dict.fromkeys(row))
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with tmp.open("w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=list(columns))
                writer.writeheader()
                for _, row in sorted(self._rows.items()):
                    writer.writerow(row)
            os.replace(tmp, self.path)
        except OSError as err:
            raise ConfigError(f"cannot write the metrics CSV {self.path}: {err.strerror or err}") from None


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` can be imported (it needs the ``tensorboard`` package)."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


class TensorBoardMetrics:
    """Write each round's numeric metrics as TensorBoard scalars in ``log_dir/<run_id>`` (step =
    round, 1-based), through ``torch.utils.tensorboard``.

    Args:
        log_dir: the folder (``tensorboard --logdir``); each run writes to its own subfolder.

    Raises:
        ConfigError: ``torch.utils.tensorboard`` cannot be imported (``pip install tensorboard``).
    """

    def __init__(self, log_dir: str | Path) -> None:
        if not tensorboard_available():
            raise ConfigError("TensorBoard logging needs the `tensorboard` package (torch.utils.tensorboard "
                              "imports it): `pip install tensorboard`, or log to CSV instead")
        self.log_dir = Path(log_dir)
        self._writer: Any = None

    def open(self, run_id: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.close()
        # purge_step=1: events of an earlier call of the same run are dropped, the replayed
        # rounds written again (one value per round)
        self._writer = SummaryWriter(log_dir=str(self.log_dir / run_id), purge_step=1)

    def log_round(self, round_idx: int, metrics: dict[str, Any]) -> None:
        assert self._writer is not None, "open() first"
        for key, value in flatten(metrics).items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                self._writer.add_scalar(key, value, int(round_idx) + 1)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
