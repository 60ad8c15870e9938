"""The ChaCha20 generator (dpfl.rng.CsprngGenerator) and every sampler drawn from it.

The keystream is checked against an independent implementation (the ``cryptography`` package's
ChaCha20, OpenSSL's) and against RFC 8439's test vector; then each sampler of
:mod:`dpfl.privacy.mechanisms.draw` and the mechanisms that use it are checked for their law on
10^6 draws under a fixed key, each moment within a stated number of standard errors (SE) and each
distribution by a chi-square test at a stated level.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpfl.privacy.mechanisms import draw
from dpfl.privacy.mechanisms.integer import MAX_POISSON_RATE, skellam_noise
from dpfl.privacy.mechanisms.lattice import LatticeGaussian
from dpfl.privacy.mechanisms.two_point import two_point_probability_high, two_point_randomize, two_point_values
from dpfl.rng import CsprngGenerator
from dpfl.sampling.clients import FixedSizeSampler, PoissonSampler
from dpfl.server.shuffle import ClientReports, Shuffler

N = 10**6
KEY = bytes.fromhex("5f1a0c2e9b7d4e3f8a6b1c0d2e3f4a5b6c7d8e9fa0b1c2d3e4f5061728394a5b")
#: every moment below is asserted within this many standard errors
SE = 4.0
#: every chi-square test below is at this level (the statistic must stay below its 1 − level quantile)
CHI2_LEVEL = 1e-4


def _gen(key: bytes = KEY) -> CsprngGenerator:
    return CsprngGenerator(key)


def _keystream_cryptography(key: bytes, block: int, nbytes: int) -> bytes:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    # OpenSSL's 16-byte "nonce" is state words 12..15: the 32-bit block counter, then the 96-bit nonce
    nonce = block.to_bytes(16, "little")
    return Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(nbytes))


def _keystream_randomgen(key: bytes, counter: int, nbytes: int) -> bytes:
    from randomgen import ChaCha

    bits = ChaCha(key=int.from_bytes(key, "little"), counter=counter, rounds=20)
    return bits.random_raw(nbytes // 8).astype("<u8").tobytes()


@pytest.mark.parametrize("block", [0, 1, 2**32 - 4, 2**32 + 5, (0x4A << 64) | (9 << 32) | 7, 2**123 + 12345])
def test_the_keystream_is_chacha20_as_the_cryptography_package_computes_it(block: int) -> None:
    """randomgen's ChaCha state is RFC 8439's: constants, the 256-bit key (little-endian words), then
    words 12..15 = its 128-bit counter, which counts 32-bit words — so randomgen's counter 16·B
    starts block B of the cipher whose words 12..15 are B (the 32-bit block counter and the
    96-bit nonce together). Four blocks are compared (the ``cryptography`` package refuses to
    carry its 32-bit block counter into the nonce, so no case crosses that carry)."""
    rng = np.random.default_rng(55)
    for _ in range(3):
        key = rng.bytes(32)
        assert _keystream_randomgen(key, 16 * block, 256) == _keystream_cryptography(key, block, 256)
    # the counter's low 4 bits are the word offset within a block
    key = rng.bytes(32)
    whole = _keystream_cryptography(key, block, 128)
    assert _keystream_randomgen(key, 16 * block + 6, 64) == whole[24:88]


def test_the_keystream_matches_rfc_8439s_test_vector() -> None:
    """RFC 8439 §2.3.2: key 00..1f, nonce 00:00:00:09:00:00:00:4a:00:00:00:00, block count 1."""
    key = bytes(range(32))
    words = (1).to_bytes(4, "little") + bytes.fromhex("000000090000004a00000000")
    expected = bytes.fromhex(
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")
    assert _keystream_randomgen(key, 16 * int.from_bytes(words, "little"), 64) == expected
    # and CsprngGenerator keys the same cipher: block 0 of key 00..1f
    g = CsprngGenerator(key)
    raw = g.bit_generator.random_raw(8).astype("<u8").tobytes()
    assert raw == _keystream_cryptography(key, 0, 64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_standard_normals_have_mean_0_variance_1_and_gaussian_tails(dtype: torch.dtype) -> None:
    g = _gen()
    z = torch.empty(N, dtype=dtype)
    draw.normal_(z, g)  # in place, as the Gaussian mechanisms draw
    z64 = z.to(torch.float64)
    assert abs(float(z64.mean())) < SE / math.sqrt(N)
    assert abs(float(z64.std()) - 1.0) < SE / math.sqrt(2 * N)
    tail = 2 * stats.norm.sf(3.0)  # P(|Z| > 3)
    assert abs(float((z64.abs() > 3).double().mean()) - tail) < SE * math.sqrt(tail * (1 - tail) / N)
    # drawn as a new tensor too (the engines' and the correlated streams' path)
    w = draw.randn(N, g, dtype=dtype).to(torch.float64)
    assert abs(float(w.mean())) < SE / math.sqrt(N) and abs(float(w.std()) - 1.0) < SE / math.sqrt(2 * N)
    _, p = stats.kstest(w[:100_000].numpy(), "norm")
    assert p > CHI2_LEVEL


@pytest.mark.parametrize("rate", [3.5, 1.0e6, MAX_POISSON_RATE])
def test_poisson_draws_have_mean_and_variance_rate(rate: float) -> None:
    n = N if rate < 1e9 else 200_000
    x = draw.poisson(torch.full((n,), rate, dtype=torch.float64), _gen())
    assert x.dtype == torch.float64 and bool((x == x.floor()).all())
    assert abs(float(x.mean()) - rate) < SE * math.sqrt(rate / n)
    # Var(sample variance) ≈ (μ4 − σ⁴)/n with μ4 = λ + 3λ² for Poisson
    assert abs(float(x.var()) - rate) < SE * math.sqrt((rate + 2 * rate * rate) / n)


@pytest.mark.parametrize("p", [0.2, 1e-3])
def test_coins_from_uniforms_have_the_asked_rate(p: float) -> None:
    u = draw.rand(N, _gen(), dtype=torch.float64)
    rate = float((u < p).double().mean())
    assert abs(rate - p) < SE * math.sqrt(p * (1 - p) / N)
    assert abs(float(u.mean()) - 0.5) < SE * math.sqrt(1 / 12 / N)


def test_the_poisson_samplers_coins_include_each_client_with_probability_q() -> None:
    g, q, clients, rounds = _gen(), 0.2, 1000, 1000
    sizes = [PoissonSampler(q).sample(clients, g).numel() for _ in range(rounds)]
    rate = sum(sizes) / (clients * rounds)
    assert abs(rate - q) < SE * math.sqrt(q * (1 - q) / (clients * rounds))


def test_uniform_integers_are_uniform() -> None:
    k = draw.randint(0, 10, N, _gen())
    counts = torch.bincount(k, minlength=10).numpy()
    chi2 = float(((counts - N / 10) ** 2 / (N / 10)).sum())
    assert chi2 < stats.chi2.ppf(1 - CHI2_LEVEL, 9)


def test_permutations_put_every_value_in_every_position_equally_often() -> None:
    g, n, m = _gen(), 8, 125_000  # 10^6 entries
    perms = torch.stack([draw.randperm(n, g) for _ in range(m)])
    counts = np.zeros((n, n))
    for pos in range(n):
        counts[:, pos] = torch.bincount(perms[:, pos], minlength=n).numpy()
    chi2 = float(((counts - m / n) ** 2 / (m / n)).sum())
    assert chi2 < stats.chi2.ppf(1 - CHI2_LEVEL, (n - 1) ** 2)
    # a fixed-size sample is a uniform K-subset: each client in with probability K/N
    sampler, rounds = FixedSizeSampler(3), 20_000
    hits = torch.zeros(10)
    for _ in range(rounds):
        hits[sampler.sample(10, g)] += 1
    chi2 = float(((hits - rounds * 0.3) ** 2 / (rounds * 0.3)).sum())
    assert chi2 < stats.chi2.ppf(1 - CHI2_LEVEL, 9)


def test_the_shufflers_permutation_from_chacha_gives_the_canonical_multisets() -> None:
    reports = [ClientReports(torch.arange(4), torch.tensor([0.5, -1.0, 2.0, 0.25]) * (k + 1)) for k in range(5)]
    with_chacha = Shuffler.shuffle(reports, 4, _gen())
    with_torch = Shuffler.shuffle(reports, 4, torch.Generator().manual_seed(3))
    assert torch.equal(with_chacha.support, with_torch.support) and torch.equal(with_chacha.counts, with_torch.counts)


@pytest.mark.parametrize("variance", [1.0e4, 2.2 * MAX_POISSON_RATE])
def test_skellam_shares_are_centred_with_the_asked_variance(variance: float) -> None:
    """Sk(μ) has mean 0, variance μ and fourth central moment 3μ² + μ; a variance above
    2·MAX_POISSON_RATE is drawn as a sum of parts."""
    n = N if variance < 1e9 else 200_000
    x = skellam_noise((n,), variance, _gen()).to(torch.float64)
    assert abs(float(x.mean())) < SE * math.sqrt(variance / n)
    assert abs(float(x.var()) - variance) < SE * math.sqrt((2 * variance**2 + variance) / n)


def test_skellam_shares_follow_the_skellam_pmf() -> None:
    """Sk(4) against scipy's pmf (Poisson(2) − Poisson(2)) by chi-square, |k| > 8 pooled."""
    x = skellam_noise((N,), 4.0, _gen())
    ks = np.arange(-8, 9)
    observed = np.array([float((x == k).sum()) for k in ks] + [float((x.abs() > 8).sum())])
    pmf = stats.skellam.pmf(ks, 2.0, 2.0)
    expected = N * np.append(pmf, 1 - pmf.sum())
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.ppf(1 - CHI2_LEVEL, len(observed) - 1)


def test_a_flower_clients_skellam_share_draws_from_chacha_too() -> None:
    from dpfl.runtime.flowerapps.distributed import skellam_share

    x = skellam_share(N, 900.0, _gen()).astype(np.float64)
    assert abs(float(x.mean())) < SE * math.sqrt(900.0 / N)
    assert abs(float(x.var()) - 900.0) < SE * math.sqrt((2 * 900.0**2 + 900.0) / N)


def test_the_two_point_randomizers_coins_from_chacha_have_the_realized_probability() -> None:
    x = torch.full((1, N), 0.3, dtype=torch.float64)
    out, _ = two_point_randomize(x, 0.0, 1.0, 1.0, _gen())
    _, high = two_point_values(0.0, 1.0, 1.0)
    p = float(two_point_probability_high(x[:, :1], 0.0, 1.0, 1.0))
    rate = float((out == high).double().mean())
    assert abs(rate - p) < SE * math.sqrt(p * (1 - p) / N)


def test_the_lattice_release_is_unbiased_on_the_lattice_with_the_priced_variance() -> None:
    g, n = _gen(), 200_000
    # little noise, so that a biased rounding (floor: 1/(3γ) off) would be seen: SE ≈ 2.2e-5
    m = LatticeGaussian(dim=1, clip_norm=1.0, noise_multiplier=0.01, scale=1024.0)
    x = 0.3 + 1.0 / (3 * m.scale)
    ints = m.release(torch.full((n, 1), x, dtype=torch.float64), [g] * n, g)
    values = m.values(ints)
    assert ints.dtype == torch.int64
    assert torch.equal(values * m.scale, ints.to(torch.float64))  # every value is an integer over γ
    spread = math.sqrt(m.variance + 0.25) / m.scale  # noise plus at most the rounding's variance 1/4
    assert abs(float(values.mean()) - x) < SE * spread / math.sqrt(n)
    # at x = 0 the rounding is exact (0 stays 0): the release is the noise alone, of variance μ = (σΔ2)²
    m = LatticeGaussian(dim=1, clip_norm=1.0, noise_multiplier=1.0, scale=1024.0)
    noise = m.release(torch.zeros(n, 1, dtype=torch.float64), [g] * n, g).to(torch.float64)
    mu = m.variance
    assert mu == pytest.approx(m.l2_sensitivity**2) and m.release_record().variance == mu
    assert abs(float(noise.mean())) < SE * math.sqrt(mu / n)
    assert abs(float(noise.var()) - mu) < SE * math.sqrt((2 * mu * mu + mu) / n)
