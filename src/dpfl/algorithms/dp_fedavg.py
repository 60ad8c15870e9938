"""DP-FedAvg (004 Algorithm 1): Poisson-sampled clients, clipped updates, Gaussian noise.

Each round every client joins independently with probability p (the sampler); each sampled
client runs Q local SGD steps (``local.steps``), clips its update Δ to L2 norm S, and — in the
``local`` variant of 004 Alg. 1 (LocalUpdate line 8) — adds N(0, S²σ²/|P_t| I) before
uploading; the server averages the uploads *unweighted* and takes a server step
w ← w + η_g · mean(Δ̃). In the ``central`` variant the server adds the same total noise once,
N(0, (Sσ/|P_t|)² I), to the mean: the broadcast model is identically distributed, but the
server sees clean uploads.

Privacy: the sensitivity of the sum of clipped updates to adding or removing one client is S,
so the broadcast mean carries noise multiplier σ (public observer, amplified by the secret
Poisson sample). Against the server, the local variant protects each upload only with
multiplier σ/sqrt(|P_t|), and the central variant not at all — unless secure aggregation hides
the uploads. The paper's claim is the moments accountant for the public view
(:func:`dpfl.privacy.accounting.claimed.dpfedavg_claimed_epsilon`).

References:
    004_32e0c8f847edac12.txt, Algorithm 1 and Theorem 1.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from dpfl.algorithms.base import RoundOutput
from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.privacy.accounting.claimed import dpfedavg_claimed_epsilon
from dpfl.privacy.accounting.ledger import Release, federated_round_releases
from dpfl.privacy.calibration import dpfedavg_client_noise_std
from dpfl.privacy.mechanisms import (
    add_gaussian_noise,
    add_gaussian_noise_per_client,
    clip_by_l2_norm,
)
from dpfl.rng import SERVER, SeedSequence


class DpFedAvgOptions(BaseModel):
    """Options of ``algorithm: {name: dp-fedavg, options: {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float = Field(..., ge=0, description="σ of 004 Alg. 1")
    clip_norm: float = Field(..., gt=0, description="S, the L2 bound of each client update")
    server_lr: float = Field(1.0, gt=0, description="η_g")
    variant: Literal["local", "central"] = "local"


class DpFedAvg(PrivateAlgorithm):
    """See the module docstring."""

    name = "dp-fedavg"
    relation = "add_remove"
    privacy_unit = "client"

    def __init__(self, options: DpFedAvgOptions, sampler: Any, num_clients: int, delta: float) -> None:
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.delta = delta

    def sample(self, info_round: int, num_clients: int, seeds: SeedSequence) -> torch.Tensor:
        return self.sampler.sample(num_clients, seeds.generator(info_round, SERVER, "sample"))

    def _client_noise_std(self, cohort: int) -> float:
        o = self.options
        if o.variant == "central" or o.noise_multiplier == 0:
            return 0.0
        return dpfedavg_client_noise_std(o.clip_norm, o.noise_multiplier, cohort)

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, secure_aggregation: bool) -> list[Release]:
        k = int(info.clients.numel())
        o = self.options
        server_std = o.clip_norm * o.noise_multiplier / k if (o.variant == "central" and k) else 0.0
        return federated_round_releases(
            info.clients.tolist(),
            self._client_noise_std(k),
            o.clip_norm,
            [1.0 / k] * k,
            server_noise_std=server_std,
            secure_aggregation=secure_aggregation,
        )

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        o = self.options
        k = int(info.clients.numel())
        updates = local.params.sub_(global_params.to(local.params.device))
        clipped, norms = clip_by_l2_norm(updates, o.clip_norm)
        client_std = self._client_noise_std(k)
        if client_std > 0:
            gens = [info.seeds.generator(info.round_idx, int(c), "noise") for c in info.clients.tolist()]
            clipped = add_gaussian_noise_per_client(clipped, client_std, gens)
        mean = clipped.mean(0)
        if o.variant == "central" and o.noise_multiplier > 0:
            gen = info.seeds.generator(info.round_idx, SERVER, "server_noise")
            mean = add_gaussian_noise(mean.unsqueeze(0), o.clip_norm * o.noise_multiplier / k, gen)[0]
        new_global = global_params + o.server_lr * mean.to(global_params.device)
        return RoundOutput(new_global, {
            "update_norm_mean": float(norms.mean()),
            "update_norms": [round(float(x), 6) for x in norms.tolist()],
            "clipped_fraction": float((norms > o.clip_norm).float().mean()),
            "client_noise_std": client_std,
        })

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        if rounds_done == 0:
            return 0.0
        q = self.sampler.describe().get("sample_rate")
        if q is None:
            desc = self.sampler.describe()
            q = desc.get("num_sampled", self.num_clients) / self.num_clients
        if self.options.noise_multiplier == 0:
            return float("inf")
        return dpfedavg_claimed_epsilon(self.options.noise_multiplier, float(q), rounds_done, self.delta)

    def claim_notion(self) -> str:
        return (f"004 (moments accountant, Thm 1): (ε, δ={self.delta:g})-DP per client, add/remove, "
                "for the broadcast models under Poisson sampling")


def _build(options: dict[str, Any], sampler: Any, ctx: Any) -> DpFedAvg:
    from dpfl.algorithms.registry import parse_options

    return DpFedAvg(parse_options(DpFedAvgOptions, options, "dp-fedavg"), sampler, ctx.num_clients, ctx.privacy.delta)


ALGORITHMS = {"dp-fedavg": _build}
