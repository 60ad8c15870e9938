"""The lattice release's numbers and refusals (its law is in tests/statistical/test_csprng.py, the
attack it stops in tests/statistical/test_low_bit_attack.py)."""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.integer import MAX_SKELLAM_VARIANCE, conditional_rounding_bound
from dpfl.privacy.mechanisms.lattice import LatticeGaussian
from dpfl.rng import CsprngGenerator


def test_the_release_is_priced_as_the_skellam_mechanism_on_the_rounded_query() -> None:
    m = LatticeGaussian(dim=10, clip_norm=2.0, noise_multiplier=1.5, scale=256.0)
    d2 = conditional_rounding_bound(512.0, 10, math.exp(-0.5))
    assert m.l2_sensitivity == d2 and m.l1_sensitivity == min(d2 * d2, math.sqrt(10) * d2)
    assert m.variance == pytest.approx((1.5 * d2) ** 2, rel=1e-15)
    record = m.release_record("public", (3,))
    assert (record.observer, record.variance, record.l2_sensitivity, record.l1_sensitivity, record.client_ids) == (
        "public", m.variance, d2, m.l1_sensitivity, (3,))
    g = CsprngGenerator(bytes(range(32)))
    x = torch.zeros(4, 10, dtype=torch.float64)
    x[:, 0] = 1.9
    out = m.release(x, [g] * 4, g)
    assert out.dtype == torch.int64 and out.shape == (4, 10)
    assert torch.equal(m.values(out) * 256.0, out.to(torch.float64))


def test_the_lattice_release_refuses_what_it_cannot_price() -> None:
    with pytest.raises(ConfigError, match="noise_multiplier.*0"):
        LatticeGaussian(dim=1, clip_norm=1.0, noise_multiplier=0.0, scale=64.0)
    with pytest.raises(ConfigError, match="scale"):
        LatticeGaussian(dim=1, clip_norm=1.0, noise_multiplier=1.0, scale=0.5)
    with pytest.raises(ConfigError, match="lower `scale`"):
        LatticeGaussian(dim=1, clip_norm=1.0, noise_multiplier=1.0, scale=math.sqrt(MAX_SKELLAM_VARIANCE) * 2)
    m = LatticeGaussian(dim=2, clip_norm=1.0, noise_multiplier=1.0, scale=64.0)
    g = CsprngGenerator(bytes(32))
    with pytest.raises(ConfigError, match="exceeds the clip norm"):
        m.release(torch.tensor([[3.0, 4.0]], dtype=torch.float64), [g], g)
    with pytest.raises(ConfigError, match="int64"):
        m.values(torch.zeros(2))
    assert g.numpy is g.numpy  # one stream per generator, built once
