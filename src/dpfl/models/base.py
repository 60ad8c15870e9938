"""The model container every dpfl model is, and seeded parameter initialization.

Every model is a :class:`SequentialModel`: an ``nn.Sequential`` of standard ``torch.nn`` layers
that also carries what the engines need to train it — which per-sample loss to use and which
parameters an L2 penalty applies to. The vectorized engine walks the module tree and swaps
``nn.Linear``/``nn.Conv2d`` for cohort-batched versions, so models keep to standard layers and
hold no buffers (nothing mutates in ``forward``).

:func:`init_parameters` re-draws every parameter with PyTorch's default distributions from an
explicit ``torch.Generator``; nothing here reads the global RNG.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Literal

import torch
from torch import nn

from dpfl.errors import ConfigError

LossKind = Literal["cross_entropy", "hinge"]
LOSS_KINDS: tuple[str, ...] = ("cross_entropy", "hinge")


class SequentialModel(nn.Sequential):
    """An ``nn.Sequential`` that states how it is trained.

    Attributes:
        loss_kind: the per-sample loss the engine applies to the outputs (see
            :func:`dpfl.models.per_sample_loss`): ``"cross_entropy"`` for classifiers that return
            logits ``[B, num_classes]``, ``"hinge"`` for the linear SVM that returns scores ``[B]``.
        l2_penalty: coefficient ``κ`` of a ``(κ/2)‖θ‖²`` term the engine adds to the local
            objective, summed over the parameters named in ``penalized_params``; ``0.0`` means none.
        penalized_params: names (as in ``named_parameters()``) the penalty applies to.

    Args:
        layers: the named layers, in order.
        loss_kind: see Attributes.
        l2_penalty: see Attributes.
        penalized_params: see Attributes.
    """

    loss_kind: LossKind
    l2_penalty: float
    penalized_params: tuple[str, ...]

    def __init__(
        self,
        layers: OrderedDict[str, nn.Module],
        *,
        loss_kind: LossKind = "cross_entropy",
        l2_penalty: float = 0.0,
        penalized_params: tuple[str, ...] = (),
    ) -> None:
        super().__init__(layers)
        if loss_kind not in LOSS_KINDS:
            raise ConfigError(
                f"`loss_kind` must be one of {list(LOSS_KINDS)}. Found {loss_kind!r}."
            )
        names = {name for name, _ in self.named_parameters()}
        missing = [name for name in penalized_params if name not in names]
        if missing:
            raise ConfigError(
                f"`penalized_params` must name parameters of the model ({sorted(names)}). "
                f"Found unknown {missing}."
            )
        self.loss_kind = loss_kind
        self.l2_penalty = float(l2_penalty)
        self.penalized_params = tuple(penalized_params)

    def extra_repr(self) -> str:
        text = f"loss_kind={self.loss_kind!r}"
        if self.penalized_params:
            text += f", l2_penalty={self.l2_penalty}, penalized_params={self.penalized_params}"
        return text


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


def _fan_in(weight: torch.Tensor) -> int:
    # Same rule as torch.nn.init._calculate_fan_in_and_fan_out: in-features times receptive field.
    receptive_field = math.prod(weight.shape[2:]) if weight.dim() > 2 else 1
    return weight.shape[1] * receptive_field


def _uniform_(tensor: torch.Tensor, bound: float, generator: torch.Generator) -> None:
    tensor.uniform_(-bound, bound, generator=generator)


_SUPPORTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.GroupNorm, nn.LayerNorm)


@torch.no_grad()
def init_parameters(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """Re-initialize every parameter of ``model`` in place, drawing only from ``generator``.

    The distributions are PyTorch's defaults (``reset_parameters`` of each layer):

    * ``nn.Linear`` / ``nn.ConvNd`` weight: ``kaiming_uniform_(a=√5)``, i.e.
      ``U(−b, b)`` with ``b = gain·√(3/fan_in) = 1/√fan_in`` (``gain = √(2/(1+a²))``);
      bias: ``U(−1/√fan_in, 1/√fan_in)``; ``fan_in`` = input channels per group × kernel size.
    * ``nn.GroupNorm`` / ``nn.LayerNorm``: weight 1, bias 0 (no randomness).

    Modules are visited in ``model.modules()`` order and, within a module, weight before bias, so
    the same generator state always yields the same parameters.

    Args:
        model: a model built from the supported layers (Linear, Conv1d/2d/3d, GroupNorm,
            LayerNorm) and parameter-free modules.
        generator: the only source of randomness.

    Returns:
        ``model`` itself, for chaining.

    Raises:
        ConfigError: ``generator`` is not a ``torch.Generator``, or a module holds parameters of a
            type whose default initialization this function does not know.
    """
    if not isinstance(generator, torch.Generator):
        raise ConfigError(
            f"`generator` must be a torch.Generator. Found {type(generator).__name__}."
        )
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if not own:
            continue
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            weight = module.weight
            bound = 1.0 / math.sqrt(_fan_in(weight)) if weight.numel() > 0 else 0.0
            _uniform_(weight, bound, generator)
            if module.bias is not None:
                _uniform_(module.bias, bound, generator)
        elif isinstance(module, (nn.GroupNorm, nn.LayerNorm)):
            if module.weight is not None:
                module.weight.fill_(1.0)
            if module.bias is not None:
                module.bias.zero_()
        else:
            supported = ", ".join(t.__name__ for t in _SUPPORTED)
            raise ConfigError(
                f"init_parameters cannot initialize a {type(module).__name__} (it holds parameters "
                f"directly). Supported parameterized layers: {supported}."
            )
    return model
