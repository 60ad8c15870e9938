"""Banded Toeplitz and identity against jax-privacy's reference values (``tests/reference/jax_privacy_mf.json``,
written by ``tests/reference/jax_privacy_mf.py``) at (n 2,000, b 100, k 20) and (n 2,052, b 342, k 6).

jax-privacy's figures: ``minsep_sensitivity_squared`` (``toeplitz.minsep_sensitivity_squared``),
``total_squared_error_unit_noise`` = Σ of ``per_query_error`` = ‖A C⁻¹‖_F², ``rmse_min_sep`` =
√(total × sens² / n), ``loss_min_sep`` = mean error × sens². Tolerances: 1e-9 relative for values
both sides compute in float64 by different summation orders (measured agreement ~1e-14); the
optimized coefficients to 1e-7 absolute (measured 3e-9: both optimizers stop at gradient ~1e-9).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpfl.privacy.mechanisms.correlated.banded import BandedToeplitzStrategy, optimize_banded_toeplitz
from dpfl.privacy.mechanisms.correlated.identity import IdentityStrategy
from dpfl.privacy.mechanisms.correlated.workload import prefix_rmse

REFERENCE = Path(__file__).resolve().parents[3] / "reference" / "jax_privacy_mf.json"
RTOL = 1e-9


@pytest.fixture(scope="module")
def settings() -> list[dict[str, Any]]:
    # committed: regenerate it with tests/reference/jax_privacy_mf.py, never skip without it
    assert REFERENCE.is_file(), f"{REFERENCE} is missing (tests/reference/jax_privacy_mf.py writes it)"
    data = json.loads(REFERENCE.read_text())
    assert [(s["n"], s["min_sep"], s["max_participations"]) for s in data["settings"]] == [(2000, 100, 20),
                                                                                          (2052, 342, 6)]
    return list(data["settings"])


def _check(strategy: BandedToeplitzStrategy | IdentityStrategy, entry: dict[str, Any], n: int, b: int, k: int) -> None:
    assert strategy.max_sensitivity(b, k) ** 2 == pytest.approx(entry["minsep_sensitivity_squared"], rel=RTOL)
    assert strategy.workload_error() == pytest.approx(entry["total_squared_error_unit_noise"], rel=RTOL)
    assert prefix_rmse(strategy, b, k) == pytest.approx(entry["rmse_min_sep"], rel=RTOL)


def test_identity(settings: list[dict[str, Any]]) -> None:
    for s in settings:
        _check(IdentityStrategy(s["n"]), s["identity"], s["n"], s["min_sep"], s["max_participations"])


def test_truncated_square_root(settings: list[dict[str, Any]]) -> None:
    for s in settings:
        n, b, k = s["n"], s["min_sep"], s["max_participations"]
        entry = s["fixed_banded_toeplitz"]
        strategy = BandedToeplitzStrategy(n, entry["coef"])
        assert strategy.bands == b and strategy.max_sensitivity_is_exact(b, k)
        _check(strategy, entry, n, b, k)
        dense = s["dense_crosschecks"]["fixed_banded_get_sensitivity_banded"]  # jax-privacy's dense-matrix path
        assert strategy.max_sensitivity(b, k) == pytest.approx(dense, rel=RTOL)


def test_full_square_root_more_bands_than_separation(settings: list[dict[str, Any]]) -> None:
    """C = A^{1/2} (n bands > b): the exact earliest-pattern case, against minsep_sensitivity_squared."""
    for s in settings:
        n, b, k = s["n"], s["min_sep"], s["max_participations"]
        j = np.arange(1, n)
        strategy = BandedToeplitzStrategy(n, np.cumprod(np.concatenate([[1.0], (2 * j - 1) / (2 * j)])))
        assert strategy.bands == n > b and strategy.max_sensitivity_is_exact(b, k)
        _check(strategy, s["toeplitz_sqrt_full"], n, b, k)


def test_optimizer_finds_jax_privacys_optimum(settings: list[dict[str, Any]]) -> None:
    for s in settings:
        n, b, k = s["n"], s["min_sep"], s["max_participations"]
        entry = s["optimized_banded_toeplitz"]
        theirs = BandedToeplitzStrategy(n, entry["coef"])
        _check(theirs, entry, n, b, k)
        ours = optimize_banded_toeplitz(n, b, min_separation=b, max_participations=k)
        our_loss = ours.max_sensitivity(b, k) ** 2 * ours.workload_error() / n
        assert our_loss <= entry["loss_min_sep"] * (1 + RTOL)
        assert our_loss == pytest.approx(entry["loss_min_sep"], rel=1e-9)
        np.testing.assert_allclose(ours.coefficients, entry["coef"], rtol=0, atol=1e-7)
        assert prefix_rmse(ours, b, k) == pytest.approx(entry["rmse_min_sep"], rel=1e-9)
