"""BLT factorizations: min-separation sensitivity against brute force over every pattern, the inverse's
closed form, the d-buffer noise stream (exact values, covariance, memory), the optimizer's optimum."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import strategy_from_dict
from dpfl.privacy.mechanisms.correlated.blt import (
    BltStrategy,
    blt_loss,
    initial_blts,
    max_participations,
    optimize_blt,
)

# hand-picked BLTs: (θ, ω, is the sensitivity exact)
REGULAR_1 = ((0.95,), (0.9,))  # ω > 0, Σω < 1: coefficients positive, decreasing
REGULAR_3 = ((0.2, 0.7, 0.95), (0.1, 0.2, 0.3))
MIXED_MONOTONE = ((0.23, 0.29, 0.73), (-0.05, 0.14, 0.58))  # one ω < 0, coefficients still decreasing
INCREASING = ((0.5, 0.9), (0.6, 0.6))  # c_1 = 1.2 > c_0 = 1: upper bound only
NEGATIVE = ((0.5, 0.6), (1.0, -1.0))  # c_j = 0.5^{j-1} - 0.6^{j-1} < 0: upper bound only
HAND_PICKED = [REGULAR_1, REGULAR_3, MIXED_MONOTONE, INCREASING, NEGATIVE]
EXACT = {REGULAR_1: True, REGULAR_3: True, MIXED_MONOTONE: True, INCREASING: False, NEGATIVE: False}
SCHEMAS = [(1, 99), (1, 3), (2, 4), (3, 2), (4, 3), (5, 2), (7, 1), (20, 2)]  # (b, k)


@pytest.fixture(scope="module")
def optimized_small() -> BltStrategy:
    return optimize_blt(14, min_separation=3, num_buffers=3)


def _brute_force_sensitivity(gram: np.ndarray, b: int, k: int) -> float:
    """max over every pattern (<= k rounds, consecutive >= b apart) of sqrt(Σ_{i,j} |G_{s_i s_j}|)."""
    absg = np.abs(gram)
    n = absg.shape[0]
    best = 0.0

    def walk(first: int, count: int, total: float, pattern: list[int]) -> None:
        nonlocal best
        best = max(best, total)
        if count == k:
            return
        for t in range(first, n):
            inc = absg[t, t] + 2.0 * sum(absg[s, t] for s in pattern)
            pattern.append(t)
            walk(t + b, count + 1, total + inc, pattern)
            pattern.pop()

    walk(0, 0, 0.0, [])
    return math.sqrt(best)


# ---------------------------------------------------------------------------------------------
# (1) sensitivity
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params", HAND_PICKED, ids=lambda p: str(p))
def test_max_sensitivity_against_every_pattern_hand_picked(params: tuple) -> None:
    n = 12
    s = BltStrategy(n, *params)
    assert s.sensitivity_is_exact is EXACT[params]
    gram = s.encoder_matrix().T @ s.encoder_matrix()
    for b, k in SCHEMAS:
        brute = _brute_force_sensitivity(gram, b, k)
        got = s.max_sensitivity(b, k)
        if s.sensitivity_is_exact:
            assert got == pytest.approx(brute, rel=1e-12), (b, k)
        else:
            assert got >= brute * (1 - 1e-12), (b, k)  # never an under-estimate
    if not s.sensitivity_is_exact:  # the bound is strict somewhere for these two (not a disguised equality)
        assert any(s.max_sensitivity(b, k) > 1.001 * _brute_force_sensitivity(gram, b, k) for b, k in SCHEMAS)


def test_max_sensitivity_against_every_pattern_optimized(optimized_small: BltStrategy) -> None:
    s = optimized_small
    assert s.sensitivity_is_exact
    gram = s.encoder_matrix().T @ s.encoder_matrix()
    assert np.all(gram >= 0)
    for b, k in SCHEMAS + [(3, 5), (3, 99)]:
        assert s.max_sensitivity(b, k) == pytest.approx(_brute_force_sensitivity(gram, b, k), rel=1e-12), (b, k)


def test_upper_bound_is_the_majorant_pattern() -> None:
    """The bound (non-monotone coefficients) is the 0, b, 2b, … pattern of c̃_j = max_{m>=j} |c_m|."""
    n = 50
    for params in (INCREASING, NEGATIVE):
        s = BltStrategy(n, *params)
        c = np.abs(s.coefficients())
        major = np.array([c[j:].max() for j in range(n)])
        for b, k in [(1, 50), (1, 4), (3, 7), (7, 3), (49, 2), (60, 3)]:
            v = np.zeros(n)
            for i in range(min(k, -(-n // b))):
                v[i * b:] += major[: n - i * b]
            assert s.max_sensitivity(b, k) == pytest.approx(float(np.linalg.norm(v)), rel=1e-12)


def test_max_sensitivity_n16_all_patterns() -> None:
    s = BltStrategy(16, *REGULAR_3)
    gram = s.encoder_matrix().T @ s.encoder_matrix()
    for b, k in [(1, 16), (2, 5), (3, 3), (6, 3)]:
        assert s.max_sensitivity(b, k) == pytest.approx(_brute_force_sensitivity(gram, b, k), rel=1e-12)


def test_sensitivity_increments_sum_to_the_pattern_and_column_inner_is_the_gram() -> None:
    for params in HAND_PICKED:
        s = BltStrategy(12, *params)
        gram = s.encoder_matrix().T @ s.encoder_matrix()
        for i in range(12):
            for j in range(12):
                assert s.column_inner(i, j) == pytest.approx(gram[i, j], rel=1e-12, abs=1e-14)
        for pattern in ([0, 3, 6, 9], [1, 2, 11], [0, 5], [4], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]):
            total = sum(s.sensitivity_increment(t, pattern[:i]) for i, t in enumerate(pattern))
            sub = np.abs(gram[np.ix_(pattern, pattern)]).sum()
            assert total == pytest.approx(sub, rel=1e-12)


def test_max_sensitivity_is_the_0_b_2b_pattern_via_column_inner_large_n() -> None:
    s = BltStrategy(2000, *REGULAR_3)
    for b, k in [(100, 20), (100, 7), (342, 6), (1, 3), (1999, 5), (5000, 2)]:
        kk = min(k, max_participations(2000, b))
        pattern = [i * b for i in range(kk)]
        direct = sum(s.column_inner(p, q) for p in pattern for q in pattern)
        assert s.max_sensitivity(b, k) ** 2 == pytest.approx(direct, rel=1e-12)
        # and the sum of the columns, computed from the dense coefficients
        c = s.coefficients()
        v = np.zeros(2000)
        for p in pattern:
            v[p:] += c[: 2000 - p]
        assert s.max_sensitivity(b, k) == pytest.approx(float(np.linalg.norm(v)), rel=1e-12)
    assert max_participations(2000, 100) == 20 and max_participations(2052, 342) == 6
    assert max_participations(2001, 100) == 21


# ---------------------------------------------------------------------------------------------
# (2) inverse, noise stream
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params", HAND_PICKED, ids=lambda p: str(p))
def test_inverse_closed_form(params: tuple) -> None:
    n = 64
    s = BltStrategy(n, *params)
    c, w = s.encoder_matrix(), s.noise_matrix()
    assert np.abs(c @ w - np.eye(n)).max() < 1e-12
    assert np.abs(w @ c - np.eye(n)).max() < 1e-12
    theta_hat, omega_hat = s.inverse()
    if min(theta_hat) > 0:  # the inverse is a BLT: its own inverse is C again
        inv = BltStrategy(n, theta_hat, omega_hat)
        assert np.allclose(inv.noise_matrix(), c, rtol=0, atol=1e-12)


def test_regular_inverse_interlaces(optimized_small: BltStrategy) -> None:
    for s in [BltStrategy(20, *REGULAR_1), BltStrategy(20, *REGULAR_3), optimized_small]:
        theta_hat, omega_hat = s.inverse()
        merged = sorted([(t, "hat") for t in theta_hat] + [(t, "c") for t in s.buffer_decays])
        assert [kind for _, kind in merged] == ["hat", "c"] * s.num_buffers
        assert all(w < 0 for w in omega_hat)
        assert (min(theta_hat) > 0) == (s.pillutla_score < 1)


def _generators(n: int, seed: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed * 1000 + t) for t in range(n)]


@pytest.mark.parametrize("params", HAND_PICKED, ids=lambda p: str(p))
def test_stream_equals_noise_matrix_times_z(params: tuple) -> None:
    n, p = 12, 7
    s = BltStrategy(n, *params)
    stream = s.noise_stream(p, dtype=torch.float64)
    ws = torch.stack([stream.next(t, g) for t, g in enumerate(_generators(n, 3))])
    zs = torch.stack([torch.randn(p, generator=g, dtype=torch.float64) for g in _generators(n, 3)])
    assert torch.allclose(ws, torch.from_numpy(s.noise_matrix()) @ zs, rtol=0, atol=1e-12)
    with pytest.raises(ConfigError, match="past"):
        stream.next(n, torch.Generator())


def test_stream_float32_and_order() -> None:
    s = BltStrategy(30, *REGULAR_3)
    stream = s.noise_stream(5)
    with pytest.raises(ConfigError, match="round 1"):
        stream.next(1, torch.Generator())
    ws = torch.stack([stream.next(t, g) for t, g in enumerate(_generators(30, 4))])
    assert ws.dtype == torch.float32
    zs = torch.stack([torch.randn(5, generator=g, dtype=torch.float32) for g in _generators(30, 4)]).double()
    assert torch.allclose(ws.double(), torch.from_numpy(s.noise_matrix()) @ zs, rtol=0, atol=1e-5)
    with pytest.raises(ConfigError):
        stream.next(29, torch.Generator())


def test_stream_covariance(optimized_small: BltStrategy) -> None:
    """10^4 independent streams (one per coordinate), n rounds: the empirical covariance of w
    (zero mean known) against Σ = C⁻¹C⁻ᵀ. Its entry (i, j) has standard error
    sqrt((Σ_ii Σ_jj + Σ_ij²)/N) (Isserlis); every entry must lie within 5 of them. The same
    statistic against the wrong covariance (independent noise) fails, so the check has power."""
    s = optimized_small
    n, num = s.n, 10_000
    stream = s.noise_stream(num, dtype=torch.float64)
    w = torch.stack([stream.next(t, g) for t, g in enumerate(_generators(n, 11))]).numpy()
    emp = w @ w.T / num
    sigma = s.noise_matrix() @ s.noise_matrix().T
    se = np.sqrt((np.outer(np.diag(sigma), np.diag(sigma)) + sigma**2) / num)
    assert np.all(np.abs(emp - sigma) <= 5 * se)
    wrong = np.diag(np.diag(sigma))
    assert np.sum(np.abs(emp - wrong) > 5 * se) > n


def test_stream_holds_exactly_d_vectors() -> None:
    for params in HAND_PICKED:
        s = BltStrategy(20, *params)
        p = 1000
        stream = s.noise_stream(p)
        d = s.num_buffers
        assert stream.memory_vectors == s.memory_vectors == d
        for t, g in enumerate(_generators(5, 1)):
            stream.next(t, g)
            tensors = [v for v in vars(stream).values() if isinstance(v, torch.Tensor)]
            big = [v for v in tensors if v.numel() >= p]
            assert sum(v.numel() for v in big) == d * p
            assert sum(v.numel() for v in tensors) == d * p + 2 * d  # + θ and ω


# ---------------------------------------------------------------------------------------------
# workload error, serialization, validation
# ---------------------------------------------------------------------------------------------


def test_workload_error_against_dense() -> None:
    n = 40
    idx = np.arange(n)
    lag = idx[:, None] - idx[None, :]
    prefix = (lag >= 0).astype(float)
    beta = 0.9
    momentum = np.where(lag >= 0, (1 - beta ** (np.clip(lag, 0, None) + 1)) / (1 - beta), 0.0)
    for params in HAND_PICKED:
        s = BltStrategy(n, *params)
        w = np.linalg.inv(s.encoder_matrix())
        assert s.workload_error() == pytest.approx(np.sum((prefix @ w) ** 2), rel=1e-12)
        assert s.workload_error("prefix") == s.workload_error()
        assert s.workload_error(prefix) == pytest.approx(np.sum((prefix @ w) ** 2), rel=1e-12)
        assert s.workload_error(("momentum", beta)) == pytest.approx(np.sum((momentum @ w) ** 2), rel=1e-10)
    identity_like = BltStrategy(n, (0.5,), (1e-9,))  # C ≈ I
    assert identity_like.workload_error() == pytest.approx(n * (n + 1) / 2, rel=1e-6)


def test_round_trip_exact(optimized_small: BltStrategy) -> None:
    for strategy in [optimized_small, BltStrategy(7, *MIXED_MONOTONE), BltStrategy(2000, *REGULAR_3)]:
        data = json.loads(json.dumps(strategy.to_dict()))
        assert data["kind"] == "blt"
        back = strategy_from_dict(data)
        assert isinstance(back, BltStrategy)
        assert back.to_dict() == strategy.to_dict()
        assert back.buffer_decays == strategy.buffer_decays and back.output_scales == strategy.output_scales
        assert all(isinstance(x, float) for x in data["buffer_decays"] + data["output_scales"])


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, (0.5,), (0.1,)), "n"),
        ((10, (1.0,), (0.1,)), "buffer_decays"),
        ((10, (0.0,), (0.1,)), "buffer_decays"),
        ((10, (0.5, 0.5), (0.1, 0.2)), "distinct"),
        ((10, (0.5, 0.6), (0.1,)), "same length"),
        ((10, (0.5,), (0.0,)), "non-zero"),
        ((10, (0.5,), (float("nan"),)), "finite"),
        ((10, (0.5,), (5.0,)), "outside"),  # inverse decay −4.5: noise grows
        ((10, (0.5, 0.6), (-1.0, 1.0)), "not a real BLT"),
        ((10, (), ()), "buffers"),
        ((10, "ab", (0.1,)), "sequence"),
    ],
)
def test_bad_parameters(args: tuple, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BltStrategy(*args)


def test_bad_arguments() -> None:
    s = BltStrategy(10, *REGULAR_1)
    for b, k in [(0, 1), (1, 0), (1.5, 2), (True, 2)]:
        with pytest.raises(ConfigError):
            s.max_sensitivity(b, k)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="round"):
        s.column_inner(0, 10)
    with pytest.raises(ConfigError, match="workload"):
        s.workload_error("suffix")
    with pytest.raises(ConfigError, match="beta"):
        s.workload_error(("momentum", 1.0))
    with pytest.raises(ConfigError, match="matrix"):
        s.workload_error(np.ones((3, 3)))
    with pytest.raises(ConfigError):
        BltStrategy.from_dict({"kind": "blt", "n": 3, "buffer_decays": [0.5]})
    with pytest.raises(ConfigError):
        optimize_blt(10, min_separation=0)
    with pytest.raises(ConfigError):
        s.noise_stream(0)


# ---------------------------------------------------------------------------------------------
# (3) the optimizer
# ---------------------------------------------------------------------------------------------


def _perturbed_losses(s: BltStrategy, b: int, seeds: range, eps: float) -> list[float]:
    out = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        theta = np.array(s.buffer_decays) * (1 + eps * rng.standard_normal(s.num_buffers))
        omega = np.array(s.output_scales) * (1 + eps * rng.standard_normal(s.num_buffers))
        out.append(blt_loss(BltStrategy(s.n, tuple(theta.tolist()), tuple(omega.tolist())), min_separation=b))
    return out


def test_optimizer_reaches_an_optimum() -> None:
    n, b = 256, 16
    k = max_participations(n, b)
    s = optimize_blt(n, min_separation=b)
    loss = blt_loss(s, min_separation=b)
    assert s.sensitivity_is_exact and s.num_buffers <= 4
    assert loss < 0.2 * k * n * (n + 1) / 2  # identity: k·n(n+1)/2
    starts = initial_blts(n, 4)
    assert len(starts) >= 2
    assert all(loss < 0.9 * blt_loss(start, min_separation=b) for start in starts)
    for eps in (1e-3, 1e-5):
        perturbed = _perturbed_losses(s, b, range(8), eps)
        assert min(perturbed) >= loss * (1 - 1e-13)
        assert max(perturbed) > loss  # the loss does move: the check is not vacuous


def test_optimizer_deterministic_and_momentum() -> None:
    a = optimize_blt(48, min_separation=6, num_buffers=3, workload=("momentum", 0.9))
    b = optimize_blt(48, min_separation=6, num_buffers=3, workload=("momentum", 0.9))
    assert a.to_dict() == b.to_dict()
    loss = blt_loss(a, min_separation=6, workload=("momentum", 0.9))
    assert all(loss < blt_loss(start, min_separation=6, workload=("momentum", 0.9)) for start in initial_blts(48, 3))
    perturbed = [
        blt_loss(x, min_separation=6, workload=("momentum", 0.9))
        for x in (
            BltStrategy(48, tuple(np.array(a.buffer_decays) * (1 + 1e-4 * np.random.default_rng(i).standard_normal(
                a.num_buffers))), a.output_scales)
            for i in range(4)
        )
    ]
    assert min(perturbed) >= loss * (1 - 1e-13)


def test_optimizer_single_participation_beats_identity_by_far() -> None:
    n = 200
    s = optimize_blt(n, min_separation=n, num_buffers=3)
    loss = blt_loss(s, min_separation=n)
    # the optimal Toeplitz factorization's loss grows like n·log(n)²/π² against identity's n²/2
    assert loss < 0.1 * n * (n + 1) / 2
    assert s.num_buffers >= 2  # single participation genuinely uses several buffers


@pytest.mark.slow
def test_optimizer_target_settings_time() -> None:
    import time

    for n, b in [(2000, 100), (2052, 342)]:
        t0 = time.perf_counter()
        s = optimize_blt(n, min_separation=b)
        assert time.perf_counter() - t0 < 60
        loss = blt_loss(s, min_separation=b)
        assert loss < 0.05 * max_participations(n, b) * n * (n + 1) / 2


def test_a_vanishing_decay_keeps_the_gram_entries_finite() -> None:
    """The optimizer can return a decay of order 1e-9 (n = 3, momentum workload): 1 − θ² then rounds
    to 1 in float64, and the Gram entries must still equal the dense CᵀC (they were NaN once)."""
    from dpfl.privacy.mechanisms.correlated.blt import BltStrategy

    s = BltStrategy(5, (1.3e-9, 0.5), (6.8e-12, 0.2))
    c = s.encoder_matrix()
    gram = c.T @ c
    got = np.array([[s.column_inner(a, b) for b in range(5)] for a in range(5)])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, gram, rtol=1e-12, atol=1e-15)
