"""Shared by the strategies: the (k, b)-min-separation schema, two sensitivity programs, stream checks.

Schema (Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization", arXiv 2306.08153,
"b-min-sep-participation"): a client takes part in at most k rounds of 0..n−1, any two of them at
least b apart (b = 1: any rounds). At most ⌈n/b⌉ rounds fit (0, b, 2b, …), so k is capped there
(:func:`participations_that_fit`, jax-privacy's ``minsep_true_max_participations``). The squared
sensitivity of a pattern S is Σ_{i,j∈S} |G_ij| with G = CᵀC (base.py; 2306.08153's absolute-value
bound, its eq. (5) as cited by jax-privacy's ``fixed_epoch_sensitivity_for_X``).

* :func:`vec_sens` is 2306.08153's Algorithm 3 (VecSens): max over patterns S of Σ_{i∈S} x_i, by
  the dynamic program F[i, c] = max(x_i + F[i + b, c − 1], F[i + 1, c]) run as c sweeps of a
  reversed cumulative max (vectorized over rows here). With orthogonal participations
  (G_ij = 0 whenever |i − j| >= b) the sensitivity² is exactly VecSens of diag(G).
* :func:`minsep_upper_bound_sq` is 2306.08153's Algorithm 4 (an upper bound for any G), tightened:
  for each row i, r_i = |G_ii| + max over patterns S ∌ i that stay b away from i of
  Σ_{j∈S} |G_ij| (at most k − 1 of them), then the bound is VecSens(r). For the worst pattern S*,
  every i ∈ S* has r_i >= Σ_{j∈S*} |G_ij| (S* \\ {i} is one of the patterns row i maximizes over),
  so VecSens(r) >= Σ_{i∈S*} Σ_{j∈S*} |G_ij|: a valid bound, never above Algorithm 4's (whose rows
  maximize over every pattern, not only those through i).

Streams: :func:`check_num_params`, :func:`check_round` (rounds in order, below n) and
:func:`check_generator` (a torch.Generator on the stream's device, or a ChaCha20
:class:`~dpfl.rng.CsprngGenerator`, whose draws are copied to it) are the
argument checks every :class:`NoiseStream` shares; the streams draw their normals through
:func:`dpfl.privacy.mechanisms.draw.randn`.

This module imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.rng`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from dpfl.errors import ConfigError
from dpfl.rng import CsprngGenerator, NoiseGenerator

__all__ = [
    "check_generator",
    "check_num_params",
    "check_round",
    "check_schema",
    "minsep_upper_bound_sq",
    "participations_that_fit",
    "vec_sens",
]


def participations_that_fit(n: int, min_separation: int) -> int:
    """⌈n / b⌉: the most rounds of 0..n−1 that are pairwise at least b apart."""
    return -(-n // min_separation)


def check_schema(min_separation: object, max_participations: object, n: int) -> tuple[int, int]:
    """(b, k) validated (ints >= 1, ConfigError naming the value otherwise), k capped at ⌈n/b⌉."""
    for name, value in (("min_separation", min_separation), ("max_participations", max_participations)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
            raise ConfigError(f"`{name}` must be an integer >= 1. Found {value!r}.")
    b = int(min_separation)  # type: ignore[call-overload]
    k = min(int(max_participations), participations_that_fit(n, b))  # type: ignore[call-overload]
    return b, k


def vec_sens(x: np.ndarray, min_separation: int, max_participations: int) -> np.ndarray:
    """max over patterns S (<= k indices, pairwise >= b apart) of Σ_{i∈S} x[..., i], per row.

    ``x`` is ``[..., L]`` (``-inf`` marks an index that may not be chosen); the empty pattern
    counts, so the result is >= 0. Algorithm 3 of 2306.08153, as in jax-privacy's
    ``max_participation_for_linear_fn``, vectorized over the leading axes.
    """
    x = np.asarray(x, dtype=np.float64)
    length = x.shape[-1]
    b = int(min_separation)
    f = np.zeros(x.shape[:-1] + (length + b,))
    for _ in range(int(max_participations)):
        # f[i] <- x[i] + (best of at most c − 1 picks in [i + b, L)), then the best start >= i
        f[..., :length] = x + f[..., b : b + length]
        f = np.flip(np.maximum.accumulate(np.flip(f, axis=-1), axis=-1), axis=-1)
    return np.asarray(f[..., 0])


def minsep_upper_bound_sq(
    abs_rows: Callable[[int, int], np.ndarray],
    n: int,
    half_width: int,
    min_separation: int,
    max_participations: int,
    *,
    chunk: int | None = None,
) -> float:
    """The tightened Algorithm 4 bound (module docstring) on max_S Σ_{i,j∈S} |G_ij|.

    ``abs_rows(i0, i1)`` returns |G| rows i0..i1−1 as windows ``[i1 − i0, 2·half_width + 1]``:
    entry [r, u] is |G[i0 + r, i0 + r − half_width + u]| (anything outside 0..n−1 is ignored);
    entries of G farther than ``half_width`` from the diagonal must be 0 (``half_width = n − 1``
    for a dense G). Rows are processed ``chunk`` at a time (default: about 4M window entries at once).
    Time O(n·width·k): for a dense G, O(n²·k).
    """
    b, k = int(min_separation), int(max_participations)
    width = 2 * half_width + 1
    if chunk is None:
        chunk = max(1, min(n, 4_000_000 // width))
    offsets = np.arange(width) - half_width  # j − i along the window
    r = np.empty(n)
    for i0 in range(0, n, chunk):
        i1 = min(n, i0 + chunk)
        window = np.array(abs_rows(i0, i1), dtype=np.float64)
        if window.shape != (i1 - i0, width):
            raise ValueError(f"abs_rows returned shape {window.shape}, expected {(i1 - i0, width)}")
        rows = np.arange(i0, i1)
        diag = window[:, half_width].copy()
        cols = rows[:, None] + offsets[None, :]
        blocked = (cols < 0) | (cols >= n) | (np.abs(offsets)[None, :] < b)
        window[blocked] = -np.inf
        r[i0:i1] = diag + (vec_sens(window, b, k - 1) if k > 1 else 0.0)
    return float(vec_sens(r, b, k))


def check_num_params(num_params: object) -> int:
    """``num_params`` as an int >= 1, or a ConfigError naming it."""
    if isinstance(num_params, bool) or not isinstance(num_params, (int, np.integer)) or int(num_params) < 1:
        raise ConfigError(f"`num_params` must be an integer >= 1. Found {num_params!r}.")
    return int(num_params)


def check_round(next_round: int, round_idx: object, n: int) -> int:
    """The round ``next`` was called for: it must be ``next_round`` (rounds in order) and < n."""
    if isinstance(round_idx, bool) or not isinstance(round_idx, (int, np.integer)):
        raise ConfigError(f"`round_idx` must be an integer. Found {round_idx!r}.")
    t = int(round_idx)
    if not 0 <= t < n:
        raise ConfigError(f"`round_idx` {t} is outside the strategy's rounds 0..{n - 1}.")
    if t != next_round:
        raise ConfigError(f"noise stream called for round {t}, expected round {next_round} (rounds go in order).")
    return t


def check_generator(generator: object, device: torch.device) -> NoiseGenerator:
    """``generator`` must be a torch.Generator on the stream's device, or a ChaCha20 generator
    (it draws on the CPU and the draw is copied to the stream's device)."""
    if isinstance(generator, CsprngGenerator):
        return generator
    if not isinstance(generator, torch.Generator):
        raise ConfigError("`generator` must be a torch.Generator or a dpfl.rng.CsprngGenerator. "
                          f"Found {type(generator).__name__}.")
    if torch.device(generator.device).type != device.type:
        raise ConfigError(f"`generator` is on {generator.device}, the stream draws on {device}.")
    return generator
