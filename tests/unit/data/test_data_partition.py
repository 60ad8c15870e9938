"""Partitioners: disjointness, sizes and label histograms as asked, determinism per seed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpfl.data.partition import (
    UNBALANCED_GROUP_SIZES_000,
    partition_dirichlet,
    partition_iid,
    partition_k_classes,
    partition_natural,
    partition_size_groups,
)
from dpfl.errors import ConfigError

FAST = settings(max_examples=40, deadline=None, database=None)
seeds = st.integers(0, 2**32 - 1)


def _assert_disjoint(parts: list[np.ndarray], num_samples: int) -> None:
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert flat.dtype == np.int64
    assert len(np.unique(flat)) == len(flat), "a sample was given to two clients"
    assert flat.size == 0 or (flat.min() >= 0 and flat.max() < num_samples)
    for p in parts:
        assert (np.diff(p) > 0).all(), "indices are sorted"


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@st.composite
def labelled(draw: st.DrawFn, max_classes: int = 6, max_per_class: int = 30) -> np.ndarray:
    """Labels with 1..max_classes classes, each with 1..max_per_class samples, shuffled."""
    counts = draw(st.lists(st.integers(1, max_per_class), min_size=1, max_size=max_classes))
    labels = np.repeat(np.arange(len(counts)), counts)
    return np.random.default_rng(draw(seeds)).permutation(labels)


# --------------------------------------------------------------------------------------------- IID


@FAST
@given(n=st.integers(0, 300), clients=st.integers(1, 20), seed=seeds, data=st.data())
def test_iid_sizes_disjoint_deterministic(n: int, clients: int, seed: int, data: st.DataObject) -> None:
    per_client = data.draw(st.integers(1, 30))
    if per_client * clients > n:
        with pytest.raises(ConfigError, match=f"ask for {per_client * clients} samples .* only {n} exist"):
            partition_iid(n, num_clients=clients, samples_per_client=per_client, seed=seed)
        return
    parts = partition_iid(n, num_clients=clients, samples_per_client=per_client, seed=seed)
    assert [len(p) for p in parts] == [per_client] * clients
    _assert_disjoint(parts, n)
    assert _same(parts, partition_iid(n, num_clients=clients, samples_per_client=per_client, seed=seed))


@FAST
@given(sizes=st.lists(st.integers(0, 20), min_size=1, max_size=10), extra=st.integers(0, 10), seed=seeds)
def test_iid_given_sizes(sizes: list[int], extra: int, seed: int) -> None:
    n = sum(sizes) + extra
    parts = partition_iid(n, sizes=sizes, seed=seed)
    assert [len(p) for p in parts] == sizes
    _assert_disjoint(parts, n)


def test_iid_default_size_and_argument_errors() -> None:
    assert [len(p) for p in partition_iid(10, num_clients=3, seed=0)] == [3, 3, 3]
    with pytest.raises(ConfigError, match="exactly one of `sizes` and `num_clients`"):
        partition_iid(10, seed=0)
    with pytest.raises(ConfigError, match="cannot give each of 11 clients"):
        partition_iid(10, num_clients=11, seed=0)
    for bad_seed in (None, True, -1, 1.5):
        with pytest.raises(ConfigError, match="`seed` must be a non-negative integer"):
            partition_iid(10, num_clients=2, seed=bad_seed)  # type: ignore[arg-type]


def test_seed_zero_is_a_seed_and_seeds_differ() -> None:
    a = partition_iid(1000, num_clients=2, seed=0)
    assert _same(a, partition_iid(1000, num_clients=2, seed=0))
    assert not _same(a, partition_iid(1000, num_clients=2, seed=1))


# ------------------------------------------------------------------------------------ size groups


def test_size_groups_of_paper_000() -> None:
    parts = partition_size_groups(60000, num_clients=50, seed=3)
    assert [len(p) for p in parts] == [s for s in UNBALANCED_GROUP_SIZES_000 for _ in range(10)]
    _assert_disjoint(parts, 60000)


@FAST
@given(clients=st.integers(1, 12), groups=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=seeds)
def test_size_groups_property(clients: int, groups: list[int], seed: int) -> None:
    n = 5 * clients
    if clients < len(groups):
        with pytest.raises(ConfigError, match=f"{clients} clients cannot form {len(groups)} groups"):
            partition_size_groups(n, num_clients=clients, group_sizes=groups, seed=seed)
        return
    parts = partition_size_groups(n, num_clients=clients, group_sizes=groups, seed=seed)
    blocks = np.array_split(np.arange(clients), len(groups))
    assert [len(p) for p in parts] == [g for g, b in zip(groups, blocks, strict=True) for _ in b]
    _assert_disjoint(parts, n)


# -------------------------------------------------------------------------------------- Dirichlet


@FAST
@given(labels=labelled(), clients=st.integers(1, 8), alpha=st.floats(0.05, 100.0), seed=seeds)
def test_dirichlet_assigns_every_sample_once_and_is_deterministic(
    labels: np.ndarray, clients: int, alpha: float, seed: int
) -> None:
    parts = partition_dirichlet(labels, num_clients=clients, alpha=alpha, seed=seed)
    assert len(parts) == clients
    _assert_disjoint(parts, labels.size)
    assert sum(len(p) for p in parts) == labels.size
    assert _same(parts, partition_dirichlet(labels, num_clients=clients, alpha=alpha, seed=seed))


@FAST
@given(labels=labelled(max_per_class=40), clients=st.integers(1, 6), seed=seeds)
def test_dirichlet_minimum_size(labels: np.ndarray, clients: int, seed: int) -> None:
    minimum = labels.size // (2 * clients)
    parts = partition_dirichlet(
        labels, num_clients=clients, alpha=5.0, seed=seed, min_samples_per_client=minimum, max_attempts=500
    )
    assert min(len(p) for p in parts) >= minimum


def test_dirichlet_small_alpha_skews_labels() -> None:
    labels = np.repeat(np.arange(10), 100)
    skewed = partition_dirichlet(labels, num_clients=10, alpha=0.05, seed=0)
    flat = partition_dirichlet(labels, num_clients=10, alpha=1000.0, seed=0)

    def mean_classes(parts: list[np.ndarray]) -> float:
        return float(np.mean([len(np.unique(labels[p])) for p in parts if len(p)]))

    assert mean_classes(skewed) < 4 < 9.5 < mean_classes(flat)


def test_dirichlet_impossible_requests() -> None:
    labels = np.repeat(np.arange(2), 5)
    with pytest.raises(ConfigError, match=r"3 clients × min_samples_per_client=4 = 12 exceeds the 10 samples"):
        partition_dirichlet(labels, num_clients=3, alpha=1.0, seed=0, min_samples_per_client=4)
    with pytest.raises(ConfigError, match="`alpha` must be a positive finite number"):
        partition_dirichlet(labels, num_clients=3, alpha=0.0, seed=0)
    with pytest.raises(ConfigError, match=r"in 3 attempts; raise `alpha`"):
        partition_dirichlet(labels, num_clients=5, alpha=0.01, seed=0, min_samples_per_client=2, max_attempts=3)


# ------------------------------------------------------------------------------ k classes per client


@FAST
@given(
    num_classes=st.integers(1, 8),
    k=st.integers(1, 4),
    clients=st.integers(1, 12),
    share=st.integers(1, 5),
    remainder=st.integers(0, 3),
    seed=seeds,
)
def test_k_classes_each_client_holds_exactly_k_labels(
    num_classes: int, k: int, clients: int, share: int, remainder: int, seed: int
) -> None:
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), 100))
    spc = share * k + min(remainder, k - 1)
    kwargs: dict[str, Any] = dict(num_clients=clients, classes_per_client=k, samples_per_client=spc, seed=seed)
    if k > num_classes:
        with pytest.raises(ConfigError, match=f"classes_per_client={k} exceeds the {num_classes} classes"):
            partition_k_classes(labels, **kwargs)
        return
    if clients > math.comb(num_classes, k):
        with pytest.raises(ConfigError, match="pairwise different sets"):
            partition_k_classes(labels, **kwargs)
        return
    parts = partition_k_classes(labels, **kwargs)
    _assert_disjoint(parts, labels.size)
    label_sets = set()
    for p in parts:
        assert len(p) == spc
        present, counts = np.unique(labels[p], return_counts=True)
        assert len(present) == k
        # Equal amounts: spc // k each, one more for the first spc % k labels.
        assert counts.tolist() == [spc // k + (1 if j < spc % k else 0) for j in range(k)]
        label_sets.add(tuple(present))
    assert len(label_sets) == clients  # no two clients hold the same set of labels
    assert _same(parts, partition_k_classes(labels, **kwargs))


def test_four_digits_per_client_on_an_mnist_sized_label_set() -> None:
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 6000))
    parts = partition_k_classes(labels, num_clients=50, classes_per_client=4, samples_per_client=800, seed=0)
    usage = np.zeros(10, dtype=int)
    for p in parts:
        present, counts = np.unique(labels[p], return_counts=True)
        assert len(present) == 4 and (counts == 200).all()
        usage[present] += 1
    assert usage.max() - usage.min() <= 1  # classes are used as evenly as possible


def test_k_classes_impossible_requests_name_the_values() -> None:
    labels = np.repeat(np.arange(4), [50, 50, 50, 3])
    with pytest.raises(ConfigError, match=r"class 3 has 3 samples but the clients holding it need"):
        partition_k_classes(labels, num_clients=4, classes_per_client=2, samples_per_client=20, seed=0)
    with pytest.raises(ConfigError, match="samples_per_client=1 is smaller than classes_per_client=2"):
        partition_k_classes(labels, num_clients=2, classes_per_client=2, samples_per_client=1, seed=0)
    # Without distinct sets, more clients than combinations is fine.
    parts = partition_k_classes(
        labels[:150], num_clients=10, classes_per_client=3, samples_per_client=6, seed=0, distinct_label_sets=False
    )
    assert all(len(np.unique(labels[p])) == 3 for p in parts)


def test_k_classes_default_size_uses_what_the_classes_can_supply() -> None:
    labels = np.repeat(np.arange(3), [10, 20, 30])
    parts = partition_k_classes(labels, num_clients=3, classes_per_client=2, seed=1)
    sizes = {len(p) for p in parts}
    assert len(sizes) == 1 and sizes.pop() >= 2
    _assert_disjoint(parts, labels.size)


# ---------------------------------------------------------------------------------------- natural


@FAST
@given(groups=st.lists(st.integers(0, 9), min_size=1, max_size=60), minimum=st.integers(1, 4))
def test_natural_clients_follow_the_ids(groups: list[int], minimum: int) -> None:
    g = np.array(groups)
    parts = partition_natural(g, min_samples=minimum)
    _assert_disjoint(parts, g.size)
    ids = [int(g[p[0]]) for p in parts]
    assert ids == sorted(ids)
    for p in parts:
        assert len(np.unique(g[p])) == 1 and len(p) >= minimum
        assert len(p) == int((g == g[p[0]]).sum())  # every sample of that id
    kept = {i for i in set(groups) if groups.count(i) >= minimum}
    assert set(ids) == kept


def test_natural_sampling_of_clients() -> None:
    g = np.repeat(np.arange(20), 3)
    a = partition_natural(g, max_clients=5, seed=7)
    assert len(a) == 5 and _same(a, partition_natural(g, max_clients=5, seed=7))
    with pytest.raises(ConfigError, match="give a `seed`"):
        partition_natural(g, max_clients=5)
    with pytest.raises(ConfigError, match="max_clients=21 exceeds the 20 natural clients"):
        partition_natural(g, max_clients=21, seed=0)
    with pytest.raises(ConfigError, match="no natural clients"):
        partition_natural(None)  # type: ignore[arg-type]
