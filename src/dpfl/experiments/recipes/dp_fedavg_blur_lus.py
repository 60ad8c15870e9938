"""Reproductions of 004 (DP-FedAvg with BLUR and LUS): Table 1, Table 3, Figs. 1–4.

The paper (§6) trains a 2-layer CNN (~1.2M parameters) and ResNet-18 on EMNIST (3,400 writers,
natural split) and CIFAR-10 (Dirichlet α split) for T = 1000 / 300 rounds with p = 0.04 / 0.06,
batch 64 / 50, local lr 0.03 / 0.1, Q = 30, η_g = 1, δ = 1/N, S = 0.03 / 0.3, λ = 0.4, c = 0.7.
EMNIST/FEMNIST and full CIFAR-10 are not available on this machine, and the CNN costs ≈ 72 MFLOP
per sample and step (seconds per round on 2 CPU cores), so the scales are:

* ``smoke`` — seconds, for tests: 60 MNIST clients, 3 rounds, a 16-unit MLP.
* ``reduced`` — what runs here, **a stand-in, not the paper's setting**: real MNIST split over
  1,000 clients by Dirichlet(α = 0.5) labels (≈ 60 samples each; EMNIST's writers hold ≈ 200),
  an MLP 784-64-10 (50,890 parameters) instead of the CNN, p = 0.04 (≈ 40 clients per round, as in
  the paper), Q = 10 steps of batch 32 at lr 0.05, S = 0.3, T = 40 rounds, δ = 1/N = 1e-3.
  Table 1 alone runs another stand-in, where DP costs accuracy (on this one DP-FedAvg barely moves
  across ε = 2..8): Fashion-MNIST over 200 clients, p = 0.05 (≈ 10 per round), the 21,840-weight
  CNN ``cnn-mnist-small``, 3 seeds, and a non-private reference (σ = 0) that measures the cost.
* ``full`` — the paper's settings for users with the data and a GPU (``device: cuda``): FEMNIST
  (LEAF JSON, natural writer split) with the 2-layer CNN for Tables 1 and 3 and Figs. 1–2, and
  CIFAR-10 (Dirichlet α = 1) with ResNet-18 (GroupNorm) for Figs. 3–4. Not run here.

σ is calibrated per run so that the paper's own ε (moments accountant, Poisson sampling, δ, the
run's T) equals the table's ε (``target_epsilon``); every report shows that claimed ε next to the
certified ε per observer (public: the broadcast models, amplified by the secret Poisson sample;
server: each upload, σ/sqrt(|P_t|) per client in the paper's local-noise variant).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

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
    compare,
    every,
    in_range,
)

PAPER = "004_32e0c8f847edac12.txt"
EPSILONS = (2.0, 4.0, 6.0, 8.0)
LAMBDA, SPARSITY = 0.4, 0.7  # the paper's defaults
OURS, BASE = "DP-FedAvg+BLUR+LUS", "DP-FedAvg"
#: Table 1's non-private reference: DP-FedAvg with σ = 0 (not a row of the paper's table)
NONPRIVATE = "non-private (σ = 0)"

_SCALES: dict[str, dict[str, Any]] = {
    "smoke": {
        "data": {"name": "mnist", "dir": "data"},
        "partition": {"kind": "dirichlet", "num_clients": 60, "alpha": 0.5, "min_size": 5},
        "model": {"name": "mlp", "options": {"hidden": 16}},
        "rounds": 3, "sample_rate": 0.2, "steps": 2, "batch": 16, "lr": 0.05, "clip": 0.3,
        "delta": 1e-3, "seeds": (0,), "eval_every": 3, "device": "cpu",
    },
    "reduced": {
        "data": {"name": "mnist", "dir": "data"},
        "partition": {"kind": "dirichlet", "num_clients": 1000, "alpha": 0.5, "min_size": 10},
        "model": {"name": "mlp", "options": {"hidden": 64}},
        "rounds": 40, "sample_rate": 0.04, "steps": 10, "batch": 32, "lr": 0.05, "clip": 0.3,
        "delta": 1e-3, "seeds": (0, 1), "eval_every": 10, "device": "cpu",
    },
    "full": {
        "data": {"name": "femnist", "dir": "data"},
        "partition": {"kind": "natural", "num_clients": 3400, "min_size": 1},
        "model": {"name": "cnn2", "options": {"variant": "reddi"}},
        "rounds": 1000, "sample_rate": 0.04, "steps": 30, "batch": 64, "lr": 0.03, "clip": 0.03,
        "delta": 1.0 / 3400, "seeds": (0, 1, 2), "eval_every": 10, "device": "cuda",
    },
}

# CIFAR-10 (Figs. 3–4 of the paper) at full scale.
_CIFAR_FULL: dict[str, Any] = {
    "data": {"name": "cifar10", "dir": "data"},
    "partition": {"kind": "dirichlet", "num_clients": 1000, "alpha": 1.0, "min_size": 10},
    "model": {"name": "resnet18", "options": {}},
    "rounds": 300, "sample_rate": 0.06, "steps": 30, "batch": 50, "lr": 0.1, "clip": 0.3,
    "delta": 1e-3, "seeds": (0, 1, 2), "eval_every": 10, "device": "cuda",
}


#: Table 1 at reduced scale: a stand-in where DP costs accuracy. On the shared MNIST/MLP stand-in
#: (1,000 clients, ≈ 40 per round) the per-coordinate noise on the mean update, σS/(pN), is so small
#: that DP-FedAvg moved less than a point across ε = 2..8, leaving BLUR+LUS nothing to recover. Here:
#: Fashion-MNIST, the 21,840-weight two-convolution CNN, 200 clients (Dirichlet 0.5, ≈ 300 samples
#: each) and p = 0.05 (≈ 10 per round, δ = 1/N): σS/(pN) is ≈ 4x larger at every ε.
_TABLE1_REDUCED: dict[str, Any] = {
    "data": {"name": "fashion-mnist", "dir": "data"},
    "partition": {"kind": "dirichlet", "num_clients": 200, "alpha": 0.5, "min_size": 10},
    "model": {"name": "cnn-mnist-small", "options": {}},
    "rounds": 40, "sample_rate": 0.05, "steps": 10, "batch": 32, "lr": 0.05, "clip": 0.3,
    "delta": 1.0 / 200, "seeds": (0, 1, 2), "eval_every": 10, "device": "cpu",
}


def _settings(scale: str, cifar: bool = False, table1: bool = False) -> dict[str, Any]:
    if table1 and scale == "reduced":
        return dict(_TABLE1_REDUCED)
    return dict(_CIFAR_FULL) if (cifar and scale == "full") else dict(_SCALES[scale])


def _config(
    scale: str,
    method: str,
    epsilon: float | None,
    seed: int,
    *,
    blur_lambda: float | None = None,
    sparsity: float | None = None,
    clip: float | None = None,
    steps: int | None = None,
    sample_rate: float | None = None,
    cifar: bool = False,
    table1: bool = False,
    name: str = "004",
) -> RunConfig:
    """One run's config. ``epsilon=None``: the non-private reference — DP-FedAvg with σ = 0 (the same
    clipping, sampling and fixed denominator, no noise)."""
    s = _settings(scale, cifar, table1)
    options: dict[str, Any] = {"clip_norm": clip if clip is not None else s["clip"], "server_lr": 1.0}
    if epsilon is None:
        options["noise_multiplier"] = 0.0
    else:
        options["target_epsilon"] = epsilon
    algo = "dp-fedavg-blur-lus" if method == OURS else "dp-fedavg"
    if blur_lambda is not None:
        options["blur_lambda"] = blur_lambda
    if sparsity is not None:
        options["lus_sparsity"] = sparsity
    return parse_config({
        "name": name,
        "seed": seed,
        "rounds": s["rounds"],
        "data": s["data"],
        "partition": s["partition"],
        "model": s["model"],
        "algorithm": {"name": algo, "options": options},
        "sampling": {"kind": "poisson", "sample_rate": sample_rate if sample_rate is not None else s["sample_rate"]},
        "privacy": {"delta": s["delta"], "pld_every": 0},
        "local": {"lr": s["lr"], "steps": steps if steps is not None else s["steps"], "batch_size": s["batch"]},
        "eval_every": s["eval_every"],
        "checkpoint_every": 25,
        "device": s["device"],
    })


# --------------------------------------------------------------------------- builds


def _build_table1(scale: str) -> list[RecipeRun]:
    """Per seed (outermost: a sweep run in pieces finishes one seed first): the non-private reference,
    then DP-FedAvg and ours at every ε."""
    s = _settings(scale, table1=True)
    eps_grid = EPSILONS if scale != "smoke" else (2.0, 8.0)
    runs = []
    for seed in s["seeds"]:
        runs.append(RecipeRun(f"{NONPRIVATE} seed={seed}",
                              _config(scale, BASE, None, seed, table1=True, name="004-table1-nonprivate"),
                              {"method": NONPRIVATE, "epsilon": math.inf, "seed": seed}))
        runs += [RecipeRun(f"{m} ε={e:g} seed={seed}",
                           _config(scale, m, e, seed, table1=True, name=f"004-table1-{m}-{e:g}"),
                           {"method": m, "epsilon": e, "seed": seed})
                 for e in eps_grid for m in (BASE, OURS)]
    return runs


def _build_table3(scale: str) -> list[RecipeRun]:
    grid = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9) if scale != "smoke" else (0.0, 0.5, 0.9)
    runs = []
    for seed in _settings(scale)["seeds"][:1 if scale == "smoke" else None]:
        for c in grid:
            for blur in (False, True):
                method = "DP-FedAvg+BLUR+LUS" if blur else "DP-FedAvg+LUS"
                cfg = _config(scale, BASE, 6.0, seed, blur_lambda=LAMBDA if blur else 0.0, sparsity=c,
                              name=f"004-table3-{method}-{c:g}")
                runs.append(RecipeRun(f"{method} c={c:g} seed={seed}", cfg,
                                      {"method": method, "sparsity": c, "seed": seed}))
    return runs


def _build_fig1(scale: str) -> list[RecipeRun]:
    grid = (0.0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8) if scale != "smoke" else (0.0, 0.4, 0.8)
    seed = _settings(scale)["seeds"][0]
    return [RecipeRun(f"BLUR λ={lam:g}", _config(scale, BASE, 6.0, seed, blur_lambda=lam, name=f"004-fig1-{lam:g}"),
                      {"lambda": lam, "seed": seed}) for lam in grid]


def _build_fig2(scale: str) -> list[RecipeRun]:
    seed = _settings(scale)["seeds"][0]
    return [RecipeRun(m, _config(scale, m, 6.0, seed, clip=0.1, name=f"004-fig2-{m}"), {"method": m, "seed": seed})
            for m in (BASE, OURS)]


def _build_fig3(scale: str) -> list[RecipeRun]:
    grid = (10, 20, 30, 40) if scale != "smoke" else (1, 2, 4)
    seed = _settings(scale)["seeds"][0]
    return [RecipeRun(f"{m} Q={q}", _config(scale, m, 6.0, seed, steps=q, cifar=True, name=f"004-fig3-{m}-{q}"),
                      {"method": m, "Q": q, "seed": seed}) for q in grid for m in (BASE, OURS)]


def _build_fig4(scale: str) -> list[RecipeRun]:
    grid = (0.02, 0.04, 0.06, 0.08, 0.1) if scale != "smoke" else (0.1, 0.2, 0.3)
    seed = _settings(scale)["seeds"][0]
    return [RecipeRun(f"{m} p={p:g}", _config(scale, m, 6.0, seed, sample_rate=p, cifar=True,
                                              name=f"004-fig4-{m}-{p:g}"),
                      {"method": m, "p": p, "seed": seed}) for p in grid for m in (BASE, OURS)]


# --------------------------------------------------------------------------- reading runs


def _final(rows: Sequence[dict[str, Any]], key: str = "test_accuracy") -> float:
    for r in reversed(rows):
        if key in r and isinstance(r[key], (int, float)):
            return float(r[key])
    return math.nan


def _privacy(rec: Any) -> dict[str, Any]:
    """Claimed ε (NaN when absent) and certified ε per observer (inf when absent) of a stored run,
    with the certificates behind them (``public_cert``, ``server_cert``)."""
    priv = stored_privacy(rec)
    certs = {obs: None if priv is None else priv.certificate(obs) for obs in ("public", "server")}
    claimed = None if priv is None else priv.claimed_max
    return {"claimed": math.nan if claimed is None else claimed,
            **{obs: math.inf if c is None else c.epsilon for obs, c in certs.items()},
            **{f"{obs}_cert": c for obs, c in certs.items()}}


def _mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return math.nan, math.nan
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.2f}"


def _fmt_eps(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def _seconds(rows: Sequence[dict[str, Any]]) -> float:
    return sum(float(r.get("seconds", 0.0)) for r in rows)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: accuracy differences within max(ACC_TOL, 2 SE over seeds) decide nothing (0.5 points: below the
#: paper's smallest claimed gain, +0.28 for LUS alone, is not resolvable here)
ACC_TOL = 0.005
#: 004 Table 1's claim: BLUR+LUS gains 3–5 accuracy points over DP-FedAvg (as a fraction)
GAIN_RANGE = (0.03, 0.05)


def _privacy_table(ctx: ReportContext) -> list[str]:
    """Claimed and certified ε per observer, one row per run."""
    lines = ["| run | claimed ε (004, moments accountant) | certified ε public | certified ε server |",
             "|---|---|---|---|"]
    for run, rec, _ in ctx.runs:
        p = _privacy(rec)
        lines.append(f"| {run.label} | {_fmt_eps(p['claimed'])} | "
                     f"{_fmt_eps(p['public'])}{basis_mark(p['public_cert'])} | "
                     f"{_fmt_eps(p['server'])}{basis_mark(p['server_cert'])} |")
    return lines + ["", _EPS_NOTE]


_EPS_NOTE = ("Claimed ε = 004's moments accountant for the σ actually used; certified ε = dp-accounting (RDP, "
             "add/remove one client, δ as in the notes) for the noise actually added, per observer: the public sees "
             "the broadcast models (the paper's claim covers only these), the server sees each upload with "
             "multiplier σ/sqrt(|P_t|) and knows whom it sampled.")


def _outcomes(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[int, int, int]:
    """(a above b beyond max(ACC_TOL, 2 SE), a below b beyond it, inside it) over (a, b) seed lists."""
    above = below = tie = 0
    for a, b in pairs:
        a2, b2 = [x for x in a if not math.isnan(x)], [x for x in b if not math.isnan(x)]
        if not a2 or not b2:
            tie += 1
            continue
        o = compare(Estimate.of(a2), Estimate.of(b2), tolerance=ACC_TOL).outcome
        above += o == "higher"
        below += o == "lower"
        tie += o == "tie"
    return above, below, tie


def _claim_word(above: int, below: int, n: int) -> str:
    """A claim "better at every value" (:func:`dpfl.experiments.recipes.verdicts.every` over the per-value
    outcomes of :func:`compare`): holds if all above; fails if any below; else inconclusive."""
    outs = [REPRODUCED] * above + [NOT_REPRODUCED] * below + [INCONCLUSIVE] * (n - above - below)
    return f"**{every(outs) or INCONCLUSIVE}**"


_RULE = (f"Rule: a difference counts only beyond max({100 * ACC_TOL:g} points, 2 SE over seeds; one seed: the "
         "tolerance alone); inside it the comparison is inconclusive.")


def _group(ctx: ReportContext, *keys: str) -> dict[tuple[Any, ...], list[tuple[Any, Any, list[dict[str, Any]]]]]:
    out: dict[tuple[Any, ...], list[tuple[Any, Any, list[dict[str, Any]]]]] = {}
    for run, rec, rows in ctx.runs:
        out.setdefault(tuple(run.coords[k] for k in keys), []).append((run, rec, rows))
    return out


# --------------------------------------------------------------------------- reports


_TABLE1_PAPER = {  # CNN-2-Layers on EMNIST (004 Table 1): (DP-FedAvg, ours), % accuracy, mean ± sd
    2.0: ((69.65, 0.74), (74.48, 0.52)),
    4.0: ((72.32, 0.81), (75.85, 0.61)),
    6.0: ((74.12, 0.75), (77.48, 0.54)),
    8.0: ((75.36, 0.64), (78.09, 0.46)),
}


def _paired(a: Sequence[tuple[Any, Any, list[dict[str, Any]]]],
            b: Sequence[tuple[Any, Any, list[dict[str, Any]]]]) -> list[float]:
    """Final accuracy of ``a`` minus that of ``b``, per seed both hold (non-finite ones dropped)."""
    by_seed = {run.coords["seed"]: _final(rows) for run, _, rows in b}
    diffs = [_final(rows) - by_seed[run.coords["seed"]] for run, _, rows in a if run.coords["seed"] in by_seed]
    return [d for d in diffs if math.isfinite(d)]


def _est_text(e: Estimate | None) -> str:
    """``+1.23 ± 0.45 (SE)`` in points; ``—`` without any seed."""
    if e is None:
        return "—"
    return f"{100 * e.mean:+.2f}" + ("" if math.isnan(e.se) else f" ± {100 * e.se:.2f} (SE)")


def _report_table1(ctx: ReportContext) -> str:
    reference = [x for x in ctx.runs if x[0].coords["method"] == NONPRIVATE]
    groups: dict[tuple[Any, ...], list[tuple[Any, Any, list[dict[str, Any]]]]] = {}
    for run, rec, rows in ctx.runs:
        if run.coords["method"] != NONPRIVATE:
            groups.setdefault((run.coords["epsilon"], run.coords["method"]), []).append((run, rec, rows))
    ref_m, ref_sd = _mean_sd([_final(rows) for _, _, rows in reference])
    lines = [
        f"Non-private reference (DP-FedAvg with σ = 0: the same clipping, sampling and schedule, no noise): "
        f"{_pct(ref_m)} ± {_pct(ref_sd)} % (mean ± sd, {len(reference)} seed(s)). DP cost = DP-FedAvg − "
        "non-private, paired by seed (mean ± SE).",
        "",
        "| ε (claimed target) | DP-FedAvg acc % | +BLUR+LUS acc % | gain (points) | paper gain | DP cost (points) | "
        "claimed ε | certified ε public | certified ε server | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    gains: list[tuple[float, Estimate]] = []
    costs: list[tuple[float, Estimate]] = []
    xs, base_y, ours_y = [], [], []
    for eps in sorted({k[0] for k in groups}):
        base = groups.get((eps, BASE), [])
        ours = groups.get((eps, OURS), [])
        b_acc = [_final(rows) for _, _, rows in base]
        o_acc = [_final(rows) for _, _, rows in ours]
        bm, bs = _mean_sd(b_acc)
        om, osd = _mean_sd(o_acc)
        # paired by seed: gain per seed, its mean and standard error
        by_seed_b = {run.coords["seed"]: _final(rows) for run, _, rows in base}
        diffs = [(_final(rows) - by_seed_b[run.coords["seed"]]) for run, _, rows in ours
                 if run.coords["seed"] in by_seed_b]
        gm, gsd = _mean_sd(diffs)
        se = gsd / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
        if diffs:
            gains.append((eps, Estimate.of(diffs)))
        cost_diffs = _paired(base, reference)
        cost = Estimate.of(cost_diffs) if cost_diffs else None
        if cost is not None:
            costs.append((eps, cost))
        privs = [_privacy(rec) for _, rec, _ in base + ours]
        paper = _TABLE1_PAPER.get(eps)
        paper_gain = f"{paper[1][0] - paper[0][0]:+.2f}" if paper else "—"
        lines.append(
            f"| {eps:g} | {_pct(bm)} ± {_pct(bs)} | {_pct(om)} ± {_pct(osd)} | "
            f"{100 * gm:+.2f}" + (f" ± {100 * se:.2f} (SE)" if not math.isnan(se) else "") + f" | {paper_gain} | "
            f"{_est_text(cost)} | {_fmt_eps(max(p['claimed'] for p in privs))} | "
            f"{_fmt_eps(max(p['public'] for p in privs))}"
            f"{basis_mark(*(p['public_cert'] for p in privs))} | {_fmt_eps(max(p['server'] for p in privs))}"
            f"{basis_mark(*(p['server_cert'] for p in privs))} | {len(diffs)} |"
        )
        xs.append(eps)
        base_y.append(100 * bm)
        ours_y.append(100 * om)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(xs, base_y, "o-", label=f"{BASE} (dpfl, {ctx.scale})")
    ax.plot(xs, ours_y, "s-", label=f"{OURS} (dpfl, {ctx.scale})")
    if not math.isnan(ref_m):
        ax.axhline(100 * ref_m, color="k", lw=1, ls=":", label=f"{NONPRIVATE} (dpfl, {ctx.scale})")
    paper_eps = [e for e in xs if e in _TABLE1_PAPER]
    if paper_eps:
        ax.plot(paper_eps, [_TABLE1_PAPER[e][0][0] for e in paper_eps], "o--", alpha=0.5,
                label=f"{BASE} (paper, EMNIST CNN)")
        ax.plot(paper_eps, [_TABLE1_PAPER[e][1][0] for e in paper_eps], "s--", alpha=0.5, label=f"{OURS} (paper)")
    ax.set_xlabel("ε (claimed, moments accountant)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "table1.png", dpi=120)
    plt.close(fig)
    # the paper's claim: a gain of 3–5 points at every ε (its own gains: +4.83, +3.53, +3.36, +2.73); the
    # gain per seed is paired, its mean and SE over seeds judged against the range with the shared margin
    ranges = [(e, *in_range(g, GAIN_RANGE[0], GAIN_RANGE[1], tolerance=ACC_TOL)) for e, g in gains]
    signs = [(e, compare(g, 0.0, tolerance=ACC_TOL)) for e, g in gains]
    positive = [e for e, c in signs if c.outcome == "higher"]
    negative = [e for e, c in signs if c.outcome == "lower"]
    overall = every([v for _, v, _ in ranges]) or INCONCLUSIVE
    paper_check = [(e, in_range(_TABLE1_PAPER[e][1][0] / 100 - _TABLE1_PAPER[e][0][0] / 100, GAIN_RANGE[0],
                                GAIN_RANGE[1], tolerance=ACC_TOL)[0]) for e in sorted(_TABLE1_PAPER)]
    word = {REPRODUCED: "reproduced", NOT_REPRODUCED: "not reproduced"}.get(overall, "inconclusive")
    # the premise of the stand-in: DP costs accuracy (DP-FedAvg below the non-private reference beyond
    # the margin), and a larger ε gives part of it back (the cost at the largest ε above that at the smallest)
    costly = [e for e, c in costs if compare(c, 0.0, tolerance=ACC_TOL).outcome == "lower"]
    premise = (f"DP costs accuracy (DP-FedAvg below the non-private reference beyond the margin) at {len(costly)} "
               f"of {len(costs)} ε: " + "; ".join(f"ε = {e:g}: {_est_text(c)}" for e, c in costs) + ". ")
    if len(costs) > 1:
        lo, hi = costs[0], costs[-1]
        back = compare(hi[1], lo[1], tolerance=ACC_TOL)
        premise += (f"ε = {hi[0]:g} against ε = {lo[0]:g}: {100 * back.diff:+.2f} points of the cost given back → "
                    + {"higher": "a larger ε recovers part of it", "lower": "a larger ε costs more",
                       "tie": "no difference beyond the margin"}[back.outcome] + ". ")
    elif not costs:
        premise = "No non-private reference among the runs: the cost of DP is not measured. "
    verdict = [
        "",
        "![table 1](table1.png)",
        "",
        premise + "BLUR+LUS has room to gain only where this cost is large.",
        "",
        f"Verdict (computed from the rows above): the gain of BLUR+LUS (paired by seed, mean ± SE) against the "
        f"paper's {100 * GAIN_RANGE[0]:g}–{100 * GAIN_RANGE[1]:g} point range, with the margin max("
        f"{100 * ACC_TOL:g} points, 2 SE): " + "; ".join(f"ε = {e:g}: {100 * g.mean:+.2f} → {v}"
                                                       for (e, v, _), (_, g) in zip(ranges, gains, strict=True))
        + f". Positive beyond the margin at {len(positive)} of {len(gains)}, negative beyond it at {len(negative)} of "
        f"{len(gains)}, inside it at {len(gains) - len(positive) - len(negative)}. The same rule on the paper's own "
        "gains: " + ", ".join(f"ε = {e:g}: {v}" for e, v in paper_check) + ". "
        + (f"**Claim {word} at {ctx.scale} scale**" + ("." if overall == REPRODUCED else
                                                          " (see the notes: stand-in data and model, fewer rounds).")),
        "",
        "Claimed ε = 004's moments accountant for the σ actually used; certified ε = dp-accounting "
        "(RDP, add/remove one client) for the noise actually added, per observer. The server sees "
        "each upload with multiplier σ/sqrt(|P_t|) and knows whom it sampled, so its ε is far above "
        "the paper's claim — the claim covers only the broadcast models.",
    ]
    return "\n".join(lines + verdict)


def _report_table3(ctx: ReportContext) -> str:
    groups = _group(ctx, "method", "sparsity")
    paper = {  # 004 Table 3 (EMNIST ResNet-18): accuracy %
        ("DP-FedAvg+LUS", 0.0): 76.24, ("DP-FedAvg+LUS", 0.1): 76.52, ("DP-FedAvg+LUS", 0.3): 77.28,
        ("DP-FedAvg+LUS", 0.5): 77.75, ("DP-FedAvg+LUS", 0.7): 77.54, ("DP-FedAvg+LUS", 0.9): 77.39,
        ("DP-FedAvg+BLUR+LUS", 0.1): 78.28, ("DP-FedAvg+BLUR+LUS", 0.3): 79.26,
        ("DP-FedAvg+BLUR+LUS", 0.5): 79.97, ("DP-FedAvg+BLUR+LUS", 0.7): 80.32, ("DP-FedAvg+BLUR+LUS", 0.9): 80.17,
    }
    base = _mean_sd([_final(r) for _, _, r in groups.get(("DP-FedAvg+LUS", 0.0), [])])[0]
    lines = ["| method | sparsity c | acc % | gain vs DP-FedAvg (points) | paper acc % |", "|---|---|---|---|---|"]
    base_accs = [_final(r) for _, _, r in groups.get(("DP-FedAvg+LUS", 0.0), [])]
    lus_pairs, syn_pairs = [], []
    for (method, c), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        accs = [_final(r) for _, _, r in runs]
        acc = _mean_sd(accs)[0]
        label = "DP-FedAvg" if (method == "DP-FedAvg+LUS" and c == 0) else ("DP-FedAvg+BLUR" if c == 0 else method)
        pv = paper.get((method, c))
        lines.append(f"| {label} | {c:g} | {_pct(acc)} | {100 * (acc - base):+.2f} | {pv if pv else '—'} |")
        if method == "DP-FedAvg+LUS" and c > 0:
            lus_pairs.append((accs, base_accs))
        if method == "DP-FedAvg+BLUR+LUS" and c > 0:
            syn_pairs.append((accs, [_final(r) for _, _, r in groups.get(("DP-FedAvg+LUS", c), [])]))
    la, lb, lt = _outcomes(lus_pairs)
    sa, sb, st = _outcomes(syn_pairs)
    return "\n".join(lines + [
        "",
        f"Verdict: LUS alone beats DP-FedAvg beyond the margin at {la} of {len(lus_pairs)} sparsities, below it at "
        f"{lb}, inside it at {lt} (paper: all, +0.28 to +1.51) → {_claim_word(la, lb, len(lus_pairs))}; adding BLUR "
        f"beats LUS alone at {sa} of {len(syn_pairs)}, below at {sb}, inside at {st} (paper: all) → "
        f"{_claim_word(sa, sb, len(syn_pairs))}. {len({r.coords['seed'] for r, _, _ in ctx.runs})} seed(s) per cell.",
        "", _RULE, "", *_privacy_table(ctx),
    ])


def _report_curves(ctx: ReportContext, coord: str, name: str, title: str) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    finals = []
    for run, _, rows in ctx.runs:
        pts = [(r["round"] + 1 if "round" in r else i + 1, r["test_accuracy"]) for i, r in enumerate(rows)
               if "test_accuracy" in r]
        if pts:
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker=".", label=run.label)
        finals.append((run.coords[coord], _final(rows)))
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(ctx.out_dir / f"{name}.png", dpi=120)
    plt.close(fig)
    base = dict(finals).get(0.0, math.nan)
    lines = [f"| {coord} | final acc % |", "|---|---|"] + [f"| {c:g} | {_pct(a)} |" for c, a in finals]
    above, below, tie = _outcomes([([a], [base]) for c, a in finals if c > 0])
    n = sum(1 for c, _ in finals if c > 0)
    return "\n".join(lines + [
        "", f"![{name}]({name}.png)", "",
        f"Verdict: BLUR (λ > 0) ends above λ = 0 beyond the margin at {above} of {n} values, below at {below}, "
        f"inside at {tie} → {_claim_word(above, below, n)} (paper: all λ speed up convergence and improve "
        "accuracy; one seed here).", "", _RULE, "", *_privacy_table(ctx),
    ])


def _report_fig1(ctx: ReportContext) -> str:
    return _report_curves(ctx, "lambda", "fig1", "DP-FedAvg + BLUR, ε = 6 (λ = 0: plain DP-FedAvg)")


def _report_fig2(ctx: ReportContext) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5), sharey=True)
    lines = ["| method | median pre-clip norm | mean sd of norms per round | fraction above S | clip S |",
             "|---|---|---|---|---|"]
    summary = {}
    for ax, (run, rec, rows) in zip(axes, ctx.runs, strict=False):
        clip = float(rec.config["algorithm"]["options"]["clip_norm"])
        allnorms: list[float] = []
        sds: list[float] = []
        for i, r in enumerate(rows):
            norms = r.get("update_norms") or []
            if norms:
                ax.scatter(norms, [i + 1] * len(norms), s=3, alpha=0.4)
                allnorms += norms
                if len(norms) > 1:
                    sds.append(statistics.stdev(norms))
        ax.axvline(clip, color="k", lw=1, ls="--")
        ax.set_title(run.label, fontsize=9)
        ax.set_xlabel("update norm before clipping")
        med = statistics.median(allnorms) if allnorms else math.nan
        frac = sum(n > clip for n in allnorms) / len(allnorms) if allnorms else math.nan
        sd = statistics.fmean(sds) if sds else math.nan
        summary[run.coords["method"]] = (med, sd, frac)
        lines.append(f"| {run.label} | {med:.4g} | {sd:.4g} | {frac:.2f} | {clip:g} |")
    axes[0].set_ylabel("round")
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "fig2.png", dpi=120)
    plt.close(fig)
    b, o = summary.get(BASE), summary.get(OURS)
    verdict = "n/a"
    if b and o:
        verdict = (f"ours has {'smaller' if o[0] < b[0] else 'larger'} median norms ({o[0]:.3g} vs {b[0]:.3g}), "
                   f"{'less' if o[1] < b[1] else 'more'} spread per round ({o[1]:.3g} vs {b[1]:.3g}) and "
                   f"{o[2]:.0%} vs {b[2]:.0%} of updates above S — the paper claims smaller norms, mostly below "
                   "S, and less variance.")
    return "\n".join(lines + ["", "![fig2](fig2.png)", "", f"Verdict: {verdict}", "", *_privacy_table(ctx)])


def _report_sweep(ctx: ReportContext, coord: str, name: str, xlabel: str) -> str:
    groups = _group(ctx, coord, "method")
    xs = sorted({k[0] for k in groups})
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    lines = [f"| {coord} | {BASE} acc % | {OURS} acc % |", "|---|---|---|"]
    series: dict[str, list[float]] = {BASE: [], OURS: []}
    pairs = []
    for x in xs:
        per_seed = {m: [_final(r) for _, _, r in groups.get((x, m), [])] for m in (BASE, OURS)}
        pairs.append((per_seed[OURS], per_seed[BASE]))
        vals = {m: _mean_sd(per_seed[m])[0] for m in (BASE, OURS)}
        for m in series:
            series[m].append(vals[m])
        lines.append(f"| {x:g} | {_pct(vals[BASE])} | {_pct(vals[OURS])} |")
    for m, ys in series.items():
        ax.plot(xs, [100 * y for y in ys], "o-", label=m)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.out_dir / f"{name}.png", dpi=120)
    plt.close(fig)
    wins, losses, ties = _outcomes(pairs)

    def spread(ys: list[float]) -> float:
        ys = [y for y in ys if not math.isnan(y)]
        return (max(ys) - min(ys)) if ys else math.nan

    return "\n".join(lines + [
        "", f"![{name}]({name}.png)", "",
        f"Verdict: ours above DP-FedAvg beyond the margin at {wins} of {len(xs)} values, below at {losses}, inside "
        f"at {ties} → {_claim_word(wins, losses, len(xs))}; spread across the sweep "
        f"{100 * spread(series[OURS]):.2f} points (ours) vs {100 * spread(series[BASE]):.2f} (DP-FedAvg) — the paper "
        "claims ours is more robust (smaller spread) and better throughout.", "", _RULE, "", *_privacy_table(ctx),
    ])


def _report_fig3(ctx: ReportContext) -> str:
    return _report_sweep(ctx, "Q", "fig3", "local steps Q")


def _report_fig4(ctx: ReportContext) -> str:
    return _report_sweep(ctx, "p", "fig4", "client sampling probability p")


_NOTES = (
    "Reduced scale is a **stand-in**, not the paper's setting: real MNIST over 1,000 clients by a "
    "Dirichlet(0.5) label split (EMNIST/FEMNIST is not available offline), an MLP 784-64-10 instead "
    "of the 1.2M-parameter CNN (≈ 72 MFLOP per sample-step: too slow on 2 shared CPU cores), T = 40 "
    "rounds instead of 1000, Q = 10 steps of batch 32, lr 0.05, S = 0.3, p = 0.04, δ = 1/N. Smoke "
    "scale: 60 clients, 3 rounds — a wiring check, its numbers mean nothing. Figs. 3–4 are CIFAR-10 "
    "experiments in the paper; below full scale they run on the same MNIST stand-in. Full scale: "
    "FEMNIST natural split + CNN (T = 1000) or CIFAR-10 Dirichlet(1) + ResNet-18 (T = 300) with "
    "`device: cuda` — `dpfl reproduce 004/<key> --scale full --data-dir DIR` (needs the data and a GPU). "
    "σ is calibrated per run so that 004's claimed ε after T rounds equals the target."
)


_NOTES_TABLE1 = (
    "Reduced scale is a **stand-in**, not the paper's setting, and differs from 004's other reduced "
    "recipes: it was chosen (by a one-seed pilot) so that **DP costs accuracy**. On the shared MNIST/MLP "
    "stand-in (1,000 clients, ≈ 40 per round) DP-FedAvg moved by under a point from ε = 2 to ε = 8, so "
    "BLUR+LUS had nothing to recover. Here: Fashion-MNIST (EMNIST/FEMNIST is not available offline; the "
    "real EMNIST/FEMNIST rows are not run) over 200 clients by a Dirichlet(0.5) label split (≈ 300 "
    "samples each), the 21,840-weight two-convolution CNN (`cnn-mnist-small`) instead of the "
    "1.2M-parameter CNN-2-Layers (≈ 72 MFLOP per sample-step: too slow on 2 shared CPU cores), p = 0.05 "
    "(≈ 10 clients per round), T = 40 rounds instead of 1000, Q = 10 steps of batch 32, lr 0.05, "
    "S = 0.3, δ = 1/N = 0.005, λ = 0.4 and c = 0.7 as in the paper, 3 seeds. The smaller cohort puts more "
    "noise on the mean update (σS/(pN) per coordinate), so the measured cost of DP — the 'DP cost' "
    "column, DP-FedAvg against a non-private reference (σ = 0, same clipping and schedule) — is the room "
    "BLUR+LUS has to gain. Not run: the ResNet-18 rows of Table 1 (at no scale: ≈ 11M weights on CPU); "
    "the AE-DPFL column (not implemented in dpfl: a private voting mechanism that needs unlabeled "
    "public data on the server); the DDGauss column (the distributed discrete Gaussian with secure "
    "aggregation, not implemented; dpfl's secure sum with distributed Skellam noise — "
    "`privacy.secure_aggregation` with dp-fedavg's `secure_sum` — shares DDGauss's pipeline of "
    "conditional randomized rounding, optional Hadamard rotation and a modular sum, and could serve as "
    "a stand-in for it, but its noise is Skellam, not the discrete Gaussian, so it would be a different "
    "baseline and is not run here). Smoke scale: 60 MNIST clients, 3 rounds, an MLP — a wiring check, "
    "its numbers mean nothing. Full scale: FEMNIST natural split + CNN-2-Layers (T = 1000) with "
    "`device: cuda` — `dpfl reproduce 004/table1 --scale full --data-dir DIR` (needs the data and a "
    "GPU). σ is calibrated per run so that 004's claimed ε after T rounds equals the target."
)


RECIPES = [
    Recipe("004/table1", "Accuracy vs ε: DP-FedAvg vs DP-FedAvg+BLUR+LUS (λ = 0.4, c = 0.7)", PAPER,
           "Table 1 (EMNIST, CNN-2-Layers): DP-FedAvg 69.65 / 72.32 / 74.12 / 75.36 %, ours 74.48 / 75.85 / "
           "77.48 / 78.09 % at ε = 2 / 4 / 6 / 8 (± 0.46–0.81 sd); \"using BLUR and LUS can "
           "improve the accuracy of DP-FedAvg by 3%–4% and 4%–5% for CNN-2-Layers and ResNet-18\".",
           _build_table1, _report_table1, _NOTES_TABLE1),
    Recipe("004/table3", "Sparsity sweep: DP-FedAvg+LUS and DP-FedAvg+BLUR+LUS at ε = 6", PAPER,
           "Table 3 (EMNIST, ResNet-18): LUS alone +0.28 to +1.51 points over DP-FedAvg (76.24 %), "
           "BLUR+LUS +2.04 to +4.08 (best at c = 0.7); \"using LUS consistently improves the accuracy and is "
           "synergistic with BLUR\".", _build_table3, _report_table3, _NOTES),
    Recipe("004/fig1", "BLUR λ sweep (accuracy over rounds), ε = 6", PAPER,
           "Fig. 1 (EMNIST, ResNet-18, ε = 6): λ ∈ {0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8}; \"using BLUR "
           "consistently speeds up the convergence and improves the test accuracy of DP-FedAvg\".",
           _build_fig1, _report_fig1, _NOTES),
    Recipe("004/fig2", "Distribution of update norms before clipping, per round (S = 0.1)", PAPER,
           "Fig. 2: with S = 0.1 for both, ours has norms mostly below S and much less variance than "
           "DP-FedAvg.", _build_fig2, _report_fig2, _NOTES),
    Recipe("004/fig3", "Local steps Q sweep", PAPER,
           "Fig. 3 (CIFAR-10): ours is robust to Q while DP-FedAvg degrades at large Q (e.g. Q = 40).",
           _build_fig3, _report_fig3, _NOTES),
    Recipe("004/fig4", "Client sampling probability p sweep", PAPER,
           "Fig. 4 (CIFAR-10): BLUR+LUS makes DP-FedAvg more robust to the sampling probability p.",
           _build_fig4, _report_fig4, _NOTES),
]
