"""Server-side aggregation of a cohort's stacked parameters or updates [K, P].

A weighted aggregator exposes its largest weight: the sensitivity of a weighted mean to one
client is (largest weight) × (per-client sensitivity) (000 eq. 2; 002 eq. 4.7), so a privacy
calibration must read it from the aggregator that is actually used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dpfl.errors import ConfigError


@dataclass(frozen=True)
class WeightedMean:
    """Σ_k p_k x_k with p_k given (e.g. p_k = |D_k| / Σ_j |D_j|, 000 eq. 2)."""

    weights: torch.Tensor  # [K], non-negative, sums to 1

    @classmethod
    def by_samples(cls, num_samples: torch.Tensor) -> WeightedMean:
        n = num_samples.to(torch.float64)
        if n.numel() == 0 or bool((n <= 0).any()):
            raise ConfigError(f"sample counts must be positive to weight by them. Found {num_samples.tolist()}.")
        return cls((n / n.sum()).to(torch.float32))

    @classmethod
    def uniform(cls, k: int) -> WeightedMean:
        if k < 1:
            raise ConfigError(f"cannot average an empty cohort (K = {k}).")
        return cls(torch.full((k,), 1.0 / k))

    @property
    def max_weight(self) -> float:
        return float(self.weights.max())

    def __call__(self, stacked: torch.Tensor) -> torch.Tensor:
        if stacked.shape[0] != self.weights.shape[0]:
            raise ConfigError(
                f"aggregating {stacked.shape[0]} clients with {self.weights.shape[0]} weights"
            )
        return self.weights.to(stacked.dtype).to(stacked.device) @ stacked
