"""Every strategy's max_sensitivity against a brute-force maximum over all participation patterns.

The brute force enumerates every pattern of at most k rounds of 0..n−1, consecutive ones at least b
apart, and takes max sqrt(Σ_{i,j∈S} |G_ij|) with G = CᵀC from ``encoder_matrix()`` — nothing of the
strategies' own sensitivity code. Tolerance: 1e-9 relative (the values are sums of <= 256 products
of float64 coefficients).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from dpfl.privacy.mechanisms.correlated.banded import BandedToeplitzStrategy, optimize_banded_toeplitz
from dpfl.privacy.mechanisms.correlated.base import Strategy
from dpfl.privacy.mechanisms.correlated.common import minsep_upper_bound_sq, vec_sens
from dpfl.privacy.mechanisms.correlated.identity import IdentityStrategy
from dpfl.privacy.mechanisms.correlated.tree import TreeStrategy

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16]
SCHEMAS = [(b, k) for b in (1, 2, 3, 5) for k in (1, 2, 3, None)]  # None: as many as fit
RTOL = 1e-9


@functools.cache
def patterns(n: int, b: int, k: int) -> list[tuple[int, ...]]:
    """Every non-empty pattern: at most k rounds of 0..n−1, consecutive ones >= b apart."""
    out: list[tuple[int, ...]] = []

    def extend(start: int, current: tuple[int, ...]) -> None:
        if current:
            out.append(current)
        if len(current) == k:
            return
        for s in range(start, n):
            extend(s + b, current + (s,))

    extend(0, ())
    return out


def indicators(pats: list[tuple[int, ...]], n: int) -> np.ndarray:
    u = np.zeros((len(pats), n))
    for row, pat in enumerate(pats):
        u[row, list(pat)] = 1.0
    return u


@functools.cache
def _pattern_indicators(n: int, b: int, k: int) -> np.ndarray:
    return indicators(patterns(n, b, k), n)


def pattern_values(gram_abs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Σ_{i,j∈S} |G_ij| for every pattern S, given the patterns' 0/1 indicator rows u."""
    return ((u @ gram_abs) * u).sum(axis=1)


def brute_force(strategy: Strategy, b: int, k: int) -> float:
    c = strategy.encoder_matrix()
    return math.sqrt(pattern_values(np.abs(c.T @ c), _pattern_indicators(strategy.n, b, min(k, strategy.n))).max())


def strategies(n: int) -> list[Strategy]:
    rng = np.random.default_rng(n)
    out: list[Strategy] = [IdentityStrategy(n)]
    out += [TreeStrategy(n, r) for r in (None, 2, 3, 5) if r is None or r < n]
    for bands in range(1, min(n, 4) + 1):
        decreasing = np.sort(rng.uniform(0.1, 1.0, bands))[::-1]  # one sign, |c| non-increasing
        out.append(BandedToeplitzStrategy(n, decreasing))
        out.append(BandedToeplitzStrategy(n, -decreasing))
        out.append(BandedToeplitzStrategy(n, np.concatenate([[1.0], rng.normal(size=bands - 1)])))  # mixed signs
    if n >= 3:
        out.append(optimize_banded_toeplitz(n, 3))
    return out


@pytest.mark.parametrize("n", SIZES)
def test_max_sensitivity_equals_brute_force(n: int) -> None:
    inexact = 0
    for strategy in strategies(n):
        for b, k_in in SCHEMAS:
            k = n if k_in is None else k_in
            expected = brute_force(strategy, b, k)
            got = strategy.max_sensitivity(b, k)
            exact = getattr(strategy, "max_sensitivity_is_exact", lambda *_: True)(b, k)
            if exact:
                assert got == pytest.approx(expected, rel=RTOL), (strategy, b, k)
            else:
                # the documented upper bound: banded with mixed signs and bands > b only
                inexact += 1
                assert isinstance(strategy, BandedToeplitzStrategy) and strategy.bands > b, (strategy, b, k)
                assert got >= expected * (1 - RTOL), (strategy, b, k)
    if n >= 3:
        assert inexact > 0  # the upper-bound branch was exercised (and checked against the brute force)
    # the identity and the tree are always exact at these sizes
    for strategy in strategies(n):
        if isinstance(strategy, TreeStrategy):
            assert all(strategy.max_sensitivity_is_exact(b, n if k is None else k) for b, k in SCHEMAS)


def test_the_tree_check_exercises_cross_terms() -> None:
    """Non-vacuity: without restarts, several participations share nodes, so the exact maximum is
    well above what orthogonal columns would give (the DP has to get the cross terms right)."""
    tree = TreeStrategy(16)
    norms = np.array([tree.column_norm_sq(t) for t in range(16)], dtype=float)
    orthogonal = math.sqrt(float(vec_sens(norms, 2, 8)))  # 8 participations of norm² 5: √40
    assert tree.max_sensitivity(2, 8) == pytest.approx(brute_force(tree, 2, 8), rel=RTOL)
    assert tree.max_sensitivity(2, 8) > 1.5 * orthogonal  # the brute force gives √128 vs √40


@pytest.mark.parametrize("n", [4, 7, 12, 16])
def test_increments_add_up_to_the_patterns_squared_sensitivity(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    for strategy in strategies(n):
        c = strategy.encoder_matrix()
        gram_abs = np.abs(c.T @ c)
        pats = patterns(n, 1, n)
        if len(pats) > 120:  # n >= 7: a fixed random sample of 120 patterns (plus the full one)
            pats = [pats[i] for i in rng.choice(len(pats), 120, replace=False)] + [tuple(range(n))]
        values = pattern_values(gram_abs, indicators(pats, n))
        for pat, value in zip(pats, values, strict=True):
            total = sum(strategy.sensitivity_increment(t, pat[:i]) for i, t in enumerate(pat))
            assert total == pytest.approx(value, rel=RTOL, abs=1e-12), (strategy, pat)


def _algorithm4_sq(gram_abs: np.ndarray, b: int, k: int) -> float:
    """2306.08153's Algorithm 4 as published (each row maximized over every pattern)."""
    rows = vec_sens(gram_abs, b, k)
    return float(vec_sens(rows, b, k))


@pytest.mark.parametrize("seed", range(6))
def test_upper_bound_is_an_upper_bound_and_tighter_than_algorithm_4(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 9 + seed % 4
    x = rng.normal(size=(n + 2, n))
    gram_abs = np.abs(x.T @ x)  # a dense Gram with mixed signs before the absolute value
    for b in (1, 2, 3):
        for k in (2, 3, n):
            k_eff = min(k, -(-n // b))
            truth = pattern_values(gram_abs, _pattern_indicators(n, b, k)).max()
            bound = minsep_upper_bound_sq(lambda i0, i1: _windows(gram_abs, i0, i1), n, n - 1, b, k_eff, chunk=4)
            assert bound >= truth * (1 - RTOL)
            assert bound <= _algorithm4_sq(gram_abs, b, k_eff) * (1 + RTOL)


def _windows(gram_abs: np.ndarray, i0: int, i1: int) -> np.ndarray:
    n = gram_abs.shape[0]
    out = np.zeros((i1 - i0, 2 * n - 1))
    for r, i in enumerate(range(i0, i1)):
        out[r, n - 1 - i: 2 * n - 1 - i] = gram_abs[i]
    return out


def test_gram_windows_match_the_encoder() -> None:
    """The |G| windows the upper bound reads (tree: block per tree; banded: half-width b − 1)."""
    for strategy in (TreeStrategy(13), TreeStrategy(13, 5), BandedToeplitzStrategy(13, [1.0, -0.4, 0.3, 0.2])):
        c = strategy.encoder_matrix()
        gram_abs = np.abs(c.T @ c)
        half = (max(strategy.tree_sizes) if isinstance(strategy, TreeStrategy) else strategy.bands) - 1
        windows = strategy._abs_gram_rows(0, 13)
        dense = np.zeros((13, 13))
        for i in range(13):
            for u in range(2 * half + 1):
                j = i - half + u
                if 0 <= j < 13:
                    dense[i, j] = windows[i, u]
        np.testing.assert_allclose(dense, gram_abs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [12, 16])
def test_tree_upper_bound_path_is_an_upper_bound(n: int) -> None:
    """The tree's fallback (used beyond the exact program's budget) run directly at small n."""
    for restart in (None, 5):
        tree = TreeStrategy(n, restart)
        for b, k in itertools.product((1, 2, 3), (2, 3, n)):
            k_eff = min(k, -(-n // b))
            half = max(tree.tree_sizes) - 1
            bound = math.sqrt(minsep_upper_bound_sq(tree._abs_gram_rows, n, half, b, k_eff))
            assert bound >= brute_force(tree, b, k) * (1 - RTOL)
