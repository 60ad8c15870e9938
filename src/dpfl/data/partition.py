"""Split training samples among clients.

Every partitioner returns ``list[np.ndarray]``: for each client, the sorted int64 indices of its
training samples. No sample is given to two clients. Randomized partitioners take an explicit
integer ``seed`` and draw only from ``numpy.random.default_rng(seed)``, so the same arguments
always give the same partition. An impossible request is a :class:`~dpfl.errors.ConfigError`
naming the values involved.

Partitions used by the papers:

- IID with equal sizes (000 §5: |D_i| = 800 for MNIST, 128 for the SVM) or given sizes;
- "four digits per client" (000 §5, non-IID): each client holds exactly k labels, in equal
  amounts, and no two clients hold the same set of labels (:func:`partition_k_classes`);
- unbalanced (000 §5): five equal groups of clients holding 400/600/800/1000/1200 samples, IID
  within (:func:`partition_size_groups`);
- Dirichlet(α) label skew, the common non-IID benchmark (:func:`partition_dirichlet`);
- natural clients, e.g. the FEMNIST writer (:func:`partition_natural`).

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from dpfl.errors import ConfigError

_MAX_ENUMERATED_SETS = 200_000

UNBALANCED_GROUP_SIZES_000 = (400, 600, 800, 1000, 1200)
"""Samples per client in each of the five client groups of 000 §5 (unbalanced setting)."""


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or int(seed) < 0:
        raise ConfigError(f"`seed` must be a non-negative integer. Found {seed!r}.")
    return int(seed)


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 1:
        raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    return int(value)


def _check_labels(labels: np.ndarray | Sequence[int]) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ConfigError(f"`labels` must be one-dimensional. Found shape {list(arr.shape)}.")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"`labels` must hold integers. Found dtype {arr.dtype}.")
    return arr.astype(np.int64, copy=False)


def _finish(parts: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def partition_iid(
    num_samples: int,
    *,
    seed: int,
    num_clients: int | None = None,
    samples_per_client: int | None = None,
    sizes: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """IID: a uniformly random disjoint split.

    Give either ``sizes`` (one size per client) or ``num_clients`` (with ``samples_per_client``,
    default ``num_samples // num_clients``).

    Args:
        num_samples: number of training samples (indices ``0..num_samples-1``).
        seed: the partition's seed.
        num_clients: number of clients of equal size.
        samples_per_client: samples per client when ``num_clients`` is given.
        sizes: explicit per-client sizes.

    Raises:
        ConfigError: both or neither of ``sizes``/``num_clients``, or more samples asked than exist.
    """
    rng = np.random.default_rng(_check_seed(seed))
    if num_samples < 0:
        raise ConfigError(f"`num_samples` must be non-negative. Found {num_samples}.")
    if (sizes is None) == (num_clients is None):
        raise ConfigError("give exactly one of `sizes` and `num_clients`")
    if sizes is None:
        clients = _check_positive("num_clients", num_clients)
        if samples_per_client is None:
            per_client = num_samples // clients
            if per_client == 0:
                raise ConfigError(
                    f"{num_samples} samples cannot give each of {clients} clients at least one"
                )
        else:
            per_client = _check_positive("samples_per_client", samples_per_client)
        size_list = [per_client] * clients
    else:
        if samples_per_client is not None:
            raise ConfigError("`samples_per_client` cannot be combined with `sizes`")
        size_list = [int(s) for s in sizes]
        if not size_list or any(s < 0 for s in size_list):
            raise ConfigError(f"`sizes` must be a non-empty list of non-negative sizes. Found {list(sizes)}.")
    total = sum(size_list)
    if total > num_samples:
        raise ConfigError(
            f"the clients ask for {total} samples in total ({len(size_list)} clients) but only "
            f"{num_samples} exist"
        )
    order = rng.permutation(num_samples)[:total]
    bounds = np.cumsum([0, *size_list])
    return _finish([order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)])


def partition_size_groups(
    num_samples: int,
    *,
    num_clients: int,
    seed: int,
    group_sizes: Sequence[int] = UNBALANCED_GROUP_SIZES_000,
) -> list[np.ndarray]:
    """Unbalanced: clients in ``len(group_sizes)`` consecutive groups, IID within.

    Client ``i`` belongs to group ``g`` when it falls in the ``g``-th of ``len(group_sizes)``
    near-equal consecutive blocks of clients (``numpy.array_split`` sizes: the first
    ``num_clients % len(group_sizes)`` groups get one client more) and holds ``group_sizes[g]``
    samples. With the default sizes and 50 clients this is 000 §5's unbalanced MNIST setting.

    Raises:
        ConfigError: fewer clients than groups, or more samples asked than exist.
    """
    clients = _check_positive("num_clients", num_clients)
    groups = [int(s) for s in group_sizes]
    if not groups or any(s < 1 for s in groups):
        raise ConfigError(f"`group_sizes` must be positive sizes. Found {list(group_sizes)}.")
    if clients < len(groups):
        raise ConfigError(
            f"{clients} clients cannot form {len(groups)} groups (group_sizes={groups})"
        )
    members = np.array_split(np.arange(clients), len(groups))
    sizes = [size for size, block in zip(groups, members, strict=True) for _ in block]
    return partition_iid(num_samples, seed=seed, sizes=sizes)


def partition_dirichlet(
    labels: np.ndarray | Sequence[int],
    *,
    num_clients: int,
    alpha: float,
    seed: int,
    min_samples_per_client: int = 0,
    max_attempts: int = 100,
) -> list[np.ndarray]:
    """Dirichlet(α) label skew: each class is split among clients in proportions ~ Dir(α·1).

    Every sample is assigned. Small α gives clients few classes, large α approaches IID. When
    a draw leaves a client with fewer than ``min_samples_per_client`` samples, the whole draw is
    repeated (from the same generator, so the result still depends only on the seed).

    Args:
        labels: int [N] class of each training sample.
        num_clients: number of clients.
        alpha: concentration, > 0.
        seed: the partition's seed.
        min_samples_per_client: smallest acceptable client.
        max_attempts: draws to try before giving up.

    Raises:
        ConfigError: non-positive α, more clients × minimum than samples, or no acceptable draw
            within ``max_attempts``.
    """
    y = _check_labels(labels)
    clients = _check_positive("num_clients", num_clients)
    rng = np.random.default_rng(_check_seed(seed))
    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and alpha > 0):
        raise ConfigError(f"`alpha` must be a positive finite number. Found {alpha!r}.")
    if min_samples_per_client < 0:
        raise ConfigError(f"`min_samples_per_client` must be ≥ 0. Found {min_samples_per_client}.")
    if clients * min_samples_per_client > y.size:
        raise ConfigError(
            f"{clients} clients × min_samples_per_client={min_samples_per_client} = "
            f"{clients * min_samples_per_client} exceeds the {y.size} samples"
        )
    classes = np.unique(y)
    by_class = [np.flatnonzero(y == c) for c in classes]
    for _ in range(_check_positive("max_attempts", max_attempts)):
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        for members in by_class:
            shuffled = rng.permutation(members)
            proportions = rng.dirichlet(np.full(clients, float(alpha)))
            cuts = np.floor(np.cumsum(proportions)[:-1] * len(shuffled)).astype(np.int64)
            for client, chunk in enumerate(np.split(shuffled, cuts)):
                parts[client].append(chunk)
        result = [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts]
        if min(len(p) for p in result) >= min_samples_per_client:
            return _finish(result)
    raise ConfigError(
        f"no Dirichlet(alpha={alpha}) split of {y.size} samples among {clients} clients gave "
        f"every client ≥ {min_samples_per_client} samples in {max_attempts} attempts; raise "
        f"`alpha`, lower `min_samples_per_client` or use fewer clients"
    )


def _assign_label_sets(
    num_classes: int, num_clients: int, k: int, distinct: bool, rng: np.random.Generator
) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Pick k classes per client, balancing how often each class is used; distinct sets if asked.

    Returns:
        The label set (class positions) of each client, and how many clients use each class.
    """
    usage = np.zeros(num_classes, dtype=np.int64)
    chosen: list[tuple[int, ...]] = []
    taken: set[tuple[int, ...]] = set()
    for client in range(num_clients):
        picked: tuple[int, ...] | None = None
        # Least-used classes first, random among ties; then, if that set is taken, random sets
        # weighted towards little-used classes.
        order = np.lexsort((rng.random(num_classes), usage))
        candidate = tuple(sorted(int(c) for c in order[:k]))
        if not distinct or candidate not in taken:
            picked = candidate
        else:
            weights = 1.0 / (1.0 + usage)
            for _ in range(100):
                draw = rng.choice(num_classes, size=k, replace=False, p=weights / weights.sum())
                candidate = tuple(sorted(int(c) for c in draw))
                if candidate not in taken:
                    picked = candidate
                    break
            if picked is None and math.comb(num_classes, k) <= _MAX_ENUMERATED_SETS:
                # Nearly every set is taken: look at all of them, least-used first.
                free = [s for s in itertools.combinations(range(num_classes), k) if s not in taken]
                if free:
                    keys = rng.random(len(free))
                    picked = min(
                        zip(free, keys, strict=True), key=lambda fk: (int(usage[list(fk[0])].sum()), fk[1])
                    )[0]
        if picked is None:
            raise ConfigError(
                f"could not find a label set for client {client} that differs from the other "
                f"clients' (classes_per_client={k}, {num_classes} classes, {num_clients} clients); "
                f"pass distinct_label_sets=False"
            )
        taken.add(picked)
        chosen.append(picked)
        usage[list(picked)] += 1
    return chosen, usage


def partition_k_classes(
    labels: np.ndarray | Sequence[int],
    *,
    num_clients: int,
    classes_per_client: int,
    seed: int,
    samples_per_client: int | None = None,
    distinct_label_sets: bool = True,
) -> list[np.ndarray]:
    """Label skew with exactly k labels per client, in equal amounts (000 §5, "four digits").

    Label sets are chosen so that classes are used as evenly as possible and, by default, no
    two clients share the same set ("the variety is different from all other MTs", 000 §5).
    Each client gets ``samples_per_client // k`` samples of each of its labels, plus one more
    for the first ``samples_per_client % k`` of them (in increasing label order).

    Args:
        labels: int [N] class of each training sample.
        num_clients: number of clients.
        classes_per_client: k, the number of labels each client holds.
        seed: the partition's seed.
        samples_per_client: samples per client (≥ k); default: the largest equal amount the
            classes can supply.
        distinct_label_sets: require pairwise different label sets.

    Raises:
        ConfigError: k larger than the number of classes, more clients than distinct label sets,
            fewer samples per client than k, or a class without enough samples (named).
    """
    y = _check_labels(labels)
    clients = _check_positive("num_clients", num_clients)
    k = _check_positive("classes_per_client", classes_per_client)
    rng = np.random.default_rng(_check_seed(seed))
    classes, counts = np.unique(y, return_counts=True)
    if k > classes.size:
        raise ConfigError(
            f"classes_per_client={k} exceeds the {classes.size} classes present in `labels`"
        )
    if distinct_label_sets and clients > math.comb(classes.size, k):
        raise ConfigError(
            f"{clients} clients cannot have pairwise different sets of {k} labels out of "
            f"{classes.size} (only {math.comb(classes.size, k)} exist); pass "
            f"distinct_label_sets=False or use fewer clients"
        )
    label_sets, usage = _assign_label_sets(classes.size, clients, k, distinct_label_sets, rng)
    if samples_per_client is None:
        used = usage > 0
        per_label = int(np.min(counts[used] // usage[used]))
        if per_label == 0:
            worst = int(np.argmin(counts[used] // usage[used]))
            raise ConfigError(
                f"class {classes[used][worst]} has {counts[used][worst]} samples but "
                f"{usage[used][worst]} clients need it; use fewer clients"
            )
        samples_per_client = per_label * k
    spc = _check_positive("samples_per_client", samples_per_client)
    if spc < k:
        raise ConfigError(
            f"samples_per_client={spc} is smaller than classes_per_client={k}: a client could "
            f"not hold {k} labels"
        )
    shares = [spc // k + (1 if j < spc % k else 0) for j in range(k)]
    need = np.zeros(classes.size, dtype=np.int64)
    for label_set in label_sets:
        for j, c in enumerate(label_set):
            need[c] += shares[j]
    short = np.flatnonzero(need > counts)
    if short.size:
        c = int(short[0])
        raise ConfigError(
            f"class {classes[c]} has {counts[c]} samples but the clients holding it need "
            f"{need[c]} (samples_per_client={spc}, classes_per_client={k}, "
            f"{int(usage[c])} clients); lower samples_per_client or use fewer clients"
        )
    pools = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    cursor = np.zeros(classes.size, dtype=np.int64)
    parts = []
    for label_set in label_sets:
        chunks = []
        for j, c in enumerate(label_set):
            chunks.append(pools[c][cursor[c] : cursor[c] + shares[j]])
            cursor[c] += shares[j]
        parts.append(np.concatenate(chunks))
    return _finish(parts)


def partition_natural(
    groups: np.ndarray | Sequence[int],
    *,
    min_samples: int = 1,
    max_clients: int | None = None,
    seed: int | None = None,
) -> list[np.ndarray]:
    """One client per natural id (e.g. ``FederatedDataset.groups_train``, the FEMNIST writer).

    Clients come in increasing id order. Ids with fewer than ``min_samples`` samples are
    dropped; with ``max_clients``, that many ids are drawn at random (needs ``seed``) and kept in
    increasing order.

    Raises:
        ConfigError: ``groups`` missing or not 1-D, ``max_clients`` without ``seed``, or more
            clients asked than ids with enough samples.
    """
    if groups is None:
        raise ConfigError(
            "this data set has no natural clients (`groups_train` is None); choose another partition"
        )
    g = _check_labels(groups)
    if min_samples < 1:
        raise ConfigError(f"`min_samples` must be ≥ 1. Found {min_samples}.")
    ids, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    keep = np.flatnonzero(counts >= min_samples)
    if max_clients is not None:
        wanted = _check_positive("max_clients", max_clients)
        if seed is None:
            raise ConfigError("`max_clients` draws clients at random: give a `seed`")
        if wanted > keep.size:
            raise ConfigError(
                f"max_clients={wanted} exceeds the {keep.size} natural clients with at least "
                f"{min_samples} samples"
            )
        rng = np.random.default_rng(_check_seed(seed))
        keep = np.sort(rng.choice(keep, size=wanted, replace=False))
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=ids.size))])
    return _finish([order[bounds[i] : bounds[i + 1]] for i in keep])
