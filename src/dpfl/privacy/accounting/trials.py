"""Checking a round before it runs: the target-ε stop and the Rényi filter of a ledger.

:meth:`PrivacyLedger.would_exceed <dpfl.privacy.accounting.ledger.PrivacyLedger.would_exceed>` and
:meth:`~dpfl.privacy.accounting.ledger.PrivacyLedger.within_budget` add a round's curves to copies
of the recorded rows (:func:`trial_curves`) and answer from the pointwise maximum first (ε is
non-decreasing in every order's RDP); nothing is recorded.

This module imports nothing from dpfl except its siblings in ``dpfl.privacy.accounting`` and the
release base.
"""

from __future__ import annotations

from collections.abc import Sequence

import dp_accounting as dpa
import numpy as np

from dpfl.privacy.accounting.certify import rdp_vector
from dpfl.privacy.accounting.ledger_view import LedgerView
from dpfl.privacy.accounting.worst import worst_rdp
from dpfl.privacy.releases.base import Release

__all__ = ["exceeds", "full_rdp", "recorded_full_rdp", "trial_curves"]


def exceeds(ledger: LedgerView, shared: np.ndarray, rows: np.ndarray, ids: np.ndarray, target: float) -> bool:
    """Whether :func:`.worst.worst_rdp` is above ``target``. ε is non-decreasing in every order's
    RDP, so when the pointwise maximum of the curves is within the target, so is every client."""
    if rows.shape[0]:
        top = rows.max(axis=0) + shared
        if not np.isnan(top).any() and ledger._eps(top) <= target:
            return False
    return worst_rdp(ledger, shared, rows, ids)[0] > target



def trial_curves(ledger: LedgerView, observer: str, releases: Sequence[Release],
           parts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shared RDP curve, own RDP curve per charged client, their ids) of ``observer`` after
    ``releases`` (already checked) — the same additions recording them would make, on copies
    (clients charged for the first time are appended in the order they are charged)."""
    st = ledger._state[observer]
    shared = st.shared_rdp.copy()
    rows, ids = st.rows[: st.n], st.ids
    fresh: dict[int, int] = {}
    copied = False
    for rel in releases:
        if rel.observer != observer:
            continue
        sh, clients, event = ledger._targets(rel, parts)
        if sh is not None and not isinstance(sh, dpa.NoOpDpEvent):
            shared += rdp_vector(sh, ledger.relation, ledger.rdp_orders)
        if clients and not isinstance(event, dpa.NoOpDpEvent):
            vec = rdp_vector(event, ledger.relation, ledger.rdp_orders)
            cids = np.asarray(clients, dtype=np.int64)
            idx = st.pos[cids]
            new = [int(c) for c in cids[idx < 0] if int(c) not in fresh]
            if not copied:
                rows, ids, copied = rows.copy(), ids.copy(), True
            if new:
                fresh.update((c, rows.shape[0] + j) for j, c in enumerate(new))
                rows = np.vstack([rows, np.zeros((len(new), st.n_orders))])
                ids = np.concatenate([ids, np.asarray(new, dtype=np.int64)])
            if fresh:
                idx = np.asarray([fresh[int(c)] if r < 0 else int(r) for c, r in zip(cids, idx, strict=True)],
                                 dtype=np.int64)
            rows[idx] += vec
    return shared, rows, ids



def full_rdp(ledger: LedgerView, shared: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """[num_clients, orders]: every client's RDP curve (shared stream plus its own row)."""
    full = np.tile(shared, (ledger.num_clients, 1))
    full[ids] += rows
    return full



def recorded_full_rdp(ledger: LedgerView, observer: str) -> np.ndarray:
    """:func:`full_rdp` of what is recorded (cached until the next receipt)."""
    cached = ledger._full_rdp_cache.get(observer)
    if cached is None or cached[0] != ledger._version:
        st = ledger._state[observer]
        cached = (ledger._version, full_rdp(ledger, st.shared_rdp, st.rows[: st.n], st.ids))
        ledger._full_rdp_cache[observer] = cached
    return cached[1]
