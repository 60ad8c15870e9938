"""`dpfl runs`, `dpfl plot`: list stored runs with their certified ε and accuracy; plot runs.

    dpfl runs [--json]                        every run: status, rounds, test accuracy, claimed ε,
                                              certified ε per observer
    dpfl plot ID                              one run's curves
    dpfl plot ID ID ...                       several runs overlaid
    dpfl plot --vs-epsilon ID ID ...          test accuracy vs certified ε across runs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from dpfl.store import DEFAULT_STORE, RunRecord, RunStore

OBSERVER_COLUMNS = ("server", "public")


def _eps_text(value: float | None) -> str:
    if value is None:
        return ""
    return "inf" if math.isinf(value) else f"{value:.4g}"


def run_row(store: RunStore, record: RunRecord) -> dict[str, Any]:
    """One stored run as ``dpfl runs`` shows it (also its ``--json`` entry): id, name, status,
    rounds, test accuracy, claimed ε and certified ε per observer (None where there is none),
    and ``problem`` when a stored field cannot be read."""
    from dpfl.errors import ConfigError
    from dpfl.rounds.result import PrivacySummary

    problem = record.problem
    try:
        rounds: int | None = len(store.rounds(record.run_id))
    except ConfigError as err:
        problem, rounds = problem or str(err), None
    result = record.result or {}
    acc = result.get("test_accuracy")
    certified: dict[str, float | None] = {}
    claimed = None
    try:
        summary = PrivacySummary.of(result)
    except (KeyError, TypeError, ValueError) as err:  # a stored summary of another format
        summary, problem = None, problem or f"its stored privacy summary cannot be read ({err})"
    if summary is not None:
        certified = {obs: c.epsilon for obs, c in (summary.certified or {}).items()}
        claimed = summary.claimed_max
    stored_noise = result.get("noise")
    noise: dict[str, Any] = stored_noise if isinstance(stored_noise, dict) else {}
    return {"run_id": record.run_id, "name": record.name, "algorithm": record.algorithm,
            "data": record.dataset, "model": record.model,
            "status": record.status if problem is None else "unreadable", "rounds": rounds,
            "test_accuracy": float(acc) if isinstance(acc, int | float) else None,
            "epsilon_claimed": claimed, "epsilon_certified": certified,
            "noise_multiplier": noise.get("noise_multiplier"), "noise_to_signal": noise.get("noise_to_signal"),
            "delta": summary.delta if summary is not None else None, "problem": problem}


def _runs(args: argparse.Namespace) -> int:
    from dpfl.errors import ConfigError
    from dpfl.rounds.noise import SWAMPED_RATIO

    store = RunStore(args.store)
    if not store.exists():
        raise ConfigError(f"no run store at {store.path} (`dpfl run` creates it; see --store)")
    rows = [run_row(store, r) for r in store.list()]
    if args.json:
        def plain(x: Any) -> Any:  # JSON has no infinity: "inf", as the store writes it
            return "inf" if isinstance(x, float) and math.isinf(x) else x

        for row in rows:
            row["epsilon_certified"] = {k: plain(v) for k, v in row["epsilon_certified"].items()}
            row["epsilon_claimed"] = plain(row["epsilon_claimed"])
            row["noise_to_signal"] = plain(row["noise_to_signal"])
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    observers = list(OBSERVER_COLUMNS) + sorted({o for r in rows for o in r["epsilon_certified"]}
                                                - set(OBSERVER_COLUMNS))
    table = Table(title=f"runs in {store.path}")
    table.add_column("run id", no_wrap=True, min_width=12)  # ids are copied from here: never cut
    for col in ("name", "algorithm", "data", "status", "rounds", "test acc", "claimed ε"):
        table.add_column(col, justify="right" if col in ("rounds", "test acc", "claimed ε") else "left")
    for obs in observers:
        table.add_column(f"ε {obs}", justify="right")
    table.add_column("σ", justify="right")  # the noise multiplier (algorithms that have one)
    table.add_column("noise/signal", justify="right")
    for r in rows:
        acc = r["test_accuracy"]
        z, ratio = r["noise_multiplier"], r["noise_to_signal"]
        table.add_row(r["run_id"], r["name"], r["algorithm"], r["data"], r["status"],
                      "?" if r["rounds"] is None else str(r["rounds"]), "" if acc is None else f"{acc:.4f}",
                      _eps_text(r["epsilon_claimed"]),
                      *(_eps_text(r["epsilon_certified"].get(o)) for o in observers),
                      "" if z is None else f"{z:.4g}",
                      "" if ratio is None else (f"{ratio:.3g}" + (" !" if ratio > SWAMPED_RATIO else "")))
    # piped output is read by scripts and people alike: do not cut ids or names at 80 columns
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    deltas = sorted({r["delta"] for r in rows if r["delta"] is not None})
    if deltas:
        print("ε: certified (RDP/PLD, the run's final certificate) at δ = " + ", ".join(f"{d:g}" for d in deltas)
              + "; claimed: the paper's own formula")
    if any(r["noise_multiplier"] is not None for r in rows):
        print(f"σ: the noise multiplier; noise/signal: per coordinate of the aggregated update, the noise std over "
              f"the update's scale (a lower bound, median of the first rounds; '!': above {SWAMPED_RATIO:g}, the "
              "noise swamps the signal)")
    for r in rows:
        if r["problem"] is not None:
            line = r["problem"] if r["problem"].startswith("run ") else f"run {r['run_id']}: {r['problem']}"
            print(f"dpfl: warning: {line}", file=sys.stderr)
    return 0


def _certified(record: Any, observer: str | None) -> float | None:
    """A run's final certified ε against ``observer`` (the worst observer for None), or None."""
    from dpfl.rounds.result import PrivacySummary

    summary = PrivacySummary.of(record.result)
    if summary is None or not summary.certified:
        return None
    if observer is not None and observer not in summary.certified:
        return None
    return summary.epsilon(observer)


def _plot(args: argparse.Namespace) -> int:
    from dpfl.plots.curves import plot_run, plot_runs, plot_utility_vs_epsilon

    store = RunStore(args.store)
    if args.vs_epsilon:
        path, left_out = plot_utility_vs_epsilon(store, args.run_ids, args.out, observer=args.observer,
                                                 certified=_certified)
        for line in left_out:
            print(f"dpfl: not shown: {line}", file=sys.stderr)
    elif len(args.run_ids) == 1:
        path = plot_run(store, args.run_ids[0], args.out)
    else:
        path = plot_runs(store, args.run_ids, args.out)
    print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("runs", help="list stored runs with test accuracy and certified epsilon per observer")
    p.add_argument("--store", default=str(DEFAULT_STORE), help=f"run store (default {DEFAULT_STORE})")
    p.add_argument("--json", action="store_true", help="one JSON list for scripts")
    p.set_defaults(func=_runs)

    p = subparsers.add_parser(
        "plot", help="PNG curves of stored runs: one run, several overlaid, or accuracy vs certified epsilon",
        description="One RUN_ID: its loss and accuracy per round. Several: overlaid. --vs-epsilon: test "
                    "accuracy against certified epsilon across the runs (final certificate and per-round path).")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="run ids (or unique prefixes), see `dpfl runs`")
    p.add_argument("--vs-epsilon", action="store_true", help="test accuracy vs certified epsilon across the runs")
    p.add_argument("--observer", choices=OBSERVER_COLUMNS, default=None,
                   help="with --vs-epsilon: the observer's epsilon (default: the worst of both)")
    p.add_argument("--store", default=str(DEFAULT_STORE), help=f"run store (default {DEFAULT_STORE})")
    p.add_argument("--out", default=None, metavar="FILE", help="PNG to write (default: runs/plots/...)")
    p.set_defaults(func=_plot)
