"""A run's progress on the terminal: a live bar (rich) on a terminal, one line per round otherwise.

Used by ``dpfl run``, ``dpfl reproduce`` and :func:`dpfl.train` (``progress=True``): a round
loop's progress callback. A leaf module (no dpfl import, no torch), so that the command line's
help stays light.
"""

from __future__ import annotations

import sys
from typing import Any

LONG_RUN_SECONDS = 3600.0
"""A run projected (after its first round) to take longer than this says so once, up front."""


def _fmt_hours(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:.1f} days"


def _fmt_time(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60:d}:{seconds % 60:02d}"


class RoundProgress:
    """Progress of a run: a live bar (rich) on a terminal, one line per round otherwise."""

    def __init__(self, total: int, label: str) -> None:
        self.total = total
        self.label = label
        self.live = sys.stderr.isatty()
        self._told_duration = False
        self._progress: Any = None
        if self.live:
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("round {task.completed}/{task.total}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._progress.add_task(label, total=total, info="")

    def __enter__(self) -> RoundProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, done: int, total: int, metrics: dict[str, Any], elapsed: float) -> None:
        if not self._told_duration and done > 0:
            self._told_duration = True
            projected = elapsed / done * total
            if projected > LONG_RUN_SECONDS:
                message = (f"[{self.label}] at this speed the {total} rounds take about {_fmt_hours(projected)}; "
                           "Ctrl-C stops the run and the same command resumes it")
                if self._progress is not None:
                    self._progress.console.print(message)
                else:
                    print(message, file=sys.stderr, flush=True)
        parts = []
        if "train_loss" in metrics:
            parts.append(f"loss {metrics['train_loss']:.4f}")
        if "test_accuracy" in metrics:
            parts.append(f"acc {metrics['test_accuracy']:.4f}")
        # RDP per round (the final record gives the tightest); under a Rényi filter (CRD) the
        # per-round figure is what was spent, labelled so: the guarantee is the filter's budget
        for kind, label in (("certified", "ε"), ("spent", "spent ε")):
            per_observer = metrics.get(f"epsilon_{kind}_rdp") or {}
            for obs in ("server", "public"):
                if per_observer.get(obs) is not None:
                    parts.append(f"{label} {obs} {format_epsilon(per_observer[obs])}")
        if metrics.get("epsilon_claimed") is not None:
            parts.append(f"claimed ε {format_epsilon(metrics['epsilon_claimed'])}")
        info = "  ".join(parts)
        if self._progress is not None:
            self._progress.update(self._task, completed=done, info=info)
        else:
            eta = elapsed / max(done, 1) * (total - done)
            print(f"[{self.label}] round {done}/{total}  {info}  elapsed {_fmt_time(elapsed)}  ETA {_fmt_time(eta)}",
                  file=sys.stderr, flush=True)


def format_epsilon(value: Any) -> str:
    """An epsilon for humans: numbers to 4 significant digits, 'inf' and missing values as such."""
    if value is None:
        return "n/a"
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)
