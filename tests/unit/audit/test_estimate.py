"""The one-shot ε estimator on synthetic cosines with a known Gaussian separation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpfl.audit.estimate import epsilon_from_mu, estimate_epsilon, separation_mu
from dpfl.privacy.calibration import analytic_gaussian_delta, analytic_gaussian_noise_std

DELTA = 1e-5


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 6.0])
def test_epsilon_from_mu_inverts_the_gaussian_curve(mu: float) -> None:
    eps = epsilon_from_mu(mu, DELTA)
    assert analytic_gaussian_delta(1.0, eps, mu) == pytest.approx(DELTA, rel=1e-6)
    # independent direction: the noise the calibration asks for at that ε is 1/μ per unit sensitivity
    assert analytic_gaussian_noise_std(eps, DELTA, 1.0) == pytest.approx(1.0 / mu, rel=1e-6)


def test_no_separation_gives_zero_and_infinite_separation_gives_inf() -> None:
    assert epsilon_from_mu(0.0, DELTA) == 0.0
    assert epsilon_from_mu(-1.0, DELTA) == 0.0
    assert epsilon_from_mu(1e-6, DELTA) == 0.0  # total variation ≈ 4e-7 below δ
    assert epsilon_from_mu(math.inf, DELTA) == math.inf


def _draw(mu: float, n_in: int, n_out: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = 1 / math.sqrt(d)  # unseen canary cosines in dimension d are ≈ N(0, 1/d)
    return rng.normal(mu * s, s, n_in), rng.normal(0.0, s, n_out)


@pytest.mark.parametrize("mu", [0.5, 1.5, 3.0])
def test_known_separation_recovered(mu: float) -> None:
    n_in, n_out = 2000, 2000
    cin, cout = _draw(mu, n_in, n_out, d=7850, seed=int(mu * 10))
    est = estimate_epsilon(cin, cout, DELTA, bootstrap=200, seed=1)
    # standard error of a two-sample standardized mean difference; tolerance 5 SE (flake ≈ 6e-7)
    se = math.sqrt(1 / n_in + 1 / n_out + mu * mu / (2 * (n_in + n_out)))
    assert abs(est.mu - mu) < 5 * se
    assert epsilon_from_mu(mu - 5 * se, DELTA) <= est.epsilon <= epsilon_from_mu(mu + 5 * se, DELTA)
    assert est.epsilon_low <= est.epsilon <= est.epsilon_high
    assert est.epsilon_low <= epsilon_from_mu(mu, DELTA) <= est.epsilon_high or abs(est.mu - mu) > 2 * se


def test_bootstrap_interval_covers_truth_most_of_the_time() -> None:
    mu, hits, trials = 1.0, 0, 40
    truth = epsilon_from_mu(mu, DELTA)
    for seed in range(trials):
        cin, cout = _draw(mu, 100, 400, d=5000, seed=100 + seed)
        est = estimate_epsilon(cin, cout, DELTA, bootstrap=200, seed=seed)
        hits += est.epsilon_low <= truth <= est.epsilon_high
    # nominal 95 %; with 40 trials P(hits < 32) is ≈ 1e-4 at 95 % coverage (binomial tail)
    assert hits >= 32


def test_scale_and_shift_invariance() -> None:
    cin, cout = _draw(2.0, 300, 300, d=1000, seed=3)
    assert separation_mu(cin * 7.0 + 1.0, cout * 7.0 + 1.0) == pytest.approx(separation_mu(cin, cout), rel=1e-12)


def test_too_few_canaries_rejected() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        estimate_epsilon(np.array([0.1]), np.zeros(10), DELTA)
