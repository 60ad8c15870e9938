"""`dpfl report RUN_ID`: a stored run's result, privacy (claimed vs certified) and notices; with
``--json`` also its per-round history (the metrics of every round as stored)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from dpfl.store import DEFAULT_STORE, RunStore


def _strict(x: Any) -> Any:
    """``x`` with every non-finite float as a string ("inf", "-inf", "nan"): strict JSON, as the
    store writes an infinite ε in a result."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_strict(v) for v in x]
    return x


def _report(args: argparse.Namespace) -> int:
    from dpfl.commands.run import _privacy_summary
    from dpfl.rounds.noise import noise_line
    from dpfl.rounds.result import PrivacySummary

    store = RunStore(args.store)
    rec = store.get(args.run_id)
    rows = store.rounds(rec.run_id)
    notices = store.notices(rec.run_id)
    if args.json:
        # "rounds": how many; "history": each round's metrics as stored (round 1-based, as printed)
        history = [_strict({**r, "round": r["round"] + 1}) for r in rows]
        print(json.dumps({"run_id": rec.run_id, "name": rec.name, "status": rec.status, "config": rec.config,
                          "env": rec.env, "result": rec.result, "notices": notices, "rounds": len(rows),
                          "history": history}, indent=2))
        return 0
    print(f"run {rec.run_id}: {rec.name} ({rec.algorithm} on {rec.dataset}, {rec.model}) — {rec.status}, "
          f"{len(rows)} rounds")
    result = rec.result or {}
    if "test_accuracy" in result:
        print(f"test accuracy {result['test_accuracy']:.4f}, test loss {result.get('test_loss', float('nan')):.4f}")
    if result.get("stop_reason"):
        print(result["stop_reason"])
    if result.get("error"):
        print(f"failed: {result['error']}")
    privacy = PrivacySummary.of(result)
    if privacy is not None:
        print(_privacy_summary(privacy))
        noise = noise_line(result.get("noise"))
        if noise is not None:
            print(noise)
        if privacy.audit is not None:
            from dpfl.commands.audit import audit_summary

            print(audit_summary(privacy.audit))
    for n in notices:
        where = f"round {n['round'] + 1}" if n["round"] is not None else "setup"
        print(f"notice ({n['kind']}, {where}): {n['message']}")
    print(f"environment: torch {rec.env.get('torch')}, dp-accounting {rec.env.get('dp_accounting')}, "
          f"commit {rec.env.get('git_commit')}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="show a stored run: result, claimed vs certified epsilon, notices")
    p.add_argument("run_id")
    p.add_argument("--store", default=str(DEFAULT_STORE))
    p.add_argument("--json", action="store_true",
                   help="the run as JSON: config, environment, result, notices and the per-round history")
    p.set_defaults(func=_report)
