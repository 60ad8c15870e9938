"""Every model works with torch.func.functional_call and vmap over stacked client parameters."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap

from dpfl.models import MODELS, SequentialModel

LIGHT = [name for name in MODELS if name != "resnet18"]

Make = Callable[..., SequentialModel]
Batch = Callable[..., torch.Tensor]


def _stacked_forward(models: list[SequentialModel], xs: torch.Tensor) -> torch.Tensor:
    params, buffers = stack_module_state(models)  # type: ignore[arg-type]
    skeleton = copy.deepcopy(models[0]).to("meta")

    def forward(
        p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
        return functional_call(skeleton, (p, b), (x,))

    return vmap(forward)(params, buffers, xs)


def _check(models: list[SequentialModel], name: str, batch: Batch) -> None:
    x = batch(name)
    params = {k: v.detach().clone() for k, v in models[0].named_parameters()}
    with torch.no_grad():
        assert torch.allclose(functional_call(models[0], params, (x,)), models[0](x), atol=1e-6)
        xs = torch.stack([batch(name, seed=s) for s in range(len(models))])
        stacked = _stacked_forward(models, xs)
        separate = torch.stack([m(xs[k]) for k, m in enumerate(models)])
    assert stacked.shape == separate.shape
    assert torch.allclose(stacked, separate, atol=1e-5)


@pytest.mark.parametrize("name", LIGHT)
def test_functional_call_and_vmap(name: str, make: Make, batch: Batch) -> None:
    _check([make(name, seed) for seed in range(3)], name, batch)


def test_functional_call_and_vmap_cnn2_mcmahan(make: Make, batch: Batch) -> None:
    _check([make("cnn2", seed, variant="mcmahan") for seed in range(3)], "cnn2", batch)


def test_functional_call_and_vmap_resnet18(
    resnet_copies: list[SequentialModel], batch: Batch
) -> None:
    _check(resnet_copies, "resnet18", batch)


def test_grad_through_vmap(make: Make, batch: Batch) -> None:
    # The shape of the engine's inner loop: per-client gradients of a per-client loss.
    models = [make("cnn2", seed) for seed in range(2)]
    params, _ = stack_module_state(models)  # type: ignore[arg-type]
    skeleton = copy.deepcopy(models[0]).to("meta")
    xs = torch.stack([batch("cnn2", seed=s) for s in range(2)])
    ys = torch.tensor([[1, 2], [3, 4]])

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(functional_call(skeleton, p, (x,)), y)

    grads = vmap(torch.func.grad(loss))(params, xs, ys)
    for k, model in enumerate(models):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(xs[k]), ys[k]).backward()
        for pname, param in model.named_parameters():
            assert param.grad is not None
            assert torch.allclose(grads[pname][k], param.grad, atol=1e-5)
