"""The sequential reference engine: one client after another, plain ``functional_call``.

Deliberately simple, so that it can serve as the reference the vectorized engine is tested
against; also the shape of the per-client code that runs inside a real federation (a cohort of
one). A local optimizer other than plain SGD (:mod:`dpfl.client.optim`) gets a fresh state for
each client in each round: clients are stateless across rounds.

With DP-SGD (``LocalTraining.dp_sgd``) a step is the textbook one (Abadi et al. 2016,
Algorithm 1): the Poisson batch of :func:`dpfl.client.local.poisson_batch_plan`, each per-sample
gradient clipped to C, their sum plus N(0, (zC)² I) from the client's stream
(round, client, "noise"), over the expected batch size q|D_k|.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.func import functional_call, grad, vmap

from dpfl.client.local import batch_plan, dp_sgd_noise_std, dp_sgd_sample_rate, poisson_batch_plan
from dpfl.client.optim import OptimizerState
from dpfl.client.regularizers import l2_penalty, proximal
from dpfl.models.losses import per_sample_loss
from dpfl.privacy.mechanisms.draw import randn
from dpfl.sim.base import Engine, LocalResult


class SequentialEngine(Engine):
    """Trains each client in turn; see the module docstring."""

    name = "sequential"

    def _loss_one(self, p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.problem.module, p, (x.unsqueeze(0),))
        return per_sample_loss(self.problem.loss_kind, out, y.unsqueeze(0)).sum()

    def _clipped_mean_grad(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Mean over the batch of per-sample gradients each clipped to C (one sample at a time
        through ``vmap(grad)``: the plain definition, no norm identities)."""
        clip = float(self.problem.local.per_sample_clip)  # type: ignore[arg-type]
        detached = {n: p.detach() for n, p in params.items()}
        g = vmap(grad(self._loss_one), in_dims=(None, 0, 0))(detached, x, y)
        norms = torch.sqrt(sum(t.flatten(1).pow(2).sum(1) for t in g.values()))
        factor = torch.clamp(clip / norms.clamp(min=1e-30), max=1.0)
        return {n: (factor.view(-1, *([1] * (t.dim() - 1))) * t).mean(0) for n, t in g.items()}

    def _clipped_sum_grad(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Sum over the batch of per-sample gradients each clipped to C (zero for an empty batch)."""
        if x.shape[0] == 0:
            return {n: torch.zeros_like(p) for n, p in params.items()}
        clip = float(self.problem.local.per_sample_clip)  # type: ignore[arg-type]
        detached = {n: p.detach() for n, p in params.items()}
        g = vmap(grad(self._loss_one), in_dims=(None, 0, 0))(detached, x, y)
        norms = torch.sqrt(sum(t.flatten(1).pow(2).sum(1) for t in g.values()))
        factor = torch.clamp(clip / norms.clamp(min=1e-30), max=1.0)
        return {n: (factor.view(-1, *([1] * (t.dim() - 1))) * t).sum(0) for n, t in g.items()}

    def train_one(self, global_params: torch.Tensor, client: int, round_idx: int) -> tuple[torch.Tensor, float]:
        """Local training of one client: (local parameters [P], mean local objective)."""
        prob = self.problem
        local = prob.local
        device = self.data.x.device
        idx_all = self.data.client_indices[int(client)].to(device)
        plan_of = batch_plan if local.dp_sgd is None else poisson_batch_plan
        plan = plan_of(idx_all.numel(), local, self.seeds.generator(round_idx, int(client), "batch"))
        dp_noise = None
        if local.dp_sgd is not None:
            n_k = int(idx_all.numel())
            dp_denominator = dp_sgd_sample_rate(n_k, local) * n_k
            dp_std = dp_sgd_noise_std(n_k, local)
            dp_noise = self.seeds.noise_generator(round_idx, int(client), "noise", device=device)
        flat = global_params.detach().to(device).clone()
        params = prob.layout.views(flat)
        for v in params.values():
            v.requires_grad_(True)
        names = list(params)
        plist = list(params.values())
        anchor = prob.layout.views(global_params.detach().to(device))
        opt_state = None if local.optimizer.plain else OptimizerState(local.optimizer, plist, local.lr)
        total = 0.0
        for row in plan:
            pos = row[row >= 0].to(device)
            idx = idx_all[pos]
            stacked = {n: p.unsqueeze(0) for n, p in params.items()}
            reg = torch.zeros((), device=device)
            if prob.l2_penalty > 0:
                reg = reg + l2_penalty(prob.l2_penalty, stacked, prob.penalized_params)[0]
            if local.prox_mu > 0:
                reg = reg + proximal(local.prox_mu, stacked, anchor)[0]
            for term in prob.extra_terms:
                reg = reg + term(stacked, anchor)[0]
            if dp_noise is not None:
                summed = self._clipped_sum_grad(params, self.data.x[idx], self.data.y[idx])
                grads = [summed[n] / dp_denominator for n in names]
                if reg.requires_grad:
                    reg_grads = torch.autograd.grad(reg, plist, allow_unused=True)
                    grads = [g if r is None else g + r for g, r in zip(grads, reg_grads, strict=True)]
                if dp_std > 0:
                    flat_noise = randn(prob.layout.numel, dp_noise, dtype=flat.dtype, device=device) * torch.tensor(
                        dp_std, dtype=flat.dtype, device=device)
                    noise = prob.layout.views(flat_noise)
                    grads = [g + noise[n] for g, n in zip(grads, names, strict=True)]
                with torch.no_grad():
                    if idx.numel():
                        out = functional_call(prob.module, params, (self.data.x[idx],))
                        loss = per_sample_loss(prob.loss_kind, out, self.data.y[idx]).mean() + reg
                    else:
                        loss = reg
            elif local.per_sample_clip is None:
                out = functional_call(prob.module, params, (self.data.x[idx],))
                loss = per_sample_loss(prob.loss_kind, out, self.data.y[idx]).mean() + reg
                grads = list(torch.autograd.grad(loss, plist))
            else:
                data = self._clipped_mean_grad(params, self.data.x[idx], self.data.y[idx])
                grads = [data[n] for n in names]
                if reg.requires_grad:
                    reg_grads = torch.autograd.grad(reg, plist, allow_unused=True)
                    grads = [g if r is None else g + r for g, r in zip(grads, reg_grads, strict=True)]
                with torch.no_grad():
                    out = functional_call(prob.module, params, (self.data.x[idx],))
                    loss = per_sample_loss(prob.loss_kind, out, self.data.y[idx]).mean() + reg
            with torch.no_grad():
                if opt_state is not None:
                    opt_state.step(grads)
                else:
                    for p, g in zip(plist, grads, strict=True):
                        p.sub_(g, alpha=local.lr)
            total += float(loss.detach())
        return flat.detach(), total / max(len(plan), 1)

    def final_gradient(self, flat: torch.Tensor, client: int) -> torch.Tensor:
        """∇ of the client's mean data loss over all its samples at ``flat`` [P]."""
        prob = self.problem
        idx = self.data.client_indices[int(client)].to(self.data.x.device)
        params = flat.detach().clone().requires_grad_(True)
        out = functional_call(prob.module, prob.layout.views(params), (self.data.x[idx],))
        loss = per_sample_loss(prob.loss_kind, out, self.data.y[idx]).mean()
        (g,) = torch.autograd.grad(loss, [params])
        return g

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        results = [self.train_one(global_params, int(c), round_idx) for c in clients]
        params = torch.stack([r[0] for r in results])
        losses = torch.tensor([r[1] for r in results])
        final = None
        if self.problem.local.final_gradient:
            final = torch.stack([self.final_gradient(params[i], int(c)) for i, c in enumerate(clients)])
        return LocalResult(params, losses, self.data.sizes(clients), final)
