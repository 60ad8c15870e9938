"""Noise correlated across rounds: DP-FTRL's tree, banded MF, BLT, and the identity baseline.

One module per strategy (:mod:`.tree`, :mod:`.banded`, :mod:`.blt`, :mod:`.identity`), each a
:class:`~.base.Strategy` (its Gram entries for the ledger, its worst case under a min-separation
schema for the claim, its optimizer where it has one) and a :class:`~.base.NoiseStream` (the
noise as a stream in torch, with the memory it states); :mod:`.workload` holds the workloads
(prefix sums, server momentum) and Toeplitz helpers. Importing the package registers every
strategy kind for :func:`~.base.strategy_from_dict`.

This package imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (where its normals are drawn).
"""

from dpfl.privacy.mechanisms.correlated.banded import BandedToeplitzStrategy, optimize_banded_toeplitz
from dpfl.privacy.mechanisms.correlated.base import NoiseStream, Strategy, strategy_from_dict, strategy_kinds
from dpfl.privacy.mechanisms.correlated.blt import BltStrategy, optimize_blt
from dpfl.privacy.mechanisms.correlated.identity import IdentityStrategy
from dpfl.privacy.mechanisms.correlated.tree import TreeStrategy
from dpfl.privacy.mechanisms.correlated.workload import momentum_workload, prefix_rmse, prefix_workload

__all__ = [
    "BandedToeplitzStrategy",
    "BltStrategy",
    "IdentityStrategy",
    "NoiseStream",
    "Strategy",
    "TreeStrategy",
    "momentum_workload",
    "optimize_banded_toeplitz",
    "optimize_blt",
    "prefix_rmse",
    "prefix_workload",
    "strategy_from_dict",
    "strategy_kinds",
]
