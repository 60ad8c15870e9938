"""000 — UDP and CRD: the noise of a user-level DP round and its communication-rounds discounting."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpfl.errors import PrivacyPreconditionError
from dpfl.privacy.calibration._checks import (
    _delta,
    _positive,
    _positive_int,
    _sample_rate,
)
from dpfl.privacy.notices import warn_out_of_range


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
