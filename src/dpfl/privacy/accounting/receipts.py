"""One observer's receipts, vectorized over clients: what the ledger records and certifies from.

Each observer keeps a shared stream (events and RDP curve) and, per charged client, a row of an
RDP matrix to which each release adds its event's curve for all its clients at once; the receipts
themselves are a log of (event, clients), so a client's release multiset is a count of identical
releases, grouped into distinct multisets on demand (:class:`_Histories`).

This module imports nothing from dpfl except its siblings in ``dpfl.privacy.accounting``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event as dpe

from dpfl.privacy.accounting.composition import _pure_kind

__all__ = ["ObserverState"]


@dataclass(frozen=True)
class _Histories:
    """The charged clients' own receipts, grouped: what certification reads.

    Row r (a client, in the order clients were first charged) holds ``counts[starts[r]:starts[r+1]]``
    receipts of the events ``columns[...]``, in the order the client first received each (the
    insertion order of a per-client ``Counter``, which fixes the order a PLD composes them in).
    ``group[r]`` numbers the row's release multiset (in order of first appearance);
    ``representatives`` is the first row of each multiset.
    """

    starts: np.ndarray
    columns: np.ndarray
    counts: np.ndarray
    group: np.ndarray
    representatives: np.ndarray

    @classmethod
    def of_pairs(cls, prow: np.ndarray, pcol: np.ndarray, counts: np.ndarray, first: np.ndarray,
                 num_rows: int) -> _Histories:
        """From the (row, event) pairs sorted by row then event, their counts and first receipts."""
        starts = np.searchsorted(prow, np.arange(num_rows + 1))
        canonical = np.stack([pcol, counts], axis=1).astype(np.int64)
        seen: dict[bytes, int] = {}
        group = np.empty(num_rows, dtype=np.int64)
        reps: list[int] = []
        for r in range(num_rows):
            g = seen.setdefault(canonical[starts[r]:starts[r + 1]].tobytes(), len(reps))
            if g == len(reps):
                reps.append(r)
            group[r] = g
        order = np.lexsort((first, prow))  # within a row: first receipt first
        return cls(starts, pcol[order], counts[order], group, np.asarray(reps, dtype=np.int64))

    @classmethod
    def of_log(cls, log: Sequence[tuple[int, np.ndarray]], num_rows: int, num_events: int) -> _Histories:
        empty = np.zeros(0, dtype=np.int64)
        if not log:
            return cls.of_pairs(empty, empty, empty, empty, num_rows)
        rows = np.concatenate([idx for _, idx in log])
        cols = np.repeat(np.array([c for c, _ in log], dtype=np.int64), [idx.size for _, idx in log])
        keys, first, counts = np.unique(rows * num_events + cols, return_index=True, return_counts=True)
        prow, pcol = np.divmod(keys, num_events)
        return cls.of_pairs(prow, pcol, counts, first, num_rows)

    def counter(self, row: int, events: Sequence[dpe.DpEvent]) -> Counter[dpe.DpEvent]:
        s, e = int(self.starts[row]), int(self.starts[row + 1])
        return Counter({events[int(c)]: int(k) for c, k in zip(self.columns[s:e], self.counts[s:e], strict=True)})


#: Kinds of an event for pure composition (:func:`_pure_kind`), as bits of a client's flags.
_KIND_BITS = {"pure": 1, "zero": 2, "none": 4}
#: A client's receipts are also kept as a dense [clients, distinct events] count matrix while it
#: has at most this many cells (a few distinct events: most algorithms); beyond, the log alone.
_DENSE_MAX_CELLS = 1 << 22


class ObserverState:
    """One observer's receipts: the shared (broadcast) stream and every charged client's own.

    Clients get a row when first charged (``pos[client]``, -1 before; ``ids`` in that order).
    ``rows`` holds each row's RDP curve, accumulated release by release (one vector addition per
    release for all its clients). The receipts themselves are a log of (event column, rows) and,
    while there are few distinct events, a dense count matrix with each count's first receipt: a
    client's release multiset is the count of each event, read without per-client Python objects
    and grouped into distinct multisets on demand (:class:`_Histories`, cached until the next
    receipt). ``kinds`` flags which kinds of event (:func:`_pure_kind`) each row has received.
    """

    def __init__(self, n_orders: int, num_clients: int) -> None:
        self.n_orders = n_orders
        self.shared_counts: Counter[dpe.DpEvent] = Counter()
        self.shared_rdp = np.zeros(n_orders)
        self.pos = np.full(num_clients, -1, dtype=np.int64)
        self.id_of = np.zeros(16, dtype=np.int64)
        self.kinds = np.zeros(16, dtype=np.uint8)
        self.n = 0
        self.rows = np.zeros((16, n_orders))
        self.events: list[dpe.DpEvent] = []
        self.event_bits: list[int] = []
        self.column: dict[dpe.DpEvent, int] = {}
        self.log: list[tuple[int, np.ndarray]] = []
        self.dense: tuple[np.ndarray, np.ndarray] | None = (np.zeros((16, 4), dtype=np.int32),
                                                            np.zeros((16, 4), dtype=np.int32))
        self._histories: _Histories | None = None

    @property
    def ids(self) -> np.ndarray:
        """Client ids of the rows, in the order they were first charged."""
        return self.id_of[: self.n]

    def row_of(self, cid: int | None) -> int | None:
        if cid is None or not 0 <= cid < self.pos.shape[0]:
            return None
        r = int(self.pos[cid])
        return r if r >= 0 else None

    def rows_of(self, clients: Sequence[int]) -> np.ndarray:
        """Rows of ``clients`` (distinct), giving new clients rows in the order listed."""
        cids = np.asarray(clients, dtype=np.int64)
        idx = self.pos[cids]
        fresh = idx < 0
        if fresh.any():
            new = cids[fresh]
            m = self.n + new.size
            if m > self.rows.shape[0]:
                cap = max(2 * self.rows.shape[0], m)
                more = cap - self.rows.shape[0]
                self.rows = np.vstack([self.rows, np.zeros((more, self.n_orders))])
                self.id_of = np.concatenate([self.id_of, np.zeros(more, dtype=np.int64)])
                self.kinds = np.concatenate([self.kinds, np.zeros(more, dtype=np.uint8)])
            self.pos[new] = np.arange(self.n, m)
            self.id_of[self.n:m] = new
            self.n = m
            idx = self.pos[cids]
        return idx

    def _dense_fit(self) -> None:
        """Grow the dense matrices to the rows and events in use, or drop them past the budget."""
        if self.dense is None:
            return
        counts, first = self.dense
        rows, cols = self.rows.shape[0], len(self.events)
        if counts.shape[0] >= rows and counts.shape[1] >= cols:
            return
        new_cols = max(counts.shape[1], 2 * counts.shape[1] if cols > counts.shape[1] else 0, cols)
        if rows * new_cols > _DENSE_MAX_CELLS:
            self.dense = None
            return
        grown = np.zeros((rows, new_cols), dtype=np.int32), np.zeros((rows, new_cols), dtype=np.int32)
        for old, big in zip(self.dense, grown, strict=True):
            big[: old.shape[0], : old.shape[1]] = old
        self.dense = grown

    def charge(self, clients: Sequence[int], event: dpe.DpEvent, vec: np.ndarray) -> None:
        """One release about ``clients``: its RDP added to their rows, its event counted and logged."""
        idx = self.rows_of(clients)
        self.rows[idx] += vec
        col = self.column.setdefault(event, len(self.events))
        if col == len(self.events):
            self.events.append(event)
            self.event_bits.append(_KIND_BITS[_pure_kind(event)])
        self.kinds[idx] |= self.event_bits[col]
        self._dense_fit()
        if self.dense is not None:
            counts, first = self.dense
            new = idx[counts[idx, col] == 0]
            first[new, col] = len(self.log)
            counts[idx, col] += 1
        self.log.append((col, idx))
        self._histories = None

    def histories(self) -> _Histories:
        if self._histories is None:
            if self.dense is not None:
                counts, first = self.dense
                prow, pcol = np.nonzero(counts[: self.n, : len(self.events)])
                self._histories = _Histories.of_pairs(prow, pcol, counts[prow, pcol], first[prow, pcol], self.n)
            else:
                self._histories = _Histories.of_log(self.log, self.n, max(len(self.events), 1))
        return self._histories

    def own_counts(self, row: int) -> Counter[dpe.DpEvent]:
        """The receipts of row ``row``, in the order the client first received each event."""
        if self.dense is not None and self._histories is None:
            counts, first = self.dense
            cols = np.flatnonzero(counts[row, : len(self.events)])
            cols = cols[np.argsort(first[row, cols], kind="stable")]
            return Counter({self.events[int(c)]: int(counts[row, c]) for c in cols})
        return self.histories().counter(row, self.events)

    def row_kinds(self, row: int | None) -> set[str]:
        """The kinds of event (:func:`_pure_kind`) in the shared stream and in row ``row``'s."""
        bits = int(self.kinds[row]) if row is not None else 0
        out = {kind for kind, bit in _KIND_BITS.items() if bits & bit}
        return out | {_pure_kind(e) for e in self.shared_counts}

    def to_counts(self, cid: int | None) -> Counter[dpe.DpEvent]:
        """The shared receipts, then client ``cid``'s own (None: the shared ones only)."""
        total: Counter[dpe.DpEvent] = Counter(self.shared_counts)
        row = self.row_of(cid)
        if row is not None:
            total.update(self.own_counts(row))
        return total

    def copy(self) -> ObserverState:
        out = ObserverState.__new__(ObserverState)
        out.__dict__.update(self.__dict__)
        out.shared_counts = Counter(self.shared_counts)
        out.shared_rdp = self.shared_rdp.copy()
        out.pos, out.id_of, out.rows, out.kinds = (self.pos.copy(), self.id_of.copy(), self.rows.copy(),
                                                   self.kinds.copy())
        out.events, out.event_bits, out.column, out.log = (list(self.events), list(self.event_bits), dict(self.column),
                                                           list(self.log))
        out.dense = None if self.dense is None else (self.dense[0].copy(), self.dense[1].copy())
        return out  # _histories: immutable, and the receipts are the same
