"""FedAvg (no privacy): the baseline every paper compares against, and the foundation's default.

Each sampled client trains locally from the global model; the server replaces the global model by
the sample-size-weighted mean of the local models, w ← Σ_k p_k w_k with p_k = |D_k|/Σ_j |D_j|
(000 eq. 2 without noise). Optional client transforms act on the update Δ_k = w_k − w before
aggregation (used by benchmarks and by the private algorithms built on this one).

Option ``clip_radius`` (with ``clip_center``, default 0): each client clips every weight of its
trained local *model* into [c − r, c + r] before uploading — 001's fixed range (Algorithm 2's
clipping step) without the two-point randomizer. An ablation, not a private algorithm: it
separates what the range costs in accuracy from what the randomizer's noise costs (LDP-FL's
per-id mean is an unbiased estimate of exactly this mean of clipped models, 001 Lemma 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from dpfl.algorithms.base import Algorithm, RoundOutput, Uploads
from dpfl.algorithms.options import FedAvgOptions as FedAvgOptions  # re-exported
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.server.aggregators import WeightedMean

ClientTransform = Callable[[torch.Tensor, RoundInfo], tuple[torch.Tensor, dict[str, Any]]]


class FedAvg(Algorithm):
    """See the module docstring.

    Args:
        sampler: the client sampler (``dpfl.sampling``); it draws from stream (t, server, "sample").
        client_transforms: applied in order to the stacked updates [K, P].
        clip_range: ``(c, r)``: clip each trained local model into [c − r, c + r] first (ablation).
    """

    name = "fedavg"

    def __init__(self, sampler: Any, client_transforms: Sequence[ClientTransform] = (),
                 clip_range: tuple[float, float] | None = None) -> None:
        self.sampler = sampler
        self.client_transforms = tuple(client_transforms)
        self.clip_range = clip_range

    splits_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        if self.clip_range is not None:
            c, r = self.clip_range
            local.params.clamp_(c - r, c + r)
        updates = local.params.sub_(global_params.to(local.params.device))  # in place: Δ_k = w_k − w
        for transform in self.client_transforms:
            updates, _ = transform(updates, info)
        return Uploads(info.clients, updates, local.num_samples, local.train_loss)

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        aggregate = WeightedMean.by_samples(uploads.num_samples)
        new_global = global_params + aggregate(uploads.params).to(global_params.device)
        return RoundOutput(new_global, {"update_norm_mean": float(uploads.params.norm(dim=1).mean())})

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        if not self.client_transforms or self.clip_range is not None:
            return super().server_step(global_params, local, info)
        # transforms report metrics on the stacked cohort (used by benchmarks)
        updates = local.params.sub_(global_params.to(local.params.device))
        metrics: dict[str, Any] = {}
        for transform in self.client_transforms:
            updates, m = transform(updates, info)
            metrics.update(m)
        out = self.aggregate(global_params, Uploads(info.clients, updates, local.num_samples, local.train_loss), info)
        out.metrics.update(metrics)
        return out
