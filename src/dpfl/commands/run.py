"""`dpfl run`: run a config (`dpfl runs` and `dpfl plot` are in :mod:`dpfl.commands.runs`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from dpfl.progress import RoundProgress
from dpfl.progress import format_epsilon as _eps
from dpfl.store import DEFAULT_STORE, RunStore

if TYPE_CHECKING:
    from dpfl.rounds.result import PrivacySummary

def _run(args: argparse.Namespace) -> int:
    from dpfl.config import load_config
    from dpfl.errors import ConfigError
    from dpfl.plots.curves import plot_run
    from dpfl.rounds import run_experiment
    from dpfl.rounds.noise import SWAMPED_RATIO, noise_line

    config = load_config(args.config, args.set or [])
    if args.audit:
        return _run_audited(config, args)
    store = RunStore(args.store)
    def loud(message: str) -> None:
        print(f"\n!!! PRIVACY NOTICE: {message}\n", file=sys.stderr, flush=True)

    with RoundProgress(config.rounds, config.name) as progress:
        started = time.perf_counter()
        result = run_experiment(config, store, progress=progress, notice=loud, restart=args.restart,
                                observers=_observers(args))
    final = result.final
    try:
        plot: object = plot_run(store, result.run_id)
    except ConfigError as err:  # e.g. a read-only store folder: the run itself is fine
        print(f"dpfl: warning: {err}", file=sys.stderr)
        plot = "not written"
    acc = final.get("test_accuracy")
    if result.stored_notice is not None:
        print(result.stored_notice)
    print(f"run {result.run_id} ({config.name}): {result.status} after {result.rounds_done} rounds"
          f" in {time.perf_counter() - started:.1f} s")
    if acc is not None:
        print(f"final test accuracy {acc:.4f}, test loss {final.get('test_loss', float('nan')):.4f}")
    if final.get("stop_reason"):
        print(final["stop_reason"])
    noise = final.get("noise")
    # the noise multiplier a run chose: shown when it was calibrated, the run stopped early or its
    # noise swamps the signal (the main job's output, compared by a test with README.md, stays)
    if noise and (noise.get("calibrated_from_target_epsilon") is not None or result.status != "finished"
                  or noise.get("noise_to_signal", 0.0) > SWAMPED_RATIO):
        print(noise_line(noise))
    privacy = result.privacy
    if privacy is not None:
        print(_privacy_summary(privacy))
        if config.privacy.secure_aggregation and result.status == "finished":
            print(_secure_aggregation_lines(config))
    print(f"stored in {store.path}; plot: {plot}")
    return 0


def _observers(args: argparse.Namespace) -> tuple[Any, ...]:
    """The round observers `--csv` and `--tensorboard` ask for (:mod:`dpfl.rounds.observers`)."""
    from dpfl.rounds.observers import CsvMetrics, TensorBoardMetrics

    out: list[Any] = []
    if getattr(args, "csv", None):
        out.append(CsvMetrics(args.csv))
    if getattr(args, "tensorboard", None):
        out.append(TensorBoardMetrics(args.tensorboard))
    return tuple(out)


def _secure_aggregation_lines(config: Any) -> str:
    """What secure aggregation and hidden participation buy against the server: the server's
    certificate of the same run (same cohorts) priced by dry runs without them."""
    from dpfl.rounds import build_experiment, dry_run
    from dpfl.rounds.build import build_plan, plan_of

    p = config.privacy
    c = p.colluding_clients
    lines = [f"secure aggregation: the server sees only the sum of the uploads (Skellam noise; "
             f"{'hidden' if p.participation == 'hidden' else 'visible'} participation; the server's figure holds "
             f"if at most {c} client{'s' if c != 1 else ''} of each secure sum collude with it)"]
    variants = []
    if p.participation == "hidden":
        variants.append(("with visible participation (the server knows who took part)",
                         p.model_copy(update={"participation": "visible"})))
    variants.append(("without secure aggregation (the server sees each upload)",
                     p.model_copy(update={"secure_aggregation": False, "participation": "visible",
                                          "colluding_clients": 0})))
    # the data set is read once for both variants: the client sizes and the model's size do not
    # depend on the privacy settings (each dry run building its own read it twice, ~1 s each)
    shapes = plan_of(build_experiment(config, train=False))
    for label, privacy in variants:
        other = config.model_copy(update={"privacy": privacy})
        out = dry_run(other, experiment=build_plan(other, shapes.client_sizes.tolist(), shapes.num_params)).privacy
        if out is not None and out.certified is not None and "server" in out.certified:
            cert = out.certified["server"]
            lines.append(f"  {label}: server epsilon {_eps(cert.epsilon)} ({cert.method}; {cert.basis_text})")
    return "\n".join(lines)


def _relation_notes(certificates: Any) -> list[str]:
    """The certificates' notes naming a neighbouring relation narrower than the ledger's (a
    registered mechanism's, e.g. the secure sum's zero-out), once each."""
    return list(dict.fromkeys(n for c in certificates for n in c.notes if n.startswith("relation: ")))


def _privacy_summary(summary: PrivacySummary) -> str:
    """A privacy summary for humans: the claim, the headline and each observer."""
    claimed = summary.claimed_epsilon
    if isinstance(claimed, dict):
        claimed_txt = f"max over clients {_eps(max(claimed.values()))}" if claimed else "n/a"
    else:
        claimed_txt = _eps(claimed)
    lines = [f"claimed epsilon: {claimed_txt}  [{summary.claim_notion}]"]
    head = summary.headline
    if summary.certified and head is not None:
        lines.append(
            f"certified epsilon: {_eps(head.epsilon)} at delta {head.delta:g} ({head.method}, worst observer: "
            f"{head.observer}, unit: {head.privacy_unit}, {head.relation})"
        )
        for obs, c in summary.certified.items():
            lines.append(f"  observer {obs:<7} epsilon {_eps(c.epsilon)} ({c.method}; {c.basis_text})")
        lines += [f"  {note}" for note in _relation_notes(summary.certified.values())]
        if summary.certified_basis:
            lines.append(f"  the certified epsilon is the {summary.certified_basis}")
    if summary.spent:
        lines.append("spent epsilon (the composition of the releases that happened; not a guarantee):")
        for obs, c in summary.spent.items():
            lines.append(f"  observer {obs:<7} spent {_eps(c.epsilon)} ({c.method}; {c.basis_text})")
    lines += [f"  {line}" for line in summary.readings()]
    release = summary.extra.get("gaussian_noise")
    if release is not None:
        lines.append("Gaussian releases: " + (
            "lattice (integers plus Skellam noise, certified as the Skellam releases they are)" if release == "lattice"
            else "floating-point (x + σ·Z; the certificate prices ideal Gaussian noise)"))
    for item in summary.not_covered:
        lines.append(f"not covered by the certified epsilon: {item}")
    return "\n".join(lines)


def _run_audited(config: Any, args: argparse.Namespace) -> int:
    """`dpfl run --audit N`: the same run with N canary clients (see :mod:`dpfl.commands.audit`),
    stored as ``<run id>-audit<N>`` with empirical, certified and claimed epsilon side by side; it
    resumes from its checkpoint like any run (``--restart`` runs it anew)."""
    from dpfl.commands.audit import _one

    audit_args = argparse.Namespace(canaries=args.audit, unseen=1000, bootstrap=1000, confidence=0.95,
                                    store=args.store, restart=args.restart, verbose=sys.stderr.isatty())
    audit = _one(config, audit_args)
    return 1 if audit["flag"] else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run an experiment config (resumes if interrupted)")
    p.add_argument("config", help="a YAML config file or the name of a built-in config (e.g. default)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value, e.g. rounds=5")
    p.add_argument("--store", default=str(DEFAULT_STORE), help="run store (SQLite file)")
    p.add_argument("--restart", action="store_true", help="discard a checkpoint or stored result and run again")
    p.add_argument("--audit", type=int, metavar="N", default=0,
                   help="insert N canary clients and report the empirical epsilon next to the certified and "
                        "claimed ones (a separate run; exit 1 if the audit flags it)")
    p.add_argument("--csv", metavar="FILE", default=None,
                   help="also write the per-round metrics to this CSV file ({run_id} in the name is replaced)")
    p.add_argument("--tensorboard", metavar="DIR", default=None,
                   help="also log the per-round metrics to TensorBoard in DIR/RUN_ID (needs `tensorboard`)")
    p.set_defaults(func=_run)

