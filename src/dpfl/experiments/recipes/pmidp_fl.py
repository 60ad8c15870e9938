"""Reproductions of 002 (MI-DP, PMIDP-FL): Figs. 3–10 on MNIST, and the CIFAR-10 part.

Paper settings (002 §VI): MLP on MNIST, IID, SGD lr 0.01, 5 local epochs, batch 64, T = 100,
N = 100, C = 10, every client in every round. Where the paper is silent dpfl chooses, and each
report says so: δ = 1e-5 for the certified ε, ε = 10 nats in Figs. 5–6, 300 samples per client in
the N sweep (so N = 200 uses all 60,000), η_c = 0 for the PMIDP-vs-basic grid (budgets and
weights only; one extra run with η_c = 0.1 shows the adaptive threshold), the 1-conv-layer CNN
(``cnn-000``) on CIFAR-10.

Every report lists, per run, the claimed ε-MI-DP (nats, per round, as the paper states it) next to
the certified (ε, δ) per observer (server, public) composed over the rounds run; PMIDP runs also
get each client's certified ε as the run stored it (``PrivacySummary.client_epsilons_rdp``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpfl.config import parse_config
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
    equivalent,
    every,
    interior_optimum,
    not_worse,
    trend,
)

DELTA = 1e-5
PAPER = "002_2503fd7671e29121.txt"
EPSILONS = (5.0, 10.0, 20.0)
N_VALUES_FULL = tuple(range(20, 201, 20))
C_VALUES_FULL = (2.5, 5.0, 7.5, 10.0, 12.5, 15.0, 17.5, 20.0)
#: reduced scale (CPU budget): every other N of the paper's grid, C doubling from 2.5 to 20 (ends kept)
N_VALUES_REDUCED = (20, 60, 100, 140, 200)
C_VALUES_REDUCED = (2.5, 5.0, 10.0, 20.0)
ROUNDS_FIG5_6_REDUCED = 10
GRID_SIGMA = (0.0, 5.0, 10.0, 15.0)  # Fig. 7 / 10: μ_ε = 20
GRID_MU = (5.0, 10.0, 20.0)  # Fig. 8 / 9: σ_ε = 10


# --------------------------------------------------------------------------- configs


def _scale_settings(scale: str, rounds_reduced: int) -> dict[str, Any]:
    if scale == "smoke":
        return {"rounds": 2, "clients": 10, "spc": 30, "epochs": 1}
    if scale == "reduced":
        return {"rounds": rounds_reduced, "clients": 100, "spc": None, "epochs": 5}
    return {"rounds": 100, "clients": 100, "spc": None, "epochs": 5}


def _config(name: str, algorithm: str, options: dict[str, Any], *, rounds: int, clients: int,
            spc: int | None, epochs: int, data: str = "mnist", model: str = "mlp", seed: int = 0) -> Any:
    return parse_config({
        "name": name,
        "seed": seed,
        "rounds": rounds,
        "data": {"name": data, "dir": "data"},
        "partition": {"kind": "iid", "num_clients": clients, "samples_per_client": spc},
        "model": {"name": model},
        "algorithm": {"name": algorithm, "options": options},
        "sampling": {"kind": "all"},
        "privacy": {"delta": DELTA},
        "local": {"lr": 0.01, "epochs": epochs, "batch_size": 64},
        "checkpoint_every": 5,
    })


def _seed_label(label: str, seed: int) -> str:
    """A run's label; seed 0 keeps the label of the one-seed recipes (and so their records)."""
    return label + (f" seed={seed}" if seed else "")


def _loss_curve_runs(scale: str, data: str, model: str, rounds_reduced: int,
                     seeds: tuple[int, ...] = (0,)) -> list[RecipeRun]:
    s = _scale_settings(scale, rounds_reduced)
    common = {k: s[k] for k in ("rounds", "clients", "spc", "epochs")} | {"data": data, "model": model}
    runs = []
    for seed in seeds:  # seed outermost: a sweep continued in pieces finishes one seed first
        runs.append(RecipeRun(_seed_label("non-private", seed),
                              _config(f"002-{data}-fedavg", "fedavg", {}, **common, seed=seed),
                              {"side": "none", "epsilon": math.inf, "seed": seed}))
        for side in ("client", "server"):
            for eps in EPSILONS:
                cfg = _config(f"002-{data}-midp-{side}-eps{eps:g}", f"midp-{side}",
                              {"epsilon": eps, "clip_norm": 10.0}, **common, seed=seed)
                runs.append(RecipeRun(_seed_label(f"{side} ε={eps:g}", seed), cfg,
                                      {"side": side, "epsilon": eps, "seed": seed}))
    return runs


#: seeds of Figs. 3–4 (MNIST): Theorem 2's equal utility, the early-rounds equality and the "approaches the
#: benchmark" bound are equivalence / non-inferiority tests with seeds as replications, which one seed per
#: setting cannot pass or fail (reduced, one seed: inconclusive)
FIG3_4_SEEDS = {"smoke": (0,), "reduced": (0, 1, 2), "full": (0, 1, 2)}


def _build_fig3_4(scale: str) -> list[RecipeRun]:
    return _loss_curve_runs(scale, "mnist", "mlp", rounds_reduced=12, seeds=FIG3_4_SEEDS[scale])


def _build_cifar(scale: str) -> list[RecipeRun]:
    runs = _loss_curve_runs(scale, "cifar10", "cnn-000", rounds_reduced=10)
    if scale == "smoke":  # the tiny CIFAR-format folder of the smoke run holds 100 images
        runs = [RecipeRun(r.label, r.config.model_copy(update={
            "partition": r.config.partition.model_copy(update={"num_clients": 5, "samples_per_client": 20}),
            "rounds": 1}), r.coords) for r in runs if r.coords["epsilon"] in (5.0, math.inf)]
    return runs


#: reduced Figs. 5–6 (CPU budget: an N = 100 run of 10 rounds × 5 epochs costs ≈ 45 s here): both schemes
#: over the whole reduced N grid (Theorem 2's equal utility is checked at every N), the server-side scheme
#: at C = 10 only in Fig. 6 (its C = 10 point is Fig. 5's N = 100 run).
SERVER_N_REDUCED = N_VALUES_REDUCED


#: seeds of Fig. 5 (both sides): Theorem 2's equal accuracy is an equivalence test with seeds as replications,
#: which one seed per side cannot pass or fail (reduced, one seed: inconclusive at every N)
FIG5_SEEDS = {"smoke": (0,), "reduced": (0, 1, 2), "full": (0, 1, 2)}


def _build_fig5(scale: str) -> list[RecipeRun]:
    values = N_VALUES_FULL if scale == "full" else N_VALUES_REDUCED
    s = _scale_settings(scale, rounds_reduced=ROUNDS_FIG5_6_REDUCED)
    spc = 20 if scale == "smoke" else 300
    runs = []
    for seed in FIG5_SEEDS[scale]:
        for side in ("client", "server"):
            for n in values:
                if scale == "reduced" and side == "server" and n not in SERVER_N_REDUCED:
                    continue
                cfg = _config(f"002-fig5-{side}-N{n}", f"midp-{side}", {"epsilon": 10.0, "clip_norm": 10.0},
                              rounds=s["rounds"], clients=n, spc=spc, epochs=s["epochs"], seed=seed)
                runs.append(RecipeRun(f"{side} N={n}" + (f" seed={seed}" if seed else ""), cfg,
                                      {"side": side, "x": n, "seed": seed}))
    return runs


#: seeds of Fig. 6's client-side C sweep: its claim (an interior best C) rests on differences of about
#: one accuracy point between neighbouring C (reduced, one seed: 56.3 / 57.4 / 45.8 / 20.8%), within
#: run-to-run noise, so reduced and full scale run 3 seeds there and judge mean ± SE
FIG6_SEEDS = {"smoke": (0,), "reduced": (0, 1, 2), "full": (0, 1, 2)}


def _build_fig6(scale: str) -> list[RecipeRun]:
    values = C_VALUES_FULL if scale == "full" else C_VALUES_REDUCED
    s = _scale_settings(scale, rounds_reduced=ROUNDS_FIG5_6_REDUCED)
    spc = 300 if scale == "reduced" else s["spc"]
    runs = []
    for seed in FIG6_SEEDS[scale]:
        for side in ("client", "server"):
            if side == "server" and seed != 0:
                continue  # the server side is run for Theorem 2 only, on seed 0
            for c in values:
                if scale == "reduced" and side == "server" and c != 10.0:
                    continue
                name = f"002-fig6-{side}-C{c:g}"
                if scale == "reduced" and c == 10.0:
                    name = f"002-fig5-{side}-N100"  # the same run as Fig. 5's N = 100 point (same config)
                cfg = _config(name, f"midp-{side}", {"epsilon": 10.0, "clip_norm": c},
                              rounds=s["rounds"], clients=s["clients"], spc=spc, epochs=s["epochs"], seed=seed)
                runs.append(RecipeRun(f"{side} C={c:g}" + (f" seed={seed}" if seed else ""), cfg,
                                      {"side": side, "x": c, "seed": seed}))
    return runs


def _grid(scale: str) -> list[tuple[float, float]]:
    if scale == "smoke":
        return [(5.0, 10.0), (20.0, 0.0), (20.0, 15.0)]
    pairs = [(20.0, s) for s in GRID_SIGMA] + [(m, 10.0) for m in GRID_MU if m != 20.0]
    return sorted(set(pairs))


#: seeds of Figs. 7–10 (each seed draws its own budgets ε_k, the same for both schemes): Fig. 7's "not
#: significantly affected by σ_ε" is an equivalence test with seeds as replications (one seed: inconclusive),
#: and Figs. 8–10's differences are judged against 2 SE over seeds. The adaptive-threshold run (no verdict)
#: stays on seed 0.
FIG7_10_SEEDS = {"smoke": (0,), "reduced": (0, 1, 2), "full": (0, 1, 2)}


def _build_fig7_10(scale: str) -> list[RecipeRun]:
    s = _scale_settings(scale, rounds_reduced=5)
    common = {k: s[k] for k in ("rounds", "clients", "spc", "epochs")}
    runs = []
    for seed in FIG7_10_SEEDS[scale]:
        for mu, sd in _grid(scale):
            budget = {"epsilon_mean": mu, "epsilon_std": sd, "clip_norm": 10.0}
            for algo in ("pmidp-fl", "midp-client"):
                cfg = _config(f"002-fig7-10-{algo}-mu{mu:g}-sd{sd:g}", algo, budget, **common, seed=seed)
                runs.append(RecipeRun(_seed_label(f"{algo} μ={mu:g} σ={sd:g}", seed), cfg,
                                      {"algo": algo, "mu": mu, "sd": sd, "seed": seed}))
        if seed == 0:
            cfg = _config("002-fig7-10-pmidp-adaptive-mu20-sd10", "pmidp-fl",
                          {"epsilon_mean": 20.0, "epsilon_std": 10.0, "clip_norm": 10.0, "clip_lr": 0.1}, **common)
            runs.append(RecipeRun("pmidp-fl η_c=0.1 μ=20 σ=10", cfg,
                                  {"algo": "pmidp-adaptive", "mu": 20.0, "sd": 10.0, "seed": 0}))
    return runs


# --------------------------------------------------------------------------- report helpers


def _final(rec: Any, rows: list[dict[str, Any]]) -> dict[str, float]:
    res = rec.result or {}
    return {"acc": float(res.get("test_accuracy", float("nan"))),
            "loss": float(res.get("test_loss", float("nan"))),
            "rounds": int(res.get("rounds", len(rows))),
            "seconds": float(sum(r.get("seconds", 0.0) for r in rows))}


def _epsilons(rec: Any) -> dict[str, Any]:
    """Claimed (nats, per round) and certified (ε at δ, per observer) of a stored run; ``*_mark``:
    the mark of a certified figure that holds given the cohorts drawn."""
    priv = stored_privacy(rec)
    if priv is None:
        return {"claimed": None, "server": None, "public": None, "delta": None, "server_mark": "",
                "public_mark": ""}
    server, public = priv.certificate("server"), priv.certificate("public")
    return {"claimed": priv.claimed_max,
            "server": None if server is None else server.epsilon,
            "public": None if public is None else public.epsilon,
            "delta": priv.delta,
            "server_mark": basis_mark(server), "public_mark": basis_mark(public)}


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "—"
    x = float(x)
    if math.isinf(x):
        return "∞"
    if math.isnan(x):
        return "nan"
    return f"{x:.{digits}g}"


def _eps_cells(rec: Any) -> str:
    e = _epsilons(rec)
    return (f"{_fmt(e['claimed'])} | {_fmt(e['server'])}{e['server_mark']} | "
            f"{_fmt(e['public'])}{e['public_mark']}")


EPS_HEADER = "claimed ε-MI-DP (nats/round) | certified ε server | certified ε public"


def _verdict(ok: bool | None) -> str:
    return "inconclusive" if ok is None else ("**holds**" if ok else "**does not hold**")


def _le(value: float, limit: float) -> str:
    """The relation a verdict line prints between a measured value and its limit."""
    return "≤" if value <= limit else ">"


def _judge(scale: str, ok: bool | None) -> str:
    """A verdict; smoke runs are pipeline checks, so they report what was measured and decide nothing."""
    if scale == "smoke" and ok is not None:
        return f"inconclusive at smoke scale (measured: {'holds' if ok else 'does not hold'})"
    return _verdict(ok)


#: accuracy differences within max(ACC_TOL, 2 SE over seeds) decide nothing; final-loss steps within
#: LOSS_TOL neither; chance level of MNIST's 10 classes and how far above it a point must be
ACC_TOL = 0.02
LOSS_TOL = 0.01
#: Theorem 2's "the accuracy ... is the same" client vs server side: equal within this bound (TOST)
THM2_BOUND = 0.02
#: Fig. 7's "not significantly affected by σ_ε": each σ_ε equal to σ_ε = 0 within this bound (TOST)
FIG7_BOUND = 0.03
CHANCE = 0.1
CHANCE_TOL = 0.03


def _rule_verdict(scale: str, v: str) -> str:
    """A verdicts-module outcome in this report's words (smoke decides nothing)."""
    word = {REPRODUCED: "holds", NOT_REPRODUCED: "does not hold"}.get(v, "inconclusive")
    if scale == "smoke":
        return f"inconclusive at smoke scale (measured: {word})"
    return f"**{word}**" if word != "inconclusive" else "**inconclusive**"


def _tail(rows: list[dict[str, Any]], key: str) -> tuple[float, float, int]:
    """(mean, standard error, count) of ``key`` over the last half of the rounds."""
    vals = [float(r[key]) for r in rows if key in r]
    vals = vals[len(vals) // 2:] if len(vals) > 1 else vals
    if not vals:
        return float("nan"), float("nan"), 0
    se = float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else 0.0
    return float(np.mean(vals)), se, len(vals)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def stored_client_epsilons(rec: Any, observer: str) -> dict[int, float]:
    """Per-client certified ε (RDP) against ``observer`` from the run's own ledger, as stored with
    its result (``inf`` where a release was exact, e.g. adaptive thresholds)."""
    priv = stored_privacy(rec)
    table = None if priv is None else priv.client_epsilons_rdp
    return dict((table or {}).get(observer) or {})


# --------------------------------------------------------------------------- reports


def _mean_curve(group: list[tuple[Any, Any, list[dict[str, Any]]]], key: str) -> tuple[list[int], list[float]]:
    """Rounds (1-based) and the mean of ``key`` over the seeds of one setting, up to the shortest run."""
    n = min((len(rows) for _, _, rows in group), default=0)
    rounds = [int(r["round"]) + 1 for r in group[0][2][:n]] if n else []
    vals = [float(np.nanmean([float(rows[i].get(key, float("nan"))) for _, _, rows in group])) for i in range(n)]
    return rounds, vals


def _report_loss_curves(ctx: ReportContext) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    # (side, ε) → its runs, one per seed; the non-private benchmark is side "none"
    by_side: dict[str, dict[float, list[tuple[Any, Any, list[dict[str, Any]]]]]] = {"client": {}, "server": {}}
    base: list[tuple[Any, Any, list[dict[str, Any]]]] = []
    for run, rec, rows in ctx.runs:
        if run.coords["side"] == "none":
            base.append((run, rec, rows))
        elif rows:
            by_side[run.coords["side"]].setdefault(run.coords["epsilon"], []).append((run, rec, rows))
    base = [b for b in base if b[2]]
    n_seeds = len({int(run.coords.get("seed", 0)) for run, _, _ in ctx.runs})
    for ax, side, fig_no in ((axes[0], "client", 3), (axes[1], "server", 4)):
        if base:
            ax.plot(*_mean_curve(base, "test_loss"), "k-", label="non-private")
        for eps, group in sorted(by_side[side].items()):
            ax.plot(*_mean_curve(group, "test_loss"), marker=".", label=f"ε = {eps:g}")
        ax.set_title(f"Fig. {fig_no}: {side}-side noise" + (f" (mean of {n_seeds} seeds)" if n_seeds > 1 else ""))
        ax.set_xlabel("round")
        ax.legend()
    axes[0].set_ylabel("test loss")
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "loss_curves.png", dpi=110)
    plt.close(fig)

    lines = ["![loss curves](loss_curves.png)", "",
             f"| run | rounds | final test loss | final test acc | aggregate noise std | {EPS_HEADER} | train s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run, rec, rows in ctx.runs:
        f = _final(rec, rows)
        agg = rows[-1].get("aggregate_noise_std") if rows else None
        lines.append(f"| {run.label} | {f['rounds']} | {f['loss']:.4f} | {f['acc']:.4f} | {_fmt(agg)} | "
                     f"{_eps_cells(rec)} | {f['seconds']:.0f} |")
    lines += ["", f"Certified ε: (ε, δ = {DELTA:g})-DP, privacy unit a whole client, replace-one, "
              "sensitivity 2C per upload, composed over the rounds run (PLD); the server-side scheme "
              "gives the server the clean clipped uploads (ε = ∞ against it). The claimed ε is the "
              "paper's per-round ε-MI-DP in nats — a different notion, never composed by the paper.", ""]

    def est(group: list[tuple[Any, Any, list[dict[str, Any]]]], value: Any) -> Estimate:
        """One value per seed of a setting (``value`` maps a run's (record, rows) to a number)."""
        return Estimate.of([value(rec, rows) for _, rec, rows in group])

    def final_loss(rec: Any, rows: list[dict[str, Any]]) -> float:
        return _final(rec, rows)["loss"]

    def tail_loss(_rec: Any, rows: list[dict[str, Any]]) -> float:
        return _tail(rows, "test_loss")[0]

    def tail_acc(_rec: Any, rows: list[dict[str, Any]]) -> float:
        return _tail(rows, "test_accuracy")[0]

    def last(key: str) -> Any:
        return lambda _rec, rows: float(rows[-1].get(key, float("nan")))

    # verdicts
    lines += ["### Verdicts", ""]
    eq_rows, eq_v = [], []
    for eps in EPSILONS:
        if eps in by_side["client"] and eps in by_side["server"]:
            gc, gs = by_side["client"][eps], by_side["server"][eps]
            noise = [rows[-1].get("aggregate_noise_std") for _, _, rows in gc + gs]
            known = [float(a) for a in noise if a is not None]
            same_noise = len(known) == len(noise) and max(known) - min(known) <= 1e-9 * max(known)
            n_tail = _tail(gc[0][2], "test_loss")[2]
            # each run's mean accuracy over its last half of the rounds is one replication (its seed's)
            eq = equivalent(est(gc, tail_acc), est(gs, tail_acc), bound=THM2_BOUND, tolerance=ACC_TOL)
            v = eq.verdict if same_noise else NOT_REPRODUCED
            eq_v.append(v)
            eq_rows.append(
                f"ε = {eps:g}: aggregate noise std client {_fmt(noise[0], 6)} vs server {_fmt(noise[len(gc)], 6)} "
                f"({'equal' if same_noise else 'different'}{' in every run' if len(noise) > 2 else ''}); "
                f"mean test loss over the last {n_tail} rounds {est(gc, tail_loss).text()} vs "
                f"{est(gs, tail_loss).text()}; mean accuracy over them, client − server: {eq.text()}; final round: "
                f"loss {est(gc, final_loss).text()} vs {est(gs, final_loss).text()}, accuracy "
                f"{est(gc, last('test_accuracy')).text()} vs {est(gs, last('test_accuracy')).text()} "
                f"→ {_rule_verdict(ctx.scale, v)}")
    lines.append("1. *Theorem 2 — equal utility client vs server side*: the aggregate noise std must be equal (exact: "
                 "the theorem's mechanism), and the accuracy equal within ±"
                 f"{THM2_BOUND:g} by an equivalence test with seeds as replications (two one-sided tests; each run "
                 "contributes its mean accuracy over the last half of the rounds — rounds of one run are "
                 "autocorrelated, not replications; one seed per side tests nothing): "
                 f"{_rule_verdict(ctx.scale, every(eq_v) or INCONCLUSIVE) if eq_v else _judge(ctx.scale, None)}.")
    lines += [f"   - {x}" for x in eq_rows]
    mono, mono_rows = [], []
    for side in ("client", "server"):
        pts = [(e, est(by_side[side][e], final_loss)) for e in EPSILONS if e in by_side[side]]
        if len(pts) == len(EPSILONS):
            tr = trend(pts, increasing=False, tolerance=LOSS_TOL)
            mono.append(tr.verdict)
            mono_rows.append(f"   - {side}: final loss at ε = 5, 10, 20: " + ", ".join(e.text() for _, e in pts)
                             + f" (ε = 5 → 20: {tr.change:+.4f} in the claimed direction vs margin {tr.margin:.4f}; "
                             f"{tr.reason})")
    mono_all = every(mono) or INCONCLUSIVE
    lines.append(f"2. *Final loss decreases as ε grows (5 → 10 → 20), both sides* (trend: the ε = 5 → 20 change beyond "
                 f"max({LOSS_TOL:g}, 2 SE), no pair of ε reversed beyond its margin): "
                 f"{_rule_verdict(ctx.scale, mono_all) if mono else _judge(ctx.scale, None)}.")
    lines += mono_rows
    if base:
        b = est(base, final_loss)
        others = [est(g, final_loss) for d in by_side.values() for g in d.values()]
        best = min(others, key=lambda e: e.mean) if others else None
        v3 = claim_better(b, best, tolerance=LOSS_TOL, lower_is_better=True) if best is not None else INCONCLUSIVE
        lines.append(f"3. *Non-private has the smallest final loss* ({b.text()} vs min private "
                     f"{best.text() if best is not None else 'nan'}; strictly, beyond max({LOSS_TOL:g}, 2 SE)): "
                     f"{_rule_verdict(ctx.scale, v3)}.")
        b1 = est(base, lambda _rec, rows: float(rows[0].get("test_loss", float("nan"))))
        early = {(side, e): est(g, lambda _rec, rows: float(rows[0].get("test_loss", float("nan"))))
                 for side, d in by_side.items() for e, g in d.items()}
        if early and math.isfinite(b1.mean):
            # an equality with the benchmark (within 10 %), seeds as replications on both sides
            early_v = every([equivalent(v, b1, bound=0.10 * b1.mean, tolerance=LOSS_TOL).verdict
                             for v in early.values()]) or INCONCLUSIVE
            lines.append("4. *Early rounds: almost no difference from the benchmark* (round-1 test loss equal to "
                         f"non-private {b1.text()} within 10 %, equivalence test over seeds): "
                         + ", ".join(f"{side} ε={e:g}: {(v.mean - b1.mean) / b1.mean:+.1%}"
                                     for (side, e), v in sorted(early.items()))
                         + f" → {_rule_verdict(ctx.scale, early_v)} ({n_seeds} seed(s)).")
            b_tail = est(base, tail_loss)
            tails = {(side, e): est(g, tail_loss) for side, d in by_side.items() for e, g in d.items()}
            top = max(EPSILONS)
            close = {side: not_worse(tails[(side, top)], b_tail, bound=0.25 * b_tail.mean, tolerance=LOSS_TOL,
                                     lower_is_better=True) for side in by_side if (side, top) in tails}
            close_v = every([c.verdict for c in close.values()]) or INCONCLUSIVE
            lines.append("5. *Approaches the benchmark as ε grows* (mean test loss over the last half at the largest ε "
                         "not above non-private's by more than 25 %, non-inferiority over seeds): "
                         + ", ".join(f"{side} ε={e:g}: {(v.mean - b_tail.mean) / b_tail.mean:+.0%}"
                                     for (side, e), v in sorted(tails.items()))
                         + "; at ε = " + f"{top:g}, how much worse than non-private: "
                         + ", ".join(f"{side} {c.text()}" for side, c in close.items())
                         + f" → {_rule_verdict(ctx.scale, close_v)}.")
    if ctx.scale != "full":
        lines += ["", f"Scale **{ctx.scale}**: fewer rounds than the paper's T = 100 (see the table), up to "
                  f"{n_seeds} seed(s) per setting (mean ± SE over seeds); trends over the first rounds only."]
    return "\n".join(lines)


def _report_sweep(ctx: ReportContext, xname: str, fig_no: int, expect: str) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    cells: dict[str, dict[float, list[float]]] = {"client": {}, "server": {}}
    for run, rec, rows in ctx.runs:
        cells[run.coords["side"]].setdefault(float(run.coords["x"]), []).append(_final(rec, rows)["acc"])
    series = {side: [(x, Estimate.of(v)) for x, v in sorted(d.items())] for side, d in cells.items()}
    for side, pts in series.items():
        ax.errorbar([p[0] for p in pts], [p[1].mean for p in pts],
                    yerr=[0.0 if math.isnan(p[1].se) else p[1].se for p in pts], marker="o", capsize=3,
                    label=f"{side}-side noise")
    ax.set_xlabel(xname)
    ax.set_ylabel("test accuracy")
    ax.set_title(f"002 Fig. {fig_no}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.out_dir / f"fig{fig_no}.png", dpi=110)
    plt.close(fig)
    lines = [f"![fig{fig_no}](fig{fig_no}.png)", "",
             f"| run | {xname} | rounds | test acc | {EPS_HEADER} |", "|---|---|---|---|---|---|---|"]
    for run, rec, rows in ctx.runs:
        f = _final(rec, rows)
        lines.append(f"| {run.label} | {run.coords['x']:g} | {f['rounds']} | {f['acc']:.4f} | {_eps_cells(rec)} |")
    lines += ["", "### Verdicts", ""]

    for side, pts in series.items():
        xs = [p[0] for p in pts]
        if len(pts) < 3 and ctx.scale != "smoke":
            lines.append(f"- {side}: run at {xname} ∈ {{{', '.join(f'{x:g}' for x in xs)}}} only (for Theorem 2 "
                         "below), no trend judged.")
            continue
        shown = ", ".join(f"{x:g}: {e.text(4)}" for x, e in pts)
        if expect == "increasing":
            tr = trend(pts, increasing=True, tolerance=ACC_TOL, chance=CHANCE, chance_tolerance=CHANCE_TOL)
            lines.append(f"- {side}: accuracy rises with {xname} ({shown}; first → last {tr.change:+.4f} vs margin "
                         f"{tr.margin:.4f}; {tr.reason}): {_rule_verdict(ctx.scale, tr.verdict)}")
        else:
            v, why = interior_optimum(pts, tolerance=ACC_TOL, lower_is_better=False)
            lines.append(f"- {side}: best accuracy at an interior {xname} ({shown}; {why.replace('argmax', 'best')}; "
                         f"margin max({ACC_TOL:g}, 2 SE)): {_rule_verdict(ctx.scale, v)}")
    client = {x: e for x, e in series["client"]}
    diffs = {x: abs(client[x].mean - e.mean) for x, e in series["server"] if x in client}
    if diffs:
        # As for Figs. 3–4: one round's accuracy fluctuates by several points under this noise, so
        # each run contributes its mean accuracy over the last half of the evaluated rounds, and the
        # seeds of each side are the replications of an equivalence test (TOST, ±THM2_BOUND); rounds
        # of one run are autocorrelated and are not replications.
        tails: dict[tuple[str, float], list[float]] = {}
        for run, _, rows in ctx.runs:
            tails.setdefault((run.coords["side"], float(run.coords["x"])), []).append(_tail(rows, "test_accuracy")[0])
        parts, outs = [], []
        for x in sorted(diffs):
            eq = equivalent(Estimate.of(tails[("client", x)]), Estimate.of(tails[("server", x)]), bound=THM2_BOUND,
                            tolerance=ACC_TOL)
            outs.append(eq.verdict)
            parts.append(f"{x:g}: final-round gap {diffs[x]:.4f}; last-half means client − server {eq.text()} "
                         f"({len(tails[('client', x)])} / {len(tails[('server', x)])} seeds)")
        lines.append(f"- Theorem 2, same accuracy client vs server side (equivalence within ±{THM2_BOUND:g}, seeds as "
                     f"replications), per {xname} — " + "; ".join(parts)
                     + f" → equal at {outs.count(REPRODUCED)} of {len(outs)}: "
                     f"{_rule_verdict(ctx.scale, every(outs) or INCONCLUSIVE)}")
    if ctx.scale == "smoke":
        lines += ["", "Scale **smoke**: 2 rounds, 1 local epoch, 20–30 samples per client — a pipeline check, "
                  "not evidence for or against the paper's trend; run `--scale full` for the figure."]
    elif ctx.scale == "reduced":
        rounds = sorted({int(r.config.rounds) for r, _, _ in ctx.runs})
        xs = sorted({r.coords["x"] for r, _, _ in ctx.runs})
        seeds = max((e.n for pts in series.values() for _, e in pts), default=1)
        lines += ["", f"Scale **reduced**: T = {', '.join(map(str, rounds))} rounds instead of the paper's 100 "
                  f"(CPU budget; 002 Figs. 3–4 were cut the same way), {xname} ∈ {{{', '.join(f'{x:g}' for x in xs)}}} "
                  f"instead of the paper's full grid, up to {seeds} seed(s) per point (mean ± SE): the verdicts "
                  f"judge the first rounds only. Rule: differences within max({ACC_TOL:g}, 2 SE) decide nothing "
                  "(inconclusive); a trend over points all at chance (10%) is inconclusive."]
    return "\n".join(lines)


def _report_fig5(ctx: ReportContext) -> str:
    return _report_sweep(ctx, "N", 5, "increasing")


def _report_fig6(ctx: ReportContext) -> str:
    return _report_sweep(ctx, "C", 6, "interior")


def _report_fig7_10(ctx: ReportContext) -> str:
    plt = _plt()
    # (algo, μ_ε, σ_ε) → {seed: final accuracy}; a seed draws the budgets ε_k, the same for both schemes
    per_seed: dict[tuple[str, float, float], dict[int, float]] = {}
    for run, rec, rows in ctx.runs:
        key = (run.coords["algo"], run.coords["mu"], run.coords["sd"])
        per_seed.setdefault(key, {})[int(run.coords.get("seed", 0))] = _final(rec, rows)["acc"]
    acc = {k: Estimate.of(list(v.values())) for k, v in per_seed.items()}
    n_seeds = len({int(run.coords.get("seed", 0)) for run, _, _ in ctx.runs})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for algo, style in (("pmidp-fl", "o-"), ("midp-client", "s--")):
        panels = ((axes[0], GRID_SIGMA, [(algo, 20.0, x) for x in GRID_SIGMA]),
                  (axes[1], GRID_MU, [(algo, x, 10.0) for x in GRID_MU]))
        for ax, xs, keys in panels:
            ests = [acc.get(k) for k in keys]
            ax.errorbar(xs, [np.nan if e is None else e.mean for e in ests],
                        yerr=[0.0 if e is None or math.isnan(e.se) else e.se for e in ests],
                        fmt=style, capsize=3, label=algo)
    axes[0].set_xlabel("σ_ε (μ_ε = 20)")
    axes[0].set_title("Figs. 7 / 10" + (f" (mean ± SE, {n_seeds} seeds)" if n_seeds > 1 else ""))
    axes[1].set_xlabel("μ_ε (σ_ε = 10)")
    axes[1].set_title("Figs. 8 / 9" + (f" (mean ± SE, {n_seeds} seeds)" if n_seeds > 1 else ""))
    for ax in axes:
        ax.set_ylabel("test accuracy")
        ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "fig7_10.png", dpi=110)
    plt.close(fig)

    lines = ["![figs 7-10](fig7_10.png)", "",
             f"| run | rounds | test acc | {EPS_HEADER} "
             "| per-client certified ε server (min / median / max) | train s |",
             "|---|---|---|---|---|---|---|---|"]
    per_client_note: list[str] = []
    for run, rec, rows in ctx.runs:
        f = _final(rec, rows)
        cells = "—"
        if run.coords["algo"].startswith("pmidp") and rows:
            n = int(rec.config["partition"]["num_clients"])
            # the run's own ledger, per client (adaptive thresholds make it infinite: see not_covered)
            priv = stored_privacy(rec)
            srv_mark = "" if priv is None else basis_mark(priv.certificate("server"))
            pub_mark = "" if priv is None else basis_mark(priv.certificate("public"))
            srv = stored_client_epsilons(rec, "server")
            eps_srv = np.array(list(srv.values()) or [np.nan])
            cells = f"{eps_srv.min():.4g} / {np.median(eps_srv):.4g} / {eps_srv.max():.4g}{srv_mark}"
            if run.coords["algo"] == "pmidp-fl" and run.coords["sd"] == 15.0 and not per_client_note:
                pub = stored_client_epsilons(rec, "public")
                claim = None if priv is None else priv.claimed_epsilon
                claimed: dict[int, float] = claim if isinstance(claim, dict) else {}
                order = sorted(range(n), key=lambda i: claimed.get(i, 0.0))
                pick = [order[0], order[len(order) // 2], order[-1]]
                per_client_note = [
                    f"Per-client ledger of `{run.label}` (claimed ε_k-MI-DP in nats next to the certified "
                    f"(ε, δ = {DELTA:g}) per observer, {f['rounds']} rounds):", "",
                    "| client | claimed ε_k (nats/round) | certified ε server | certified ε public |",
                    "|---|---|---|---|"]
                for i in pick:
                    per_client_note.append(f"| {i} | {_fmt(claimed.get(i))} | "
                                           f"{_fmt(srv.get(i))}{srv_mark} | {_fmt(pub.get(i))}{pub_mark} |")
                eps_k = np.array([claimed.get(i, np.nan) for i in range(n)])
                w_last = np.array(rows[-1]["weights"])
                floor = eps_k <= 1.0 + 1e-9
                per_client_note += ["", f"{int(floor.sum())} of {n} clients sit at the floor ε_k = 1; together "
                                    f"they get weight {float(w_last[floor].sum()):.4f} in the eq. 5.33 aggregate "
                                    f"(uniform: {float(floor.sum()) / n:.2f}) — the eq. 5.33 weights (p_k ∝ 1/σ_k, "
                                    "roughly ∝ sqrt(ε_k) at large d) down-weight the most private clients, which is "
                                    "where PMIDP-FL gains over the basic scheme."]
        lines.append(f"| {run.label} | {f['rounds']} | {f['acc']:.4f} | {_eps_cells(rec)} | {cells} "
                     f"| {f['seconds']:.0f} |")
    lines += [""] + per_client_note + [""]
    lines += ["Claimed ε for PMIDP-FL and the basic scheme: the largest client's per-round ε-MI-DP in nats "
              "(PMIDP gives each client exactly its drawn ε_k; the basic scheme serves the smallest ε_k, "
              "eq. 5.21, so every client gets that one). Certified: (ε, δ)-DP composed over the rounds run.", ""]
    lines += ["### Verdicts", ""]
    fig7 = [acc.get(("pmidp-fl", 20.0, s)) for s in GRID_SIGMA]
    if all(e is not None for e in fig7):
        f7 = [e for e in fig7 if e is not None]
        spread = max(e.mean for e in f7) - min(e.mean for e in f7)
        # "not significantly affected": each σ_ε equal to σ_ε = 0 within FIG7_BOUND (TOST, seeds as replications)
        eqs = [equivalent(e, f7[0], bound=FIG7_BOUND, tolerance=ACC_TOL) for e in f7[1:]]
        lines.append(f"1. *Fig. 7 — PMIDP-FL accuracy is not significantly affected by σ_ε at μ_ε = 20* (accuracy at "
                     f"σ_ε = {', '.join(f'{s:g}' for s in GRID_SIGMA)}: {', '.join(e.text() for e in f7)}; "
                     "spread of the "
                     f"means {spread:.4f}; each σ_ε > 0 equal to σ_ε = 0 within ±{FIG7_BOUND:g} by an equivalence test "
                     "with seeds as replications: "
                     + ", ".join(f"σ_ε = {s:g} − 0: {e.text()}" for s, e in zip(GRID_SIGMA[1:], eqs, strict=True))
                     + f"): {_rule_verdict(ctx.scale, every([e.verdict for e in eqs]) or INCONCLUSIVE)}.")
    fig8 = [acc.get(("pmidp-fl", m, 10.0)) for m in GRID_MU]
    if all(e is not None for e in fig8):
        f8 = [e for e in fig8 if e is not None]
        t8 = trend(list(zip(GRID_MU, f8, strict=True)), increasing=True, tolerance=ACC_TOL)
        lines.append("2. *Fig. 8 — PMIDP-FL accuracy rises with μ_ε (σ_ε = 10)* ("
                     + ", ".join(e.text() for e in f8)
                     + f"; μ_ε = {GRID_MU[0]:g} → {GRID_MU[-1]:g}: {t8.change:+.4f} vs margin {t8.margin:.4f}; "
                     f"{t8.reason}): {_rule_verdict(ctx.scale, t8.verdict)}.")
    # PMIDP − basic per seed: the two schemes of one seed share the budgets ε_k, so the gap is paired by seed
    gaps = {(m, s): Estimate.of([v[seed] - per_seed[("midp-client", m, s)][seed] for seed in sorted(v)
                                 if seed in per_seed[("midp-client", m, s)]])
            for (a, m, s), v in per_seed.items()
            if a == "pmidp-fl" and ("midp-client", m, s) in per_seed and set(v) & set(per_seed[("midp-client", m, s)])}
    if gaps:
        # at σ_ε = 0 every client has the same ε_k: PMIDP-FL and the basic scheme are the same algorithm
        outs = [claim_better(g, 0.0, tolerance=ACC_TOL, lower_is_better=False) for (m, sd), g in gaps.items() if sd > 0]
        v9 = every(outs) or INCONCLUSIVE
        lines.append("3. *Figs. 9–10 — PMIDP-FL beats the basic client-side scheme* (gap PMIDP − basic per "
                     "(μ_ε, σ_ε), paired by seed): "
                     + ", ".join(f"({m:g}, {s:g}): {g.mean:+.4f}" + (f" ± {g.se:.2g}" if g.n > 1 else "")
                                 for (m, s), g in sorted(gaps.items()))
                     + f": {_rule_verdict(ctx.scale, v9)} (strictly, beyond max({ACC_TOL:g}, 2 SE) at every σ_ε > 0; "
                     "at σ_ε = 0 the two schemes are the same algorithm).")
        g_sd = [gaps.get((20.0, s)) for s in GRID_SIGMA]
        if all(g is not None for g in g_sd):
            g0, g15 = g_sd[0], g_sd[-1]
            assert g0 is not None and g15 is not None
            lines.append("4. *Fig. 10 — the gap grows with σ_ε* (gap at σ_ε = 15 larger than at σ_ε = 0 beyond "
                         f"max({ACC_TOL:g}, 2 SE); gaps at σ_ε = 0, 5, 10, 15: "
                         + ", ".join(f"{g.mean:+.4f}" for g in g_sd if g is not None)
                         + "): "
                         f"{_rule_verdict(ctx.scale, claim_better(g15, g0, tolerance=ACC_TOL, lower_is_better=False))}"
                         ".")
    ad = [(run, rec, rows) for run, rec, rows in ctx.runs if run.coords["algo"] == "pmidp-adaptive"]
    if ad:
        run, rec, rows = ad[0]
        traj = [float(np.mean(r["clip_norms"])) for r in rows if "clip_norms" in r]
        fixed = per_seed.get(("pmidp-fl", 20.0, 10.0), {}).get(int(run.coords.get("seed", 0)), float("nan"))
        lines += ["", "Adaptive threshold (η_c = 0.1, eq. 5.18; seed 0 only, no verdict), mean C_{k,t} per round: "
                  + ", ".join(f"{c:.2f}" for c in traj)
                  + f"; accuracy {_final(rec, rows)['acc']:.4f} vs {fixed:.4f} "
                  "with fixed C = 10 (same seed). The threshold tracks ‖w_k‖, which includes the noise already in the "
                  "global model; the certified ε does not cover the release of these norms (see not_covered)."]
    if ctx.scale != "full":
        lines += ["", f"Scale **{ctx.scale}**: fewer rounds than T = 100; up to {n_seeds} seed(s) per setting "
                  "(mean ± SE over seeds)."]
    return "\n".join(lines)


# --------------------------------------------------------------------------- recipes

_SETTINGS = ("MLP 784-256-10 on MNIST, IID, N = 100, C = 10, SGD lr 0.01, 5 local epochs, batch 64, "
             "all clients every round. δ = 1e-5 for the certified ε (the paper has no δ).")

_CMD = "dpfl reproduce {key} --scale {scale} --data-dir DIR"

RECIPES = [
    Recipe(
        key="002/fig3-4",
        title="Test loss over rounds, ε ∈ {5, 10, 20}: client-side (Fig. 3) vs server-side (Fig. 4) noise",
        paper=PAPER,
        paper_claim=("Figs. 3–4 (§VI-A): without noise the loss is smallest; with noise the curves follow "
                     "the benchmark early, then fluctuate and decrease more slowly; the final loss decreases "
                     "as ε grows (5 → 10 → 20) and approaches the benchmark. Theorem 2 (eq. 4.16): client- "
                     "and server-side noise give the same utility at the same ε (\"the accuracy ... is the "
                     "same\"). No numbers are stated, only curves."),
        build=_build_fig3_4,
        report=_report_loss_curves,
        notes=(f"{_SETTINGS} Reduced scale: T = 12 rounds instead of 100 (CPU budget). Reduced and full: seeds 0–2 "
               "per setting (Theorem 2, the early-rounds equality and the closeness to the benchmark are tested with "
               "seeds as replications; one seed tests them in neither direction). Full: "
               f"`{_CMD.format(key='002/fig3-4', scale='full')}` (T = 100)."),
    ),
    Recipe(
        key="002/fig5",
        title="Test accuracy against the number of clients N (20..200), both schemes",
        paper=PAPER,
        paper_claim=("Fig. 5: accuracy increases with N (10 values from 20 to 200): more data and less "
                     "noise per ε; both schemes give the same accuracy (Theorem 2). No numbers stated."),
        build=_build_fig5,
        report=_report_fig5,
        notes=("ε = 10 nats, C = 10 (the paper does not state ε for this figure). 300 samples per client, so "
               "the global data grows with N and N = 200 uses all of MNIST. Smoke: N ∈ {20, 60, 100, 140, 200}, "
               "20 samples per client, 2 rounds, 1 epoch. Reduced: both sides at N ∈ {20, 60, 100, 140, 200}, "
               f"T = 10 rounds instead of 100, 5 epochs: `{_CMD.format(key='002/fig5', scale='reduced')}`. Full: "
               f"`{_CMD.format(key='002/fig5', scale='full')}` (10 values of N, T = 100, 5 epochs)."),
    ),
    Recipe(
        key="002/fig6",
        title="Test accuracy against the clipping threshold C (2.5..20), both schemes",
        paper=PAPER,
        paper_claim=("Fig. 6: a too small C clips many clients' parameters, a too large C needs more noise; "
                     "both hurt accuracy (an interior optimum). Both schemes give the same accuracy."),
        build=_build_fig6,
        report=_report_fig6,
        notes=("ε = 10 nats, N = 100 (the paper does not state ε). Smoke: C ∈ {2.5, 5, 10, 20}, 10 clients × "
               f"30 samples, 2 rounds, 1 epoch. Reduced: client side at C ∈ {2.5, 5, 10, 20}, server side at C = 10 "
               "(CPU budget), 300 samples per client (as in Fig. 5; the C = 10 runs of seed 0 are Fig. 5's "
               "N = 100 runs), "
               "client side on seeds 0–2 (the interior-C claim rests on ≈ 1-point differences), T = 10 "
               f"rounds instead of 100, 5 epochs: `{_CMD.format(key='002/fig6', scale='reduced')}`. Full: "
               f"`{_CMD.format(key='002/fig6', scale='full')}` (8 values of C, T = 100)."),
    ),
    Recipe(
        key="002/fig7-10",
        title="PMIDP-FL vs the basic client-side scheme under personalized budgets ε_k ~ N(μ_ε, σ_ε²), floor 1",
        paper=PAPER,
        paper_claim=("Fig. 7 (μ_ε = 20, σ_ε ∈ {0, 5, 10, 15}): PMIDP-FL's accuracy is not significantly "
                     "affected by σ_ε. Fig. 8 (σ_ε = 10, μ_ε ∈ {5, 10, 20}): accuracy drops as μ_ε drops. "
                     "Figs. 9–10: PMIDP-FL beats the basic client-side scheme (which must serve the smallest "
                     "ε_k, eq. 5.21) when μ_ε is low or σ_ε large, by a large margin at large σ_ε."),
        build=_build_fig7_10,
        report=_report_fig7_10,
        notes=(f"{_SETTINGS} Budgets drawn from the run seed (stream (0, server, 'misc')): both schemes get "
               "the same ε_k. PMIDP-FL runs use a fixed C = 10 (η_c = 0) so that the comparison isolates the "
               "personalized noise and the eq. 5.33 weights; one extra run uses the adaptive threshold "
               "η_c = 0.1 (the paper gives no η_c). Reduced and full: seeds 0–2 per setting, each seed its own draw of "
               "the ε_k (Fig. 7's equality is tested with seeds as replications, the PMIDP − basic gaps are paired by "
               "seed); the adaptive run on seed 0 only. Reduced scale: T = 5 rounds (CPU budget). Full: "
               f"`{_CMD.format(key='002/fig7-10', scale='full')}`."),
    ),
    Recipe(
        key="002/cifar",
        title="CIFAR-10 part of Figs. 3–4: test loss, ε ∈ {5, 10, 20}, client vs server side",
        paper=PAPER,
        paper_claim=("§VI: a CNN on CIFAR-10 shows the same trends as MNIST in Figs. 3–10 (no numbers "
                     "stated)."),
        build=_build_cifar,
        report=_report_loss_curves,
        notes=("CNN: dpfl's `cnn-000` (one 5x5 conv layer, 32 channels, 106,122 parameters) — the paper "
               "names no architecture. CIFAR-10 is not available offline here: full scale needs the "
               "standard python batches under `<data-dir>/cifar10/cifar-10-batches-py/` (`dpfl data fetch "
               "cifar10`), command: `dpfl reproduce 002/cifar --scale full "
               "--data-dir <dir>`. The smoke run here uses a tiny CIFAR-format folder (100 random train "
               "images, 20 test images) written to a temporary directory with checksum verification "
               "off: it checks the pipeline only, its accuracies mean nothing. The same smoke run is the test "
               "`tests/integration/test_recipes_002.py::test_cifar_smoke_on_tiny_cifar_format_data`; `dpfl reproduce` "
               "itself has no switch to turn verification off (the run here called `reproduce()` from Python with "
               "`dpfl.data.load_dataset` wrapped with `verify=False`)."),
    ),
]
