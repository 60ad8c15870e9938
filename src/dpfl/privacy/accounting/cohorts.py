"""The worst cohort: pricing a broadcast whose cohort the public does not know.

A weighted aggregate ``Σ_{j∈P} w_j(P) x̃_j + n_s`` over a secret sample P is amplified by the
sampling only if *every* cohort that could contain the protected client is priced: conditioned
on P ∋ k, the broadcast is a Gaussian with shift ``w_k(P)·Δ_k`` (replace-one, sizes public)
and noise ``s(P) = sqrt(Σ_{j∈P} w_j(P)² σ_j² + σ_s²)``. Each conditional pair is dominated by
the Gaussian pair of the smallest multiplier ``z = min_{k, P∋k} s(P) / (w_k(P) Δ_k)`` (a pair
with a larger multiplier is a post-processing of it), so the sampled event of that multiplier is
a valid bound for the mixture. Pricing the cohort that happened to be drawn instead (its
``max_k w_k Δ_k``) is not: a client with a large weight that was never drawn would still be
protected only by the drawn cohort's weights.

The multiplier needs no data: sizes, noise stds and sensitivities are fixed before the round.
For weights by samples (``w_j = n_j / Σ_P n``, 000 eq. 2, 003 eq. 1, 002 eq. 3.2)

    z_k(P)² = (Σ_{j∈P} n_j² σ_j² + σ_s² (Σ_P n)²) / (n_k Δ_k)²,

and for uniform weights (``w_j = 1/|P|``) ``z_k(P)² = (Σ_{j∈P} σ_j² + σ_s² |P|²) / Δ_k²``. Both
grow with every client added to P, so the smallest cohort size allowed is the worst (1 under
Poisson sampling), and for a fixed size K each sum is smallest over the K − 1 *other* clients
with the smallest terms. The two sums are minimized separately (a lower bound on z, hence a
valid, possibly pessimistic, price; exact when σ_s = 0 or the σ_j are equal).

This module imports nothing from dpfl except :mod:`dpfl.errors`.

References:
    000_3304bf6f36c753f8.txt eq. 2; 002_2503fd7671e29121.txt eq. 3.2, 4.7; 003_c42e3eb46a620b42.txt
    eq. 1; Balle, Barthe, Gaboardi 2018 (amplification by subsampling via couplings); Zhu, Dong,
    Wang 2022 (dominating pairs of subsampled mechanisms).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dpfl.errors import ConfigError

__all__ = ["BroadcastBound", "Weighting", "cohort_size_range", "secret_cohort_size", "worst_cohort_broadcast"]

Weighting = Literal["samples", "uniform"]


@dataclass(frozen=True)
class BroadcastBound:
    """The broadcast of the worst cohort: its noise std and the protected client's shift.

    Attributes:
        noise_std: s(P*) of the worst (client, cohort) pair.
        sensitivity: w_k(P*)·Δ_k of that pair.
        client: the client k whose cohort is the worst.
        cohort_size: |P*|.
    """

    noise_std: float
    sensitivity: float
    client: int
    cohort_size: int

    @property
    def noise_multiplier(self) -> float:
        """s / (w Δ): the smallest multiplier over every cohort (inf when nothing is sensitive)."""
        if self.sensitivity == 0:
            return math.inf
        return self.noise_std / self.sensitivity


def cohort_size_range(sampling: Mapping[str, Any], num_clients: int) -> tuple[int, int]:
    """(smallest, largest) cohort a sampler description allows that contains a given client."""
    kind = sampling.get("kind")
    if kind == "all":
        return num_clients, num_clients
    if kind == "fixed_size":
        k = int(sampling["num_sampled"])
        return k, k
    if kind == "poisson":
        return 1, num_clients
    raise ConfigError(f"unknown sampling kind {kind!r}: expected 'all', 'fixed_size' or 'poisson'.")


def secret_cohort_size(sampling: Mapping[str, Any], rows: int) -> int | None:
    """The cohort size to price a broadcast at when the sample is secret, or None.

    ``rows``: the clients the round aggregates (the drawn cohort, or its arrivals). Full
    participation: None — the cohort is known, the drawn one is the only one to price. Fixed
    size K: cohorts of ``min(K, rows)`` (at least 1). Poisson: 1, the smallest cohort containing
    a client (the worst, see the module docstring).
    """
    kind = sampling.get("kind")
    if kind == "all":
        return None
    if kind == "fixed_size":
        return max(1, min(int(sampling["num_sampled"]), int(rows)) if rows else int(sampling["num_sampled"]))
    if kind == "poisson":
        return 1
    raise ConfigError(f"unknown sampling kind {kind!r}: expected 'all', 'fixed_size' or 'poisson'.")


def _smallest_others_sum(values: np.ndarray, order: np.ndarray, count: int) -> np.ndarray:
    """For every k: the sum of the ``count`` smallest entries of ``values`` other than k's."""
    n = values.shape[0]
    if count <= 0:
        return np.zeros(n)
    first = order[: count + 1]
    base = float(values[order[:count]].sum())
    out = np.full(n, base)
    # a client among the `count` smallest is replaced by the (count+1)-th smallest
    if count < n:
        inside = order[:count]
        out[inside] = base - values[inside] + values[first[-1]]
    return out


def worst_cohort_broadcast(
    *,
    cohort_size: int,
    noise_stds: Sequence[float],
    sensitivities: Sequence[float],
    weighting: Weighting,
    sizes: Sequence[float] | None = None,
    server_noise_std: float = 0.0,
) -> BroadcastBound:
    """The (client, cohort of ``cohort_size`` containing it) whose broadcast has the smallest
    noise multiplier, over the whole population (see the module docstring).

    Args:
        cohort_size: |P| of the cohorts to price (for Poisson sampling pass 1: the worst).
        noise_stds: σ_j each client would add if it were in the cohort [N].
        sensitivities: Δ_j of each client's upload [N] (enforced, under the ledger's relation).
        weighting: "samples" (w_j ∝ n_j over the cohort) or "uniform" (w_j = 1/|P|).
        sizes: n_j of every client [N] (needed for "samples").
        server_noise_std: σ_s added to the aggregate.

    Returns:
        the worst broadcast; its ``noise_std / sensitivity`` lower-bounds every cohort's.

    >>> b = worst_cohort_broadcast(cohort_size=2, noise_stds=[1.0] * 3, sensitivities=[1.0] * 3,
    ...                            weighting="samples", sizes=[1, 1, 2])
    >>> round(b.sensitivity, 4), b.client   # client 2 with the smallest other: w = 2/3
    (0.6667, 2)
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
    elif weighting == "uniform":
        nj = np.ones(n)
    else:
        raise ConfigError(f"`weighting` must be 'samples' or 'uniform'. Found {weighting!r}.")
    terms = (nj * sig) ** 2
    noise_sq = terms + _smallest_others_sum(terms, np.argsort(terms, kind="stable"), k - 1)
    total = nj + _smallest_others_sum(nj, np.argsort(nj, kind="stable"), k - 1)
    if weighting == "uniform":
        total = np.full(n, float(k))
    noise_sq = noise_sq + (server_noise_std * total) ** 2
    shift = nj * sens
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_sq = np.where(shift > 0, noise_sq / np.where(shift > 0, shift, 1.0) ** 2, np.inf)
    worst = int(np.argmin(ratio_sq))
    if not math.isfinite(float(ratio_sq[worst])):
        return BroadcastBound(0.0, 0.0, worst, k)
    return BroadcastBound(float(math.sqrt(noise_sq[worst]) / total[worst]), float(shift[worst] / total[worst]),
                          worst, k)
