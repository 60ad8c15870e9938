"""A differentially private agreement on per-layer ranges: noisy log2 max|w| reports, averaged.

001 §3.3 ("Adaptive Range Setting") has the clients agree on each layer's range [c − r, c + r]
through an encrypted min–max over their trained local models; the agreed bounds are then known
to every client and the server, and the exact min–max is a deterministic function of the
clients' data (not DP at all). This module is dpfl's substitute: each client releases, per layer
l = 1..L, a Gaussian-noised clipped log2 of its largest absolute weight,

    m_kl = max |w| over the finite weights of layer l of client k's model,
    v_kl = clip(log2 m_kl, [log2 r_min, log2 r_max])          (m_kl = 0 or none finite: log2 r_min)
    report_kl = v_kl + N(0, σ²),   σ = z·Δ,   Δ = log2(r_max / r_min)·sqrt(L),

and the agreed radius of layer l is r_l = s·2^(mean_k report_kl), clamped to [r_min, r_max]
(s = a public scale). Δ is the L2 sensitivity of the clipped L-vector (v_k1..v_kL) under
replace-one — any client input against any other, i.e. local DP: each coordinate moves by at
most log2(r_max / r_min). One client's report is therefore the Gaussian mechanism with noise
multiplier z = σ/Δ (:func:`log_range_event`), whatever the other clients report; the agreed radii
are a post-processing of the reports.

The agreed r_l is a DP estimate of a *typical* client's max |w| (a geometric mean), not the
cohort's exact max: weights beyond it are clipped by the randomizer that uses it.

Streams. Client k's noise is ``torch.randn(L, generator=generators[k], dtype=torch.float64)``:
row k depends only on x[k] and its own generator.

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and its sibling
``draw`` (where the noise is drawn, from a torch or a ChaCha20 generator).

References:
    001_8ad797a147f2b989.txt, §3.3 (adaptive range setting, encrypted min–max), §5 (c = 0,
    r from each layer's weights); the Gaussian mechanism (Dwork & Roth 2014, Thm A.1; accounted
    by dp_accounting's ``GaussianDpEvent``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting
import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.draw import randn
from dpfl.rng import NoiseGenerator

__all__ = [
    "agree_log_ranges",
    "layer_log_max_abs",
    "log_range_event",
    "log_range_reports",
    "log_range_sensitivity",
]


def _bounds(min_radius: float, max_radius: float) -> tuple[float, float]:
    for name, value in (("min_radius", min_radius), ("max_radius", max_radius)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ConfigError(f"`{name}` must be a finite number > 0. Found {value!r}.")
    if not max_radius > min_radius:
        raise ConfigError(f"`max_radius` ({max_radius!r}) must be larger than `min_radius` ({min_radius!r}).")
    return math.log2(min_radius), math.log2(max_radius)


def log_range_sensitivity(min_radius: float, max_radius: float, num_layers: int) -> float:
    """Δ = log2(r_max / r_min)·sqrt(L): L2 sensitivity of the clipped log2 max|w| vector (replace-one).

    Args:
        min_radius: r_min > 0.
        max_radius: r_max > r_min.
        num_layers: L >= 1.

    Returns:
        Δ.
    """
    lo, hi = _bounds(min_radius, max_radius)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ConfigError(f"`num_layers` must be a positive integer. Found {num_layers!r}.")
    return (hi - lo) * math.sqrt(num_layers)


def layer_log_max_abs(x: Tensor, layer_sizes: Sequence[int], min_radius: float, max_radius: float) -> Tensor:
    """v [K, L]: per client and layer, log2 of the largest finite |w|, clipped to [log2 r_min, log2 r_max].

    Layers are consecutive blocks of ``layer_sizes`` columns of x. Non-finite weights are
    ignored; a layer with no finite non-zero weight gives log2 r_min.

    Args:
        x: local models [K, P] (not modified).
        layer_sizes: sizes of the L layers (sum P).
        min_radius: r_min.
        max_radius: r_max.

    Returns:
        float64 tensor [K, L].
    """
    lo, hi = _bounds(min_radius, max_radius)
    if not x.is_floating_point() or x.dim() != 2:
        raise ConfigError(f"`x` must be a floating tensor [K, P]. Found dtype {x.dtype}, shape {tuple(x.shape)}.")
    sizes = [int(s) for s in layer_sizes]
    if not sizes or any(s < 1 for s in sizes) or sum(sizes) != x.shape[1]:
        raise ConfigError(f"`layer_sizes` must be positive and sum to P = {x.shape[1]}. Found {sizes[:8]}.")
    a = x.to(torch.float64).abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros((), dtype=torch.float64, device=a.device))
    if x.shape[0] == 0:
        return torch.empty(0, len(sizes), dtype=torch.float64, device=x.device)
    cols = [part.amax(dim=1) for part in torch.split(a, sizes, dim=1)]
    m = torch.stack(cols, dim=1)
    return torch.log2(m).clamp_(lo, hi)  # log2(0) = -inf clamps to log2 r_min


def log_range_reports(
    x: Tensor,
    layer_sizes: Sequence[int],
    min_radius: float,
    max_radius: float,
    noise_std: float,
    generators: Sequence[NoiseGenerator],
) -> Tensor:
    """Each client's noisy report [K, L]: :func:`layer_log_max_abs` + N(0, σ² I_L) from its own generator.

    Args:
        x: local models [K, P].
        layer_sizes: sizes of the L layers.
        min_radius: r_min.
        max_radius: r_max.
        noise_std: σ >= 0 (σ = z·Δ with Δ = :func:`log_range_sensitivity`).
        generators: one per row of x.

    Returns:
        float64 tensor [K, L].
    """
    if isinstance(noise_std, bool) or not isinstance(noise_std, (int, float)) or not (
        math.isfinite(noise_std) and noise_std >= 0
    ):
        raise ConfigError(f"`noise_std` must be finite and >= 0. Found {noise_std!r}.")
    v = layer_log_max_abs(x, layer_sizes, min_radius, max_radius)
    if len(generators) != v.shape[0]:
        raise ConfigError(f"need one generator per client: {v.shape[0]} rows, {len(generators)} generators.")
    for k, gen in enumerate(generators):
        noise = randn(v.shape[1], gen, dtype=torch.float64)  # on the generator's device
        v[k].add_(noise.to(v.device), alpha=float(noise_std))
    return v


def agree_log_ranges(reports: Tensor, range_scale: float, min_radius: float, max_radius: float) -> Tensor:
    """Agreed radii [L]: r_l = s·2^(mean_k report_kl), clamped to [r_min, r_max].

    Args:
        reports: the cohort's reports [K, L] (K >= 1).
        range_scale: s > 0.
        min_radius: r_min.
        max_radius: r_max.

    Returns:
        float64 tensor [L].
    """
    _bounds(min_radius, max_radius)
    if reports.dim() != 2 or reports.shape[0] < 1:
        raise ConfigError(f"`reports` must be [K, L] with K >= 1. Found shape {tuple(reports.shape)}.")
    if not (math.isfinite(range_scale) and range_scale > 0):
        raise ConfigError(f"`range_scale` must be finite and > 0. Found {range_scale!r}.")
    mean = reports.to(torch.float64).mean(dim=0)
    return (float(range_scale) * torch.exp2(mean)).clamp_(float(min_radius), float(max_radius))


def log_range_event(noise_std: float, sensitivity: float) -> dp_accounting.DpEvent:
    """One client's report as a DP event: ``GaussianDpEvent(σ/Δ)`` (replace-one, local DP).

    Args:
        noise_std: σ > 0.
        sensitivity: Δ > 0 (:func:`log_range_sensitivity`).
    """
    for name, value in (("noise_std", noise_std), ("sensitivity", sensitivity)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ConfigError(f"`{name}` must be a finite number > 0. Found {value!r}.")
    return dp_accounting.GaussianDpEvent(noise_multiplier=float(noise_std) / float(sensitivity))
