"""Local optimizers (SGD with momentum / weight decay, Adam): engines agree with each other and
with ``torch.optim`` run by hand on one client; state is per client and reset every round."""

from __future__ import annotations

import re

import pytest
import torch
from sim_data import random_client_data

from dpfl.client.local import LocalTraining, batch_plan, check_local_optimizer
from dpfl.client.optim import Adam, OptimizerState, Sgd
from dpfl.errors import ConfigError
from dpfl.models import build_model
from dpfl.rng import SeedSequence
from dpfl.sim.base import ClientData, LocalProblem
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine

OPTIMIZERS = {
    "sgd-momentum": Sgd(momentum=0.9),
    "sgd-weight-decay": Sgd(weight_decay=0.01),
    "sgd-momentum-weight-decay": Sgd(momentum=0.5, weight_decay=0.05),
    "adam": Adam(betas=(0.8, 0.99), eps=1e-6),
    "adam-weight-decay": Adam(weight_decay=0.02),
}


def _data(sizes: list[int], shape: tuple[int, ...] = (1, 8, 8), classes: int = 4) -> ClientData:
    return random_client_data(sizes, shape, classes, seed=1)


def _problem(local: LocalTraining, name: str = "mlp", shape=(1, 8, 8), classes: int = 4, **opts) -> LocalProblem:
    model = build_model(name, shape, classes, generator=torch.Generator().manual_seed(3), **opts)
    return LocalProblem(model, local, loss_kind=model.loss_kind)


@pytest.mark.parametrize("key", sorted(OPTIMIZERS))
def test_vectorized_matches_sequential(key: str) -> None:
    """Unequal clients (so some finish their steps early: their state must freeze), 2 epochs."""
    data = _data([5, 23, 12, 1])
    local = LocalTraining(lr=0.05, epochs=2, batch_size=4, optimizer=OPTIMIZERS[key])
    problem = _problem(local, hidden=16)
    init = problem.layout.flatten(problem.module)
    seeds = SeedSequence(4)
    vec = VectorizedEngine(problem, data, seeds).train(init, [0, 1, 2, 3], 0)
    seq = SequentialEngine(problem, data, seeds).train(init, [0, 1, 2, 3], 0)
    assert (vec.params - seq.params).abs().max().item() <= 1e-5  # float32 rounding only
    assert torch.allclose(vec.train_loss, seq.train_loss, atol=1e-5)
    assert (vec.params - init).abs().max().item() > 1e-3  # the models moved


@pytest.mark.parametrize("key", ["sgd-momentum-weight-decay", "adam"])
def test_cnn_and_per_sample_clipping_match_sequential(key: str) -> None:
    data = _data([6, 3, 9])
    local = LocalTraining(lr=0.05, batch_size=4, per_sample_clip=0.5, optimizer=OPTIMIZERS[key])
    problem = _problem(local, "cnn-000", channels=2)
    init = problem.layout.flatten(problem.module)
    seeds = SeedSequence(0)
    vec = VectorizedEngine(problem, data, seeds).train(init, [0, 1, 2], 0).params
    seq = SequentialEngine(problem, data, seeds).train(init, [0, 1, 2], 0).params
    assert (vec - seq).abs().max().item() <= 1e-5


def _torch_optim_by_hand(problem: LocalProblem, data: ClientData, client: int, torch_opt, seeds: SeedSequence,
                         round_idx: int) -> torch.Tensor:
    """One client's local training written with nn.Module + torch.optim (the reference)."""
    module = problem.module
    init = problem.layout.flatten(module)
    opt = torch_opt(module.parameters())
    idx = data.client_indices[client]
    plan = batch_plan(idx.numel(), problem.local, seeds.generator(round_idx, client, "batch"))
    for row in plan:
        b = idx[row[row >= 0]]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(module(data.x[b]), data.y[b]).backward()
        opt.step()
    out = problem.layout.flatten(module)
    problem.layout.load_into(module, init)  # leave the shared module as it was
    return out


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        (Sgd(momentum=0.9, weight_decay=0.01),
         lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01)),
        (Adam(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.02),
         lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.02)),
    ],
    ids=["sgd", "adam"],
)
@pytest.mark.parametrize("engine_cls", [VectorizedEngine, SequentialEngine])
def test_one_client_matches_torch_optim(ours, reference, engine_cls) -> None:
    data = _data([8, 19])
    problem = _problem(LocalTraining(lr=0.05, epochs=3, batch_size=5, optimizer=ours), hidden=16)
    init = problem.layout.flatten(problem.module)
    seeds = SeedSequence(9)
    got = engine_cls(problem, data, seeds).train(init, [0, 1], 2).params
    for row, client in enumerate([0, 1]):
        expected = _torch_optim_by_hand(problem, data, client, reference, seeds, 2)
        assert (got[row] - expected).abs().max().item() <= 1e-5
    assert (got[1] - init).abs().max().item() > 1e-3


def test_state_is_reset_every_round() -> None:
    """Round 1 from the same start and the same batches gives round 0's result only if nothing
    (no momentum, no Adam moment) carried over; the batches are made equal by training round 1
    with the round-0 seed stream."""
    data = _data([10, 7])
    problem = _problem(LocalTraining(lr=0.05, epochs=2, batch_size=3, optimizer=Adam()), hidden=8)
    init = problem.layout.flatten(problem.module)
    for engine_cls in (VectorizedEngine, SequentialEngine):
        engine = engine_cls(problem, data, SeedSequence(1))
        first = engine.train(init, [0, 1], 0).params
        again = engine.train(init, [0, 1], 0).params
        assert torch.equal(first, again)


def test_default_is_plain_sgd_and_state_helper_matches_it() -> None:
    """``Sgd()`` is plain SGD; driving OptimizerState with it gives w − ηg exactly."""
    assert Sgd().plain and Sgd().kind == "sgd" and LocalTraining(lr=0.1).optimizer == Sgd()
    w = torch.randn(3, 4)
    g = torch.randn(3, 4)
    p = w.clone()
    OptimizerState(Sgd(), [p], 0.1).step([g])
    assert torch.equal(p, w.add(g, alpha=-0.1))


def test_inactive_rows_keep_parameters_and_state() -> None:
    p = torch.ones(2, 3)
    state = OptimizerState(Sgd(momentum=0.9, weight_decay=0.1), [p], 0.5)
    state.step([torch.ones(2, 3)], active=torch.tensor([True, False]))
    assert torch.equal(p[1], torch.ones(3)) and torch.equal(state.momentum_buffer[0][1], torch.zeros(3))
    assert not torch.equal(p[0], torch.ones(3))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"momentum": 1.0}, "local.optimizer.momentum"),
        ({"momentum": -0.1}, "local.optimizer.momentum"),
        ({"weight_decay": float("nan")}, "local.optimizer.weight_decay"),
    ],
)
def test_bad_sgd_options_name_the_option(kwargs, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        Sgd(**kwargs)


def test_bad_adam_options_name_the_option() -> None:
    with pytest.raises(ConfigError, match=r"betas\[1\]"):
        Adam(betas=(0.9, 1.0))
    with pytest.raises(ConfigError, match="local.optimizer.eps"):
        Adam(eps=0.0)


class _PlainOnly:
    name = "udp-like"
    local_optimizers = frozenset({"sgd"})
    local_optimizer_reason = "the sensitivity bound assumes a plain gradient step"


def test_algorithm_refusal_names_algorithm_option_and_reason() -> None:
    check_local_optimizer(_PlainOnly(), LocalTraining(lr=0.1))  # plain SGD passes
    with pytest.raises(ConfigError, match=r"udp-like: `local.optimizer` must be sgd .*Found adam .*plain gradient"):
        check_local_optimizer(_PlainOnly(), LocalTraining(lr=0.1, optimizer=Adam()))
    with pytest.raises(ConfigError, match="momentum 0.9"):
        check_local_optimizer(_PlainOnly(), LocalTraining(lr=0.1, optimizer=Sgd(momentum=0.9)))
    check_local_optimizer(object(), LocalTraining(lr=0.1, optimizer=Adam()))  # no rule: any optimizer


def test_config_block_builds_the_optimizer() -> None:
    from dpfl.config import parse_config

    cfg = parse_config({"local": {"lr": 0.05, "optimizer": {"name": "adam", "betas": [0.9, 0.99]}}})
    local = LocalTraining.from_config(cfg.local)
    assert local.optimizer == Adam(betas=(0.9, 0.99)) and local.lr == 0.05
    assert LocalTraining.from_config(parse_config({}).local).optimizer == Sgd()
    momentum = parse_config({"local": {"optimizer": {"momentum": 0.9}}}).local  # name defaults to sgd
    assert LocalTraining.from_config(momentum).optimizer == Sgd(momentum=0.9)


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        ({"name": "adam", "momentum": 0.9}, "unknown key `local.optimizer.adam.momentum`"),
        ({"name": "sgd", "betas": [0.9, 0.9]}, "unknown key `local.optimizer.sgd.betas`"),
        ({"name": "rmsprop"}, "'rmsprop'"),
        ({"name": "adam", "betas": [0.9, 1.0]}, "local.optimizer.adam.betas.1"),
        ({"name": "sgd", "momentum": True}, "local.optimizer.sgd.momentum"),
    ],
)
def test_config_block_is_strict(block: dict, needle: str) -> None:
    from dpfl.config import parse_config

    with pytest.raises(ConfigError, match=re.escape(needle)):
        parse_config({"local": {"optimizer": block}})


def test_run_id_unchanged_by_the_default_optimizer() -> None:
    """Configs that name no optimizer keep the run ids they had before the block existed
    (stored runs and recipe stores are found again); naming plain SGD is the same run."""
    from dpfl.config import parse_config, run_id

    plain = parse_config({"local": {"lr": 0.3, "batch_size": None}})
    assert run_id(plain) == "3648e6c63cbc"  # computed before `local.optimizer` was added
    explicit = parse_config({"local": {"lr": 0.3, "batch_size": None, "optimizer": {"name": "sgd"}}})
    assert run_id(explicit) == run_id(plain)
    adam = parse_config({"local": {"lr": 0.3, "batch_size": None, "optimizer": {"name": "adam"}}})
    assert run_id(adam) != run_id(plain)
    assert parse_config(adam.model_dump(mode="json")) == adam
