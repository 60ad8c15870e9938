"""The model registry: a name, an input shape, a class count and options → an initialized model.

Layers are constructed on the ``meta`` device (so their default ``reset_parameters`` draws
nothing from the global RNG), then allocated on the CPU and initialized by
:func:`dpfl.models.init_parameters` from the caller's generator.

Imports nothing from dpfl beyond :mod:`dpfl.errors` and :mod:`dpfl.models`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch

from dpfl.errors import ConfigError
from dpfl.models._validate import positive_int
from dpfl.models.base import SequentialModel, init_parameters
from dpfl.models.cnn import build_cnn2, build_cnn_000, build_vgg_small
from dpfl.models.cnn_small import build_cnn_mnist_small
from dpfl.models.dense import build_logistic, build_mlp, build_svm
from dpfl.models.resnet import build_resnet18

ModelBuilder = Callable[..., SequentialModel]

MODELS: Mapping[str, ModelBuilder] = MappingProxyType(
    {
        "svm": build_svm,
        "logistic": build_logistic,
        "mlp": build_mlp,
        "cnn-000": build_cnn_000,
        "cnn2": build_cnn2,
        "cnn-mnist-small": build_cnn_mnist_small,
        "vgg-small": build_vgg_small,
        "resnet18": build_resnet18,
    }
)
"""Model name → builder ``(input_shape, num_classes, **options) -> SequentialModel``."""


def model_options(name: str) -> dict[str, Any]:
    """The options model ``name`` accepts, with their defaults.

    Raises:
        ConfigError: unknown ``name`` (the message lists the valid names).
    """
    builder = _builder(name)
    parameters = inspect.signature(builder).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _builder(name: str) -> ModelBuilder:
    if name not in MODELS:
        raise ConfigError(f"`model` must be one of {sorted(MODELS)}. Found {name!r}.")
    return MODELS[name]


def _input_shape(value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(
            f"`input_shape` must be a sequence of positive integers. Found {value!r}."
        )
    shape = tuple(value)  # type: ignore[call-overload]
    if not shape or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
        raise ConfigError(
            f"`input_shape` must be a non-empty sequence of positive integers. Found {value!r}."
        )
    return shape


def build_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    generator: torch.Generator,
    **options: Any,
) -> SequentialModel:
    """Build model ``name`` with every parameter drawn from ``generator``.

    Args:
        name: one of ``MODELS``: ``svm``, ``logistic``, ``mlp``, ``cnn-000``, ``cnn2``,
            ``vgg-small``, ``resnet18``.
        input_shape: shape of one sample without the batch dimension, e.g. ``(1, 28, 28)``
            (MNIST), ``(3, 32, 32)`` (CIFAR-10), ``(d,)`` (tabular).
        num_classes: number of classes (2 for ``svm``).
        generator: the only source of randomness for the initialization (e.g.
            ``dpfl.rng.SeedSequence(seed).generator(0, 0, "init")``). Required: there is no
            silent default seed.
        **options: model-specific options (see :func:`model_options`): ``svm``: ``kappa``,
            ``bias``; ``mlp``: ``hidden``; ``cnn-000``: ``channels``; ``cnn2``: ``variant``;
            ``vgg-small``: ``hidden``; ``resnet18``: ``norm``, ``groups``.

    Returns:
        A CPU float32 :class:`SequentialModel` in training mode, without buffers, taking
        ``[B, *input_shape]`` and returning logits ``[B, num_classes]`` (``svm``: scores ``[B]``).

    Raises:
        ConfigError: unknown name or option, or an invalid value.

    >>> import torch
    >>> model = build_model("mlp", (1, 28, 28), 10, generator=torch.Generator().manual_seed(0))
    >>> model(torch.zeros(4, 1, 28, 28)).shape
    torch.Size([4, 10])
    """
    builder = _builder(name)
    shape = _input_shape(input_shape)
    num_classes = positive_int("num_classes", num_classes)
    if num_classes < 2:
        raise ConfigError(f"`num_classes` must be at least 2. Found {num_classes}.")
    if not isinstance(generator, torch.Generator):
        raise ConfigError(
            f"`generator` must be a torch.Generator (e.g. from dpfl.rng.SeedSequence). "
            f"Found {type(generator).__name__}."
        )
    accepted = model_options(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"model {name!r} does not take option(s) {unknown}. "
            f"Its options are {sorted(accepted) if accepted else 'none'}."
        )
    with torch.device("meta"):
        model = builder(shape, num_classes, **options)
    # what ``model.to_empty(device="cpu")`` does, without its ``empty_like`` of meta tensors: that
    # goes through torch's reference implementations, whose first use imports sympy (0.35 s of
    # every process that builds a model, a SuperNode's worker included)
    model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu"))
    init_parameters(model, generator)
    return model
