"""A small MNIST CNN (21,840 parameters): the classic PyTorch-examples ``Net``.

Used by 001's Table 1 ablation: 001 §5 (``001_8ad797a147f2b989.txt``) names only "a two-layer
CNN" for MNIST / Fashion-MNIST and fixes every weight into the range (c, r) = (0, 0.075) /
(0, 0.015); a range that narrow suits a net with small fan-in layers far better than the 1.2M-weight
``cnn2`` (whose first layers' weights are mostly outside it). The same section calls its CIFAR-10
baseline "the default network from Pytorch library", which points at the PyTorch examples and
tutorials; their MNIST example's two-convolution ``Net`` is the net this module reproduces.

Imports nothing from dpfl beyond :mod:`dpfl.errors` (through the validators) and :mod:`dpfl.models`.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from dpfl.models._validate import conv_out, image_shape, spatial_at_least_one
from dpfl.models.base import SequentialModel

#: parameters of :func:`build_cnn_mnist_small` on ``[1, 28, 28]`` with 10 classes
CNN_MNIST_SMALL_PARAMETERS = 21_840


def build_cnn_mnist_small(input_shape: tuple[int, ...], num_classes: int) -> SequentialModel:
    """The two-convolution MNIST CNN of the PyTorch examples, without its dropouts (21,840 weights).

    Source: the ``Net`` of PyTorch's MNIST example (the ``pytorch/examples`` ``mnist/main.py`` of
    2017–2019; the same class is in ``pytorch/ignite``'s ``examples/mnist/mnist.py``): conv 5x5
    1→10 → max-pool 2 → ReLU → conv 5x5 10→20 → dropout2d → max-pool 2 → ReLU → linear 320→50 →
    ReLU → dropout → linear 50→10. Here: the same layers with ReLU before each pool (the two
    commute: both are monotone) and no dropout (see :mod:`dpfl.models.cnn`: dpfl draws no
    randomness from the global RNG in ``forward``); dropout holds no parameters, so the count is
    unchanged. On ``[1, 28, 28]``: 28 → 24 → 12 → 8 → 4, so

        (1·25·10 + 10) + (10·25·20 + 20) + (20·4·4·50 + 50) + (50·10 + 10)
        = 260 + 5,020 + 16,050 + 510 = 21,840 parameters (with 10 classes).

    Args:
        input_shape: ``(C, H, W)``, e.g. ``(1, 28, 28)``.
        num_classes: number of classes.

    Returns:
        The model (parameters not yet initialized); outputs logits ``[B, num_classes]``.

    Raises:
        ConfigError: ``input_shape`` is not an image, or too small for two 5x5 convolutions and
            two 2x2 pools.
    """
    in_channels, h, w = image_shape("cnn-mnist-small", input_shape)
    for _ in range(2):
        h, w = conv_out(h, 5), conv_out(w, 5)
        h, w = conv_out(h, 2, stride=2), conv_out(w, 2, stride=2)
    spatial_at_least_one("cnn-mnist-small", input_shape, (h, w))
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        conv1=nn.Conv2d(in_channels, 10, kernel_size=5),
        relu1=nn.ReLU(),
        pool1=nn.MaxPool2d(2),
        conv2=nn.Conv2d(10, 20, kernel_size=5),
        relu2=nn.ReLU(),
        pool2=nn.MaxPool2d(2),
        flatten=nn.Flatten(start_dim=-3, end_dim=-1),
        fc1=nn.Linear(20 * h * w, 50),
        relu3=nn.ReLU(),
        fc2=nn.Linear(50, num_classes),
    )
    return SequentialModel(layers)
