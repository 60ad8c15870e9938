"""build_model: names, options, shapes, parameter counts, no buffers, no global RNG."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.models import MODELS, SequentialModel, build_model, count_parameters, model_options

MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)
TABULAR = (58,)
LIGHT = [name for name in MODELS if name != "resnet18"]

Make = Callable[..., SequentialModel]
Batch = Callable[..., torch.Tensor]


def test_typical_set_covers_registry(typical: dict[str, object]) -> None:
    assert set(typical) == set(MODELS)


@pytest.mark.parametrize("name", LIGHT)
def test_output_shape_and_loss_kind(
    name: str, make: Make, batch: Batch, typical: dict[str, tuple[object, object, tuple[int, ...]]]
) -> None:
    model = make(name)
    _, _, expected = typical[name]
    assert model(batch(name)).shape == expected
    assert model.loss_kind == ("hinge" if name == "svm" else "cross_entropy")


def test_resnet18_output_shape(resnet_copies: list[SequentialModel], batch: Batch) -> None:
    model = resnet_copies[0]
    assert model(batch("resnet18")).shape == (2, 10)
    assert model.loss_kind == "cross_entropy"


@pytest.mark.parametrize(
    ("name", "shape", "classes", "expected"),
    [
        ("logistic", MNIST, 10, (5, 10)),
        ("mlp", TABULAR, 2, (5, 2)),
        ("cnn2", CIFAR, 10, (5, 10)),
        ("svm", MNIST, 2, (5,)),
    ],
)
def test_other_inputs(
    name: str, shape: tuple[int, ...], classes: int, expected: tuple[int, ...]
) -> None:
    model = build_model(name, shape, classes, generator=torch.Generator().manual_seed(0))
    x = torch.randn(5, *shape, generator=torch.Generator().manual_seed(1))
    assert model(x).shape == expected


def test_no_buffers_and_global_rng_untouched(
    resnet_copies: list[SequentialModel], make: Make
) -> None:
    before = torch.random.get_rng_state()
    models = [make(name) for name in LIGHT]
    assert torch.equal(before, torch.random.get_rng_state())
    for model in [*models, resnet_copies[0]]:
        assert list(model.buffers()) == []


def test_mlp_parameter_count(make: Make) -> None:
    assert count_parameters(make("mlp")) == 784 * 256 + 256 + 256 * 10 + 10 == 203_530
    wide = build_model("mlp", MNIST, 10, generator=torch.Generator(), hidden=200)
    assert count_parameters(wide) == 784 * 200 + 200 + 200 * 10 + 10


def test_cnn2_parameter_counts(make: Make) -> None:
    # Default (004's reference [21]): conv3x3 1->32, conv3x3 32->64 (28 -> 26 -> 24), pool -> 12,
    # fc 12*12*64 -> 128, fc 128 -> classes.
    conv1 = 3 * 3 * 1 * 32 + 32
    conv2 = 3 * 3 * 32 * 64 + 64
    fc1 = 12 * 12 * 64 * 128 + 128
    assert count_parameters(make("cnn2")) == conv1 + conv2 + fc1 + 128 * 10 + 10 == 1_199_882
    emnist = build_model("cnn2", MNIST, 62, generator=torch.Generator())
    assert count_parameters(emnist) == conv1 + conv2 + fc1 + 128 * 62 + 62 == 1_206_590
    # McMahan et al.'s FedAvg CNN: conv5x5 'same' 1->32, pool, conv5x5 32->64, pool -> 7x7, fc 512.
    mcmahan = make("cnn2", variant="mcmahan")
    hand = (5 * 5 * 32 + 32) + (5 * 5 * 32 * 64 + 64) + (7 * 7 * 64 * 512 + 512) + (512 * 10 + 10)
    assert count_parameters(mcmahan) == hand == 1_663_370


def test_other_parameter_counts(resnet_copies: list[SequentialModel], make: Make) -> None:
    # cnn-000: conv5x5 pad 4 on 32x32 -> 36x36, pool -> 18x18.
    assert count_parameters(make("cnn-000")) == (3 * 25 * 32 + 32) + (32 * 18 * 18 * 10 + 10)
    convs = [(3, 32), (32, 32), (32, 64), (64, 64), (64, 128), (128, 128)]
    vgg = (
        sum(9 * cin * cout + cout for cin, cout in convs)
        + (128 * 4 * 4 * 128 + 128)
        + (128 * 10 + 10)
    )
    assert count_parameters(make("vgg-small")) == vgg == 550_570
    assert count_parameters(make("svm")) == 58
    assert count_parameters(make("logistic")) == 58 * 3 + 3
    # The well-known count of the CIFAR ResNet-18; GroupNorm has BatchNorm's affine parameters.
    assert count_parameters(resnet_copies[0]) == 11_173_962


def test_svm_attributes(make: Make) -> None:
    model = build_model("svm", TABULAR, 2, generator=torch.Generator(), kappa=0.01)
    assert model.l2_penalty == 0.01
    assert model.penalized_params == ("linear.weight",)
    assert [n for n, _ in model.named_parameters()] == ["linear.weight"]
    assert make("svm").l2_penalty == 0.0
    with_bias = build_model("svm", TABULAR, 2, generator=torch.Generator(), bias=True)
    assert [n for n, _ in with_bias.named_parameters()] == ["linear.weight", "linear.bias"]
    assert with_bias.penalized_params == ("linear.weight",)
    assert make("mlp").l2_penalty == 0.0 and make("mlp").penalized_params == ()


def test_svm_score_is_linear(make: Make, batch: Batch) -> None:
    model = make("svm")
    x = batch("svm", 4)
    assert torch.allclose(model(x), x @ model.get_parameter("linear.weight")[0], atol=1e-6)


def test_resnet18_norm_options() -> None:
    gen = torch.Generator().manual_seed(0)
    layer = build_model("resnet18", (3, 8, 8), 10, generator=gen, norm="layer")
    stem_norm = layer.get_submodule("stem_norm")
    assert isinstance(stem_norm, torch.nn.GroupNorm) and stem_norm.num_groups == 1
    plain = build_model("resnet18", (3, 8, 8), 10, generator=gen, norm="none")
    assert isinstance(plain.get_submodule("stem_norm"), torch.nn.Identity)
    assert "stem_conv.bias" in dict(plain.named_parameters())
    assert plain(torch.randn(1, 3, 8, 8, generator=gen)).shape == (1, 10)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="resnet50") as info:
        build_model("resnet50", CIFAR, 10, generator=torch.Generator())
    for name in MODELS:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("name", "shape", "classes", "options", "match"),
    [
        ("mlp", MNIST, 10, {"width": 3}, "hidden"),
        ("logistic", MNIST, 10, {"hidden": 3}, "none"),
        ("mlp", MNIST, 10, {"hidden": 0}, "hidden"),
        ("mlp", MNIST, 10, {"hidden": True}, "hidden"),
        ("svm", TABULAR, 2, {"kappa": -1.0}, "kappa"),
        ("svm", TABULAR, 2, {"kappa": math.nan}, "kappa"),
        ("svm", TABULAR, 10, {}, "num_classes"),
        ("mlp", MNIST, 1, {}, "num_classes"),
        ("mlp", (1, 0, 28), 10, {}, "input_shape"),
        ("cnn2", TABULAR, 10, {}, "input_shape"),
        ("cnn2", (1, 5, 5), 10, {}, "too small"),
        ("cnn2", MNIST, 10, {"variant": "lenet"}, "mcmahan"),
        ("resnet18", CIFAR, 10, {"norm": "batch"}, "BatchNorm"),
        ("resnet18", CIFAR, 10, {"norm": "instance"}, "group"),
        ("resnet18", CIFAR, 10, {"groups": 24}, "groups"),
    ],
)
def test_invalid_configs(
    name: str, shape: tuple[int, ...], classes: int, options: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        build_model(name, shape, classes, generator=torch.Generator(), **options)


def test_generator_must_be_a_generator() -> None:
    with pytest.raises(ConfigError, match="generator"):
        build_model("mlp", MNIST, 10, generator=0)  # type: ignore[arg-type]


def test_model_options() -> None:
    assert model_options("mlp") == {"hidden": 256}
    assert model_options("svm") == {"kappa": 0.0, "bias": False}
    assert model_options("logistic") == {}
    with pytest.raises(ConfigError, match="mlp"):
        model_options("nope")


def test_building_a_model_does_not_import_sympy() -> None:
    # the meta-device build used to leave the meta tensors with ``to_empty``, whose ``empty_like``
    # imports sympy through torch's reference implementations: 0.35 s of every process that builds
    # a model (a run, a SuperNode's worker, the ServerApp)
    code = ("import sys, torch\n"
            "from dpfl.models import build_model\n"
            "for name, shape in (('mlp', (1, 28, 28)), ('cnn2', (1, 28, 28)), ('resnet18', (3, 32, 32))):\n"
            "    m = build_model(name, shape, 10, generator=torch.Generator().manual_seed(0))\n"
            "    assert all(p.device.type == 'cpu' and p.is_contiguous() for p in m.parameters())\n"
            "print('sympy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
