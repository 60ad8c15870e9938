"""Privacy amplification by shuffling for ε0-LDP reports (001's two-point randomizer).

**Theorem** (Feldman, McMillan, Talwar 2021, "Hiding Among the Clones", Thm 3.1). Let each of n
users apply an ε0-DP local randomizer to their own input (the randomizers may be chosen
adaptively, but each user sends exactly one report), and let a shuffler output the n reports in a
uniformly random order. For any δ ∈ (0, 1] with

    ε0 <= ln( n / (16 ln(2/δ)) ),

the shuffled output is (ε, δ)-DP (replace-one: neighbouring inputs differ in one user's value) with

    ε <= ln( 1 + (e^ε0 − 1)/(e^ε0 + 1) · ( 8 sqrt(e^ε0 ln(4/δ)) / sqrt(n) + 8 e^ε0 / n ) ).

**Assumptions dpfl states with every use of this bound:**

1. *A trusted shuffler* — a party (or a secure mixnet / secure aggregation of the reports) that
   the observer cannot see into, which permutes the reports uniformly at random and strips
   everything that could link a report to its sender (identity, timing, order). 001's local
   random delays are *not* a trusted shuffler: the server sees arrival times and connections.
2. *Each user's report is shuffled with every other user's report of the same coordinate*: the
   shuffling is per coordinate (id), over the n users who report that coordinate in that round.
3. *One report per user per coordinate*: a user who sends a coordinate twice (or d coordinates
   that are shuffled together) is not covered by one application of the theorem; dpfl applies it
   per (coordinate, round) and composes the d·T shuffled releases.

Exception: an observer that sees only a *symmetric function* of the reports — e.g. the public,
who sees only the per-coordinate average in the broadcast model — sees a post-processing of the
shuffled multiset whether or not a shuffler exists, so the bound applies to it under assumptions
2–3 alone.

When the validity condition fails (small n, large ε0, tiny δ), :func:`shuffle_amplified_epsilon`
raises :class:`dpfl.errors.PrivacyPreconditionError` instead of returning a number the theorem does
not support.

This module imports nothing from dpfl except :mod:`dpfl.errors`.

References:
    Feldman, McMillan, Talwar, FOCS 2021 (arXiv 2012.12803), Thm 3.1; Dwork, Rothblum, Vadhan
    2010 (advanced composition, Thm III.3); 001 §3 (split & shuffle) and §4.2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpfl.errors import ConfigError, PrivacyPreconditionError

__all__ = [
    "ShuffledComposition",
    "advanced_composition",
    "max_local_epsilon",
    "shuffle_amplified_epsilon",
    "shuffled_two_point_epsilon",
]


def _check(epsilon0: float, num_users: int, delta: float) -> None:
    if not isinstance(epsilon0, (int, float)) or not math.isfinite(epsilon0) or epsilon0 <= 0:
        raise ConfigError(f"`epsilon0` (local epsilon) must be a finite number > 0. Found {epsilon0!r}.")
    if isinstance(num_users, bool) or not isinstance(num_users, int) or num_users < 1:
        raise ConfigError(f"`num_users` must be a positive integer. Found {num_users!r}.")
    if not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ConfigError(f"`delta` must be in (0, 1). Found {delta!r}.")


def max_local_epsilon(num_users: int, delta: float) -> float:
    """The largest ε0 the theorem covers: ln(n / (16 ln(2/δ))) (may be negative: never valid).

    References:
        Feldman, McMillan, Talwar 2021, Thm 3.1 (validity condition).
    """
    _check(1.0, num_users, delta)
    return math.log(num_users / (16.0 * math.log(2.0 / delta)))


def shuffle_amplified_epsilon(epsilon0: float, num_users: int, delta: float) -> float:
    """Central ε at δ of n shuffled ε0-LDP reports (closed form of FMT21 Thm 3.1).

    Args:
        epsilon0: local (pure) ε of each report.
        num_users: n, the number of reports shuffled together (one per user).
        delta: target δ of the shuffled output.

    Returns:
        ε such that the shuffled output is (ε, δ)-DP; never larger than ``epsilon0``.

    Raises:
        PrivacyPreconditionError: ε0 > ln(n / (16 ln(2/δ))), outside the theorem's range; the
            message names the values and the largest ε0 allowed.

    >>> round(shuffle_amplified_epsilon(1.0, 100_000, 1e-6), 4)
    0.0726

    References:
        Feldman, McMillan, Talwar 2021, Thm 3.1. See the module docstring for the assumptions.
    """
    _check(epsilon0, num_users, delta)
    limit = max_local_epsilon(num_users, delta)
    if epsilon0 > limit:
        raise PrivacyPreconditionError(
            f"shuffle amplification (Feldman-McMillan-Talwar 2021, Thm 3.1) needs epsilon0 <= "
            f"ln(n / (16 ln(2/delta))) = {limit:.4g} for n = {num_users}, delta = {delta:.3g}; "
            f"found epsilon0 = {epsilon0:.4g}. No amplified bound is certified."
        )
    e0 = math.exp(epsilon0)
    inner = 8.0 * math.sqrt(e0 * math.log(4.0 / delta)) / math.sqrt(num_users) + 8.0 * e0 / num_users
    eps = math.log1p((e0 - 1.0) / (e0 + 1.0) * inner)
    return min(eps, float(epsilon0))


def advanced_composition(epsilon: float, delta: float, count: int, delta_slack: float) -> tuple[float, float]:
    """k-fold adaptive composition of (ε, δ)-DP mechanisms (the better of basic and advanced).

    Advanced: (sqrt(2k ln(1/δ')) ε + k ε (e^ε − 1), kδ + δ'); basic: (kε, kδ).

    Returns:
        (ε_total, δ_total).

    References:
        Dwork, Rothblum, Vadhan 2010, Thm III.3; Dwork & Roth 2014, Thm 3.20.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"`count` must be a positive integer. Found {count!r}.")
    if not 0.0 < delta_slack < 1.0:
        raise ConfigError(f"`delta_slack` must be in (0, 1). Found {delta_slack!r}.")
    basic = count * epsilon
    advanced = math.sqrt(2.0 * count * math.log(1.0 / delta_slack)) * epsilon + count * epsilon * math.expm1(epsilon)
    if advanced < basic:
        return advanced, count * delta + delta_slack
    return basic, count * delta


@dataclass(frozen=True)
class ShuffledComposition:
    """Result of :func:`shuffled_two_point_epsilon`.

    Attributes:
        epsilon: total ε over every (coordinate, round) release.
        delta: total δ (<= the requested δ).
        epsilon_per_release: ε of one shuffled coordinate in one round.
        delta_per_release: δ of one shuffled coordinate in one round.
        releases: number of shuffled releases composed (d·T).
    """

    epsilon: float
    delta: float
    epsilon_per_release: float
    delta_per_release: float
    releases: int


def shuffled_two_point_epsilon(
    epsilon0: float, num_users: int, num_coordinates: int, rounds: int, delta: float
) -> ShuffledComposition:
    """Total (ε, δ) of 001's per-coordinate reports when each coordinate is shuffled (n users).

    Splits δ in half: δ/2 over the d·T shuffled releases (each at δ/(2dT)), δ/2 as the slack of
    advanced composition.

    Raises:
        PrivacyPreconditionError: the per-release δ makes the theorem's condition fail.

    References:
        Feldman, McMillan, Talwar 2021, Thm 3.1; Dwork, Rothblum, Vadhan 2010, Thm III.3.
    """
    for name, value in (("num_coordinates", num_coordinates), ("rounds", rounds)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    _check(epsilon0, num_users, delta)
    k = num_coordinates * rounds
    per_delta = delta / (2.0 * k)
    per_eps = shuffle_amplified_epsilon(epsilon0, num_users, per_delta)
    eps, tot_delta = advanced_composition(per_eps, per_delta, k, delta / 2.0)
    return ShuffledComposition(eps, tot_delta, per_eps, per_delta, k)
