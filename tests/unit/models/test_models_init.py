"""init_parameters: PyTorch's default distributions, drawn only from the given generator."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

from dpfl.errors import ConfigError
from dpfl.models import MODELS, SequentialModel, init_parameters

LIGHT = [name for name in MODELS if name != "resnet18"]

Make = Callable[..., SequentialModel]


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("name", LIGHT)
def test_same_seed_same_parameters_different_seed_different(name: str, make: Make) -> None:
    assert _same(make(name, 7), make(name, 7))
    assert not _same(make(name, 7), make(name, 8))


def test_resnet18_seeds(resnet_copies: list[SequentialModel], make: Make) -> None:
    again = make("resnet18", 0)
    assert _same(again, resnet_copies[0])
    assert not _same(resnet_copies[0], resnet_copies[1])
    # GroupNorm affine parameters are deterministic: weight 1, bias 0.
    assert torch.equal(again.get_parameter("stem_norm.weight"), torch.ones(64))
    assert torch.equal(again.get_parameter("stem_norm.bias"), torch.zeros(64))


def test_reinitializes_in_place_from_generator_state(make: Make) -> None:
    model = make("mlp", 3)
    init_parameters(model, torch.Generator().manual_seed(3))
    assert _same(model, make("mlp", 3))


@pytest.mark.parametrize(
    "layer",
    [nn.Linear(20, 7), nn.Conv2d(3, 8, kernel_size=5, padding=4), nn.Conv2d(4, 6, 3, groups=2)],
)
def test_matches_torch_default_initializers(layer: nn.Module) -> None:
    # Independent check: torch's own initializers, fed the same generator stream.
    expected = {k: v.clone() for k, v in layer.state_dict().items()}
    gen = torch.Generator().manual_seed(11)
    weight = expected["weight"]
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=gen)
    fan_in, _ = nn.init._calculate_fan_in_and_fan_out(weight)
    bound = 1 / math.sqrt(fan_in)
    nn.init.uniform_(expected["bias"], -bound, bound, generator=gen)

    init_parameters(layer, torch.Generator().manual_seed(11))
    for key, value in layer.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_bounds_of_mlp_first_layer(make: Make) -> None:
    model = make("mlp")
    bound = 1 / math.sqrt(784)
    weight = model.get_parameter("fc1.weight")
    assert weight.abs().max() <= bound
    assert weight.abs().max() > 0.9 * bound  # 200k draws fill the interval


def test_unsupported_layer_and_bad_generator() -> None:
    with pytest.raises(ConfigError, match="BatchNorm2d"):
        init_parameters(nn.Sequential(nn.BatchNorm2d(3)), torch.Generator())
    with pytest.raises(ConfigError, match="generator"):
        init_parameters(nn.Linear(2, 2), 5)  # type: ignore[arg-type]
