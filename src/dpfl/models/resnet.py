"""ResNet-18 for 32x32 images (CIFAR-10), with GroupNorm instead of BatchNorm.

Used by 004 §6 (``004_32e0c8f847edac12.txt``: "ResNet-18 [9]", "11.1M" parameters).
Layout: the CIFAR variant of He et al. (2016) — a 3x3 stride-1 stem with no max-pool, four stages
of two basic blocks (64, 128, 256, 512 channels; stride 2 at the first block of stages 2–4, with
a 1x1 projection shortcut), global average pool, linear classifier.

Why not BatchNorm: its running statistics are buffers mutated in ``forward`` (hidden state that
``functional_call``/``vmap`` over a cohort cannot carry), and its per-batch statistics mix
samples, so one sample's gradient depends on the others — per-sample clipping then no longer
bounds a single sample's influence. GroupNorm normalizes each sample on its own and has no
buffers; its affine parameters match BatchNorm's one-for-one, so the parameter count is the
same as the usual BatchNorm ResNet-18 (11,173,962 for 10 classes).

Builders construct the layers only; :func:`dpfl.models.build_model` allocates and initializes the
parameters from an explicit generator. Imports nothing from dpfl beyond :mod:`dpfl.errors` and
:mod:`dpfl.models`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from torch import Tensor, nn

from dpfl.errors import ConfigError
from dpfl.models._validate import choice, image_shape, positive_int
from dpfl.models.base import SequentialModel

NORMS: tuple[str, ...] = ("group", "layer", "none")
RESNET18_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)

NormFactory = Callable[[int], nn.Module]


class BasicBlock(nn.Module):
    """``relu(residual(x) + shortcut(x))`` with ``residual`` = conv3x3–norm–ReLU–conv3x3–norm.

    Both branches are ``nn.Sequential`` (or ``nn.Identity``) of standard layers, so an engine can
    replace the convolutions inside them.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the first convolution and of the projection shortcut.
        make_norm: builds the normalization layer for a number of channels.
        conv_bias: give the convolutions a bias (only when there is no normalization after them).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int,
        make_norm: NormFactory,
        conv_bias: bool,
    ) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            OrderedDict(
                conv1=nn.Conv2d(
                    in_channels, out_channels, 3, stride=stride, padding=1, bias=conv_bias
                ),
                norm1=make_norm(out_channels),
                relu=nn.ReLU(),
                conv2=nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=conv_bias),
                norm2=make_norm(out_channels),
            )
        )
        self.shortcut: nn.Module
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                OrderedDict(
                    conv=nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=conv_bias),
                    norm=make_norm(out_channels),
                )
            )
        else:
            self.shortcut = nn.Identity()
        self.activation = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.residual(x) + self.shortcut(x))


def _norm_factory(norm: str, groups: int) -> NormFactory:
    if norm == "group":
        return lambda channels: nn.GroupNorm(groups, channels)
    if norm == "layer":
        return lambda channels: nn.GroupNorm(1, channels)
    return lambda channels: nn.Identity()


def build_resnet18(
    input_shape: tuple[int, ...], num_classes: int, *, norm: str = "group", groups: int = 32
) -> SequentialModel:
    """ResNet-18 for CIFAR-10 with a per-sample normalization (see module doc).

    Chosen by dpfl where 004 is silent: GroupNorm with 32 groups (Wu & He's default; every
    stage width is a multiple of 32) after every convolution, bias-free convolutions whenever a
    normalization follows them (as in the BatchNorm original).

    Args:
        input_shape: ``(C, H, W)``, e.g. ``(3, 32, 32)``; any size ≥ 1x1 works thanks to the
            adaptive average pool, though the layout is tuned for 32x32.
        num_classes: number of classes.
        norm: ``"group"`` (GroupNorm with ``groups`` groups), ``"layer"`` (GroupNorm with one
            group, i.e. LayerNorm over channels and space with per-channel affine) or ``"none"``
            (no normalization; convolutions get biases). BatchNorm is deliberately not offered.
        groups: number of GroupNorm groups; must divide 64 (hence every stage width).

    Returns:
        The model (parameters not yet initialized); outputs logits ``[B, num_classes]``.
    """
    in_channels, _, _ = image_shape("resnet18", input_shape)
    if norm == "batch":
        raise ConfigError(
            "`norm` 'batch' is not supported for 'resnet18': BatchNorm's running statistics are "
            "buffers mutated in forward and its batch statistics mix samples, which breaks "
            f"per-sample clipping and vmap over clients. Use one of {list(NORMS)}."
        )
    norm = choice("norm", norm, NORMS)
    groups = positive_int("groups", groups)
    if norm == "group" and RESNET18_WIDTHS[0] % groups != 0:
        raise ConfigError(
            f"`groups` must divide every stage width {list(RESNET18_WIDTHS)} (i.e. divide 64). "
            f"Found {groups}."
        )
    make_norm = _norm_factory(norm, groups)
    conv_bias = norm == "none"

    layers: OrderedDict[str, nn.Module] = OrderedDict(
        stem_conv=nn.Conv2d(in_channels, RESNET18_WIDTHS[0], 3, padding=1, bias=conv_bias),
        stem_norm=make_norm(RESNET18_WIDTHS[0]),
        stem_relu=nn.ReLU(),
    )
    previous = RESNET18_WIDTHS[0]
    for stage, width in enumerate(RESNET18_WIDTHS, start=1):
        stride = 1 if stage == 1 else 2
        stage_blocks = nn.Sequential(
            BasicBlock(previous, width, stride, make_norm, conv_bias),
            BasicBlock(width, width, 1, make_norm, conv_bias),
        )
        layers[f"layer{stage}"] = stage_blocks
        previous = width
    layers["pool"] = nn.AdaptiveAvgPool2d(1)
    layers["flatten"] = nn.Flatten(start_dim=-3, end_dim=-1)
    layers["fc"] = nn.Linear(previous, num_classes)
    return SequentialModel(layers)
