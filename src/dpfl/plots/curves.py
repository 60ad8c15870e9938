"""Figures of stored runs, written as PNG; they read only the store.

* :func:`plot_run`: one run's loss and accuracy per round.
* :func:`plot_runs`: several runs overlaid (``dpfl plot ID ID ...``).
* :func:`plot_utility_vs_epsilon`: test accuracy against the certified ε of each run (its final
  certificate, and its path round by round) — the privacy–utility trade-off across runs
  (``dpfl plot --vs-epsilon ID ...``).

Titles and legend entries are run names, which are long for API runs (a user loss is part of the
name): a title is wrapped to the figure's width, never cut; a legend entry is shortened with an
ellipsis, the run id beside it.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dpfl.errors import ConfigError
from dpfl.store import RunRecord, RunStore

LEGEND_CHARS = 48
"""A legend entry longer than this is shortened with an ellipsis (the run id stays whole)."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def shorten(text: str, width: int = LEGEND_CHARS) -> str:
    """``text`` cut to ``width`` characters, the cut marked by an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _chars(fig: Any, fontsize: float) -> int:
    """How many characters of ``fontsize`` fit on a line of the figure's width."""
    return max(20, int(0.92 * fig.get_figwidth() * 72.0 / (0.6 * fontsize)))  # a character: at most ~0.6 em


def wrapped_title(fig: Any, text: str, fontsize: float = 12.0, *, bottom: float = 0.0) -> Any:
    """A figure title wrapped to the figure's width (every character kept, no line wider than
    the figure), the space above the axes made for it; returns the title text artist."""
    chars = _chars(fig, fontsize)
    lines = []
    for part in text.splitlines() or [""]:
        lines += textwrap.wrap(part, width=chars, break_long_words=True, break_on_hyphens=False) or [""]
    title = fig.suptitle("\n".join(lines), fontsize=fontsize)
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))  # tight_layout makes room for the suptitle
    return title


def _target(store: RunStore, out: str | Path | None, default_name: str) -> Path:
    path = Path(out) if out else store.path.parent / "plots" / default_name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot write the plot {path}: {err.strerror or err} "
                          f"({err.filename or path.parent})") from None
    return path


def _save(fig: Any, path: Path) -> Path:
    plt = _pyplot()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise ConfigError(f"cannot write the plot {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return path


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["round"] + 1, float(r[key])) for r in rows if isinstance(r.get(key), int | float)]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_run(store: RunStore, run_id: str, out: str | Path | None = None) -> Path:
    """Write ``runs/plots/<run_id>.png`` (or ``out``) with loss and accuracy per round."""
    plt = _pyplot()
    record = store.get(run_id)
    rows = store.rounds(record.run_id)
    if not rows:
        raise ConfigError(f"run {record.run_id} has no recorded rounds to plot")
    path = _target(store, out, f"{record.run_id}.png")
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("train_loss", "train loss (local objective)"), ("test_loss", "test loss")):
        xs, ys = _series(rows, key)
        if xs:
            ax_loss.plot(xs, ys, marker=".", label=label)
    ax_loss.set_xlabel("round")
    ax_loss.set_ylabel("loss")
    ax_loss.legend()
    xs, ys = _series(rows, "test_accuracy")
    if xs:
        ax_acc.plot(xs, ys, marker=".", color="tab:green")
    ax_acc.set_xlabel("round")
    ax_acc.set_ylabel("test accuracy")
    wrapped_title(fig, f"{record.name} ({record.algorithm}, {record.dataset}, {record.model}) — run {record.run_id}")
    return _save(fig, path)


def _records(store: RunStore, run_ids: Sequence[str]) -> list[RunRecord]:
    if not run_ids:
        raise ConfigError("name at least one run id (see `dpfl runs`)")
    records, seen = [], set()
    for rid in run_ids:
        record = store.get(rid)
        if record.run_id not in seen:
            seen.add(record.run_id)
            records.append(record)
    return records


def _label(record: RunRecord) -> str:
    return f"{record.run_id[:12]} {shorten(record.name)}"


def plot_runs(store: RunStore, run_ids: Sequence[str], out: str | Path | None = None) -> Path:
    """Several runs overlaid: train loss and test accuracy per round, one colour per run.

    Written to ``out`` or ``runs/plots/compare-<first ids>.png``.

    Raises:
        ConfigError: no run id, an unknown or ambiguous id, or a run without recorded rounds.
    """
    plt = _pyplot()
    records = _records(store, run_ids)
    rows = {r.run_id: store.rounds(r.run_id) for r in records}
    empty = [rid for rid, rs in rows.items() if not rs]
    if empty:
        raise ConfigError(f"run {empty[0]} has no recorded rounds to plot")
    name = "compare-" + "-".join(r.run_id[:8] for r in records[:4]) + ".png"
    path = _target(store, out, name)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, record in enumerate(records):
        color = f"C{i % 10}"
        xs, ys = _series(rows[record.run_id], "train_loss")
        if xs:
            ax_loss.plot(xs, ys, color=color, marker=".", label=_label(record))
        xs, ys = _series(rows[record.run_id], "test_accuracy")
        if xs:
            ax_acc.plot(xs, ys, color=color, marker=".", label=_label(record))
    ax_loss.set_xlabel("round")
    ax_loss.set_ylabel("train loss (local objective)")
    ax_acc.set_xlabel("round")
    ax_acc.set_ylabel("test accuracy")
    ax_acc.legend(fontsize="small")
    wrapped_title(fig, f"{len(records)} runs: " + "; ".join(f"{r.run_id} {r.name}" for r in records))
    return _save(fig, path)


def plot_utility_vs_epsilon(store: RunStore, run_ids: Sequence[str], out: str | Path | None = None, *,
                            observer: str | None = None,
                            certified: Callable[[RunRecord, str | None], float | None]) -> tuple[Path, list[str]]:
    """Test accuracy against certified ε across runs: each run's final certificate (a marker at
    its final accuracy) and its path after every evaluated round (the per-round RDP ε the ledger
    recorded, a thin line). ``observer``: "server", "public" or None (the worst of both).
    ``certified(record, observer)``: a run's final certified ε against ``observer`` (None when
    it has none) — the caller reads certificates (the plots read only the store's records).

    Runs that are not private, not finished, or whose ε is infinite cannot be placed on the
    axis: they are returned by id with the reason, and named in the figure's footnote.

    Raises:
        ConfigError: no run id, an unknown id, or no run that can be placed.
    """
    plt = _pyplot()
    records = _records(store, run_ids)
    placed: list[tuple[RunRecord, float, float]] = []
    left_out: list[str] = []
    for record in records:
        eps = certified(record, observer)
        acc = (record.result or {}).get("test_accuracy")
        if eps is None:
            left_out.append(f"{record.run_id}: no certified epsilon"
                            + (f" against {observer}" if observer else "") + f" (status {record.status})")
        elif not math.isfinite(eps):
            left_out.append(f"{record.run_id}: certified epsilon is infinite")
        elif not isinstance(acc, int | float):
            left_out.append(f"{record.run_id}: no final test accuracy")
        else:
            placed.append((record, float(eps), float(acc)))
    if not placed:
        raise ConfigError("no run to place on a utility-vs-epsilon plot: " + "; ".join(left_out))
    who = observer or "worst observer"
    name = "epsilon-" + "-".join(r.run_id[:8] for r, _, _ in placed[:4]) + ".png"
    path = _target(store, out, name)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (record, eps, acc) in enumerate(placed):
        color = f"C{i % 10}"
        xs, ys = [], []
        for row in store.rounds(record.run_id):
            per_obs = row.get("epsilon_certified_rdp") or {}
            value = (max(per_obs.values()) if observer is None and per_obs else per_obs.get(observer or ""))
            if isinstance(value, int | float) and math.isfinite(value) and isinstance(row.get("test_accuracy"),
                                                                                     int | float):
                xs.append(float(value))
                ys.append(float(row["test_accuracy"]))
        if xs:
            ax.plot(xs, ys, color=color, linewidth=0.8, alpha=0.6)
        ax.plot([eps], [acc], color=color, marker="o", linestyle="none", label=_label(record))
    epsilons = [e for _, e, _ in placed]
    if min(epsilons) > 0 and max(epsilons) / min(epsilons) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(f"certified epsilon ({who})")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    note = textwrap.wrap("not shown: " + "; ".join(left_out), width=_chars(fig, 7.0)) if left_out else []
    if note:
        fig.text(0.01, 0.01, "\n".join(note), fontsize=7.0, va="bottom")
    wrapped_title(fig, f"test accuracy vs certified epsilon ({who}), {len(placed)} runs: lines are each run's "
                       "path round by round (RDP), markers its final certificate",
                  bottom=min(0.4, 0.03 * len(note)))
    return _save(fig, path), left_out
