"""The identity strategy: C = I, independent noise every round (DP-SGD / DP-FedAvg without amplification).

The baseline of Kairouz et al. 2021 (arXiv 2103.00039) and of Choquette-Choo et al. 2023
(arXiv 2306.08153): release x_t + z_t each round, so W = C⁻¹ = I and the estimate of A·x has
noise A·z. With G = CᵀC = I, a pattern of m participations has squared sensitivity m, so under
(k, b)-min-separation the maximum is min(k, ⌈n/b⌉) (:mod:`.common`); a participation adds 1
whatever came before (the increments of base.py, G_tt = 1, G_st = 0). Error on a workload A:
‖A‖_F² (n(n+1)/2 for prefix sums).

Stream: round t draws one ``torch.randn(num_params)`` from its generator and returns it; nothing
is kept between rounds (memory 0 vectors).

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and
:mod:`dpfl.privacy.mechanisms.draw` (where its normals are drawn).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import NoiseStream, Strategy
from dpfl.privacy.mechanisms.correlated.common import check_generator, check_num_params, check_round, check_schema
from dpfl.privacy.mechanisms.correlated.workload import check_rounds, check_workload
from dpfl.privacy.mechanisms.draw import randn
from dpfl.rng import NoiseGenerator

__all__ = ["IdentityStrategy"]


class _IdentityStream(NoiseStream):
    def __init__(self, n: int, num_params: int, dtype: torch.dtype, device: torch.device | str) -> None:
        self._n = n
        self.num_params = num_params
        self._dtype = dtype
        self._device = torch.device(device)
        self.next_round = 0

    def next(self, round_idx: int, generator: NoiseGenerator) -> torch.Tensor:
        check_round(self.next_round, round_idx, self._n)
        check_generator(generator, self._device)
        w = randn(self.num_params, generator, dtype=self._dtype, device=self._device)
        self.next_round += 1
        return w

    @property
    def memory_vectors(self) -> int:
        return 0


class IdentityStrategy(Strategy):
    """C = I over ``n`` rounds (kind ``"identity"``)."""

    kind: ClassVar[str] = "identity"

    def __init__(self, n: int) -> None:
        self.n = check_rounds(n)

    def __repr__(self) -> str:
        return f"IdentityStrategy(n={self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdentityStrategy) and other.n == self.n

    def __hash__(self) -> int:
        return hash((self.kind, self.n))

    def column_inner(self, s: int, t: int) -> float:
        if not (0 <= s < self.n and 0 <= t < self.n):
            raise ConfigError(f"rounds must be in 0..{self.n - 1}. Found ({s!r}, {t!r}).")
        return 1.0 if s == t else 0.0

    def max_sensitivity(self, min_separation: int, max_participations: int) -> float:
        _, k = check_schema(min_separation, max_participations, self.n)
        return math.sqrt(k)

    def noise_stream(self, num_params: int, *, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> NoiseStream:
        return _IdentityStream(self.n, check_num_params(num_params), dtype, device)

    def encoder_matrix(self) -> np.ndarray:
        return np.eye(self.n)

    def noise_matrix(self) -> np.ndarray:
        return np.eye(self.n)

    def workload_error(self, workload: np.ndarray | None = None) -> float:
        a = check_workload(workload, self.n)
        if a is None:
            return self.n * (self.n + 1) / 2.0
        return float(np.sum(a * a))

    @property
    def memory_vectors(self) -> int:
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IdentityStrategy:
        if data.get("kind") != cls.kind:
            raise ConfigError(f"not an identity strategy: kind {data.get('kind')!r}.")
        return cls(data.get("n"))  # type: ignore[arg-type]
