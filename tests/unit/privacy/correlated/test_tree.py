"""TreeStrategy: release structure, Honaker's online estimator, the stream, memory, and dp-accounting's tree event."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
import torch
from correlated_streams import held_vectors  # this folder's helper
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import strategy_from_dict
from dpfl.privacy.mechanisms.correlated.tree import TreeStrategy, honaker_variance
from dpfl.privacy.mechanisms.correlated.workload import momentum_workload, prefix_workload

CASES = [(1, None), (2, None), (7, None), (8, None), (13, None), (16, None), (13, 5), (20, 8), (9, 1), (12, 4)]


def plain_tree_noise_matrix(tree: TreeStrategy) -> np.ndarray:
    """W of the plain tree (prefix = sum of the noisy nodes of the dyadic decomposition), for contrast."""
    c = tree.encoder_matrix()
    row_of = {(int(np.flatnonzero(r)[0]), int(np.flatnonzero(r)[-1])): i for i, r in enumerate(c)}
    w = np.zeros((tree.n, c.shape[0]))
    start = 0
    for size in tree.tree_sizes:
        previous = np.zeros(c.shape[0])
        for leaf in range(size):
            prefix = np.zeros(c.shape[0])
            covered = 0
            for h in reversed(range((leaf + 1).bit_length())):
                if (leaf + 1) >> h & 1:
                    prefix[row_of[(start + covered, start + covered + (1 << h) - 1)]] = 1.0
                    covered += 1 << h
            w[start + leaf] = prefix - previous
            previous = prefix
        start += size
    return w


@pytest.mark.parametrize(("n", "restart"), CASES)
def test_encoder_releases_completed_dyadic_nodes_only(n: int, restart: int | None) -> None:
    tree = TreeStrategy(n, restart)
    c = tree.encoder_matrix()
    expected_rows = sum(size >> h for size in tree.tree_sizes for h in range(size.bit_length()))
    assert c.shape == (expected_rows, n)
    starts = np.cumsum((0,) + tree.tree_sizes[:-1])
    release_round = []
    for row in c:
        cols = np.flatnonzero(row)
        length = len(cols)
        assert np.array_equal(cols, np.arange(cols[0], cols[0] + length))  # an interval
        assert length & (length - 1) == 0  # of a power-of-two length
        tree_start = starts[np.searchsorted(starts, cols[0], side="right") - 1]
        assert (cols[0] - tree_start) % length == 0  # aligned: a dyadic node
        assert cols[-1] < tree_start + tree.tree_sizes[list(starts).index(tree_start)]  # inside its tree
        release_round.append(cols[-1])
    assert release_round == sorted(release_round)  # rows in release order
    gram = c.T @ c
    for s in range(n):
        for t in range(n):
            assert tree.column_inner(s, t) == gram[s, t]
        assert tree.column_norm_sq(s) == gram[s, s]


@pytest.mark.parametrize(("n", "restart"), CASES)
def test_honaker_estimator_is_unbiased_with_the_stated_variances(n: int, restart: int | None) -> None:
    tree = TreeStrategy(n, restart)
    w, c = tree.noise_matrix(), tree.encoder_matrix()
    # unbiased: the streamed noise w = W z comes with W C = I, i.e. B C = A (prefix sums)
    np.testing.assert_allclose(w @ c, np.eye(n), atol=1e-12)
    a = prefix_workload(n)
    variances = np.diag(a @ w @ w.T @ a.T)
    np.testing.assert_allclose(variances, tree.prefix_variances(), rtol=1e-12)
    assert tree.workload_error() == pytest.approx(float(np.sum((a @ w) ** 2)), rel=1e-12)
    # below the plain tree's popcount(l + 1) (+ the finished trees'), strictly from a tree's 2nd round
    plain = np.diag(a @ plain_tree_noise_matrix(tree) @ plain_tree_noise_matrix(tree).T @ a.T)
    local = np.concatenate([np.arange(size) for size in tree.tree_sizes])
    assert np.all(variances <= plain + 1e-12)
    assert np.all(variances[local >= 1] < plain[local >= 1] - 1e-3)


def test_honaker_variances_follow_the_recursion() -> None:
    v = 1.0
    for h in range(1, 30):
        v = 1.0 / (1.0 + 1.0 / (2.0 * v))  # own value (variance 1) with two children (2·v_{h−1})
        assert honaker_variance(h) == pytest.approx(v, rel=1e-14)
    assert honaker_variance(0) == 1.0


@pytest.mark.parametrize(
    ("steps", "expected"),
    # TF Privacy's EfficientTreeAggregatorTest.test_tree_sum_last_step_expected: the online Honaker
    # estimate of the last prefix sum when every node's value is 1 (2021 tree_aggregation_test.py)
    [(1, 1.0), (2, 4 / 3), (3, 4 / 3 + 1), (4, 12 / 7), (5, 12 / 7 + 1), (6, 12 / 7 + 4 / 3),
     (7, 12 / 7 + 4 / 3 + 1), (8, 32 / 15), (1024, 11 / (2 - 0.5**10)), (1027, 11 / (2 - 0.5**10) + 4 / 3 + 1)],
)
def test_matches_tf_privacy_efficient_tree_aggregator(steps: int, expected: float) -> None:
    w = TreeStrategy(steps).noise_matrix()
    assert float(np.sum(w @ np.ones(w.shape[1]))) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("n", "restart"), CASES)
def test_stream_reproduces_noise_matrix(n: int, restart: int | None) -> None:
    tree = TreeStrategy(n, restart)
    w = tree.noise_matrix()
    num_params = 5
    for dtype, atol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        stream = tree.noise_stream(num_params, dtype=dtype)
        gen = torch.Generator().manual_seed(11)
        got = torch.stack([stream.next(t, gen) for t in range(n)]).double().numpy()
        # the same z: one randn(num_params) per released node, in the encoder's row order
        gen = torch.Generator().manual_seed(11)
        z = torch.stack([torch.randn(num_params, generator=gen, dtype=dtype) for _ in range(w.shape[1])])
        np.testing.assert_allclose(got, w @ z.double().numpy(), rtol=0, atol=atol)


def test_stream_output_can_be_modified_by_the_caller() -> None:
    tree = TreeStrategy(16, 6)
    streams = [tree.noise_stream(4, dtype=torch.float64) for _ in range(2)]
    gens = [torch.Generator().manual_seed(9) for _ in range(2)]
    for t in range(16):
        a = streams[0].next(t, gens[0])
        b = streams[1].next(t, gens[1])
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        a.mul_(100.0)  # the stream keeps its own state


@pytest.mark.parametrize(("n", "restart"), [(12, None), (13, 5)])
def test_stream_covariance_is_w_wt(n: int, restart: int | None) -> None:
    """10^4 independent coordinates of one stream (seed 3): each entry of the sample covariance
    S = (1/P)·Σ_p w_p w_pᵀ (known mean 0) is within 5 standard errors of Σ = W Wᵀ, where for
    jointly Gaussian zero-mean entries Var(w_i w_j) = Σ_ii Σ_jj + Σ_ij², so
    SE_ij = sqrt((Σ_ii Σ_jj + Σ_ij²)/P). The same statistic rejects the plain tree's Σ (non-vacuity)."""
    tree = TreeStrategy(n, restart)
    num_params = 10_000
    stream = tree.noise_stream(num_params, dtype=torch.float64)
    gen = torch.Generator().manual_seed(3)
    samples = torch.stack([stream.next(t, gen) for t in range(n)]).numpy()
    sample_cov = samples @ samples.T / num_params

    def z_scores(sigma: np.ndarray) -> np.ndarray:
        se = np.sqrt((np.outer(np.diag(sigma), np.diag(sigma)) + sigma**2) / num_params)
        return np.abs(sample_cov - sigma) / se

    w = tree.noise_matrix()
    assert z_scores(w @ w.T).max() < 5.0
    plain = plain_tree_noise_matrix(tree)
    assert z_scores(plain @ plain.T).max() > 5.0


@pytest.mark.parametrize(("n", "restart", "memory"), [(1, None, 0), (2, None, 1), (7, None, 2), (8, None, 3),
                                                      (16, None, 4), (100, None, 6), (13, 5, 2), (20, 8, 3),
                                                      (9, 1, 0), (64, 16, 4)])
def test_memory_is_floor_log2_of_the_largest_tree_and_really_held(n: int, restart: int | None, memory: int) -> None:
    tree = TreeStrategy(n, restart)
    assert tree.memory_vectors == memory == max(size.bit_length() - 1 for size in tree.tree_sizes)
    num_params = 101
    stream = tree.noise_stream(num_params)
    assert stream.memory_vectors == memory
    gen = torch.Generator().manual_seed(0)
    held = []
    for t in range(n):
        stream.next(t, gen)
        held.append(held_vectors(stream, num_params))
    assert max(held) == memory  # never more, and the bound is reached
    assert held[-1] == 0


def test_depth_is_dp_accountings_tree_depth_and_bounds_every_first_participation() -> None:
    """dp-accounting's SingleEpochTreeAggregationDpEvent charges RDP α·max_depth/(2σ²) with
    max_depth = ⌈log2(T + 1)⌉: the same as a Gaussian of noise multiplier σ/√depth(T). The largest
    column norm² of a T-leaf tree is exactly that depth, for every T (not only powers of two)."""
    for size in list(range(1, 40)) + [63, 64, 65, 1000, 1024, 2052]:
        depth = TreeStrategy.depth(size)
        assert depth == math.ceil(math.log2(size + 1))
        eps = []
        tree_event = dp_event.SingleEpochTreeAggregationDpEvent(1.5, size)
        for event in (tree_event, dp_event.GaussianDpEvent(1.5 / math.sqrt(depth))):
            acc = RdpAccountant(orders=[1.5, 2.0, 8.0, 32.0],
                                neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
            acc.compose(event)
            eps.append(acc.get_epsilon(1e-6))
        assert eps[0] == pytest.approx(eps[1], rel=1e-12)
        if size <= 200:
            tree = TreeStrategy(size)
            norms = [tree.column_norm_sq(t) for t in range(size)]
            assert max(norms) == depth == norms[0]
            if size & (size - 1) == 0:
                assert min(norms) == depth  # every leaf of a power-of-two tree
    # with restarts: a participation that is a client's first in its tree adds G_tt <= depth(R)
    tree = TreeStrategy(50, 12)
    for t in range(50):
        assert tree.sensitivity_increment(t, []) <= TreeStrategy.depth(12)
        assert tree.sensitivity_increment(t, [s for s in range(t) if s // 12 != t // 12]) == tree.column_norm_sq(t)


def test_sensitivity_with_restarts_no_shorter_than_min_separation() -> None:
    # restart_every <= b: one participation per tree; k trees' leaf-0 columns: k·depth(R)
    tree = TreeStrategy(64, 16)
    assert tree.max_sensitivity(16, 4) == pytest.approx(math.sqrt(4 * 5))
    assert tree.max_sensitivity(32, 4) == pytest.approx(math.sqrt(2 * 5))
    assert tree.max_sensitivity_is_exact(16, 4)


def test_workload_error_with_a_dense_workload() -> None:
    tree = TreeStrategy(11, 4)
    a = momentum_workload(11, 0.7, np.linspace(1.0, 0.5, 11))
    w = tree.noise_matrix()
    assert tree.workload_error(a) == pytest.approx(float(np.sum((a @ w) ** 2)), rel=1e-12)


def test_json_round_trip_and_errors() -> None:
    for tree in (TreeStrategy(10), TreeStrategy(10, 3)):
        again = strategy_from_dict(tree.to_dict())
        assert again == tree and again.to_dict() == tree.to_dict()
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ConfigError):
            TreeStrategy(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            TreeStrategy(8, bad)  # type: ignore[arg-type]
    tree = TreeStrategy(4)
    with pytest.raises(ConfigError):
        tree.max_sensitivity(0, 1)
    with pytest.raises(ConfigError):
        tree.max_sensitivity(1, 0)
    stream = tree.noise_stream(2)
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError):
        stream.next(1, gen)  # out of order
    for t in range(4):
        stream.next(t, gen)
    with pytest.raises(ConfigError):
        stream.next(4, gen)  # past n
