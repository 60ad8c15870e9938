"""cnn-mnist-small: the PyTorch-examples MNIST ``Net`` — layer shapes and its 21,840 parameters."""

from __future__ import annotations

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.models import build_model, count_parameters
from dpfl.models.cnn_small import CNN_MNIST_SMALL_PARAMETERS

MNIST = (1, 28, 28)


def _model(shape: tuple[int, ...] = MNIST, classes: int = 10) -> torch.nn.Module:
    return build_model("cnn-mnist-small", shape, classes, generator=torch.Generator().manual_seed(0))


def test_parameter_count_is_the_published_21840() -> None:
    # conv5x5 1->10 (28 -> 24, pool -> 12), conv5x5 10->20 (12 -> 8, pool -> 4), fc 320 -> 50 -> 10
    by_hand = (25 * 1 * 10 + 10) + (25 * 10 * 20 + 20) + (4 * 4 * 20 * 50 + 50) + (50 * 10 + 10)
    assert count_parameters(_model()) == by_hand == CNN_MNIST_SMALL_PARAMETERS == 21_840


def test_layer_shapes_follow_the_pytorch_example() -> None:
    shapes = {name: tuple(p.shape) for name, p in _model().named_parameters()}
    assert shapes == {
        "conv1.weight": (10, 1, 5, 5), "conv1.bias": (10,),
        "conv2.weight": (20, 10, 5, 5), "conv2.bias": (20,),
        "fc1.weight": (50, 320), "fc1.bias": (50,),
        "fc2.weight": (10, 50), "fc2.bias": (10,),
    }


def test_other_class_counts_change_only_the_last_layer() -> None:
    assert count_parameters(_model(classes=62)) == 21_840 - 510 + (50 * 62 + 62)


def test_logits_shape_and_seeded_initialization() -> None:
    x = torch.randn(3, *MNIST, generator=torch.Generator().manual_seed(1))
    a, b = _model(), _model()
    assert a(x).shape == (3, 10)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_too_small_an_input_is_refused_naming_the_shape() -> None:
    with pytest.raises(ConfigError, match=r"\(1, 12, 12\)"):
        _model((1, 12, 12))
    with pytest.raises(ConfigError, match="cnn-mnist-small"):
        _model((784,))
