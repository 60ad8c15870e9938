"""BandedToeplitzStrategy and optimize_banded_toeplitz: Gram, sensitivity, stream, memory, error, the optimum."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from correlated_streams import held_vectors  # this folder's helper

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.banded import (
    BandedToeplitzStrategy,
    _objective,
    _sensitivity_weights,
    banded_toeplitz_loss,
    optimize_banded_toeplitz,
    workload_coefficients,
)
from dpfl.privacy.mechanisms.correlated.base import Strategy, strategy_from_dict
from dpfl.privacy.mechanisms.correlated.identity import IdentityStrategy
from dpfl.privacy.mechanisms.correlated.tree import TreeStrategy
from dpfl.privacy.mechanisms.correlated.workload import (
    momentum_coefficients,
    momentum_workload,
    prefix_rmse,
    prefix_workload,
    toeplitz_frobenius_sq,
    toeplitz_inverse,
    toeplitz_matrix,
    toeplitz_multiply,
    toeplitz_sqrt,
)

COEFFICIENTS = [[1.0], [1.0, 0.5], [2.0, -0.7, 0.3, 0.25], [1.0, 0.6, 0.45, 0.3, 0.2, 0.1, 0.05]]


@pytest.mark.parametrize("coefficients", COEFFICIENTS)
def test_gram_and_inverse(coefficients: list[float]) -> None:
    n = 11
    strategy = BandedToeplitzStrategy(n, coefficients)
    c = strategy.encoder_matrix()
    assert np.count_nonzero(np.tril(c, -len(coefficients))) == 0  # b bands
    gram = c.T @ c
    for s in range(n):
        for t in range(n):
            assert strategy.column_inner(s, t) == pytest.approx(gram[s, t], abs=1e-12)
    np.testing.assert_allclose(strategy.noise_matrix(), np.linalg.inv(c), atol=1e-12)


@pytest.mark.parametrize("coefficients", COEFFICIENTS)
def test_stream_reproduces_noise_matrix(coefficients: list[float]) -> None:
    n, num_params = 12, 6
    strategy = BandedToeplitzStrategy(n, coefficients)
    w = strategy.noise_matrix()
    for dtype, atol in ((torch.float64, 1e-12), (torch.float32, 2e-5)):
        stream = strategy.noise_stream(num_params, dtype=dtype)
        gen = torch.Generator().manual_seed(5)
        got = torch.stack([stream.next(t, gen) for t in range(n)]).double().numpy()
        gen = torch.Generator().manual_seed(5)
        z = torch.stack([torch.randn(num_params, generator=gen, dtype=dtype) for _ in range(n)]).double().numpy()
        np.testing.assert_allclose(got, w @ z, rtol=0, atol=atol)


def test_stream_output_can_be_modified_by_the_caller() -> None:
    strategy = BandedToeplitzStrategy(8, [1.0, 0.5, 0.25])
    streams = [strategy.noise_stream(4, dtype=torch.float64) for _ in range(2)]
    gens = [torch.Generator().manual_seed(9) for _ in range(2)]
    for t in range(8):
        a = streams[0].next(t, gens[0])
        b = streams[1].next(t, gens[1])
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        a.mul_(100.0)  # the stream keeps its own copy


def test_stream_covariance_is_c_inverse_c_inverse_t() -> None:
    """10^4 independent coordinates (seed 4): every entry of the sample covariance (known mean 0)
    within 5 standard errors of Σ = C⁻¹C⁻ᵀ, SE_ij = sqrt((Σ_ii Σ_jj + Σ_ij²)/P) (Gaussian fourth
    moments). Non-vacuity: the same statistic rejects Σ of c_1 off by 10%."""
    n, num_params = 10, 10_000
    strategy = BandedToeplitzStrategy(n, [1.0, 0.6, 0.45, 0.3])
    stream = strategy.noise_stream(num_params, dtype=torch.float64)
    gen = torch.Generator().manual_seed(4)
    samples = torch.stack([stream.next(t, gen) for t in range(n)]).numpy()
    sample_cov = samples @ samples.T / num_params

    def max_z(sigma: np.ndarray) -> float:
        se = np.sqrt((np.outer(np.diag(sigma), np.diag(sigma)) + sigma**2) / num_params)
        return float((np.abs(sample_cov - sigma) / se).max())

    w = strategy.noise_matrix()
    np.testing.assert_allclose(w @ w.T, np.linalg.inv(strategy.encoder_matrix().T @ strategy.encoder_matrix()),
                               atol=1e-10)
    assert max_z(w @ w.T) < 5.0
    wrong = BandedToeplitzStrategy(n, [1.0, 0.66, 0.45, 0.3]).noise_matrix()
    assert max_z(wrong @ wrong.T) > 5.0


@pytest.mark.parametrize("bands", [1, 2, 5, 17])
def test_memory_is_bands_minus_one_and_really_held(bands: int) -> None:
    strategy = BandedToeplitzStrategy(40, np.linspace(1.0, 0.1, bands))
    num_params = 101  # more than the b − 1 lag coefficients the stream also keeps
    stream = strategy.noise_stream(num_params)
    assert strategy.memory_vectors == stream.memory_vectors == bands - 1
    gen = torch.Generator().manual_seed(0)
    for t in range(40):
        stream.next(t, gen)
        assert held_vectors(stream, num_params) == bands - 1


def test_workload_error_fast_paths_match_dense() -> None:
    n = 37
    strategy = BandedToeplitzStrategy(n, [1.0, 0.4, 0.3, -0.1])
    w = strategy.noise_matrix()
    for a in (prefix_workload(n), momentum_workload(n, 0.9), momentum_workload(n, 0.5, np.linspace(1, 0.2, n))):
        assert strategy.workload_error(a) == pytest.approx(float(np.sum((a @ w) ** 2)), rel=1e-10)
    assert strategy.workload_error() == pytest.approx(float(np.sum((prefix_workload(n) @ w) ** 2)), rel=1e-10)


def test_sensitivity_cases() -> None:
    n = 20
    # bands <= b: orthogonal, earliest pattern: k whole columns (here all 4 columns 0, 5, 10, 15 whole)
    strategy = BandedToeplitzStrategy(n, [1.0, -0.5, 0.25])
    assert strategy.max_sensitivity(5, 10) == pytest.approx(math.sqrt(4 * (1 + 0.25 + 0.0625)))
    assert strategy.max_sensitivity_is_exact(5, 10)
    # the last participation's column truncated by the end of the matrix (n = 11, b = 5: 0, 5, 10)
    short = BandedToeplitzStrategy(11, [1.0, -0.5, 0.25])
    assert short.max_sensitivity(5, 3) == pytest.approx(math.sqrt(2 * 1.3125 + 1.0))
    # bands > b, mixed signs: flagged as an upper bound
    assert not strategy.max_sensitivity_is_exact(2, 5)
    # bands > b, non-negative non-increasing: exact (the earliest pattern, columns summed)
    monotone = BandedToeplitzStrategy(n, [1.0, 0.5, 0.25])
    assert monotone.max_sensitivity_is_exact(2, 3)
    total = np.zeros(n)
    for start in (0, 2, 4):
        total[start:start + 3] += [1.0, 0.5, 0.25]
    assert monotone.max_sensitivity(2, 3) == pytest.approx(float(np.linalg.norm(total)))


@pytest.mark.parametrize("workload", ["prefix", ("momentum", 0.9)])
def test_objective_gradient_matches_finite_differences(workload: str | tuple[str, float]) -> None:
    # central differences, step 1e-6 on a log-loss of order 10: truncation + rounding error < 1e-7
    n, bands = 64, 8
    a = workload_coefficients(n, workload)
    weights = _sensitivity_weights(n, bands, 8, 8)
    theta = np.random.default_rng(1).normal(size=bands - 1) * 0.1 + 0.3
    _, grad = _objective(theta, n, a, weights, workload == "prefix")
    step = 1e-6
    numeric = [(_objective(theta + step * e, n, a, weights, workload == "prefix")[0]
                - _objective(theta - step * e, n, a, weights, workload == "prefix")[0]) / (2 * step)
               for e in np.eye(bands - 1)]
    np.testing.assert_allclose(grad, numeric, atol=1e-7)


def loss(strategy: Strategy, b: int, k: int, workload: np.ndarray | None = None) -> float:
    """The papers' loss from the strategy's own methods (not the optimizer's objective)."""
    return strategy.max_sensitivity(b, k) ** 2 * strategy.workload_error(workload)


N, BANDS = 256, 16
K = -(-N // BANDS)


@pytest.fixture(scope="module")
def optimized() -> BandedToeplitzStrategy:
    return optimize_banded_toeplitz(N, BANDS)


def test_optimized_beats_the_start_identity_and_tree(optimized: BandedToeplitzStrategy) -> None:
    start = BandedToeplitzStrategy(N, toeplitz_sqrt(np.ones(N), BANDS))
    best = loss(optimized, BANDS, K)
    assert best == pytest.approx(banded_toeplitz_loss(optimized.coefficients, N), rel=1e-10)
    assert np.linalg.norm(optimized.coefficients) == pytest.approx(1.0, rel=1e-14)
    assert best < 0.95 * loss(start, BANDS, K)  # measured: 54198 vs 60969
    assert best < loss(IdentityStrategy(N), BANDS, K)
    for tree in (TreeStrategy(N), TreeStrategy(N, BANDS), TreeStrategy(N, 2 * BANDS)):
        assert tree.max_sensitivity_is_exact(BANDS, K)  # compared with the tree's exact loss, not a bound
        assert best < loss(tree, BANDS, K)
    assert prefix_rmse(optimized, BANDS, K) == pytest.approx(math.sqrt(best / N), rel=1e-12)


def _perturbation_lowers(strategy_c: np.ndarray, seed: int, scale: float) -> int:
    """How many of 20 random perturbations (relative size ``scale``) lower the loss."""
    rng = np.random.default_rng(seed)
    base = loss(BandedToeplitzStrategy(N, strategy_c), BANDS, K)
    lowered = 0
    for _ in range(20):
        delta = rng.normal(size=strategy_c.size)
        delta *= scale * np.linalg.norm(strategy_c) / np.linalg.norm(delta)
        # relative 1e-12: the loss's own float64 rounding (a few hundred terms of size ~loss/n)
        if loss(BandedToeplitzStrategy(N, strategy_c + delta), BANDS, K) < base * (1 - 1e-12):
            lowered += 1
    return lowered


@pytest.mark.parametrize("seed", range(4))
def test_optimized_is_a_local_minimum(optimized: BandedToeplitzStrategy, seed: int) -> None:
    for scale in (1e-2, 1e-3, 1e-4):
        assert _perturbation_lowers(np.array(optimized.coefficients), seed, scale) == 0


def test_the_perturbation_check_can_fail() -> None:
    """Non-vacuity: at the (non-optimal) start, random perturbations do lower the loss."""
    start = toeplitz_sqrt(np.ones(N), BANDS)
    assert _perturbation_lowers(start, 0, 1e-3) > 0


def test_optimizer_is_deterministic_and_round_trips(optimized: BandedToeplitzStrategy) -> None:
    again = optimize_banded_toeplitz(N, BANDS)
    assert again.coefficients.tobytes() == optimized.coefficients.tobytes()
    restored = strategy_from_dict(optimized.to_dict())
    assert isinstance(restored, BandedToeplitzStrategy)
    assert restored.coefficients.tobytes() == optimized.coefficients.tobytes()


def test_optimizer_momentum_and_other_schemas() -> None:
    n, bands = 128, 8
    a = momentum_workload(n, 0.9)
    opt = optimize_banded_toeplitz(n, bands, workload=("momentum", 0.9))
    start = BandedToeplitzStrategy(n, toeplitz_sqrt(workload_coefficients(n, ("momentum", 0.9)), bands))
    k = -(-n // bands)
    assert loss(opt, bands, k, a) < loss(start, bands, k, a) < loss(IdentityStrategy(n), bands, k, a)
    # larger separation and capped participations (columns of the last participation truncated)
    opt2 = optimize_banded_toeplitz(100, 8, min_separation=30, max_participations=3)
    assert loss(opt2, 30, 3) == pytest.approx(banded_toeplitz_loss(opt2.coefficients, 100, min_separation=30,
                                                                   max_participations=3), rel=1e-10)
    assert loss(opt2, 30, 3) < loss(BandedToeplitzStrategy(100, toeplitz_sqrt(np.ones(8), 8)), 30, 3)


def test_errors() -> None:
    with pytest.raises(ConfigError):
        optimize_banded_toeplitz(100, 20, min_separation=10)  # bands > min separation
    with pytest.raises(ConfigError):
        optimize_banded_toeplitz(10, 11)
    with pytest.raises(ConfigError):
        optimize_banded_toeplitz(10, 2, workload="suffix")
    with pytest.raises(ConfigError):
        BandedToeplitzStrategy(5, [0.0, 1.0])
    with pytest.raises(ConfigError):
        BandedToeplitzStrategy(2, [1.0, 0.5, 0.2])
    with pytest.raises(ConfigError):
        BandedToeplitzStrategy(5, [])
    with pytest.raises(ConfigError):
        BandedToeplitzStrategy(5, [1.0, float("nan")])


def test_momentum_workload_is_heavy_ball_sgds_total_movement() -> None:
    """A·g = θ_0 − θ_{t+1} under m_τ = β m_{τ−1} + g_τ, θ_{τ+1} = θ_τ − η_τ m_τ (simulated)."""
    n, beta = 9, 0.8
    eta = np.linspace(0.5, 1.5, n)
    g = np.random.default_rng(2).normal(size=n)
    theta, m, moved = 0.0, 0.0, []
    for tau in range(n):
        m = beta * m + g[tau]
        theta -= eta[tau] * m
        moved.append(-theta)
    np.testing.assert_allclose(momentum_workload(n, beta, eta) @ g, moved, rtol=1e-12)
    np.testing.assert_allclose(momentum_workload(n, 0.0), prefix_workload(n))
    with pytest.raises(ConfigError):
        momentum_workload(n, 1.0)
    with pytest.raises(ConfigError):
        momentum_workload(n, 0.5, [1.0, 2.0])


def test_toeplitz_helpers_match_dense_algebra() -> None:
    n = 12
    rng = np.random.default_rng(3)
    a = np.concatenate([[1.5], rng.normal(size=n - 1)])
    b = rng.normal(size=5)
    dense_a, dense_b = toeplitz_matrix(a, n), toeplitz_matrix(b, n)
    np.testing.assert_allclose(toeplitz_matrix(toeplitz_multiply(a, b, n), n), dense_a @ dense_b, atol=1e-12)
    np.testing.assert_allclose(toeplitz_matrix(toeplitz_inverse(a, n), n), np.linalg.inv(dense_a), atol=1e-9)
    root = toeplitz_matrix(toeplitz_sqrt(momentum_coefficients(n, 0.9), n), n)
    np.testing.assert_allclose(root @ root, momentum_workload(n, 0.9), atol=1e-12)
    # (1 − x)^{−1/2}: r_k = Π_{j<=k} (2j − 1)/(2j)
    expected = np.cumprod([1.0] + [(2 * j - 1) / (2 * j) for j in range(1, n)])
    np.testing.assert_allclose(toeplitz_sqrt(np.ones(n), n), expected, rtol=1e-14)
    assert toeplitz_frobenius_sq(a, n) == pytest.approx(float(np.sum(dense_a**2)), rel=1e-13)
    long = rng.normal(size=300)  # the FFT path of the convolution (> 64 terms)
    np.testing.assert_allclose(toeplitz_multiply(long, long[::-1].copy(), 300), np.convolve(long, long[::-1])[:300],
                               atol=1e-10)
