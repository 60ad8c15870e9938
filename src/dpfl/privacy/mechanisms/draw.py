"""The one place where noise, sampling coins and shuffles are drawn, from either kind of generator.

Every privacy-relevant draw of dpfl — Gaussian noise (central, local, DP-SGD, correlated), Skellam
shares (Poisson draws), rounding and sampling coins (uniforms), shuffles and fixed-size samples
(permutations) — goes through these functions. Each takes a
:data:`~dpfl.rng.NoiseGenerator`:

* a ``torch.Generator`` (seeded in simulation, MT19937 filled from ``os.urandom`` in a
  deployment): the function makes exactly the torch call the mechanisms always made (same shape,
  dtype, device, ``out``), so seeded runs draw the same numbers bit for bit;
* a :class:`~dpfl.rng.CsprngGenerator` (ChaCha20): numpy's sampler of the same distribution on
  the ChaCha20 bits, drawn on the CPU (straight into a contiguous CPU tensor of the draw's dtype
  where it can, else copied), returned as a torch tensor of the asked dtype on the asked device.

What the ChaCha20 path draws, per function (numpy 2's ``Generator``):

* :func:`normal_` / :func:`randn` — ``standard_normal`` (ziggurat) in float64, or in float32
  for a float32 tensor (other floating dtypes: float32, then cast);
* :func:`rand` / :func:`rand_` — ``random``: float64 on the grid k·2^-53 — the grid of torch's
  float64 ``rand``, on which the two-point randomizer's exactness argument rests
  (:mod:`.two_point`) — or float32 on the grid k·2^-24;
* :func:`poisson` — ``poisson`` (PTRS, exact up to floating point for the rates used:
  :data:`dpfl.privacy.mechanisms.integer.MAX_POISSON_RATE`), as float64 like ``torch.poisson``;
* :func:`randint` — ``integers`` (unbiased: Lemire's bounded method);
* :func:`randperm` — ``permutation`` (Fisher–Yates on unbiased bounded integers), int64.

The two kinds draw different numbers (a ChaCha20 stream is never reproducible: a fresh key per
stream), with the same laws: ``tests/statistical/test_csprng.py`` checks the moments of each.
The draws are still floating-point numbers where the mechanism is real-valued: the release that
is safe against the low-order-bit attacks is :mod:`.lattice`.

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and its sibling
``rows``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.rows import draws_on
from dpfl.rng import CsprngGenerator, NoiseGenerator

__all__ = [
    "check_noise_generator",
    "is_csprng",
    "normal_",
    "poisson",
    "rand",
    "rand_",
    "randint",
    "randn",
    "randperm",
]

_NUMPY_FLOATS = (torch.float64, torch.float32)  # the dtypes numpy draws in directly


def is_csprng(generator: NoiseGenerator) -> bool:
    """Whether ``generator`` is a ChaCha20 :class:`~dpfl.rng.CsprngGenerator`."""
    return isinstance(generator, CsprngGenerator)


def check_noise_generator(generator: object) -> NoiseGenerator:
    """``generator`` itself if it is a torch generator or a ChaCha20 one.

    Raises:
        ConfigError: anything else (dpfl never draws from a global RNG), naming its type.
    """
    if not isinstance(generator, (torch.Generator, CsprngGenerator)):
        raise ConfigError(f"`generator` must be a torch.Generator or a dpfl.rng.CsprngGenerator (dpfl never uses a "
                          f"global RNG). Found {type(generator).__name__}.")
    return generator


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)


def _as_tensor(values: np.ndarray, dtype: torch.dtype, device: str | torch.device | None) -> Tensor:
    t = torch.from_numpy(np.ascontiguousarray(values))
    return t.to(device=device if device is not None else "cpu", dtype=dtype)


def _fills_in_place(out: Tensor) -> bool:
    """Whether numpy can draw straight into ``out`` (a contiguous CPU float32/float64 tensor)."""
    return out.device.type == "cpu" and out.dtype in _NUMPY_FLOATS and out.is_contiguous()


def normal_(out: Tensor, generator: NoiseGenerator) -> Tensor:
    """``out`` ← standard normals from ``generator``; returns ``out``.

    A torch generator draws on its own device (``torch.randn(out.shape, generator=..., out=out)``
    when it is ``out``'s, else drawn there in ``out``'s dtype and copied), as the Gaussian
    mechanisms always drew.
    """
    if isinstance(generator, CsprngGenerator):
        return _fill(out, generator, "standard_normal", randn)
    if draws_on(generator, out):
        torch.randn(out.shape, generator=generator, out=out)
    else:
        out.copy_(torch.randn(out.shape, generator=generator, dtype=out.dtype, device=generator.device))
    return out


def randn(shape: int | Sequence[int], generator: NoiseGenerator, *, dtype: torch.dtype = torch.float32,
          device: str | torch.device | None = None) -> Tensor:
    """Standard normals of ``shape``: ``torch.randn(shape, generator=generator, dtype=dtype,
    device=device)`` (``device`` defaults to the generator's), or ChaCha20's on the CPU, moved to
    ``device``."""
    size = _shape(shape)
    if isinstance(generator, CsprngGenerator):
        draws = generator.numpy.standard_normal(size, dtype=np.float64 if dtype == torch.float64 else np.float32)
        return _as_tensor(draws, dtype, device)
    return torch.randn(size, generator=generator, dtype=dtype,
                       device=generator.device if device is None else device)


def rand(shape: int | Sequence[int], generator: NoiseGenerator, *, dtype: torch.dtype = torch.float64,
         device: str | torch.device | None = None) -> Tensor:
    """Uniforms on [0, 1) of ``shape`` (float64 on the grid k·2^-53, as torch's):
    ``torch.rand(shape, generator=generator, dtype=dtype, device=device)`` (``device`` defaults
    to the generator's), or ChaCha20's on the CPU, moved to ``device``."""
    size = _shape(shape)
    if isinstance(generator, CsprngGenerator):
        uniforms = generator.numpy.random(size, dtype=np.float64 if dtype == torch.float64 else np.float32)
        return _as_tensor(uniforms, dtype, device)
    return torch.rand(size, generator=generator, dtype=dtype, device=generator.device if device is None else device)


def rand_(out: Tensor, generator: NoiseGenerator) -> Tensor:
    """``out`` ← uniforms on [0, 1): ``torch.rand(out.shape, generator=generator, dtype=out.dtype,
    out=out)`` (``out`` on the generator's device), or ChaCha20's; returns ``out``."""
    if isinstance(generator, CsprngGenerator):
        return _fill(out, generator, "random", rand)
    return torch.rand(out.shape, generator=generator, dtype=out.dtype, out=out)


def _fill(out: Tensor, generator: CsprngGenerator, sampler: str,
          fresh: Callable[..., Tensor]) -> Tensor:
    """``out`` ← ChaCha20 draws of numpy's ``sampler`` (``standard_normal`` or ``random``): in place
    where ``out`` is a CPU float tensor numpy can fill, else drawn by ``fresh`` and copied."""
    if _fills_in_place(out):
        arr = out.numpy()
        getattr(generator.numpy, sampler)(dtype=arr.dtype, out=arr)
    else:
        out.copy_(fresh(out.shape, generator, dtype=out.dtype))
    return out


def poisson(rate: Tensor, generator: NoiseGenerator) -> Tensor:
    """Poisson(rate) per entry, float64 like ``torch.poisson(rate, generator=generator)`` (the torch
    path, on the rate's device), or ChaCha20's numpy ``poisson`` of the rates, on the rate's device.

    Raises:
        ConfigError: (ChaCha20) a negative or non-finite rate.
    """
    if isinstance(generator, CsprngGenerator):
        lam = rate.detach().to("cpu", torch.float64).numpy()
        bad = ~(np.isfinite(lam) & (lam >= 0))
        if bool(bad.any()):
            raise ConfigError(f"a Poisson rate must be finite and >= 0. Found {lam[bad][:5].tolist()}.")
        draws = generator.numpy.poisson(lam)
        return _as_tensor(np.asarray(draws, dtype=np.float64), rate.dtype, rate.device)
    return torch.poisson(rate, generator=generator)


def randint(low: int, high: int, shape: int | Sequence[int], generator: NoiseGenerator, *,
            device: str | torch.device | None = None) -> Tensor:
    """Uniform integers in [low, high), int64: ``torch.randint(low, high, shape, generator=generator,
    device=device)`` (``device`` defaults to the generator's), or ChaCha20's ``integers``."""
    size = _shape(shape)
    if isinstance(generator, CsprngGenerator):
        if high <= low:
            raise ConfigError(f"randint needs low < high. Found low={low}, high={high}.")
        return _as_tensor(generator.numpy.integers(low, high, size=size, dtype=np.int64), torch.int64, device)
    return torch.randint(low, high, size, generator=generator, device=generator.device if device is None else device)


def randperm(n: int, generator: NoiseGenerator, *, device: str | torch.device | None = None) -> Tensor:
    """A uniformly random permutation of 0..n−1, int64: ``torch.randperm(n, generator=generator,
    device=device)`` (``device`` defaults to the generator's), or ChaCha20's ``permutation``."""
    if isinstance(generator, CsprngGenerator):
        return _as_tensor(generator.numpy.permutation(int(n)).astype(np.int64), torch.int64, device)
    return torch.randperm(int(n), generator=generator, device=generator.device if device is None else device)
