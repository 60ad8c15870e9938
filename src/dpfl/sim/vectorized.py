"""The vectorized engine: a whole cohort trains at once.

Client parameters live in one [K, P] matrix; training reads and writes per-parameter views of it.
Each local step gathers a [K, B, ...] batch (clients with fewer samples are padded and masked),
runs the cohort forward pass (:mod:`dpfl.sim.kernel`: batched matmuls and grouped convolutions),
takes one backward pass for the sum of the clients' losses — client k's loss depends only on
client k's parameters, so its gradient is exactly client k's own — and applies every client's
SGD step with one fused call.

On the CPU, with plain SGD and the plain data loss, a model of ``nn.Linear``, ``nn.Conv2d``,
activation, pooling and flatten layers (:class:`dpfl.sim.kernel.SGDKernel`) trains chunk by chunk
of clients instead of step by step of the whole block: a chunk (parameters of a few times a core's
L2 cache) copies the global model, takes all its steps with the backward pass written out and each
layer's SGD step applied in place, and writes its rows of the result. Its parameters stay in cache
from one step to the next instead of the block's parameters streaming through memory at every
step, and the chunks run on ``torch.get_num_threads()`` threads with one intra-op thread each,
with no synchronization between threads inside a step (what a batched kernel split over threads
needs at every call, and what costs most on a loaded machine). Each client's numbers are those of
the step-by-step path up to the float order of the kernels.

Clients are ordered by their number of steps, longest first, so that the clients still training at
step s are a prefix of the rows: each step slices that prefix of the stacked parameters, optimizer
state and batch (and the batch to the widest of their batches), and a client whose steps have run
out costs nothing more. On an unbalanced (non-IID) split the stacked work is then the sum of the
clients' steps, not the cohort size times the longest client's. Rows are returned in the caller's
order.

The cohort trains in blocks of clients sized from a memory budget (``memory_budget`` bytes,
:data:`DEFAULT_MEMORY_BUDGET`; :meth:`VectorizedEngine.client_bytes` estimates a client's share:
stacked parameters, gradient, optimizer state, DP-SGD noise, a batch's inputs and activations).
:meth:`VectorizedEngine.train` writes each block into the round's [K, P] result before the next
starts; :meth:`VectorizedEngine.train_blocks` yields each block instead and drops it before the
next trains (the in-process cohort's streamed round: :mod:`dpfl.rounds.cohort`), so the cohort's
rows never exist at once. Consecutive clients in the step order form a block, so a block holds
clients of similar lengths. Each client's numbers depend only on its own rows: a block size
changes nothing but the float order of batched kernels.

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

import copy
import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

from dpfl.client.context import ObjectiveTerm
from dpfl.client.local import batch_plan, dp_sgd_noise_std, dp_sgd_sample_rate, poisson_batch_plan
from dpfl.client.optim import Adam, OptimizerState
from dpfl.client.regularizers import l2_penalty, proximal
from dpfl.errors import ConfigError
from dpfl.models.losses import per_sample_loss
from dpfl.privacy.mechanisms.draw import randn
from dpfl.rng import NoiseGenerator
from dpfl.sim.base import Engine, LocalResult
from dpfl.sim.kernel import CohortForward, SGDKernel
from dpfl.sim.per_sample import ghost_clipped_grads, materialized_clipped_grads

_ALLOCATOR_TUNED = False

DEFAULT_MEMORY_BUDGET = 512 * 2**20
"""Bytes a block of clients may occupy while it trains (:meth:`VectorizedEngine.client_bytes`)."""


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

    def __init__(self, *args, fused: bool = True, memory_budget: int | None = DEFAULT_MEMORY_BUDGET,  # type: ignore[no-untyped-def]
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        tune_allocator()
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int)
                                          or memory_budget <= 0):
            raise ConfigError(f"the engine's memory budget must be a positive number of bytes or None. "
                              f"Found {memory_budget!r}.")
        self.fused = fused
        self.memory_budget = memory_budget
        self.forward = CohortForward(self.problem.module)
        self.kernel = SGDKernel.build(self.problem.module)
        self._acts: int | None = None

    def _client_plans(self, clients: Sequence[int], round_idx: int) -> list[torch.Tensor]:
        """Each client's batch plan [S_k, B_k] (positions into its samples, -1 pads) from its
        stream (round, client, "batch"). DP-SGD's Poisson batches may be empty: a step is a row of
        the plan, not a non-empty batch."""
        local = self.problem.local
        plan_of = batch_plan if local.dp_sgd is None else poisson_batch_plan
        return [plan_of(self.data.client_indices[int(c)].numel(), local,
                        self.seeds.generator(round_idx, int(c), "batch"))
                for c in clients]

    def _stack_plans(self, clients: Sequence[int], plans: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Global sample indices [K, S, B] and mask [K, S, B] of the given clients' plans (padded to
        the longest and widest)."""
        steps = max(p.shape[0] for p in plans)
        width = max(p.shape[1] for p in plans)
        pos = torch.full((len(plans), steps, width), -1, dtype=torch.long)
        for k, p in enumerate(plans):
            pos[k, : p.shape[0], : p.shape[1]] = p
        mask = pos >= 0
        # each client's sample indices as a row of one padded table, looked up in one gather
        table = nn.utils.rnn.pad_sequence(
            [self.data.client_indices[int(c)].to(device=pos.device, dtype=torch.long) for c in clients],
            batch_first=True)
        gidx = torch.gather(table, 1, pos.clamp(min=0).view(len(plans), -1)).view(pos.shape)
        return gidx.masked_fill_(~mask, 0), mask

    def _plans(self, clients: Sequence[int], round_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Global sample indices [K, S, B] and mask [K, S, B] for every client's steps."""
        return self._stack_plans(clients, self._client_plans(clients, round_idx))

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

    def _fusable(self, terms: Sequence[object]) -> tuple[bool, bool]:
        """(every parameter belongs to an ``nn.Linear`` of a Sequential, the fused SGD step applies)."""
        local = self.problem.local
        linear_stack = self.forward.fusable_params() == set(self.problem.layout.names)
        # Fused SGD (the step taken inside the backward pass of each Linear layer) needs the plain
        # data loss and every parameter fusable: the in-place step would otherwise change storage
        # shared (one version counter) with parameters other layers saved for backward.
        fuse = self.fused and linear_stack and not terms and local.per_sample_clip is None and local.optimizer.plain
        return linear_stack, fuse

    def _activations_per_sample(self) -> int:
        """Floats the model's layers output for one sample (measured once by a forward pass with
        hooks on the leaf modules; the input's size if the probe fails)."""
        if self._acts is None:
            numel = [0]

            def hook(_m: nn.Module, _i: object, out: object) -> None:
                if isinstance(out, torch.Tensor):
                    numel[0] += out.numel()

            mod = self.problem.module
            leaves = [m for m in mod.modules() if not list(m.children())]
            handles = [m.register_forward_hook(hook) for m in leaves]
            try:
                with torch.no_grad():
                    dev = next(iter(mod.parameters())).device
                    mod(self.data.x[:1].to(dev))
                self._acts = numel[0]
            except Exception:  # noqa: BLE001 - only an estimate for the block size
                self._acts = int(self.data.x[:1].numel())
            finally:
                for h in handles:
                    h.remove()
        return self._acts

    def client_bytes(self, steps: int, width: int, fuse: bool) -> int:
        """Estimated bytes one client occupies while its block trains (what the block size is
        derived from): its parameters twice (the stacked tensors and the block's flat result), its
        gradient unless the SGD step is fused, its optimizer state, its DP-SGD noise, and per
        sample of a batch the input and three times the layers' outputs (forward values, their
        gradients, temporaries), plus its batch plan (indices and masks)."""
        local = self.problem.local
        opt = local.optimizer
        copies = 2 + (0 if fuse else 1)
        copies += 2 if isinstance(opt, Adam) else int(bool(opt.momentum)) + int(bool(opt.weight_decay))
        copies += 2 if local.dp_sgd is not None else 0
        per_sample = int(self.data.x[:1].numel()) + 3 * self._activations_per_sample()
        elt = self.data.x.element_size()
        return elt * (copies * self.problem.layout.numel + width * per_sample) + 21 * steps * width

    def block_size(self, clients: int, steps: int, width: int, fuse: bool, row_bytes: int = 0) -> int:
        """Clients trained at once: as many as the memory budget holds (at least one), each taking
        :meth:`client_bytes` plus ``row_bytes`` (what the caller does with a row of the block)."""
        if self.memory_budget is None:
            return max(clients, 1)
        per_client = self.client_bytes(steps, width, fuse) + max(int(row_bytes), 0)
        return max(1, min(clients, self.memory_budget // max(per_client, 1)))

    def _blocks(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int,
                row_bytes: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        """The cohort's blocks in training order (longest clients first): (positions of the block's
        clients in ``clients`` [B], flat local parameters [B, P], mean local objective [B],
        final gradients [B, P] or None), rows in the block's training order."""
        prob = self.problem
        k = len(clients)
        device = self.data.x.device
        plans = self._client_plans(clients, round_idx)
        n_steps = torch.tensor([p.shape[0] for p in plans], dtype=torch.long)
        # Longest clients first: at step s the clients still training are a prefix of the rows,
        # and a block holds clients of similar lengths.
        order = torch.argsort(n_steps, descending=True, stable=True)
        anchor = prob.layout.views(global_params.detach().to(device))
        _, fuse = self._fusable(self._terms(anchor))
        width = max(p.shape[1] for p in plans) if plans else 1
        block = self.block_size(k, int(n_steps.max()) if k else 0, width, fuse, row_bytes)
        final_gradient = prob.local.final_gradient
        for start in range(0, k, block):
            rows = order[start : start + block]
            trained = [int(clients[i]) for i in rows.tolist()]
            block_plans = [plans[i] for i in rows.tolist()]
            out_rows = None
            if block >= k and not bool((order == torch.arange(k)).all()):
                # one block, trained longest first: each client's row is written where it sits in
                # ``clients`` (no reordering copy of the [K, P] result afterwards)
                out_rows, rows = order, torch.arange(k)
            ids = [int(clients[i]) for i in rows.tolist()]
            flat, loss = self._train_block(anchor, trained, block_plans, round_idx, out_rows=out_rows)
            final = self._final_gradient(flat, ids) if final_gradient else None
            yield rows, flat, loss, final
            del flat, final

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        prob = self.problem
        k = len(clients)
        device = self.data.x.device
        out: torch.Tensor | None = None
        losses = torch.empty(k)
        finals: torch.Tensor | None = None
        for rows, flat, loss, final in self._blocks(global_params, clients, round_idx):
            if rows.numel() == k:  # one block: no copy into a round-sized result
                inverse = torch.argsort(rows)
                if bool((rows == torch.arange(k)).all()):
                    return LocalResult(flat, loss, self.data.sizes(clients), final)
                inv = inverse.to(flat.device)
                return LocalResult(flat[inv], loss[inverse], self.data.sizes(clients),
                                   None if final is None else final[inv])
            if out is None:
                out = torch.empty(k, prob.layout.numel, device=device, dtype=global_params.dtype)
                finals = torch.empty_like(out) if final is not None else None
            out.index_copy_(0, rows.to(device), flat)
            losses[rows] = loss
            if finals is not None and final is not None:
                finals.index_copy_(0, rows.to(device), final)
        if out is None:  # an empty cohort
            out = torch.empty(0, prob.layout.numel, device=device, dtype=global_params.dtype)
            finals = torch.empty_like(out) if prob.local.final_gradient else None
        return LocalResult(out, losses, self.data.sizes(clients), finals)

    def train_blocks(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int,
                     row_bytes: int = 0) -> Iterator[tuple[torch.Tensor, LocalResult]]:
        """:meth:`train` one block at a time: (the block's client ids [B], sorted; their
        :class:`LocalResult`, rows in that order), blocks sized so that a block's training plus
        ``row_bytes`` per row (the caller's work on the block) fit the memory budget.

        Each block is trained, yielded and dropped before the next starts, so a caller that
        consumes the blocks one by one (the in-process cohort's streamed round) never holds the
        cohort's [K, P] parameters. A client's rows are those :meth:`train` returns for it (up to
        the float order of batched kernels, the block sizes being others)."""
        for rows, flat, loss, final in self._blocks(global_params, clients, round_idx, row_bytes):
            block_ids = torch.tensor([int(clients[i]) for i in rows.tolist()], dtype=torch.long)
            sort = torch.argsort(block_ids)
            ids = block_ids[sort]
            if not bool((sort == torch.arange(sort.numel())).all()):
                dev_sort = sort.to(flat.device)
                flat, loss = flat[dev_sort], loss[sort]
                final = None if final is None else final[dev_sort]
            yield ids, LocalResult(flat, loss, self.data.sizes(ids.tolist()), final)
            del flat, final

    def _train_block(self, anchor: dict[str, torch.Tensor], clients: list[int], plans: list[torch.Tensor],
                     round_idx: int, out_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Local training of clients ordered by non-increasing step count: (flat local parameters
        [K, P], mean local objective [K] on the CPU). With ``out_rows`` (a permutation of
        ``range(K)``), client ``i``'s results are row ``out_rows[i]`` of both."""
        n_steps = torch.tensor([p.shape[0] for p in plans], dtype=torch.long)
        gidx, mask = self._stack_plans(clients, plans)
        device = self.data.x.device
        kernel = self._kernel_for(self._terms(anchor), device)
        if kernel is not None:
            return self._train_chunks(kernel, anchor, gidx, mask, n_steps, out_rows)
        flat, loss = self._train_autograd(anchor, clients, plans, round_idx, gidx, mask, n_steps)
        if out_rows is None:
            return flat, loss
        placed = torch.empty_like(flat).index_copy_(0, out_rows.to(flat.device), flat)
        return placed, torch.empty_like(loss).index_copy_(0, out_rows, loss)

    def _train_autograd(self, anchor: dict[str, torch.Tensor], clients: list[int], plans: list[torch.Tensor],
                        round_idx: int, gidx: torch.Tensor, mask: torch.Tensor, n_steps: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_train_block`` through autograd (any model, loss, optimizer, objective terms, DP-SGD)."""
        prob = self.problem
        local = prob.local
        k = len(clients)
        device = self.data.x.device
        # the rows taking step s (a prefix, clients being ordered) and the widest batch among them
        live = [int(a) for a in (n_steps.unsqueeze(0) > torch.arange(gidx.shape[1]).unsqueeze(1)).sum(1)]
        cols = torch.arange(1, gidx.shape[2] + 1)
        widths = [max(1, int((mask[:a, s] * cols).max())) for s, a in enumerate(live)]
        gidx, maskf = gidx.to(device), mask.to(device=device, dtype=self.data.x.dtype)
        counts = maskf.sum(2)  # [K, S]
        dp = _DpSgdSteps.build(self, clients, round_idx, n_steps, device) if local.dp_sgd is not None else None
        # One contiguous [K, ...] tensor per parameter (not views of one [K, P] matrix): batched
        # matmuls, and above all the in-place fused SGD step, run as one BLAS call only on
        # contiguous batches (a strided batch falls back to a loop of K small matmuls). A prefix
        # of rows of a contiguous tensor is contiguous.
        views = {n: a.unsqueeze(0).expand(k, *a.shape).clone() for n, a in anchor.items()}
        terms = self._terms(anchor)
        linear_stack, fuse = self._fusable(terms)
        token = torch.zeros((), requires_grad=True)
        names = [] if fuse else list(views)
        opt_state = (None if local.optimizer.plain
                     else OptimizerState(local.optimizer, [views[n] for n in names], local.lr))
        loss_sum = torch.zeros(k, device=device)
        for s, (a, w) in enumerate(zip(live, widths, strict=True)):
            idx = gidx[:a, s, :w]
            xb = self.data.x[idx]
            yb = self.data.y[idx]
            cnt = counts[:a, s]
            weight = maskf[:a, s, :w] / cnt.clamp(min=1.0).unsqueeze(1)  # mean over real samples
            loss_weight = weight
            if dp is not None:  # DP-SGD: the sum over the fixed denominator q_k|D_k|; empty batches step
                weight = maskf[:a, s, :w] / dp.denominators[:a].unsqueeze(1)
            if fuse:
                out = self.forward({n: v[:a] for n, v in views.items()}, xb, (local.lr, token))
                loss_k = (per_sample_loss(prob.loss_kind, out, yb) * weight).sum(1)
                torch.autograd.grad(loss_k.sum(), [token])
                loss_sum[:a] += loss_k.detach()
                continue
            cur = {n: views[n][:a].requires_grad_(True) for n in names}
            vlist = [cur[n] for n in names]
            if local.per_sample_clip is None:
                out = self.forward(cur, xb)
                loss_k = (per_sample_loss(prob.loss_kind, out, yb) * weight).sum(1)
                for term in terms:
                    loss_k = loss_k + term(cur)
                grads = list(torch.autograd.grad(loss_k.sum(), vlist))
            else:
                if linear_stack:
                    data_grads, ls = ghost_clipped_grads(self.forward, cur, xb, yb, weight, prob.loss_kind,
                                                         local.per_sample_clip)
                else:
                    data_grads, ls = materialized_clipped_grads(
                        prob.module, cur, xb, yb, weight, prob.loss_kind, local.per_sample_clip
                    )
                loss_k = (ls * loss_weight).sum(1)
                grads = [data_grads[n] for n in names]
                if terms:
                    reg = terms[0](cur)
                    for term in terms[1:]:
                        reg = reg + term(cur)
                    reg_grads = torch.autograd.grad(reg.sum(), vlist, allow_unused=True)
                    grads = [g if r is None else g + r for g, r in zip(grads, reg_grads, strict=True)]
                    loss_k = loss_k + reg.detach()
            with torch.no_grad():
                if dp is not None:
                    noise = prob.layout.views(dp.noise(s, a))
                    grads = [g + noise[n] for g, n in zip(grads, names, strict=True)]
                if opt_state is None:
                    torch._foreach_add_(vlist, grads, alpha=-local.lr)
                else:  # a client's steps are a prefix of the rows: the rows past ``a`` are done
                    _prefix_state(opt_state, a).step(grads)
                    opt_state.step_count += 1
                loss_sum[:a] += loss_k.detach()
        steps_taken = n_steps.clamp(min=1).to(device=loss_sum.device, dtype=loss_sum.dtype)
        flat = torch.cat([views[n].detach().reshape(k, -1) for n in prob.layout.names], dim=1)
        return flat, (loss_sum / steps_taken).cpu()

    def _kernel_for(self, terms: Sequence[object], device: torch.device) -> SGDKernel | None:
        """The plain-SGD kernel when it applies: a supported model (:meth:`SGDKernel.build`), a
        built-in loss without objective terms (a user's loss function runs where it always has, on
        the whole block in the caller's thread), plain SGD without per-sample clipping, on the CPU
        (``fused=False`` turns it off with the autograd fused step)."""
        prob = self.problem
        local = prob.local
        if (self.kernel is None or not self.fused or terms or not isinstance(prob.loss_kind, str)
                or local.per_sample_clip is not None or not local.optimizer.plain or device.type != "cpu"):
            return None
        return self.kernel

    def _chunk_clients(self, k: int, threads: int) -> int:
        """Clients a kernel call steps together: parameters of about four times a core's L2 cache
        (2 MiB L2 on the 2-core reference machine: chunks of 10 of W's clients, 0.8 MB of
        parameters each, took the least CPU time per round on one thread; chunks of 4, 15% more —
        per-call overhead; all 100 at once, 28% more — the parameters streaming through memory at
        every step), and at least two chunks per thread so that the threads finish together."""
        client = self.problem.layout.numel * self.data.x.element_size()
        per_cache = max(1, (4 * _l2_cache_bytes()) // max(client, 1))
        return max(1, min(per_cache, -(-k // (2 * max(threads, 1)))))

    def _train_chunks(self, kernel: SGDKernel, anchor: dict[str, torch.Tensor], gidx: torch.Tensor,
                      mask: torch.Tensor, n_steps: torch.Tensor, out_rows: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_train_block`` with ``kernel``, chunk by chunk of clients: a chunk copies the global
        model into its own [c, ...] parameter tensors, takes all its steps, and writes its rows of
        the block's [K, P] result. Its parameters stay in cache from one step to the next and into
        the result, instead of the whole block's parameters streaming through memory at every
        step. Chunks run on ``torch.get_num_threads()`` threads with one intra-op thread each (no
        synchronization between threads within a step); a chunk holding more than an equal share
        of the work (a very long client) runs first, alone, on all threads."""
        prob = self.problem
        lr, kind = prob.local.lr, prob.loss_kind
        x, y = self.data.x, self.data.y
        k, steps, width = gidx.shape
        flat = torch.empty(k, prob.layout.numel, device=x.device, dtype=next(iter(anchor.values())).dtype)
        loss_sum = torch.zeros(k, device=x.device)
        steps_of = [int(v) for v in n_steps.tolist()]
        # per (client, step): 1 + the column of its last real sample (0: no step); the width of a
        # chunk's batch at step s is the largest among its clients
        last = ((mask * torch.arange(1, width + 1)).amax(2) if steps and width
                else torch.zeros(k, steps, dtype=torch.long))
        counts = mask.sum(2).to(device=x.device, dtype=x.dtype).clamp_(min=1.0)  # [K, S]
        gidx = gidx.to(x.device)
        maskf = mask.to(device=x.device, dtype=x.dtype)
        threads = torch.get_num_threads()
        chunks = _chunks(steps_of, self._chunk_clients(k, threads), threads)
        feat = tuple(x.shape[1:])
        names = prob.layout.names
        local_state = threading.local()

        def scratch(rows: int, numel: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
            """This thread's parameter rows and batch buffer (kept across its chunks)."""
            have = getattr(local_state, "rows", 0), getattr(local_state, "numel", 0)
            if have[0] < rows or have[1] < numel:
                local_state.rows, local_state.numel = max(rows, have[0]), max(numel, have[1])
                local_state.params = {n: torch.empty(local_state.rows, *anchor[n].shape, device=x.device,
                                                     dtype=anchor[n].dtype) for n in names}
                local_state.xbuf = torch.empty(local_state.numel, dtype=x.dtype, device=x.device)
            return local_state.params, local_state.xbuf

        def run(lo: int, hi: int) -> None:
            rows = hi - lo
            widths = [max(1, int(v)) for v in last[lo:hi].amax(0).tolist()]
            feat_numel = int(torch.Size(feat).numel())
            own, xbuf = scratch(rows, rows * max(widths, default=1) * feat_numel)
            params = {n: own[n][:rows] for n in names}
            for n in names:
                params[n].copy_(anchor[n].expand_as(params[n]))
            # the chunk's indices step-major (a step's rows contiguous), labels and sample weights
            # (the mean over a batch's real samples) for all its steps at once
            steps_idx = gidx[lo:hi].transpose(0, 1).contiguous()  # [S, c, B]
            labels = y[gidx[lo:hi]]  # [c, S, B]
            weights = maskf[lo:hi] / counts[lo:hi].unsqueeze(2)  # [c, S, B]
            live = rows
            for s in range(steps_of[lo]):
                while steps_of[lo + live - 1] <= s:  # clients ordered by steps: a prefix trains
                    live -= 1
                w = widths[s]
                idx = steps_idx[s, :live, :w].reshape(-1)
                xb = torch.index_select(x, 0, idx, out=xbuf[: idx.numel() * feat_numel].view(-1, *feat))
                yb, weight = labels[:live, s, :w], weights[:live, s, :w]
                loss = kernel.step({n: v[:live] for n, v in params.items()}, xb.view(live, w, *feat),
                                   functools.partial(_loss_grad, kind, yb=yb, weight=weight), lr)
                loss_sum[lo : lo + live] += loss
            if out_rows is None:
                out = prob.layout.views(flat[lo:hi])
                for n in names:
                    out[n].copy_(params[n])
            else:  # each row straight to its place in the result
                dest = out_rows[lo:hi].to(x.device)
                for n in names:
                    placed[n].index_copy_(0, dest, params[n])

        placed = prob.layout.views(flat)
        total = sum(steps_of)
        heavy = [(lo, hi) for lo, hi in chunks if threads > 1 and sum(steps_of[lo:hi]) * threads > total]
        for lo, hi in heavy:
            run(lo, hi)
        rest = [c for c in chunks if c not in heavy]
        first_alone = bool(rest) and kernel not in _KERNELS_RUN_ALONE
        _run_threaded(rest, run, threads, first_alone=first_alone)
        if first_alone:
            _KERNELS_RUN_ALONE.add(kernel)
        steps_taken = n_steps.clamp(min=1).to(device=loss_sum.device, dtype=loss_sum.dtype)
        loss = (loss_sum / steps_taken).cpu()
        return flat, loss if out_rows is None else torch.empty_like(loss).index_copy_(0, out_rows, loss)

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
                 generators: list[NoiseGenerator], numel: int, dtype: torch.dtype) -> None:
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
        gens = [engine.seeds.noise_generator(round_idx, int(c), "noise", device=device) for c in clients]
        return cls(denominators, stds, active, gens, engine.problem.layout.numel, dtype)

    def noise(self, step: int, rows_taking: int | None = None) -> torch.Tensor:
        """[K', P]: N(0, std_k² I) for every client taking step ``step`` (one [P] draw from its
        stream, as the sequential engine draws), zeros for clients whose steps have run out; K' =
        ``rows_taking`` (the first rows: the clients still training), default all."""
        rows = []
        for k, gen in enumerate(self.generators[:rows_taking]):
            if bool(self.active[k, step]) and float(self.stds[k]) > 0:
                rows.append(randn(self.numel, gen, dtype=self.dtype).to(self.stds.device) * self.stds[k])
            else:
                rows.append(torch.zeros(self.numel, device=self.stds.device, dtype=self.dtype))
        return torch.stack(rows)


def _chunks(steps: Sequence[int], size: int, threads: int) -> list[tuple[int, int]]:
    """Consecutive rows (clients ordered by non-increasing steps) in chunks of at most ``size``
    clients and, unless one client alone has more, at most a ``threads``-th of all the steps: on
    an unbalanced split the long clients train in chunks that the threads share out. (A
    ``2 × threads``-th put most long clients of a Dirichlet(0.1) split alone in a chunk, each
    step a one-client kernel call paying the call's fixed cost: 0.115 s a round of the benchmark's
    FD workload against 0.088 s with a ``threads``-th.)"""
    cap = sum(steps) / max(threads, 1)
    chunks, lo = [], 0
    while lo < len(steps):
        hi, work = lo + 1, steps[lo]
        while hi < len(steps) and hi - lo < size and work + steps[hi] <= cap:
            work += steps[hi]
            hi += 1
        chunks.append((lo, hi))
        lo = hi
    return chunks


def _loss_grad(kind: object, out: torch.Tensor, *, yb: torch.Tensor, weight: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client's weighted loss Σ_i w_i ℓ_i [c] and its gradient at the outputs ``out`` — for
    cross-entropy written out (w_i (softmax − onehot), what autograd computes through
    ``log_softmax``), for any other loss by autograd on the outputs alone."""
    if kind == "cross_entropy":
        logp = torch.log_softmax(out, -1)
        target = yb.long().unsqueeze(-1)
        loss = -(logp.gather(-1, target).squeeze(-1) * weight).sum(1)
        w = weight.unsqueeze(-1)
        return loss, logp.exp_().mul_(w).scatter_add_(-1, target, -w)
    with torch.enable_grad():
        o = out.detach().requires_grad_(True)
        loss = (per_sample_loss(kind, o, yb) * weight).sum(1)  # type: ignore[arg-type]
        (g,) = torch.autograd.grad(loss.sum(), [o])
    return loss.detach(), g


def _l2_cache_bytes() -> int:
    """One core's L2 cache in bytes (Linux sysfs; 1 MiB where it cannot be read)."""
    global _L2_BYTES
    if _L2_BYTES is None:
        _L2_BYTES = 2**20
        try:
            text = open("/sys/devices/system/cpu/cpu0/cache/index2/size").read().strip().upper()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            _L2_BYTES = int(text.rstrip("KMG")) * scale
        except (OSError, ValueError):
            pass
    return _L2_BYTES


_L2_BYTES: int | None = None


@functools.cache
def _per_thread_intraop() -> bool:
    """Whether torch's intra-op thread count is per calling thread (the OpenMP backend of the
    Linux and macOS builds: ``torch.set_num_threads`` sets the calling thread's OpenMP and MKL
    counts; the native thread pool has one count for the process)."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


_KERNELS_RUN_ALONE: weakref.WeakSet[SGDKernel] = weakref.WeakSet()
"""The kernels whose first chunk has run alone in this process (see :func:`_run_threaded`); not
carried by pickling, so an engine shipped to another process runs its first chunk alone there too."""


def _run_threaded(chunks: Sequence[tuple[int, int]], run: Callable[[int, int], None], threads: int,
                  first_alone: bool = False) -> None:
    """``run(lo, hi)`` for every chunk, on up to ``threads`` threads that take the next chunk when
    they finish one, each with one intra-op thread (the caller's count is restored). One thread,
    one chunk, or a torch whose thread count is not per thread: in the caller's thread, as it is.

    ``first_alone``: the first chunk runs in the caller's thread on one intra-op thread — the same
    arithmetic as on a worker — before the threads start. The first kernel call of a process made
    from two threads at once sometimes ends in other last bits on one of them (some one-time
    initialization below torch that is not safe to race; the MLP run of ``docs/architecture.md``,
    "Chunks": 2 processes in 72 differed in round 0's first chunk, 0 in 264 with a chunk run
    alone first), so a kernel's first call in a process runs one chunk alone."""
    if threads <= 1 or len(chunks) <= 1 or not _per_thread_intraop():
        for lo, hi in chunks:
            run(lo, hi)
        return
    if first_alone:
        torch.set_num_threads(1)
        try:
            run(*chunks[0])
        finally:
            torch.set_num_threads(threads)
        chunks = chunks[1:]
    queue = list(reversed(chunks))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        torch.set_num_threads(1)
        while True:
            with lock:
                if not queue or errors:
                    return
                lo, hi = queue.pop()
            try:
                run(lo, hi)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                with lock:
                    errors.append(e)
                return

    pool = [threading.Thread(target=worker, name=f"dpfl-chunk-{i}", daemon=True)
            for i in range(min(threads, len(chunks)))]
    try:
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        torch.set_num_threads(threads)
    if errors:
        raise errors[0]


def _prefix_state(state: OptimizerState, rows: int) -> OptimizerState:
    """The optimizer state of the first ``rows`` clients: views of the same buffers (stepping it
    steps those rows in place); its step count is the caller's to advance."""
    sub = copy.copy(state)
    sub.params = [p[:rows] for p in state.params]
    for attr in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
        if hasattr(state, attr):
            setattr(sub, attr, [t[:rows] for t in getattr(state, attr)])
    return sub
