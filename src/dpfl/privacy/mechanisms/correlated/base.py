"""Correlated noise across rounds: the common shape of every strategy (DP-FTRL's tree, banded MF, BLT).

A *strategy* is a factorization A = B·C of a linear workload A over n rounds (A = prefix sums:
the lower-triangular matrix of ones; or the server optimizer's map, e.g. momentum): the mechanism
releases C·x + z (z ~ N(0, σ² I) per coordinate, x the rounds' clipped sums, one row per round)
and the estimate of A·x is B·(C·x + z) = A·x + B·z. Streamed, this is the same as adding to
round t's sum the noise w_t = (W·z)_t, W = C⁻¹ for a square C (banded, BLT, identity) and the
differences of the tree estimator's prefix noise for the tree; the server then runs its usual
optimizer on x_t + σ·w_t. Everything a ledger needs is in C's columns:

* a client taking part in rounds s₁ < s₂ < … moves C·x by Σ_j C[:, s_j]·g_j with ‖g_j‖ ≤ 1 (in
  units of the clip norm); its squared L2 sensitivity is at most Σ_{i,j} |⟨c_{s_i}, c_{s_j}⟩|
  (equal when the Gram matrix CᵀC is non-negative and the g_j align) — so a participation at t
  after ``previous`` adds :meth:`Strategy.sensitivity_increment` = G_tt + 2·Σ_{s∈previous} |G_st|
  to it, and the run's Gaussian mechanism (noise multiplier σ against that sensitivity)
  composes exactly as Gaussians with the increments (RDP and PLD of Gaussians compose by adding
  squared sensitivities);
* :meth:`Strategy.max_sensitivity` is the worst participation pattern a schema allows (at most
  k participations, at least b rounds apart): the figure the papers and jax-privacy report.

This package imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (where its normals are drawn).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from dpfl.errors import ConfigError
from dpfl.rng import NoiseGenerator

__all__ = ["NoiseStream", "Strategy", "strategy_from_dict", "strategy_kinds"]

_KINDS: dict[str, type[Strategy]] = {}


def strategy_kinds() -> tuple[str, ...]:
    """The registered strategy ``kind`` tags."""
    return tuple(_KINDS)


def strategy_from_dict(data: Mapping[str, Any]) -> Strategy:
    """The strategy stored as ``data`` (any registered kind: its module registers it on import)."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    cls = _KINDS.get(str(kind))
    if cls is None:
        raise ConfigError(f"unknown correlated-noise strategy kind {kind!r}; valid: {list(_KINDS)}.")
    return cls.from_dict(data)


class NoiseStream(abc.ABC):
    """The noise a strategy adds round after round, generated as a stream.

    ``next(t, generator)`` must be called for t = 0, 1, 2, … in order; it draws round t's fresh
    standard normals (the z entries that become known at round t) from ``generator`` only, and
    returns w_t (shape ``[num_params]``, unit noise std: the caller multiplies by σ·clip). Its
    state between rounds is :attr:`memory_vectors` vectors of ``num_params`` entries.
    """

    num_params: int
    next_round: int  # the round the next call to `next` must be for

    @abc.abstractmethod
    def next(self, round_idx: int, generator: NoiseGenerator) -> torch.Tensor:
        """w_{round_idx}; raises ConfigError when called out of order or past the strategy's n."""

    @property
    @abc.abstractmethod
    def memory_vectors(self) -> int:
        """How many vectors of ``num_params`` entries the stream holds between rounds."""


class Strategy(abc.ABC):
    """A lower-triangular factorization of the prefix workload over ``n`` rounds (see the module)."""

    kind: ClassVar[str]
    n: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if isinstance(kind, str):
            _KINDS[kind] = cls

    @abc.abstractmethod
    def column_inner(self, s: int, t: int) -> float:
        """⟨C[:, s], C[:, t]⟩, the Gram entry G_st (0 <= s, t < n)."""

    def sensitivity_increment(self, t: int, previous: Sequence[int]) -> float:
        """What a participation at round t adds to a client's *squared* sensitivity (clip = 1),
        given its earlier participations ``previous`` (all < t): G_tt + 2·Σ |G_st|."""
        return float(self.column_inner(t, t) + 2.0 * sum(abs(self.column_inner(s, t)) for s in previous))

    @abc.abstractmethod
    def max_sensitivity(self, min_separation: int, max_participations: int) -> float:
        """The largest L2 sensitivity (clip = 1, not squared) over every participation pattern of
        at most ``max_participations`` rounds, consecutive ones at least ``min_separation`` apart."""

    @abc.abstractmethod
    def noise_stream(self, num_params: int, *, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> NoiseStream:
        """A fresh stream of this strategy's noise for vectors of ``num_params`` entries."""

    @abc.abstractmethod
    def encoder_matrix(self) -> np.ndarray:
        """Dense C (m × n; m = n for square factorizations), for small n (tests, brute force)."""

    @abc.abstractmethod
    def noise_matrix(self) -> np.ndarray:
        """Dense W (n × m) with w = W·z: what :class:`NoiseStream` produces, for small n."""

    @abc.abstractmethod
    def workload_error(self, workload: np.ndarray | None = None) -> float:
        """Σ_t Var((A·W·z)_t) at unit σ: ‖A·W‖_F² (A = prefix sums when None) — the total squared
        error of the estimates of A·x before the sensitivity is applied."""

    @property
    @abc.abstractmethod
    def memory_vectors(self) -> int:
        """Vectors of |θ| its stream holds between rounds (the memory stated in the docs)."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON form, with ``kind``: restores the same strategy with :func:`strategy_from_dict`."""

    @classmethod
    @abc.abstractmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Strategy:
        """Inverse of :meth:`to_dict`."""
