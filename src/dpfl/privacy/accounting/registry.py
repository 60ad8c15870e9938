"""How the accountants price an event dp-accounting does not know: one entry per event type.

dp-accounting's RDP and PLD accountants price its own events (Gaussian, randomized response,
their sampled and composed forms). A mechanism of dpfl's own — today the Skellam sum of secure
aggregation — defines its event as a frozen ``DpEvent`` subclass in its release module
(:mod:`dpfl.privacy.releases`) and registers here how that event is accounted: its RDP curve
(the event itself or inside a sampling wrapper) and, for the PLD, a dp-accounting event proven to
dominate it (a dominating pair in the sense of Zhu, Dong, Wang 2022, arXiv 2106.08567, Def. 7:
its hockey-stick divergence is at least the mechanism's at every ε, in both directions) or why
there is none. :mod:`.certify` asks this registry for every leaf it meets and never names a
mechanism.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError

__all__ = ["EventAccounting", "accounting_of", "register_event"]

_WRAPPERS = (dpe.PoissonSampledDpEvent, dpe.SampledWithoutReplacementDpEvent, dpe.SampledWithReplacementDpEvent)


@dataclass(frozen=True)
class EventAccounting:
    """How one event type (bare or inside a sampling wrapper) is priced.

    Attributes:
        rdp: ``rdp(event, relation, orders)`` → the RDP curve at ``orders`` of the event as met
            (the bare event or a sampling wrapper around it); raises
            :class:`dpfl.errors.PrivacyPreconditionError` for a relation or wrapper it cannot price.
        rdp_note: the certificate's note naming the theorems the curve comes from.
        pld_note: why no PLD is given where ``pld_dominating`` gives none (the certificate says it
            and falls back to RDP).
        relation_note: the neighbouring relation the pricing holds for, where it is narrower than
            the ledger's (a certificate with such an event says so); empty: the ledger's own.
        pld_dominating: ``pld_dominating(event, relation)`` → ``(dominating, note)``: an event
            dp-accounting's PLD accountant prices (the bare event or a sampling wrapper around
            it, as met) whose privacy-loss distribution dominates the mechanism's, with the
            certificate's note naming the proof; ``(None, why)`` where no domination is proven
            for these parameters. ``None``: the mechanism has no PLD route at all.
    """

    rdp: Callable[[dpe.DpEvent, str, Sequence[float]], np.ndarray]
    rdp_note: str
    pld_note: str
    relation_note: str = ""
    pld_dominating: Callable[[dpe.DpEvent, str], tuple[dpe.DpEvent | None, str]] | None = None


_REGISTRY: dict[type[dpe.DpEvent], EventAccounting] = {}


def register_event(event_type: type[dpe.DpEvent], accounting: EventAccounting) -> None:
    """Make ``event_type`` priceable by :mod:`.certify` (called once, by the mechanism's module)."""
    known = _REGISTRY.get(event_type)
    if known is not None and known != accounting:
        raise ConfigError(f"the event type {event_type.__name__} is already registered with another accounting.")
    _REGISTRY[event_type] = accounting


def accounting_of(leaf: dpe.DpEvent) -> EventAccounting | None:
    """The registered accounting of ``leaf`` (looked up through sampling wrappers), or None for
    the events dp-accounting prices itself."""
    while isinstance(leaf, _WRAPPERS):
        leaf = leaf.event
    return _REGISTRY.get(type(leaf))
