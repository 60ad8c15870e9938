"""`dpfl bound nbafl`: 003 Theorem 2 (eq. 17) / Theorem 3 (eq. 23) against T, from flags or a run.

The calculators and the estimation of their constants are :mod:`dpfl.theory.nbafl` (pure); this
module holds only the command's I/O: arguments, reading a run from the store, printing, JSON and
the plot.

References:
    003_c42e3eb46a620b42.txt, Theorem 2 (eq. 17), Theorem 3 (eq. 23).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from typing import Any

import dpfl.theory.nbafl as nbafl_theory
from dpfl.errors import ConfigError
from dpfl.theory.nbafl import (
    BoundCurve,
    NbaflConstants,
    estimate_constants,
    theorem2_curve,
    theorem3_curve,
)

__all__ = ["register"]


def _exposures_arg(text: str) -> int | str:
    if text == "T":
        return "T"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--exposures must be a positive integer or 'T'. Found {text!r}.") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--exposures must be >= 1. Found {value}.")
    return value


def _from_run(args: argparse.Namespace) -> dict[str, Any]:
    from dpfl.store import RunStore

    store = RunStore(args.store)
    rec = store.find(args.from_run)
    if rec is None:
        raise ConfigError(f"`--from-run`: run {args.from_run!r} is not in {args.store}.")
    return estimate_constants(store.rounds(rec.run_id), rec.config)


def _bound(args: argparse.Namespace) -> int:
    est: dict[str, Any] = _from_run(args) if args.from_run else {}

    def pick(name: str, key: str, required: bool = True) -> Any:
        value = getattr(args, name)
        if value is None:
            value = est.get(key)
        if value is None and required:
            raise ConfigError(f"`--{name.replace('_', '-')}` is required (not estimable from the run given).")
        return value

    theorem = args.theorem
    contraction = pick("contraction", "contraction", required=False)
    pl = pick("pl", "pl", required=contraction is None)
    consts = NbaflConstants(
        rho=pick("rho", "rho"), beta=pick("beta", "beta"),
        pl=1.0 if pl is None else pl,  # unused when the contraction is given
        dissimilarity=pick("dissimilarity", "dissimilarity"), mu=pick("mu", "mu"), theta=pick("theta", "theta"),
        contraction=contraction)
    clients = int(pick("clients", "clients"))
    m = int(pick("min_samples", "min_samples"))
    delta = float(pick("delta", "delta"))
    curves = []
    for eps in args.epsilon:
        if theorem == 2:
            curves.append(theorem2_curve(args.t_max, eps, delta, clients, m, consts,
                                         exposures=args.exposures, clip_norm=args.clip))
        else:
            k = int(pick("sampled", "sampled"))
            curves.append(theorem3_curve(args.t_max, eps, delta, clients, k, m, consts, clip_norm=args.clip))
    title = f"003 Theorem {theorem} (eq. {17 if theorem == 2 else 23})"
    result: dict[str, Any] = {
        "theorem": title,
        "constants": asdict(consts),
        "clients": clients, "min_samples": m, "delta": delta,
        "estimated_from_run": est or None,
        "curves": [asdict(c) for c in curves],
    }
    if args.plot:
        _plot(curves, args.plot, title)
        result["plot"] = args.plot
    if args.json:
        sys.stdout.write(json.dumps(_finite(result)) + "\n")
        return 0
    print(f"{result['theorem']}  N = {clients}, m = {m}, delta = {delta:g}"
          + (f", K = {args.sampled or est.get('sampled')}" if theorem == 3 else ""))
    print("constants: " + ", ".join(f"{k}={v:.4g}" for k, v in asdict(consts).items() if v is not None))
    if est:
        print(f"estimated from run {args.from_run}: " + ", ".join(
            f"{k}={est[k]:.4g}" for k in ("theta", "contraction", "beta", "dissimilarity") if est.get(k) is not None))
    step = max(1, args.t_max // 20)
    shown = sorted(set(range(step, args.t_max + 1, step)) | {1} | {c.best_rounds for c in curves if c.best_rounds})
    print("T      " + "  ".join(f"eps={c.epsilon:<10g}" for c in curves))
    for t in shown:
        print(f"{t:<6} " + "  ".join(
            f"{c.values[t - 1]:<14.6g}" if math.isfinite(c.values[t - 1]) else f"{'undefined':<14}" for c in curves))
    for c in curves:
        if c.best_rounds is None:
            print(f"eps = {c.epsilon:g}: the bound is undefined for every T <= {args.t_max}")
        else:
            print(f"eps = {c.epsilon:g}: minimizing T = {c.best_rounds} (bound {c.best_value:.6g})")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def _finite(value: Any) -> Any:
    """NaN/inf → None, so the JSON output is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _plot(curves: list[BoundCurve], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in curves:
        ax.plot(c.rounds, c.values, label=f"ε = {c.epsilon:g}")
        if c.best_rounds is not None and c.best_value is not None:
            ax.plot([c.best_rounds], [c.best_value], "o", color=ax.lines[-1].get_color())
    ax.set_xlabel("T (aggregations)")
    ax.set_ylabel("bound on E F(w_T) − F(w*)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``nbafl`` to ``dpfl bound``."""
    p = subparsers.add_parser(
        "nbafl", help="003 NbAFL: Theorem 2 (eq. 17) / Theorem 3 (eq. 23) against T",
        description=(nbafl_theory.__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--theorem", type=int, choices=(2, 3), default=2, help="2: all clients; 3: K-random")
    p.add_argument("--epsilon", type=float, nargs="+", required=True, help="protection level(s) epsilon")
    p.add_argument("--delta", type=float, help="delta (default: the run's with --from-run)")
    p.add_argument("--clients", type=int, help="N")
    p.add_argument("--sampled", type=int, help="K (Theorem 3)")
    p.add_argument("--min-samples", type=int, help="m, the smallest local data set")
    p.add_argument("--exposures", type=_exposures_arg, default=None,
                   help="L, or 'T' (every upload exposed): use eq. 16's second branch for T <= L sqrt(N); "
                        "default: eq. 17 as printed")
    p.add_argument("--clip", type=float, help="C: restore the factor 2C the paper's eq. 62 drops (default: as printed)")
    p.add_argument("--rho", type=float, help="rho, smoothness")
    p.add_argument("--beta", type=float, help="beta, Lipschitz constant")
    p.add_argument("--pl", type=float, help="l, Polyak-Lojasiewicz constant")
    p.add_argument("--dissimilarity", "--B", type=float, help="B >= 1 (Lemma 2)")
    p.add_argument("--mu", type=float, help="mu, proximal coefficient")
    p.add_argument("--theta", type=float, help="Theta = F(w0) - F(w*)")
    p.add_argument("--contraction", type=float, help="P (or Q) directly, instead of 1 + 2 l lambda2")
    p.add_argument("--t-max", type=int, default=100, help="evaluate T = 1..t_max")
    p.add_argument("--from-run", help="fill missing constants with estimates from a stored NbAFL run")
    p.add_argument("--store", default="runs/dpfl.sqlite", help="run store for --from-run")
    p.add_argument("--plot", help="write the curves to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_bound)
