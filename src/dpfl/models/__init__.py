"""Models of the seed papers, written with standard ``torch.nn`` layers only (no torchvision).

``build_model(name, input_shape, num_classes, generator=..., **options)`` returns a
:class:`SequentialModel` — an ``nn.Sequential`` carrying ``loss_kind``, ``l2_penalty`` and
``penalized_params`` — with every parameter drawn from the given ``torch.Generator``. Models hold
no buffers and work with ``torch.func.functional_call`` and with ``torch.func.vmap`` over
parameters stacked along a leading cohort dimension. ``per_sample_loss`` turns outputs into one
loss per sample according to ``loss_kind`` (or a user's :data:`LossFn`). :func:`check_model`
refuses what dpfl cannot train privately in any model, e.g. a user's: BatchNorm (use GroupNorm)
and persistent buffers.

This package imports nothing from dpfl beyond :mod:`dpfl.errors`.
"""

from dpfl.models.base import (
    LOSS_KINDS,
    LossKind,
    SequentialModel,
    count_parameters,
    init_parameters,
)
from dpfl.models.cnn import CNN2_VARIANTS
from dpfl.models.losses import (
    LossFn,
    check_loss,
    cross_entropy_per_sample,
    hinge_per_sample,
    per_sample_loss,
)
from dpfl.models.registry import MODELS, build_model, model_options
from dpfl.models.resnet import NORMS, BasicBlock
from dpfl.models.validate import check_model, model_problems

__all__ = [
    "CNN2_VARIANTS",
    "LOSS_KINDS",
    "MODELS",
    "NORMS",
    "BasicBlock",
    "LossFn",
    "LossKind",
    "SequentialModel",
    "build_model",
    "check_loss",
    "check_model",
    "count_parameters",
    "cross_entropy_per_sample",
    "hinge_per_sample",
    "init_parameters",
    "model_options",
    "model_problems",
    "per_sample_loss",
]
