"""What the ledger's helper modules (:mod:`.worst`, :mod:`.trials`, :mod:`.saved`) read of a ledger:
a protocol, so that they depend on these members and not on the ledger module (no import circle).
:class:`dpfl.privacy.accounting.ledger.PrivacyLedger` is the one implementation.

This module imports nothing from dpfl except its siblings in ``dpfl.privacy.accounting`` and
the release base.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from dp_accounting import dp_event as dpe

from dpfl.privacy.accounting.certify import Certificate
from dpfl.privacy.accounting.events import PrivacyUnit, Relation, SamplerLike
from dpfl.privacy.accounting.receipts import ObserverState
from dpfl.privacy.releases.base import Release

__all__ = ["LedgerView"]


class LedgerView(Protocol):
    """The members of a privacy ledger its helper modules use."""

    num_clients: int
    sampling: dict[str, Any]
    delta: float
    relation: Relation
    privacy_unit: PrivacyUnit
    sample_secret: bool
    pld_every: int
    pld_discretization: float
    rdp_orders: tuple[float, ...]
    _state: dict[str, ObserverState]
    _version: int
    _full_rdp_cache: dict[str, tuple[int, np.ndarray]]
    _rounds: list[dict[str, Any]]
    _history: list[dict[str, Any]]
    _drawn_observers: set[str]

    def _eps(self, rdp: np.ndarray) -> float: ...

    def _eps_rows(self, rdp: np.ndarray) -> np.ndarray: ...

    def _worst_rdp(self, observer: str) -> tuple[float, int | None]: ...

    def _pld_for(self, counts: Counter[dpe.DpEvent]) -> tuple[float | None, list[str]]: ...

    def _pure(self, observer: str, cid: int | None, row: int | None) -> float | None: ...

    def _certificate(self, observer: str, cid: int | None, method: str) -> Certificate: ...

    def _targets(self, release: Release,
                 participants: tuple[int, ...]) -> tuple[dpe.DpEvent | None, Sequence[int], dpe.DpEvent]: ...

    def _check_round(self, releases: Sequence[Release], sampling: Mapping[str, Any] | SamplerLike,
                     participants: Iterable[int], round_idx: int | None = None) -> tuple[int, ...]: ...

    def _apply(self, releases: Sequence[Release], participants: tuple[int, ...]) -> None: ...

    def _note_participation(self, parts: tuple[int, ...]) -> None: ...

    def _note_schema(self, round_idx: int, parts: tuple[int, ...]) -> None: ...
