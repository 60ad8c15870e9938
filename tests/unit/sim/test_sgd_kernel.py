"""The plain-SGD kernel of the vectorized engine (``sim/kernel.py: SGDKernel``): one step of a few
clients gives what autograd gives each client alone, the engine's chunked, threaded training gives
the sequential engine's numbers, and models the kernel does not cover go the autograd way."""

from __future__ import annotations

import pytest
import torch
from sim_data import random_client_data
from torch import nn
from torch.func import functional_call

from dpfl.algorithms.fedavg import FedAvg
from dpfl.client.context import RoundInfo
from dpfl.client.local import LocalTraining
from dpfl.models import build_model, per_sample_loss
from dpfl.rng import SeedSequence
from dpfl.sim import vectorized
from dpfl.sim.base import LocalProblem
from dpfl.sim.kernel import SGDKernel
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine


def _nested_tanh_avgpool() -> nn.Sequential:
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, stride=2), nn.Tanh()),
        nn.AvgPool2d(2),
        nn.Conv2d(4, 3, 2, bias=False),
        nn.Flatten(),
        nn.Sequential(nn.Linear(3, 5), nn.Softplus(), nn.Identity()),
        nn.Linear(5, 4),
    )


MODELS = {
    "mlp": (lambda: build_model("mlp", (1, 6, 6), 4, generator=torch.Generator().manual_seed(0), hidden=7),
            (1, 6, 6), "cross_entropy"),
    "svm": (lambda: build_model("svm", (9,), 2, generator=torch.Generator().manual_seed(0)), (9,), "hinge"),
    "cnn2": (lambda: build_model("cnn2", (1, 12, 12), 4, generator=torch.Generator().manual_seed(0)),
             (1, 12, 12), "cross_entropy"),
    "cnn-mnist-small": (lambda: build_model("cnn-mnist-small", (1, 28, 28), 4,
                                            generator=torch.Generator().manual_seed(0)), (1, 28, 28), "cross_entropy"),
    "nested-tanh-avgpool": (_nested_tanh_avgpool, (2, 8, 8), "cross_entropy"),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_kernel_step_is_each_clients_own_sgd_step(name: str) -> None:
    build, shape, loss_kind = MODELS[name]
    module = build()
    kernel = SGDKernel.build(module)
    assert kernel is not None
    gen = torch.Generator().manual_seed(1)
    c, b, lr = 3, 5, 0.3
    # every client its own parameters: the global ones plus a client-specific perturbation
    params = {n: (p.detach().unsqueeze(0) + 0.1 * torch.randn(c, *p.shape, generator=gen)).contiguous()
              for n, p in module.named_parameters()}
    x = torch.rand(c, b, *shape, generator=gen)
    y = torch.randint(0, 2 if loss_kind == "hinge" else 4, (c, b), generator=gen)
    weight = torch.rand(c, b, generator=gen)
    expected_params, expected_loss = {n: v.clone() for n, v in params.items()}, []
    for i in range(c):
        own = {n: v[i].clone().requires_grad_(True) for n, v in params.items()}
        loss = (per_sample_loss(loss_kind, functional_call(module, own, (x[i],)), y[i]) * weight[i]).sum()
        grads = torch.autograd.grad(loss, list(own.values()))
        for (n, p), g in zip(own.items(), grads, strict=True):
            expected_params[n][i] = p.detach() - lr * g
        expected_loss.append(loss.detach())

    def loss_grad(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            o = out.detach().requires_grad_(True)
            loss = (per_sample_loss(loss_kind, o, y) * weight).sum(1)
            (g,) = torch.autograd.grad(loss.sum(), [o])
        return loss.detach(), g

    got_loss = kernel.step(params, x, loss_grad, lr)
    assert torch.allclose(got_loss, torch.stack(expected_loss), atol=1e-5)
    for n in params:
        assert torch.allclose(params[n], expected_params[n], atol=1e-5), n


class _Custom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


@pytest.mark.parametrize("module", [
    nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.GroupNorm(2, 4), nn.Linear(4, 2)),
    nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2)),  # training mode
    nn.Sequential(nn.Flatten(), nn.Linear(4, 4), _Custom(), nn.Linear(4, 2)),
    nn.Sequential(nn.Conv2d(1, 2, 3, padding="same"), nn.Flatten(), nn.Linear(8, 2)),
    nn.Sequential(nn.Flatten(), nn.ReLU()),  # nothing to train
])
def test_models_the_kernel_does_not_cover_are_left_to_autograd(module: nn.Module) -> None:
    assert SGDKernel.build(module) is None


def _rounds(engine: VectorizedEngine | SequentialEngine, problem: LocalProblem, rounds: int = 2) -> torch.Tensor:
    seeds = SeedSequence(11)
    algo = FedAvg(_All())
    params = problem.layout.flatten(problem.module)
    for t in range(rounds):
        clients = algo.sample(t, engine.data.num_clients, seeds)
        local = engine.train(params, clients.tolist(), t)
        params = algo.server_step(params, local, RoundInfo(t, engine.data.num_clients, clients, seeds)).global_params
    return params


class _All:
    def sample(self, num_clients: int, generator: torch.Generator) -> torch.Tensor:
        return torch.arange(num_clients)


# one client far longer than the others: its chunk holds most of the work and runs alone first
SIZES = [7, 13, 64, 65, 300, 31, 5, 128, 77, 40, 9, 120, 64, 1, 90]


@pytest.mark.parametrize(("threads", "chunk"), [(1, None), (2, None), (2, 2)])
@pytest.mark.parametrize("model", ["mlp", "cnn-mnist-small"])
def test_chunked_threaded_training_matches_sequential(model: str, threads: int, chunk: int | None) -> None:
    data = random_client_data(SIZES, (1, 28, 28), 10, seed=1)
    opts = {"hidden": 32} if model == "mlp" else {}
    m = build_model(model, (1, 28, 28), 10, generator=torch.Generator().manual_seed(3), **opts)
    problem = LocalProblem(m, LocalTraining(lr=0.05, epochs=2, batch_size=16), loss_kind=m.loss_kind)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        engine = VectorizedEngine(problem, data, SeedSequence(11))
        assert engine.kernel is not None
        if chunk is not None:  # many chunks: the threads share them out
            engine._chunk_clients = lambda k, threads: chunk  # type: ignore[method-assign]
        vec = _rounds(engine, problem)
        assert torch.get_num_threads() == threads  # the caller's thread count is restored
    finally:
        torch.set_num_threads(before)
    seq = _rounds(SequentialEngine(problem, data, SeedSequence(11)), problem)
    assert (vec - seq).abs().max().item() <= 1e-5
    assert (vec - problem.layout.flatten(problem.module)).abs().max().item() > 1e-3


def test_autograd_fused_step_without_the_kernel_matches_sequential() -> None:
    """The autograd path with the SGD step fused into the backward (what a non-CPU device runs)."""
    data = random_client_data(SIZES[:8], (1, 28, 28), 10, seed=1)
    m = build_model("mlp", (1, 28, 28), 10, generator=torch.Generator().manual_seed(3), hidden=32)
    problem = LocalProblem(m, LocalTraining(lr=0.05, epochs=2, batch_size=16), loss_kind=m.loss_kind)
    engine = VectorizedEngine(problem, data, SeedSequence(11))
    engine.kernel = None
    vec = _rounds(engine, problem)
    seq = _rounds(SequentialEngine(problem, data, SeedSequence(11)), problem)
    assert (vec - seq).abs().max().item() <= 1e-5


def test_an_error_in_a_worker_thread_reaches_the_caller() -> None:
    ran: list[tuple[int, int]] = []

    def run(lo: int, hi: int) -> None:
        ran.append((lo, hi))
        if lo == 2:
            raise ValueError("chunk 2 failed")

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(ValueError, match="chunk 2 failed"):
            vectorized._run_threaded([(0, 1), (1, 2), (2, 3), (3, 4)], run, 2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert (2, 3) in ran


def test_first_alone_runs_the_first_chunk_in_the_caller_on_one_thread_before_the_workers() -> None:
    if not vectorized._per_thread_intraop():
        pytest.skip("torch's intra-op thread count is not per thread in this build")
    import threading

    seen: list[tuple[int, str, int]] = []
    lock = threading.Lock()

    def run(lo: int, hi: int) -> None:
        with lock:
            seen.append((lo, threading.current_thread().name, torch.get_num_threads()))

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        vectorized._run_threaded([(0, 1), (1, 2), (2, 3), (3, 4)], run, 2, first_alone=True)
        assert torch.get_num_threads() == 2  # restored
        first = seen[0]
        vectorized._run_threaded([(0, 1), (1, 2), (2, 3)], run, 2)
    finally:
        torch.set_num_threads(before)
    assert first == (0, threading.current_thread().name, 1)  # alone, before any worker, one intra-op thread
    assert sorted(lo for lo, _, _ in seen[:4]) == [0, 1, 2, 3]  # every chunk once
    assert all(name.startswith("dpfl-chunk-") and n == 1 for _, name, n in seen[1:])


def test_a_kernels_first_call_in_a_process_runs_one_chunk_alone_and_later_calls_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = random_client_data(SIZES[:8], (1, 28, 28), 10, seed=1)
    m = build_model("mlp", (1, 28, 28), 10, generator=torch.Generator().manual_seed(3), hidden=32)
    problem = LocalProblem(m, LocalTraining(lr=0.05, epochs=1, batch_size=16), loss_kind=m.loss_kind)
    flags: list[bool] = []
    real = vectorized._run_threaded

    def spy(chunks: list[tuple[int, int]], run: object, threads: int, first_alone: bool = False) -> None:
        flags.append(first_alone)
        real(chunks, run, threads, first_alone=first_alone)  # type: ignore[arg-type]

    monkeypatch.setattr(vectorized, "_run_threaded", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine = VectorizedEngine(problem, data, SeedSequence(11))
        engine._chunk_clients = lambda k, threads: 2  # type: ignore[method-assign]
        _rounds(engine, problem, rounds=3)
        other = VectorizedEngine(problem, data, SeedSequence(11))  # another kernel: its own first call
        other._chunk_clients = lambda k, threads: 2  # type: ignore[method-assign]
        _rounds(other, problem, rounds=1)
    finally:
        torch.set_num_threads(before)
    assert flags == [True, False, False, True]
