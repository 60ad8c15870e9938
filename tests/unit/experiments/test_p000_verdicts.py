"""000 report verdicts are computed from the stored numbers (Figs. 7, 14, 15) by the shared rules of
``verdicts.py``, and the reduced grids."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import ReportContext
from dpfl.experiments.recipes.udp_crd import _concordance


def _ctx(key: str, tmp_path: Path, finals: dict[tuple[str, float, int, float], Any]) -> ReportContext:
    """A report context over fake stored runs: (alg, ε, T, β) → (final test loss, rounds run), or a list
    of such pairs, one per seed."""
    runs = []
    for (alg, eps, t, beta), value in finals.items():
        for seed, (loss, rounds) in enumerate(value if isinstance(value, list) else [value]):
            coords: dict[str, Any] = {"eps": eps, "alg": alg, "T": t, "seed": seed}
            if alg == "udp-crd":
                coords["beta"] = beta
            rows = [{"test_loss": loss, "test_accuracy": 1 - loss, "seconds": 0.1,
                     **({"crd_T": t} if alg == "udp-crd" else {})} for _ in range(rounds)]
            rec = SimpleNamespace(result={"rounds": rounds, "test_loss": loss, "test_accuracy": 1 - loss,
                                          "privacy": {"claimed_epsilon": {"0": eps}}})
            runs.append((SimpleNamespace(coords=coords), rec, rows))
    return ReportContext(get_recipe(key), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def _claim(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


def test_concordance_counts_pairs() -> None:
    assert _concordance([1, 2, 3], [1, 2, 3]) == (3, 0)
    assert _concordance([1, 2, 3], [3, 2, 1]) == (0, 3)
    assert _concordance([1, 2, 3], [1, 1, 0]) == (0, 2)  # the tie counts neither way
    # pairs inside the tolerance count neither way (the old count took 0.0003 as a discordance)
    assert _concordance([0, 50, 100], [0.4507, 0.4504, 0.52], tolerance=0.005) == (2, 0)


def test_fig7_verdict_follows_the_numbers(tmp_path: Path) -> None:
    udp = {("udp", 4.0, t, 0.0): (v, t) for t, v in ((50, 0.6), (100, 0.45), (200, 0.40), (300, 0.42))}
    good = {("udp-crd", 4.0, t, 0.9): (v, 100) for t, v in ((100, 0.44), (200, 0.39), (300, 0.41))}
    text = get_recipe("000/fig7").report(_ctx("000/fig7", tmp_path, udp | good))
    assert "**agrees**" in _claim(text, "| the initial T closest") and "**disagrees**" not in text
    bad = {("udp-crd", 4.0, t, 0.9): (v, 100) for t, v in ((100, 0.38), (200, 0.39), (300, 0.41))}
    text = get_recipe("000/fig7").report(_ctx("000/fig7", tmp_path, udp | bad))
    assert "**disagrees**" in _claim(text, "| the initial T closest")


def test_fig7_a_noise_sized_miss_is_inconclusive(tmp_path: Path) -> None:
    # the committed reduced numbers: lowest loss from T0 = 200 (0.4504), the T0 closest to T* = 150
    # gave 0.4507 — the old rule said "disagrees" on 0.0003
    udp = {("udp", 2.0, t, 0.0): (v, t) for t, v in ((100, 0.46), (150, 0.455), (200, 0.458), (300, 0.47))}
    crd = {("udp-crd", 2.0, t, 0.9): (v, 100) for t, v in ((100, 0.4530), (150, 0.4507), (200, 0.4504),
                                                           (300, 0.4620))}
    text = get_recipe("000/fig7").report(_ctx("000/fig7", tmp_path, udp | crd))
    assert "**inconclusive**" in _claim(text, "| the initial T closest")


def test_fig14_15_verdicts_follow_the_numbers(tmp_path: Path) -> None:
    finals = {("udp-crd", 2.0, 200, b): (loss, rounds)
              for b, loss, rounds in ((0.5, 0.60, 40), (0.7, 0.50, 60), (0.8, 0.45, 80), (0.9, 0.47, 95))}
    text = get_recipe("000/fig14").report(_ctx("000/fig14", tmp_path, finals))
    assert "| β = 0.8 gives the lowest loss | ε=2: β within the margin of the lowest loss: [0.8] | **agrees** |" in text
    # the loss mostly falls as β grows, but 0.45 → 0.47 from β = 0.8 to 0.9 (one seed each) is a rise of 0.02,
    # four times the 0.005 margin: a real reversal refutes "a larger β gives a lower loss" under the one trend
    # rule (the old count, 1 concordant against 5 discordant pairs, agreed)
    assert "**disagrees**" in _claim(text, "| a larger β (more careful adjustment of T) gives a lower loss")
    assert "moves the other way beyond the margin (0.8 → 0.9)" in text
    text = get_recipe("000/fig15").report(_ctx("000/fig15", tmp_path, finals))
    assert "**agrees**" in _claim(text, "| a larger β consumes more rounds")
    finals[("udp-crd", 2.0, 200, 0.9)] = (0.47, 50)
    text = get_recipe("000/fig15").report(_ctx("000/fig15", tmp_path, finals))
    assert "**disagrees**" in _claim(text, "| a larger β consumes more rounds")


def test_fig14_best_beta_within_the_margin_is_inconclusive_and_fig15_is_a_trend(tmp_path: Path) -> None:
    # the committed reduced numbers: β = 0.9 lowest by 0.004 — the old rule said "β = 0.8 best: disagrees"
    finals = {("udp-crd", 2.0, 200, b): (loss, rounds)
              for b, loss, rounds in ((0.5, 0.480, 70), (0.6, 0.470, 73), (0.7, 0.460, 75), (0.8, 0.454, 82),
                                      (0.9, 0.450, 82))}
    text = get_recipe("000/fig14").report(_ctx("000/fig14", tmp_path, finals))
    assert "**inconclusive**" in _claim(text, "| β = 0.8 gives the lowest loss")
    # 70 → 82 rounds with 82 → 82 in the last step: the paper's claim "a larger β consumes more rounds" is a
    # trend, judged like Fig. 14's: a 12-round rise beyond the 0.5-round margin and no reversal beyond it
    # agrees (the old strict rule asked for a rise beyond the margin at every step and said inconclusive)
    text = get_recipe("000/fig15").report(_ctx("000/fig15", tmp_path, finals))
    assert "**agrees**" in _claim(text, "| a larger β consumes more rounds")
    # no change from the first to the last β: nothing to agree with
    flat = {k: (loss, 75) for k, (loss, _) in finals.items()}
    text = get_recipe("000/fig15").report(_ctx("000/fig15", tmp_path, flat))
    assert "**inconclusive**" in _claim(text, "| a larger β consumes more rounds")


def test_sweep_larger_eps_lower_loss_is_strict_and_seeds_set_the_margin(tmp_path: Path) -> None:
    from dpfl.experiments.recipes.udp_crd import _sweep_report

    def ctx(vals: dict[tuple[float, int], list[float]]) -> ReportContext:
        runs = []
        for (eps, t), losses in vals.items():
            for seed, loss in enumerate(losses):
                rec = SimpleNamespace(result={"rounds": t, "test_loss": loss, "test_accuracy": 0.9, "privacy": {}})
                run = SimpleNamespace(coords={"q": 1.0, "eps": eps, "T": t, "seed": seed},
                                      config=SimpleNamespace(data=SimpleNamespace(name="mnist")))
                runs.append((run, rec, []))
        return ReportContext(get_recipe("000/fig5"), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]

    # equal losses at every T: the old "b <= a" rule counted 3/3 pairs as "larger ε lower loss"
    equal = {(e, t): [v] for e in (4.0, 8.0) for t, v in ((50, 0.5), (100, 0.4), (200, 0.45))}
    text = _sweep_report()(ctx(equal))
    assert "**inconclusive**" in _claim(text, "| a larger ε gives a lower loss")
    assert "the loss falls with ε (trend rule) at 0/3 T" in text
    # third-digit optimum from one seed each: best T 100 → 200 by 0.001 is not a move
    close = {(4.0, 50): [0.50], (4.0, 100): [0.400], (4.0, 200): [0.401], (4.0, 300): [0.45],
             (8.0, 50): [0.45], (8.0, 100): [0.351], (8.0, 200): [0.350], (8.0, 300): [0.40]}
    text = _sweep_report()(ctx(close))
    assert "**inconclusive**" in _claim(text, "| the optimal T increases with ε")
    assert "**agrees**" in _claim(text, "| test loss against T is convex")
    # three seeds whose spread swamps a 0.03 interior dip: the interior optimum is not resolved
    noisy = {(4.0, t): [v - 0.1, v, v + 0.1] for t, v in ((50, 0.43), (100, 0.40), (200, 0.43))}
    text = _sweep_report()(ctx(noisy))
    assert "**inconclusive**" in _claim(text, "| test loss against T is convex")
    # a larger ε lower at every T by a trend per T: 3 ε, falling at each T beyond the margin, one reversal at
    # T = 100 (8 → 12) beyond it refutes the claim at that T, hence for the figure
    falls = {(e, t): [v] for t in (50, 100) for e, v in ((4.0, 0.50), (8.0, 0.45), (12.0, 0.40))}
    text = _sweep_report()(ctx(falls))
    assert "**agrees**" in _claim(text, "| a larger ε gives a lower loss")
    falls[(12.0, 100)] = [0.47]
    text = _sweep_report()(ctx(falls))
    assert "**disagrees**" in _claim(text, "| a larger ε gives a lower loss") and "q=1 T=100: not reproduced" in text


def test_reduced_grids_of_figs_7_12_13() -> None:
    fig7 = get_recipe("000/fig7").build("reduced")
    assert sorted({r.coords["T"] for r in fig7 if r.coords["alg"] == "udp-crd"}) == [100, 150, 200, 300]
    assert {r.coords["eps"] for r in fig7} == {2.0}
    assert {r.coords["eps"] for r in get_recipe("000/fig14").build("reduced")} == {2.0}
    for key in ("000/fig12", "000/fig13"):
        runs = get_recipe(key).build("reduced")
        assert {r.coords["eps"] for r in runs} == {4.0}
        assert sorted({r.coords["T"] for r in runs if r.coords["alg"] == "udp"}) == [200]
        assert {r.config.partition.kind for r in runs} == ({"classes"} if key.endswith("12") else {"groups"})
    full = get_recipe("000/fig12").build("full")
    assert {r.coords["eps"] for r in full} == {4.0, 8.0, 12.0, 16.0, 20.0}
