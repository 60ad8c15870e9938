"""Every paper's noise calibration: one pure function per formula, floats in, float out.

Each function implements one numbered formula of one paper (file in ``shared/papers/``) exactly
as printed, validates its inputs at the boundary (:class:`~dpfl.errors.ConfigError`, naming the
parameter, the rule and the value), raises :class:`~dpfl.errors.PrivacyPreconditionError` when
the formula cannot apply (an exhausted budget, the log of a negative number), and emits a
:class:`~dpfl.privacy.notices.FormulaRangeWarning` when it is evaluated outside the range its
proof covers. Nothing here decides whether a paper's claim is *true*: the certified epsilon of
the noise actually added comes from ``dpfl.privacy.accounting``. The exact single-release
reference is the analytic Gaussian mechanism (Balle & Wang 2018) at the end of this module.

Symbols keep the paper's letter only inside docstrings; names carry units and roles
(``noise_std`` is a standard deviation in parameter units, ``noise_multiplier`` is a standard
deviation divided by a sensitivity, ``epsilon_nats`` is an ε-MI-DP budget in nats).

This module imports nothing from dpfl except :mod:`dpfl.errors` and
:mod:`dpfl.privacy.notices`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.notices import warn_out_of_range

__all__ = [
    "analytic_gaussian_delta",
    "analytic_gaussian_noise_std",
    "classical_gaussian_constant",
    "classical_gaussian_noise_std",
    "dpfedavg_client_noise_std",
    "midp_client_noise_std",
    "midp_server_noise_std",
    "nbafl_downlink_noise_std",
    "nbafl_downlink_noise_std_k_random",
    "nbafl_k_random_log_argument",
    "nbafl_uplink_noise_std",
    "nbafl_uplink_sensitivity",
    "pmidp_aggregation_weights",
    "pmidp_client_noise_std",
    "udp_max_proven_epsilon",
    "udp_noise_std",
    "udp_noise_std_after_change",
    "udp_sensitivity",
]


# --------------------------------------------------------------------------------------------
# Validation at the boundary (shared with dpfl.privacy.accounting.claimed)
# --------------------------------------------------------------------------------------------


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"`{name}` must be a real number. Found {value!r}.")
    result = float(value)
    if math.isnan(result):
        raise ConfigError(f"`{name}` must be a number, not NaN. Found {value!r}.")
    return result


def _positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A finite (or, if allowed, infinite) number > 0."""
    result = _real(name, value)
    if not result > 0 or (math.isinf(result) and not allow_inf):
        rule = "> 0" if allow_inf else "finite and > 0"
        raise ConfigError(f"`{name}` must be {rule}. Found {value!r}.")
    return result


def _non_negative(name: str, value: object) -> float:
    result = _real(name, value)
    if not (result >= 0 and math.isfinite(result)):
        raise ConfigError(f"`{name}` must be finite and >= 0. Found {value!r}.")
    return result


def _delta(name: str, value: object) -> float:
    result = _real(name, value)
    if not 0 < result < 1:
        raise ConfigError(f"`{name}` must be in (0, 1). Found {value!r}.")
    return result


def _sample_rate(name: str, value: object) -> float:
    result = _real(name, value)
    if not 0 < result <= 1:
        raise ConfigError(f"`{name}` must be in (0, 1]. Found {value!r}.")
    return result


def _weight(name: str, value: object) -> float:
    return _sample_rate(name, value)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    if int(value) < 1:
        raise ConfigError(f"`{name}` must be a positive integer (>= 1). Found {value!r}.")
    return int(value)


def _weights(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Aggregation weights: a non-empty 1-D sequence of numbers in (0, 1] summing to 1."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ConfigError(f"`{name}` must be a non-empty 1-D sequence. Found shape {array.shape}.")
    if not np.all(np.isfinite(array)) or np.any(array <= 0) or np.any(array > 1):
        bad = array[~(np.isfinite(array) & (array > 0) & (array <= 1))]
        raise ConfigError(f"`{name}` must all be in (0, 1]. Found {bad[:5].tolist()}.")
    total = math.fsum(array.tolist())
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"`{name}` must sum to 1 (aggregation weights). Found sum {total!r}.")
    return array


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x > 0 without overflow (large x) or cancellation (small x)."""
    return x + math.log(-math.expm1(-x))


def _midp_denominator_log(epsilon_nats: float, dim: int) -> float:
    """log(d·(e^{2ε/d} − 1)), the denominator of 002 eq. 4.7–4.11 and 5.32, in log-space."""
    return math.log(dim) + _log_expm1(2.0 * epsilon_nats / dim)


# --------------------------------------------------------------------------------------------
# 000 — UDP and CRD
# --------------------------------------------------------------------------------------------


def udp_sensitivity(lr: float, clip_norm: float, num_samples: int) -> float:
    """Sensitivity of one full-batch step of per-sample-clipped gradients: Δℓ = 2ηC/|D_i|.

    Holds only for the local procedure of 000 Algorithm 1 (one step, batch = the whole local
    data set, each per-sample gradient clipped to C, replace-one neighbouring data sets of equal
    size). Any other local procedure needs the sensitivity the code actually enforces.

    Args:
        lr: the local learning rate η.
        clip_norm: the per-sample gradient clip norm C.
        num_samples: the local data-set size |D_i|.

    Returns:
        Δℓ in parameter units.

    References:
        000_3304bf6f36c753f8.txt, eq. 13 (proof of Theorem 1).

    >>> udp_sensitivity(0.05, 1.0, 800)
    0.000125
    """
    return (
        2.0
        * _positive("lr", lr)
        * _positive("clip_norm", clip_norm)
        / _positive_int("num_samples", num_samples)
    )


def udp_max_proven_epsilon(delta: float) -> float:
    """The largest ε for which 000's Theorem 1/4 derivation picks an admissible moment order.

    The proof of Theorem 1 (eq. 17–19) sets λ = εσ²/(TqΔℓ²) − 1/2, which with σ from eq. 10
    is λ = 2 ln(1/δ)/ε − 1/2; the moments accountant needs λ >= 1 (a positive integer order),
    i.e. ε <= (4/3)·ln(1/δ). Beyond it the derivation optimizes over a λ it is not allowed to use,
    and the resulting noise under-protects (000 at ε = 20, q = 1, T = 200, δ = 1e-3 certifies
    ε ≈ 33 by RDP). The same order appears in Theorem 4 (eq. 28) once the budget is spent.

    Args:
        delta: the target δ of the paper.

    Returns:
        (4/3)·ln(1/δ).

    References:
        000_3304bf6f36c753f8.txt, eq. 17–19 (choice of λ) and eq. 28.
    """
    return 4.0 / 3.0 * math.log(1.0 / _delta("delta", delta))


def _udp_check_order(epsilon: float, delta: float, formula: str) -> None:
    limit = udp_max_proven_epsilon(delta)
    if epsilon > limit:
        warn_out_of_range(
            formula,
            "epsilon",
            epsilon,
            f"<= (4/3)·ln(1/delta) = {limit:.4g} at delta = {delta:g}",
            "The proof's moment order lambda = 2 ln(1/delta)/epsilon - 1/2 falls below 1, so the "
            "noise is not proven to give the claimed epsilon.",
            stacklevel=4,
        )


def udp_noise_std(
    epsilon: float, delta: float, sensitivity: float, sample_rate: float, rounds: int
) -> float:
    """Per-client noise std of UDP: σ_i = Δℓ·sqrt(2qT ln(1/δ_i))/ε_i.

    The paper's own notion: (ε_i, δ_i)-"LDP" of client i's local data set against the server,
    replace-one record, over T rounds with each client taking part with probability q = K/U.
    Emits :class:`FormulaRangeWarning` when ε > (4/3)·ln(1/δ) (see
    :func:`udp_max_proven_epsilon`).

    Args:
        epsilon: the client's target ε_i.
        delta: the client's target δ_i.
        sensitivity: Δℓ (see :func:`udp_sensitivity`).
        sample_rate: q = K/U.
        rounds: the number of communication rounds T.

    Returns:
        σ_i, the std of the Gaussian noise added to the uploaded parameters.

    References:
        000_3304bf6f36c753f8.txt, Theorem 1, eq. 10.

    >>> round(udp_noise_std(8.0, 1e-3, 1.0, 1.0, 200), 6)  # sqrt(2·200·ln 1000)/8
    6.570652
    """
    eps = _positive("epsilon", epsilon)
    dlt = _delta("delta", delta)
    sens = _positive("sensitivity", sensitivity)
    q = _sample_rate("sample_rate", sample_rate)
    t = _positive_int("rounds", rounds)
    _udp_check_order(eps, dlt, "000 Thm 1 (eq. 10)")
    return sens * math.sqrt(2.0 * q * t * math.log(1.0 / dlt)) / eps


def udp_noise_std_after_change(
    epsilon: float,
    delta: float,
    sensitivity: float,
    sample_rate: float,
    rounds_remaining: int,
    past_noise_stds: Sequence[float],
) -> float:
    """Noise std for the remaining rounds after CRD changed T (Theorem 4).

    σ_i^t = sqrt( (T − t) / ( ε_i²/(2qΔℓ² ln(1/δ_i)) − Σ_{τ<t} 1/(σ_i^τ)² ) ).

    The bracket is the budget left after the rounds already run: the total
    ε²/(2qΔℓ² ln(1/δ)) minus what the past noise spent. With no past rounds this is Theorem 1
    with T = ``rounds_remaining``. Emits :class:`FormulaRangeWarning` when
    ε > (4/3)·ln(1/δ) (the same moment-order condition as Theorem 1).

    Args:
        epsilon: the client's total target ε_i for the whole run.
        delta: the client's target δ_i.
        sensitivity: Δℓ.
        sample_rate: q = K/U.
        rounds_remaining: T − t, the rounds still to run under the new T (>= 1).
        past_noise_stds: σ_i^τ of every round already run, τ = 0..t−1 (``inf`` for a round that
            released nothing about the client).

    Returns:
        σ_i^t, to be used in each of the remaining rounds.

    Raises:
        PrivacyPreconditionError: the budget is exhausted, i.e. Σ 1/σ_τ² already reaches
            ε²/(2qΔℓ² ln(1/δ)) after the given rounds; no finite noise keeps the guarantee.

    References:
        000_3304bf6f36c753f8.txt, Theorem 4, eq. 25 (and eq. 30–31 for the unchanged-T case).
    """
    eps = _positive("epsilon", epsilon)
    dlt = _delta("delta", delta)
    sens = _positive("sensitivity", sensitivity)
    q = _sample_rate("sample_rate", sample_rate)
    remaining = _positive_int("rounds_remaining", rounds_remaining)
    spent = math.fsum(
        1.0 / _positive(f"past_noise_stds[{i}]", s, allow_inf=True) ** 2
        for i, s in enumerate(past_noise_stds)
    )
    total = eps * eps / (2.0 * q * sens * sens * math.log(1.0 / dlt))
    left = total - spent
    if not left > 0:
        raise PrivacyPreconditionError(
            f"000 Thm 4 (eq. 25): the privacy budget is exhausted after {len(past_noise_stds)} "
            f"rounds: sum of 1/sigma^2 over past rounds = {spent:.6g} >= "
            f"epsilon^2/(2 q sensitivity^2 ln(1/delta)) = {total:.6g} (epsilon = {eps:g}, "
            f"delta = {dlt:g}, sample_rate = {q:g}, sensitivity = {sens:g}); stop training "
            "instead of running more rounds."
        )
    _udp_check_order(eps, dlt, "000 Thm 4 (eq. 25)")
    return math.sqrt(remaining / left)


# --------------------------------------------------------------------------------------------
# 003 — NbAFL
# --------------------------------------------------------------------------------------------


def classical_gaussian_constant(delta: float) -> float:
    """The classical Gaussian-mechanism constant c = sqrt(2 ln(1.25/δ)).

    σ = cΔ/ε gives (ε, δ)-DP for ε < 1 only (Dwork & Roth 2014, Theorem A.1); use
    :func:`classical_gaussian_noise_std` to get the range check.

    Args:
        delta: the target δ in (0, 1).

    Returns:
        c.

    References:
        003_c42e3eb46a620b42.txt, §II (after eq. 3) and eq. 72; 004_32e0c8f847edac12.txt, §3.

    >>> round(classical_gaussian_constant(0.01), 6)  # sqrt(2 ln 125)
    3.107511
    """
    return math.sqrt(2.0 * math.log(1.25 / _delta("delta", delta)))


def _classical_range_check(per_release_epsilon: float, formula: str, what: str) -> None:
    if per_release_epsilon >= 1.0:
        warn_out_of_range(
            formula,
            what,
            per_release_epsilon,
            "< 1",
            "The classical constant c = sqrt(2 ln(1.25/delta)) is proven only for epsilon < 1 "
            "(Dwork & Roth, Thm A.1).",
            stacklevel=4,
        )


def classical_gaussian_noise_std(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = cΔ/ε with c = sqrt(2 ln(1.25/δ)); warns when ε >= 1, where it is not proven.

    Args:
        epsilon: the target ε of one release.
        delta: the target δ of one release.
        sensitivity: the L2 sensitivity Δ.

    Returns:
        σ.

    References:
        003_c42e3eb46a620b42.txt, §II (after eq. 3); Dwork & Roth 2014, Theorem A.1.
    """
    eps = _positive("epsilon", epsilon)
    c = classical_gaussian_constant(delta)
    sens = _positive("sensitivity", sensitivity)
    _classical_range_check(eps, "classical Gaussian mechanism", "epsilon")
    return c * sens / eps


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


# --------------------------------------------------------------------------------------------
# 002 — MI-DP and PMIDP-FL (budgets in nats)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# 004 — DP-FedAvg
# --------------------------------------------------------------------------------------------


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
# Reference: the analytic Gaussian mechanism (Balle & Wang 2018)
# --------------------------------------------------------------------------------------------


def _analytic_log_delta(noise_multiplier: float, epsilon: float) -> float:
    """log δ(ε) of N(0, z²) vs N(1, z²) (sensitivity 1), Balle & Wang 2018, Theorem 8."""
    a = 1.0 / (2.0 * noise_multiplier)
    b = epsilon * noise_multiplier
    from scipy.special import (
        log_ndtr,  # loaded on use: `dpfl --help` registers commands importing this module
    )

    log_first = float(log_ndtr(a - b))
    log_second = epsilon + float(log_ndtr(-a - b))
    if not log_second < log_first:
        return -math.inf
    return log_first + math.log(-math.expm1(log_second - log_first))


def analytic_gaussian_delta(noise_std: float, epsilon: float, sensitivity: float) -> float:
    """The exact δ(ε) of one Gaussian release (the tight single-release curve).

    δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ), evaluated in log-space with
    ``scipy.special.log_ndtr`` (accurate to tiny δ and large ε). At ε = 0 it is the total
    variation 2Φ(Δ/(2σ)) − 1.

    Args:
        noise_std: σ > 0.
        epsilon: ε >= 0.
        sensitivity: the L2 sensitivity Δ > 0.

    Returns:
        δ(ε) in [0, 1).

    References:
        Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy: Analytical
        Calibration and Optimal Denoising", ICML 2018, Theorem 8 (eq. 6).
    """
    sigma = _positive("noise_std", noise_std)
    eps = _non_negative("epsilon", epsilon)
    sens = _positive("sensitivity", sensitivity)
    return math.exp(_analytic_log_delta(sigma / sens, eps))


def analytic_gaussian_noise_std(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest noise std whose exact δ(ε) is at most the target δ.

    δ(ε) decreases in σ/Δ, so the answer is found by bisection on log(σ/Δ) (doubling out to a
    bracket, then halving to a relative width of 1e-13) and the upper, feasible end of the
    bracket is returned: the result never gives δ(ε) above the target.

    Args:
        epsilon: ε > 0.
        delta: target δ in (0, 1).
        sensitivity: Δ > 0.

    Returns:
        σ.

    References:
        Balle & Wang, ICML 2018, Theorem 8 and Algorithm 1 (analytic Gaussian mechanism).
    """
    eps = _positive("epsilon", epsilon)
    log_target = math.log(_delta("delta", delta))
    sens = _positive("sensitivity", sensitivity)

    def too_small(log_z: float) -> bool:
        return _analytic_log_delta(math.exp(log_z), eps) > log_target

    lo, hi = 0.0, 0.0
    while too_small(hi):
        lo, hi = hi, hi + 1.0
    while not too_small(lo):
        hi, lo = lo, lo - 1.0
        if lo < -745.0:  # σ/Δ below the smallest float: any positive noise suffices
            return sens * math.exp(hi)
    while hi - lo > 1e-13:
        mid = 0.5 * (lo + hi)
        if too_small(mid):
            lo = mid
        else:
            hi = mid
    return sens * math.exp(hi)


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
