"""Per-sample gradient clipping for a cohort, without a Python loop over samples or clients.

Two strategies, same numbers:

* **Linear stacks** (MLP, logistic regression, linear SVM): the per-sample gradient of a linear
  layer z = W x + b is (g xᵀ, g) with g = ∂ℓ/∂z, so its squared norm is ‖g‖²(‖x‖² + 1) — no
  per-sample gradient is ever materialized ("ghost" norms). One forward pass records each
  layer's inputs x and outputs z, one backward pass gives every g, the clip factors
  c_i = min(1, C/‖∇ℓ_i‖) follow, and the clipped mean gradient of each layer is one batched
  matmul (c ⊙ g)ᵀ x.
* **Any other model**: per-sample gradients by ``vmap(vmap(grad))`` over clients and samples,
  in chunks of samples so that memory stays bounded, clipped and summed chunk by chunk.

References:
    000_3304bf6f36c753f8.txt Algorithm 1 (per-sample clipping to C before the averaged step);
    Abadi et al. 2016 (DP-SGD); the per-layer norm identity is the one used by "ghost clipping"
    (Goodfellow 2015; Li et al. 2022).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from dpfl.models.losses import LossFn, per_sample_loss
from dpfl.sim.kernel import CohortForward

_MATERIALIZE_BUDGET = 256 * 2**20  # floats of per-sample gradients held at once (1 GiB)


def clip_factors(sq_norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, C/‖g‖) per sample, exact 1 for norms at or below C (safe at ‖g‖ = 0)."""
    norms = sq_norms.clamp(min=0).sqrt()
    return torch.where(norms > clip, clip / norms.clamp(min=1e-30), torch.ones_like(norms))


def ghost_clipped_grads(
    forward: CohortForward,
    views: Mapping[str, torch.Tensor],
    xb: torch.Tensor,
    yb: torch.Tensor,
    weight: torch.Tensor,
    loss_kind: str | LossFn,
    clip: float,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Clipped, weighted per-sample gradient sums of a stack of linear layers.

    Args:
        forward: the cohort forward of a model whose parameters all belong to ``nn.Linear``.
        views: parameters {name: [K, ...]}.
        xb, yb: the cohort's batch [K, B, ...], [K, B].
        weight: per-sample weights [K, B] (mask / count: the mean over real samples).
        loss_kind: see :func:`dpfl.models.per_sample_loss`.
        clip: C.

    Returns:
        ({name: Σ_i weight_i · clip(∇ℓ_i)}, per-sample losses [K, B]).
    """
    records: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    out = forward(dict(views), xb, capture=records)
    ls = per_sample_loss(loss_kind, out, yb)
    zs = [z for _, _, z in records]
    gs = torch.autograd.grad((ls * (weight > 0)).sum(), zs)
    sq = torch.zeros_like(ls)
    for (prefix, x, _), g in zip(records, gs, strict=True):
        has_bias = f"{prefix}.bias" in views if prefix else "bias" in views
        sq = sq + g.pow(2).sum(-1) * (x.pow(2).sum(-1) + (1.0 if has_bias else 0.0))
    coef = (clip_factors(sq, clip) * weight).unsqueeze(-1)
    grads: dict[str, torch.Tensor] = {}
    for (prefix, x, _), g in zip(records, gs, strict=True):
        cg = coef * g
        w_name = f"{prefix}.weight" if prefix else "weight"
        grads[w_name] = torch.bmm(cg.transpose(1, 2), x)
        b_name = f"{prefix}.bias" if prefix else "bias"
        if b_name in views:
            grads[b_name] = cg.sum(1)
    return grads, ls.detach()


def materialized_clipped_grads(
    module: nn.Module,
    views: Mapping[str, torch.Tensor],
    xb: torch.Tensor,
    yb: torch.Tensor,
    weight: torch.Tensor,
    loss_kind: str | LossFn,
    clip: float,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Same contract as :func:`ghost_clipped_grads` for any model, by per-sample gradients."""
    params = {n: v.detach() for n, v in views.items()}

    def loss_one(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(module, p, (x.unsqueeze(0),))
        return per_sample_loss(loss_kind, out, y.unsqueeze(0)).sum()

    per_client = vmap(vmap(grad(loss_one), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    k, b = yb.shape
    numel = sum(v[0].numel() for v in params.values())
    chunk = max(1, min(b, _MATERIALIZE_BUDGET // max(k * numel, 1)))
    total = {n: torch.zeros_like(v) for n, v in params.items()}
    for start in range(0, b, chunk):
        sl = slice(start, start + chunk)
        g = per_client(params, xb[:, sl], yb[:, sl])
        sq = sum(t.flatten(2).pow(2).sum(-1) for t in g.values())
        coef = clip_factors(sq, clip) * weight[:, sl]  # [K, chunk]
        for n, t in g.items():
            total[n] += torch.einsum("kb,kb...->k...", coef, t)
    with torch.no_grad():
        out = vmap(lambda p, x: functional_call(module, p, (x,)))(params, xb)
        ls = per_sample_loss(loss_kind, out, yb)
    return total, ls
