"""How the public's view of a sampled round is priced: amplified, shared, or per participant.

A broadcast ``Σ_{j∈P} w_j(P) x̃_j + n_s`` over a client sample P may be amplified by the sampling
only when the premise of the amplification theorem holds: swapping the protected client for any
other client (sampling without replacement, replace-one) or adding it (Poisson, add/remove)
moves the broadcast by at most the sensitivity the release states, with the same noise. That
holds when the clients are **interchangeable** — the same weight rule with equal sizes (or uniform
weights), the same noise and the same sensitivity for every client — and the privacy unit is the
**client**: with a record-level unit (UDP), a cohort without the client consists of other clients'
whole models, so sampling clients does not amplify a record's guarantee. With unequal sizes or
budgets the swapped pair's Gaussians differ in mean *and* variance, and pricing the worst
cohort's multiplier is not enough (a Monte Carlo of the privacy loss breaks it).

Otherwise the broadcast is charged **per participant** at the cohort actually drawn (weight
w_k(P)·Δ_k against the cohort's noise), unamplified: the statement for an observer who knows the
cohort, valid a fortiori when it does not. Full participation needs neither: the one cohort is
every client.

:func:`worst_cohort_multipliers` gives, per client, the smallest multiplier over every cohort of
a size that contains it — a price fixed before the run (the Rényi filter's budget of CRD).

This module imports nothing from dpfl except :mod:`dpfl.errors`.

References:
    000_3304bf6f36c753f8.txt eq. 2; 002_2503fd7671e29121.txt eq. 3.2, 4.7; 003_c42e3eb46a620b42.txt
    eq. 1; Balle, Barthe, Gaboardi 2018 (amplification by subsampling via couplings); Wang, Balle,
    Kasiviswanathan 2019 (sampling without replacement, replace-one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import SCHEMA_KINDS

__all__ = ["BroadcastMode", "Weighting", "broadcast_mode", "interchangeable", "worst_cohort_multipliers"]

Weighting = Literal["samples", "uniform"]
BroadcastMode = Literal["shared", "amplified", "per_client"]


def interchangeable(*per_client: Sequence[float] | None, rel: float = 1e-12) -> bool:
    """Whether every given per-client sequence is constant (None: not a per-client quantity)."""
    for values in per_client:
        if values is None:
            continue
        arr = np.asarray(values, dtype=np.float64)
        if arr.size and not np.allclose(arr, arr.flat[0], rtol=rel, atol=0.0):
            return False
    return True


def broadcast_mode(sampling: Mapping[str, Any], relation: str, privacy_unit: str,
                   clients_interchangeable: bool) -> BroadcastMode:
    """How the public's view of a round is recorded (see the module docstring).

    * "shared" — full participation: one broadcast about everybody, charged to every client;
    * "amplified" — a secret sample of interchangeable clients, client-level unit, and a sampling
      scheme the accountant amplifies under this relation (fixed size with replace-one, Poisson
      with add/remove): one broadcast amplified by the sampler's event;
    * "per_client" — otherwise: each participant charged at the drawn cohort, unamplified.
    """
    kind = sampling.get("kind")
    if kind == "all":
        return "shared"
    if kind in SCHEMA_KINDS:  # a participation schema: the public is told nothing it can be amplified by
        return "per_client"
    if kind not in ("fixed_size", "poisson"):
        raise ConfigError(f"unknown sampling kind {kind!r}: expected 'all', 'fixed_size' or 'poisson'.")
    supported = (kind, relation) in (("fixed_size", "replace_one"), ("poisson", "add_remove"))
    if privacy_unit == "client" and clients_interchangeable and supported:
        return "amplified"
    return "per_client"


def _smallest_others_sum(values: np.ndarray, count: int) -> np.ndarray:
    """For every k: the sum of the ``count`` smallest entries of ``values`` other than k's."""
    n = values.shape[0]
    if count <= 0:
        return np.zeros(n)
    order = np.argsort(values, kind="stable")
    base = float(values[order[:count]].sum())
    out = np.full(n, base)
    inside = order[:count]
    out[inside] = base - values[inside] + values[order[count]]  # count <= n - 1
    return out


def worst_cohort_multipliers(
    *,
    cohort_size: int,
    noise_stds: Sequence[float],
    sensitivities: Sequence[float],
    weighting: Weighting,
    sizes: Sequence[float] | None = None,
    server_noise_std: float = 0.0,
) -> np.ndarray:
    """Per client k, a lower bound on ``s(P) / (w_k(P) Δ_k)`` over every cohort P ∋ k of
    ``cohort_size`` (the broadcast's noise over client k's shift).

    With weights by samples ``z_k(P)² = (Σ_{j∈P} n_j² σ_j² + σ_s² (Σ_P n)²) / (n_k Δ_k)²``, with
    uniform weights ``(Σ_{j∈P} σ_j² + σ_s² |P|²) / Δ_k²``; each sum is smallest over the
    ``cohort_size − 1`` other clients with the smallest terms, minimized separately (a valid
    lower bound, exact when σ_s = 0 or the σ_j are equal). Both grow with every client added, so
    a smaller cohort is worse: pass the smallest size a round can have.

    >>> z = worst_cohort_multipliers(cohort_size=2, noise_stds=[1.0] * 3, sensitivities=[1.0] * 3,
    ...                              weighting="samples", sizes=[1, 1, 2])
    >>> [round(float(v), 4) for v in z]   # client 2 with a 1: w = 2/3, s = sqrt(5)/3
    [2.2361, 2.2361, 1.118]
    """
    sig = np.asarray(noise_stds, dtype=np.float64)
    sens = np.asarray(sensitivities, dtype=np.float64)
    n = sig.shape[0]
    if sens.shape != (n,) or n == 0:
        raise ConfigError(f"noise stds and sensitivities need one entry per client. Found {n} and {sens.shape[0]}.")
    if isinstance(cohort_size, bool) or not 1 <= int(cohort_size) <= n:
        raise ConfigError(f"`cohort_size` must be in [1, {n}]. Found {cohort_size!r}.")
    if np.any(~np.isfinite(sig)) or np.any(sig < 0) or np.any(~np.isfinite(sens)) or np.any(sens < 0):
        raise ConfigError("noise stds and sensitivities must be finite and >= 0.")
    if not (math.isfinite(server_noise_std) and server_noise_std >= 0):
        raise ConfigError(f"`server_noise_std` must be finite and >= 0. Found {server_noise_std!r}.")
    k = int(cohort_size)
    if weighting == "samples":
        if sizes is None:
            raise ConfigError("weights by samples need the clients' sizes.")
        nj = np.asarray(sizes, dtype=np.float64)
        if nj.shape != (n,) or np.any(nj <= 0):
            raise ConfigError(f"`sizes` must be {n} positive numbers.")
        total = nj + _smallest_others_sum(nj, k - 1)
    elif weighting == "uniform":
        nj = np.ones(n)
        total = np.full(n, float(k))
    else:
        raise ConfigError(f"`weighting` must be 'samples' or 'uniform'. Found {weighting!r}.")
    terms = (nj * sig) ** 2
    noise_sq = terms + _smallest_others_sum(terms, k - 1) + (server_noise_std * total) ** 2
    shift = nj * sens
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(shift > 0, np.sqrt(noise_sq) / np.where(shift > 0, shift, 1.0), np.inf)
