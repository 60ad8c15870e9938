"""The vectorized engine gives the sequential reference's numbers (same seed, same batches)."""

from __future__ import annotations

import pytest
import torch
from sim_data import random_client_data

from dpfl.algorithms.fedavg import FedAvg
from dpfl.client.context import RoundInfo
from dpfl.client.local import LocalTraining, batch_plan
from dpfl.models import build_model
from dpfl.rng import SERVER, SeedSequence
from dpfl.sim.base import ClientData, LocalProblem
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine


def _data(n_clients: int, sizes: list[int], shape: tuple[int, ...] = (1, 28, 28), classes: int = 10) -> ClientData:
    return random_client_data(sizes, shape, classes, seed=1)


def _problem(name: str, local: LocalTraining, shape=(1, 28, 28), classes=10, **opts) -> LocalProblem:
    model = build_model(name, shape, classes, generator=torch.Generator().manual_seed(3), **opts)
    return LocalProblem(model, local, loss_kind=model.loss_kind, l2_penalty=model.l2_penalty,
                        penalized_params=model.penalized_params)


def _fedavg_rounds(engine_cls, problem, data, rounds=3, **kw) -> torch.Tensor:
    seeds = SeedSequence(11)
    engine = engine_cls(problem, data, seeds, **kw)
    algo = FedAvg(_AllClients())
    params = problem.layout.flatten(problem.module)
    for t in range(rounds):
        clients = algo.sample(t, data.num_clients, seeds)
        local = engine.train(params, clients.tolist(), t)
        params = algo.server_step(params, local, RoundInfo(t, data.num_clients, clients, seeds)).global_params
    return params


class _AllClients:
    def sample(self, num_clients: int, generator: torch.Generator) -> torch.Tensor:
        return torch.arange(num_clients)


SIZES_20 = [7, 13, 64, 65, 100, 31, 5, 128, 77, 40, 9, 120, 64, 1, 90, 55, 33, 70, 12, 101]


@pytest.mark.parametrize("fused", [True, False])
def test_fedavg_20_unequal_clients_3_rounds_same_global_model(fused: bool) -> None:
    data = _data(20, SIZES_20)
    problem = _problem("mlp", LocalTraining(lr=0.05, epochs=2, batch_size=16), hidden=64)
    vec = _fedavg_rounds(VectorizedEngine, problem, data, fused=fused)
    seq = _fedavg_rounds(SequentialEngine, problem, data)
    assert (vec - seq).abs().max().item() <= 1e-5
    # and the model actually moved: the test is not comparing two untouched initializations
    assert (vec - problem.layout.flatten(problem.module)).abs().max().item() > 1e-3


def test_cnn_with_conv_and_pool_layers_matches_sequential() -> None:
    data = _data(4, [10, 3, 17, 8])
    problem = _problem("cnn-000", LocalTraining(lr=0.05, batch_size=8), shape=(1, 28, 28), channels=4)
    vec = _fedavg_rounds(VectorizedEngine, problem, data, rounds=2)
    seq = _fedavg_rounds(SequentialEngine, problem, data, rounds=2)
    assert (vec - seq).abs().max().item() <= 1e-5


def test_resnet_fallback_and_groupnorm_match_sequential() -> None:
    data = _data(2, [3, 2], shape=(3, 32, 32))
    problem = _problem("resnet18", LocalTraining(lr=0.01, batch_size=2), shape=(3, 32, 32), groups=8)
    seeds = SeedSequence(0)
    init = problem.layout.flatten(problem.module)
    vec = VectorizedEngine(problem, data, seeds).train(init, [0, 1], 0).params
    seq = SequentialEngine(problem, data, seeds).train(init, [0, 1], 0).params
    assert (vec - seq).abs().max().item() <= 1e-4


def test_proximal_and_full_batch_match_sequential() -> None:
    data = _data(5, [12, 30, 7, 19, 25])
    local = LocalTraining(lr=0.1, epochs=3, batch_size=None, prox_mu=0.5)
    problem = _problem("mlp", local, hidden=32)
    vec = _fedavg_rounds(VectorizedEngine, problem, data, rounds=2)
    seq = _fedavg_rounds(SequentialEngine, problem, data, rounds=2)
    assert (vec - seq).abs().max().item() <= 1e-5


def test_svm_l2_penalty_matches_sequential() -> None:
    data = _data(3, [20, 11, 40], shape=(12,), classes=2)
    problem = _problem("svm", LocalTraining(lr=0.1, batch_size=8), shape=(12,), classes=2, kappa=0.3)
    vec = _fedavg_rounds(VectorizedEngine, problem, data, rounds=2)
    seq = _fedavg_rounds(SequentialEngine, problem, data, rounds=2)
    assert (vec - seq).abs().max().item() <= 1e-5


def test_one_local_step_is_exactly_one_sgd_step() -> None:
    """Limiting case checked against autograd on the plain module, not against another engine."""
    data = _data(1, [6])
    problem = _problem("mlp", LocalTraining(lr=0.2, batch_size=None), hidden=8)
    init = problem.layout.flatten(problem.module)
    got = VectorizedEngine(problem, data, SeedSequence(0)).train(init, [0], 0).params[0]
    module = problem.module
    problem.layout.load_into(module, init)
    idx = data.client_indices[0]
    loss = torch.nn.functional.cross_entropy(module(data.x[idx]), data.y[idx])
    grads = torch.autograd.grad(loss, list(module.parameters()))
    expected = init - 0.2 * torch.cat([g.reshape(-1) for g in grads])
    assert torch.allclose(got, expected, atol=1e-6)


def test_batch_plan_covers_each_sample_once_per_epoch() -> None:
    plan = batch_plan(10, LocalTraining(lr=1.0, epochs=2, batch_size=4), torch.Generator().manual_seed(0))
    assert plan.shape == (6, 4)
    for epoch in (plan[:3], plan[3:]):
        vals = epoch[epoch >= 0]
        assert sorted(vals.tolist()) == list(range(10))
    steps = batch_plan(10, LocalTraining(lr=1.0, batch_size=4, steps=5), torch.Generator().manual_seed(0))
    assert steps.shape == (5, 4)


def test_seed_streams_are_independent_of_draw_order() -> None:
    s = SeedSequence(5)
    a = torch.rand(3, generator=s.generator(2, 7, "batch"))
    torch.rand(100, generator=s.generator(2, 6, "batch"))
    b = torch.rand(3, generator=s.generator(2, 7, "batch"))
    assert torch.equal(a, b)
    assert s.seed(0, SERVER, "sample") != s.seed(1, SERVER, "sample")


@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_per_sample_clipping_linear_stack_matches_sequential(clip: float) -> None:
    """Ghost norms (vectorized) against per-sample gradients materialized one client at a time."""
    data = _data(4, [9, 30, 17, 4])
    local = LocalTraining(lr=0.3, epochs=2, batch_size=None, per_sample_clip=clip)
    problem = _problem("mlp", local, hidden=16)
    vec = _fedavg_rounds(VectorizedEngine, problem, data, rounds=2)
    seq = _fedavg_rounds(SequentialEngine, problem, data, rounds=2)
    assert (vec - seq).abs().max().item() <= 1e-5


def test_per_sample_clipping_with_infinite_clip_is_plain_gradient_descent() -> None:
    data = _data(3, [9, 12, 5])
    plain = _problem("mlp", LocalTraining(lr=0.2, batch_size=None), hidden=16)
    clipped = _problem("mlp", LocalTraining(lr=0.2, batch_size=None, per_sample_clip=1e9), hidden=16)
    a = _fedavg_rounds(VectorizedEngine, plain, data, rounds=1, fused=False)
    b = _fedavg_rounds(VectorizedEngine, clipped, data, rounds=1)
    assert (a - b).abs().max().item() <= 1e-6


def test_per_sample_clipping_bounds_the_step() -> None:
    """With per-sample clip C and one full-batch step, ‖w_local − w‖ <= lr·C (the fact behind
    000 eq. 13's sensitivity 2ηC/|D_i| for the sum)."""
    data = _data(5, [3, 8, 20, 1, 11])
    lr, clip = 0.5, 0.01
    problem = _problem("mlp", LocalTraining(lr=lr, batch_size=None, per_sample_clip=clip), hidden=16)
    init = problem.layout.flatten(problem.module)
    res = VectorizedEngine(problem, data, SeedSequence(0)).train(init, list(range(5)), 0)
    steps = (res.params - init).norm(dim=1)
    assert bool((steps <= lr * clip * (1 + 1e-5)).all())
    # the one-sample client's step is exactly lr·C: its gradient (norm >> C here) was clipped to C
    assert steps[3].item() == pytest.approx(lr * clip, rel=1e-5)


def test_per_sample_clipping_cnn_materialized_matches_sequential() -> None:
    data = _data(3, [5, 9, 2])
    local = LocalTraining(lr=0.1, batch_size=4, per_sample_clip=0.1)
    problem = _problem("cnn-000", local, channels=3)
    vec = _fedavg_rounds(VectorizedEngine, problem, data, rounds=1)
    seq = _fedavg_rounds(SequentialEngine, problem, data, rounds=1)
    assert (vec - seq).abs().max().item() <= 1e-5


def test_extra_terms_and_final_gradient_match_sequential() -> None:
    def pull_to_zero(params, anchor):  # a data-independent term: (1/2)‖w‖²
        total = None
        for p in params.values():
            d = p.flatten(1).pow(2).sum(1)
            total = d if total is None else total + d
        return 0.5 * total

    data = _data(3, [7, 15, 3])
    model = build_model("mlp", (1, 28, 28), 10, generator=torch.Generator().manual_seed(3), hidden=16)
    problem = LocalProblem(model, LocalTraining(lr=0.1, batch_size=4, final_gradient=True),
                           extra_terms=(pull_to_zero,))
    init = problem.layout.flatten(model)
    seeds = SeedSequence(2)
    a = VectorizedEngine(problem, data, seeds).train(init, [0, 1, 2], 0)
    b = SequentialEngine(problem, data, seeds).train(init, [0, 1, 2], 0)
    assert (a.params - b.params).abs().max().item() <= 1e-5
    assert a.final_grads is not None and b.final_grads is not None
    assert (a.final_grads - b.final_grads).abs().max().item() <= 1e-5
    assert a.final_grads.abs().max().item() > 0
