"""002 — MI-DP and PMIDP-FL (budgets in nats): the server, client and personalized noise, and the weights."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpfl.errors import ConfigError
from dpfl.privacy.calibration._checks import (
    _midp_denominator_log,
    _positive,
    _positive_int,
    _weight,
    _weights,
)


def midp_server_noise_std(
    epsilon_nats: float, clip_norm: float, max_weight: float, dim: int
) -> float:
    """Server-side noise std for ε-MI-DP: σ_s = C·max_i p_i / sqrt(d(e^{2ε/d} − 1)).

    With p_i = 1/N this is eq. 4.8, σ_s = C/(N·sqrt(d(e^{2ε/d} − 1))). Computed in log-space
    (e^{2ε/d} − 1 via expm1; no overflow for small d, no cancellation for huge d).

    ε-MI-DP (nats) is not (ε, δ)-DP; the certified ε of this Gaussian comes from the accountant.

    Args:
        epsilon_nats: ε of client-level ε-MI-DP, in nats.
        clip_norm: C, the parameter clip norm.
        max_weight: max_i p_i, the largest aggregation weight.
        dim: d, the number of model parameters.

    Returns:
        σ_s.

    References:
        002_2503fd7671e29121.txt, Theorem 1, eq. 4.7–4.8.
    """
    eps = _positive("epsilon_nats", epsilon_nats)
    clip = _positive("clip_norm", clip_norm)
    p_max = _weight("max_weight", max_weight)
    d = _positive_int("dim", dim)
    return clip * p_max * math.exp(-0.5 * _midp_denominator_log(eps, d))


def midp_client_noise_std(
    epsilon_nats: float, clip_norm: float, weights: Sequence[float] | np.ndarray, dim: int
) -> float:
    """Client-side noise std for ε-MI-DP: σ_c = C·max p_i / sqrt(d(e^{2ε/d} − 1)·Σ_k p_k²).

    With p_i = 1/N this is eq. 4.11, σ_c = C/sqrt(dN(e^{2ε/d} − 1)).

    Args:
        epsilon_nats: ε in nats.
        clip_norm: C.
        weights: the aggregation weights p_1..p_N (in (0, 1], summing to 1).
        dim: d.

    Returns:
        σ_c, the same for every client.

    References:
        002_2503fd7671e29121.txt, Corollary 1, eq. 4.9–4.11.
    """
    eps = _positive("epsilon_nats", epsilon_nats)
    clip = _positive("clip_norm", clip_norm)
    p = _weights("weights", weights)
    d = _positive_int("dim", dim)
    p_max = float(p.max())
    # sqrt(Σ p_k²) = p_max·sqrt(Σ (p_k/p_max)²): no underflow for many tiny weights.
    norm_ratio = math.sqrt(math.fsum(((p / p_max) ** 2).tolist()))
    return clip / norm_ratio * math.exp(-0.5 * _midp_denominator_log(eps, d))


def pmidp_client_noise_std(
    epsilon_nats: float, clip_norm: float, dim: int, num_clients: int
) -> float:
    """PMIDP-FL's personalized client noise std: σ_{k,t} = C_{k,t}/sqrt(dN(e^{2ε_k/d} − 1)).

    Args:
        epsilon_nats: the client's own budget ε_k, in nats.
        clip_norm: the client's current clip norm C_{k,t} (eq. 5.18).
        dim: d.
        num_clients: N.

    Returns:
        σ_{k,t}.

    References:
        002_2503fd7671e29121.txt, Corollary 2, eq. 5.32.
    """
    eps = _positive("epsilon_nats", epsilon_nats)
    clip = _positive("clip_norm", clip_norm)
    d = _positive_int("dim", dim)
    n = _positive_int("num_clients", num_clients)
    return clip * math.exp(-0.5 * (_midp_denominator_log(eps, d) + math.log(n)))


def pmidp_aggregation_weights(noise_stds: Sequence[float] | np.ndarray) -> np.ndarray:
    """PMIDP-FL's aggregation weights p_k = Π_{j≠k} σ_j / Σ_i Π_{j≠i} σ_j.

    Dividing numerator and denominator by Π_j σ_j gives p_k = (1/σ_k)/Σ_j (1/σ_j); it is
    computed as r_k/Σ r_j with r_k = σ_min/σ_k in (0, 1], never as a product of N numbers, so
    nothing under- or overflows for any N.

    Args:
        noise_stds: σ_{1,t}..σ_{N,t}, each finite and > 0.

    Returns:
        p as a float64 array summing to 1.

    References:
        002_2503fd7671e29121.txt, Corollary 2, eq. 5.33 (and eq. 5.30).

    >>> pmidp_aggregation_weights([1.0, 2.0, 4.0]).tolist()  # ∝ 1, 1/2, 1/4
    [0.5714285714285714, 0.2857142857142857, 0.14285714285714285]
    """
    sigma = np.asarray(noise_stds, dtype=np.float64)
    if sigma.ndim != 1 or sigma.size == 0:
        raise ConfigError(
            f"`noise_stds` must be a non-empty 1-D sequence. Found shape {sigma.shape}."
        )
    bad = ~(np.isfinite(sigma) & (sigma > 0))
    if np.any(bad):
        raise ConfigError(
            f"`noise_stds` must all be finite and > 0. Found {sigma[bad][:5].tolist()} at "
            f"positions {np.flatnonzero(bad)[:5].tolist()}."
        )
    ratio = sigma.min() / sigma
    return ratio / math.fsum(ratio.tolist())
