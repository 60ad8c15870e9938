"""The vectorized engine: a whole cohort trains at once.

Client parameters live in one [K, P] matrix; training reads and writes per-parameter views of it.
Each local step gathers a [K, B, ...] batch (clients with fewer samples are padded and masked),
runs the cohort forward pass (:mod:`dpfl.sim.cohort`: batched matmuls and grouped convolutions),
takes one backward pass for the sum of the clients' losses — client k's loss depends only on
client k's parameters, so its gradient is exactly client k's own — and applies every client's
SGD step with one fused call. A client whose steps have run out has an all-zero mask: its
gradient is zero and it stays where it is.

With another local optimizer (SGD with momentum or weight decay, Adam:
:mod:`dpfl.client.optim`) the state is stacked like the parameters, one row per client, created
at the start of the round and dropped at its end (clients are stateless across rounds); a
client whose steps have run out keeps its parameters and its state.

With DP-SGD (``LocalTraining.dp_sgd``, :class:`dpfl.client.local.DpSgd`) each client's batches
are Poisson samples of its records (:func:`dpfl.client.local.poisson_batch_plan`), the clipped
per-sample gradients are summed and divided by the expected batch size q_k|D_k|, and each
client's noise N(0, (z·C/(q_k|D_k|))² I) is drawn from its own stream (round, client, "noise"),
one [P] vector per step in the layout's order — the sequential engine's draws. A step whose
Poisson batch is empty is still taken (noise only); a client whose steps have run out is not.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import torch

from dpfl.client.context import ObjectiveTerm
from dpfl.client.local import batch_plan, dp_sgd_noise_std, dp_sgd_sample_rate, poisson_batch_plan
from dpfl.client.optim import OptimizerState
from dpfl.client.regularizers import l2_penalty, proximal
from dpfl.models.losses import per_sample_loss
from dpfl.sim.base import Engine, LocalResult
from dpfl.sim.cohort import CohortForward
from dpfl.sim.per_sample import ghost_clipped_grads, materialized_clipped_grads

_ALLOCATOR_TUNED = False


def tune_allocator() -> None:
    """Keep freed training temporaries in the heap instead of returning them to the OS.

    Each local step allocates tens of MB of temporaries; glibc's defaults unmap them and fault them
    in again on the next step, which costs more system time than the matmuls (measured on the
    2-core reference machine, see DESIGN.md "Performance notes"). ``mallopt`` has the effect of
    ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<huge>`` without restarting the process.
    """
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED:
        return
    _ALLOCATOR_TUNED = True
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_max = -1, -4
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2**30)


class VectorizedEngine(Engine):
    """Trains the cohort as stacked parameters; see the module docstring."""

    name = "vectorized"

    def __init__(self, *args, fused: bool = True, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        tune_allocator()
        self.fused = fused
        self.forward = CohortForward(self.problem.module)

    def _plans(self, clients: Sequence[int], round_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Global sample indices [K, S, B] and mask [K, S, B] for every client's steps."""
        gidx, mask, _ = self._plans_and_steps(clients, round_idx)
        return gidx, mask

    def _plans_and_steps(self, clients: Sequence[int], round_idx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`_plans` and, per client, its number of steps [K] (DP-SGD's Poisson batches may be
        empty: a step is a row of the client's plan, not a non-empty batch)."""
        local = self.problem.local
        plans, members = [], []
        plan_of = batch_plan if local.dp_sgd is None else poisson_batch_plan
        for c in clients:
            idx = self.data.client_indices[int(c)]
            gen = self.seeds.generator(round_idx, int(c), "batch")
            plans.append(plan_of(idx.numel(), local, gen))
            members.append(idx)
        steps = max(p.shape[0] for p in plans)
        width = max(p.shape[1] for p in plans)
        pos = torch.full((len(plans), steps, width), -1, dtype=torch.long)
        for k, p in enumerate(plans):
            pos[k, : p.shape[0], : p.shape[1]] = p
        mask = pos >= 0
        gidx = torch.zeros_like(pos)
        for k, idx in enumerate(members):
            gidx[k][mask[k]] = idx.to(pos.device)[pos[k][mask[k]]]
        return gidx, mask, torch.tensor([p.shape[0] for p in plans], dtype=torch.long)

    def _terms(self, anchor: dict[str, torch.Tensor]) -> list[Callable[[dict[str, torch.Tensor]], torch.Tensor]]:
        """The data-independent objective terms, each mapping client parameters to [K]."""
        prob = self.problem
        terms: list[Callable[[dict[str, torch.Tensor]], torch.Tensor]] = []
        if prob.l2_penalty > 0:
            terms.append(lambda v: l2_penalty(prob.l2_penalty, v, prob.penalized_params))
        if prob.local.prox_mu > 0:
            terms.append(lambda v: proximal(prob.local.prox_mu, v, anchor))

        def at_anchor(term: ObjectiveTerm) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
            return lambda v: term(v, anchor)

        terms.extend(at_anchor(term) for term in prob.extra_terms)
        return terms

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        prob = self.problem
        local = prob.local
        k = len(clients)
        gidx, mask, n_steps = self._plans_and_steps(clients, round_idx)
        device = self.data.x.device
        gidx, maskf = gidx.to(device), mask.to(device=device, dtype=self.data.x.dtype)
        counts = maskf.sum(2)  # [K, S]
        dp = _DpSgdSteps.build(self, clients, round_idx, n_steps, device) if local.dp_sgd is not None else None
        anchor = prob.layout.views(global_params.detach().to(device))
        # One contiguous [K, ...] tensor per parameter (not views of one [K, P] matrix): batched
        # matmuls, and above all the in-place fused SGD step, run as one BLAS call only on
        # contiguous batches (a strided batch falls back to a loop of K small matmuls).
        views = {n: a.unsqueeze(0).expand(k, *a.shape).clone() for n, a in anchor.items()}
        terms = self._terms(anchor)
        linear_stack = self.forward.fusable_params() == set(views)
        # Fused SGD (the step taken inside the backward pass of each Linear layer) needs the plain
        # data loss and every parameter fusable: the in-place step would otherwise change storage
        # shared (one version counter) with parameters other layers saved for backward.
        plain = local.optimizer.plain
        fuse = self.fused and linear_stack and not terms and local.per_sample_clip is None and plain
        token = torch.zeros((), requires_grad=True)
        names = [] if fuse else list(views)
        vlist = [views[n] for n in names]
        for v in vlist:
            v.requires_grad_(True)
        opt_state = None if plain else OptimizerState(local.optimizer, vlist, local.lr)
        loss_sum = torch.zeros(k, device=device)
        for s in range(gidx.shape[1]):
            idx = gidx[:, s]
            xb = self.data.x[idx]
            yb = self.data.y[idx]
            cnt = counts[:, s]
            weight = maskf[:, s] / cnt.clamp(min=1.0).unsqueeze(1)  # mean over real samples
            active = (cnt > 0).to(weight.dtype)
            loss_weight = weight
            if dp is not None:  # DP-SGD: the sum over the fixed denominator q_k|D_k|; empty batches step
                weight = maskf[:, s] / dp.denominators.unsqueeze(1)
                active = dp.active[:, s].to(weight.dtype)
            if fuse:
                out = self.forward(views, xb, (local.lr, token))
                loss_k = (per_sample_loss(prob.loss_kind, out, yb) * weight).sum(1)
                torch.autograd.grad(loss_k.sum(), [token])
                loss_sum += loss_k.detach()
                continue
            if local.per_sample_clip is None:
                out = self.forward(views, xb)
                loss_k = (per_sample_loss(prob.loss_kind, out, yb) * weight).sum(1)
                for term in terms:
                    loss_k = loss_k + active * term(views)
                grads = list(torch.autograd.grad(loss_k.sum(), vlist))
            else:
                clipped = ghost_clipped_grads if linear_stack else None
                if clipped is not None:
                    data_grads, ls = clipped(self.forward, views, xb, yb, weight, prob.loss_kind, local.per_sample_clip)
                else:
                    data_grads, ls = materialized_clipped_grads(
                        prob.module, views, xb, yb, weight, prob.loss_kind, local.per_sample_clip
                    )
                loss_k = (ls * loss_weight).sum(1)
                grads = [data_grads[n] for n in names]
                if terms:
                    reg = active * terms[0](views)
                    for term in terms[1:]:
                        reg = reg + active * term(views)
                    reg_grads = torch.autograd.grad(reg.sum(), vlist, allow_unused=True)
                    grads = [g if r is None else g + r for g, r in zip(grads, reg_grads, strict=True)]
                    loss_k = loss_k + reg.detach()
            with torch.no_grad():
                if dp is not None:
                    noise = prob.layout.views(dp.noise(s))
                    grads = [g + noise[n] for g, n in zip(grads, names, strict=True)]
                if opt_state is None:
                    torch._foreach_add_(vlist, grads, alpha=-local.lr)
                else:  # a client's steps are a prefix of the rows: inactive ones are done
                    opt_state.step(grads, active=cnt > 0 if dp is None else dp.active[:, s])
                loss_sum += loss_k.detach()
        if dp is not None:
            steps_taken = n_steps.clamp(min=1).to(device=loss_sum.device, dtype=loss_sum.dtype)
        else:
            steps_taken = (counts > 0).sum(1).clamp(min=1).to(loss_sum.dtype)
        flat = torch.cat([views[n].detach().reshape(k, -1) for n in prob.layout.names], dim=1)
        final_grads = self._final_gradient(flat, clients) if local.final_gradient else None
        return LocalResult(flat, (loss_sum / steps_taken).cpu(), self.data.sizes(clients), final_grads)

    def _final_gradient(self, flat: torch.Tensor, clients: Sequence[int], chunk: int = 256) -> torch.Tensor:
        """∇ of each client's mean data loss over all its samples, at its final weights [K, P]."""
        prob = self.problem
        members = [self.data.client_indices[int(c)] for c in clients]
        n_max = max(m.numel() for m in members)
        device = self.data.x.device
        idx = torch.zeros(len(members), n_max, dtype=torch.long)
        msk = torch.zeros(len(members), n_max)
        for i, m in enumerate(members):
            idx[i, : m.numel()] = m
            msk[i, : m.numel()] = 1.0
        idx, msk = idx.to(device), msk.to(device)
        weight = msk / msk.sum(1, keepdim=True)
        out_flat = torch.zeros_like(flat)
        params = flat.clone().requires_grad_(True)
        for start in range(0, n_max, chunk):
            sl = slice(start, start + chunk)
            views = prob.layout.views(params)
            out = self.forward(views, self.data.x[idx[:, sl]])
            loss = (per_sample_loss(prob.loss_kind, out, self.data.y[idx[:, sl]]) * weight[:, sl]).sum()
            (g,) = torch.autograd.grad(loss, [params])
            out_flat += g
        return out_flat


class _DpSgdSteps:
    """The DP-SGD numbers of one cohort's round: denominators q_k|D_k| [K], which (client, step)
    pairs are real steps [K, S], and each client's noise stream (round, client, "noise")."""

    def __init__(self, denominators: torch.Tensor, stds: torch.Tensor, active: torch.Tensor,
                 generators: list[torch.Generator], numel: int, dtype: torch.dtype) -> None:
        self.denominators = denominators
        self.stds = stds
        self.active = active
        self.generators = generators
        self.numel = numel
        self.dtype = dtype

    @classmethod
    def build(cls, engine: VectorizedEngine, clients: Sequence[int], round_idx: int, n_steps: torch.Tensor,
              device: torch.device) -> _DpSgdSteps:
        local = engine.problem.local
        sizes = [int(engine.data.client_indices[int(c)].numel()) for c in clients]
        dtype = engine.data.x.dtype
        denominators = torch.tensor([dp_sgd_sample_rate(n, local) * n for n in sizes], dtype=dtype, device=device)
        stds = torch.tensor([dp_sgd_noise_std(n, local) for n in sizes], dtype=dtype, device=device)
        width = int(n_steps.max()) if n_steps.numel() else 0
        active = (torch.arange(width).unsqueeze(0) < n_steps.unsqueeze(1)).to(device)
        gens = [engine.seeds.generator(round_idx, int(c), "noise", device=device) for c in clients]
        return cls(denominators, stds, active, gens, engine.problem.layout.numel, dtype)

    def noise(self, step: int) -> torch.Tensor:
        """[K, P]: N(0, std_k² I) for every client taking step ``step`` (one [P] draw from its
        stream, as the sequential engine draws), zeros for clients whose steps have run out."""
        rows = []
        for k, gen in enumerate(self.generators):
            if bool(self.active[k, step]) and float(self.stds[k]) > 0:
                rows.append(torch.randn(self.numel, generator=gen, device=gen.device, dtype=self.dtype) * self.stds[k])
            else:
                rows.append(torch.zeros(self.numel, device=self.stds.device, dtype=self.dtype))
        return torch.stack(rows)
