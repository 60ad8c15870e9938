"""Split & shuffle (001 Algorithm 3, §3.3 "Splitting & Shuffling"): the server averages by id.

Three parties, three types:

* **client** — :func:`split` turns one client's randomized model into (parameter id, value)
  tuples (:class:`ClientReports`); a cohort's reports can also be handed over stacked
  ``[K, P]`` (row k = client k, column j = id j), which is the same tuples without materializing
  the ids.
* **shuffler** (trusted: it sees who sent what) — :class:`Shuffler` mixes every client's tuples
  and hands on, per parameter id, the *multiset* of values reported for it
  (:class:`IdMultisets`).
* **server** — :func:`mean_by_id` averages each id's multiset (001 Algorithm 1 line 8). It
  accepts nothing but an :class:`IdMultisets`.

Structural guarantee. :class:`IdMultisets` holds per id a canonical multiset: ``support`` (the
distinct reported values, ascending) and ``counts`` (their multiplicities) — no client ids and no
arrival order exist in it. Inputs that differ only in which client sent which tuple, or in the
order the tuples arrived, give bit-identical :class:`IdMultisets`; anything the server computes is
therefore a function of the per-id multisets alone (see ``tests/unit/server/test_shuffle.py``).
A uniformly random permutation of the tuples reveals exactly the multisets, so the canonical
form is what a trusted shuffler's output is worth — and it needs no randomness. The tuple path
(:meth:`Shuffler.shuffle`) still permutes with an explicit generator, as a deployed shuffler's
output stream would be, before canonicalizing.

Two canonical forms are produced: two-point reports (001 eq. 2) take one of two public values
per id, so :meth:`Shuffler.shuffle_two_point` gives ``support = (low, high)`` with the counts of
each (two passes over the cohort: millions of tuples per round, no Python loop); any other
values get ``support`` = the sorted reports with count 1 (padded with count 0 where an id has
fewer reports than another).

What the canonical form does *not* give: privacy against a server that sees the tuples arrive
(001's local random delays leave arrival times and connections visible). Whether a trusted
shuffler exists is a deployment fact, stated with the certified ε
(:mod:`dpfl.privacy.accounting.shuffle`).

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (the tuple path's permutation, from a torch or a ChaCha20
generator).

References:
    001_8ad797a147f2b989.txt, Algorithm 1 (line 8: mean of each weight by id), Algorithm 3,
    Figure 2, §4.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.draw import randperm
from dpfl.rng import NoiseGenerator

__all__ = ["ClientReports", "IdMultisets", "Shuffler", "mean_by_id", "split"]


@dataclass(frozen=True)
class ClientReports:
    """One client's split model: tuples (parameter id, value), as 001 Algorithm 3 emits them.

    Attributes:
        ids: int64 ``[M]`` parameter ids (positions in the flat parameter vector).
        values: floating ``[M]`` reported values.
    """

    ids: Tensor
    values: Tensor

    def __post_init__(self) -> None:
        if self.ids.dim() != 1 or self.values.dim() != 1 or self.ids.shape != self.values.shape:
            raise ConfigError(
                f"`ids` and `values` must be 1-D of equal length. Found {tuple(self.ids.shape)} and "
                f"{tuple(self.values.shape)}."
            )
        if self.ids.dtype != torch.int64:
            raise ConfigError(f"`ids` must be int64. Found {self.ids.dtype}.")
        if not self.values.is_floating_point():
            raise ConfigError(f"`values` must be floating point. Found {self.values.dtype}.")


def split(values: Tensor) -> ClientReports:
    """Tag every weight of one client's flat model ``[P]`` with its id (001 Algorithm 3, line 2).

    >>> split(torch.tensor([0.5, -0.5])).ids.tolist()
    [0, 1]
    """
    if values.dim() != 1:
        raise ConfigError(f"`split` takes one client's flat model [P]. Found shape {tuple(values.shape)}.")
    return ClientReports(torch.arange(values.numel(), device=values.device), values)


@dataclass(frozen=True)
class IdMultisets:
    """Per parameter id, the multiset of reported values — and nothing else.

    Canonical form: row j is id j. ``support[j]`` lists values in ascending order for the
    entries with a positive count, followed by padding entries (value 0, count 0);
    ``counts[j, v]`` is the multiplicity of ``support[j, v]``.

    Attributes:
        support: floating ``[P, V]``.
        counts: int64 ``[P, V]``, >= 0.
    """

    support: Tensor
    counts: Tensor

    def __post_init__(self) -> None:
        if self.support.dim() != 2 or self.support.shape != self.counts.shape:
            raise ConfigError(
                f"`support` and `counts` must both be [P, V]. Found {tuple(self.support.shape)} and "
                f"{tuple(self.counts.shape)}."
            )
        if self.counts.dtype != torch.int64 or not self.support.is_floating_point():
            raise ConfigError(
                f"`counts` must be int64 and `support` floating. Found {self.counts.dtype}, {self.support.dtype}."
            )

    @property
    def num_ids(self) -> int:
        """P, the number of parameter ids."""
        return int(self.support.shape[0])

    def num_reports(self) -> Tensor:
        """Reports received per id ``[P]``."""
        return self.counts.sum(dim=1)


def mean_by_id(multisets: IdMultisets) -> Tensor:
    """The average of each id's reported values (001 Algorithm 1, line 8), ``[P]`` float32.

    The server side of split & shuffle: it sees per-id multisets only (see the module
    docstring). Sums are taken in float64.

    Raises:
        ConfigError: the argument is not an :class:`IdMultisets` (e.g. a stacked ``[K, P]``
            cohort, which would carry client identity), or an id received no report.
    """
    if not isinstance(multisets, IdMultisets):
        raise ConfigError(
            "`mean_by_id` takes the shuffler's per-id multisets (`IdMultisets`), never client-ordered "
            f"reports. Found {type(multisets).__name__}."
        )
    n = multisets.num_reports()
    if bool((n == 0).any()):
        missing = torch.nonzero(n == 0).flatten()[:5].tolist()
        raise ConfigError(f"ids {missing} received no report; cannot average them.")
    total = (multisets.support.to(torch.float64) * multisets.counts).sum(dim=1)
    return (total / n).to(torch.float32)


class Shuffler:
    """The trusted mixer between clients and server (see the module docstring)."""

    @staticmethod
    def shuffle(reports: Sequence[ClientReports], num_ids: int, generator: NoiseGenerator) -> IdMultisets:
        """Mix every client's tuples and group them by id (generic values).

        The concatenated tuples are permuted uniformly at random with ``generator`` (what a
        deployed shuffler emits), then grouped by id with each id's values sorted — the canonical
        form, identical for any permutation.

        Args:
            reports: one :class:`ClientReports` per client.
            num_ids: P; every id must be in ``[0, P)``.
            generator: the shuffler's randomness.

        Returns:
            the per-id multisets (support = sorted values, count 1 each; count 0 padding).
        """
        if isinstance(num_ids, bool) or not isinstance(num_ids, int) or num_ids < 1:
            raise ConfigError(f"`num_ids` must be a positive integer. Found {num_ids!r}.")
        if not reports:
            raise ConfigError("`reports` is empty: nothing to shuffle.")
        for r in reports:
            if not isinstance(r, ClientReports):
                raise ConfigError(f"`reports` must hold ClientReports. Found {type(r).__name__}.")
        ids = torch.cat([r.ids for r in reports])
        values = torch.cat([r.values for r in reports])
        if bool((ids < 0).any()) or bool((ids >= num_ids).any()):
            raise ConfigError(f"report ids must be in [0, {num_ids}).")
        perm = randperm(ids.numel(), generator, device=ids.device)
        ids, values = ids[perm], values[perm]
        by_value = torch.argsort(values, stable=True)
        ids, values = ids[by_value], values[by_value]
        by_id = torch.argsort(ids, stable=True)
        ids, values = ids[by_id], values[by_id]
        per_id = torch.bincount(ids, minlength=num_ids)
        width = int(per_id.max())
        starts = torch.cumsum(per_id, 0) - per_id
        slot = torch.arange(ids.numel(), device=ids.device) - starts[ids]
        support = torch.zeros(num_ids, width, dtype=values.dtype, device=values.device)
        counts = torch.zeros(num_ids, width, dtype=torch.int64, device=values.device)
        support[ids, slot] = values
        counts[ids, slot] = 1
        return IdMultisets(support, counts)

    @staticmethod
    def shuffle_stacked(values: Tensor) -> IdMultisets:
        """Mix a stacked cohort ``[K, P]`` (row = client, column = id) with generic values.

        Returns:
            per id, the K values sorted ascending with count 1 each.
        """
        if values.dim() != 2 or not values.is_floating_point():
            raise ConfigError("`values` must be a floating [K, P] cohort. "
                              f"Found {tuple(values.shape)}, {values.dtype}.")
        support = torch.sort(values.t(), dim=1).values.contiguous()
        return IdMultisets(support, torch.ones(support.shape, dtype=torch.int64, device=values.device))

    @staticmethod
    def shuffle_two_point(values: Tensor, low: Tensor, high: Tensor) -> IdMultisets:
        """Mix a stacked cohort of two-point reports ``[K, P]`` (001 eq. 2) into per-id counts.

        Every report of id j must equal ``low[j]`` or ``high[j]`` (the public outputs of the
        randomizer for that id's range); the multiset of id j is then (low[j] × (K − h_j),
        high[j] × h_j).

        Args:
            values: ``[K, P]``, row k = client k's reports.
            low: ``[P]`` the lower output per id (same dtype as ``values``).
            high: ``[P]`` the higher output per id, > ``low``.

        Raises:
            ConfigError: a report is neither value of its id, or shapes disagree.
        """
        if values.dim() != 2 or not values.is_floating_point():
            raise ConfigError("`values` must be a floating [K, P] cohort. "
                              f"Found {tuple(values.shape)}, {values.dtype}.")
        p = values.shape[1]
        if low.shape != (p,) or high.shape != (p,):
            raise ConfigError(
                f"`low` and `high` must be [P] = [{p}]. Found {tuple(low.shape)} and {tuple(high.shape)}."
            )
        low = low.to(values.dtype)
        high = high.to(values.dtype)
        if not bool((high > low).all()):
            raise ConfigError("`high` must exceed `low` for every id.")
        k = values.shape[0]
        num_high = torch.eq(values, high).sum(dim=0)
        num_low = torch.eq(values, low).sum(dim=0)
        if not bool((num_high + num_low == k).all()):
            bad = torch.nonzero(num_high + num_low != k).flatten()[:5].tolist()
            raise ConfigError(
                f"ids {bad} received reports that are neither of their two two-point values; "
                "`shuffle_two_point` takes only randomizer outputs (use `shuffle_stacked` otherwise)."
            )
        support = torch.stack([low, high], dim=1)
        counts = torch.stack([num_low, num_high], dim=1).to(torch.int64)
        return IdMultisets(support, counts)
