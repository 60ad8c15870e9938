"""Fully connected models: the linear SVM of 000, multinomial logistic regression, the MLP.

Each flattens its input itself (``nn.Flatten`` over the trailing ``len(input_shape)``
dimensions, so images ``[B, 1, 28, 28]`` and tabular rows ``[B, d]`` both work, and so does an
extra leading cohort dimension once the engine batches the Linear layers).

Builders construct the layers only; :func:`dpfl.models.build_model` allocates and initializes the
parameters from an explicit generator. Imports nothing from dpfl beyond :mod:`dpfl.errors` and
:mod:`dpfl.models`.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from torch import nn

from dpfl.errors import ConfigError
from dpfl.models._validate import boolean, non_negative_float, positive_int
from dpfl.models.base import SequentialModel


def _flatten(input_shape: tuple[int, ...]) -> nn.Flatten:
    # Flatten exactly the feature dimensions, whatever leading (batch, cohort) dimensions exist.
    return nn.Flatten(start_dim=-len(input_shape), end_dim=-1)


def build_svm(
    input_shape: tuple[int, ...], num_classes: int, *, kappa: float = 0.0, bias: bool = False
) -> SequentialModel:
    r"""Linear SVM of 000 (``000_3304bf6f36c753f8.txt``, §5, eq. 32).

    Eq. 32: ``F(w) = (κ/2)‖w‖²₂ + max{y_m − wᵀD_{i,m}, 0}`` with ``y_m ∈ {+1, −1}``.

    * Output: one score ``s = wᵀx`` per sample, shape ``[B]`` (the trailing size-1 dimension
      is flattened away by a final ``nn.Flatten(-2, -1)``).
    * Loss: ``loss_kind = "hinge"``, i.e. ``max(0, 1 − y·s)`` (:func:`dpfl.models.per_sample_loss`).
      Eq. 32 as printed, ``max{y − s, 0}``, is not a classification loss — for ``y = −1`` it
      vanishes whenever ``s ≥ −1``, so ``s → +∞`` would zero it on every sample — so dpfl reads it
      as the standard hinge loss ``max{1 − y·wᵀx, 0}``, which agrees with the printed form for
      ``y = +1``.
    * Regularizer: ``l2_penalty = κ`` applies to the weight only (``penalized_params =
      ("linear.weight",)``), as eq. 32 penalizes ``‖w‖²``; the engine adds ``(κ/2)‖w‖²``.
      The paper requires ``κ > 0`` but states no value: the default ``0.0`` means no penalty and
      a paper recipe must set ``kappa`` explicitly.
    * Bias: eq. 32 has none (``s = wᵀx``), so ``bias=False`` by default; with ``bias=True`` the
      bias is left unpenalized, the usual SVM convention.

    Args:
        input_shape: feature shape, e.g. ``(d,)`` for IPUMS-US rows.
        num_classes: must be 2 (the SVM is a binary classifier; targets are ``{0, 1}``).
        kappa: ``κ ≥ 0``.
        bias: add an unpenalized bias to the score.

    Returns:
        The model (parameters not yet initialized).
    """
    if num_classes != 2:
        raise ConfigError(
            f"model 'svm' is a binary classifier: `num_classes` must be 2. Found {num_classes!r}."
        )
    kappa = non_negative_float("kappa", kappa)
    bias = boolean("bias", bias)
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        flatten=_flatten(input_shape),
        linear=nn.Linear(math.prod(input_shape), 1, bias=bias),
        score=nn.Flatten(start_dim=-2, end_dim=-1),
    )
    return SequentialModel(
        layers, loss_kind="hinge", l2_penalty=kappa, penalized_params=("linear.weight",)
    )


def build_logistic(input_shape: tuple[int, ...], num_classes: int) -> SequentialModel:
    """Multinomial logistic regression: one ``nn.Linear`` to ``num_classes`` logits.

    Args:
        input_shape: feature shape (flattened).
        num_classes: number of classes.

    Returns:
        The model (parameters not yet initialized); outputs logits ``[B, num_classes]``.
    """
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        flatten=_flatten(input_shape),
        linear=nn.Linear(math.prod(input_shape), num_classes),
    )
    return SequentialModel(layers)


def build_mlp(
    input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 256
) -> SequentialModel:
    """MLP with one ReLU hidden layer: 784-256-10 on MNIST by default.

    000 §5: "MLP is trained using SGD consisting of single hidden layer with 256 hidden units,
    where ReLU units and softmax of 10 classes ... are applied" (``000_3304bf6f36c753f8.txt``);
    003 §VI uses the same network (``003_c42e3eb46a620b42.txt``: "a MLP network with a single
    hidden layer containing 256 hidden units"). 002 §VI says only "MLP"; dpfl uses the same one.
    The softmax is part of the loss: the model returns logits.

    Parameters on MNIST: 784·256 + 256 + 256·10 + 10 = 203,530.

    Args:
        input_shape: e.g. ``(1, 28, 28)``.
        num_classes: number of classes.
        hidden: width of the hidden layer.

    Returns:
        The model (parameters not yet initialized).
    """
    hidden = positive_int("hidden", hidden)
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        flatten=_flatten(input_shape),
        fc1=nn.Linear(math.prod(input_shape), hidden),
        relu=nn.ReLU(),
        fc2=nn.Linear(hidden, num_classes),
    )
    return SequentialModel(layers)
