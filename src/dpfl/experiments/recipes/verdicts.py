"""Verdict rules shared by the paper recipes: one function per kind of claim, pure functions over
small tables of numbers.

A reproduction report compares settings (ε, T, K, β, …) whose measured values carry run-to-run
noise. Every claim of one kind goes through the same function here, whichever recipe asks, and
every function uses one noise model:

* a difference between two settings counts only beyond its **margin**
  ``max(tolerance, 2 SE of the difference)`` (SE from the seeds of each setting; one seed gives no
  SE, and the margin is then the tolerance alone); inside the margin the answer is
  **inconclusive**, not a pass and not a fail;
* a strict claim ("lower", "<") is not met by a tie;
* a trend or "collapse" check over cells that are all at chance level decides nothing
  (**inconclusive**).

The kinds of claim and their functions:

============================================  ==========================================
claim                                         function
============================================  ==========================================
a is better than b                            :func:`claim_better`
the value rises / falls with x                :func:`trend` (reversals judged by the margin)
the value rises / falls at every step of x    :func:`monotone`
an interior optimum in x (optimal T, K, C …)  :func:`interior_optimum`
the optimum moves up / down with a parameter  :func:`near_best` + :func:`order_of_sets`
a is better than b for larger x               :func:`better_for_larger`
a equals b ("same accuracy", "not affected")  :func:`equivalent` (TOST over seeds)
a is not worse than b by more than a bound    :func:`not_worse` (one-sided TOST)
the value lies in a range                     :func:`in_range`
the value is at chance ("collapses")          :func:`at_chance`
the claim holds at every setting              :func:`every`
============================================  ==========================================

Monotonicity is judged with the margins, never with a rank correlation of raw means: one dip
inside the noise does not fail a rise, one reversal beyond its margin does. Equality is never
concluded from the absence of a difference: it needs an equivalence test with seeds as
replications (two one-sided t-tests against a stated bound); with one seed an equality is
neither confirmed nor refuted (inconclusive).

Every function is pure (numbers in, a small frozen result out) and imports nothing from dpfl.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "INCONCLUSIVE",
    "NOT_REPRODUCED",
    "REPRODUCED",
    "Comparison",
    "Equivalence",
    "Estimate",
    "Trend",
    "all_at_chance",
    "at_chance",
    "better_for_larger",
    "claim_better",
    "compare",
    "equivalent",
    "every",
    "in_range",
    "interior_minimum",
    "interior_optimum",
    "margin",
    "monotone",
    "near_best",
    "not_worse",
    "order_of_sets",
    "spearman",
    "trend",
]

REPRODUCED: Final = "reproduced"
NOT_REPRODUCED: Final = "not reproduced"
INCONCLUSIVE: Final = "inconclusive"
Verdict = Literal["reproduced", "not reproduced", "inconclusive"]


@dataclass(frozen=True)
class Estimate:
    """Mean and standard error of one setting's value over its seeds.

    Attributes:
        mean: the mean over seeds.
        se: standard error of the mean (sample std / √n); ``nan`` for a single seed.
        n: number of seeds.
    """

    mean: float
    se: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """The estimate of ``values`` (one per seed); non-finite values are kept (they poison the mean).

        Raises:
            ValueError: ``values`` is empty.
        """
        vals = [float(v) for v in values]
        if not vals:
            raise ValueError("`values` must hold at least one number. Found an empty sequence.")
        if len(vals) == 1:
            return cls(vals[0], math.nan, 1)
        return cls(statistics.fmean(vals), statistics.stdev(vals) / math.sqrt(len(vals)), len(vals))

    def text(self, digits: int = 4) -> str:
        """``mean ± SE (n seeds)``, or ``mean (1 seed)``."""
        if self.n < 2:
            return f"{self.mean:.{digits}g} (1 seed)"
        return f"{self.mean:.{digits}g} ± {self.se:.2g} ({self.n} seeds)"


def _as_estimate(x: Estimate | float) -> Estimate:
    return x if isinstance(x, Estimate) else Estimate(float(x), math.nan, 1)


def margin(a: Estimate | float, b: Estimate | float, tolerance: float) -> float:
    """``max(tolerance, 2 SE(a − b))``; SE(a − b) = √(SE_a² + SE_b²), a missing SE counted as 0.

    Raises:
        ValueError: ``tolerance`` is negative or not finite.
    """
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"`tolerance` must be finite and >= 0. Found {tolerance!r}.")
    ea, eb = _as_estimate(a), _as_estimate(b)
    se = math.hypot(0.0 if math.isnan(ea.se) else ea.se, 0.0 if math.isnan(eb.se) else eb.se)
    return max(tolerance, 2.0 * se)


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing setting ``a`` with setting ``b``.

    Attributes:
        outcome: ``"lower"`` (a below b beyond the margin), ``"higher"`` or ``"tie"`` (inside it).
        diff: ``mean_a − mean_b``.
        margin: ``max(tolerance, 2 SE of the difference)``.
    """

    outcome: Literal["lower", "higher", "tie"]
    diff: float
    margin: float

    def text(self, digits: int = 4) -> str:
        """``+0.0123 (margin 0.0100)``."""
        return f"{self.diff:+.{digits}f} (margin {self.margin:.{digits}f})"


def compare(a: Estimate | float, b: Estimate | float, *, tolerance: float) -> Comparison:
    """Is ``a`` lower or higher than ``b`` beyond ``max(tolerance, 2 SE)``, or a tie?

    A non-finite difference (a diverged run) is decided by its sign; ``nan`` is a tie.
    """
    ea, eb = _as_estimate(a), _as_estimate(b)
    diff = ea.mean - eb.mean
    m = margin(ea, eb, tolerance)
    if math.isnan(diff) or abs(diff) <= m:
        return Comparison("tie", diff, m)
    return Comparison("lower" if diff < 0 else "higher", diff, m)


def claim_better(a: Estimate | float, b: Estimate | float, *, tolerance: float, lower_is_better: bool) -> Verdict:
    """The claim "a is better than b" (strict): reproduced beyond the margin, not reproduced when b
    is better beyond it, inconclusive inside it."""
    c = compare(a, b, tolerance=tolerance)
    if c.outcome == "tie":
        return INCONCLUSIVE
    return REPRODUCED if (c.outcome == "lower") == lower_is_better else NOT_REPRODUCED


def all_at_chance(values: Sequence[Estimate | float], chance: float, *, tolerance: float) -> bool:
    """Whether every value is within ``max(tolerance, 2 SE)`` above ``chance`` (or below it).

    A trend or collapse verdict over such cells is vacuous: answer inconclusive.
    """
    ests = [_as_estimate(v) for v in values]
    return bool(ests) and all(compare(e, chance, tolerance=tolerance).outcome != "higher" for e in ests)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's ρ with average ranks for ties (:func:`scipy.stats.spearmanr`).

    Descriptive only: no verdict rests on it (a rank correlation of raw means fails a clean rise
    with one dip inside the noise; :func:`trend` judges reversals by their margins instead).

    Returns ``nan`` with fewer than 3 points or when either side is constant.
    """
    from scipy.stats import spearmanr

    if len(xs) != len(ys):
        raise ValueError(f"`xs` and `ys` must have the same length. Found {len(xs)} and {len(ys)}.")
    if len(xs) < 3 or len(set(map(float, xs))) < 2 or len(set(map(float, ys))) < 2:
        return math.nan
    return float(spearmanr(list(xs), list(ys)).statistic)


@dataclass(frozen=True)
class Trend:
    """A "rises / falls with x" verdict.

    Attributes:
        verdict: reproduced / not reproduced / inconclusive.
        change: last minus first mean along sorted x, signed so that positive is the claimed
            direction (with several points at an end x: the least favourable pair of ends).
        margin: ``max(tolerance, 2 SE)`` of that change.
        reversals: the pairs ``(x_i, x_j)``, ``x_i < x_j``, whose values move against the claimed
            direction beyond their margin (each one refutes the claim).
        reason: one short phrase saying why.
    """

    verdict: Verdict
    change: float
    margin: float
    reversals: tuple[tuple[float, float], ...]
    reason: str


def trend(points: Sequence[tuple[float, Estimate | float]], *, increasing: bool, tolerance: float,
          chance: float | None = None, chance_tolerance: float | None = None) -> Trend:
    """The claim "the value rises (``increasing``) / falls with x" — not necessarily at every step.

    Rule, with the noise model of :func:`compare` (every pair judged against its own margin):

    * with ``chance`` given and every point at chance (:func:`all_at_chance` with
      ``chance_tolerance``, default ``tolerance``) → inconclusive;
    * some pair ``x_i < x_j`` moves against the claimed direction beyond its margin → **not
      reproduced** (a real reversal; a dip inside the noise is not one);
    * otherwise the change from the smallest to the largest x beyond its margin in the claimed
      direction → **reproduced**; inside the margin → inconclusive.

    Several points may share an x (e.g. distances); pairs with equal x are not compared, and the
    change is judged on every pair of a smallest-x and a largest-x point.
    """
    pts = sorted(((float(x), _as_estimate(v)) for x, v in points), key=lambda p: p[0])
    if len({x for x, _ in pts}) < 2:
        return Trend(INCONCLUSIVE, math.nan, math.nan, (), "fewer than 2 values of x")
    sign = 1.0 if increasing else -1.0
    want = "higher" if increasing else "lower"
    ctol = tolerance if chance_tolerance is None else chance_tolerance
    if chance is not None and all_at_chance([e for _, e in pts], chance, tolerance=ctol):
        return Trend(INCONCLUSIVE, math.nan, math.nan, (), f"every point at chance ({chance:g})")
    reversals = tuple((xi, xj) for i, (xi, ei) in enumerate(pts) for xj, ej in pts[i + 1:]
                      if xi < xj and compare(ej, ei, tolerance=tolerance).outcome not in (want, "tie"))
    lo_x, hi_x = pts[0][0], pts[-1][0]
    ends = [compare(ej, ei, tolerance=tolerance) for xi, ei in pts if xi == lo_x for xj, ej in pts if xj == hi_x]
    worst = min(ends, key=lambda c: (c.outcome == want, sign * c.diff))
    change, m = sign * worst.diff, worst.margin
    if reversals:
        shown = ", ".join(f"{a:g} → {b:g}" for a, b in reversals[:4]) + (" …" if len(reversals) > 4 else "")
        return Trend(NOT_REPRODUCED, change, m, reversals,
                     f"moves the other way beyond the margin ({shown})")
    if all(c.outcome == want for c in ends):
        return Trend(REPRODUCED, change, m, (), "changes in the claimed direction beyond the margin, "
                     "no reversal beyond it")
    return Trend(INCONCLUSIVE, change, m, (), "first-to-last change inside the margin")


def monotone(points: Sequence[tuple[float, Estimate | float]], *, increasing: bool,
             tolerance: float) -> tuple[Verdict, int, int, int]:
    """The claim "the value rises (``increasing``) / falls at **every** step of x" (strict).

    Each adjacent pair (sorted by x) is compared with :func:`compare`: reproduced when every step
    moves in the claimed direction beyond its margin; not reproduced when any step moves the other
    way beyond it; otherwise (some step inside its margin) inconclusive. A claim that the value
    rises *with* x (not at each step) is :func:`trend`.

    Returns:
        (verdict, steps in the claimed direction, steps the other way, steps in all).
    """
    pts = sorted(((float(x), _as_estimate(v)) for x, v in points), key=lambda p: p[0])
    want = "higher" if increasing else "lower"
    outs = [compare(b, a, tolerance=tolerance).outcome for (_, a), (_, b) in zip(pts, pts[1:], strict=False)]
    good = sum(o == want for o in outs)
    bad = sum(o not in (want, "tie") for o in outs)
    if not outs:
        return INCONCLUSIVE, 0, 0, 0
    verdict: Verdict = NOT_REPRODUCED if bad else (REPRODUCED if good == len(outs) else INCONCLUSIVE)
    return verdict, good, bad, len(outs)


def interior_optimum(points: Sequence[tuple[float, Estimate | float]], *, tolerance: float,
                     lower_is_better: bool = True) -> tuple[Verdict, str]:
    """The claim "the value has an interior optimum over x" (an optimal T, K, C, …): a minimum
    (``lower_is_better``, a loss) or a maximum (an accuracy).

    Rule: reproduced when the best mean lies strictly inside the grid and is better than **both**
    grid edges beyond the margin; not reproduced when the best mean lies at an edge and is better
    than every interior point beyond the margin; otherwise inconclusive (the optimum is not
    resolved). Non-finite values (a diverged run) are left out.

    Returns:
        (verdict, a short description naming the best x as ``argmin`` / ``argmax``).
    """
    sign = 1.0 if lower_is_better else -1.0
    arg = "argmin" if lower_is_better else "argmax"
    better = "lower" if lower_is_better else "higher"
    pts = sorted(((float(x), _as_estimate(v)) for x, v in points if math.isfinite(_as_estimate(v).mean)),
                 key=lambda p: p[0])
    if len(pts) < 3:
        return INCONCLUSIVE, "fewer than 3 finite points"
    i = min(range(len(pts)), key=lambda j: sign * pts[j][1].mean)
    x_best, best = pts[i]
    if 0 < i < len(pts) - 1:
        edges = [compare(best, pts[j][1], tolerance=tolerance) for j in (0, len(pts) - 1)]
        if all(c.outcome == better for c in edges):
            return REPRODUCED, f"{arg} {x_best:g}, better than both edges beyond the margin"
        return INCONCLUSIVE, (f"{arg} {x_best:g} inside the grid, but within the margin of an edge "
                              f"(edge − best: {', '.join(f'{-c.diff:.4g} vs {c.margin:.4g}' for c in edges)})")
    inner = [compare(best, pts[j][1], tolerance=tolerance) for j in range(1, len(pts) - 1)]
    if all(c.outcome == better for c in inner):
        return NOT_REPRODUCED, (f"{arg} {x_best:g} at the grid's edge, better than every interior point "
                                "beyond the margin")
    return INCONCLUSIVE, f"{arg} {x_best:g} at the grid's edge, but an interior point is within the margin"


def interior_minimum(points: Sequence[tuple[float, Estimate | float]], *, tolerance: float) -> tuple[Verdict, str]:
    """:func:`interior_optimum` of a value where lower is better (a loss)."""
    return interior_optimum(points, tolerance=tolerance, lower_is_better=True)


def better_for_larger(a: Sequence[tuple[float, Estimate | float]], b: Sequence[tuple[float, Estimate | float]], *,
                      tolerance: float, lower_is_better: bool, names: tuple[str, str, str] = ("a", "b", "x"),
                      ) -> tuple[Verdict, str]:
    """The claim "a is better than b for larger x" (a crossover: b may win at small x).

    Rule, over the x that both series hold, judged on the upper half of that grid (x ≥ its median):
    reproduced when a is better beyond the margin at the largest x and b is better beyond it at no x
    of the upper half; not reproduced when b is better beyond the margin at the largest x and a is
    better beyond it at no x of the upper half; otherwise inconclusive.

    Args:
        names: how the description calls a, b and x.

    Returns:
        (verdict, a short description listing where each side wins beyond the margin).
    """
    na, nb, nx = names
    da = {float(x): _as_estimate(v) for x, v in a}
    db = {float(x): _as_estimate(v) for x, v in b}
    xs = sorted(set(da) & set(db))
    if len(xs) < 2:
        return INCONCLUSIVE, f"fewer than 2 common {nx}"
    upper = [x for x in xs if x >= statistics.median(xs)]
    better = "lower" if lower_is_better else "higher"
    a_wins = [x for x in xs if compare(da[x], db[x], tolerance=tolerance).outcome == better]
    b_wins = [x for x in xs if compare(db[x], da[x], tolerance=tolerance).outcome == better]
    top = xs[-1]
    why = (f"{na} better beyond the margin at {nx} ∈ {{{', '.join(f'{x:g}' for x in a_wins)}}}, "
           f"{nb} better at {nx} ∈ {{{', '.join(f'{x:g}' for x in b_wins)}}}; upper half {nx} ≥ {upper[0]:g}")
    if top in a_wins and not set(b_wins) & set(upper):
        return REPRODUCED, why
    if top in b_wins and not set(a_wins) & set(upper):
        return NOT_REPRODUCED, why
    return INCONCLUSIVE, why


def near_best(points: Sequence[tuple[float, Estimate | float]], *, tolerance: float,
              lower_is_better: bool = True) -> list[float]:
    """Every x whose value is within the margin of the best one (the set the data cannot separate)."""
    pts = [(float(x), _as_estimate(v)) for x, v in points]
    if not pts:
        return []
    pick = min if lower_is_better else max
    bx, be = pick(pts, key=lambda p: p[1].mean)
    return sorted(x for x, e in pts if compare(e, be, tolerance=tolerance).outcome == "tie" or x == bx)


def order_of_sets(lo: Sequence[float], hi: Sequence[float]) -> Literal["up", "down", "same", "undecided"]:
    """How a set of candidate optima ``hi`` lies relative to ``lo``: every element above (``up``),
    below (``down``), both the same single value (``same``), or overlapping (``undecided``)."""
    if not lo or not hi:
        return "undecided"
    if min(hi) > max(lo):
        return "up"
    if max(hi) < min(lo):
        return "down"
    if len(set(lo)) == 1 and set(lo) == set(hi):
        return "same"
    return "undecided"


# --------------------------------------------------------------------------- equality, bounds, ranges


@dataclass(frozen=True)
class Equivalence:
    """The outcome of an equivalence (or non-inferiority) test of ``a`` against ``b``.

    Attributes:
        verdict: reproduced (equal within the bound) / not reproduced / inconclusive.
        diff: ``mean_a − mean_b`` (for :func:`not_worse`: signed so that positive is a worse).
        low, high: the (1 − 2α) confidence interval of ``diff`` (Welch, seeds as replications);
            ``nan`` without replication.
        bound: the equivalence bound the claim states.
        reason: one short phrase saying why.
    """

    verdict: Verdict
    diff: float
    low: float
    high: float
    bound: float
    reason: str

    def text(self, digits: int = 4) -> str:
        """``+0.0123 (90% CI −0.0010 … +0.0256; bound ±0.0200)`` or, without replication, ``+0.0123 (one seed)``."""
        if math.isnan(self.low):
            return f"{self.diff:+.{digits}f} (bound {self.bound:.{digits}g}; {self.reason})"
        return (f"{self.diff:+.{digits}f} (CI {self.low:+.{digits}f} … {self.high:+.{digits}f}; bound "
                f"{self.bound:.{digits}g}; {self.reason})")


def _welch(a: Estimate, b: Estimate | float, alpha: float) -> tuple[float, float, float] | None:
    """(diff, SE, one-sided t quantile at 1 − α) of ``a − b``; ``b`` a plain number is exact (no
    noise). None without replication (``a`` — or ``b`` if an estimate — from fewer than 2 seeds)."""
    from scipy.stats import t as student

    if a.n < 2 or math.isnan(a.se):
        return None
    if isinstance(b, Estimate):
        if b.n < 2 or math.isnan(b.se):
            return None
        diff, se = a.mean - b.mean, math.hypot(a.se, b.se)
        num = (a.se**2 + b.se**2) ** 2
        den = a.se**4 / (a.n - 1) + b.se**4 / (b.n - 1)
        df = num / den if den > 0 else math.inf
    else:
        diff, se, df = a.mean - float(b), a.se, float(a.n - 1)
    q = 0.0 if se == 0 else float(student.ppf(1.0 - alpha, df))
    return diff, se, q


def _check_bound(bound: float, tolerance: float, alpha: float) -> None:
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"`bound` must be finite and > 0. Found {bound!r}.")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"`tolerance` must be finite and >= 0. Found {tolerance!r}.")
    if not 0 < alpha < 0.5:
        raise ValueError(f"`alpha` must be in (0, 0.5). Found {alpha!r}.")


def equivalent(a: Estimate, b: Estimate | float, *, bound: float, tolerance: float,
               alpha: float = 0.05) -> Equivalence:
    """The claim "a equals b" (within ``bound``): two one-sided tests (TOST) with seeds as
    replications.

    Rule: with at least 2 seeds on each side, the (1 − 2α) Welch confidence interval of
    ``a − b`` lies inside ``(−bound, bound)`` → **reproduced**; ``|a − b|`` exceeds the bound by
    more than ``max(tolerance, t·SE)`` → **not reproduced**; otherwise inconclusive. With a single
    seed on either side: **inconclusive** — the difference of two single runs has no standard
    error, and rounds of one run are not replications (they are autocorrelated), so neither
    equality nor its refutation is tested.

    Args:
        a, b: the two settings; ``b`` a plain number is an exact reference value (no noise).
        bound: the equivalence bound the claim states (> 0).
        tolerance: the margin floor of :func:`compare` (what one seed's difference must exceed).
        alpha: the level of each one-sided test.

    Raises:
        ValueError: ``bound`` not > 0, ``tolerance`` negative, ``alpha`` outside (0, 0.5).
    """
    _check_bound(bound, tolerance, alpha)
    w = _welch(a, b, alpha)
    diff = a.mean - (b.mean if isinstance(b, Estimate) else float(b))
    if math.isnan(diff):
        return Equivalence(INCONCLUSIVE, diff, math.nan, math.nan, bound, "no finite difference")
    if w is None:
        return Equivalence(INCONCLUSIVE, diff, math.nan, math.nan, bound,
                           "one seed: no replications, no test of equality either way")
    _, se, q = w
    low, high = diff - q * se, diff + q * se
    if -bound < low and high < bound:
        return Equivalence(REPRODUCED, diff, low, high, bound, f"{100 * (1 - 2 * alpha):g}% CI inside ±bound (TOST)")
    if abs(diff) - bound > max(tolerance, q * se):
        return Equivalence(NOT_REPRODUCED, diff, low, high, bound, "|Δ| beyond the bound by more than the margin")
    return Equivalence(INCONCLUSIVE, diff, low, high, bound, "CI crosses the bound")


def not_worse(a: Estimate, b: Estimate | float, *, bound: float, tolerance: float, lower_is_better: bool,
              alpha: float = 0.05) -> Equivalence:
    """The claim "a is not worse than b by more than ``bound``" (a comes close to b, or is
    better): the one-sided half of :func:`equivalent` (a non-inferiority test).

    Rule: with replication, the upper (1 − α) confidence limit of how much worse a is lies below
    the bound → **reproduced**; a is worse by more than ``bound + max(tolerance, t·SE)`` → **not
    reproduced**; otherwise inconclusive. With a single seed on either side: inconclusive (as in
    :func:`equivalent`). ``Equivalence.diff`` is "how much worse a is".
    """
    _check_bound(bound, tolerance, alpha)
    w = _welch(a, b, alpha)
    raw = a.mean - (b.mean if isinstance(b, Estimate) else float(b))
    worse = raw if lower_is_better else -raw
    if math.isnan(worse):
        return Equivalence(INCONCLUSIVE, worse, math.nan, math.nan, bound, "no finite difference")
    if w is None:
        return Equivalence(INCONCLUSIVE, worse, math.nan, math.nan, bound,
                           "one seed: no replications, no test either way")
    _, se, q = w
    low, high = worse - q * se, worse + q * se
    if high < bound:
        return Equivalence(REPRODUCED, worse, low, high, bound, f"upper {100 * (1 - alpha):g}% limit below the bound")
    if worse - bound > max(tolerance, q * se):
        return Equivalence(NOT_REPRODUCED, worse, low, high, bound, "worse beyond the bound by more than the margin")
    return Equivalence(INCONCLUSIVE, worse, low, high, bound, "the confidence limit crosses the bound")


def in_range(x: Estimate | float, low: float, high: float, *, tolerance: float) -> tuple[Verdict, str]:
    """The claim "the value lies in [low, high]" (a stated range, e.g. a gain of 3–5 points).

    Rule: the mean inside the range → reproduced; outside it by more than its margin
    ``max(tolerance, 2 SE)`` → not reproduced; outside by less (a value the noise cannot place
    on either side of the boundary) → inconclusive.

    Raises:
        ValueError: ``low > high``.
    """
    if not low <= high:
        raise ValueError(f"`low` must be <= `high`. Found {low!r} > {high!r}.")
    e = _as_estimate(x)
    m = margin(e, 0.0, tolerance)
    if math.isnan(e.mean):
        return INCONCLUSIVE, "no finite value"
    if low <= e.mean <= high:
        return REPRODUCED, f"{e.mean:.4g} inside [{low:g}, {high:g}]"
    gap = (low - e.mean) if e.mean < low else (e.mean - high)
    side = "below" if e.mean < low else "above"
    if gap > m:
        return NOT_REPRODUCED, f"{e.mean:.4g} {side} [{low:g}, {high:g}] by {gap:.4g}, beyond the margin {m:.4g}"
    return INCONCLUSIVE, f"{e.mean:.4g} {side} [{low:g}, {high:g}] by {gap:.4g}, within the margin {m:.4g}"


def at_chance(x: Estimate | float, chance: float, *, tolerance: float) -> tuple[Verdict, str]:
    """The claim "the value is at chance" (a model that collapsed): :func:`in_range` of
    ``[chance − tolerance, chance + tolerance]``, the noise margin then ``2 SE`` alone."""
    return in_range(x, chance - tolerance, chance + tolerance, tolerance=0.0)


def every(verdicts: Sequence[str]) -> Verdict | None:
    """A claim made for every setting: not reproduced if one setting refutes it, reproduced if all
    reproduce it, else inconclusive; None when there is no setting to judge."""
    if not verdicts:
        return None
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    return REPRODUCED if all(v == REPRODUCED for v in verdicts) else INCONCLUSIVE
