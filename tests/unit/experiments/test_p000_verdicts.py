"""000 report verdicts are computed from the stored numbers (Figs. 7, 14, 15), and the reduced grids."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import ReportContext
from dpfl.experiments.recipes.p000 import _concordance


def _ctx(key: str, tmp_path: Path, finals: dict[tuple[str, float, int, float], tuple[float, int]]) -> ReportContext:
    """A report context over fake stored runs: (alg, ε, T, β) → (final test loss, rounds run)."""
    runs = []
    for (alg, eps, t, beta), (loss, rounds) in finals.items():
        coords: dict[str, Any] = {"eps": eps, "alg": alg, "T": t}
        if alg == "udp-crd":
            coords["beta"] = beta
        rows = [{"test_loss": loss, "test_accuracy": 1 - loss, "seconds": 0.1,
                 **({"crd_T": t} if alg == "udp-crd" else {})} for _ in range(rounds)]
        rec = SimpleNamespace(result={"rounds": rounds, "test_loss": loss, "test_accuracy": 1 - loss,
                                      "privacy": {"claimed_epsilon": {"0": eps}}})
        runs.append((SimpleNamespace(coords=coords), rec, rows))
    return ReportContext(get_recipe(key), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def test_concordance_counts_pairs() -> None:
    assert _concordance([1, 2, 3], [1, 2, 3]) == (3, 0)
    assert _concordance([1, 2, 3], [3, 2, 1]) == (0, 3)
    assert _concordance([1, 2, 3], [1, 1, 0]) == (0, 2)  # the tie counts neither way


def test_fig7_verdict_follows_the_numbers(tmp_path: Path) -> None:
    udp = {("udp", 4.0, t, 0.0): (v, t) for t, v in ((50, 0.6), (100, 0.45), (200, 0.40), (300, 0.42))}
    good = {("udp-crd", 4.0, t, 0.9): (v, 100) for t, v in ((100, 0.44), (200, 0.39), (300, 0.41))}
    text = get_recipe("000/fig7").report(_ctx("000/fig7", tmp_path, udp | good))
    assert "| 1/1 ε (ε=4: T* = 200" in text and "**disagrees**" not in text
    bad = {("udp-crd", 4.0, t, 0.9): (v, 100) for t, v in ((100, 0.38), (200, 0.39), (300, 0.41))}
    text = get_recipe("000/fig7").report(_ctx("000/fig7", tmp_path, udp | bad))
    assert "| 0/1 ε (ε=4: T* = 200" in text and "**disagrees**" in text


def test_fig14_15_verdicts_follow_the_numbers(tmp_path: Path) -> None:
    finals = {("udp-crd", 2.0, 200, b): (loss, rounds)
              for b, loss, rounds in ((0.5, 0.60, 40), (0.7, 0.50, 60), (0.8, 0.45, 80), (0.9, 0.47, 95))}
    text = get_recipe("000/fig14").report(_ctx("000/fig14", tmp_path, finals))
    assert "best β per ε: 0.8 (ε=2: loss at β = 0.8 minus the lowest +0.0000) | **agrees** |" in text
    assert "ε=2: 1 concordant / 5 discordant" in text  # loss mostly falls as β grows
    text = get_recipe("000/fig15").report(_ctx("000/fig15", tmp_path, finals))
    assert "monotone in 1/1 ε" in text and "**agrees**" in text
    finals[("udp-crd", 2.0, 200, 0.9)] = (0.47, 50)
    text = get_recipe("000/fig15").report(_ctx("000/fig15", tmp_path, finals))
    assert "monotone in 0/1 ε" in text and "**disagrees**" in text


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
