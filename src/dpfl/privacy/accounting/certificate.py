"""A certified (ε, δ) statement as a value: :class:`Certificate` and the JSON form of an ε.

:func:`dpfl.privacy.accounting.certify.certify` makes certificates; runs, dry runs and stored
records carry them. Reading one (``dpfl runs``, ``dpfl report``, :mod:`dpfl.rounds.result`)
needs only this module, which imports no accountant (neither ``dp_accounting`` nor scipy) and no
torch; :mod:`.certify` re-exports every name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from dpfl.privacy.accounting.events import PrivacyUnit, Relation

__all__ = ["BASIS_TEXT", "Basis", "Certificate", "Method", "epsilon_from_json", "json_epsilon"]

Method = Literal["rdp", "pld", "pure", "shuffle"]

#: What a certificate is conditional on. "ex-ante": (ε, δ)-DP of the mechanism including its
#: random client schedule (broadcasts amplified by the secret sample, or no client sampling at
#: all): comparable with a paper's ex-ante claim. "given-cohorts": the composition of the
#: releases at the cohorts actually drawn (the server's view under client sampling, and
#: per-participant public charges): a valid statement about this run, because the draw is
#: independent of the data, but not a guarantee of the random schedule (another seed draws other
#: cohorts and prints another figure).
Basis = Literal["ex-ante", "given-cohorts"]
BASIS_TEXT: dict[str, str] = {
    "ex-ante": "ex ante: holds over the random client schedule",
    "given-cohorts": "given the cohorts drawn in this run (not a guarantee of the random schedule)",
}


def json_epsilon(x: float | None) -> float | str | None:
    """An ε as JSON, the one encoder: ``inf`` is the string ``"inf"`` (JSON has no infinity)."""
    if x is None:
        return None
    return "inf" if math.isinf(float(x)) else float(x)


def epsilon_from_json(x: Any) -> float | None:
    """Inverse of :func:`json_epsilon` (also reads a float ``inf`` written by older versions)."""
    if x is None:
        return None
    return math.inf if x == "inf" else float(x)


@dataclass(frozen=True)
class Certificate:
    """A certified (ε, δ) statement and everything needed to read it.

    Attributes:
        epsilon: the tightest valid ε among the methods that apply (``inf`` = no guarantee).
        delta: the δ it holds at.
        method: which method gave ``epsilon`` ("rdp", "pld", "pure", or "shuffle" for the
            shuffle-amplification bound of :mod:`.shuffle`).
        observer: who looks ("server", "public", or a caller-defined name).
        privacy_unit: "client" or "record" — what the enforced sensitivity protects.
        relation: "add_remove" or "replace_one".
        epsilon_rdp: the RDP bound (None when RDP does not support the event).
        epsilon_pld: the PLD bound (None when not computed or not supported).
        epsilon_pure: the pure (δ = 0) bound when every release is pure DP.
        notes: what was assumed, dropped or skipped.
        basis: what the figure is conditional on (:data:`Basis`); None for records stored before
            it was recorded.
    """

    epsilon: float
    delta: float
    method: Method
    observer: str
    privacy_unit: PrivacyUnit
    relation: Relation
    epsilon_rdp: float | None = None
    epsilon_pld: float | None = None
    epsilon_pure: float | None = None
    notes: tuple[str, ...] = field(default=())
    basis: Basis | None = None

    @property
    def basis_text(self) -> str:
        """The basis for humans ("basis not recorded" for old records)."""
        return BASIS_TEXT.get(self.basis or "", "basis not recorded")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form; an infinite ε is written as the string ``"inf"``."""
        return {
            "epsilon": json_epsilon(self.epsilon),
            "delta": self.delta,
            "method": self.method,
            "observer": self.observer,
            "privacy_unit": self.privacy_unit,
            "relation": self.relation,
            "epsilon_rdp": json_epsilon(self.epsilon_rdp),
            "epsilon_pld": json_epsilon(self.epsilon_pld),
            "epsilon_pure": json_epsilon(self.epsilon_pure),
            "notes": list(self.notes),
            "basis": self.basis,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Certificate:
        """Inverse of :meth:`to_dict`.

        Args:
            data: the JSON form :meth:`to_dict` writes.
        """
        num = epsilon_from_json
        eps = num(data["epsilon"])
        return cls(
            epsilon=math.inf if eps is None else eps,
            delta=float(data["delta"]),
            method=data["method"],
            observer=data["observer"],
            privacy_unit=data["privacy_unit"],
            relation=data["relation"],
            epsilon_rdp=num(data.get("epsilon_rdp")),
            epsilon_pld=num(data.get("epsilon_pld")),
            epsilon_pure=num(data.get("epsilon_pure")),
            notes=tuple(data.get("notes", ())),
            basis=data.get("basis"),
        )
