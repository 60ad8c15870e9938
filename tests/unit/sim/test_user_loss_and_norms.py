"""A user's per-sample loss and user models with GroupNorm / LayerNorm in both engines; models
dpfl cannot train privately (BatchNorm, buffers) are refused when the problem is built."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from sim_data import random_client_data
from torch import nn

from dpfl.client.local import LocalTraining
from dpfl.errors import ConfigError
from dpfl.models import build_model, init_parameters, per_sample_loss
from dpfl.rng import SeedSequence
from dpfl.sim.base import ClientData, LocalProblem
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine

SMOOTHING = 0.1


def label_smoothed_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(1 − a)·(−log p_y) + a·mean_c(−log p_c), per sample, any leading dimensions."""
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    return (1 - SMOOTHING) * nll - SMOOTHING * logp.mean(-1)


def _data(sizes: list[int], shape: tuple[int, ...], classes: int = 4) -> ClientData:
    return random_client_data(sizes, shape, classes, seed=2)


def _mlp_problem(local: LocalTraining, loss=label_smoothed_ce) -> LocalProblem:
    model = build_model("mlp", (1, 6, 6), 4, generator=torch.Generator().manual_seed(3), hidden=12)
    return LocalProblem(model, local, loss_kind=loss)


def test_user_loss_equals_torch_label_smoothing() -> None:
    """The hand-written loss against torch's own label smoothing, on [K, B, C] outputs."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 4, generator=gen)
    y = torch.randint(0, 4, (3, 5), generator=gen)
    got = per_sample_loss(label_smoothed_ce, logits, y)
    expected = F.cross_entropy(logits.reshape(15, 4), y.reshape(15), label_smoothing=SMOOTHING,
                               reduction="none").reshape(3, 5)
    assert torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("clip", [None, 0.2])
def test_user_loss_vectorized_matches_sequential(fused: bool, clip: float | None) -> None:
    data = _data([7, 15, 3], (1, 6, 6))
    problem = _mlp_problem(LocalTraining(lr=0.1, epochs=2, batch_size=4, per_sample_clip=clip))
    init = problem.layout.flatten(problem.module)
    seeds = SeedSequence(5)
    vec = VectorizedEngine(problem, data, seeds, fused=fused).train(init, [0, 1, 2], 0)
    seq = SequentialEngine(problem, data, seeds).train(init, [0, 1, 2], 0)
    assert (vec.params - seq.params).abs().max().item() <= 1e-5
    assert (vec.params - init).abs().max().item() > 1e-3


@pytest.mark.parametrize("engine_cls", [VectorizedEngine, SequentialEngine])
def test_user_loss_one_step_is_the_hand_gradient_step(engine_cls) -> None:
    """One full-batch step on the user's loss equals w − η∇ of torch's label-smoothed CE."""
    data = _data([9], (1, 6, 6))
    problem = _mlp_problem(LocalTraining(lr=0.3, batch_size=None))
    init = problem.layout.flatten(problem.module)
    got = engine_cls(problem, data, SeedSequence(0)).train(init, [0], 0)
    module = problem.module
    idx = data.client_indices[0]
    loss = F.cross_entropy(module(data.x[idx]), data.y[idx], label_smoothing=SMOOTHING)
    grads = torch.autograd.grad(loss, list(module.parameters()))
    expected = init - 0.3 * torch.cat([g.reshape(-1) for g in grads])
    assert torch.allclose(got.params[0], expected, atol=1e-6)
    assert got.train_loss[0].item() == pytest.approx(loss.item(), rel=1e-5)


def test_user_loss_that_reduces_is_refused_naming_it() -> None:
    def mean_ce(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    data = _data([4, 4], (1, 6, 6))
    problem = _mlp_problem(LocalTraining(lr=0.1, batch_size=2), loss=mean_ce)
    init = problem.layout.flatten(problem.module)
    with pytest.raises(ConfigError, match=r"'.*mean_ce' must return one loss per sample, shape \(2, 2\)"):
        VectorizedEngine(problem, data, SeedSequence(0)).train(init, [0, 1], 0)
    with pytest.raises(ConfigError, match="loss_kind"):
        _mlp_problem(LocalTraining(lr=0.1), loss="crossentropy")
    with pytest.raises(ConfigError, match="Found int"):
        _mlp_problem(LocalTraining(lr=0.1), loss=3)


def _conv_net(norm: str) -> nn.Sequential:
    make = {"group": lambda: nn.GroupNorm(2, 4), "layer": lambda: nn.LayerNorm([4, 6, 6])}[norm]
    model = nn.Sequential(OrderedDict(
        conv=nn.Conv2d(1, 4, 3, padding=1),
        norm=make(),
        relu=nn.ReLU(),
        pool=nn.MaxPool2d(2),
        flatten=nn.Flatten(),
        fc=nn.Linear(4 * 3 * 3, 4),
    ))
    return init_parameters(model, torch.Generator().manual_seed(7))


@pytest.mark.parametrize("norm", ["group", "layer"])
@pytest.mark.parametrize("clip", [None, 0.5])
def test_user_conv_net_with_groupnorm_or_layernorm_matches_sequential(norm: str, clip: float | None) -> None:
    data = _data([5, 11, 2], (1, 6, 6))
    problem = LocalProblem(_conv_net(norm), LocalTraining(lr=0.1, epochs=2, batch_size=4, per_sample_clip=clip))
    init = problem.layout.flatten(problem.module)
    seeds = SeedSequence(3)
    vec = VectorizedEngine(problem, data, seeds).train(init, [0, 1, 2], 0).params
    seq = SequentialEngine(problem, data, seeds).train(init, [0, 1, 2], 0).params
    assert (vec - seq).abs().max().item() <= 1e-5
    assert (vec - init).abs().max().item() > 1e-3


def test_batchnorm_model_is_refused_naming_every_layer_and_the_fix() -> None:
    model = nn.Sequential(OrderedDict(
        conv=nn.Conv2d(1, 4, 3), bn=nn.BatchNorm2d(4), relu=nn.ReLU(),
        block=nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)), flatten=nn.Flatten(),
        fc=nn.Linear(4, 2), head_norm=nn.BatchNorm1d(2),
    ))
    with pytest.raises(ConfigError) as err:
        LocalProblem(model, LocalTraining(lr=0.1))
    msg = str(err.value)
    assert "3 layers" in msg
    for where in ("`bn` (BatchNorm2d)", "`block.1` (BatchNorm2d)", "`head_norm` (BatchNorm1d)"):
        assert where in msg
    assert "nn.GroupNorm(4, 4)" in msg and "record-level DP" in msg
    assert "\n" not in msg  # one line on the command line


def test_instance_norm_running_stats_and_buffers_are_refused_constants_allowed() -> None:
    class WithBuffer(nn.Module):
        def __init__(self, persistent: bool) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.register_buffer("scale", torch.ones(2), persistent=persistent)

        def forward(self, x):
            return self.lin(x) * self.scale

    with pytest.raises(ConfigError,
                       match=r"`0` \(InstanceNorm2d\): track_running_stats=True.*Fix: track_running_stats=False"):
        LocalProblem(nn.Sequential(nn.InstanceNorm2d(3, track_running_stats=True)), LocalTraining(lr=0.1))
    LocalProblem(nn.Sequential(nn.InstanceNorm2d(3)), LocalTraining(lr=0.1))  # per-sample, no buffers
    with pytest.raises(ConfigError, match=r"holds buffer\(s\) \['scale'\]"):
        LocalProblem(WithBuffer(persistent=True), LocalTraining(lr=0.1))
    LocalProblem(WithBuffer(persistent=False), LocalTraining(lr=0.1))  # a constant


def test_every_registry_model_passes_the_validator() -> None:
    from dpfl.models import MODELS, check_model

    shapes = {"svm": ((5,), 2), "logistic": ((5,), 3), "mlp": ((1, 8, 8), 3)}
    for name in MODELS:
        shape, classes = shapes.get(name, ((3, 32, 32), 10))
        with torch.device("meta"):
            model = MODELS[name](shape, classes)
        check_model(model)


def test_suggested_groupnorm_divides_the_channels() -> None:
    from dpfl.models.validate import model_problems

    (line,) = model_problems(nn.Sequential(nn.BatchNorm2d(48)))
    assert "nn.GroupNorm(24, 48)" in line  # 32 does not divide 48; 24 is the largest that does, <= 32
    (line,) = model_problems(nn.Sequential(nn.BatchNorm2d(64)))
    assert "nn.GroupNorm(32, 64)" in line
