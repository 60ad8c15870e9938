"""dpfl's BLT against jax-privacy's reference values (``tests/reference/jax_privacy_mf.json``, written by
``tests/reference/jax_privacy_mf.py``): the same BLT parameters give the same min-separation
sensitivity, prefix error and inverse; dpfl's optimizer is within 2% of jax-privacy's or better.

jax-privacy's loss (``LossFn.build_min_sep(error='mean')``) is mean per-query error × sensitivity²
= ‖A C⁻¹‖_F² / n × sens²: dpfl's :func:`blt_loss` divided by n.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.blt import BltStrategy, blt_loss, optimize_blt

REFERENCE = Path(__file__).resolve().parents[3] / "reference" / "jax_privacy_mf.json"


@pytest.fixture(scope="module")
def settings() -> list[dict[str, Any]]:
    # committed: regenerate it with tests/reference/jax_privacy_mf.py, never skip without it
    assert REFERENCE.is_file(), f"{REFERENCE} is missing (tests/reference/jax_privacy_mf.py writes it)"
    data = json.loads(REFERENCE.read_text())
    assert len(data["settings"]) == 2
    return list(data["settings"])


def _check_same_blt(entry: dict[str, Any], n: int, b: int, k: int) -> None:
    s = BltStrategy(n, entry["buf_decay"], entry["output_scale"])
    assert s.sensitivity_is_exact
    assert s.max_sensitivity(b, k) ** 2 == pytest.approx(entry["minsep_sensitivity_squared"], rel=1e-9)
    assert s.workload_error() == pytest.approx(entry["total_squared_error_unit_noise"], rel=1e-9)
    theta_hat, omega_hat = s.inverse()
    ref = sorted(zip(entry["inverse_buf_decay"], entry["inverse_output_scale"], strict=True))
    assert [t for t, _ in ref] == pytest.approx(list(theta_hat), rel=1e-8, abs=1e-12)
    assert [w for _, w in ref] == pytest.approx(list(omega_hat), rel=1e-7, abs=1e-12)
    assert blt_loss(s, min_separation=b, max_participations=k) / n == pytest.approx(entry["loss_min_sep"], rel=1e-9)


def test_fixed_blt_matches(settings: list[dict[str, Any]]) -> None:
    for setting in settings:
        n, b, k = setting["n"], setting["min_sep"], setting["max_participations"]
        _check_same_blt(setting["fixed_blt"], n, b, k)


def test_jax_privacy_optimized_blts_evaluate_the_same(settings: list[dict[str, Any]]) -> None:
    for setting in settings:
        n, b, k = setting["n"], setting["min_sep"], setting["max_participations"]
        compared = 0
        for entry in setting["optimized_blt"].values():
            if entry["failed"]:
                continue
            try:
                _check_same_blt(entry, n, b, k)
            except ConfigError:  # decays closer than dpfl accepts (a cancelled pole-zero pair)
                continue
            compared += 1
        assert compared >= 1, (n, b)


def test_optimizer_within_two_percent(settings: list[dict[str, Any]]) -> None:
    for setting in settings:
        n, b, k = setting["n"], setting["min_sep"], setting["max_participations"]
        theirs = [e["loss_min_sep"] for e in setting["optimized_blt"].values() if not e["failed"]]
        assert theirs, (n, b)
        ours = blt_loss(optimize_blt(n, min_separation=b, max_participations=k), min_separation=b,
                        max_participations=k) / n
        assert ours <= 1.02 * min(theirs), (n, b, ours, min(theirs))
