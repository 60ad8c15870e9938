"""The Gaussian mechanism's calibrations: the classical constant (with its range check), the exact
single-release reference, the analytic Gaussian mechanism (Balle & Wang 2018), and the largest norm
a clipped, Gaussian-noised upload can have (what a server checks an upload against)."""

from __future__ import annotations

import math

from dpfl.privacy.calibration._checks import (
    _delta,
    _non_negative,
    _positive,
)
from dpfl.privacy.notices import warn_out_of_range


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


NORM_TAIL = 12.0
"""t in the noise allowance σ(√P + t): a valid upload is rejected with probability ≤ exp(−t²/2)
≈ 5·10⁻³² (Gaussian norm concentration)."""


def upload_norm_limit(sensitivity: float, noise_std: float, num_params: int, tail: float = NORM_TAIL) -> float:
    """The largest L2 norm a clipped, Gaussian-noised upload can have short of a 1 − exp(−t²/2) event.

    A vector x with ‖x‖ ≤ Δ plus n ~ N(0, σ² I_P) has ‖x + n‖ ≤ Δ + ‖n‖, and ‖n‖ is σ-Lipschitz in
    a standard Gaussian with E‖n‖ ≤ σ√P, so P(‖n‖ ≥ σ(√P + t)) ≤ exp(−t²/2) (Gaussian
    concentration of Lipschitz functions; Vershynin, High-Dimensional Probability, Thm. 5.2.2
    with the sharp constant of Tsirelson–Ibragimov–Sudakov).

    Args:
        sensitivity: Δ, the enforced L2 sensitivity the algorithm declares for the upload (≥ the
            clip bound of the uploaded vector).
        noise_std: σ, the declared per-coordinate Gaussian noise std of the upload.
        num_params: P, the upload's length.
        tail: t.
    """
    if not (sensitivity >= 0 and noise_std >= 0 and num_params >= 0 and tail > 0):
        raise ValueError(f"upload_norm_limit needs sensitivity, noise_std, num_params >= 0 and tail > 0; found "
                         f"{sensitivity}, {noise_std}, {num_params}, {tail}")
    return float(sensitivity) + float(noise_std) * (math.sqrt(num_params) + float(tail))
