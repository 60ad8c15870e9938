"""Moved to :mod:`dpfl.runtime.flowerapps.distributed` (dpfl inside a user's Flower app); this path
stays importable for apps written against it (importing it still installs dpfl's SecAgg+ masks)."""

from dpfl.runtime.flowerapps.distributed import (
    DistributedDpLegacyStrategy,
    DistributedDpMod,
    DistributedDpPlan,
    SecAggPlusSettings,
    client_residues,
    clip_l2,
    distributed_dp_plan,
    floats_to_residue_sum,
    recovery_tolerance,
    residues_to_floats,
)

__all__ = [
    "DistributedDpLegacyStrategy",
    "DistributedDpMod",
    "DistributedDpPlan",
    "SecAggPlusSettings",
    "client_residues",
    "clip_l2",
    "distributed_dp_plan",
    "floats_to_residue_sum",
    "recovery_tolerance",
    "residues_to_floats",
]
