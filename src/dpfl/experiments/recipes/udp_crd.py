"""Reproductions of 000 (UDP and CRD): Figs. 4–15.

Setting of 000 §5.2 (kept at every scale unless a scale says otherwise): U = 50 clients, δ = 1e-3,
ζ = 1e-3, per-sample clip C = median of unclipped per-sample gradient norms (measured by
:func:`median_unclipped_norm`, a non-private pilot — stated as not covered by the certified ε),
full-batch local step. MLP 784-256-10 on MNIST with |D_i| = 800 (Figs. 5–10, 12–15); linear SVM on
UCI Census-Income (KDD) standing in for IPUMS-US with |D_i| = 128 (Fig. 4); the one-conv CNN on
CIFAR-10 (Fig. 11). The paper states no learning rate; dpfl uses η = 0.5 for the MLP (full-batch
GD with clipped gradients moves slowly at small η, and η scales the noise too, so it does not
change the privacy/utility ratio per round), 0.5 for the SVM and 0.1 for the CNN.

The paper's figures are plots without printed numbers: the reports compare our numbers with the
qualitative claims of the text and compute a verdict for each.

Scales: ``smoke`` (seconds, few clients, tests), ``reduced`` (what runs here: the paper's clients
and data sizes, but a shorter initial T and a coarser grid), ``full`` (the paper's grid).

The median clip norms used below were measured with (η and T as in the recipes)::

    python -m dpfl.experiments.recipes.udp_crd median-clip --dataset mnist --lr 0.5 --rounds 100
    python -m dpfl.experiments.recipes.udp_crd median-clip --dataset census-income --lr 0.5 --rounds 100
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.func import functional_call, grad, vmap

from dpfl.config import RunConfig, parse_config
from dpfl.experiments.recipes.base import (
    Recipe,
    RecipeRun,
    ReportContext,
    basis_mark,
    stored_privacy,
)
from dpfl.experiments.recipes.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    Estimate,
    claim_better,
    compare,
    every,
    in_range,
    interior_minimum,
    monotone,
    near_best,
    not_worse,
    order_of_sets,
    trend,
)

__all__ = ["RECIPES", "census_config", "median_unclipped_norm", "mnist_config"]

PAPER = "000_3304bf6f36c753f8.txt"
DELTA = 1e-3
ZETA = 1e-3
MNIST_LR = 0.5
CENSUS_LR = 0.5
CIFAR_LR = 0.1
#: median unclipped per-sample gradient norm (non-private pilot, see the module docstring)
MNIST_CLIP = 1.12  # measured: 1.122 (q25 0.156, q75 10.6; 2000 records x 5 checkpoints)
CENSUS_CLIP = 1.0
CIFAR_CLIP = 1.0
#: differences of final test loss / accuracy within max(TOL, 2 SE over seeds) decide nothing
LOSS_TOL = 0.005
ACC_TOL = 0.01
#: share of the majority class ("- 50000.") in UCI Census-Income (KDD)'s test file: 93,576 of 99,762
CENSUS_MAJORITY = 0.938


# --------------------------------------------------------------------------- configs


def _config(
    name: str,
    algorithm: str,
    options: dict[str, Any],
    *,
    data: str,
    model: dict[str, Any],
    partition: dict[str, Any],
    rounds: int,
    lr: float,
    clients_per_round: int,
    seed: int = 0,
) -> RunConfig:
    return parse_config({
        "name": name,
        "seed": seed,
        "rounds": rounds,
        "data": {"name": data, "dir": "data"},
        "partition": partition,
        "model": model,
        "algorithm": {"name": algorithm, "options": options},
        "privacy": {"delta": DELTA, "pld_every": 0},
        "sampling": {"kind": "fixed", "clients_per_round": clients_per_round},
        "local": {"lr": lr, "batch_size": None, "epochs": 1},
        "eval_every": 1,
        "checkpoint_every": 50,
    })


def mnist_config(
    algorithm: str, options: dict[str, Any], *, rounds: int, lr: float | None = None, clients: int = 50,
    samples: int = 800, clients_per_round: int | None = None, partition: dict[str, Any] | None = None,
    name: str = "000-mnist", seed: int = 0,
) -> RunConfig:
    """A 000 MNIST/MLP run (Figs. 5–10, 12–15)."""
    part = partition or {"kind": "iid", "num_clients": clients, "samples_per_client": samples}
    return _config(name, algorithm, options, data="mnist", model={"name": "mlp"}, partition=part,
                   rounds=rounds, lr=lr or MNIST_LR, clients_per_round=clients_per_round or clients, seed=seed)


def census_config(
    algorithm: str, options: dict[str, Any], *, rounds: int, lr: float | None = None, clients: int = 50,
    samples: int = 128, clients_per_round: int | None = None, name: str = "000-census", seed: int = 0,
) -> RunConfig:
    """A 000 SVM run on UCI Census-Income (KDD), the stand-in for IPUMS-US (Fig. 4)."""
    return _config(name, algorithm, options, data="census-income",
                   model={"name": "svm", "options": {"kappa": 1e-3}},
                   partition={"kind": "iid", "num_clients": clients, "samples_per_client": samples},
                   rounds=rounds, lr=lr or CENSUS_LR, clients_per_round=clients_per_round or clients, seed=seed)


def _opts(eps: float, clip: float, rounds: int, **extra: Any) -> dict[str, Any]:
    return {"epsilon": eps, "clip_norm": clip, "clip_norm_source": "median_unclipped_norms",
            "rounds": rounds, **extra}


# --------------------------------------------------------------------------- the median clip norm


def median_unclipped_norm(
    config: RunConfig, *, num_checkpoints: int = 5, num_records: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """000 §5.2's C: the median per-sample gradient norm along a non-private run of ``config``.

    A **non-private pilot**: the same clients, model and local procedure as the UDP run but with
    no clipping and no noise (full-batch FedAvg over all clients for ``config.rounds`` rounds);
    at ``num_checkpoints`` evenly spaced rounds the per-sample gradient norms of a fixed random
    subset of the clients' training records are measured (``torch.func.vmap(grad)``); C is
    their median. It looks at private data and is not privatized: runs using it declare
    ``clip_norm_source: median_unclipped_norms`` and their reports say the certified ε does not
    cover it.

    Returns:
        ``{"clip_norm": median, "quantiles": {...}, "checkpoints": [...], "records": n}``.
    """
    from dpfl.models import per_sample_loss
    from dpfl.rounds import build_experiment
    from dpfl.server.aggregators import WeightedMean
    from dpfl.sim.vectorized import VectorizedEngine

    exp = build_experiment(config)
    problem = dataclasses.replace(exp.problem, local=dataclasses.replace(exp.problem.local, per_sample_clip=None))
    engine = VectorizedEngine(problem, exp.data, exp.seeds)
    clients = list(range(exp.data.num_clients))
    owned = torch.cat(exp.data.client_indices)
    gen = torch.Generator().manual_seed(seed)
    pick = owned[torch.randperm(owned.numel(), generator=gen)[: min(num_records, owned.numel())]]
    x, y = exp.data.x[pick], exp.data.y[pick]
    rounds = config.rounds
    marks = sorted({round(i * (rounds - 1) / max(num_checkpoints - 1, 1)) for i in range(num_checkpoints)})
    module = problem.module

    def loss_one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(module, p, (xi.unsqueeze(0),))
        return per_sample_loss(problem.loss_kind, out, yi.unsqueeze(0)).sum()

    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
    params = exp.init_params.clone()
    norms: list[torch.Tensor] = []
    for t in range(rounds):
        if t in marks:
            views = {k: v.detach() for k, v in problem.layout.views(params).items()}
            sq = torch.zeros(x.shape[0])
            for start in range(0, x.shape[0], 500):
                g = per_sample(views, x[start : start + 500], y[start : start + 500])
                sq[start : start + 500] = sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in g.values())
            norms.append(sq.sqrt())
        if t == marks[-1]:
            break
        local = engine.train(params, clients, t)
        params = WeightedMean.by_samples(local.num_samples)(local.params)
    allv = torch.cat(norms)
    qs = torch.quantile(allv, torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9]))
    return {
        "clip_norm": float(qs[2]),
        "quantiles": {k: float(v) for k, v in zip(("q10", "q25", "q50", "q75", "q90"), qs.tolist(), strict=True)},
        "checkpoints": marks,
        "records": int(x.shape[0]),
    }


def _main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - manual tool
    p = argparse.ArgumentParser(prog="python -m dpfl.experiments.recipes.udp_crd")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("median-clip", help="000 §5.2 median clip norm by a non-private pilot")
    m.add_argument("--data-dir", default="../shared/data")
    m.add_argument("--lr", type=float, default=None)
    m.add_argument("--rounds", type=int, default=100)
    m.add_argument("--dataset", default="mnist", choices=("mnist", "census-income"))
    args = p.parse_args(argv)
    build = mnist_config if args.dataset == "mnist" else census_config
    cfg = build("udp", {"epsilon": 8.0, "clip_norm": 1.0}, rounds=args.rounds, lr=args.lr)
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"dir": args.data_dir})})
    print(median_unclipped_norm(cfg))
    return 0



# --------------------------------------------------------------------------- scales


@dataclasses.dataclass(frozen=True)
class _Scale:
    clients: int
    samples: int
    epsilons: tuple[float, ...]
    grid: tuple[int, ...]  # fixed T values searched for "optimal UDP"
    initial_rounds: int  # T of original UDP, initial T of CRD, T that sets Lei's sigma^0
    #: run seeds of every setting: the claims compare final losses a few thousandths apart, within
    #: run-to-run noise, so reduced and full scale run 3 seeds and judge mean ± SE
    seeds: tuple[int, ...] = (0, 1, 2)


_MNIST_SCALES = {
    "smoke": _Scale(5, 40, (8.0,), (2, 4), 4, (0,)),
    "reduced": _Scale(50, 800, (2.0, 4.0), (50, 100, 200, 300), 200),
    "full": _Scale(50, 800, (4.0, 8.0, 12.0, 16.0, 20.0), (25, 50, 100, 150, 200, 300, 400, 500), 200),
}
_CENSUS_SCALES = {
    "smoke": _Scale(5, 16, (8.0,), (2, 4), 4, (0,)),
    "reduced": _Scale(50, 128, (4.0, 8.0), (10, 25, 50, 100, 200), 200),
    "full": _Scale(50, 128, (2.0, 4.0, 8.0, 16.0), (10, 25, 50, 75, 100, 150, 200, 300), 200),
}


def _k(scale: _Scale, q: float) -> int:
    return max(1, round(q * scale.clients))


def _mnist(algorithm: str, eps: float, rounds: int, sc: _Scale, q: float, *,
           partition: dict[str, Any] | None = None, init_rounds: int | None = None, seed: int = 0,
           **extra: Any) -> RunConfig:
    opts = _opts(eps, MNIST_CLIP, rounds, **extra)
    return mnist_config(algorithm, opts, rounds=init_rounds or rounds, clients=sc.clients, samples=sc.samples,
                        clients_per_round=_k(sc, q), partition=partition, seed=seed)


def _seed_tag(seed: int) -> str:
    return "" if seed == 0 else f" seed={seed}"


# --------------------------------------------------------------------------- reading runs


def _summary(rec: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    res = rec.result or {}
    priv = stored_privacy(rec)
    server = None if priv is None else priv.certificate("server")
    public = None if priv is None else priv.certificate("public")
    head = None if priv is None else priv.headline
    return {
        "rounds": int(res.get("rounds", len(rows))),
        "test_loss": res.get("test_loss"),
        "test_accuracy": res.get("test_accuracy"),
        "claimed": None if priv is None else priv.claimed_max,
        "server": None if server is None else server.epsilon,
        "server_rdp": None if server is None else server.epsilon_rdp,
        "public": None if public is None else public.epsilon,
        "headline": None if head is None else head.epsilon,
        "server_mark": basis_mark(server),
        "public_mark": basis_mark(public),
        "crd_T": [r.get("crd_T") for r in rows if "crd_T" in r],
        "losses": [r.get("test_loss") for r in rows],
        "accs": [r.get("test_accuracy") for r in rows],
        "seconds": sum(float(r.get("seconds", 0.0)) for r in rows),
    }


def _f(x: Any, nd: int = 4) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        if math.isinf(x):
            return "inf"
        return f"{x:.{nd}g}"
    return str(x)


def _eps(s: dict[str, Any], key: str) -> str:
    """A certified ε of a run summary ("server", "server_rdp", "public"), marked when it holds given
    the cohorts drawn (:data:`~dpfl.experiments.recipes.base.GIVEN_COHORTS_MARK`)."""
    return _f(s[key]) + s[key.removesuffix("_rdp") + "_mark"]


def _privacy_table(items: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = ["| run | rounds | test loss | test acc. | claimed ε (000, max over clients) | "
             "certified ε server (best / RDP) | certified ε public | time (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for label, s in items:
        lines.append(
            f"| {label} | {s['rounds']} | {_f(s['test_loss'])} | {_f(s['test_accuracy'])} | {_f(s['claimed'])} | "
            f"{_eps(s, 'server')} / {_eps(s, 'server_rdp')} | {_eps(s, 'public')} | {s['seconds']:.0f} |"
        )
    return lines


def _verdict(ok: bool | None) -> str:
    return "not evaluated" if ok is None else ("**agrees**" if ok else "**disagrees**")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------- T sweeps (Figs. 4-6)


def _sweep_build(kind: str, q: float) -> Callable[[str], list[RecipeRun]]:
    def build(scale: str) -> list[RecipeRun]:
        runs = []
        if kind == "census":
            sc = _CENSUS_SCALES[scale]
            for seed in sc.seeds:
                for eps in sc.epsilons:
                    for t in sc.grid:
                        cfg = census_config("udp", _opts(eps, CENSUS_CLIP, t), rounds=t, clients=sc.clients,
                                            samples=sc.samples, clients_per_round=_k(sc, q), seed=seed)
                        runs.append(RecipeRun(f"udp eps={eps:g} T={t} q={q:g}{_seed_tag(seed)}", cfg,
                                              {"eps": eps, "T": t, "q": q, "seed": seed}))
            return runs
        sc = _MNIST_SCALES[scale]
        for seed in sc.seeds:
            for eps in sc.epsilons:
                for t in sc.grid:
                    runs.append(RecipeRun(f"udp eps={eps:g} T={t}{_seed_tag(seed)}",
                                          _mnist("udp", eps, t, sc, q, seed=seed),
                                          {"eps": eps, "T": t, "q": q, "seed": seed}))
        return runs

    return build


def _est(items: list[dict[str, Any]], metric: str) -> Estimate | None:
    """Mean ± SE of ``metric`` over a setting's seeds (None if no run has it)."""
    vals = [float(s[metric]) for s in items if s.get(metric) is not None]
    return Estimate.of(vals) if vals else None


def _tol(metric: str) -> float:
    return LOSS_TOL if metric == "test_loss" else ACC_TOL


def _verdict_of(v: str | None) -> str:
    """A rule's outcome as the report's word."""
    if v is None:
        return "not evaluated"
    return {REPRODUCED: "**agrees**", NOT_REPRODUCED: "**disagrees**"}.get(v, "**inconclusive**")


def _all_of(verdicts: list[str]) -> str | None:
    """A claim made for every ε (:func:`dpfl.experiments.recipes.verdicts.every`)."""
    return every(verdicts)


_TREND_NOTE = ("Trend (\"rises / falls with x\"): reproduced when the change from the smallest to the largest x "
               "exceeds its margin in the claimed direction and no pair of x moves the other way beyond its own "
               "margin; a pair reversed beyond its margin refutes it; otherwise inconclusive.")


def _rule_note(metric: str) -> str:
    return (f"Rule: a difference counts only beyond max({_tol(metric):g}, 2 SE of the difference), SE over the "
            "seeds of each setting (one seed: the tolerance alone); inside that margin the verdict is "
            "inconclusive, and a tie never passes a strict claim.")


def _sweep_report(metric: str = "test_loss") -> Callable[[ReportContext], str]:
    def report(ctx: ReportContext) -> str:
        tol = _tol(metric)
        curves: dict[tuple[float, float], dict[int, list[dict[str, Any]]]] = {}
        labels: dict[tuple[float, float], list[tuple[str, dict[str, Any]]]] = {}
        for run, rec, rows in ctx.runs:
            key = (run.coords["q"], run.coords["eps"])
            s = _summary(rec, rows)
            curves.setdefault(key, {}).setdefault(run.coords["T"], []).append(s)
            seed = run.coords.get("seed", 0)
            labels.setdefault(key, []).append((f"T = {run.coords['T']}" + (f", seed {seed}" if seed else ""), s))
        plt = _plt()
        qs = sorted({q for q, _ in curves})
        fig, axes = plt.subplots(1, len(qs), figsize=(5.5 * len(qs), 4), squeeze=False)
        lines: list[str] = []
        near: dict[tuple[float, float], list[float]] = {}
        interior: list[str] = []
        interior_text: list[str] = []
        ests: dict[tuple[float, float], dict[int, Estimate]] = {}
        for j, q in enumerate(qs):
            ax = axes[0][j]
            for (qq, eps), by_t in sorted(curves.items()):
                if qq != q:
                    continue
                pts = [(t, e) for t, e in ((t, _est(v, metric)) for t, v in sorted(by_t.items())) if e is not None]
                ests[(q, eps)] = dict(pts)
                ax.errorbar([t for t, _ in pts], [e.mean for _, e in pts],
                            yerr=[0.0 if math.isnan(e.se) else e.se for _, e in pts], marker="o", capsize=3,
                            label=f"ε = {eps:g}")
                verdict, why = interior_minimum(pts, tolerance=tol)
                interior.append(verdict)
                near[(q, eps)] = near_best(pts, tolerance=tol)
                interior_text.append(f"q={q:g} ε={eps:g}: {why}")
                lines += [f"### q = {q:g}, ε = {eps:g}: best T within the margin {near[(q, eps)]} "
                          f"(grid {[t for t, _ in pts]})", "",
                          "Mean ± SE over seeds: " + ", ".join(f"T={t}: {e.text(4)}" for t, e in pts), ""]
                lines += _privacy_table(sorted(labels[(q, eps)], key=lambda x: x[0])) + [""]
            ax.set_xlabel("T (communication rounds)")
            ax.set_ylabel("test loss" if metric == "test_loss" else metric)
            ax.set_title(f"UDP, q = {q:g}")
            ax.legend()
        if ctx.recipe.notes:
            fig.text(0.01, 0.005, ctx.recipe.notes.split(". ")[0][:160], fontsize=7)
        fig.tight_layout()
        fig.savefig(ctx.out_dir / "loss_vs_T.png", dpi=110)
        plt.close(fig)
        moves: list[str] = []
        move_text: list[str] = []
        for q in qs:
            epss = sorted(e for qq, e in near if qq == q)
            if len(epss) < 2:
                continue
            steps = [order_of_sets(near[(q, a)], near[(q, b)]) for a, b in zip(epss, epss[1:], strict=False)]
            overall = order_of_sets(near[(q, epss[0])], near[(q, epss[-1])])
            if "down" in steps or overall in ("down", "same"):
                moves.append(NOT_REPRODUCED)
            elif overall == "up":
                moves.append(REPRODUCED)
            else:
                moves.append(INCONCLUSIVE)
            move_text.append(f"q={q:g}: " + " → ".join(str(near[(q, e)]) for e in epss)
                             + f" (steps: {', '.join(steps)}; first → last: {overall})")
        # "a larger ε gives a lower loss at the same T": at each T of each q, the value against ε is
        # a trend claim (falls with ε for a loss, rises for an accuracy), judged by the one rule
        at_t: list[str] = []
        at_t_text: list[str] = []
        for q in qs:
            epss = sorted(e for qq, e in ests if qq == q)
            ts = sorted(set.intersection(*(set(ests[(q, e)]) for e in epss))) if len(epss) > 1 else []
            for t in ts:
                tr = trend([(e, ests[(q, e)][t]) for e in epss], increasing=metric != "test_loss", tolerance=tol)
                at_t.append(tr.verdict)
                if tr.verdict != REPRODUCED:
                    at_t_text.append(f"q={q:g} T={t}: {tr.verdict} ({tr.reason})")
        n = len(at_t)
        better = _all_of(at_t)
        head = [
            "![loss vs T](loss_vs_T.png)", "",
            "| claim | ours | verdict |", "|---|---|---|",
            f"| test loss against T is convex with an interior optimum | interior minimum resolved in "
            f"{interior.count(REPRODUCED)}/{len(interior)} (q, ε) curves; {'; '.join(interior_text)} | "
            f"{_verdict_of(_all_of(interior))} |",
            f"| the optimal T increases with ε | T within the margin of the best, per ε: "
            f"{'; '.join(move_text) or 'one ε only'} | {_verdict_of(_all_of(moves))} |",
            f"| a larger ε gives a lower loss at the same T | the loss falls with ε (trend rule) at "
            f"{at_t.count(REPRODUCED)}/{n} T, a reversal beyond the margin at {at_t.count(NOT_REPRODUCED)}"
            f"{'; ' + '; '.join(at_t_text) if at_t_text else ''} | {_verdict_of(better)} |",
            "",
            _rule_note(metric) + " Interior optimum: the lowest mean lies inside the grid and is below both grid "
            "edges beyond the margin (agrees); at an edge and below every interior point beyond it (disagrees); "
            "otherwise inconclusive. Optimal T: the set of grid T within the margin of the best; it rises when "
            "every T of the larger ε's set exceeds every T of the smaller's. " + _TREND_NOTE,
            "",
        ]
        head += _majority_note(ctx)
        return "\n".join(head + lines)

    return report


def _majority_note(ctx: ReportContext) -> list[str]:
    """Census-Income: say when every run's accuracy is the majority-class rate (the SVM predicts one class)."""
    accs = [float(a) for a in ((rec.result or {}).get("test_accuracy") for _, rec, _ in ctx.runs) if a is not None]
    if not accs or not all(r.config.data.name == "census-income" for r, _, _ in ctx.runs):
        return []
    if max(accs) - min(accs) <= ACC_TOL and abs(statistics.fmean(accs) - CENSUS_MAJORITY) <= ACC_TOL:
        return [f"**Every run's test accuracy is {min(accs):.4f}–{max(accs):.4f}, the share of the majority class "
                f"in the test set ({CENSUS_MAJORITY:g}):** the SVM predicts (almost) one class at every T and ε, "
                "so the loss differences that pick the best T (a few thousandths) are not differences in what "
                "the model predicts; verdicts on them are within the margin or rest on the hinge loss alone.", ""]
    return []


# --------------------------------------------------------------------------- comparisons (Figs. 7-15)


def _compare_runs(sc: _Scale, q: float, *, partition: dict[str, Any] | None = None,
                  model: str = "mlp", eps_list: Sequence[float] | None = None,
                  betas: Sequence[float] = (0.9,), init_list: Sequence[int] | None = None,
                  with_grid: bool = True, with_lei: bool = True,
                  grid: Sequence[int] | None = None, with_variant: bool = False) -> list[RecipeRun]:
    runs: list[RecipeRun] = []
    inits = list(init_list or [sc.initial_rounds])

    def cfg(alg: str, eps: float, rounds: int, seed: int, init_rounds: int | None = None,
            **extra: Any) -> RunConfig:
        if model == "cnn-000":
            return _cnn_config(alg, eps, rounds, sc, q, init_rounds=init_rounds, seed=seed, **extra)
        return _mnist(alg, eps, rounds, sc, q, partition=partition, init_rounds=init_rounds, seed=seed, **extra)

    for seed in sc.seeds:  # seed outermost: a sweep cut short covers every setting once first
        tag = _seed_tag(seed)
        for eps in eps_list or sc.epsilons:
            ts = sorted(set(grid or sc.grid) | set(inits)) if with_grid else sorted(set(inits))
            for t in ts:
                runs.append(RecipeRun(f"udp eps={eps:g} T={t}{tag}", cfg("udp", eps, t, seed),
                                      {"eps": eps, "alg": "udp", "T": t, "seed": seed}))
            for t0 in inits:
                for beta in betas:
                    runs.append(RecipeRun(
                        f"crd eps={eps:g} T0={t0} beta={beta:g}{tag}",
                        cfg("udp-crd", eps, t0, seed, threshold=ZETA, discount=beta),
                        {"eps": eps, "alg": "udp-crd", "T": t0, "beta": beta, "seed": seed}))
                    if with_variant:  # the loss-rise reading of CRD, side by side (VARIANT_NOTE)
                        runs.append(RecipeRun(
                            f"crd-rise eps={eps:g} T0={t0} beta={beta:g}{tag}",
                            cfg("udp-crd", eps, t0, seed, discount=beta, trigger="train-loss-rise"),
                            {"eps": eps, "alg": "udp-crd-rise", "T": t0, "beta": beta, "seed": seed}))
                if with_lei:
                    runs.append(RecipeRun(f"lei eps={eps:g} T={t0}{tag}", cfg("udp-lei", eps, t0, seed),
                                          {"eps": eps, "alg": "udp-lei", "T": t0, "seed": seed}))
    return runs


def _cnn_config(alg: str, eps: float, rounds: int, sc: _Scale, q: float, *, init_rounds: int | None = None,
                seed: int = 0, **extra: Any) -> RunConfig:
    data = "cifar10" if sc.samples >= 800 else "mnist"  # smoke: MNIST images stand in (no CIFAR offline)
    return _config("000-cnn", alg, _opts(eps, CIFAR_CLIP, rounds, **extra), data=data,
                   model={"name": "cnn-000"},
                   partition={"kind": "iid", "num_clients": sc.clients, "samples_per_client": sc.samples},
                   rounds=init_rounds or rounds, lr=CIFAR_LR, clients_per_round=_k(sc, q), seed=seed)


def _group(ctx: ReportContext) -> dict[float, dict[str, Any]]:
    """ε → {"udp": {T: [summary per seed]}, "crd": {(T0, β): [...]}, "crd_rise": {(T0, β): [...]},
    "lei": {T: [...]}}; each summary carries its run's ``seed``."""
    out: dict[float, dict[str, Any]] = {}
    for run, rec, rows in ctx.runs:
        c = run.coords
        g = out.setdefault(c["eps"], {"udp": {}, "crd": {}, "crd_rise": {}, "lei": {}})
        s = _summary(rec, rows) | {"seed": c.get("seed", 0)}
        if c["alg"] == "udp":
            g["udp"].setdefault(c["T"], []).append(s)
        elif c["alg"] == "udp-crd":
            g["crd"].setdefault((c["T"], c["beta"]), []).append(s)
        elif c["alg"] == "udp-crd-rise":
            g["crd_rise"].setdefault((c["T"], c["beta"]), []).append(s)
        else:
            g["lei"].setdefault(c["T"], []).append(s)
    return out


def _seed_rows(name: str, items: list[dict[str, Any]] | None) -> list[tuple[str, dict[str, Any]]]:
    return [(name + (f", seed {s['seed']}" if s.get("seed") else ""), s) for s in (items or [])]


def _best_key(table: dict[Any, list[dict[str, Any]]], metric: str) -> Any:
    """The setting with the best mean ``metric`` (lowest loss / highest accuracy)."""
    sign = 1.0 if metric == "test_loss" else -1.0
    scored = {k: _est(v, metric) for k, v in table.items()}
    return min((k for k in scored if scored[k] is not None), key=lambda k: sign * scored[k].mean)  # type: ignore[union-attr]


def _compare_report(metric: str, initial: Callable[[str], int]) -> Callable[[ReportContext], str]:
    lower_better = metric == "test_loss"
    tol = _tol(metric)

    def report(ctx: ReportContext) -> str:
        groups = _group(ctx)
        t0 = initial(ctx.scale)
        plt = _plt()
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        epss = sorted(groups)
        series: dict[str, list[Estimate | None]] = {"original UDP": [], "Lei": [], "UDP + CRD": [], "optimal UDP": [],
                                                    VARIANT_LABEL: []}
        lines: list[str] = []
        checks_orig: list[str] = []
        checks_close: list[str] = []
        checks_lei: list[str] = []
        diff_orig: list[str] = []  # CRD minus original UDP / Lei / optimal UDP, per ε
        diff_lei: list[str] = []
        diff_opt: list[str] = []
        variant_lines: list[str] = []  # Alg. 2 against the loss-rise variant (not a paper claim)
        for eps in epss:
            g = groups[eps]
            orig_l = g["udp"].get(t0)
            crd_l = g["crd"].get((t0, 0.9)) or next(iter(g["crd"].values()), None)
            lei_l = g["lei"].get(t0)
            opt_t = _best_key(g["udp"], metric) if len(g["udp"]) > 1 else None  # a search needs > 1 T
            opt_l = g["udp"].get(opt_t) if opt_t is not None else None
            orig, crd, lei, opt = (None if x is None else _est(x, metric) for x in (orig_l, crd_l, lei_l, opt_l))
            for name, e in (("original UDP", orig), ("Lei", lei), ("UDP + CRD", crd), ("optimal UDP", opt)):
                series[name].append(e)
            rise_l = g["crd_rise"].get((t0, 0.9))
            rise = None if rise_l is None else _est(rise_l, metric)
            series[VARIANT_LABEL].append(rise)
            if rise is not None and crd is not None:
                rounds = Estimate.of([float(x["rounds"]) for x in rise_l or []])
                variant_lines.append(f"ε={eps:g}: Alg. 2 {crd.text(4)} vs variant {rise.text(4)} "
                                     f"({compare(crd, rise, tolerance=tol).text()}); the variant ran "
                                     f"{rounds.text(3)} rounds")
            rows = (_seed_rows(f"original UDP (T = {t0})", orig_l) + _seed_rows(f"Lei (σ⁰ from T = {t0})", lei_l)
                    + _seed_rows("UDP + CRD (β = 0.9)", crd_l)
                    + _seed_rows(f"{VARIANT_LABEL} (β = 0.9; certified ∞)", rise_l)
                    + _seed_rows(f"optimal UDP (T = {opt_t}, grid {sorted(g['udp'])})", opt_l))
            means = "; ".join(f"{n}: {e.text(4)}" for n, e in (("original", orig), ("Lei", lei), ("CRD", crd),
                                                                  ("optimal", opt)) if e is not None)
            lines += [f"### ε = {eps:g}", "", f"Mean ± SE of the final {metric.replace('_', ' ')}: {means}", "",
                      *_privacy_table(rows), ""]
            if crd is not None and orig is not None:
                checks_orig.append(claim_better(crd, orig, tolerance=tol, lower_is_better=lower_better))
                c = compare(crd, orig, tolerance=tol)
                diff_orig.append(f"ε={eps:g}: {c.text()}")
            if crd is not None and orig is not None and opt is not None:
                gap = abs(orig.mean - opt.mean)
                close = not_worse(crd, opt, bound=max(0.25 * gap, tol), tolerance=tol, lower_is_better=lower_better)
                checks_close.append(close.verdict)
                diff_opt.append(f"ε={eps:g}: CRD worse by {close.text()}, bound max(25% of the original−optimal "
                                f"gap {gap:.4f}, {tol:g})")
            if crd is not None and lei is not None:
                checks_lei.append(claim_better(crd, lei, tolerance=tol, lower_is_better=lower_better))
                diff_lei.append(f"ε={eps:g}: {compare(crd, lei, tolerance=tol).text()}")
            first = next((s for s in crd_l or [] if not s.get("seed")), None)
            if first is not None:
                ax2.plot(range(1, len(first["losses"]) + 1), first["losses"] if lower_better else first["accs"],
                         label=f"CRD ε = {eps:g}")
        for name, vals in series.items():
            pts = [(e, v) for e, v in zip(epss, vals, strict=True) if v is not None]
            if pts:
                ax1.errorbar([e for e, _ in pts], [v.mean for _, v in pts],
                             yerr=[0.0 if math.isnan(v.se) else v.se for _, v in pts], marker="o", capsize=3,
                             label=name)
        ax1.set_xlabel("ε_p")
        ax1.set_ylabel("final " + ("test loss" if lower_better else "test accuracy"))
        ax1.legend()
        ax2.set_xlabel("round")
        ax2.set_ylabel("test loss" if lower_better else "test accuracy")
        ax2.set_title("CRD runs per round (seed 0)")
        ax2.legend(fontsize=7)
        if ctx.recipe.notes:
            fig.text(0.01, 0.005, ctx.recipe.notes.split(". ")[0][:160], fontsize=7)
        fig.tight_layout()
        fig.savefig(ctx.out_dir / "comparison.png", dpi=110)
        plt.close(fig)
        head = [
            "![comparison](comparison.png)", "",
            "| claim | ours | verdict |", "|---|---|---|",
            f"| CRD beats original UDP | {checks_orig.count(REPRODUCED)}/{len(checks_orig)} ε beyond the margin "
            f"(CRD − original: {'; '.join(diff_orig)}) | {_verdict_of(_all_of(checks_orig))} |",
            f"| CRD comes close to optimal UDP (not worse by more than 25% of the original-to-optimal gap, at least "
            f"the tolerance; one-sided TOST over seeds) | "
            f"{checks_close.count(REPRODUCED)}/{len(checks_close)} ε (CRD − optimal: {'; '.join(diff_opt)}) | "
            f"{_verdict_of(_all_of(checks_close))} |",
            f"| CRD beats Lei's approach | {checks_lei.count(REPRODUCED)}/{len(checks_lei)} ε beyond the margin "
            f"(CRD − Lei: {'; '.join(diff_lei)}) | {_verdict_of(_all_of(checks_lei))} |",
            *([f"| (not a paper claim) CRD as printed (Alg. 2) against the {VARIANT_LABEL} | "
               f"{'; '.join(variant_lines)} | side by side only: the variant is not 000's algorithm and "
               "is not private (certified ε = ∞) |"] if variant_lines else []),
            "",
            *([VARIANT_NOTE, ""] if variant_lines else []),
            f"Metric: final {metric.replace('_', ' ')} ({'lower' if lower_better else 'higher'} is better), mean ± SE "
            "over the seeds; optimal UDP = the grid T with the best mean. " + _rule_note(metric)
            + " Claimed ε: 000's own formula for the noise actually "
            "added (CRD and Lei spend at most ε_p by construction). Certified ε: dp-accounting — for original "
            "UDP and Lei the noise actually added, for CRD the budget fixed before the run that its Rényi filter "
            "enforces (∞ for the loss-rise variant) — server (each upload, no amplification) and public (the weighted "
            "mean, each participant charged at the cohort drawn: a record-level unit is never amplified by "
            "the client sample); privacy unit one record, replace-one, δ = 1e-3.",
            "",
        ]
        return "\n".join(head + lines)

    return report


def _trajectory_report(ctx: ReportContext) -> str:
    """Fig. 10: the trajectory of T under CRD, per ε."""
    groups = _group(ctx)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    ends: list[tuple[float, Estimate]] = []
    lines = ["| ε | initial T | seed | T per round (first, last) | rounds run | claimed ε "
             "| certified ε server / public |",
             "|---|---|---|---|---|---|---|"]
    rise_ends: list[tuple[float, Estimate]] = []
    for eps in sorted(groups):
        for (t0, _beta), items in sorted(groups[eps]["crd"].items()):
            for s in items:
                traj = s["crd_T"]
                if not s.get("seed"):
                    ax.plot(range(1, len(traj) + 1), traj, label=f"ε = {eps:g}")
                lines.append(f"| {eps:g} | {t0} | {s.get('seed', 0)} | {traj[:1]} … {traj[-1:]} | {s['rounds']} | "
                             f"{_f(s['claimed'])} | {_eps(s, 'server')} / {_eps(s, 'public')} |")
            ends.append((eps, Estimate.of([float(s["rounds"]) for s in items])))
        for (t0, _beta), items in sorted(groups[eps]["crd_rise"].items()):
            for s in items:
                traj = s["crd_T"]
                if not s.get("seed"):
                    ax.plot(range(1, len(traj) + 1), traj, linestyle="--", label=f"ε = {eps:g}, variant")
                lines.append(f"| {eps:g} ({VARIANT_LABEL}) | {t0} | {s.get('seed', 0)} | {traj[:1]} … {traj[-1:]} | "
                             f"{s['rounds']} | {_f(s['claimed'])} | {_eps(s, 'server')} / {_eps(s, 'public')} |")
            rise_ends.append((eps, Estimate.of([float(s["rounds"]) for s in items])))
    ax.set_xlabel("round")
    ax.set_ylabel("current T")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "crd_T.png", dpi=110)
    plt.close(fig)
    ends.sort(key=lambda e: e[0])
    verdict = None
    if len(ends) > 1:
        verdict = trend(ends, increasing=True, tolerance=0.5).verdict
    return "\n".join([
        "![T trajectory](crd_T.png)", "",
        "| claim | ours | verdict |", "|---|---|---|",
        f"| a smaller ε ends earlier | rounds run, mean ± SE over seeds: "
        f"{', '.join(f'ε={e:g}: {r.text(4)}' for e, r in ends)} | {_verdict_of(verdict)} |",
        *([f"| (not a paper claim) rounds run by the {VARIANT_LABEL} | "
           f"{', '.join(f'ε={e:g}: {r.text(4)}' for e, r in sorted(rise_ends, key=lambda x: x[0]))} | "
           "side by side only (certified ε = ∞) |"] if rise_ends else []),
        "", "Rule (trend): the rounds run rise with ε when the smallest-to-largest ε change exceeds max(0.5 round, "
        "2 SE) and no pair of ε reverses beyond its own margin; equal counts do not pass.", "",
        *([VARIANT_NOTE, ""] if rise_ends else []),
    ] + lines)


def _concordance(keys: Sequence[float], vals: Sequence[float | Estimate],
                 tolerance: float = 0.0) -> tuple[int, int]:
    """(concordant, discordant) pairs of ``keys`` and ``vals`` (Kendall's counts).

    A pair whose values are within ``max(tolerance, 2 SE)`` of each other (:func:`compare`) counts
    neither way, and so does a tie in the keys.
    """
    conc = disc = 0
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            dk = keys[j] - keys[i]
            o = compare(vals[j], vals[i], tolerance=tolerance).outcome
            if dk == 0 or o == "tie":
                continue
            same = (dk > 0) == (o == "higher")
            conc += same
            disc += not same
    return conc, disc


def _beta_report(which: str) -> Callable[[ReportContext], str]:
    """Figs. 14-15: CRD's final loss / rounds consumed against the discount factor β."""

    def report(ctx: ReportContext) -> str:
        groups = _group(ctx)
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6, 4))
        lines = ["| ε | β | seed | rounds run | test loss | test acc. | claimed ε | certified ε server / public |",
                 "|---|---|---|---|---|---|---|---|"]
        tol = LOSS_TOL if which == "loss" else 0.5
        best_v: list[str] = []
        best_text: list[str] = []
        trend_v: list[str] = []
        trend_text: list[str] = []
        for eps in sorted(groups):
            items = sorted(groups[eps]["crd"].items(), key=lambda kv: kv[0][1])
            pts: list[tuple[float, Estimate]] = []
            for (_t0, b), runs in items:
                for s in runs:
                    lines.append(f"| {eps:g} | {b:g} | {s.get('seed', 0)} | {s['rounds']} | {_f(s['test_loss'])} | "
                                 f"{_f(s['test_accuracy'])} | {_f(s['claimed'])} | {_eps(s, 'server')} / "
                                 f"{_eps(s, 'public')} |")
                vals = [float(s["test_loss"] if which == "loss" else s["rounds"]) for s in runs
                        if (s["test_loss"] if which == "loss" else s["rounds"]) is not None]
                if vals:
                    pts.append((b, Estimate.of(vals)))
            if not pts:
                continue
            ax.errorbar([b for b, _ in pts], [e.mean for _, e in pts],
                        yerr=[0.0 if math.isnan(e.se) else e.se for _, e in pts], marker="o", capsize=3,
                        label=f"ε = {eps:g}")
            means = ", ".join(f"β={b:g}: {e.text(4)}" for b, e in pts)
            # Fig. 14 (loss falls with β) and Fig. 15 (rounds rise with β): the same kind of claim, one rule
            tr = trend(pts, increasing=which == "rounds", tolerance=tol)
            trend_v.append(tr.verdict)
            trend_text.append(f"ε={eps:g}: {means} (β = {pts[0][0]:g} → {pts[-1][0]:g}: {tr.change:+.4g} in the "
                              f"claimed direction vs margin {tr.margin:.3g}; {tr.reason})")
            if which == "rounds":
                continue
            near = near_best(pts, tolerance=tol)
            best_v.append(REPRODUCED if near == [0.8] else NOT_REPRODUCED if 0.8 not in near else INCONCLUSIVE)
            best_text.append(f"ε={eps:g}: β within the margin of the lowest loss: {near}")
        ax.set_xlabel("β")
        ax.set_ylabel("final test loss" if which == "loss" else "rounds run")
        ax.legend()
        fig.tight_layout()
        fig.savefig(ctx.out_dir / f"beta_{which}.png", dpi=110)
        plt.close(fig)
        if which == "rounds":
            claims = [f"| a larger β consumes more rounds | {'; '.join(trend_text)} | "
                      f"{_verdict_of(_all_of(trend_v))} |"]
            rule = ("Rule (trend, as for Fig. 14's loss): the rounds rise with β when the β = 0.5 → 0.9 change exceeds "
                    "max(0.5 round, 2 SE) and no pair of β reverses beyond its own margin; a rise at every step is "
                    "not required (the paper claims more rounds for a larger β, not a step at each β).")
        else:
            claims = [
                f"| a larger β (more careful adjustment of T) gives a lower loss | {'; '.join(trend_text)} | "
                f"{_verdict_of(_all_of(trend_v))} |",
                f"| β = 0.8 gives the lowest loss | {'; '.join(best_text)} | {_verdict_of(_all_of(best_v))} |",
            ]
            rule = (_rule_note("test_loss") + " " + _TREND_NOTE + " Best β: agrees only if β = 0.8 alone is within "
                    "the margin of the lowest loss, disagrees if it is outside it.")
        return "\n".join([f"![beta](beta_{which}.png)", "", "| claim | ours | verdict |",
                          "|---|---|---|", *claims, "", rule,
                          "CRD's discount is triggered by a noisy one-round loss change, so "
                          "single runs are noisy: seeds matter here.", ""] + lines)

    return report


def _init_report(ctx: ReportContext) -> str:
    """Fig. 7: CRD from several initial T; an initial T closer to the optimal fixed T is better.

    The optimal T is the fixed T of original UDP with the best mean loss on the recipe's grid (the same
    search as "optimal UDP" in Figs. 8-9). Two computed checks per ε: the closest initial T gives the
    lowest loss (beyond the margin), and the loss grows with the distance |T0 - T*| (more concordant
    than discordant pairs, pairs inside the margin counted neither way).
    """
    groups = _group(ctx)
    lines = ["| ε | initial T | seed | |T0 − T*| | rounds run | final T | test loss | test acc. | claimed ε | "
             "certified ε server / public |", "|---|---|---|---|---|---|---|---|---|---|"]
    closest_v: list[str] = []
    trend_v: list[str] = []
    trend_text: list[str] = []
    stars: list[str] = []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for eps in sorted(groups):
        g = groups[eps]
        items = sorted(g["crd"].items())
        inits = [t for (t, _), _ in items]
        pts: list[tuple[int, Estimate]] = [(t, e) for t, e in ((t, _est(v, "test_loss")) for (t, _), v in items)
                                           if e is not None]
        if not inits or len(pts) < len(inits):
            continue
        ax.errorbar(inits, [e.mean for _, e in pts], yerr=[0.0 if math.isnan(e.se) else e.se for _, e in pts],
                    marker="o", capsize=3, label=f"CRD ε = {eps:g}")
        if not g["udp"]:
            continue
        opt_t = _best_key(g["udp"], "test_loss")
        ax.axvline(opt_t, ls=":", color=ax.lines[-1].get_color() if ax.lines else None)
        dist = [abs(t - opt_t) for t in inits]
        for ((t0, _), runs), d in zip(items, dist, strict=True):
            for s in runs:
                final_t = s["crd_T"][-1] if s["crd_T"] else None
                lines.append(f"| {eps:g} | {t0} | {s.get('seed', 0)} | {d} | {s['rounds']} | {_f(final_t)} | "
                             f"{_f(s['test_loss'])} | {_f(s['test_accuracy'])} | {_f(s['claimed'])} | "
                             f"{_eps(s, 'server')} / {_eps(s, 'public')} |")
        for s in g["udp"][opt_t]:
            lines.append(f"| {eps:g} | original UDP at the optimal fixed T* = {opt_t} | {s.get('seed', 0)} | "
                         f"| {opt_t} | | "
                         f"{_f(s['test_loss'])} | {_f(s['test_accuracy'])} | {_f(s['claimed'])} | "
                         f"{_eps(s, 'server')} / {_eps(s, 'public')} |")
        near = min(range(len(pts)), key=lambda i: (dist[i], pts[i][1].mean))
        best = min(range(len(pts)), key=lambda i: pts[i][1].mean)
        if best == near:
            others = [pts[i][1] for i in range(len(pts)) if i != near]
            runner_up = min(others, key=lambda e: e.mean) if others else None
            c = compare(pts[near][1], runner_up, tolerance=LOSS_TOL) if runner_up is not None else None
            closest_v.append(INCONCLUSIVE if c is None or c.outcome == "tie" else REPRODUCED)
            cmp_text = "" if c is None else f", vs the next best {c.text()}"
        else:
            c = compare(pts[near][1], pts[best][1], tolerance=LOSS_TOL)
            closest_v.append(NOT_REPRODUCED if c.outcome == "higher" else INCONCLUSIVE)
            cmp_text = f", vs the lowest (T0 = {inits[best]}) {c.text()}"
        stars.append(f"ε={eps:g}: T* = {opt_t} (grid {sorted(g['udp'])}); closest T0 = {inits[near]}: "
                     f"{pts[near][1].text(4)}; lowest mean from T0 = {inits[best]}: {pts[best][1].text(4)}{cmp_text}")
        conc, disc = _concordance(dist, [e for _, e in pts], LOSS_TOL)
        tr = trend(list(zip(dist, [e for _, e in pts], strict=True)), increasing=True, tolerance=LOSS_TOL)
        trend_v.append(tr.verdict)
        trend_text.append(f"ε={eps:g}: {tr.verdict} ({tr.reason}; nearest → farthest {tr.change:+.4f} vs margin "
                          f"{tr.margin:.4f}; {conc} concordant / {disc} discordant pairs beyond the margin)")
    ax.set_xlabel("initial T (dotted: optimal fixed T on the grid)")
    ax.set_ylabel("final test loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "initial_T.png", dpi=110)
    plt.close(fig)
    return "\n".join([
        "![initial T](initial_T.png)", "", "| claim | ours | verdict |", "|---|---|---|",
        f"| the initial T closest to the optimal T gives the lowest loss | {'; '.join(stars)} | "
        f"{_verdict_of(_all_of(closest_v))} |",
        f"| the loss grows with the distance of the initial T from T* | {'; '.join(trend_text)} | "
        f"{_verdict_of(_all_of(trend_v))} |",
        "", "T* is the fixed T of original UDP with the best mean loss on the grid (a coarse search). "
        + _rule_note("test_loss") + " " + _TREND_NOTE, ""] + lines)


# --------------------------------------------------------------------------- the recipes


def _init_T(scale: str) -> int:
    return _MNIST_SCALES[scale].initial_rounds


def _compare_build(q: float, *, eps: dict[str, tuple[float, ...]] | None = None,
                   grid: dict[str, tuple[int, ...]] | None = None, **kw: Any) -> Callable[[str], list[RecipeRun]]:
    """The four methods of Figs. 8-13; ``eps`` / ``grid`` override the scale's ε list / T grid per scale."""

    def build(scale: str) -> list[RecipeRun]:
        sc = _MNIST_SCALES[scale]
        part = kw.get("partition")
        partition = part(sc) if callable(part) else part
        rest = {k: v for k, v in kw.items() if k != "partition"}
        return _compare_runs(sc, q, partition=partition, eps_list=(eps or {}).get(scale),
                             grid=(grid or {}).get(scale), **rest)

    return build


def _noniid(sc: _Scale) -> dict[str, Any]:
    return {"kind": "classes", "num_clients": sc.clients, "classes_per_client": 4, "samples_per_client": sc.samples}


def _unbalanced(sc: _Scale) -> dict[str, Any]:
    if sc.clients >= 5 and sc.samples >= 400:
        sizes = [400, 600, 800, 1000, 1200]
    else:
        sizes = [sc.samples // 2, sc.samples, sc.samples * 3 // 2]
    return {"kind": "groups", "num_clients": sc.clients, "group_sizes": sizes}


_MNIST_NOTE = ("MNIST, MLP 784-256-10, U = 50, |D_i| = 800 at reduced/full scale; η = 0.5, C = 1.12 = median of "
               "unclipped per-sample gradient norms (non-private pilot, not covered by the certified ε). "
               "Reduced scale: the paper's clients, data and initial T = 200, but ε ∈ {2, 4} and the grid T ∈ "
               "{50, 100, 200, 300}; full: ε ∈ {4, 8, 12, 16, 20}, grid T ∈ {25..500}.")

#: Figs. 7, 14, 15 at reduced scale: ε = 2 only (CRD ends soonest there; the CPU was shared with other jobs)
_SHARED_CPU_EPS = {"reduced": (2.0,)}
_BETA_NOTE = (" Figs. 14-15: CRD with β ∈ {0.5, 0.6, 0.7, 0.8, 0.9}, initial T = 200, q = 1; reduced scale runs "
              "ε = 2 only (the CPU was shared with other jobs), full scale every ε.")
#: Figs. 12-13 at reduced scale: ε inside the paper's range {4..20} and a grid cut to fit ~8 min of CPU
_FIG12_13_EPS: dict[str, tuple[float, ...]] = {"reduced": (4.0,)}
_FIG12_13_GRID: dict[str, tuple[int, ...]] = {"reduced": (200,)}
_FIG12_13_NOTE = ("MNIST, MLP 784-256-10, U = K = 50, T = 200 (original UDP, CRD's initial T, Lei's σ⁰), β = 0.9; "
                  "η = 0.5, C = 1.12 = median of unclipped per-sample gradient norms (non-private pilot on IID data, "
                  "not covered by the certified ε). Reduced scale: ε = 4 only (the paper: 4, 8, 12, 16, 20) and no "
                  "search for optimal UDP (grid cut to the original T = 200): the machine was shared and ran at "
                  "≈1–2 s per round instead of 0.3 s, and ε = 8 plus the grid {50..300} would have added "
                  "≈1,500 rounds per figure; "
                  "the paper's claim for these figures is CRD against original UDP and Lei, which the cut does "
                  "not touch; the optimal-UDP row is then not evaluated. Full scale (ε ∈ {4..20}, grid T ∈ {25..500}): "
                  "`dpfl reproduce KEY --scale full --data-dir <data>`.")

VARIANT_LABEL = "CRD, loss-rise variant"
VARIANT_NOTE = (
    "The loss-rise variant (`udp-crd` with `trigger: train-loss-rise`) is a reading of CRD found in public "
    "implementations of 000, not its Alg. 2: T ← ⌈βT⌉ whenever the participants' averaged training loss "
    "rose from the previous round (Alg. 2: T ← ⌊β(T − t)⌋ + t when the server's test loss fell by less "
    "than ζ). It is shown next to Alg. 2, never in its place. Its trigger reads the clients' training "
    "losses, which leave them without noise: every round is an exact release against both observers, "
    "so its certified ε is ∞ (its claimed ε is still 000's formula for the noise added).")

_SWEEP_CLAIM = ("Test loss against T is convex with an interior optimal T (Thm 3); the optimal T increases with "
                "ε_p; a smaller ε_p and a larger T give a worse loss (§5.3). The figure prints no numbers.")
_COMPARE_CLAIM = ("UDP + CRD (β = 0.9) greatly improves on original UDP (fixed T = 200) and Lei's approach and is "
                  "close to optimal UDP (best fixed T by search); at large ε_p it can beat optimal UDP (§5.4). "
                  "The figure prints no numbers.")


# --------------------------------------------------------------------------- Fig. 2: the divergence bound (eq. 15)

#: Fig. 2's settings (§5.1): σ_i = 0.01, λ = 1..100; panels (q, |D_i|, U)
FIG2_SIGMA = 0.01
FIG2_LAMBDAS = tuple(range(1, 101))
FIG2_PANELS = (("a", 0.9, 800, 50), ("b", 0.1, 800, 50), ("c", 0.9, 400, 50), ("d", 0.9, 800, 200))
#: (η, C) of the computation: the paper gives neither for Fig. 2. First: the MNIST recipes' (η = 0.5, C = the
#: measured median clip norm); second: η·C = 0.1, where the assumption λΔℓ²/(2σ_i²) ≪ 1 behind eq. 15 holds up to
#: λ = 100 at both |D_i|
FIG2_SETTINGS = ((MNIST_LR, MNIST_CLIP), (0.1, 1.0))
#: "close": the bound's ln D within a factor of 2 of the real ln D (our reading; ln D is what enters α(λ), eq. 16)
FIG2_CLOSE = 2.0
#: the numbers are exact (no seeds): differences below this are float rounding
FIG2_TOL = 1e-9


def divergence_real(lam: int, q: float, a: float) -> float:
    """ln D_{ν1,ν0} of 000 eq. 14, exact for integer λ: ln Σ_{k=0}^{λ+1} C(λ+1, k)(1−q)^{λ+1−k} q^k e^{k(k−1)a},
    with a = Δℓ²/(2σ_i²)."""
    terms = []
    for k in range(lam + 2):
        if q == 1.0 and k < lam + 1:
            continue
        terms.append(math.lgamma(lam + 2) - math.lgamma(k + 1) - math.lgamma(lam + 2 - k)
                     + ((lam + 1 - k) * math.log1p(-q) if k <= lam else 0.0) + (k * math.log(q) if k else 0.0)
                     + k * (k - 1) * a)
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def divergence_bound(lam: int, q: float, a: float) -> float:
    """ln of eq. 15's bound e^{qλ(λ+1)a} (the first-order form the paper plots and uses in eq. 16)."""
    return q * lam * (lam + 1) * a


def divergence_chain(lam: int, q: float, a: float) -> float:
    """ln of eq. 14's last (proven) bound e^{q(λ+1)(e^{λa} − 1)}, before the approximation of eq. 15."""
    return q * (lam + 1) * math.expm1(lam * a)


def _fig2_build(scale: str) -> list[RecipeRun]:
    del scale
    return []  # computed from eq. 14-15: no training


def _fig2_report(ctx: ReportContext) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lams = FIG2_LAMBDAS
    fig, axes = plt.subplots(1, len(FIG2_PANELS), figsize=(14, 3.6))
    lines = [
        f"σ_i = {FIG2_SIGMA:g}, λ = {lams[0]}..{lams[-1]}, Δℓ = 2ηC/|D_i| (eq. 13), a = Δℓ²/(2σ_i²). "
        "Real: eq. 14 summed exactly (integer λ). Bound: eq. 15, e^{qλ(λ+1)a}. Proven: eq. 14's last line, "
        "e^{q(λ+1)(e^{λa} − 1)}, which eq. 15 approximates to first order in λa. The paper gives neither η nor C "
        "for this figure; two settings are computed (see the module constants `FIG2_SETTINGS`).",
        "",
        r"| setting | panel (q, \|D_i\|, U) | a | λa at λ = 100 | bound / real (ln D) at λ = 1, 10, 100 | "
        "first λ with bound < real | proven ≥ real at every λ | bound ≥ real at every λ | close (ln D within ×2) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    above: dict[tuple[int, str], str] = {}
    close: dict[tuple[int, str], str] = {}
    holds_to: dict[tuple[int, str], int] = {}
    shapes: list[str] = []
    for si, (eta, clip) in enumerate(FIG2_SETTINGS):
        for pi, (name, q, d, u) in enumerate(FIG2_PANELS):
            a = (2 * eta * clip / d) ** 2 / (2 * FIG2_SIGMA**2)
            real = [divergence_real(lam, q, a) for lam in lams]
            bound = [divergence_bound(lam, q, a) for lam in lams]
            chain = [divergence_chain(lam, q, a) for lam in lams]
            above[si, name] = every([claim_better(b, r, tolerance=FIG2_TOL, lower_is_better=False)
                                     for b, r in zip(bound, real, strict=True)]) or INCONCLUSIVE
            proven = every([NOT_REPRODUCED if c < r - FIG2_TOL else REPRODUCED
                            for c, r in zip(chain, real, strict=True)])
            ratios = [b / r for b, r in zip(bound, real, strict=True)]
            close[si, name] = every([in_range(x, 1 / FIG2_CLOSE, FIG2_CLOSE, tolerance=FIG2_TOL)[0]
                                     for x in ratios]) or INCONCLUSIVE
            for curve in (real, bound):
                shapes.append(monotone(list(zip(lams, curve, strict=True)), increasing=True, tolerance=FIG2_TOL)[0])
            fails = [lam for lam, b, r in zip(lams, bound, real, strict=True) if b < r - FIG2_TOL]
            holds_to[si, name] = (fails[0] if fails else lams[-1] + 1) - 1
            picks = ", ".join(f"{ratios[lams.index(x)]:.3g}" for x in (1, 10, 100))
            lines.append(f"| η = {eta:g}, C = {clip:g} | ({name}) {q:g}, {d}, {u} | {a:.3g} | {lams[-1] * a:.3g} | "
                         f"{picks} | {fails[0] if fails else '—'} | {proven} | {above[si, name]} | {close[si, name]} |")
            ax = axes[pi]
            style = "-" if si == 0 else "--"
            ax.plot(lams, real, style, color="C0", label=f"real, ηC = {eta * clip:.3g}")
            ax.plot(lams, bound, style, color="C3", label=f"bound (15), ηC = {eta * clip:.3g}")
            ax.set_title(f"({name}) q = {q:g}, |D_i| = {d}, U = {u}", fontsize=9)
            ax.set_yscale("log")
            ax.set_xlabel("λ")
    axes[0].set_ylabel("ln D_{ν1,ν0}")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "fig2.png", dpi=110)
    plt.close(fig)

    first, second = FIG2_SETTINGS
    valid = {si: every([above[si, p[0]] for p in FIG2_PANELS]) for si in range(len(FIG2_SETTINGS))}
    near = {si: every([close[si, p[0]] for p in FIG2_PANELS]) for si in range(len(FIG2_SETTINGS))}
    larger_d = {si: claim_better(holds_to[si, "a"], holds_to[si, "c"], tolerance=FIG2_TOL, lower_is_better=False)
                for si in range(len(FIG2_SETTINGS))}
    same_u = all(holds_to[si, "a"] == holds_to[si, "d"] and above[si, "a"] == above[si, "d"]
                 and close[si, "a"] == close[si, "d"] for si in range(len(FIG2_SETTINGS)))
    lines += [
        "",
        "![Fig. 2](fig2.png)",
        "",
        "Verdicts (`verdicts.claim_better` per λ and `every` over λ and panels; `in_range` for \"close\"; "
        "`monotone` for the shape; exact numbers, tolerance 1e-9):",
        "",
        f"- **Shape: both curves rise with λ at every step** (every panel, both settings): {every(shapes)}.",
        f"- **\"Our bound is always higher than the real divergence\"**: η = {first[0]:g}, C = {first[1]:g} "
        f"(the MNIST recipes'): **{valid[0]}**; η = {second[0]:g}, C = {second[1]:g}: **{valid[1]}**. The proven "
        "bound of eq. 14 holds everywhere (column \"proven\"); where eq. 15 falls below the real value the "
        "first-order step e^{λa} − 1 ≈ λa fails (λa is not ≪ 1 there), as the paper's own assumption says it may "
        "(it states the bound as a conjecture).",
        f"- **\"Close\"** (our reading: ln D within a factor {FIG2_CLOSE:g} at every λ): η = {first[0]:g}: "
        f"**{near[0]}**; η = {second[0]:g}: **{near[1]}**. At q = 0.1 the bound's ln D is ≈ 1/q times the real one "
        "for small a (the real divergence grows as q²λ(λ+1)a, the bound as qλ(λ+1)a): close on a linear plot of D "
        "only while both are near 1.",
        f"- **\"Holds ... especially for a large enough |D_i|\"** (the bound holds up to a larger λ at |D_i| = 800 "
        f"than at 400, q = 0.9): η = {first[0]:g}: **{larger_d[0]}** (up to λ = {holds_to[0, 'a']} vs "
        f"{holds_to[0, 'c']}); η = {second[0]:g}: **{larger_d[1]}** (up to λ = {holds_to[1, 'a']} vs "
        f"{holds_to[1, 'c']}: both hold over the whole range). At small λa the ratio of the two ln D is ≈ 1/q "
        "whatever |D_i| (column \"bound / real\"): |D_i| moves where the bound stops holding, not how close it is.",
        f"- **U = 200 (panel d)**: not testable as printed — U enters neither eq. 14 nor eq. 15, so panel (d) "
        f"computes {'the same numbers as' if same_u else 'other numbers than'} panel (a); the paper shows a "
        "separate panel without saying how U enters.",
    ]
    return "\n".join(lines)


RECIPES: list[Recipe] = [
    Recipe("000/fig2", "Divergence bound of eq. 15 against its real value (σ_i = 0.01, λ = 1..100)", PAPER,
           "Fig. 2 (§5.1): with σ_i = 0.01 and λ from 1 to 100, \"our bound is close but always higher than the real "
           "divergence\" in (a) q = 0.9, |D_i| = 800, U = 50; the same holds for q = 0.1 (b), |D_i| = 400 (c) and "
           "U = 200 (d): \"the empirical bound always holds and closes under the given conditions, especially for a "
           "large enough |D_i|\"; the paper calls it a conjecture. The figure prints no numbers.",
           _fig2_build, _fig2_report,
           notes="Computed from the paper's formulas (eqs. 13-15), no training and no data: every scale is the same "
                 "computation. The paper gives no η and no C for this figure; Δℓ = 2ηC/|D_i| is computed at the "
                 "MNIST recipes' η = 0.5, C = 1.12 and at η·C = 0.1."),
    Recipe("000/fig4", "SVM test loss vs T for several ε (q = 1 and 0.6), Census-Income stand-in", PAPER,
           _SWEEP_CLAIM + " Fig. 4 uses SVM on IPUMS-US, |D_i| = 128.",
           lambda s: _sweep_build("census", 1.0)(s) + _sweep_build("census", 0.6)(s), _sweep_report(),
           notes="UCI Census-Income (KDD) stands in for IPUMS-US (not available offline): binary income label "
                 "from census attributes, 502 one-hot features; linear SVM (hinge, κ = 1e-3), |D_i| = 128, η = 0.5, "
                 "C = 1.0 (not re-measured by the pilot here)."),
    Recipe("000/fig5", "MLP test loss vs T for several ε, q = 1", PAPER, _SWEEP_CLAIM,
           _sweep_build("mnist", 1.0), _sweep_report(), notes=_MNIST_NOTE),
    Recipe("000/fig6", "MLP test loss vs T for several ε, q = 0.6", PAPER, _SWEEP_CLAIM,
           _sweep_build("mnist", 0.6), _sweep_report(), notes=_MNIST_NOTE),
    Recipe("000/fig7", "CRD (β = 0.9) with several initial T", PAPER,
           "An initial T closer to the optimal T gives a better loss (initial T from 150 to 300).",
           lambda s: _compare_runs(_MNIST_SCALES[s], 1.0, with_lei=False, eps_list=_SHARED_CPU_EPS.get(s),
                                   init_list={"smoke": [2, 4], "reduced": [100, 150, 200, 300],
                                              "full": [150, 200, 250, 300]}[s]),
           _init_report, notes=_MNIST_NOTE + " Fig. 7: CRD (β = 0.9, q = 1) from initial T ∈ {100, 150, 200, 300} "
           "at reduced scale (the paper: 150 to 300; 100 added because our optimal fixed T at ε = 2 is 100), "
           "{150, 200, 250, 300} at full scale; T* = the best fixed T of original UDP on the grid "
           "(150 joins the grid). Reduced scale runs ε = 2 only (the CPU was shared; ε = 4 needs ≈700 more rounds: "
           "`dpfl reproduce 000/fig7 --scale full` runs every ε)."),
    Recipe("000/fig8", "Test loss: original UDP, Lei, UDP + CRD, optimal UDP (q = 1)", PAPER, _COMPARE_CLAIM,
           _compare_build(1.0, with_variant=True), _compare_report("test_loss", _init_T), notes=_MNIST_NOTE),
    Recipe("000/fig8b", "Test loss: original UDP, Lei, UDP + CRD, optimal UDP (q = 0.6)", PAPER, _COMPARE_CLAIM,
           _compare_build(0.6, with_variant=True), _compare_report("test_loss", _init_T),
           notes=_MNIST_NOTE + " Panel (b): K = 30 of U = 50 (q = 0.6)."),
    Recipe("000/fig9", "Test accuracy: original UDP, Lei, UDP + CRD, optimal UDP (q = 1)", PAPER, _COMPARE_CLAIM,
           _compare_build(1.0, with_variant=True), _compare_report("test_accuracy", _init_T), notes=_MNIST_NOTE),
    Recipe("000/fig9b", "Test accuracy: original UDP, Lei, UDP + CRD, optimal UDP (q = 0.6)", PAPER, _COMPARE_CLAIM,
           _compare_build(0.6, with_variant=True), _compare_report("test_accuracy", _init_T),
           notes=_MNIST_NOTE + " Panel (b): K = 30 of U = 50 (q = 0.6); the same runs as 000/fig8b."),
    Recipe("000/fig10b", "Trajectory of T under CRD (β = 0.9), q = 0.6", PAPER,
           "A smaller ε_p ends earlier (CRD discounts T sooner and more).",
           lambda s: [r for r in _compare_build(0.6, with_variant=True)(s) if r.coords["alg"].startswith("udp-crd")],
           _trajectory_report,
           notes=_MNIST_NOTE + " Panel (b): K = 30 of U = 50 (q = 0.6); the CRD runs of 000/fig8b."),
    Recipe("000/fig10", "Trajectory of T under CRD (β = 0.9), q = 1", PAPER,
           "A smaller ε_p ends earlier (CRD discounts T sooner and more).",
           lambda s: [r for r in _compare_build(1.0, with_variant=True)(s) if r.coords["alg"].startswith("udp-crd")],
           _trajectory_report,
           notes=_MNIST_NOTE),
    Recipe("000/fig11", "CNN on CIFAR-10: original UDP, Lei, UDP + CRD, optimal UDP (K = 30)", PAPER,
           _COMPARE_CLAIM + " CNN on CIFAR-10, |D_i| = 800, N = 50, K = 30, T = 200, ε ∈ {4..20}.",
           _compare_build(0.6, model="cnn-000"), _compare_report("test_loss", _init_T),
           notes="Smoke scale runs the one-conv CNN on a few MNIST images (CIFAR-10 is not available offline); "
                 "it proves the pipeline only. Full scale (needs the CIFAR-10 python batches under "
                 "<data>/cifar10/cifar-10-batches-py; `dpfl data fetch cifar10 --dir <data>` downloads them, "
                 "or `--from` "
                 "a folder holding cifar-10-python.tar.gz): "
                 "`dpfl reproduce 000/fig11 --scale full --data-dir <data>` (ε ∈ {4..20}, "
                 "grid T ∈ {25..500}, K = 30 of 50, |D_i| = 800, CRD β = 0.9 from T = 200, Lei). "
                 "`--scale reduced` runs the same on CIFAR-10 with ε ∈ {2, 4} and grid T ∈ {50, 100, 200, 300}."),
    Recipe("000/fig12", "Non-IID (4 digits per client): test accuracy of the four methods", PAPER,
           "UDP + CRD greatly improves the test accuracy over original UDP and Lei's approach (non-IID).",
           _compare_build(1.0, partition=_noniid, eps=_FIG12_13_EPS, grid=_FIG12_13_GRID),
           _compare_report("test_accuracy", _init_T), notes=_FIG12_13_NOTE + " Non-IID: each client holds 4 digit "
           "classes in equal amounts (`partition: classes`, 4 per client). With one full-batch local step and K = U "
           "(000's setting), the |D_i|-weighted mean of the local models is exactly one clipped full-batch GD step on "
           "the union of the clients' data, so the split into 4 digits per client cannot change the aggregate update "
           "(only which 40,000 records are used); the noise is the same too (equal |D_i|). Non-IID data matter "
           "here only with local iterations > 1 or K < U."),
    Recipe("000/fig13", "Unbalanced (400..1200 samples per client): test accuracy of the four methods", PAPER,
           "UDP + CRD greatly improves the test accuracy over original UDP and Lei's approach (unbalanced).",
           _compare_build(1.0, partition=_unbalanced, eps=_FIG12_13_EPS, grid=_FIG12_13_GRID),
           _compare_report("test_accuracy", _init_T), notes=_FIG12_13_NOTE + " Unbalanced: 5 groups of 10 clients "
           "with 400, 600, 800, 1000, 1200 samples (`partition: groups`); p_i = |D_i|/|D|. **This repeats Figs. 8–9 at "
           "ε = 4**: with one full-batch local step and K = U (000's setting) the |D_i|-weighted mean of the local "
           "models is one clipped full-batch GD step on the union of the clients' data (40,000 records here as "
           "there), and the aggregate noise Σ p_i·σ_i·z_i has p_i·σ_i = (|D_i|/|D|)·c·2ηC/|D_i| = c·2ηC/|D| for "
           "every client (000 eqs. 2, 10, 13), the same as for equal |D_i| — so the unbalanced split changes "
           "neither the update nor the noise, and our Fig. 13 numbers equal Figs. 8–9's at ε = 4 up to which "
           "records are drawn. It tests what the paper tests only with local iterations > 1 or K < U."),
    Recipe("000/fig14", "CRD test loss for β from 0.5 to 0.9", PAPER,
           "A larger β adjusts T more carefully and helps; β = 0.8 gives the best loss.",
           lambda s: [r for r in _compare_runs(_MNIST_SCALES[s], 1.0, betas=(0.5, 0.6, 0.7, 0.8, 0.9),
                                               eps_list=_SHARED_CPU_EPS.get(s), with_grid=False, with_lei=False)
                      if r.coords["alg"] == "udp-crd"],
           _beta_report("loss"), notes=_MNIST_NOTE + _BETA_NOTE),
    Recipe("000/fig15", "Rounds consumed by CRD for β from 0.5 to 0.9", PAPER,
           "A larger β consumes more communication rounds.",
           lambda s: [r for r in _compare_runs(_MNIST_SCALES[s], 1.0, betas=(0.5, 0.6, 0.7, 0.8, 0.9),
                                               eps_list=_SHARED_CPU_EPS.get(s), with_grid=False, with_lei=False)
                      if r.coords["alg"] == "udp-crd"],
           _beta_report("rounds"), notes=_MNIST_NOTE + _BETA_NOTE),
]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
