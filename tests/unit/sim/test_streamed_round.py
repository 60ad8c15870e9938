"""A streamed round: the in-process cohort trains, client-steps and sums the cohort block by block.

With the vectorized engine and DP-FedAvg (``sums_uploads``), :class:`InProcessCohort` never stacks
the cohort's [K, P] rows: each block of clients is trained, run through the client step and
folded into the running sum of the uploads before the next block trains. The round must be the
stacked round's (every client's rows from its own streams, the server's noise drawn once from
its streams), up to float summation order and the float order of the batched kernels (the
blocks differ in size), and no two blocks' rows may ever be alive at once.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest
import torch
from sim_data import random_client_data

from dpfl.algorithms.base import Uploads
from dpfl.algorithms.dp_fedavg import AdaptiveClipOptions, DpFedAvg, DpFedAvgOptions
from dpfl.client.context import LocalProblem, RoundInfo
from dpfl.client.local import LocalTraining
from dpfl.models import build_model
from dpfl.rng import SeedSequence
from dpfl.rounds.cohort import InProcessCohort
from dpfl.sampling.clients import PoissonSampler
from dpfl.sim.vectorized import VectorizedEngine

# unbalanced clients (one long, several of one batch or less)
SIZES = [3, 90, 7, 1, 41, 12, 64, 5, 17, 2, 33, 9, 26, 4, 50, 11]
BLOCK = 3  # clients per block of the streamed engine

CASES: dict[str, dict[str, Any]] = {
    "gaussian-local": {"options": {}},
    "gaussian-central": {"options": {"variant": "central"}},
    "gaussian-adaptive-clip": {"options": {"adaptive_clip": AdaptiveClipOptions(count_noise_std=1.0)}},
    "gaussian-lus": {"options": {"lus_sparsity": 0.5}},
    "secure-visible": {"options": {}, "secure": "visible"},
    "secure-hidden": {"options": {}, "secure": "hidden"},
}


def _emit(kind: str, message: str, round_idx: int | None) -> None:
    del kind, message, round_idx


def _algorithm(case: str, problem: LocalProblem) -> tuple[DpFedAvg, LocalProblem]:
    spec = CASES[case]
    options = DpFedAvgOptions(clip_norm=0.3, noise_multiplier=0.7, **spec["options"])
    secure = spec.get("secure")
    algo = DpFedAvg(options, PoissonSampler(0.7), len(SIZES), 1e-3, rounds=3, secure_aggregation=secure is not None,
                    participation=secure or "visible", num_params=problem.layout.numel)
    return algo, algo.configure_local(problem)


def _problem() -> LocalProblem:
    model = build_model("mlp", (1, 8, 8), 4, generator=torch.Generator().manual_seed(3), hidden=16)
    return LocalProblem(model, LocalTraining(lr=0.2, epochs=2, batch_size=8), loss_kind=model.loss_kind)


def _cohorts(case: str, seed: int = 5) -> tuple[InProcessCohort, InProcessCohort, VectorizedEngine]:
    """(the stacked cohort: one block, the stacked server step; the streamed cohort: blocks of
    ``BLOCK`` clients; its engine), each with its own algorithm (adaptive clipping has state)."""
    data = random_client_data(SIZES, (1, 8, 8), 4, seed=1)
    algo_a, problem_a = _algorithm(case, _problem())
    stacked = InProcessCohort(VectorizedEngine(problem_a, data, SeedSequence(seed), memory_budget=None), algo_a)
    stacked.streams = lambda: False  # type: ignore[method-assign]
    algo_b, problem_b = _algorithm(case, _problem())
    engine = VectorizedEngine(problem_b, data, SeedSequence(seed), memory_budget=1)
    engine.client_bytes = lambda steps, width, fuse: 100  # type: ignore[method-assign]
    engine.memory_budget = BLOCK * (100 + algo_b.client_step_bytes(problem_b.layout.numel))
    streamed = InProcessCohort(engine, algo_b)
    assert streamed.streams() and not stacked.streams()
    return stacked, streamed, engine


def _round(cohort: InProcessCohort, params: torch.Tensor, t: int, seeds: SeedSequence) -> tuple[Any, Any]:
    algo = cohort.algorithm
    info = RoundInfo(t, len(SIZES), algo.sample(t, len(SIZES), seeds), seeds)
    info = info.with_plan(algo.plan(info))  # type: ignore[attr-defined]
    collected = cohort.collect(params, info, _emit)
    return collected, cohort.aggregate(params, collected, info)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_streamed_round_is_the_stacked_round(case: str) -> None:
    stacked, streamed, engine = _cohorts(case)
    blocks: list[int] = []
    inner = engine._train_block

    def spy(anchor, clients, plans, round_idx, **kwargs):  # type: ignore[no-untyped-def]
        blocks.append(len(clients))
        return inner(anchor, clients, plans, round_idx, **kwargs)

    engine._train_block = spy  # type: ignore[method-assign]
    seeds = SeedSequence(5)
    start = stacked.engine.problem.layout.flatten(stacked.engine.problem.module)
    pa = pb = start
    for t in range(3):
        ca, oa = _round(stacked, pa, t, seeds)
        cb, ob = _round(streamed, pb, t, seeds)
        assert torch.equal(ca.clients, cb.clients) and torch.equal(ca.num_samples, cb.num_samples)
        assert cb.num_rows >= 2 * BLOCK + 1  # at least three blocks
        assert torch.allclose(ca.train_loss, cb.train_loss, atol=1e-5)
        # float summation order and batched kernels of other sizes (measured <= 3e-8; updates are
        # ~0.07); under secure aggregation such a float difference may flip a rounding: one integer
        # unit 1/(γm) ≈ 4e-7 per flip (measured: one per round). The noise is the same draw.
        tol = 2e-6 if "secure" in case else 1e-6
        assert (oa.global_params - ob.global_params).abs().max().item() <= tol
        assert set(oa.metrics) == set(ob.metrics)
        for key, va in oa.metrics.items():
            assert ob.metrics[key] == pytest.approx(va, abs=1e-5), key
        pa, pb = oa.global_params, ob.global_params
    assert max(blocks) == BLOCK and len(blocks) >= 9
    assert (pa - start).abs().max().item() > 1e-2  # the model moved
    if "adaptive" in case:
        assert streamed.algorithm.clip_norm != 0.3 and streamed.algorithm.clip_norm == pytest.approx(
            stacked.algorithm.clip_norm, rel=1e-6)


@pytest.mark.parametrize("case", ["gaussian-local", "secure-hidden"])
def test_the_streamed_rounds_noise_comes_from_the_seed(case: str) -> None:
    """Another seed moves the streamed round far beyond the tolerance above: the comparison can fail."""
    _, a, _ = _cohorts(case, seed=5)
    _, b, _ = _cohorts(case, seed=6)
    start = a.engine.problem.layout.flatten(a.engine.problem.module)
    _, oa = _round(a, start, 0, SeedSequence(5))
    _, ob = _round(b, start, 0, SeedSequence(6))
    assert (oa.global_params - ob.global_params).abs().max().item() > 1e-2


@pytest.mark.parametrize("case", ["gaussian-local", "secure-hidden", "gaussian-lus"])
def test_no_two_blocks_rows_are_alive_at_once(case: str) -> None:
    """Every [B, P] tensor of a block (its trained parameters, the client step's input and its
    uploads) is freed before the next block trains, and the stacked [K, P] is never built."""
    _, streamed, engine = _cohorts(case)
    algo = streamed.algorithm

    def no_stack(*args: object, **kwargs: object) -> None:
        raise AssertionError("the streamed round called the stacked train()")

    engine.train = no_stack  # type: ignore[method-assign]
    alive: list[weakref.ref[torch.Tensor]] = []
    blocks: list[int] = []
    inner_train = engine._train_block
    inner_step = algo.client_step

    def train_spy(anchor, clients, plans, round_idx, **kwargs):  # type: ignore[no-untyped-def]
        assert all(ref() is None for ref in alive), "an earlier block's rows are alive while a block trains"
        flat, loss = inner_train(anchor, clients, plans, round_idx, **kwargs)
        alive.append(weakref.ref(flat))
        blocks.append(flat.shape[0])
        return flat, loss

    def step_spy(global_params: torch.Tensor, local: Any, info: RoundInfo) -> Uploads:
        assert local.params.shape[0] <= BLOCK
        alive.append(weakref.ref(local.params))
        if local.final_grads is not None:
            alive.append(weakref.ref(local.final_grads))
        uploads = inner_step(global_params, local, info)
        alive.append(weakref.ref(uploads.params))
        return uploads

    engine._train_block = train_spy  # type: ignore[method-assign]
    algo.client_step = step_spy  # type: ignore[method-assign]
    start = engine.problem.layout.flatten(engine.problem.module)
    collected, out = _round(streamed, start, 0, SeedSequence(5))
    assert len(blocks) >= 3 and max(blocks) == BLOCK
    assert sum(blocks) == collected.num_rows
    assert all(ref() is None for ref in alive)
    assert isinstance(collected.payload, Uploads) and collected.payload.params.shape[0] == 0
    assert collected.payload.params_sum is not None
    assert torch.isfinite(out.global_params).all()


def test_folding_blocks_sums_rows_and_keeps_every_per_row_value_in_client_order() -> None:
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(6, 4, generator=gen)
    ints = torch.randint(-2**40, 2**40, (6, 4), generator=gen)
    ids = torch.tensor([5, 1, 4, 0, 3, 2])

    def block(sel: slice, params: torch.Tensor) -> Uploads:
        return Uploads(ids[sel], params[sel], ids[sel] + 10, ids[sel].double() / 10,
                       {"noise_std": ids[sel].double()}, diagnostics={"update_norm": ids[sel].double() * 2})

    _, problem = _algorithm("gaussian-local", _problem())
    algo, _ = _algorithm("gaussian-local", _problem())
    for params in (rows, ints):
        acc = None
        for sel in (slice(0, 2), slice(2, 3), slice(3, 6)):
            acc = algo.accumulate(acc, block(sel, params))
        assert acc is not None
        assert acc.clients.tolist() == [0, 1, 2, 3, 4, 5]
        assert acc.num_samples.tolist() == [10, 11, 12, 13, 14, 15]
        assert acc.declared["noise_std"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert acc.diagnostics["update_norm"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        assert acc.params.shape == (0, 4) and acc.params_sum is not None
        if params.dtype == torch.int64:
            assert torch.equal(acc.summed_params(), params.sum(0))  # integers: exact
        else:
            assert torch.allclose(acc.summed_params(), params.sum(0), atol=1e-6)
    with pytest.raises(ValueError, match="length"):
        block(slice(0, 2), rows).fold(Uploads(ids[:1], rows[:1, :3], ids[:1], ids[:1].double()))
