"""Tree aggregation (DP-FTRL): one participation in one tree of Gaussian node noise — its release,
and how dp-accounting's tree event is priced under the ledger's relation.

DP-FTRL (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and Private (Deep) Learning
without Sampling or Shuffling", ICML 2021, arXiv 2103.00039) releases, every round, the prefix sum
of the rounds' clipped sums through a binary tree: every completed dyadic node carries the sum of
its leaves plus N(0, σ²C²) per coordinate, and the prefix sums (and Honaker's estimator of them,
a post-processing) are computed from the nodes. One participation of a client changes the nodes
on its leaf's path by at most C each: an L2 shift of at most C·sqrt(depth) with
depth = ⌈log2(steps + 1)⌉ for a tree of ``steps`` leaves (Kairouz et al., Appendix D; dp-accounting
``SingleEpochTreeAggregationDpEvent``: RDP α·depth/(2σ²) per participation, the tree restarted
between epochs so that no client occurs twice in one tree — the schema the ledger enforces:
min-separation b >= the restart period). Several epochs compose one such event per participation:
TF Privacy's ``compute_rdp_tree_restart`` (Σ over epochs of α·depth_e/(2σ²)).

dp-accounting prices the event only under its ``REPLACE_SPECIAL`` relation (a record replaced by a
special, contributing-nothing record: *zero-out*); the ledger's relation for DP-FTRL is add/remove
with the participation schedule fixed (a client's update removed from the sums it is in, the
schedule of every client unchanged), which is that relation. This module registers the event with
:mod:`dpfl.privacy.accounting.registry` so the certificate prices it through dp-accounting under
``REPLACE_SPECIAL`` and says so; dp-accounting's PLD does not support the tree event, so the
certificate is RDP's.

This module imports nothing from dpfl except :mod:`dpfl.errors`, the accounting registry and the
release base.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting as dpa
import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.registry import EventAccounting, register_event
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer

__all__ = ["TreeRelease", "tree_depth", "tree_rdp_vector"]


def tree_depth(steps: int) -> int:
    """⌈log2(steps + 1)⌉: the nodes on a leaf's path that dp-accounting charges for a tree of
    ``steps`` leaves (``_compute_rdp_single_epoch_tree_aggregation``)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"a tree's `steps` must be a positive integer. Found {steps!r}.")
    return math.ceil(math.log2(steps + 1))


def tree_rdp_vector(event: dpe.DpEvent, relation: str, orders: Sequence[float]) -> np.ndarray:
    """RDP of a bare ``SingleEpochTreeAggregationDpEvent`` at ``orders``: dp-accounting's own
    accountant under ``REPLACE_SPECIAL`` (zero-out), for a ledger under add/remove."""
    if not isinstance(event, dpe.SingleEpochTreeAggregationDpEvent):
        raise PrivacyPreconditionError(f"tree aggregation cannot be priced inside {type(event).__name__} "
                                       "(no sampling amplification is proven for it here).")
    if relation != "add_remove":
        raise PrivacyPreconditionError(f"tree aggregation is priced under zero-out (add/remove with a fixed "
                                       f"schedule), not {relation}.")
    acc = rdp_acc.RdpAccountant(list(orders), dpa.NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(event)
    return np.asarray(acc._rdp, dtype=np.float64).copy()


@dataclass(frozen=True)
class TreeRelease(Release):
    """One participation of each named client in one tree of DP-FTRL's tree aggregation.

    Attributes:
        noise_multiplier: σ, the node noise std over the clip norm C.
        tree_steps: the leaves of the tree the participation is in (its restart period, or fewer
            for the last tree of a run).
    """

    kind: ClassVar[str] = "tree_aggregation"
    observer: Observer
    noise_multiplier: float
    tree_steps: int
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> TreeRelease:
        return cls(data["observer"], float(data["noise_multiplier"]), int(data["tree_steps"]), client_ids)

    def __post_init__(self) -> None:
        checked_observer(self.observer)
        if self.client_ids is None:
            raise ConfigError("a tree release names the clients that took part (no amplification by sampling).")
        if self.amplifiable:
            raise ConfigError("a tree release cannot be amplified by sampling.")
        z = self.noise_multiplier
        if not isinstance(z, (int, float)) or math.isnan(z) or z < 0:
            raise ConfigError(f"`noise_multiplier` must be a number >= 0. Found {z!r}.")
        tree_depth(self.tree_steps)
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))

    def event(self) -> dpe.DpEvent:
        if self.noise_multiplier == 0:
            return dpa.NonPrivateDpEvent()
        if math.isinf(self.noise_multiplier):
            return dpa.NoOpDpEvent()
        return dpe.SingleEpochTreeAggregationDpEvent(float(self.noise_multiplier), int(self.tree_steps))

    def check_ledger(self, relation: str, sampling_kind: str) -> None:
        if relation != "add_remove":
            raise PrivacyPreconditionError(f"a tree release is priced under zero-out (add/remove with a fixed "
                                           f"schedule); this ledger is {relation}.")
        if sampling_kind not in ("min_separation", "availability"):
            raise PrivacyPreconditionError(
                "a tree release needs a min-separation participation schema (at most one participation per "
                f"tree, the tree restarted every b rounds); this ledger's sampling is {sampling_kind!r}.")

    def to_dict(self) -> dict[str, Any]:
        return {"observer": self.observer, "kind": self.kind, "noise_multiplier": self.noise_multiplier,
                "tree_steps": self.tree_steps, "client_ids": list(self.client_ids or ()), "amplifiable": False}


register_event(dpe.SingleEpochTreeAggregationDpEvent, EventAccounting(
    rdp=tree_rdp_vector,
    rdp_note=("RDP: tree aggregation priced by dp-accounting's SingleEpochTreeAggregationDpEvent (Kairouz et al. "
              "2021, App. D), one event per participation (tree restarts)"),
    relation_note=("tree aggregation: neighbours differ in one client's updates, the participation schedule "
                   "fixed (zero-out; dp-accounting's REPLACE_SPECIAL)"),
    pld_note="PLD: dp-accounting has no PLD for tree aggregation; certified by RDP.",
))
