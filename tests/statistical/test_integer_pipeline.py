"""The integer pipeline of secure aggregation (dpfl.privacy.mechanisms.integer): exact modular
arithmetic, the enforced sensitivity, unbiased rounding and the Skellam shares, with fixed seeds
and stated tolerances."""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.integer import (
    IntegerPipeline,
    conditional_rounding_bound,
    hadamard,
    skellam_noise,
)


def _gens(n: int, base: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(base + i) for i in range(n)]


def test_hadamard_is_orthonormal_and_its_own_inverse() -> None:
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = hadamard(x)
    assert torch.allclose(y.norm(dim=1), x.norm(dim=1), rtol=1e-12)
    assert torch.allclose(hadamard(y), x, atol=1e-12)
    # against the explicit Sylvester matrix
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < 64:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    assert torch.allclose(y, x @ h.T / 8.0, atol=1e-12)
    with pytest.raises(ConfigError, match="power-of-two"):
        hadamard(torch.zeros(3))


@pytest.mark.parametrize("rotation", [False, True])
def test_the_decoded_modular_sum_is_the_sum_of_the_integer_vectors(rotation: bool) -> None:
    pipe = IntegerPipeline(dim=50, bits=16, scale=100.0, clip_norm=1.0, rotation=rotation)
    x = torch.randn(7, 50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True) * 0.9
    signs = pipe.rotation_signs(torch.Generator().manual_seed(5)) if rotation else None
    ints = pipe.encode(x, _gens(7), signs)
    assert ints.dtype == torch.int64 and ints.shape == (7, pipe.padded_dim)
    noise = torch.stack([skellam_noise((pipe.padded_dim,), 50.0, g) for g in _gens(7, 100)])
    residues = pipe.to_residues(ints + noise)
    assert int(residues.min()) >= 0 and int(residues.max()) < 2 ** 16
    total = pipe.modular_sum(residues)
    # the integer sum is far inside [-2^15, 2^15): the centred residue is it, exactly
    exact = (ints + noise).sum(0)
    centred = torch.where(total >= 2 ** 15, total - 2 ** 16, total)
    assert torch.equal(centred, exact)
    decoded = pipe.decode(total, signs)
    expected = exact.to(torch.float64)
    if rotation:
        expected = (hadamard(expected) * signs)[:50]
    assert torch.allclose(decoded, expected / 100.0, atol=1e-9)
    # rounding moves each coordinate by less than one integer unit per client
    noiseless = pipe.decode(pipe.modular_sum(pipe.to_residues(ints)), signs)
    assert float((noiseless - x.sum(0)).abs().max()) <= 7 * (math.sqrt(pipe.padded_dim) if rotation else 1) / 100.0


def test_a_wrapped_sum_is_exact_modulo_2_to_the_b() -> None:
    pipe = IntegerPipeline(dim=4, bits=8, scale=1.0, clip_norm=1.0)
    v = torch.tensor([[200, -3, 127, 0], [100, -200, 1, 255]], dtype=torch.int64)
    assert torch.equal(pipe.modular_sum(pipe.to_residues(v)), torch.remainder(v.sum(0), 256))


def test_conditional_rounding_enforces_the_bound_and_passes_often() -> None:
    beta = math.exp(-0.5)
    pipe = IntegerPipeline(dim=400, bits=32, scale=20.0, clip_norm=1.0, beta=beta)
    x = torch.randn(300, 400, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)  # on the clip sphere: the hardest case
    ints = pipe.encode(x, _gens(300, 7))
    assert float(ints.to(torch.float64).norm(dim=1).max()) <= pipe.l2_sensitivity
    assert float(ints.abs().sum(1).max()) <= pipe.l1_sensitivity
    # the acceptance probability of one unconditional draw is >= 1 − β (KLS21 Thm 23): measured
    # on 300 rows × 20 fresh draws, the fraction within the bound is at least 1 − β − 4 SE
    y = x * 20.0
    g = torch.Generator().manual_seed(11)
    passes = []
    for _ in range(20):
        r = torch.floor(y) + (torch.rand(y.shape, generator=g, dtype=torch.float64) < y - torch.floor(y))
        passes.append((r.norm(dim=1) <= pipe.l2_sensitivity).to(torch.float64))
    rate = float(torch.cat(passes).mean())
    assert rate >= 1 - beta - 4 * math.sqrt(beta * (1 - beta) / 6000)
    assert conditional_rounding_bound(20.0, 400, beta) == pytest.approx(pipe.l2_sensitivity)


def test_rounding_is_unbiased_within_four_standard_errors() -> None:
    pipe = IntegerPipeline(dim=8, bits=32, scale=3.0, clip_norm=1.0)
    x = torch.tensor([[0.3, -0.2, 0.1, 0.05, -0.4, 0.25, 0.0, 0.33]], dtype=torch.float64)
    draws = torch.cat([pipe.encode(x, [torch.Generator().manual_seed(s)]) for s in range(4000)]).to(torch.float64)
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(4000)
    target = (x * 3.0)[0]
    assert bool(((mean - target).abs() <= 4 * se + 1e-12).all())


def test_skellam_shares_have_the_stated_variance_and_sum_to_the_total() -> None:
    # 10^6 draws: variance within 2%, mean within 4 standard errors
    one = skellam_noise((1_000_000,), 40.0, torch.Generator().manual_seed(3)).to(torch.float64)
    assert float(one.var()) == pytest.approx(40.0, rel=0.02)
    assert abs(float(one.mean())) <= 4 * math.sqrt(40.0 / 1e6)
    # ten shares of 4 sum to a Skellam of 40: the same variance, and the same fourth moment
    # (a Skellam's excess kurtosis is 1/μ: 0.025 here), within Monte Carlo error
    total = sum(skellam_noise((1_000_000,), 4.0, torch.Generator().manual_seed(10 + i)) for i in range(10))
    total = total.to(torch.float64)
    assert float(total.var()) == pytest.approx(40.0, rel=0.02)
    kurt = float(((total - total.mean()) ** 4).mean() / total.var() ** 2) - 3
    assert kurt == pytest.approx(1 / 40.0, abs=0.02)
    assert skellam_noise((3,), 0.0, torch.Generator()).abs().sum() == 0


def test_the_wrap_bound_is_reported_and_bad_settings_are_named() -> None:
    pipe = IntegerPipeline(dim=100, bits=12, scale=10.0, clip_norm=1.0)
    # 10 contributors of Δ2 ≈ 16 and noise of std 30 in a range of ±2048: negligible
    assert pipe.wrap_log_probability(10, 900.0) < math.log(1e-9)
    # 200 contributors could exceed the range: the bound says "certain"
    assert pipe.wrap_log_probability(200, 900.0) == 0.0
    with pytest.raises(ConfigError, match="bits"):
        IntegerPipeline(dim=10, bits=63, scale=1.0, clip_norm=1.0)
    with pytest.raises(ConfigError, match="clip norm"):
        pipe.encode(torch.ones(1, 100), _gens(1))


def test_a_large_variance_is_drawn_in_exact_parts() -> None:
    """torch.poisson degrades above a rate of about 2^46 (variance off, then draws on a lattice, then
    zeros): a variance of 2^46 is drawn as the sum of 32 parts of rate 2^40 each. Over 2·10^5
    draws the variance is within 2% and the parity within 4 standard errors of a half."""
    from dpfl.privacy.mechanisms.integer import MAX_SKELLAM_VARIANCE

    v = skellam_noise((200_000,), 2.0 ** 46, torch.Generator().manual_seed(4)).to(torch.float64)
    assert float(v.var()) == pytest.approx(2.0 ** 46, rel=0.02)
    odd = float((v.to(torch.int64) % 2 != 0).to(torch.float64).mean())
    assert abs(odd - 0.5) <= 4 * 0.5 / math.sqrt(200_000)
    with pytest.raises(ConfigError, match="secure_sum.scale"):
        skellam_noise((2,), MAX_SKELLAM_VARIANCE * 2, torch.Generator())


def test_a_scale_below_one_integer_unit_is_refused() -> None:
    with pytest.raises(ConfigError, match="γS < 1"):
        IntegerPipeline(dim=10, bits=32, scale=0.5, clip_norm=1.0)


def test_the_tail_bound_does_not_cancel_at_huge_variance() -> None:
    """For t ≪ μ the Chernoff bound is 2·exp(−t²/(2μ)(1 + O(t/μ))): at μ = 1e18 and t = 7e9 the
    exponent is −24.5 + ln 2, which the difference form lost to cancellation."""
    from dpfl.privacy.releases.skellam import skellam_tail_log_probability

    mu, t = 1e18, 7e9
    assert skellam_tail_log_probability(mu, t) == pytest.approx(math.log(2) - t * t / (2 * mu), rel=1e-6)
