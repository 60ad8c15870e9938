"""001 / 002 reduced grids, shared runs across 001 recipes, the noise arithmetic and computed verdicts."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dpfl.config import run_id
from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import ReportContext
from dpfl.experiments.recipes.ldp_fl import REDUCED, _round_noise_std
from dpfl.experiments.recipes.pmidp_fl import C_VALUES_REDUCED, N_VALUES_REDUCED


def test_table1_reduced_has_ten_repetitions_of_every_cell() -> None:
    runs = get_recipe("001/table1").build("reduced")
    reps = Counter((r.coords["dataset"], r.coords["epsilon"]) for r in runs)
    for dataset in REDUCED:
        assert {e for d, e in reps if d == dataset} == {None, math.inf, 0.1, 0.5, 1.0, 5.0, 10.0}  # inf: clip only
        assert all(v == 10 for (d, _), v in reps.items() if d == dataset)
    for r in runs:
        st = REDUCED[r.coords["dataset"]]
        assert r.config.sampling.clients_per_round == st["k"]
        assert r.config.rounds == st["rounds"] and r.config.partition.num_clients == st["n"]
    # repetition outermost: every cell appears before any cell's second repetition
    cells = len(reps)
    assert {r.coords["rep"] for r in runs[:cells]} == {0}


def test_fig3_fig4_reduced_reuse_table1_runs() -> None:
    table = {run_id(r.config) for r in get_recipe("001/table1").build("reduced")}
    fig3 = get_recipe("001/fig3").build("reduced")
    fig4 = get_recipe("001/fig4").build("reduced")
    assert {r.coords["rep"] for r in fig3 + fig4} == {0, 1, 2}  # 3 seeds per setting
    shared3 = [r for r in fig3 if run_id(r.config) in table]
    shared4 = [r for r in fig4 if run_id(r.config) in table]
    assert len(shared3) == 2 * 3 and all(r.coords["curve"] for r in shared3)  # Fig. 3(a)'s curves, 3 seeds
    assert len(shared4) == (2 + 10) * 3  # n = paper's n (two data sets) and every Table 1 ε (5 per data set)
    assert len({run_id(r.config) for r in fig3 + fig4} - table) == (4 + 5) * 3


def test_round_noise_std_matches_the_two_point_values() -> None:
    # ε = 1, r = 0.075: a = 0.075 · coth(0.5) = 0.16230; k = 20
    lo, hi = _round_noise_std(1.0, 0.075, 20)
    a = 0.075 * (math.e + 1) / (math.e - 1)
    assert hi == pytest.approx(a / math.sqrt(20), rel=1e-12) == pytest.approx(0.036291, abs=1e-6)
    assert lo == pytest.approx(math.sqrt(a * a - 0.075**2) / math.sqrt(20), rel=1e-12)
    # large ε: a → r, so a weight at the edge of the range is sent exactly (no noise)
    assert _round_noise_std(40.0, 0.075, 20)[0] == pytest.approx(0.0, abs=1e-9)


def _fig4_ctx(tmp_path: Path, accs: dict[tuple[str, float], float | list[float]],
             dataset: str = "mnist") -> ReportContext:
    """Fake stored runs of 001/fig4: (panel, x) → final accuracy (fraction), one per seed."""
    runs = []
    for (panel, x), per_seed in accs.items():
        for rep, acc in enumerate(per_seed if isinstance(per_seed, list) else [per_seed]):
            coords: dict[str, Any] = {"dataset": dataset, "panel": panel, "rep": rep,
                                      "epsilon": x if panel == "eps" else 1.0}
            if panel == "n":
                coords["n"] = x
            cfg = SimpleNamespace(sampling=SimpleNamespace(clients_per_round=None),
                                  partition=SimpleNamespace(num_clients=int(x) if panel == "n" else 100))
            runs.append((SimpleNamespace(coords=coords, config=cfg),
                         SimpleNamespace(result={"test_accuracy": acc}), []))
    return ReportContext(get_recipe("001/fig4"), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def test_fig4_verdicts_follow_the_numbers(tmp_path: Path) -> None:
    rising = {("n", 50.0): 0.2, ("n", 100.0): 0.3, ("n", 200.0): 0.4,
              ("eps", 0.1): 0.1, ("eps", 0.5): 0.68, ("eps", 1.0): 0.7}
    text = get_recipe("001/fig4").report(_fig4_ctx(tmp_path, rising))
    # both trends reproduced; "stays high above ε = 0.3" is an equality with the largest ε, and one run per
    # cell tests an equality in neither direction: inconclusive (the old rule passed it from one run)
    assert "**not reproduced**" not in text and text.count("**reproduced**") == 2
    assert "**inconclusive**" in next(x for x in text.splitlines() if "stays high for ε > 0.3" in x)
    seeded = {k: [v - 0.005, v, v + 0.005] for k, v in rising.items()}
    text = get_recipe("001/fig4").report(_fig4_ctx(tmp_path, seeded))
    assert "**reproduced**" in next(x for x in text.splitlines() if "stays high for ε > 0.3" in x)
    falling = {("n", 50.0): 0.3, ("n", 100.0): 0.2, ("n", 200.0): 0.25}
    text = get_recipe("001/fig4").report(_fig4_ctx(tmp_path, falling))
    assert text.count("**not reproduced**") == 1  # n: 30 → 25%, the other way beyond 2 points


def test_fig4_stays_high_means_near_the_plateau_not_a_step(tmp_path: Path) -> None:
    # the committed reduced MNIST numbers: the old rule (a ≥ 5-point step across ε = 0.3) passed 16.3%
    old = {("eps", 0.1): 0.0869, ("eps", 0.5): 0.163, ("eps", 1.0): 0.297, ("eps", 5.0): 0.7496,
           ("eps", 10.0): 0.7534}
    # three seeds per cell (as committed): ε = 0.5 is 59 points below ε = 10, far beyond the 5-point bound
    seeded = {k: [v - 0.01, v, v + 0.01] for k, v in old.items()}
    text = get_recipe("001/fig4").report(_fig4_ctx(tmp_path, seeded))
    line = next(x for x in text.splitlines() if "stays high for ε > 0.3" in x)
    assert "**not reproduced**" in line and "ε=0.5: -59.0 (CI" in line
    # one run per cell: the equality is not tested either way, whatever the gap
    text = get_recipe("001/fig4").report(_fig4_ctx(tmp_path, old))
    line = next(x for x in text.splitlines() if "stays high for ε > 0.3" in x)
    assert "**inconclusive**" in line and "one seed" in line


def test_fig4_all_at_chance_is_inconclusive(tmp_path: Path) -> None:
    # Fashion-MNIST reduced: every cell at ≈ 10%; the old rule called the flat n panel "not reproduced"
    # and would call any 1-point wiggle a trend
    chance = {("n", 100.0): [0.0996, 0.101, 0.10], ("n", 200.0): [0.10, 0.099, 0.10],
              ("n", 400.0): [0.115, 0.11, 0.12],
              ("eps", 1.0): [0.10, 0.10, 0.10], ("eps", 2.0): [0.0536, 0.10, 0.10], ("eps", 5.0): [0.10, 0.11, 0.10]}
    text = get_recipe("001/fig4").report(_fig4_ctx(tmp_path, chance, dataset="fashion-mnist"))
    verdict_lines = [x for x in text.splitlines() if x.startswith("- Fig. 4")]
    assert len(verdict_lines) == 3 and all("**inconclusive**" in x for x in verdict_lines)
    assert "reproduced**" not in text


def _fig3_ctx(tmp_path: Path, accs: dict[tuple[str, float], list[float]]) -> ReportContext:
    runs = []
    for (ds, frac), per_seed in accs.items():
        for rep, acc in enumerate(per_seed):
            cfg = SimpleNamespace(sampling=SimpleNamespace(clients_per_round=int(frac * 100)),
                                  partition=SimpleNamespace(num_clients=100))
            runs.append((SimpleNamespace(coords={"dataset": ds, "fraction": frac, "epsilon": 1.0, "rep": rep,
                                                 "curve": False}, config=cfg),
                         SimpleNamespace(result={"test_accuracy": acc}), []))
    return ReportContext(get_recipe("001/fig3"), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def test_fig3_mnist_claim_is_no_effect_of_the_fraction(tmp_path: Path) -> None:
    # the committed reduced numbers rose 15.5 → 58.5%: the paper says a small f_r does NOT hurt MNIST
    rising = {("mnist", 0.1): [0.155, 0.16, 0.15], ("mnist", 0.2): [0.297, 0.3, 0.29],
              ("mnist", 0.5): [0.585, 0.59, 0.58]}
    line = next(x for x in get_recipe("001/fig3").report(_fig3_ctx(tmp_path, rising)).splitlines()
                if x.startswith("- Fig. 3(b) mnist"))
    assert "**not reproduced**" in line
    flat = {("mnist", 0.1): [0.90, 0.91, 0.89], ("mnist", 0.2): [0.91, 0.90, 0.92],
            ("mnist", 0.5): [0.92, 0.92, 0.93]}
    line = next(x for x in get_recipe("001/fig3").report(_fig3_ctx(tmp_path, flat)).splitlines()
                if x.startswith("- Fig. 3(b) mnist"))
    assert "**reproduced**" in line


def test_002_reduced_grids_and_rounds() -> None:
    fig5 = get_recipe("002/fig5").build("reduced")
    fig6 = get_recipe("002/fig6").build("reduced")
    assert sorted({r.coords["x"] for r in fig5}) == list(N_VALUES_REDUCED) == [20, 60, 100, 140, 200]
    assert sorted({r.coords["x"] for r in fig6}) == list(C_VALUES_REDUCED) == [2.5, 5.0, 10.0, 20.0]
    for r in fig5 + fig6:
        assert r.config.rounds == 10 and r.config.local.epochs == 5
    assert {r.coords["side"] for r in fig5 + fig6} == {"client", "server"}


def test_002_reduced_server_points_and_shared_c10_run(tmp_path: Path) -> None:
    fig5 = get_recipe("002/fig5").build("reduced")
    fig6 = get_recipe("002/fig6").build("reduced")
    assert sorted(r.coords["x"] for r in fig5 if r.coords["side"] == "server" and r.coords["seed"] == 0) == [
        20, 60, 100, 140, 200]
    # Theorem 2 is an equivalence test over seeds: both sides run 3 seeds at every N
    assert sorted({r.coords["seed"] for r in fig5 if r.coords["side"] == "server"}) == [0, 1, 2]
    assert len(fig5) == 30
    assert [r.coords["x"] for r in fig6 if r.coords["side"] == "server"] == [10.0]
    ids5 = {run_id(r.config) for r in fig5}
    # Fig. 5's N = 100 runs (its client seeds 1-2 are Fig. 6's client C = 10 seeds 1-2)
    assert {r.label for r in fig6 if run_id(r.config) in ids5} == {"client C=10", "server C=10", "client C=10 seed=1",
                                                                   "client C=10 seed=2"}
    server_n100 = next(r for r in get_recipe("002/fig5").build("full") if r.label == "server N=100")
    assert next(r for r in fig6 if r.label == "server C=10").config.name == server_n100.config.name
    # Theorem 2's comparison matches points by N, not by position
    runs = []
    for side, n, acc in (("client", 20, 0.50), ("client", 60, 0.60), ("client", 100, 0.70),
                         ("server", 20, 0.51), ("server", 100, 0.60)):
        rec = SimpleNamespace(result={"test_accuracy": acc, "test_loss": 1.0, "rounds": 10, "privacy": None})
        runs.append((SimpleNamespace(label=f"{side} N={n}", coords={"side": side, "x": n},
                                     config=SimpleNamespace(rounds=10)), rec, [{"test_accuracy": acc}]))
    text = get_recipe("002/fig5").report(
        ReportContext(get_recipe("002/fig5"), "reduced", None, runs, tmp_path))  # type: ignore[arg-type]
    assert "20: final-round gap 0.0100" in text and "100: final-round gap 0.1000" in text
    # one seed per side: an equality is tested in neither direction (the old rule said "does not hold" at
    # N = 100 from the final rounds of one run each)
    assert "equal at 0 of 2: **inconclusive**" in text


def test_002_theorem2_is_an_equivalence_test_with_seeds_as_replications(tmp_path: Path) -> None:
    # client and server fluctuate around the same level: the final rounds differ by 0.06, the last-half
    # means by 0.023. The old rule compared the last-half means of one run against max(0.02, 3 SE) with the
    # SE from its autocorrelated rounds (0.07 here) and said "holds"; rounds are not replications
    client = [0.60, 0.62, 0.58, 0.63, 0.57, 0.63]
    server = [0.61, 0.59, 0.62, 0.58, 0.61, 0.57]

    def report(per_side: dict[tuple[str, int], list[list[float]]]) -> str:
        runs = []
        for (side, n), seeds in per_side.items():
            for seed, accs in enumerate(seeds):
                rows = [{"test_accuracy": a} for a in accs]
                rec = SimpleNamespace(result={"test_accuracy": accs[-1], "test_loss": 1.0, "rounds": 6,
                                              "privacy": None})
                runs.append((SimpleNamespace(label=f"{side} N={n} seed={seed}", coords={"side": side, "x": n,
                                                                                        "seed": seed},
                                             config=SimpleNamespace(rounds=6)), rec, rows))
        return get_recipe("002/fig5").report(
            ReportContext(get_recipe("002/fig5"), "reduced", None, runs, tmp_path))  # type: ignore[arg-type]

    text = report({("client", 100): [client], ("server", 100): [server]})
    assert "100: final-round gap 0.0600; last-half means client − server +0.0233" in text
    assert "**inconclusive**" in next(x for x in text.splitlines() if x.startswith("- Theorem 2"))
    # three seeds a side, last-half means within 0.3 points of each other: equal within ±0.02 (TOST)
    shift = [[a + d for a in client] for d in (-0.025, -0.02, -0.015)]  # last-half means 0.587, 0.592, 0.597
    text = report({("client", 100): shift, ("server", 100): [[a + d for a in server] for d in (-0.005, 0.0, 0.005)]})
    assert "equal at 1 of 1: **holds**" in text
    # a gap of 0.2 with three tight seeds: refuted
    far = [[a - 0.2 + d for a in server] for d in (-0.005, 0.0, 0.005)]
    text = report({("client", 100): shift, ("server", 100): far})
    assert "equal at 0 of 1: **does not hold**" in text


def test_002_fig6_interior_c_on_one_point_is_inconclusive_and_fig5_spearman_handles_ties(tmp_path: Path) -> None:
    def ctx(key: str, accs: dict[float, list[float]]) -> ReportContext:
        runs = []
        for x, per_seed in accs.items():
            for seed, acc in enumerate(per_seed):
                rec = SimpleNamespace(result={"test_accuracy": acc, "test_loss": 1.0, "rounds": 10, "privacy": None})
                runs.append((SimpleNamespace(label=f"client {x:g} seed={seed}",
                                             coords={"side": "client", "x": x, "seed": seed},
                                             config=SimpleNamespace(rounds=10)), rec, []))
        return ReportContext(get_recipe(key), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]

    # the committed one-seed reduced Fig. 6: 56.3 / 57.4 / 45.8 / 20.8% — the old argmax rule said "holds"
    text = get_recipe("002/fig6").report(ctx("002/fig6", {2.5: [0.563], 5.0: [0.574], 10.0: [0.458], 20.0: [0.208]}))
    line = next(x for x in text.splitlines() if x.startswith("- client: best accuracy"))
    assert line.endswith("**inconclusive**")
    # a tie at the bottom is no reversal (argsort ranks once gave ρ = 1.0 for 0.10 / 0.10 / 0.159; no rank
    # correlation decides a trend now): a rise of 0.059 beyond the 0.02 margin, no pair reversed beyond it
    text = get_recipe("002/fig5").report(ctx("002/fig5", {20: [0.10], 60: [0.10], 100: [0.159]}))
    line = next(x for x in text.splitlines() if x.startswith("- client: accuracy rises"))
    assert line.endswith("**holds**") and "first → last +0.0590 vs margin 0.0200" in line and "ρ" not in line


def test_002_fig3_4_and_fig7_10_reduced_run_three_seeds_with_seed_0_unchanged() -> None:
    fig34 = get_recipe("002/fig3-4").build("reduced")
    assert len(fig34) == 7 * 3 and [r.coords["seed"] for r in fig34] == [0] * 7 + [1] * 7 + [2] * 7
    # seed 0 keeps the labels and configs of the one-seed recipe; seeds 1-2 differ only in the seed
    assert [r.label for r in fig34[:7]] == ["non-private", "client ε=5", "client ε=10", "client ε=20",
                                            "server ε=5", "server ε=10", "server ε=20"]
    assert fig34[7].label == "non-private seed=1" and fig34[7].config.seed == 1
    assert len({run_id(r.config) for r in fig34}) == 21
    assert all(r.config.rounds == 12 for r in fig34)
    fig7 = get_recipe("002/fig7-10").build("reduced")
    # 6 (μ_ε, σ_ε) × 2 schemes per seed; the adaptive-threshold run (no verdict) on seed 0 only
    assert len(fig7) == 12 * 3 + 1 and len({run_id(r.config) for r in fig7}) == 37
    assert [r.coords["seed"] for r in fig7 if r.coords["algo"] == "pmidp-adaptive"] == [0]
    assert len(get_recipe("002/fig3-4").build("smoke")) == 7 and len(get_recipe("002/cifar").build("reduced")) == 7


def _loss_ctx(tmp_path: Path, curves: dict[tuple[str, float], list[list[float]]]) -> ReportContext:
    """Fake stored runs of 002/fig3-4: (side, ε) → per seed, the test loss per round (accuracy 1 − loss)."""
    runs = []
    for (side, eps), seeds in curves.items():
        for seed, losses in enumerate(seeds):
            rows = [{"round": i, "test_loss": x, "test_accuracy": 1.0 - x, "aggregate_noise_std": 0.0 if side == "none"
                     else 0.01 * eps} for i, x in enumerate(losses)]
            rec = SimpleNamespace(result={"test_accuracy": 1.0 - losses[-1], "test_loss": losses[-1],
                                          "rounds": len(losses), "privacy": None})
            runs.append((SimpleNamespace(label=f"{side} ε={eps:g} seed={seed}",
                                         coords={"side": side, "epsilon": eps, "seed": seed},
                                         config=SimpleNamespace(rounds=len(losses), seed=seed)), rec, rows))
    return ReportContext(get_recipe("002/fig3-4"), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def test_002_fig3_4_verdicts_take_seeds_as_replications(tmp_path: Path) -> None:
    def curves(shifts: tuple[float, ...], server_offset: float) -> dict[tuple[str, float], list[list[float]]]:
        out: dict[tuple[str, float], list[list[float]]] = {
            ("none", math.inf): [[0.50, 0.30, 0.20, 0.20] for _ in shifts]}
        for eps, level in ((5.0, 0.50), (10.0, 0.40), (20.0, 0.30)):
            for side, off in (("client", 0.0), ("server", server_offset)):
                out[(side, eps)] = [[0.52 + d, level + d + off, level + d + off, level + d + off] for d in shifts]
        return out

    def verdict(text: str, prefix: str) -> str:
        return next(x for x in text.splitlines() if x.startswith(prefix)).rsplit("→", 1)[-1].rsplit(":", 1)[-1]

    report = get_recipe("002/fig3-4").report
    one = report(_loss_ctx(tmp_path, curves((0.0,), 0.0)))
    assert "**inconclusive**" in verdict(one, "1. *Theorem 2")  # one seed: an equality is tested in neither direction
    assert "**holds**" in verdict(one, "2. *Final loss decreases")
    three = report(_loss_ctx(tmp_path, curves((-0.005, 0.0, 0.005), 0.002)))
    assert "**holds**" in verdict(three, "1. *Theorem 2")
    assert "(3 seeds)" in three and "1 seed(s) per setting" not in three and "up to 3 seed(s) per setting" in three
    # round-1 loss 0.52 vs the benchmark's 0.50 (4 %), seeds as replications: equal within 10 %
    assert "**holds**" in verdict(three, "4. *Early rounds")
    # ε = 20 tail 0.30 vs the benchmark's 0.233: +29 %, worse than the 25 % bound beyond the margin
    assert "**does not hold**" in verdict(three, "5. *Approaches")
    apart = report(_loss_ctx(tmp_path, curves((-0.005, 0.0, 0.005), 0.05)))
    assert "**does not hold**" in verdict(apart, "1. *Theorem 2")


def _fig7_ctx(tmp_path: Path, accs: dict[tuple[str, float, float], list[float]]) -> ReportContext:
    runs = []
    for (algo, mu, sd), per_seed in accs.items():
        for seed, acc in enumerate(per_seed):
            rec = SimpleNamespace(result={"test_accuracy": acc, "test_loss": 1.0, "rounds": 5, "privacy": None})
            runs.append((SimpleNamespace(label=f"{algo} μ={mu:g} σ={sd:g} seed={seed}",
                                         coords={"algo": algo, "mu": mu, "sd": sd, "seed": seed},
                                         config=SimpleNamespace(rounds=5, seed=seed)), rec, []))
    return ReportContext(get_recipe("002/fig7-10"), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def test_002_fig7_is_an_equivalence_over_seeds_and_fig9_gaps_are_paired_by_seed(tmp_path: Path) -> None:
    def grid(seeds: tuple[float, ...]) -> dict[tuple[str, float, float], list[float]]:
        out = {}
        for sd in (0.0, 5.0, 10.0, 15.0):
            out[("pmidp-fl", 20.0, sd)] = [0.80 + d for d in seeds]
            # the basic scheme tracks PMIDP-FL's seed-to-seed swing (same budgets per seed), 0.3 below it
            out[("midp-client", 20.0, sd)] = [0.80 + d - (0.0 if sd == 0 else 0.3) for d in seeds]
        for mu, level in ((5.0, 0.4), (10.0, 0.6)):
            out[("pmidp-fl", mu, 10.0)] = [level + d for d in seeds]
            out[("midp-client", mu, 10.0)] = [0.09 + d for d in seeds]
        return out

    def line(text: str, prefix: str) -> str:
        return next(x for x in text.splitlines() if x.startswith(prefix))

    report = get_recipe("002/fig7-10").report
    one = report(_fig7_ctx(tmp_path, grid((0.0,))))
    assert line(one, "1. *Fig. 7").endswith("**inconclusive**.")
    three = report(_fig7_ctx(tmp_path, grid((-0.005, 0.0, 0.005))))
    assert line(three, "1. *Fig. 7").endswith("**holds**.")
    # the gap is taken per seed (both schemes of a seed share its budgets), then its mean ± SE over seeds
    assert "paired by seed" in line(three, "3. *Figs. 9–10") and "(20, 15): +0.3000" in line(three, "3. *Figs. 9–10")
    assert "**holds**" in line(three, "3. *Figs. 9–10") and line(three, "4. *Fig. 10").endswith("**holds**.")
    assert line(three, "2. *Fig. 8").endswith("**holds**.")
