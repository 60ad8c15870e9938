"""DP-FTRL's binary-tree aggregation with Honaker's estimator in its online form, and tree restarts.

Kairouz et al. 2021, "Practical and Private (Deep) Learning without Sampling or Shuffling"
(arXiv 2103.00039): DP-FTRL releases noisy partial sums over the dyadic intervals ("nodes") of a
binary tree over the rounds and estimates each prefix sum from them; the model then takes its
FTRL/SGD step from the noisy prefix sum. Here the tree is a :class:`Strategy` of base.py.

Nodes and release (C). A tree of T leaves (rounds 0..T−1 of that tree) has the dyadic node
(h, j) = [j·2^h, (j+1)·2^h − 1] at height h; it is *released* — gets its noisy value
y = x(node) + z, z ~ N(0, 1) per coordinate — only when it completes within the tree,
(j+1)·2^h <= T, at round (j+1)·2^h − 1. C has one row per released node (ones on the node's
leaves); rows are ordered by the round they are released at, then by height — the order the
stream draws their z in.

Honaker's estimator, online (Honaker 2015, "Efficient use of differentially private binary
trees"; the online bottom-up variant is TF Privacy's ``EfficientTreeAggregator``, whose test values
``test_tree_sum_last_step_expected`` this module reproduces): a leaf's estimate is its own noisy
value, variance v_0 = 1; a node of height h >= 1, when it completes, combines its own noisy value
(variance 1) with the sum of its two children's estimates (variance 2·v_{h−1}) by inverse-variance
weights,

    est = α_h·y + (1 − α_h)·(est_left + est_right),   α_h = 2^h/(2^{h+1} − 1),
    v_h = 1/(1 + 1/(2 v_{h−1})) = 2^h/(2^{h+1} − 1)                                     (1)

(by induction; v_h → 1/2). It is unbiased (the weights sum to one for both unbiased terms), so
B·C = A: the estimate of the prefix sum over [0, l] is the sum of the estimates of the dyadic
nodes that decompose it (one per set bit h of l + 1, all released by round l; disjoint subtrees,
so their noises are independent) and has variance Σ_{h ∈ bits(l+1)} v_h <= popcount(l + 1), the
plain tree's (strictly below for l >= 1).

Restarts ("several epochs by tree restarts", Kairouz et al. §4 and App. D; TF Privacy's
``compute_rdp_tree_restart``): with ``restart_every = R`` the rounds are cut into trees of R leaves
(the last may be partial); each tree starts from the model the previous one ended at, so the noise
in the total movement at round t is the sum of the finished trees' final prefix noises plus the
current tree's prefix noise P_l. The streamed noise is its difference,
w_t = P_l − P_{l−1} (P_{−1} = 0: at a tree's first round w_t = P_0). C is block diagonal.

Stream (memory). Let r = the number of trailing zeros of l + 1: at round l the leaf and the nodes
of heights 1..r complete. P_l − P_{l−1} = e_r − Σ_{h<r} s_h, where e_r is the new height-r node's
estimate and s_h (h < r) are the stored estimates of the left siblings consumed by (1) on the way up
(the bits of l + 1 and of l differ exactly there). So the stream stores one estimate per set bit of
l + 1 (the pending left children): popcount(l + 1) vectors between rounds, nothing after a tree's
last round. The most, over every round but a tree's last, is ⌊log2 T⌋ (:attr:`TreeStrategy.memory_vectors`;
0 for T = 1); w_t needs no stored previous prefix. Round t draws, from its own generator and in
this order, one ``torch.randn(num_params)`` for the leaf and then one per completing node, by
increasing height.

Sensitivity (base.py). G = CᵀC: G_st = the number of released nodes containing both leaves (0 across
trees). A leaf's column norm² is its number of released ancestors (itself included); the largest
is that of leaf 0, ⌊log2 T⌋ + 1 = T.bit_length() = ⌈log2(T + 1)⌉ (:meth:`TreeStrategy.depth`) —
exactly the ``max_depth`` dp-accounting's ``SingleEpochTreeAggregationDpEvent`` charges for a tree
of T steps (RDP α·max_depth/(2σ²), ``_compute_rdp_single_epoch_tree_aggregation``), for every T, not
only powers of two. So a participation that is a client's first in its tree adds G_tt <= depth(T)
(equal at leaf 0 and, for T = 2^d, at every leaf); a second one in the same tree adds cross terms,
which that event (at most one participation per tree) does not cover. :meth:`TreeStrategy.max_sensitivity`:

* at most one participation per tree (``restart_every <= min_separation``, or k = 1): the columns
  met are orthogonal, so sensitivity² = VecSens of the column norms² (:mod:`.common`; exact);
* otherwise an exact dynamic program over the tree (below) when its estimated cost is at most
  1.5e9 elementary operations (a few seconds), else the tightened Algorithm 4 upper bound of
  :mod:`.common` (:meth:`TreeStrategy.max_sensitivity_is_exact` says which). Measured: one tree of
  n = 2,000 under (k = 20, b = 100): exact 20.616, the bound 21.024 (+2%).

The exact program. With G >= 0, Σ_{i,j∈S} G_ij = Σ_{released v} n_v², n_v = |S ∩ v|. Over a segment
of consecutive leaves keep, for each count c of participations, the first participation's offset
from the segment's start and the last one's from its end, both clipped at b − 1 (two adjacent
segments' patterns join iff last_gap_left + first_gap_right >= b − 1), and the best Σ n_v² inside.
Joining two segments is a (max, +) product over the gaps; a released node adds c². Equal
subtrees share one table, so a tree costs O(log T) joins of O(k²·b³); the trees are then appended
left to right keeping only the last gap (O(k·k_tree·b²) per tree).

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (where its normals are drawn).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from typing import Any, ClassVar

import numpy as np
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import NoiseStream, Strategy
from dpfl.privacy.mechanisms.correlated.common import (
    check_generator,
    check_num_params,
    check_round,
    check_schema,
    minsep_upper_bound_sq,
    participations_that_fit,
    vec_sens,
)
from dpfl.privacy.mechanisms.correlated.workload import check_rounds, check_workload
from dpfl.privacy.mechanisms.draw import randn
from dpfl.rng import NoiseGenerator

__all__ = ["TreeStrategy", "honaker_variance", "honaker_weight"]

# the exact program runs when its estimated elementary operations stay below this: measured on one
# core, 3.6e8 took 0.5 s (n = 2,000, b = 100, one tree) and 1.0e9 took 2.5 s (n = 2,052, b = 342,
# trees of 684); beyond it the upper bound (1-3 s at those sizes) is used
_EXACT_DP_BUDGET = 1.5e9


def honaker_weight(height: int) -> float:
    """α_h = 2^h/(2^{h+1} − 1): the weight of a node's own noisy value in eq. (1) (α_0 = 1)."""
    return 2.0**height / (2.0 ** (height + 1) - 1.0)


def honaker_variance(height: int) -> float:
    """v_h = 2^h/(2^{h+1} − 1): the variance of a height-h node's estimate at unit noise (eq. (1))."""
    return honaker_weight(height)


def _trailing_zeros(x: int) -> int:
    return (x & -x).bit_length() - 1


class _TreeStream(NoiseStream):
    def __init__(self, sizes: tuple[int, ...], num_params: int, dtype: torch.dtype, device: torch.device) -> None:
        self._sizes = sizes
        self._n = sum(sizes)
        self.num_params = num_params
        self._dtype = dtype
        self._device = device
        self._tree_start = 0
        self._tree = 0
        self._stored: dict[int, torch.Tensor] = {}  # height -> estimate of the pending left child
        self._max_stored = max(size.bit_length() - 1 for size in sizes)
        self.next_round = 0

    def _randn(self, generator: NoiseGenerator) -> torch.Tensor:
        return randn(self.num_params, generator, dtype=self._dtype, device=self._device)

    def next(self, round_idx: int, generator: NoiseGenerator) -> torch.Tensor:
        check_round(self.next_round, round_idx, self._n)
        check_generator(generator, self._device)
        size = self._sizes[self._tree]
        local = self.next_round - self._tree_start
        estimate = self._randn(generator)  # the leaf: α_0 = 1
        consumed: torch.Tensor | None = None
        height = 0
        while (local + 1) % (2 ** (height + 1)) == 0:  # the node of height + 1 completes now
            left = self._stored.pop(height)
            consumed = left if consumed is None else consumed + left
            alpha = honaker_weight(height + 1)
            estimate = alpha * self._randn(generator) + (1.0 - alpha) * (left + estimate)
            height += 1
        # a new tensor, never the stored estimate itself (the caller may scale w in place)
        w = estimate.clone() if consumed is None else estimate - consumed
        if local + 1 == size:  # the tree is done: the next round starts a new one
            self._stored.clear()
            self._tree += 1
            self._tree_start += size
        else:
            self._stored[height] = estimate
        self.next_round += 1
        return w

    @property
    def memory_vectors(self) -> int:
        return self._max_stored


class TreeStrategy(Strategy):
    """Binary-tree aggregation over ``n`` rounds with Honaker's online estimator (kind ``"tree"``).

    ``restart_every``: a new tree every that many rounds (the last may be partial); None = one tree.
    """

    kind: ClassVar[str] = "tree"

    def __init__(self, n: int, restart_every: int | None = None) -> None:
        self.n = check_rounds(n)
        if restart_every is None:
            self.restart_every: int | None = None
            size = self.n
        else:
            size = check_rounds(restart_every, "restart_every")
            self.restart_every = size
        full, rest = divmod(self.n, min(size, self.n))
        self._sizes: tuple[int, ...] = (min(size, self.n),) * full + ((rest,) if rest else ())
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)

    def __repr__(self) -> str:
        return f"TreeStrategy(n={self.n}, restart_every={self.restart_every})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeStrategy) and (other.n, other.restart_every) == (self.n, self.restart_every)

    def __hash__(self) -> int:
        return hash((self.kind, self.n, self.restart_every))

    # ----------------------------------------------------------------- structure

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        """The leaves of each tree, in order (sum n)."""
        return self._sizes

    @staticmethod
    def depth(tree_size: int) -> int:
        """⌈log2(T + 1)⌉ = ⌊log2 T⌋ + 1: the released nodes above leaf 0 of a T-leaf tree (itself
        included), the largest column norm², and dp-accounting's ``max_depth`` for T steps."""
        return check_rounds(tree_size, "tree_size").bit_length()

    def _locate(self, t: int) -> tuple[int, int, int]:
        """(tree index, local leaf, tree size) of round t."""
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < self.n:
            raise ConfigError(f"rounds must be integers in 0..{self.n - 1}. Found {t!r}.")
        tree = int(np.searchsorted(self._starts, int(t), side="right")) - 1
        return tree, int(t) - int(self._starts[tree]), self._sizes[tree]

    def column_norm_sq(self, t: int) -> int:
        """G_tt: the released nodes containing leaf t (<= depth of its tree)."""
        _, leaf, size = self._locate(t)
        return sum(1 for h in range(size.bit_length()) if ((leaf >> h) + 1) << h <= size)

    def column_inner(self, s: int, t: int) -> float:
        tree_s, ls, size = self._locate(s)
        tree_t, lt, _ = self._locate(t)
        if tree_s != tree_t:
            return 0.0
        return float(sum(1 for h in range(size.bit_length())
                         if ls >> h == lt >> h and ((ls >> h) + 1) << h <= size))

    def _rows(self) -> list[tuple[int, int, int, int]]:
        """Released nodes in release order: (tree start, tree size, height, index j)."""
        rows = []
        for start, size in zip(self._starts.tolist(), self._sizes, strict=True):
            for leaf in range(size):
                for h in range(_trailing_zeros(leaf + 1) + 1):
                    rows.append((start, size, h, ((leaf + 1) >> h) - 1))
        return rows

    # ----------------------------------------------------------------- matrices

    def encoder_matrix(self) -> np.ndarray:
        rows = self._rows()
        c = np.zeros((len(rows), self.n))
        for r, (start, _, h, j) in enumerate(rows):
            c[r, start + (j << h): start + ((j + 1) << h)] = 1.0
        return c

    def noise_matrix(self) -> np.ndarray:
        """W (n × m) from the definitions, not from the stream's code: every node's estimate by the
        recursion (1) over its subtree, prefix noises as sums over the dyadic decomposition, w as
        their differences (within a tree; the first round of a tree is its prefix noise)."""
        rows = self._rows()
        index = {(start, h, j): r for r, (start, _, h, j) in enumerate(rows)}
        m = len(rows)
        w = np.zeros((self.n, m))
        for start, size in zip(self._starts.tolist(), self._sizes, strict=True):
            estimate: dict[tuple[int, int], np.ndarray] = {}  # (h, j) -> the node's estimate as a row of W
            for h in range(size.bit_length()):
                for j in range(size >> h):  # the released nodes of height h: (j + 1)·2^h <= size
                    own = np.zeros(m)
                    own[index[(start, h, j)]] = 1.0
                    a = honaker_weight(h)
                    children = estimate[(h - 1, 2 * j)] + estimate[(h - 1, 2 * j + 1)] if h else 0.0
                    estimate[(h, j)] = a * own + (1.0 - a) * children
            previous = np.zeros(m)
            for leaf in range(size):
                prefix = np.zeros(m)
                covered = 0
                for h in reversed(range((leaf + 1).bit_length())):
                    if (leaf + 1) >> h & 1:
                        prefix += estimate[(h, covered >> h)]
                        covered += 1 << h
                w[start + leaf] = prefix - previous
                previous = prefix
        return w

    def prefix_variances(self) -> np.ndarray:
        """Var of the estimate of Σ_{s<=t} x_s at unit noise, t = 0..n−1 (the diagonal of (AW)(AW)ᵀ)."""
        out = np.empty(self.n)
        carried = 0.0
        for start, size in zip(self._starts.tolist(), self._sizes, strict=True):
            for leaf in range(size):
                out[start + leaf] = carried + sum(honaker_variance(h) for h in range((leaf + 1).bit_length())
                                                  if (leaf + 1) >> h & 1)
            carried = out[start + size - 1]
        return out

    def workload_error(self, workload: np.ndarray | None = None) -> float:
        a = check_workload(workload, self.n)
        if a is None:
            return float(np.sum(self.prefix_variances()))
        aw = a @ self.noise_matrix()
        return float(np.sum(aw * aw))

    # ----------------------------------------------------------------- sensitivity

    def _one_per_tree(self, min_separation: int, k: int) -> bool:
        return k == 1 or max(self._sizes) <= min_separation

    def column_norms_sq(self) -> np.ndarray:
        """G_tt for every round t (vectorized :meth:`column_norm_sq`)."""
        tree_of = np.searchsorted(self._starts, np.arange(self.n), side="right") - 1
        local = np.arange(self.n) - self._starts[tree_of]
        size = np.asarray(self._sizes)[tree_of]
        norms = np.zeros(self.n)
        for h in range(max(self._sizes).bit_length()):
            norms += ((local >> h) + 1) << h <= size  # the height-h node above t is released
        return norms

    def _exact_dp_cost(self, b: int, k: int) -> float:
        """Elementary operations of the exact program: per distinct tree size, two joins per height
        of O(K²·b³) (K = the participations that fit a child), then one left-open join per tree."""
        cost = 0.0
        for size in set(self._sizes):
            for h in range(1, (size - 1).bit_length() + 1):
                kk = min(k, participations_that_fit(1 << (h - 1), b))
                cost += 2 * kk * kk * b**3
        cost += len(self._sizes) * k * min(k, participations_that_fit(max(self._sizes), b)) * b * b
        return cost

    def max_sensitivity_is_exact(self, min_separation: int, max_participations: int) -> bool:
        """Whether :meth:`max_sensitivity` is the exact maximum (else an upper bound, see the module)."""
        b, k = check_schema(min_separation, max_participations, self.n)
        return self._one_per_tree(b, k) or self._exact_dp_cost(b, k) <= _EXACT_DP_BUDGET

    def max_sensitivity(self, min_separation: int, max_participations: int) -> float:
        b, k = check_schema(min_separation, max_participations, self.n)
        if self._one_per_tree(b, k):
            return math.sqrt(float(vec_sens(self.column_norms_sq(), b, k)))
        if self._exact_dp_cost(b, k) <= _EXACT_DP_BUDGET:
            return math.sqrt(_ExactTreeProgram(b, k).forest(self._sizes))
        half_width = max(self._sizes) - 1  # G is block diagonal, one block per tree
        return math.sqrt(minsep_upper_bound_sq(self._abs_gram_rows, self.n, half_width, b, k))

    def _abs_gram_rows(self, i0: int, i1: int) -> np.ndarray:
        """|G| rows i0..i1−1 as windows of half-width (largest tree − 1) (common's format)."""
        half = max(self._sizes) - 1
        offsets = np.arange(-half, half + 1)
        rows = np.arange(i0, i1)[:, None]
        cols = rows + offsets[None, :]
        inside = (cols >= 0) & (cols < self.n)
        cols = np.clip(cols, 0, self.n - 1)
        tree_of = np.searchsorted(self._starts, np.arange(self.n), side="right") - 1
        local = np.arange(self.n) - self._starts[tree_of]
        size = np.asarray(self._sizes)[tree_of]
        same = inside & (tree_of[cols] == tree_of[rows])
        count = np.zeros(cols.shape)
        for h in range(max(self._sizes).bit_length()):
            node = local[rows] >> h
            released = ((node + 1) << h) <= size[rows]
            count += same & (local[cols] >> h == node) & released
        return count

    # ----------------------------------------------------------------- stream, JSON

    def noise_stream(self, num_params: int, *, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> NoiseStream:
        return _TreeStream(self._sizes, check_num_params(num_params), dtype, torch.device(device))

    @property
    def memory_vectors(self) -> int:
        """⌊log2 T⌋ for the largest tree (0 for one-leaf trees): see the module."""
        return max(size.bit_length() - 1 for size in self._sizes)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "restart_every": self.restart_every}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TreeStrategy:
        if data.get("kind") != cls.kind:
            raise ConfigError(f"not a tree strategy: kind {data.get('kind')!r}.")
        return cls(data.get("n"), data.get("restart_every"))  # type: ignore[arg-type]


class _Segment:
    """A run of ``size`` consecutive leaves: ``table[c - 1, f, l]`` = the best Σ n_v² inside with
    exactly c participations, first one f and last one l from the ends (clipped at b − 1)."""

    __slots__ = ("size", "table")

    def __init__(self, size: int, table: np.ndarray) -> None:
        self.size = size
        self.table = table


class _ExactTreeProgram:
    """The exact max of Σ_{i,j∈S} G_ij for the tree (module docstring), for one (b, k)."""

    def __init__(self, min_separation: int, max_participations: int) -> None:
        self.b = min_separation
        self.k = max_participations
        self._full = cache(self._full_uncached)

    def _join(self, left: _Segment, right: _Segment, released: bool) -> _Segment:
        b, top = self.b, self.b - 1
        size = left.size + right.size
        kl, kr = left.table.shape[0], right.table.shape[0]
        kk = min(self.k, kl + kr, participations_that_fit(size, b))
        out = np.full((kk, b, b), -np.inf)
        # left only: the last gap grows by the right segment's size
        shift = right.size
        cut = max(0, top - shift)
        out[:kl, :, shift:shift + cut] = left.table[:, :, :cut]
        out[:kl, :, top] = np.maximum(out[:kl, :, top], left.table[:, :, cut:].max(axis=-1))
        # right only: the first gap grows by the left segment's size
        shift = left.size
        cut = max(0, top - shift)
        out[:kr, shift:shift + cut, :] = np.maximum(out[:kr, shift:shift + cut, :], right.table[:, :cut, :])
        out[:kr, top, :] = np.maximum(out[:kr, top, :], right.table[:, cut:, :].max(axis=-2))
        # both: last gap l1 of the left and first gap f2 of the right need l1 + f2 >= b − 1
        suffix = np.flip(np.maximum.accumulate(np.flip(right.table, axis=1), axis=1), axis=1)  # max over f2 >= g
        needed = np.flip(suffix, axis=1)  # needed[c2, l1, l2] = max_{f2 >= b − 1 − l1} right[c2, f2, l2]
        for c1 in range(1, kl + 1):
            for c2 in range(1, min(kr, kk - c1) + 1):  # one b³ block at a time (memory)
                joined = (left.table[c1 - 1][:, :, None] + needed[c2 - 1][None, :, :]).max(axis=1)
                out[c1 + c2 - 1] = np.maximum(out[c1 + c2 - 1], joined)
        if released:
            out += (np.arange(1, kk + 1, dtype=np.float64) ** 2)[:, None, None]
        return _Segment(size, out)

    def _full_uncached(self, height: int) -> _Segment:
        """A complete released subtree of 2^height leaves (every node in it released)."""
        if height == 0:
            table = np.full((1, self.b, self.b), -np.inf)
            table[0, 0, 0] = 1.0  # one participation at the leaf: the leaf node, n_v² = 1
            return _Segment(1, table)
        child = self._full(height - 1)
        return self._join(child, child, released=True)

    def _node(self, low: int, height: int, size: int) -> _Segment:
        """The part of node [low, low + 2^height) inside a tree of ``size`` leaves (low < size)."""
        if low + (1 << height) <= size:
            return self._full(height)
        half = 1 << (height - 1)
        left = self._node(low, height - 1, size)
        if low + half >= size:
            return left
        return self._join(left, self._node(low + half, height - 1, size), released=False)

    def _tree(self, size: int) -> _Segment:
        return self._node(0, (size - 1).bit_length(), size)

    def _join_open(self, acc: np.ndarray | None, right: _Segment) -> np.ndarray:
        """Append ``right`` to a prefix of whole trees whose table ``acc[c − 1, l]`` keeps only the last
        gap (nothing lies before the first round, so the first gap never matters)."""
        top = self.b - 1
        right_open = right.table.max(axis=1)  # [c2 − 1, l2]: any first gap
        if acc is None:
            return right_open
        ka, kr = acc.shape[0], right.table.shape[0]
        kk = min(self.k, ka + kr)
        out = np.full((kk, self.b), -np.inf)
        shift = right.size
        cut = max(0, top - shift)
        out[:ka, shift:shift + cut] = acc[:, :cut]
        out[:ka, top] = np.maximum(out[:ka, top], acc[:, cut:].max(axis=-1))
        out[:kr] = np.maximum(out[:kr], right_open)
        suffix = np.flip(np.maximum.accumulate(np.flip(right.table, axis=1), axis=1), axis=1)
        needed = np.flip(suffix, axis=1)  # [c2 − 1, l1, l2]: right's best with l1 + f2 >= b − 1
        for c1 in range(1, ka + 1):
            c2_max = min(kr, kk - c1)
            if c2_max < 1:
                break
            joined = (acc[c1 - 1][None, :, None] + needed[:c2_max]).max(axis=1)
            out[c1: c1 + c2_max] = np.maximum(out[c1: c1 + c2_max], joined)
        return out

    def forest(self, sizes: tuple[int, ...]) -> float:
        """max over patterns of Σ n_v² across the trees of ``sizes`` (in order)."""
        trees = {size: self._tree(size) for size in set(sizes)}
        acc: np.ndarray | None = None
        for size in sizes:
            acc = self._join_open(acc, trees[size])
        assert acc is not None
        return float(max(0.0, acc.max()))
