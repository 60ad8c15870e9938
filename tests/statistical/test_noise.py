"""Moments of the Gaussian noise over 10^6 draws per client, with tolerances derived from the
standard errors.

Flake budget. Every check below is two-sided at 4 standard errors: under a fresh random seed
each would fail with probability 2·(1 − Φ(4)) ≈ 6.3e-5; with 12 such checks the whole module
would flake with probability < 1e-3. The generators are seeded, so a given torch version gives
the same numbers every run and the module is deterministic; the budget says how unlucky a seed
would have to be to fail a correct implementation. The 2% check on the std is far looser
(> 25 standard errors) and is there as the headline acceptance bound.
"""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.privacy.mechanisms import add_gaussian_noise, add_gaussian_noise_per_client
from dpfl.rng import SeedSequence

N = 1_000_000
STDS = (0.5, 3.0)
OFFSETS = (1.0, -2.0)


def _noised(per_client: bool, dtype: torch.dtype) -> torch.Tensor:
    x = torch.tensor(OFFSETS, dtype=dtype)[:, None].expand(2, N).contiguous()
    std = torch.tensor(STDS)
    seeds = SeedSequence(12345)
    if per_client:
        gens = [seeds.generator(0, k, "noise") for k in range(2)]
        return add_gaussian_noise_per_client(x, std, gens, out=torch.empty_like(x))
    return add_gaussian_noise(x, std, seeds.generator(0, 0, "noise"), out=torch.empty_like(x))


@pytest.mark.parametrize("per_client", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gaussian_moments_over_a_million_draws(per_client: bool, dtype: torch.dtype) -> None:
    noised = _noised(per_client, dtype).double()
    for k, (sigma, offset) in enumerate(zip(STDS, OFFSETS, strict=True)):
        noise = noised[k] - offset
        # Mean: SE = σ/sqrt(n) = σ/1000; 4 SE = 0.004σ.
        assert abs(noise.mean().item()) <= 4 * sigma / math.sqrt(N)
        # Std: the sample std has SE ≈ σ/sqrt(2n) = 0.0707% of σ at n = 10^6.
        sample_std = noise.std().item()
        assert sample_std == pytest.approx(sigma, rel=0.02)  # headline bound, > 25 SE
        assert abs(sample_std - sigma) <= 4 * sigma / math.sqrt(2 * N)  # 4 SE ≈ 0.28%
    # Rows are independent: the sample correlation of two independent rows has SE 1/sqrt(n).
    a = noised[0] - OFFSETS[0]
    b = noised[1] - OFFSETS[1]
    correlation = ((a - a.mean()) * (b - b.mean())).mean() / (a.std() * b.std())
    assert abs(correlation.item()) <= 4 / math.sqrt(N)
