"""The audit's reach: the analytic cap against hand computations and simulated canaries, the
model's fitted signal, and the three verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpfl.audit.estimate import epsilon_from_mu, estimate_epsilon
from dpfl.audit.reach import (
    predicted_reach,
    reach_advice,
    reach_cap,
    reach_mu,
    signal_ratio,
    verdict,
)

DELTA = 1e-5


def test_cap_with_every_canary_in_every_round_is_sqrt_d_over_m_by_hand() -> None:
    # m = 100 canaries in all 10 rounds, n = 1000 unseen, d = 7850, confidence 0.95.
    # E[p] = 10, Var(p) = 0: mean difference 1/sqrt(m) = 0.1; var_in = var_out = pooled = 1/d;
    # mu = 0.1 * sqrt(7850) = sqrt(78.5) = 8.860023
    # se^2 = 1/100 + 1/1000 + 78.5 / (2 * 1100) = 0.011 + 0.0356818 = 0.0466818, se = 0.2160597
    # z = 1.959964, lower end 8.860023 - 1.959964 * 0.2160597 = 8.860023 - 0.423470 = 8.436553
    mu, low = reach_mu(1000, 7850, np.full(100, 10), confidence=0.95)
    assert mu == pytest.approx(8.860023, abs=1e-6)
    assert low == pytest.approx(8.436553, abs=1e-6)
    assert reach_cap(1000, 7850, np.full(100, 10), delta=DELTA, confidence=0.95) == pytest.approx(
        epsilon_from_mu(8.436553, DELTA), rel=1e-6)


def test_cap_with_uneven_participation_by_hand() -> None:
    # m = 4 canaries joining 2, 4, 2, 4 rounds; n = 4 unseen; d = 100; confidence 0.90.
    # E[p] = 3, E[p^2] = 10, Var(p) = 1: difference 3 / sqrt(10 * 4) = 0.4743416;
    # var_in = 1/40 + 1/100 = 0.035, var_out = 0.01, pooled = (3 * 0.035 + 3 * 0.01) / 6 = 0.0225;
    # mu = 0.4743416 / 0.15 = 3.1622777; se^2 = (0.035/4 + 0.01/4) / 0.0225 + 10/16 = 1.125;
    # z = 1.6448536, lower end 3.1622777 - 1.6448536 * 1.0606602 = 3.1622777 - 1.7446308 = 1.4176469
    mu, low = reach_mu(4, 100, [2, 4, 2, 4], confidence=0.90)
    assert mu == pytest.approx(3.1622777, abs=1e-6)
    assert low == pytest.approx(1.4176469, abs=1e-6)


def test_cap_falls_with_more_canaries_and_with_higher_confidence() -> None:
    caps = [reach_cap(1000, 7850, np.full(m, 30), delta=DELTA, confidence=0.95) for m in (10, 50, 100, 400)]
    assert caps == sorted(caps, reverse=True)  # the canaries crowd one another
    by_conf = [reach_cap(1000, 7850, np.full(100, 30), delta=DELTA, confidence=c) for c in (0.5, 0.9, 0.99)]
    assert by_conf == sorted(by_conf, reverse=True)
    # a training signal only lowers it
    assert predicted_reach(100, 1000, 7850, np.full(100, 30), signal=500.0, delta=DELTA, confidence=0.95) < caps[2]


@pytest.mark.parametrize("signal", [0.0, 300.0])
def test_model_matches_simulated_noise_free_canaries(signal: float) -> None:
    """Real unit vectors in R^d: the final change is the canaries' sum (each joins Bin(10, 0.5)
    rounds) plus a random training signal of energy r·E[p²]; the estimator's μ on it matches the
    model's, and the fitted r matches the r put in."""
    rng = np.random.default_rng(7)
    m, n, d = 200, 1000, 4000
    p = rng.binomial(10, 0.5, m).astype(float)
    dirs = rng.standard_normal((m + n, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    s = rng.standard_normal(d)
    s *= math.sqrt(signal * float((p * p).mean())) / np.linalg.norm(s)
    change = p @ dirs[:m] + s
    cos = dirs @ change / np.linalg.norm(change)
    est = estimate_epsilon(cos[:m], cos[m:], DELTA, bootstrap=400, seed=3)
    mu, low = reach_mu(n, d, p, confidence=0.95, signal=signal)
    se = (mu - low) / 1.959964
    assert abs(est.mu - mu) < 3 * se  # 3 standard errors (two-sided flake ≈ 0.3 %)
    # the bootstrap's lower end against the model's normal approximation (over seeds 0..29: within 13 %)
    assert est.epsilon_low == pytest.approx(epsilon_from_mu(low, DELTA), rel=0.15)
    fitted = signal_ratio(est.mean_inserted - est.mean_unseen, p)
    # r + m is what the mean difference measures: relative error ≈ 2·(its relative error)
    rel = 2 * (1.0 / math.sqrt(d)) * math.sqrt(1 / m + 1 / n) / (est.mean_inserted - est.mean_unseen)
    assert fitted + m == pytest.approx(signal + m, rel=3 * rel)


def test_signal_ratio_edge_cases() -> None:
    assert signal_ratio(0.0, [1, 2, 3]) == math.inf
    assert signal_ratio(-0.01, [1, 2, 3]) == math.inf
    assert signal_ratio(10.0, [1, 1, 1]) == 0.0  # more separated than canaries alone: clipped at 0
    with pytest.raises(ValueError, match="no canary joined"):
        signal_ratio(0.1, [0, 0, 0])


def test_verdict_has_three_outcomes() -> None:
    assert verdict(empirical_low=12.0, reach=30.0, certified=10.0) == "violation"
    assert verdict(empirical_low=12.0, reach=5.0, certified=10.0) == "violation"  # seen beats reach
    assert verdict(empirical_low=3.0, reach=30.0, certified=10.0) == "consistent"
    assert verdict(empirical_low=3.0, reach=10.0, certified=10.0) == "consistent"
    assert verdict(empirical_low=3.0, reach=9.9, certified=10.0) == "inconclusive"
    assert verdict(empirical_low=3.0, reach=9.9, certified=None) is None


def test_advice_names_the_canary_count_only_when_it_reaches_the_certificate() -> None:
    base = {"canaries": 100, "certified_epsilon_public": 20.0, "dimension": 7850, "reach_canary_share": 0.12}
    reaches = {**base, "reach_best_canaries": {"canaries": 25, "reach": 22.0}}
    assert reaches["reach_best_canaries"]["reach"] >= 20.0
    assert "25 canaries instead of 100" in reach_advice(reaches)
    short = {**base, "reach_best_canaries": {"canaries": 50, "reach": 15.2}}
    text = reach_advice(short)
    assert "no canary count reaches the certificate" in text and "training signal (canaries: 12% of it)" in text
    assert "larger model" in text and "d = 7850" in text
    crowded = {**base, "reach_canary_share": 0.8, "reach_best_canaries": None}
    assert "crowd one another" in reach_advice(crowded)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="confidence"):
        reach_mu(100, 10, [1, 2], confidence=1.0)
    with pytest.raises(ValueError, match="participations"):
        reach_mu(100, 10, [1], confidence=0.9)
    with pytest.raises(ValueError, match="num_unseen"):
        reach_mu(1, 10, [1, 2], confidence=0.9)
    with pytest.raises(ValueError, match="signal"):
        reach_mu(100, 10, [1, 2], confidence=0.9, signal=-1.0)
