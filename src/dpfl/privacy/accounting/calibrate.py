"""The inverse of certification: the noise multiplier that meets a target ε, and a binomial tail.

:func:`calibrate_noise_multiplier` searches the smallest multiplier whose certified ε (by the same
accountants as :func:`.certify.certify`) is within the target, through
``dp_accounting.mechanism_calibration.calibrate_dp_mechanism``.

This module imports nothing from dpfl except :mod:`dpfl.errors` and its siblings in
``dpfl.privacy.accounting``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import dp_accounting as dpa
from dp_accounting import dp_event as dpe
from dp_accounting import privacy_accountant as dpa_pa
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from scipy import stats

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import (
    DEFAULT_PLD_DISCRETIZATION,
    DEFAULT_RDP_ORDERS,
    _pld_accountant_for,
    _pld_view,
    _rdp_view,
)
from dpfl.privacy.accounting.events import neighboring_relation, validate_delta, validate_relation

__all__ = ["binomial_upper_bound", "calibrate_noise_multiplier"]

def _bracket(gap: Callable[[float], float], guess: float = 1.0) -> tuple[float, float]:
    """[lo, hi] with gap(lo) > 0 >= gap(hi) (gap decreasing in the multiplier)."""
    lo = hi = guess
    if gap(guess) > 0:
        for _ in range(60):
            lo, hi = hi, hi * 2.0
            if gap(hi) <= 0:
                return lo, hi
        raise PrivacyPreconditionError("no noise multiplier below 2**60 reaches the target epsilon.")
    for _ in range(60):
        hi, lo = lo, lo / 2.0
        if gap(lo) > 0:
            return lo, hi
    return 0.0, hi  # even a vanishing multiplier meets the target


def calibrate_noise_multiplier(
    make_event: Callable[[float], dpe.DpEvent],
    target_epsilon: float,
    delta: float,
    *,
    relation: str,
    method: Literal["rdp", "pld", "best"] = "best",
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
    rdp_orders: Sequence[float] = DEFAULT_RDP_ORDERS,
    rel_tol: float = 1e-4,
) -> float:
    """Smallest noise multiplier z whose event ``make_event(z)`` certifies ε <= ``target_epsilon``.

    ``method="best"`` returns the smaller of the RDP and PLD answers (each is valid on its own, so
    the smaller one meets the target by the tightest valid bound). The answer is found with
    ``dp_accounting.mechanism_calibration.calibrate_dp_mechanism``, which guarantees the returned
    value does not exceed the target.

    Args:
        make_event: noise multiplier → composed event (e.g. T Poisson-sampled Gaussians).
        target_epsilon: target ε (> 0).
        delta: δ in (0, 1).
        relation: neighbouring relation.
        method: "rdp", "pld" or "best".
        pld_discretization: PLD grid step.
        rdp_orders: RDP orders.
        rel_tol: tolerance relative to the answer.

    References:
        dp_accounting ``mechanism_calibration.calibrate_dp_mechanism``.
    """
    if not isinstance(target_epsilon, (int, float)) or not target_epsilon > 0:
        raise ConfigError(f"`target_epsilon` must be > 0. Found {target_epsilon!r}.")
    validate_delta(delta)
    rel = validate_relation(relation)
    if method not in ("rdp", "pld", "best"):
        raise ConfigError(f"`method` must be 'rdp', 'pld' or 'best'. Found {method!r}.")
    results: list[float] = []
    probe = make_event(1.0)
    if method in ("rdp", "best"):
        nrel = neighboring_relation(rel)

        def fresh_rdp() -> dpa_pa.PrivacyAccountant:
            return rdp_acc.RdpAccountant(list(rdp_orders), nrel)

        def rdp_event(z: float) -> dpe.DpEvent:
            return _rdp_view(make_event(z), rel)[0]

        if fresh_rdp().supports(rdp_event(1.0)):
            results.append(_calibrate(fresh_rdp, rdp_event, target_epsilon, delta, rel_tol))
    if method in ("pld", "best"):
        view, _ = _pld_view(probe, rel)
        make_acc, transform = _pld_accountant_for(view, rel, pld_discretization)

        def pld_event(z: float) -> dpe.DpEvent:
            return transform(_pld_view(make_event(z), rel)[0])

        if make_acc().supports(pld_event(1.0)):
            results.append(_calibrate(make_acc, pld_event, target_epsilon, delta, rel_tol))
    if not results:
        raise PrivacyPreconditionError(f"no accountant supports {probe} under {rel}.")
    return min(results)


def _calibrate(
    make_acc: Callable[[], dpa_pa.PrivacyAccountant],
    make_event: Callable[[float], dpe.DpEvent],
    target_epsilon: float,
    delta: float,
    rel_tol: float,
) -> float:
    def gap(z: float) -> float:
        return make_acc().compose(make_event(z)).get_epsilon(delta) - target_epsilon

    lo, hi = _bracket(gap)
    if lo == 0.0:
        return 0.0
    z = dpa.calibrate_dp_mechanism(
        make_acc,
        make_event,
        target_epsilon,
        delta,
        bracket_interval=dpa.ExplicitBracketInterval(lo, hi),
        tol=max(rel_tol * hi, 1e-12),
    )
    # calibrate_dp_mechanism returns a parameter whose gap is <= 0 for "epsilon decreasing in the
    # parameter" only if the root it lands on is on the right side; make sure.
    if gap(float(z)) > 0:
        z = hi
    return float(z)


# --------------------------------------------------------------------------- participation


def binomial_upper_bound(trials: int, probability: float, tail: float) -> int:
    """Smallest k with P(Binomial(trials, probability) > k) <= tail.

    Used for a priori statements against the server: a client sampled with probability q in each
    of T rounds participates at most k times except with probability ``tail``; certifying k
    unamplified releases at δ − tail is then valid at δ (the count does not depend on the data).
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise ConfigError(f"`trials` must be a non-negative integer. Found {trials!r}.")
    if not 0.0 <= probability <= 1.0:
        raise ConfigError(f"`probability` must be in [0, 1]. Found {probability!r}.")
    if not 0.0 < tail < 1.0:
        raise ConfigError(f"`tail` must be in (0, 1). Found {tail!r}.")
    if probability in (0.0, 1.0):
        return int(round(trials * probability))
    k = int(stats.binom.isf(tail, trials, probability))
    # isf is "smallest k with sf(k) <= tail" up to floating error: step to the exact boundary.
    while k > 0 and stats.binom.sf(k - 1, trials, probability) <= tail:
        k -= 1
    while stats.binom.sf(k, trials, probability) > tail:
        k += 1
    return min(k, trials)
