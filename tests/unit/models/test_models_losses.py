"""per_sample_loss against hand-computed values, with extra leading dimensions and under vmap."""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.models import per_sample_loss


def test_hinge_hand_values() -> None:
    scores = torch.tensor([2.0, 0.3, -0.5, 0.3])
    targets = torch.tensor([1, 1, 0, 0])  # y = +1, +1, -1, -1
    # max(0, 1 - y s): 1 - 2 = -1 -> 0; 1 - 0.3 = 0.7; 1 - 0.5 = 0.5; 1 + 0.3 = 1.3
    expected = torch.tensor([0.0, 0.7, 0.5, 1.3])
    assert torch.allclose(per_sample_loss("hinge", scores, targets), expected)
    assert torch.allclose(per_sample_loss("hinge", scores[:, None], targets), expected)


def test_cross_entropy_hand_values() -> None:
    logits = torch.tensor([[0.0, 0.0, -math.inf], [0.0, math.log(3.0), -math.inf], [1.0, 2.0, 3.0]])
    targets = torch.tensor([0, 1, 0])
    expected = torch.tensor(
        [
            math.log(2.0),  # two equal logits
            -math.log(3.0 / 4.0),  # probabilities 1/4, 3/4
            math.log(1.0 + math.e + math.e**2),  # -log(e / (e + e^2 + e^3))
        ]
    )
    assert torch.allclose(per_sample_loss("cross_entropy", logits, targets), expected)


def test_leading_dims_and_vmap() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 5, generator=gen)
    targets = torch.randint(0, 5, (3, 4), generator=gen)
    out = per_sample_loss("cross_entropy", logits, targets)
    ref = torch.nn.functional.cross_entropy(
        logits.reshape(12, 5), targets.reshape(12), reduction="none"
    )
    assert out.shape == (3, 4)
    assert torch.allclose(out, ref.reshape(3, 4))
    mapped = torch.func.vmap(lambda o, t: per_sample_loss("cross_entropy", o, t))(logits, targets)
    assert torch.allclose(mapped, out)

    scores = torch.randn(3, 4, generator=gen)
    labels = torch.randint(0, 2, (3, 4), generator=gen)
    hinge = per_sample_loss("hinge", scores, labels)
    assert hinge.shape == (3, 4)
    assert torch.allclose(hinge, torch.clamp(1 - (2 * labels - 1) * scores, min=0))
    mapped = torch.func.vmap(lambda o, t: per_sample_loss("hinge", o, t))(scores, labels)
    assert torch.allclose(mapped, hinge)


def test_errors() -> None:
    with pytest.raises(ConfigError, match="cross_entropy"):
        per_sample_loss("mse", torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="leading shape"):
        per_sample_loss("cross_entropy", torch.zeros(2, 3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="scores"):
        per_sample_loss("hinge", torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))
