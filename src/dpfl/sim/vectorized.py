"""The vectorized engine: a whole cohort trains at once.

Client parameters live in one [K, P] matrix; training reads and writes per-parameter views of it.
Each local step gathers a [K, B, ...] batch (clients with fewer samples are padded and masked),
runs the cohort forward pass (:mod:`dpfl.sim.cohort`: batched matmuls and grouped convolutions),
takes one backward pass for the sum of the clients' losses — client k's loss depends only on
client k's parameters, so its gradient is exactly client k's own — and applies every client's
SGD step with one fused call. A client whose steps have run out has an all-zero mask: its
gradient is zero and it stays where it is.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch

from dpfl.client.local import batch_plan
from dpfl.client.regularizers import l2_penalty, proximal
from dpfl.models.losses import per_sample_loss
from dpfl.sim.base import Engine, LocalResult
from dpfl.sim.cohort import CohortForward

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
        local = self.problem.local
        plans, members = [], []
        for c in clients:
            idx = self.data.client_indices[int(c)]
            gen = self.seeds.generator(round_idx, int(c), "batch")
            plans.append(batch_plan(idx.numel(), local, gen))
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
        return gidx, mask

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        prob = self.problem
        local = prob.local
        k = len(clients)
        gidx, mask = self._plans(clients, round_idx)
        device = self.data.x.device
        gidx, maskf = gidx.to(device), mask.to(device=device, dtype=self.data.x.dtype)
        counts = maskf.sum(2)  # [K, S]
        flat = global_params.detach().to(device).unsqueeze(0).repeat(k, 1)
        views = prob.layout.views(flat)
        anchor = prob.layout.views(global_params.detach().to(device)) if local.prox_mu > 0 else None
        # Fused SGD (the step taken inside the backward pass of each Linear layer) applies when
        # the objective is the plain data loss; regularized objectives use the generic path.
        # Fusion needs every parameter to be fusable: the in-place step would otherwise change the
        # storage shared (one version counter) with parameters other layers saved for backward.
        fused_names = self.forward.fusable_params()
        fuse = self.fused and prob.l2_penalty == 0 and anchor is None and fused_names == set(views)
        if not fuse:
            fused_names = set()
        token = torch.zeros((), requires_grad=True)
        vlist = [v for n, v in views.items() if n not in fused_names]
        for v in vlist:
            v.requires_grad_(True)
        loss_sum = torch.zeros(k, device=device)
        for s in range(gidx.shape[1]):
            idx = gidx[:, s]
            xb = self.data.x[idx]
            yb = self.data.y[idx]
            out = self.forward(views, xb, (local.lr, token) if fuse else None)
            ls = per_sample_loss(prob.loss_kind, out, yb)
            cnt = counts[:, s]
            active = (cnt > 0).to(ls.dtype)
            loss_k = (ls * maskf[:, s]).sum(1) / cnt.clamp(min=1.0)
            if prob.l2_penalty > 0:
                loss_k = loss_k + active * l2_penalty(prob.l2_penalty, views, prob.penalized_params)
            if anchor is not None:
                loss_k = loss_k + active * proximal(local.prox_mu, views, anchor)
            wrt = [token, *vlist] if fuse else vlist
            grads = torch.autograd.grad(loss_k.sum(), wrt)[len(wrt) - len(vlist) :]
            with torch.no_grad():
                if vlist:
                    torch._foreach_add_(vlist, list(grads), alpha=-local.lr)
                loss_sum += loss_k.detach()
        steps_taken = (counts > 0).sum(1).clamp(min=1).to(loss_sum.dtype)
        flat = flat.detach()
        return LocalResult(flat, (loss_sum / steps_taken).cpu(), self.data.sizes(clients))
