"""The vectorized engine's cohort in blocks and its shrinking active prefix.

Clients are ordered by step count (longest first) so that the clients still training are a prefix
of the stacked rows, and the cohort trains in blocks sized from a memory budget. Neither may be
visible: rows come back in the caller's order with the sequential reference's numbers, whatever
the block size, with the same batches and DP-SGD noise (streams per (round, client, purpose)).
"""

from __future__ import annotations

import pytest
import torch
from sim_data import random_client_data

from dpfl.client.local import DpSgd, LocalTraining
from dpfl.client.optim import Adam, Sgd
from dpfl.errors import ConfigError
from dpfl.models import build_model
from dpfl.rng import SeedSequence
from dpfl.sim.base import LocalProblem, LocalResult
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine

# unbalanced (a Dirichlet split's shape): one long client, several of one batch or less
SIZES = [3, 90, 7, 1, 41, 12, 64, 5, 17, 2, 33]
# a cohort in no particular order, not every client
COHORT = [8, 1, 3, 10, 0, 6, 4, 9, 5]


def _problem(local: LocalTraining, name: str = "mlp", **opts) -> LocalProblem:
    model = build_model(name, (1, 8, 8), 4, generator=torch.Generator().manual_seed(3), **opts)
    return LocalProblem(model, local, loss_kind=model.loss_kind)


def _run(engine: VectorizedEngine | SequentialEngine, problem: LocalProblem, rounds: int = 2) -> list[LocalResult]:
    params = problem.layout.flatten(problem.module)
    out = []
    for t in range(rounds):
        res = engine.train(params, COHORT, t)
        out.append(res)
        params = res.params.mean(0)
    return out


def _blocks_seen(engine: VectorizedEngine) -> list[int]:
    """Records the size of every block the engine trains."""
    seen: list[int] = []
    inner = engine._train_block

    def spy(anchor, clients, plans, round_idx, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(len(clients))
        # the block's clients come longest first (the active rows are a prefix)
        steps = [p.shape[0] for p in plans]
        assert steps == sorted(steps, reverse=True)
        return inner(anchor, clients, plans, round_idx, **kwargs)

    engine._train_block = spy  # type: ignore[method-assign]
    return seen


LOCALS = {
    "plain-fused": LocalTraining(lr=0.1, epochs=2, batch_size=8),
    "adam": LocalTraining(lr=0.05, epochs=2, batch_size=8, optimizer=Adam(betas=(0.8, 0.99))),
    "momentum-prox-clip": LocalTraining(lr=0.05, epochs=2, batch_size=8, prox_mu=0.3, per_sample_clip=0.5,
                                        optimizer=Sgd(momentum=0.9, weight_decay=0.01)),
    "dp-sgd": LocalTraining(lr=0.1, epochs=2, batch_size=8, per_sample_clip=0.5, dp_sgd=DpSgd(0.8)),
    "final-gradient": LocalTraining(lr=0.1, batch_size=8, final_gradient=True),
}


@pytest.mark.parametrize("key", sorted(LOCALS))
def test_blocks_of_any_size_give_the_sequential_rows_in_the_callers_order(key: str) -> None:
    data = random_client_data(SIZES, (1, 8, 8), 4, seed=1)
    problem = _problem(LOCALS[key], hidden=16)
    seq = _run(SequentialEngine(problem, data, SeedSequence(5)), problem)
    one_block = VectorizedEngine(problem, data, SeedSequence(5), memory_budget=None)
    whole = _run(one_block, problem)
    # a budget of three clients (at 100 bytes each): blocks of 3; a budget below one client: blocks of 1
    three = VectorizedEngine(problem, data, SeedSequence(5), memory_budget=300)
    three.client_bytes = lambda steps, width, fuse: 100  # type: ignore[method-assign]
    seen3 = _blocks_seen(three)
    by3 = _run(three, problem)
    single = VectorizedEngine(problem, data, SeedSequence(5), memory_budget=1)
    seen1 = _blocks_seen(single)
    by1 = _run(single, problem)
    assert seen1 == [1] * (2 * len(COHORT))
    assert len(seen3) > 2 and max(seen3) == 3
    for ref, w, b3, b1 in zip(seq, whole, by3, by1, strict=True):
        for got in (w, b3, b1):
            assert (got.params - ref.params).abs().max().item() <= 1e-5  # the engines' tolerance
            assert torch.allclose(got.train_loss, ref.train_loss, atol=1e-5)
            assert torch.equal(got.num_samples, ref.num_samples)
            if ref.final_grads is not None:
                assert got.final_grads is not None
                assert (got.final_grads - ref.final_grads).abs().max().item() <= 1e-5
            else:
                assert got.final_grads is None
        # blocks change nothing but the float order of the batched kernels
        assert (b1.params - w.params).abs().max().item() <= 1e-6
    start = problem.layout.flatten(problem.module)
    assert (whole[0].params - start).abs().max().item() > 1e-3  # the models moved


def test_dp_sgd_noise_is_drawn_per_client_whatever_the_block() -> None:
    """The same seed gives the same noise in blocks of one client as in one block (to float
    rounding), another seed moves the rows: the noise is there and comes from the client's stream."""
    data = random_client_data(SIZES, (1, 8, 8), 4, seed=1)
    problem = _problem(LOCALS["dp-sgd"], hidden=16)
    a = _run(VectorizedEngine(problem, data, SeedSequence(5), memory_budget=1), problem, rounds=1)[0]
    b = _run(VectorizedEngine(problem, data, SeedSequence(5), memory_budget=None), problem, rounds=1)[0]
    c = _run(VectorizedEngine(problem, data, SeedSequence(6), memory_budget=None), problem, rounds=1)[0]
    assert (a.params - b.params).abs().max().item() <= 1e-6
    assert (a.params - c.params).abs().max().item() > 1e-3


def test_block_size_follows_the_budget() -> None:
    data = random_client_data(SIZES, (1, 8, 8), 4, seed=1)
    problem = _problem(LOCALS["plain-fused"], hidden=16)
    engine = VectorizedEngine(problem, data, SeedSequence(0), memory_budget=10**6)
    per = engine.client_bytes(10, 8, True)
    # parameters twice (stacked, flat result) at least, and the input of a batch
    assert per >= 4 * (2 * problem.layout.numel + 8 * 64)
    assert engine.block_size(1000, 10, 8, True) == 10**6 // per
    assert engine.block_size(3, 10, 8, True) == 3
    engine.memory_budget = 1
    assert engine.block_size(1000, 10, 8, True) == 1
    # an unfused step holds the gradient too, Adam two more copies: fewer clients per block
    adam = VectorizedEngine(_problem(LOCALS["adam"], hidden=16), data, SeedSequence(0))
    assert adam.client_bytes(10, 8, False) >= per + 3 * 4 * problem.layout.numel


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1GB"])
def test_a_bad_budget_is_refused_naming_it(bad: object) -> None:
    data = random_client_data([4, 4], (1, 8, 8), 4, seed=1)
    problem = _problem(LOCALS["plain-fused"], hidden=16)
    with pytest.raises(ConfigError, match="memory budget.*" + repr(bad).replace("'", ".")):
        VectorizedEngine(problem, data, SeedSequence(0), memory_budget=bad)  # type: ignore[arg-type]
