"""Client-side transforms of the stacked cohort updates [K, P], each returning (value, metrics).

Applied in order before aggregation (STYLE: pipelines of small transforms). Randomness comes from
stream (round, client, "noise") of the run's seeds, so a cohort of one (sequential, Flower)
draws the numbers the vectorized cohort draws for that client. Sensitivity bounding and noise are
separate steps: the same noise step serves local, central and split DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dpfl.client.context import RoundInfo
from dpfl.privacy.mechanisms import add_gaussian_noise_per_client, clip_by_l2_norm


@dataclass(frozen=True)
class ClipUpdate:
    """Scale each client's update to L2 norm at most ``clip_norm`` (whole-vector clipping)."""

    clip_norm: float

    def __call__(self, updates: torch.Tensor, info: RoundInfo) -> tuple[torch.Tensor, dict[str, Any]]:
        clipped, norms = clip_by_l2_norm(updates, self.clip_norm)
        return clipped, {
            "update_norm_mean": float(norms.mean()),
            "clipped_fraction": float((norms > self.clip_norm).float().mean()),
        }


@dataclass(frozen=True)
class GaussianNoise:
    """Add N(0, noise_std² I) to each client's update, from the client's own noise stream."""

    noise_std: float

    def __call__(self, updates: torch.Tensor, info: RoundInfo) -> tuple[torch.Tensor, dict[str, Any]]:
        gens = [info.seeds.noise_generator(info.round_idx, int(c), "noise") for c in info.clients.tolist()]
        return add_gaussian_noise_per_client(updates, self.noise_std, gens), {"noise_std": self.noise_std}
