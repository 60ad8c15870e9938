"""A ledger's saved form: its configuration, every round's receipts and its history, as JSON.

:func:`from_saved` replays the receipts (no PLD is recomputed), so a restored ledger certifies
what the saved one did; a stored ledger written by an older dpfl loads as long as its
``version`` is known (release dicts of the former single ``Release`` class included).

This module imports nothing from dpfl except :mod:`dpfl.errors`, its siblings in
``dpfl.privacy.accounting`` and :mod:`dpfl.privacy.releases`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import epsilon_from_json, json_epsilon
from dpfl.privacy.accounting.events import SamplerLike, validate_sampling
from dpfl.privacy.accounting.ledger_view import LedgerView
from dpfl.privacy.releases import Release

L = TypeVar("L", bound=LedgerView)

__all__ = ["from_saved", "to_saved"]


def to_saved(ledger: LedgerView) -> dict[str, Any]:
    """:meth:`PrivacyLedger.to_dict <dpfl.privacy.accounting.ledger.PrivacyLedger.to_dict>`."""
    return {
        "version": 1,
        "config": {
            "num_clients": ledger.num_clients,
            "sampling": dict(ledger.sampling),
            "delta": ledger.delta,
            "relation": ledger.relation,
            "privacy_unit": ledger.privacy_unit,
            "sample_secret": ledger.sample_secret,
            "pld_every": ledger.pld_every,
            "pld_discretization": ledger.pld_discretization,
            "rdp_orders": list(ledger.rdp_orders),
        },
        "rounds": [_jsonable(r) for r in ledger._rounds],
        "history": [_jsonable(h) for h in ledger._history],
    }


def from_saved(cls: Callable[..., L], data: Mapping[str, Any], sampler: SamplerLike | None) -> L:
    """:meth:`PrivacyLedger.from_dict <dpfl.privacy.accounting.ledger.PrivacyLedger.from_dict>`."""
    if data.get("version") != 1:
        raise ConfigError(f"unknown ledger format version {data.get('version')!r}.")
    cfg = data["config"]
    if sampler is not None and validate_sampling(sampler.describe()) != validate_sampling(cfg["sampling"]):
        raise PrivacyPreconditionError(
            f"sampling mismatch: the stored ledger used {cfg['sampling']}, the engine declares "
            f"{sampler.describe()}."
        )
    ledger = cls(
        num_clients=int(cfg["num_clients"]),
        sampler=sampler if sampler is not None else cfg["sampling"],
        delta=float(cfg["delta"]),
        relation=cfg["relation"],
        privacy_unit=cfg["privacy_unit"],
        sample_secret=bool(cfg["sample_secret"]),
        pld_every=int(cfg["pld_every"]),
        pld_discretization=float(cfg["pld_discretization"]),
        rdp_orders=[float(o) for o in cfg["rdp_orders"]],
    )
    for r in data["rounds"]:
        releases = [Release.from_dict(x) for x in r["releases"]]
        parts = ledger._check_round(releases, ledger.sampling, r["participants"], int(r["round"]))
        ledger._apply(releases, parts)
        ledger._note_participation(parts)
        ledger._note_schema(int(r["round"]), parts)
        claimed = r["claimed_epsilon"]
        if isinstance(claimed, dict):
            claimed = {int(k): float(v) for k, v in claimed.items()}
        elif claimed is not None:
            claimed = float(claimed)  # "inf" parses too
        ledger._rounds.append(
            {
                "round": int(r["round"]),
                "participants": list(parts),
                "releases": [x.to_dict() for x in releases],
                "claimed_epsilon": claimed,
            }
        )
    ledger._history = [_from_jsonable(h) for h in data.get("history", [])]
    return ledger


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return json_epsilon(value)
    return value


def _from_jsonable(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    rdp = out.get("certified_rdp")
    if isinstance(rdp, dict):
        out["certified_rdp"] = {k: epsilon_from_json(v) for k, v in rdp.items()}
    claimed = out.get("claimed_epsilon")
    if isinstance(claimed, dict):
        out["claimed_epsilon"] = {int(k): float(v) for k, v in claimed.items()}
    elif claimed is not None:
        out["claimed_epsilon"] = float(claimed)
    return out
