"""The sequential reference engine: one client after another, plain ``functional_call``.

Deliberately simple, so that it can serve as the reference the vectorized engine is tested
against; also the shape of the per-client code that runs inside a real federation (a cohort of
one).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.func import functional_call

from dpfl.client.local import batch_plan
from dpfl.client.regularizers import l2_penalty, proximal
from dpfl.models.losses import per_sample_loss
from dpfl.sim.base import Engine, LocalResult


class SequentialEngine(Engine):
    """Trains each client in turn; see the module docstring."""

    name = "sequential"

    def train_one(self, global_params: torch.Tensor, client: int, round_idx: int) -> tuple[torch.Tensor, float]:
        """Local training of one client: (local parameters [P], mean local objective)."""
        prob = self.problem
        local = prob.local
        device = self.data.x.device
        idx_all = self.data.client_indices[int(client)].to(device)
        plan = batch_plan(idx_all.numel(), local, self.seeds.generator(round_idx, int(client), "batch"))
        flat = global_params.detach().to(device).clone()
        params = prob.layout.views(flat)
        for v in params.values():
            v.requires_grad_(True)
        plist = list(params.values())
        anchor = prob.layout.views(global_params.detach().to(device)) if local.prox_mu > 0 else None
        total = 0.0
        for row in plan:
            pos = row[row >= 0].to(device)
            idx = idx_all[pos]
            out = functional_call(prob.module, params, (self.data.x[idx],))
            loss = per_sample_loss(prob.loss_kind, out, self.data.y[idx]).mean()
            stacked = {n: p.unsqueeze(0) for n, p in params.items()}
            if prob.l2_penalty > 0:
                loss = loss + l2_penalty(prob.l2_penalty, stacked, prob.penalized_params)[0]
            if anchor is not None:
                loss = loss + proximal(local.prox_mu, stacked, {n: a for n, a in anchor.items()})[0]
            grads = torch.autograd.grad(loss, plist)
            with torch.no_grad():
                for p, g in zip(plist, grads, strict=True):
                    p.sub_(g, alpha=local.lr)
            total += float(loss.detach())
        return flat.detach(), total / max(len(plan), 1)

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        results = [self.train_one(global_params, int(c), round_idx) for c in clients]
        params = torch.stack([r[0] for r in results])
        losses = torch.tensor([r[1] for r in results])
        return LocalResult(params, losses, self.data.sizes(clients))
