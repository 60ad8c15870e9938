"""003 Theorem 2 (eq. 17) and Theorem 3 (eq. 23) calculators, the constants' estimation, the CLI."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from dpfl.commands.bound_nbafl import register
from dpfl.errors import ConfigError
from dpfl.theory.nbafl import (
    NbaflConstants,
    estimate_constants,
    theorem2_bound,
    theorem2_curve,
    theorem3_bound,
    theorem3_curve,
)

C2 = 2 * math.log(1.25 / 0.01)  # c² at δ = 0.01
# ρ = 1, B = 1, μ = 3: λ0 = 1/2, λ1 = 2/3, λ2 = −1/3 + 1/9 + 1/18 = −1/6; l = 0.6 → P = 1 − 0.2 = 0.8
K = NbaflConstants(rho=1.0, beta=2.0, pl=0.6, dissimilarity=1.0, mu=3.0, theta=5.0)


def test_lambdas_and_p_by_hand() -> None:
    lam0, lam1, lam2 = K.lambdas()
    assert (lam0, lam1) == pytest.approx((0.5, 2 / 3)) and lam2 == pytest.approx(-1 / 6)
    assert K.p_factor() == pytest.approx(0.8)


def test_eq17_by_hand_at_t_equal_3() -> None:
    # κ1 = λ1 β c / (m (1 − P)) sqrt(2/(Nπ)), κ0 = λ0 c² / (m² (1 − P) N), eq. 18–19
    n, m, eps, t = 8, 4, 2.0, 3
    c = math.sqrt(C2)
    kappa1 = (2 / 3) * 2.0 * c / (4 * 0.2) * math.sqrt(2 / (8 * math.pi))
    kappa0 = 0.5 * C2 / (16 * 0.2 * 8)
    expected = 0.8**3 * 5.0 + (kappa1 * 3 / eps + kappa0 * 9 / eps**2) * (1 - 0.8**3)
    assert theorem2_bound(t, eps, 0.01, n, m, K) == pytest.approx(expected, rel=1e-12)
    # the factor 2C restored: κ1 × 2C, κ0 × (2C)²
    restored = 0.8**3 * 5.0 + (2 * kappa1 * 3 / eps + 4 * kappa0 * 9 / eps**2) * (1 - 0.8**3)
    assert theorem2_bound(t, eps, 0.01, n, m, K, clip_norm=1.0) == pytest.approx(restored, rel=1e-12)


def test_without_noise_the_bound_is_p_to_the_t_theta() -> None:
    for t in (1, 7, 30):
        assert theorem2_bound(t, 1e12, 0.01, 50, 600, K) == pytest.approx(0.8**t * 5.0, rel=1e-9)


def test_eq16_second_branch_replaces_t_by_l_sqrt_n() -> None:
    # T = 2 <= L sqrt(N) = 3 sqrt(4) = 6: the noise term uses 6 instead of 2
    a = theorem2_bound(2, 5.0, 0.01, 4, 3, K, exposures=3)
    noise6 = theorem2_bound(6, 5.0, 0.01, 4, 3, K) - 0.8**6 * 5.0
    noise_part = (noise6 / (1 - 0.8**6)) * (1 - 0.8**2)
    assert a == pytest.approx(0.8**2 * 5.0 + noise_part, rel=1e-12)
    assert theorem2_bound(10, 5.0, 0.01, 4, 3, K, exposures=3) == theorem2_bound(10, 5.0, 0.01, 4, 3, K)


def test_interior_optimum_moves_up_with_epsilon() -> None:
    consts = NbaflConstants(rho=1.0, beta=1.0, pl=0.05, dissimilarity=1.0, mu=3.0, theta=3.0)
    best = []
    for eps in (50.0, 60.0, 100.0):
        curve = theorem2_curve(400, eps, 0.01, 50, 1, consts)
        assert curve.best_rounds is not None and 1 < curve.best_rounds < 400  # Remark 4
        best.append(curve.best_rounds)
    assert best == sorted(best) and best[0] < best[-1]  # Fig. 8: the optimal T grows with ε


def test_contraction_out_of_range_is_a_config_error_naming_mu() -> None:
    bad = NbaflConstants(rho=1.0, beta=1.0, pl=0.1, dissimilarity=2.0, mu=1.0, theta=1.0)
    with pytest.raises(ConfigError, match="mu >"):
        theorem2_bound(5, 50.0, 0.01, 50, 600, bad)
    with pytest.raises(ConfigError, match="B"):
        NbaflConstants(rho=1.0, beta=1.0, pl=0.1, dissimilarity=0.5, mu=1.0, theta=1.0)


def test_theorem3_is_undefined_exactly_where_lemma4_is() -> None:
    consts = NbaflConstants(rho=1.0, beta=1.0, pl=0.05, dissimilarity=1.0, mu=10.0, theta=3.0)
    eps, n, k = 60.0, 50, 20
    threshold = eps / -math.log(1 - k / n)  # eq. 69: a > 0 iff T > ε / (−ln(1 − K/N)) ≈ 117.4
    curve = theorem3_curve(150, eps, 0.01, n, k, 600, consts)
    for t, v in zip(curve.rounds, curve.values, strict=True):
        assert math.isnan(v) == (t <= threshold), t
    assert curve.best_rounds is not None and curve.best_rounds > threshold
    # K = N: a = e^{−ε/T}, −ln a = ε/T; the first noise term is c α1 β sqrt(2/π) T / (m N ε)
    q = consts.q_factor(n)
    v = theorem3_bound(10, eps, 0.01, n, n, 600, consts)
    c = math.sqrt(C2)
    alpha1 = 1 + 2 / 10 + 2 * math.sqrt(50) / (10 * 50)
    alpha0 = 2 + 1
    noise = c * alpha1 * math.sqrt(2 / math.pi) * 10 / (600 * 50 * eps) + C2 * alpha0 * 100 / (600**2 * 50**2 * eps**2)
    assert v == pytest.approx(q**10 * 3.0 + (1 - q**10) / (1 - q) * noise, rel=1e-9)


def test_estimate_constants_from_metrics() -> None:
    rows = [{"round": t, "test_loss": 0.5 + 2.0 * 0.8 ** (t + 1), "update_sq_norm_mean": 4.0,
             "mean_update_sq_norm": 1.0, "local_steps": 10, "min_samples": 600} for t in range(60)]
    cfg = {"algorithm": {"options": {"prox_mu": 0.1}}, "local": {"lr": 0.01},
           "partition": {"num_clients": 50}, "sampling": {"kind": "all"}, "privacy": {"delta": 0.01}}
    est = estimate_constants(rows, cfg)
    assert est["contraction"] == pytest.approx(0.8, rel=0.02)
    assert est["theta"] == pytest.approx(2.0 * 0.8 - 2.0 * 0.8**60, rel=1e-9)
    assert est["beta"] == pytest.approx(2.0 / (0.01 * 10))  # sqrt(4) / (lr × steps)
    assert est["dissimilarity"] == pytest.approx(2.0)  # sqrt(4 / 1)
    assert (est["mu"], est["clients"], est["sampled"], est["min_samples"]) == (0.1, 50, 50, 600)
    assert set(est["not_estimated"]) == {"rho", "pl"}


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="x"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_prints_the_minimizing_t_and_plots(tmp_path, capsys) -> None:
    png = tmp_path / "b.png"
    argv = ["nbafl", "--epsilon", "50", "100", "--delta", "0.01", "--clients", "50", "--min-samples", "1",
            "--rho", "1", "--beta", "1", "--pl", "0.05", "--B", "1", "--mu", "3", "--theta", "3", "--t-max", "300"]
    assert _cli([*argv, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "minimizing T" in out and png.stat().st_size > 1000
    assert _cli([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    best = [c["best_rounds"] for c in data["curves"]]
    assert best[0] < best[1]
    assert _cli(["nbafl", "--theorem", "3", "--epsilon", "60", "--delta", "0.01", "--clients", "50", "--sampled",
                 "20", "--min-samples", "600", "--rho", "1", "--beta", "1", "--pl", "0.05", "--B", "1", "--mu",
                 "10", "--theta", "3", "--t-max", "50", "--json"]) == 0
    three = json.loads(capsys.readouterr().out)
    assert three["curves"][0]["best_rounds"] is None and three["curves"][0]["values"][0] is None
