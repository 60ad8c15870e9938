"""Shared fixtures for the model tests: the typical input of every registered model."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from dpfl.models import SequentialModel, build_model

MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)
TABULAR = (58,)  # IPUMS-US has 58 attributes (000 §5).

# name -> (input_shape, num_classes, expected output shape for a batch of 2)
TYPICAL: dict[str, tuple[tuple[int, ...], int, tuple[int, ...]]] = {
    "svm": (TABULAR, 2, (2,)),
    "logistic": (TABULAR, 3, (2, 3)),
    "mlp": (MNIST, 10, (2, 10)),
    "cnn-000": (CIFAR, 10, (2, 10)),
    "cnn2": (MNIST, 10, (2, 10)),
    "cnn-mnist-small": (MNIST, 10, (2, 10)),
    "vgg-small": (CIFAR, 10, (2, 10)),
    "resnet18": (CIFAR, 10, (2, 10)),
}


def _make(name: str, seed: int = 0, **options: object) -> SequentialModel:
    shape, classes, _ = TYPICAL[name]
    return build_model(
        name, shape, classes, generator=torch.Generator().manual_seed(seed), **options
    )


def _batch(name: str, size: int = 2, seed: int = 123) -> torch.Tensor:
    shape, _, _ = TYPICAL[name]
    return torch.randn(size, *shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="session")
def typical() -> dict[str, tuple[tuple[int, ...], int, tuple[int, ...]]]:
    """name -> (input_shape, num_classes, output shape for a batch of 2)."""
    return TYPICAL


@pytest.fixture(scope="session")
def make() -> Callable[..., SequentialModel]:
    """``make(name, seed=0, **options)``: the model for its typical input, seeded."""
    return _make


@pytest.fixture(scope="session")
def batch() -> Callable[..., torch.Tensor]:
    """``batch(name, size=2, seed=123)``: a seeded random batch of the model's typical input."""
    return _batch


@pytest.fixture(scope="session")
def resnet_copies() -> list[SequentialModel]:
    """Three ResNet-18s from different seeds, built once (they are the slow ones)."""
    return [_make("resnet18", seed) for seed in range(3)]
