"""`dpfl bound udp`: 000 Theorem 2 (eq. 22) against T, from flags or a stored UDP run.

The calculator and the estimation of its constants are :mod:`dpfl.theory.udp` (pure); this module
holds only the command's I/O: arguments, reading a run from the store, printing, JSON and the plot.

References:
    000_3304bf6f36c753f8.txt, Theorem 2 (eq. 22), Theorem 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any, cast

import dpfl.theory.udp as udp_theory
from dpfl.errors import ConfigError
from dpfl.theory.udp import UdpConstants, estimate_constants, theorem2_curve

__all__ = ["register"]


def _bound(args: argparse.Namespace) -> int:
    est: dict[str, Any] = {}
    notes: list[str] = []
    if args.from_run:
        from dpfl.store import RunStore

        store = RunStore(args.store)
        rec = store.get(args.from_run)
        rows = cast("list[dict[str, Any]]", store.rounds(rec.run_id))  # RunStore.list shadows list for mypy
        est = estimate_constants([r.get("test_loss") for r in rows if "test_loss" in r], rec.config,
                                 smoothness=args.smoothness)
        notes += est.pop("notes")

    def pick(name: str, cli: Any) -> Any:
        if cli is not None:
            return cli
        if name in est:
            return est[name]
        raise ConfigError(f"`--{name.replace('_', '-')}` is required (or use --from-run).")

    lr = float(pick("lr", args.lr))
    if args.sensitivity is not None:
        sens = float(args.sensitivity)
    elif args.clip is not None and args.samples_per_client is not None:
        from dpfl.algorithms.udp import local_sensitivity  # torch: only when asked

        sens = local_sensitivity(lr, args.clip, args.samples_per_client)  # 000 eq. 13 (E = 1)
    else:
        sens = float(pick("sensitivity", None))
    c = UdpConstants(
        smoothness=float(pick("smoothness", args.smoothness)),
        pl=float(pick("pl", args.pl)),
        lr=lr,
        divergence=float(args.divergence if args.divergence is not None else 0.0),
        sensitivity=sens,
        clients=int(pick("clients", args.clients)),
        sampled=int(args.sampled if args.sampled is not None else est.get("sampled", pick("clients", args.clients))),
        gap=float(pick("gap", args.gap)),
        contraction=args.contraction if args.contraction is not None else est.get("contraction"),
    )
    c.check()
    deltas = [args.delta] if args.delta is not None else list(pick("delta", None))
    eps_levels = [[e] for e in args.epsilon] if args.epsilon else [list(pick("epsilon", None))]
    curves = [theorem2_curve(c, e, deltas, args.t_max) for e in eps_levels]
    result = {
        "theorem": "000 Thm 2 (eq. 22)",
        "constants": {**asdict(c), "A": c.a, "kappa0": c.kappa0, "kappa1": c.kappa1},
        "delta": deltas,
        "curves": [{"epsilon": cv.epsilon, "best_rounds": cv.best_rounds, "best_bound": cv.best_bound,
                    "bound": cv.bound} for cv in curves],
        "notes": notes,
    }
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for cv in curves:
            lab = "ε = " + ",".join(f"{e:g}" for e in cv.epsilon[:3])
            ax.plot(cv.rounds, cv.bound, label=f"{lab} (best T = {cv.best_rounds})")
            ax.plot([cv.best_rounds], [cv.best_bound], "o", color=ax.lines[-1].get_color())
        ax.set_xlabel("T (communication rounds)")
        ax.set_ylabel("bound on E F(w^T) − F(w*)")
        ax.set_title(f"000 Thm 2 (eq. 22): U = {c.clients}, K = {c.sampled}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        plt.close(fig)
        result["plot"] = args.plot
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    print(f"000 Theorem 2 (eq. 22): A = {c.a:.6g}, kappa0 = {c.kappa0:.4g}, kappa1 = {c.kappa1:.4g}, "
          f"U = {c.clients}, K = {c.sampled}, gap = {c.gap:.4g}")
    marks = sorted({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, args.t_max} & set(range(1, args.t_max + 1)))
    header = "T".rjust(6) + "".join(("eps=" + ",".join(f"{e:g}" for e in cv.epsilon[:2])).rjust(16) for cv in curves)
    print(header)
    for t in marks:
        print(str(t).rjust(6) + "".join(f"{cv.bound[t - 1]:16.6g}" for cv in curves))
    for cv in curves:
        print(f"best T for eps={','.join(f'{e:g}' for e in cv.epsilon[:3])}: {cv.best_rounds} "
              f"(bound {cv.best_bound:.6g})")
    for n in notes:
        print(f"note: {n}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``udp`` to ``dpfl bound``."""
    p = subparsers.add_parser("udp", help="000 UDP: Theorem 2 (eq. 22) against T and its best T",
                              description=(udp_theory.__doc__ or "").split("\n\n")[0])
    p.add_argument("--epsilon", type=float, nargs="+", help="privacy level(s) epsilon_p (one curve each)")
    p.add_argument("--delta", type=float, help="delta_p")
    p.add_argument("--clients", type=int, help="U")
    p.add_argument("--sampled", type=int, help="K (default U)")
    p.add_argument("--lr", type=float, help="eta")
    p.add_argument("--smoothness", "--L", type=float, help="L, smoothness (Assumption 1.3)")
    p.add_argument("--pl", "--mu", type=float, help="mu, Polyak-Lojasiewicz constant (Assumption 1.2)")
    p.add_argument("--divergence", type=float, help="mean gradient divergence epsilon-bar (Assumption 1.5); default 0")
    p.add_argument("--sensitivity", type=float, help="Delta-ell; or give --clip and --samples-per-client")
    p.add_argument("--clip", type=float, help="C (with --samples-per-client: Delta-ell = 2 eta C/|D_i|)")
    p.add_argument("--samples-per-client", type=int, help="|D_i|")
    p.add_argument("--gap", type=float, help="F(w0) - F(w*)")
    p.add_argument("--contraction", type=float, help="A directly, instead of 1 - 2 mu eta + mu eta^2 L")
    p.add_argument("--t-max", type=int, default=300, help="evaluate T = 1..t_max")
    p.add_argument("--from-run", help="fill missing constants with estimates from a stored UDP run")
    p.add_argument("--store", default="runs/dpfl.sqlite", help="run store for --from-run")
    p.add_argument("--plot", help="write the curves to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_bound)


