"""Plain convolutional models: 000's one-conv CNN, the 2-layer CNN of 001/004, a small VGG.

All are a flat ``nn.Sequential`` of ``Conv2d``/``ReLU``/``MaxPool2d``/``Flatten``/``Linear``.
No dropout anywhere: dropout draws its mask from the global RNG in ``forward`` (dpfl passes every
random draw an explicit generator) and would need ``vmap(randomness=...)`` in the vectorized
engine; the seed papers' privacy analyses do not depend on it.

Builders construct the layers only; :func:`dpfl.models.build_model` allocates and initializes the
parameters from an explicit generator. Imports nothing from dpfl beyond :mod:`dpfl.errors` and
:mod:`dpfl.models`.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from dpfl.models._validate import choice, conv_out, image_shape, positive_int, spatial_at_least_one
from dpfl.models.base import SequentialModel

CNN2_VARIANTS: tuple[str, ...] = ("reddi", "mcmahan")


def build_cnn_000(
    input_shape: tuple[int, ...], num_classes: int, *, channels: int = 32
) -> SequentialModel:
    """The one-convolutional-layer CNN of 000 for CIFAR-10.

    Followed: 000 §5 (``000_3304bf6f36c753f8.txt``), "CNN is trained using SGD consisting of
    single convolutional layer with the convolutional kernel size 5 and the padding size 4, where
    ReLU units and softmax of 10 classes are applied."

    Chosen by dpfl where the paper is silent: ``channels = 32`` output channels (an option),
    stride 1, one 2x2 max-pool after the ReLU, and no hidden fully connected layer (the sentence
    names none): conv 5x5 (pad 4) → ReLU → max-pool 2 → linear to the classes. On CIFAR-10
    ``[3, 32, 32]`` the feature map is 36x36 → 18x18, so the model has
    (3·25·32 + 32) + (32·18·18·10 + 10) = 2,432 + 103,690 = 106,122 parameters.

    Args:
        input_shape: ``(C, H, W)``, e.g. ``(3, 32, 32)``.
        num_classes: number of classes.
        channels: output channels of the convolution.

    Returns:
        The model (parameters not yet initialized); outputs logits ``[B, num_classes]``.
    """
    in_channels, height, width = image_shape("cnn-000", input_shape)
    channels = positive_int("channels", channels)
    h, w = (conv_out(s, 5, padding=4) for s in (height, width))
    h, w = conv_out(h, 2, stride=2), conv_out(w, 2, stride=2)
    spatial_at_least_one("cnn-000", input_shape, (h, w))
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        conv=nn.Conv2d(in_channels, channels, kernel_size=5, padding=4),
        relu=nn.ReLU(),
        pool=nn.MaxPool2d(2),
        flatten=nn.Flatten(start_dim=-3, end_dim=-1),
        fc=nn.Linear(channels * h * w, num_classes),
    )
    return SequentialModel(layers)


def build_cnn2(
    input_shape: tuple[int, ...], num_classes: int, *, variant: str = "reddi"
) -> SequentialModel:
    """The 2-layer CNN for MNIST / Fashion-MNIST / EMNIST of 001 and 004.

    001 §5 (``001_8ad797a147f2b989.txt``) says only "we implement a two-layer CNN"; 004 §6
    (``004_32e0c8f847edac12.txt``) uses the "CNN-2-Layers model from [21]" ([21] = Reddi et al.,
    *Adaptive Federated Optimization*) and states "The model size is about 1.0M".

    ``variant="reddi"`` (default) — the model of 004's reference [21], the EMNIST
    "conv-dropout" CNN: conv 3x3 32 → ReLU → conv 3x3 64 → ReLU → max-pool 2 → linear 128 →
    ReLU → linear to the classes (no padding; both dropouts of [21] dropped, see module doc).
    On ``[1, 28, 28]``: 28 → 26 → 24 → 12, so
    (9·32 + 32) + (9·32·64 + 64) + (12·12·64·128 + 128) + (128·C + C)
    = 320 + 18,496 + 1,179,776 + 129·C: 1,199,882 for C = 10, 1,206,590 for EMNIST's C = 62 —
    "about 1.0M" in 004's words is this 1.2M model.

    ``variant="mcmahan"`` — the CNN of the original FedAvg paper (McMahan et al. 2017), often
    called "the 2-layer CNN": conv 5x5 32 (pad 2) → ReLU → max-pool 2 → conv 5x5 64 (pad 2) →
    ReLU → max-pool 2 → linear 512 → ReLU → linear to the classes. On ``[1, 28, 28]``:
    832 + 51,264 + 1,606,144 + 513·C = 1,663,370 for C = 10 (McMahan et al.'s own count), which
    does not fit 004's "about 1.0M"; offered for 001, whose paper does not pin the architecture.

    Args:
        input_shape: ``(C, H, W)``, e.g. ``(1, 28, 28)``.
        num_classes: number of classes.
        variant: one of ``CNN2_VARIANTS``.

    Returns:
        The model (parameters not yet initialized); outputs logits ``[B, num_classes]``.
    """
    in_channels, height, width = image_shape("cnn2", input_shape)
    variant = choice("variant", variant, CNN2_VARIANTS)
    layers: OrderedDict[str, nn.Module]
    if variant == "reddi":
        h, w = height, width
        for _ in range(2):
            h, w = conv_out(h, 3), conv_out(w, 3)
        h, w = conv_out(h, 2, stride=2), conv_out(w, 2, stride=2)
        spatial_at_least_one("cnn2", input_shape, (h, w))
        layers = OrderedDict(
            conv1=nn.Conv2d(in_channels, 32, kernel_size=3),
            relu1=nn.ReLU(),
            conv2=nn.Conv2d(32, 64, kernel_size=3),
            relu2=nn.ReLU(),
            pool=nn.MaxPool2d(2),
            flatten=nn.Flatten(start_dim=-3, end_dim=-1),
            fc1=nn.Linear(64 * h * w, 128),
            relu3=nn.ReLU(),
            fc2=nn.Linear(128, num_classes),
        )
    else:
        h, w = height, width
        for _ in range(2):
            h, w = conv_out(h, 5, padding=2), conv_out(w, 5, padding=2)
            h, w = conv_out(h, 2, stride=2), conv_out(w, 2, stride=2)
        spatial_at_least_one("cnn2", input_shape, (h, w))
        layers = OrderedDict(
            conv1=nn.Conv2d(in_channels, 32, kernel_size=5, padding=2),
            relu1=nn.ReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(32, 64, kernel_size=5, padding=2),
            relu2=nn.ReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(start_dim=-3, end_dim=-1),
            fc1=nn.Linear(64 * h * w, 512),
            relu3=nn.ReLU(),
            fc2=nn.Linear(512, num_classes),
        )
    return SequentialModel(layers)


VGG_SMALL_STAGES: tuple[int, ...] = (32, 64, 128)


def build_vgg_small(
    input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 128
) -> SequentialModel:
    """A small VGG for CIFAR-10, without BatchNorm.

    001 §5 (``001_8ad797a147f2b989.txt``): "for CIFAR-10, the default network from Pytorch
    library only achieves around 50% accuracy without data perturbation, and we re-design a
    small VGG (simonyan2014very) for the task." The paper gives no layer list.

    Chosen by dpfl (the paper is silent): three VGG stages of two 3x3 convolutions (padding 1,
    ReLU) with 32, 64, 128 channels, each stage closed by a 2x2 max-pool, then linear ``hidden``
    (128) → ReLU → linear to the classes; no BatchNorm and no dropout. On ``[3, 32, 32]``
    (32 → 16 → 8 → 4): convolutions 896 + 9,248 + 18,496 + 36,928 + 73,856 + 147,584 = 287,008,
    linear 2,048·128 + 128 = 262,272 and 128·10 + 10 = 1,290; total 550,570 parameters.

    Args:
        input_shape: ``(C, H, W)``, e.g. ``(3, 32, 32)``.
        num_classes: number of classes.
        hidden: width of the hidden linear layer.

    Returns:
        The model (parameters not yet initialized); outputs logits ``[B, num_classes]``.
    """
    in_channels, h, w = image_shape("vgg-small", input_shape)
    hidden = positive_int("hidden", hidden)
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    previous = in_channels
    for stage, channels in enumerate(VGG_SMALL_STAGES, start=1):
        for index in (1, 2):
            layers[f"conv{stage}_{index}"] = nn.Conv2d(previous, channels, kernel_size=3, padding=1)
            layers[f"relu{stage}_{index}"] = nn.ReLU()
            previous = channels
        layers[f"pool{stage}"] = nn.MaxPool2d(2)
        h, w = conv_out(h, 2, stride=2), conv_out(w, 2, stride=2)
    spatial_at_least_one("vgg-small", input_shape, (h, w))
    layers["flatten"] = nn.Flatten(start_dim=-3, end_dim=-1)
    layers["fc1"] = nn.Linear(previous * h * w, hidden)
    layers["relu_fc"] = nn.ReLU()
    layers["fc2"] = nn.Linear(hidden, num_classes)
    return SequentialModel(layers)
