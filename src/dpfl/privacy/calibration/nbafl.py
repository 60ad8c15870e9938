"""003 — NbAFL: uplink and downlink noise, and the K-random scheduling's downlink noise."""

from __future__ import annotations

import math

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.calibration._checks import (
    _positive,
    _positive_int,
)
from dpfl.privacy.calibration.gaussian import _classical_range_check, classical_gaussian_constant


def nbafl_uplink_sensitivity(clip_norm: float, min_samples: int) -> float:
    """NbAFL's uplink sensitivity Δs_U = 2C/m.

    The paper derives it from "argmin of a sum = mean of per-sample argmins" (eq. 4), which is
    false in general; clipping the parameters to norm C only guarantees Δ = 2C (replace-one).
    This function returns the paper's value, for the claimed ε; the certified ε must use the
    sensitivity the code enforces.

    Args:
        clip_norm: the parameter clip norm C.
        min_samples: m, the smallest local data-set size.

    Returns:
        2C/m.

    References:
        003_c42e3eb46a620b42.txt, eq. 5–6 (§III-A, "Δs_U = 2C/m").
    """
    return 2.0 * _positive("clip_norm", clip_norm) / _positive_int("min_samples", min_samples)


def nbafl_uplink_noise_std(
    epsilon: float, delta: float, clip_norm: float, min_samples: int, exposures: int
) -> float:
    """NbAFL's client noise std σ_U = c·L·Δs_U/ε with c = sqrt(2 ln(1.25/δ)), Δs_U = 2C/m.

    Each of the L exposures of a client's parameters is then a Gaussian mechanism at
    ε/L; emits :class:`FormulaRangeWarning` when ε/L >= 1, outside the proven range of c.
    (Linear composition of L exposures gives (ε, L·δ), not (ε, δ), even inside the range.)

    Args:
        epsilon: the paper's global ε.
        delta: the paper's δ.
        clip_norm: C.
        min_samples: m.
        exposures: L, the number of exposures of uploaded parameters (L <= T).

    Returns:
        σ_U.

    References:
        003_c42e3eb46a620b42.txt, §III-A (after eq. 6) and Appendix B.
    """
    eps = _positive("epsilon", epsilon)
    c = classical_gaussian_constant(delta)
    sens = nbafl_uplink_sensitivity(clip_norm, min_samples)
    exp_count = _positive_int("exposures", exposures)
    _classical_range_check(eps / exp_count, "003 sigma_U (§III-A)", "epsilon / exposures")
    return c * exp_count * sens / eps


def nbafl_downlink_noise_std(
    epsilon: float,
    delta: float,
    clip_norm: float,
    min_samples: int,
    num_clients: int,
    rounds: int,
    exposures: int,
) -> float:
    """NbAFL's server (downlink) noise std, Theorem 1.

    σ_D = 2cC·sqrt(T² − L²N)/(mNε) if T > L·sqrt(N), else 0.

    It tops the aggregated client noise σ_U/sqrt(N) up to σ_A = cTΔs_D/ε with
    Δs_D = 2C/(mN), i.e. a Gaussian mechanism at ε/T per broadcast; emits
    :class:`FormulaRangeWarning` when ε/T >= 1 (and when ε/L >= 1 for the uplink part).

    Args:
        epsilon: ε.
        delta: δ.
        clip_norm: C.
        min_samples: m.
        num_clients: N (all take part, p_i = 1/N).
        rounds: T, the number of aggregations.
        exposures: L <= T.

    Returns:
        σ_D (0.0 when the client noise already suffices).

    References:
        003_c42e3eb46a620b42.txt, Theorem 1, eq. 10; Appendix B, eq. 33.
    """
    eps = _positive("epsilon", epsilon)
    c = classical_gaussian_constant(delta)
    clip = _positive("clip_norm", clip_norm)
    m = _positive_int("min_samples", min_samples)
    n = _positive_int("num_clients", num_clients)
    t = _positive_int("rounds", rounds)
    exp_count = _nbafl_exposures(exposures, t)
    _classical_range_check(eps / exp_count, "003 sigma_U (§III-A)", "epsilon / exposures")
    _classical_range_check(eps / t, "003 Thm 1 (eq. 10)", "epsilon / rounds")
    radicand = t * t - exp_count * exp_count * n  # exact integer arithmetic
    if radicand <= 0:
        return 0.0
    return 2.0 * c * clip * math.sqrt(radicand) / (m * n * eps)


def _nbafl_exposures(exposures: object, rounds: int) -> int:
    exp_count = _positive_int("exposures", exposures)
    if exp_count > rounds:
        raise ConfigError(
            f"`exposures` must be <= `rounds` (003 §II: L <= T). Found exposures = {exp_count}, "
            f"rounds = {rounds}."
        )
    return exp_count


def nbafl_k_random_log_argument(
    epsilon: float, num_clients: int, sampled_clients: int, rounds: int
) -> float:
    """The argument 1 − N/K + (N/K)·e^{−ε/T} of the logarithm defining b in Lemma 4.

    It is positive iff ε < −T·ln(1 − K/N) (the paper's own condition, eq. 69); at the paper's
    settings (N = 50, K = 20, T = 25, ε = 50..100) it is negative.

    References:
        003_c42e3eb46a620b42.txt, Lemma 4, eq. 22; Appendix F, eq. 67 and 69.
    """
    eps = _positive("epsilon", epsilon)
    n = _positive_int("num_clients", num_clients)
    k = _positive_int("sampled_clients", sampled_clients)
    t = _positive_int("rounds", rounds)
    return 1.0 + (n / k) * math.expm1(-eps / t)


def nbafl_downlink_noise_std_k_random(
    epsilon: float,
    delta: float,
    clip_norm: float,
    min_samples: int,
    num_clients: int,
    sampled_clients: int,
    rounds: int,
    exposures: int,
) -> float:
    """NbAFL's downlink noise std under K-random scheduling, Lemma 4.

    σ_D = 2cC·sqrt(T²/b² − L²K)/(mKε) if T > ε/γ, else 0, with

    b = −(T/ε)·ln(1 − N/K + (N/K)·e^{−ε/T}),   γ = −ln(1 − K/N + (K/N)·e^{−ε/(L·sqrt(K))}).

    With K = N it reduces to Theorem 1 (b = 1, γ = ε/(L·sqrt(N))). The per-broadcast Gaussian
    mechanism runs at bε/T; the proof (eq. 72) needs bε/T < 1 and merely asserts the rest
    ("by adjusting the value of c"), so :class:`FormulaRangeWarning` is emitted when bε/T >= 1,
    and when ε/L >= 1 for the uplink part.

    Args:
        epsilon: ε.
        delta: δ.
        clip_norm: C.
        min_samples: m.
        num_clients: N.
        sampled_clients: K <= N clients scheduled per round.
        rounds: T.
        exposures: L <= T.

    Returns:
        σ_D (0.0 when the client noise already suffices).

    Raises:
        PrivacyPreconditionError: the logarithm defining b has a non-positive argument, i.e.
            ε >= −T·ln(1 − K/N) (eq. 69) — as at the paper's own settings ε = 50..100, N = 50,
            K = 20, T = 25. The formula has no value there.

    References:
        003_c42e3eb46a620b42.txt, Lemma 4, eq. 21–22; Appendix F, eq. 67–77.
    """
    eps = _positive("epsilon", epsilon)
    c = classical_gaussian_constant(delta)
    clip = _positive("clip_norm", clip_norm)
    m = _positive_int("min_samples", min_samples)
    n = _positive_int("num_clients", num_clients)
    k = _positive_int("sampled_clients", sampled_clients)
    t = _positive_int("rounds", rounds)
    exp_count = _nbafl_exposures(exposures, t)
    if k > n:
        raise ConfigError(f"`sampled_clients` must be <= `num_clients`. Found K = {k}, N = {n}.")
    argument = nbafl_k_random_log_argument(eps, n, k, t)
    if not argument > 0:
        limit = -t * math.log1p(-k / n) if k < n else math.inf
        raise PrivacyPreconditionError(
            "003 Lemma 4 (eq. 22): b = -(T/epsilon) ln(1 - N/K + (N/K) e^(-epsilon/T)) takes the "
            f"log of a non-positive number: 1 - N/K + (N/K) e^(-epsilon/T) = {argument:.6g} at "
            f"epsilon = {eps:g}, T = {t}, N = {n}, K = {k}. The lemma needs "
            f"epsilon < -T ln(1 - K/N) = {limit:.6g} (eq. 69); it gives no noise level here."
        )
    b_eps_over_t = -math.log(argument)  # = bε/T, the per-broadcast epsilon of eq. 74
    b = t * b_eps_over_t / eps
    q = k / n
    gamma = -math.log1p(q * math.expm1(-eps / (exp_count * math.sqrt(k))))
    _classical_range_check(eps / exp_count, "003 sigma_U (§V)", "epsilon / exposures")
    _classical_range_check(b_eps_over_t, "003 Lemma 4 (eq. 72)", "b * epsilon / rounds")
    if not t > eps / gamma:
        return 0.0
    radicand = (t / b) ** 2 - exp_count * exp_count * k
    if radicand <= 0:  # eq. 75: the client noise already gives sigma_A
        return 0.0
    return 2.0 * c * clip * math.sqrt(radicand) / (m * k * eps)
