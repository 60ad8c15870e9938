"""Verdict rules shared by the paper recipes: pure functions over small tables of numbers.

A reproduction report compares settings (ε, T, K, β, …) whose measured values carry run-to-run
noise. The rules here decide a claim only when the data can carry it:

* a difference between two settings counts only beyond its **margin**
  ``max(tolerance, 2 SE of the difference)`` (SE from the seeds of each setting; one seed gives no
  SE, and the margin is then the tolerance alone); inside the margin the answer is
  **inconclusive**, not a pass and not a fail;
* a strict claim ("lower", "<") is not met by a tie;
* a trend or "collapse" check over cells that are all at chance level decides nothing
  (**inconclusive**);
* Spearman's ρ uses average ranks for ties (:func:`scipy.stats.spearmanr`), so equal values
  never produce an ordering that is not in the data.

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
    "Estimate",
    "Trend",
    "all_at_chance",
    "better_for_larger",
    "claim_better",
    "compare",
    "interior_minimum",
    "margin",
    "monotone",
    "near_best",
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
    """A monotone-trend verdict.

    Attributes:
        verdict: reproduced / not reproduced / inconclusive.
        rho: Spearman's ρ of x against the means (average ranks; ``nan`` if undefined).
        change: last minus first mean along sorted x (in the claimed direction's sign convention:
            positive = in the claimed direction).
        margin: ``max(tolerance, 2 SE)`` of that change.
        reason: one short phrase saying why.
    """

    verdict: Verdict
    rho: float
    change: float
    margin: float
    reason: str


def trend(points: Sequence[tuple[float, Estimate | float]], *, increasing: bool, tolerance: float,
          min_rho: float = 0.8, chance: float | None = None, chance_tolerance: float | None = None) -> Trend:
    """The claim "the value rises (``increasing``) / falls with x".

    Rule: with ``chance`` given and every point at chance (:func:`all_at_chance` with
    ``chance_tolerance``, default ``tolerance``) → inconclusive.
    Otherwise the change from the first to the last x (sorted) must exceed its margin in the
    claimed direction and, with ≥ 3 points, Spearman's ρ (average ranks) must be ≥ ``min_rho``
    in that direction → reproduced; a change inside the margin → inconclusive; else not reproduced.
    """
    pts = sorted(((float(x), _as_estimate(v)) for x, v in points), key=lambda p: p[0])
    if len(pts) < 2:
        return Trend(INCONCLUSIVE, math.nan, math.nan, math.nan, "fewer than 2 points")
    sign = 1.0 if increasing else -1.0
    ctol = tolerance if chance_tolerance is None else chance_tolerance
    if chance is not None and all_at_chance([e for _, e in pts], chance, tolerance=ctol):
        return Trend(INCONCLUSIVE, math.nan, math.nan, math.nan, f"every point at chance ({chance:g})")
    first, last = pts[0][1], pts[-1][1]
    c = compare(last, first, tolerance=tolerance)
    rho = spearman([x for x, _ in pts], [e.mean for _, e in pts]) if len(pts) >= 3 else math.nan
    change = sign * c.diff
    if c.outcome == "tie":
        return Trend(INCONCLUSIVE, rho, change, c.margin, "first-to-last change inside the margin")
    if change < 0:
        return Trend(NOT_REPRODUCED, rho, change, c.margin, "changes the other way")
    if len(pts) >= 3 and not (sign * rho >= min_rho):
        return Trend(NOT_REPRODUCED, rho, change, c.margin, f"not monotone enough (ρ below {min_rho:g})")
    return Trend(REPRODUCED, rho, change, c.margin, "changes in the claimed direction beyond the margin")


def monotone(points: Sequence[tuple[float, Estimate | float]], *, increasing: bool,
             tolerance: float) -> tuple[Verdict, int, int, int]:
    """The claim "the value rises (``increasing``) / falls at every step of x" (strict).

    Each adjacent pair (sorted by x) is compared with :func:`compare`: reproduced when every step
    moves in the claimed direction beyond its margin; not reproduced when any step moves the other
    way beyond it; otherwise (some step inside its margin) inconclusive.

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


def interior_minimum(points: Sequence[tuple[float, Estimate | float]], *, tolerance: float) -> tuple[Verdict, str]:
    """The claim "the value has an interior minimum over x" (an optimal T, K, C, …).

    Rule: reproduced when the lowest mean lies strictly inside the grid and is below **both** grid
    edges beyond the margin; not reproduced when the lowest mean lies at an edge and is below every
    interior point beyond the margin; otherwise inconclusive (the minimum is not resolved).

    Returns:
        (verdict, a short description naming the argmin).
    """
    pts = sorted(((float(x), _as_estimate(v)) for x, v in points if math.isfinite(_as_estimate(v).mean)),
                 key=lambda p: p[0])
    if len(pts) < 3:
        return INCONCLUSIVE, "fewer than 3 finite points"
    i = min(range(len(pts)), key=lambda j: pts[j][1].mean)
    x_best, best = pts[i]
    if 0 < i < len(pts) - 1:
        edges = [compare(best, pts[j][1], tolerance=tolerance) for j in (0, len(pts) - 1)]
        if all(c.outcome == "lower" for c in edges):
            return REPRODUCED, f"argmin {x_best:g}, below both edges beyond the margin"
        return INCONCLUSIVE, (f"argmin {x_best:g} inside the grid, but within the margin of an edge "
                              f"(edge − min: {', '.join(f'{-c.diff:.4g} vs {c.margin:.4g}' for c in edges)})")
    inner = [compare(best, pts[j][1], tolerance=tolerance) for j in range(1, len(pts) - 1)]
    if all(c.outcome == "lower" for c in inner):
        return NOT_REPRODUCED, f"argmin {x_best:g} at the grid's edge, below every interior point beyond the margin"
    return INCONCLUSIVE, f"argmin {x_best:g} at the grid's edge, but an interior point is within the margin"


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
