"""`dpfl audit CONFIG`: run a config with canary clients and report empirical vs certified ε.

The one-shot estimate of Andrew et al. (arXiv 2302.03098) — see :mod:`dpfl.audit.canary` and
:mod:`dpfl.audit.estimate`. With ``--store`` the audited run is written to the run store under
id ``<run id>-audit<N>`` with ``final["privacy"]["audit"]`` holding the empirical ε and its
interval next to the certified and claimed ε (a separate entry: canaries change the model, so
the audited run is not the plain run).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from dpfl.experiments.store import DEFAULT_STORE


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4g}"


def audit_summary(audit: dict[str, Any]) -> str:
    """The side-by-side lines `dpfl audit` prints (also usable by `dpfl report`)."""
    lo, hi = audit["empirical_epsilon_interval"]
    est = audit["estimate"]
    lines = [
        f"empirical epsilon (final model, {audit['canaries']} canaries, {audit['unseen_canaries']} unseen): "
        f"{_fmt(audit['empirical_epsilon'])}  [{_fmt(lo)}, {_fmt(hi)}] at {est['confidence']:.0%}, mu = {est['mu']:.3g}",
        f"certified epsilon: public observer {_fmt(audit['certified_epsilon_public'])}, "
        f"headline (worst observer) {_fmt(audit['certified_epsilon_headline'])}",
        f"claimed epsilon: {_fmt(audit['claimed_epsilon'])}"
        + ("" if audit.get("claim_comparable", True) else " (another privacy notion: not comparable)"),
    ]
    if audit["flag"]:
        lines.append("!!! AUDIT FLAG: the whole empirical interval lies above the certified public epsilon: "
                     "the code adds less noise than the ledger records.")
    else:
        lines.append("audit: empirical epsilon consistent with the certified epsilon (interval not above it).")
    return "\n".join(lines)


def _audit(args: argparse.Namespace) -> int:
    from dpfl.audit.canary import run_audited
    from dpfl.experiments.config import load_config
    from dpfl.experiments.runner import environment
    from dpfl.experiments.store import RunStore

    logging.getLogger("absl").setLevel(logging.ERROR)  # RDP orders dp-accounting excludes, per round
    config = load_config(args.config, args.set or [])

    def progress(done: int, total: int, metrics: dict[str, Any]) -> None:
        if args.verbose:
            print(f"[audit {config.name}] round {done}/{total} canaries {metrics.get('canaries', 0)}",
                  file=sys.stderr, flush=True)

    res = run_audited(config, args.canaries, num_unseen=args.unseen, bootstrap=args.bootstrap,
                      confidence=args.confidence, progress=progress)
    final = res.final
    print(f"audited run {res.run_id} ({config.name}, {config.algorithm.name}): {res.status} after "
          f"{res.rounds_done} rounds in {final['seconds']:.1f} s; test accuracy {final['test_accuracy']:.4f}")
    print(audit_summary(final["privacy"]["audit"]))
    if args.store is not None:
        store = RunStore(args.store)
        cfg = config.model_dump(mode="json")
        cfg["audit"] = {"canaries": args.canaries, "unseen": args.unseen, "bootstrap": args.bootstrap,
                        "confidence": args.confidence}
        store.start(res.run_id, cfg, environment())
        for i, m in enumerate(res.history):
            store.log_round(res.run_id, i, m)
        store.finish(res.run_id, res.status, final)
        print(f"stored as {res.run_id} in {store.path}")
    return 1 if final["privacy"]["audit"]["flag"] and args.fail_on_flag else 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``audit`` to the CLI's subparsers."""
    p = subparsers.add_parser("audit", help="empirical epsilon of a run from canary clients",
                              description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("config", help="YAML run config")
    p.add_argument("--canaries", type=int, default=100, help="inserted canary clients (default 100)")
    p.add_argument("--unseen", type=int, default=1000, help="unseen canary directions (default 1000)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the interval")
    p.add_argument("--confidence", type=float, default=0.95, help="two-sided confidence of the interval")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--store", nargs="?", const=str(DEFAULT_STORE), default=None,
                   help=f"store the audited run (default path {DEFAULT_STORE})")
    p.add_argument("--fail-on-flag", action="store_true", help="exit 1 when the audit flags the run")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per round")
    p.set_defaults(func=_audit)
