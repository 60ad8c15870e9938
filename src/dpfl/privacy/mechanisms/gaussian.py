"""Gaussian noise on a stacked cohort, with an explicit generator, and the DP event it causes.

Two ways to draw, both explicit about the stream:

* :func:`add_gaussian_noise` — one generator for the whole cohort; all K·P normals come from a
  single ``torch.randn(x.shape, generator=generator)`` call written into a preallocated buffer
  (``out``). This is the fast path (100 × 200k floats per round).
* :func:`add_gaussian_noise_per_client` — one generator per client, as the engines use so that
  the vectorized and the sequential engine produce the same numbers. Row k's noise is exactly
  ``torch.randn(x.shape[1:], generator=generators[k], dtype=x.dtype, device=x.device)``, i.e.
  what a sequential engine draws for client k alone (the same as calling
  :func:`add_gaussian_noise` on ``x[k:k+1]`` with ``generators[k]``).

The stream depends on dtype and device: float32 and float64 draws differ, and so do a CPU and a
GPU generator's. A generator draws on its own device: a CPU generator's noise for a tensor on a
GPU is drawn on the CPU and copied (:func:`~dpfl.privacy.mechanisms.rows.draws_on`). Noise std 0
returns x unchanged but still advances the generator, so streams stay aligned whatever the noise
level.

A generator is a torch generator or a ChaCha20 :class:`~dpfl.rng.CsprngGenerator`: the normals are
drawn by :func:`dpfl.privacy.mechanisms.draw.normal_` (the torch call above for a torch generator;
numpy's ``standard_normal`` on ChaCha20 bits otherwise).

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and its siblings
``rows`` and ``draw``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.draw import normal_
from dpfl.privacy.mechanisms.rows import for_rows
from dpfl.rng import NoiseGenerator

__all__ = ["add_gaussian_noise", "add_gaussian_noise_per_client"]


def _std_view(noise_std: float | Tensor, x: Tensor) -> float | Tensor:
    """Validate a scalar or ``[K]`` noise std; return a float or a ``[K, 1, ..., 1]`` tensor."""
    k = x.shape[0]
    if isinstance(noise_std, Tensor):
        std = noise_std.to(device=x.device, dtype=x.dtype)
        if std.dim() == 0:
            value = float(std)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"`noise_std` must be finite and >= 0. Found {value!r}.")
            return value
        if tuple(std.shape) != (k,):
            raise ConfigError(
                f"`noise_std` must be a scalar or have shape [K] = [{k}]. Found shape {tuple(std.shape)}."
            )
        ok = torch.isfinite(std) & (std >= 0)
        if not bool(ok.all()):
            raise ConfigError(
                f"`noise_std` must be finite and >= 0. Found {std[~ok][:5].tolist()}."
            )
        return std.reshape((k,) + (1,) * (x.dim() - 1))
    if isinstance(noise_std, bool) or not isinstance(noise_std, (int, float)):
        raise ConfigError(f"`noise_std` must be a float or a tensor. Found {noise_std!r}.")
    if not (math.isfinite(noise_std) and noise_std >= 0):
        raise ConfigError(f"`noise_std` must be finite and >= 0. Found {noise_std!r}.")
    return float(noise_std)


def _check_x(x: Tensor) -> None:
    if not x.is_floating_point() or x.dim() < 1:
        raise ConfigError(
            f"`x` must be a floating-point tensor [K, ...]. Found dtype {x.dtype}, shape {tuple(x.shape)}."
        )


def _buffer(x: Tensor, out: Tensor | None) -> Tensor:
    if out is None:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ConfigError(
            f"`out` must match x: shape {tuple(x.shape)}, dtype {x.dtype}, device {x.device}. "
            f"Found shape {tuple(out.shape)}, dtype {out.dtype}, device {out.device}."
        )
    if not out.is_contiguous():
        raise ConfigError("`out` must be contiguous.")
    if out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
        raise ConfigError(
            "`out` must not share memory with `x` (the noise is drawn into `out` first)."
        )
    return out


def _combine(x: Tensor, noise: Tensor, std: float | Tensor) -> Tensor:
    """noise ← x + std·noise in one pass, in place in the noise buffer."""
    if isinstance(std, Tensor):
        return torch.addcmul(x, noise, std, out=noise)
    return torch.add(x, noise, alpha=std, out=noise)


def add_gaussian_noise(
    x: Tensor, noise_std: float | Tensor, generator: NoiseGenerator, out: Tensor | None = None
) -> Tensor:
    """Return x + N(0, σ_k² I) for each client row, drawing all noise in one call.

    The standard normals are ``torch.randn(x.shape, generator=generator)`` written into ``out``
    (or a new buffer), then combined with x in one fused pass.

    Args:
        x: a floating tensor ``[K, ...]`` (not modified).
        noise_std: σ >= 0, a float or a tensor ``[K]`` (one std per client).
        generator: the only source of randomness.
        out: optional preallocated contiguous buffer like x (must not alias x); receives the
            result.

    Returns:
        the noised tensor (``out`` when given).

    References:
        000_3304bf6f36c753f8.txt, Algorithm 1 line 11; 003_c42e3eb46a620b42.txt, Algorithm 1
        lines 10 and 15; 002_2503fd7671e29121.txt, eq. 4.14–4.15; 004_32e0c8f847edac12.txt,
        Algorithm 1 LocalUpdate line 8.
    """
    _check_x(x)
    std = _std_view(noise_std, x)
    noise = _buffer(x, out)
    _draw(noise, generator)
    return _combine(x, noise, std)


def add_gaussian_noise_per_client(
    x: Tensor,
    noise_std: float | Tensor,
    generators: Sequence[NoiseGenerator],
    out: Tensor | None = None,
) -> Tensor:
    """Like :func:`add_gaussian_noise`, but row k's noise comes from ``generators[k]``.

    Row k's standard normals are exactly
    ``torch.randn(x.shape[1:], generator=generators[k], dtype=x.dtype, device=x.device)``, so a
    sequential engine that draws that for client k gets the same numbers.

    Args:
        x: a floating tensor ``[K, ...]``.
        noise_std: σ >= 0, a float or a tensor ``[K]``.
        generators: K generators, one per client row.
        out: optional preallocated contiguous buffer like x (must not alias x).

    Returns:
        the noised tensor (``out`` when given).

    References:
        as :func:`add_gaussian_noise`.
    """
    _check_x(x)
    if len(generators) != x.shape[0]:
        raise ConfigError(
            f"`generators` must hold one generator per client row: K = {x.shape[0]}. "
            f"Found {len(generators)}."
        )
    std = _std_view(noise_std, x)
    noise = _buffer(x, out)
    _draw_rows(noise, generators)
    return _combine(x, noise, std)


def _draw(out: Tensor, generator: NoiseGenerator) -> None:
    """``out`` ← standard normals from ``generator``, drawn on the generator's device."""
    normal_(out, generator)


def _draw_rows(noise: Tensor, generators: Sequence[NoiseGenerator]) -> None:
    """Row k ← standard normals from ``generators[k]``, rows split over torch's intra-op threads
    (:func:`dpfl.privacy.mechanisms.rows.for_rows`): every row gets exactly the numbers a
    sequential loop would give it."""
    def row(i: int) -> None:
        _draw(noise[i], generators[i])

    size = noise[0].numel() if noise.device.type == "cpu" and noise.shape[0] else 0
    for_rows(len(generators), row, size)
