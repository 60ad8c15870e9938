"""000 Fig. 2: the divergence of eq. 14 summed exactly against eq. 15's bound (a recipe with no runs)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import reproduce
from dpfl.experiments.recipes.udp_crd import divergence_bound, divergence_chain, divergence_real

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("q", [0.1, 0.6, 0.9])
@pytest.mark.parametrize("a", [1e-4, 0.0098, 0.2])
def test_real_divergence_matches_its_closed_forms(q: float, a: float) -> None:
    # λ = 1: E[(1 − q + q e^{(2zΔ − Δ²)/2σ²})²] = 1 + q²(e^{2a} − 1)
    assert divergence_real(1, q, a) == pytest.approx(math.log1p(q * q * math.expm1(2 * a)), rel=1e-12)
    # the proven bound of eq. 14 is above the exact sum at every λ
    assert all(divergence_chain(lam, q, a) >= divergence_real(lam, q, a) - 1e-12 for lam in range(1, 60))


def test_without_subsampling_the_bound_is_exact() -> None:
    # q = 1: the sum is its last term e^{λ(λ+1)a}, which is eq. 15's bound
    for lam in (1, 7, 100):
        assert divergence_real(lam, 1.0, 0.01) == pytest.approx(divergence_bound(lam, 1.0, 0.01), rel=1e-12)


def test_the_first_order_bound_fails_once_lambda_a_is_not_small() -> None:
    a = (2 * 0.5 * 1.12 / 800) ** 2 / (2 * 0.01**2)  # panel (a) at the MNIST recipes' η, C
    assert divergence_bound(86, 0.9, a) >= divergence_real(86, 0.9, a)
    assert divergence_bound(87, 0.9, a) < divergence_real(87, 0.9, a)


def test_fig2_is_computed_without_store_or_records_and_matches_the_committed_report(tmp_path: Path) -> None:
    recipe = get_recipe("000/fig2")
    assert recipe.build("full") == []
    path = reproduce(recipe, "full", None, tmp_path, from_records=True)
    again = reproduce(recipe, "full", None, tmp_path / "again")
    text = path.read_text()
    assert text == again.read_text()
    assert (path.parent / "fig2.png").is_file() and not (path.parent / "records.jsonl").exists()
    assert text == (ROOT / "reports" / "000_fig2" / "full" / "report.md").read_text()
    assert "| η = 0.5, C = 1.12 | (a) 0.9, 800, 50 | 0.0098 | 0.98 | 1.11, 1.09, 0.991 | 87 |" in text
