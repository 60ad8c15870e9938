"""The noise draws' dispatch (dpfl.privacy.mechanisms.draw) and the ChaCha20 generator behind it.

A torch generator must get exactly the numbers of the torch call each mechanism always made (the
seeded runs and their golden numbers rest on it); a ChaCha20 generator gets numpy's draws as torch
tensors of the asked dtype and device. SeedSequence hands out ChaCha20 only for noise streams, a
fresh key each time.
"""

from __future__ import annotations

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms import draw
from dpfl.rng import NOISE_PURPOSES, CsprngGenerator, SeedSequence

KEY = bytes(range(32))


def _seeded() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_torch_generator_draws_exactly_the_torch_calls(dtype: torch.dtype) -> None:
    assert torch.equal(draw.randn((3, 5), _seeded(), dtype=dtype),
                       torch.randn((3, 5), generator=_seeded(), dtype=dtype))
    assert torch.equal(draw.rand(7, _seeded(), dtype=dtype), torch.rand(7, generator=_seeded(), dtype=dtype))
    out, want = torch.empty(4, 6, dtype=dtype), torch.empty(4, 6, dtype=dtype)
    draw.normal_(out, _seeded())
    torch.randn(want.shape, generator=_seeded(), out=want)
    assert torch.equal(out, want)
    draw.rand_(out, _seeded())
    torch.rand(want.shape, generator=_seeded(), dtype=dtype, out=want)
    assert torch.equal(out, want)
    rate = torch.full((50,), 12.5, dtype=torch.float64)
    assert torch.equal(draw.poisson(rate, _seeded()), torch.poisson(rate, generator=_seeded()))
    assert torch.equal(draw.randint(0, 9, (11,), _seeded()), torch.randint(0, 9, (11,), generator=_seeded()))
    assert torch.equal(draw.randperm(13, _seeded()), torch.randperm(13, generator=_seeded()))


def test_a_chacha_stream_is_a_function_of_its_key_and_fills_the_asked_dtype_and_shape() -> None:
    a, b = CsprngGenerator(KEY), CsprngGenerator(KEY)
    x = draw.randn((2, 3), a, dtype=torch.float64)
    assert x.dtype == torch.float64 and x.shape == (2, 3) and torch.equal(x, draw.randn((2, 3), b, dtype=torch.float64))
    assert not torch.equal(draw.randn((2, 3), a, dtype=torch.float64), x)  # the stream moves on
    assert draw.randn(4, a, dtype=torch.bfloat16).dtype == torch.bfloat16
    row = torch.zeros(3, 8)
    draw.normal_(row[1], a)  # a contiguous row of a buffer is drawn in place, the others untouched
    assert bool((row[1] != 0).all()) and not bool(row[0].any()) and not bool(row[2].any())
    strided = torch.zeros(8, 3).t()[0]
    draw.normal_(strided, a)
    assert bool((strided != 0).all())
    u = draw.rand(10_000, a, dtype=torch.float64)
    grid = u * 2.0**53  # numpy's float64 uniforms are on torch's grid k·2^-53
    assert torch.equal(grid, grid.floor()) and bool(((u >= 0) & (u < 1)).all())
    k = draw.randint(-3, 4, 1000, a)
    assert k.dtype == torch.int64 and int(k.min()) == -3 and int(k.max()) == 3
    p = draw.randperm(50, a)
    assert p.dtype == torch.int64 and sorted(p.tolist()) == list(range(50))
    counts = draw.poisson(torch.tensor([0.0, 3.0, 1e12], dtype=torch.float64), a)
    assert counts.dtype == torch.float64 and float(counts[0]) == 0.0 and abs(float(counts[2]) - 1e12) < 1e7


def test_chacha_refuses_reduced_rounds_and_malformed_keys() -> None:
    with pytest.raises(ConfigError, match="rounds=8"):
        CsprngGenerator(KEY, rounds=8)
    with pytest.raises(ConfigError, match="16 bytes"):
        CsprngGenerator(bytes(16))
    with pytest.raises(ConfigError, match=str(2**256)):
        CsprngGenerator(2**256)
    with pytest.raises(ConfigError, match="str"):
        CsprngGenerator("key")  # type: ignore[arg-type]
    assert int(CsprngGenerator(KEY).bit_generator.state["state"]["rounds"]) == 20
    assert "key" not in repr(CsprngGenerator(KEY)).lower() and KEY.hex() not in repr(CsprngGenerator(KEY))
    with pytest.raises(ConfigError, match="list"):
        draw.check_noise_generator([1, 2])
    with pytest.raises(ConfigError, match=r"\[-1\.0\]"):
        draw.poisson(torch.tensor([1.0, -1.0], dtype=torch.float64), CsprngGenerator(KEY))


def test_a_chacha_sequence_serves_noise_streams_with_fresh_keys_and_keeps_the_rest_seeded() -> None:
    s = SeedSequence(7, noise="chacha20")
    assert not s.reproducible_noise and SeedSequence(7).reproducible_noise
    g1, g2 = s.noise_generator(0, 3, "noise"), s.noise_generator(0, 3, "noise")
    assert isinstance(g1, CsprngGenerator) and isinstance(g2, CsprngGenerator)
    assert not torch.equal(draw.randn(8, g1), draw.randn(8, g2))  # the same stream key, fresh keys
    # batching, initialization and the partition stay the seeded torch streams
    assert torch.equal(torch.rand(4, generator=s.generator(2, 3, "batch")),
                       torch.rand(4, generator=SeedSequence(7).generator(2, 3, "batch")))
    with pytest.raises(ConfigError, match="'batch' is not a noise stream"):
        s.noise_generator(0, 3, "batch")
    assert NOISE_PURPOSES.isdisjoint({"batch", "init", "partition", "misc"})
    # the default sequence's noise streams are its torch streams, bit for bit
    plain = SeedSequence(7)
    assert torch.equal(torch.randn(5, generator=plain.noise_generator(1, 2, "noise")),
                       torch.randn(5, generator=plain.generator(1, 2, "noise")))
    secure = SeedSequence.secure_mode("chacha20")
    assert secure.secure and isinstance(secure.noise_generator(0, 1, "topup"), CsprngGenerator)
    assert secure.noise_source().startswith("chacha20")
    assert SeedSequence.secure_mode().noise_source().startswith("mt19937-os")
    assert plain.noise_source().startswith("seeded")
    with pytest.raises(ConfigError, match="'aes'"):
        SeedSequence.secure_mode("aes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'pcg'"):
        SeedSequence(1, noise="pcg")
