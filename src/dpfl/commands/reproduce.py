"""`dpfl reproduce KEY`: run a paper figure's sweep and write its figure, report and result records
(``--from-records``: rewrite the report from the records alone)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dpfl.store import DEFAULT_STORE, RunStore


def _reproduce(args: argparse.Namespace) -> int:
    from dpfl.experiments.recipes import all_recipes, get_recipe
    from dpfl.experiments.recipes.base import reproduce
    from dpfl.progress import RoundProgress
    from dpfl.rounds import run_experiment

    if args.list or not args.key:
        for key, recipe in sorted(all_recipes().items()):
            print(f"{key:<14} {recipe.title}")
        return 0
    recipe = get_recipe(args.key)
    store = None if args.from_records else RunStore(args.store)

    def run_one(config):  # type: ignore[no-untyped-def]
        with RoundProgress(config.rounds, config.name) as progress:
            return run_experiment(config, store, progress=progress,
                                  notice=lambda m: print(f"  notice: {m}", file=sys.stderr))

    data_dir = args.data_dir or default_data_dir_if_set()
    path = reproduce(recipe, args.scale, store, Path(args.out), data_dir=data_dir, run_one=run_one,
                     report_only=args.report_only, max_runs=args.max_runs, from_records=args.from_records,
                     notice=lambda m: print(f"notice: {m}", file=sys.stderr))
    print(path.read_text())
    print(f"report: {path}")
    return 0


def default_data_dir_if_set() -> str | None:
    """``$DPFL_DATA_DIR`` when set and non-empty: the recipes name ``./data``, the default any run
    config falls back to, so the variable applies to them as to ``dpfl data`` (``dpfl run`` reads
    only the config's ``data.dir``)."""
    from dpfl.data.layout import DATA_DIR_ENV

    return os.environ.get(DATA_DIR_ENV) or None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("reproduce", help="reproduce a paper figure or table (dpfl reproduce --list)")
    p.add_argument("key", nargs="?", help="e.g. 000/fig5")
    p.add_argument("--scale", default="reduced", choices=["smoke", "reduced", "full"])
    p.add_argument("--list", action="store_true")
    p.add_argument("--data-dir", default=None,
                   help="data directory for every run of the recipe (default: $DPFL_DATA_DIR if set, else ./data)")
    p.add_argument("--store", default=str(DEFAULT_STORE))
    p.add_argument("--out", default="reports")
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the report (and its records) from the runs held: stored or recorded")
    p.add_argument("--from-records", action="store_true",
                   help="rewrite the report from the result records beside it (records.jsonl) alone: "
                        "no run store, no training")
    p.add_argument("--max-runs", type=int, default=None, metavar="N",
                   help="run at most N runs that are neither finished in the store nor recorded beside the "
                        "report, add their records, then report the runs held so far (marked partial); for "
                        "sweeps too long for one sitting, on one machine or several")
    p.set_defaults(func=_reproduce)
