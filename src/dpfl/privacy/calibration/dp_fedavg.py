"""004 — DP-FedAvg: the client noise share, adaptive clipping's split of one noise multiplier
(Andrew et al. 2021), and DP-SGD inside clients (the dp-sgd-fedavg baseline)."""

from __future__ import annotations

import math

from dpfl.errors import ConfigError
from dpfl.privacy.calibration._checks import (
    _non_negative,
    _positive,
    _positive_int,
)


def dpfedavg_client_noise_std(clip_norm: float, noise_multiplier: float, cohort_size: int) -> float:
    """Per-client noise std of DP-FedAvg: S·σ/sqrt(|P_t|).

    Each of the |P_t| sampled clients adds N(0, S²σ²/|P_t|·I) to its clipped update; the mean
    of the cohort then carries noise of std S·σ/|P_t| against a sensitivity of S/|P_t|, i.e.
    noise multiplier σ (the central guarantee). Against the server, which sees every upload,
    each upload has noise multiplier only σ/sqrt(|P_t|).

    Args:
        clip_norm: S, the update clip norm.
        noise_multiplier: σ.
        cohort_size: |P_t|, the number of clients sampled this round.

    Returns:
        S·σ/sqrt(|P_t|).

    References:
        004_32e0c8f847edac12.txt, Algorithm 1, LocalUpdate line 8 (and Algorithm 2, line 10).
    """
    clip = _positive("clip_norm", clip_norm)
    z = _non_negative("noise_multiplier", noise_multiplier)
    k = _positive_int("cohort_size", cohort_size)
    return clip * z / math.sqrt(k)


# --------------------------------------------------------------------------------------------
# Adaptive clipping (Andrew et al. 2021): splitting one noise multiplier between update and count
# --------------------------------------------------------------------------------------------


def update_noise_multiplier(total_noise_multiplier: float, count_noise_std: float) -> float:
    """z_Δ = (z^{-2} − (2σ_b)^{-2})^{-1/2}: the update's share of a total multiplier z.

    Args:
        total_noise_multiplier: z, the multiplier the round must have as a whole (> 0).
        count_noise_std: σ_b, std of the noise on the centered count (> z/2).

    Raises:
        ConfigError: z ≥ 2σ_b (the count alone would already spend more than z allows).

    References:
        Andrew et al. 2021, Theorem 1.

    >>> round(update_noise_multiplier(1.0, 5.0), 6)
    1.005038
    """
    z, sb = float(total_noise_multiplier), float(count_noise_std)
    if not z > 0 or not math.isfinite(z):
        raise ConfigError(f"`noise_multiplier` must be a positive number for adaptive clipping. Found {z}.")
    if not z < 2.0 * sb:
        raise ConfigError(
            f"adaptive clipping needs noise_multiplier < 2·count_noise_std (Andrew et al. 2021, Thm 1). "
            f"Found noise_multiplier = {z:g}, count_noise_std = {sb:g}; raise count_noise_std "
            f"(default: expected cohort / 20) or sample more clients per round."
        )
    return (z ** -2 - (2.0 * sb) ** -2) ** -0.5


def combined_noise_multiplier(*noise_multipliers: float) -> float:
    """(Σ_i z_i^{-2})^{-1/2}: the single Gaussian equal to Gaussian releases about the same unit.

    For the update and the count: ``combined_noise_multiplier(z_Δ, 2σ_b)`` (the count's
    multiplier is σ_b over its sensitivity ½).

    >>> round(combined_noise_multiplier(update_noise_multiplier(1.3, 2.0), 2 * 2.0), 9)
    1.3
    """
    zs = [float(z) for z in noise_multipliers]
    if any(z == 0 for z in zs):
        return 0.0  # one of them is released without noise
    inv = sum(0.0 if math.isinf(z) else z ** -2 for z in zs)
    return math.inf if inv == 0 else inv ** -0.5


# --------------------------------------------------------------------------------------------
# DP-SGD inside clients (the dp-sgd-fedavg baseline)
# --------------------------------------------------------------------------------------------


def dp_sgd_step_noise_std(noise_multiplier: float, clip_norm: float, sample_rate: float, num_samples: int) -> float:
    """Per-coordinate noise std of one DP-SGD step's gradient: z·C/(q·n).

    The sum of the per-sample gradients of a Poisson batch (each record kept with probability q),
    each clipped to C, gets N(0, (zC)²) per coordinate and is divided by the *fixed* expected
    batch size q·n, so the step is exactly the Poisson-sampled Gaussian sum query (sensitivity C
    under add/remove of one record) scaled by 1/(qn).

    References:
        Abadi et al. 2016, "Deep Learning with Differential Privacy", Algorithm 1 (noisy
        clipped gradient step); fixed denominator as in McMahan et al. 2018 (004 Alg. 1).
    """
    z = float(noise_multiplier)
    if not z >= 0 or math.isinf(z):
        raise ConfigError(f"`noise_multiplier` must be finite and >= 0. Found {noise_multiplier!r}.")
    c = _positive("clip_norm", clip_norm)
    if not 0 < sample_rate <= 1:
        raise ConfigError(f"`sample_rate` must be in (0, 1]. Found {sample_rate!r}.")
    if int(num_samples) < 1:
        raise ConfigError(f"`num_samples` must be >= 1. Found {num_samples!r}.")
    return z * c / (float(sample_rate) * int(num_samples))


def skellam_sum_variance(noise_multiplier: float, l2_sensitivity: float) -> float:
    """μ = (z·Δ2)²: the Skellam variance per coordinate of a secure sum whose noise has multiplier
    z against the integer query's L2 sensitivity Δ2 (Agarwal, Kairouz, Liu 2021, §3: the
    distributed Skellam mechanism at the noise level of a Gaussian of std zΔ2).

    >>> skellam_sum_variance(1.5, 4.0)
    36.0
    """
    z = _non_negative("noise_multiplier", noise_multiplier)
    return (z * _non_negative("l2_sensitivity", l2_sensitivity)) ** 2


def skellam_share_variance(sum_variance: float, shares: int) -> float:
    """μ/n: each of ``shares`` clients' Skellam share of a sum of variance μ (sums of independent
    Skellams are Skellam, AKL21 §3); 0 when no client adds a share."""
    mu = _non_negative("sum_variance", sum_variance)
    return mu / shares if shares > 0 else 0.0


def skellam_unsubtracted_variance(share_variance: float, shares_in_sum: int, colluding: int) -> float:
    """The Skellam variance a server cannot subtract from a sum holding ``shares_in_sum`` shares of
    ``share_variance`` when ``colluding`` of their clients tell it theirs: (n − c)⁺·μ/N."""
    return max(0, int(shares_in_sum) - int(colluding)) * _non_negative("share_variance", share_variance)
