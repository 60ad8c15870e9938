"""`dpfl audit CONFIG`: run a config with canary clients and report empirical vs certified ε.

The one-shot estimate of Andrew et al. (arXiv 2302.03098) — see :mod:`dpfl.audit.canary` and
:mod:`dpfl.audit.estimate`. With ``--store`` the audited run is written to the run store under
id ``<run id>-audit<N>`` with ``final["privacy"]["audit"]`` holding the empirical ε and its
interval next to the certified and claimed ε (a separate entry: canaries change the model, so
the audited run is not the plain run). A stored audit is checkpointed like any run: killed, it
resumes with the same command; finished, it is not run again (``--restart`` runs it anew).

Every audit also prints its **reach**: the lower end of the same audit of the mechanism with the
noise removed (a second run of the same size, never stored; :mod:`dpfl.audit.reach`), with the
analytic cap of canaries alone next to it. The verdict is ``violation`` (the empirical lower
bound is above the certified public ε), ``consistent`` (no violation, and the reach is at least
the certified ε) or ``inconclusive`` (the reach is below it: this audit cannot detect violations
below ε ≈ reach), followed by what would raise the reach. ``--json`` prints the audit entries
(``reach`` and ``verdict`` included) as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from dpfl.store import DEFAULT_STORE


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4g}"


def audit_summary(audit: dict[str, Any]) -> str:
    """The side-by-side lines `dpfl audit` prints (also usable by `dpfl report`)."""
    from dpfl.audit.reach import reach_advice

    lo, hi = audit["empirical_epsilon_interval"]
    est = audit["estimate"]
    lines = [
        f"empirical epsilon (final model, {audit['canaries']} canaries, {audit['unseen_canaries']} unseen): "
        f"{_fmt(audit['empirical_epsilon'])}  [{_fmt(lo)}, {_fmt(hi)}] at {est['confidence']:.0%}, "
        f"mu = {est['mu']:.3g}",
        f"certified epsilon: public observer {_fmt(audit['certified_epsilon_public'])}, "
        f"headline (worst observer) {_fmt(audit['certified_epsilon_headline'])}",
        f"claimed epsilon: {_fmt(audit['claimed_epsilon'])}"
        + ("" if audit.get("claim_comparable", True) else " (another privacy notion: not comparable)"),
    ]
    if "reach" in audit:
        lines.append(f"audit reach: {_fmt(audit['reach'])} (lower end of the same audit with the noise removed; "
                     f"the analytic cap of canaries alone, without training signal: {_fmt(audit.get('reach_cap'))})")
    verdict = audit.get("verdict")
    if audit["flag"]:
        lines.append("!!! AUDIT FLAG (violation): the whole empirical interval lies above the certified public "
                     "epsilon: the code adds less noise than the ledger records.")
    elif verdict == "inconclusive":
        lines.append(f"audit: inconclusive: this audit cannot detect violations below epsilon ≈ {_fmt(audit['reach'])} "
                     f"(certified public {_fmt(audit['certified_epsilon_public'])}); the absence of a flag says "
                     "nothing about the noise.")
        lines.append(f"  to raise the reach: {reach_advice(audit)}")
    elif verdict == "consistent":
        lines.append("audit: consistent: empirical interval not above the certified epsilon, and the audit "
                     "reaches above it (it would have caught a mechanism without noise).")
    else:  # an entry stored before audits measured their reach
        lines.append("audit: not flagged (interval not above the certified epsilon); reach not measured.")
    return "\n".join(lines)


def _audit_entry(final: dict[str, Any]) -> dict[str, Any]:
    """The audit entry of an audited run's final record, read through its privacy summary."""
    from dpfl.rounds.result import PrivacySummary

    summary = PrivacySummary.of(final)
    audit = None if summary is None else summary.audit
    if audit is None:
        raise RuntimeError("an audited run's final record holds no audit entry")
    return audit


def _one(config: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run one audited config; returns its audit entry (empirical, certified and claimed ε, flag)."""
    from dpfl.audit.canary import run_audited
    from dpfl.store import RunStore

    def progress(done: int, total: int, metrics: dict[str, Any], elapsed: float) -> None:
        del elapsed
        if args.verbose:
            print(f"[audit {config.name}] round {done}/{total} canaries {metrics.get('canaries', 0)}",
                  file=sys.stderr, flush=True)

    def notice(message: str) -> None:  # always kept in the run's stored notices
        if args.verbose:
            print(f"\n!!! PRIVACY NOTICE: {message}\n", file=sys.stderr, flush=True)

    as_json = bool(getattr(args, "json", False))
    store = RunStore(args.store) if args.store is not None else None
    res = run_audited(config, args.canaries, num_unseen=args.unseen, bootstrap=args.bootstrap,
                      confidence=args.confidence, store=store, restart=getattr(args, "restart", False),
                      progress=progress, notice=notice)
    final = res.final
    audit = _audit_entry(final)
    if as_json:
        return {"run_id": res.run_id, "status": res.status, **audit}
    print(f"audited run {res.run_id} ({config.name}, {config.algorithm.name}): {res.status} after "
          f"{res.rounds_done} rounds in {final['seconds']:.1f} s; test accuracy {final['test_accuracy']:.4f}")
    print(audit_summary(audit))
    if store is not None:
        print(f"stored as {res.run_id} in {store.path}")
    return audit


def _audit(args: argparse.Namespace) -> int:
    from dpfl.config import load_config
    from dpfl.errors import ConfigError

    logging.getLogger("absl").setLevel(logging.ERROR)  # RDP orders dp-accounting excludes, per round
    sweep: list[str | None] = [None]
    key = None
    if args.sweep:
        key, sep, values = args.sweep.partition("=")
        if not sep or not values:
            raise ConfigError(f"`--sweep` must be KEY=V1,V2,...; found {args.sweep!r}.")
        sweep = list(values.split(","))
    rows: list[tuple[str, dict[str, Any]]] = []
    flagged = False
    as_json = bool(getattr(args, "json", False))
    for value in sweep:
        overrides = list(args.set or [])
        if value is not None:
            overrides.append(f"{key}={value}")
        config = load_config(args.config, overrides)
        audit = _one(config, args)
        flagged |= bool(audit["flag"])
        rows.append((f"{key.rsplit('.', 1)[-1]}={value}" if key else config.name, audit))
    if as_json:
        out: Any = [{"setting": label, **a} for label, a in rows] if len(rows) > 1 else rows[0][1]
        print(json.dumps(out, indent=2, default=str))
    elif len(rows) > 1:
        print("\n" + f"{'setting':<24} {'empirical':>10} {'interval':>20} {'certified(pub)':>15} {'reach':>8} "
              f"{'claimed':>10} verdict")
        for label, a in rows:
            lo, hi = a["empirical_epsilon_interval"]
            print(f"{label:<24} {_fmt(a['empirical_epsilon']):>10} {'[' + _fmt(lo) + ', ' + _fmt(hi) + ']':>20} "
                  f"{_fmt(a['certified_epsilon_public']):>15} {_fmt(a.get('reach')):>8} "
                  f"{_fmt(a['claimed_epsilon']):>10} {a.get('verdict')}")
    if args.plot:
        from dpfl.plots.audits import plot_audits

        plot_audits(rows, args.plot, f"canary audit: {config.name} ({config.algorithm.name})")
        if not as_json:
            print(f"plot: {args.plot}")
    return 1 if flagged and args.fail_on_flag else 0


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
    p.add_argument("--restart", action="store_true",
                   help="with --store: discard a checkpoint or stored result of the audited run and run it again")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...", help="audit one run per value of a config key")
    p.add_argument("--plot", metavar="PNG", help="plot empirical vs certified and claimed epsilon")
    p.add_argument("--fail-on-flag", action="store_true", help="exit 1 when the audit flags the run")
    p.add_argument("--json", action="store_true",
                   help="print the audit entry (one object; a list with --sweep) as JSON, with reach and verdict")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per round")
    p.set_defaults(func=_audit)
