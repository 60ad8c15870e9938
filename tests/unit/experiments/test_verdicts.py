"""The recipes' verdict rules on small tables; each table is one the old inline rules got wrong."""

from __future__ import annotations

import math

import pytest

from dpfl.experiments.recipes.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    Estimate,
    all_at_chance,
    better_for_larger,
    claim_better,
    compare,
    interior_minimum,
    near_best,
    order_of_sets,
    spearman,
    trend,
)


def test_estimate_is_mean_and_standard_error() -> None:
    e = Estimate.of([1.0, 2.0, 3.0])
    assert (e.mean, e.n) == (2.0, 3) and e.se == pytest.approx(1.0 / math.sqrt(3), rel=1e-12)
    one = Estimate.of([0.5])
    assert one.n == 1 and math.isnan(one.se) and one.text() == "0.5 (1 seed)"
    with pytest.raises(ValueError, match="values"):
        Estimate.of([])


def test_spearman_uses_average_ranks_for_ties() -> None:
    # 001 Fig. 3(b) Fashion-MNIST reduced: 10.0 / 10.0 / 15.9% at f = 0.05 / 0.1 / 0.25. argsort-of-argsort
    # ranks (the old p001/p002 code) break the tie by position and give ρ = 1.00; with average ranks the
    # ranks are (1.5, 1.5, 3) and ρ = √3/2
    assert spearman([0.05, 0.1, 0.25], [10.0, 10.0, 15.9]) == pytest.approx(math.sqrt(3) / 2, rel=1e-12)
    assert spearman([1, 2, 3, 4], [5.0, 5.0, 5.0, 5.0]) != spearman([1, 2, 3, 4], [5.0, 5.0, 5.0, 5.0])  # nan
    assert spearman([1, 2, 3], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1.0, 2.0]))


def test_a_difference_inside_two_standard_errors_is_a_tie() -> None:
    # three seeds each: means 0.450 vs 0.455, SE 0.004 each → margin 2·√2·0.004 = 0.0113 > 0.005
    a = Estimate.of([0.446, 0.450, 0.454])
    b = Estimate.of([0.451, 0.455, 0.459])
    c = compare(a, b, tolerance=0.001)
    assert c.outcome == "tie" and c.margin == pytest.approx(2 * math.hypot(a.se, b.se), rel=1e-12)
    assert claim_better(a, b, tolerance=0.001, lower_is_better=True) == INCONCLUSIVE
    # the same means with tight seeds: decided
    tight_a, tight_b = Estimate.of([0.4499, 0.4500, 0.4501]), Estimate.of([0.4549, 0.4550, 0.4551])
    assert compare(tight_a, tight_b, tolerance=0.001).outcome == "lower"
    assert claim_better(tight_a, tight_b, tolerance=0.001, lower_is_better=True) == REPRODUCED
    assert claim_better(tight_b, tight_a, tolerance=0.001, lower_is_better=True) == NOT_REPRODUCED


def test_one_seed_uses_the_tolerance_alone() -> None:
    # 000 Fig. 7 reduced: CRD from T0 = 200 reached 0.4504, from the T0 closest to T* 0.4507; the old rule
    # declared a disagreement on this 0.0003
    assert compare(0.4504, 0.4507, tolerance=0.005).outcome == "tie"
    assert compare(0.4504, 0.4607, tolerance=0.005).outcome == "lower"
    with pytest.raises(ValueError, match="tolerance"):
        compare(0.1, 0.2, tolerance=-1.0)


def test_strictly_lower_is_not_met_by_a_tie() -> None:
    # 000 Fig. 5's "larger ε gives a lower loss" counted b <= a: equal losses passed
    assert compare(0.30, 0.30, tolerance=0.0).outcome == "tie"
    assert claim_better(0.30, 0.30, tolerance=0.0, lower_is_better=True) == INCONCLUSIVE


def test_a_trend_over_cells_at_chance_is_inconclusive() -> None:
    # 001 Fashion-MNIST reduced: every cell at ≈ 10%; the old rule (last ≥ first + 1 point, ρ ≥ 0.8 with
    # arbitrary tie-breaking) called 10.0 / 10.0 / 15.9 "reproduced" and a 10 → 11.2 wiggle a rise
    pts = [(0.05, 10.0), (0.1, 10.0), (0.25, 11.2)]
    assert all_at_chance([v for _, v in pts], 10.0, tolerance=3.0)
    t = trend(pts, increasing=True, tolerance=1.0, chance=10.0, chance_tolerance=3.0)
    assert t.verdict == INCONCLUSIVE and t.reason.startswith("every point at chance")
    # one point clearly above chance: the check is no longer vacuous
    t = trend([(0.05, 10.0), (0.1, 10.0), (0.25, 25.0)], increasing=True, tolerance=2.0, chance=10.0,
              chance_tolerance=3.0)
    assert t.verdict == REPRODUCED and t.rho == pytest.approx(math.sqrt(3) / 2)


def test_trend_needs_the_change_beyond_its_margin_and_a_monotone_rank_order() -> None:
    assert trend([(1, 10.0), (2, 20.0), (3, 30.0)], increasing=True, tolerance=2.0).verdict == REPRODUCED
    assert trend([(1, 30.0), (2, 10.0), (3, 31.0)], increasing=True, tolerance=0.5).verdict == NOT_REPRODUCED
    assert trend([(1, 30.0), (2, 31.0), (3, 20.0)], increasing=True, tolerance=2.0).verdict == NOT_REPRODUCED
    # the old rule's 1-point minimum rise passed 1.5 points of noise with ρ = 1 from one seed each
    assert trend([(1, 30.0), (2, 30.5), (3, 31.5)], increasing=True, tolerance=2.0).verdict == INCONCLUSIVE
    # seeds widen the margin: a 4-point rise with SE ≈ 2.9 per end is inside 2 SE
    noisy = [(1, Estimate.of([25.0, 30.0, 35.0])), (2, Estimate.of([27.0, 32.0, 37.0])),
             (3, Estimate.of([29.0, 34.0, 39.0]))]
    assert trend(noisy, increasing=True, tolerance=2.0).verdict == INCONCLUSIVE
    assert trend([(1, 3.0), (2, 2.0), (3, 1.0)], increasing=False, tolerance=0.5).verdict == REPRODUCED


def test_interior_minimum_must_beat_both_edges_beyond_the_margin() -> None:
    # 003 Fig. 11 non-private reduced: argmin K = 10 at 0.9806 against edges 0.9820 / 0.9812 — the old
    # rule said "interior optimum" on a 0.0006–0.0014 difference
    k = [(5, 0.9820), (10, 0.9806), (20, 0.9813), (30, 0.9812), (40, 0.9810), (50, 0.9812)]
    verdict, why = interior_minimum(k, tolerance=0.005)
    assert verdict == INCONCLUSIVE and "argmin 10" in why
    # 003 Fig. 10 reduced (ε = 60): 1.530 at T = 15 against 2.002 / 2.172 at the edges
    t = [(5, 2.0023), (10, 1.6813), (15, 1.5299), (25, 1.6451), (35, 1.9965), (50, 2.1722)]
    assert interior_minimum(t, tolerance=0.005)[0] == REPRODUCED
    # 003 Fig. 11 ε = 60: monotone, minimum at K = N beyond the margin
    mono = [(5, 2.2394), (10, 2.1845), (20, 2.0245), (30, 1.8725), (40, 1.7619), (50, 1.6451)]
    assert interior_minimum(mono, tolerance=0.005)[0] == NOT_REPRODUCED
    # an edge minimum that an interior point ties is not a disagreement
    assert interior_minimum([(1, 1.0), (2, 1.001), (3, 2.0)], tolerance=0.005)[0] == INCONCLUSIVE


def test_near_best_and_the_order_of_two_optima() -> None:
    # 000 Fig. 5-like curves decided on third-digit losses from one seed: T = 200 and 300 tie at ε = 8
    lo = near_best([(100, 0.300), (200, 0.2700), (300, 0.2720), (400, 0.2900)], tolerance=0.005)
    hi = near_best([(100, 0.300), (200, 0.2650), (300, 0.2600), (400, 0.2610)], tolerance=0.005)
    assert lo == [200, 300] and hi == [300, 400]
    assert order_of_sets(lo, hi) == "undecided"  # the old argmin rule said 200 → 300: "rises"
    assert order_of_sets([100], [200, 300]) == "up"
    assert order_of_sets([300], [100, 200]) == "down"
    assert order_of_sets([200], [200]) == "same"


def test_monotone_counts_ties_as_undecided_not_as_steps() -> None:
    from dpfl.experiments.recipes.verdicts import monotone

    # 003 Figs. 2-7: the old rule counted an adjacent pair in order if b > a by any amount
    assert monotone([(50, 1.8327), (60, 1.6451), (100, 1.2372)], increasing=False, tolerance=0.01) == (
        REPRODUCED, 2, 0, 2)
    assert monotone([(50, 1.8327), (60, 1.8300), (100, 1.2372)], increasing=False, tolerance=0.01) == (
        INCONCLUSIVE, 1, 0, 2)
    assert monotone([(50, 1.8327), (60, 1.9000), (100, 1.2372)], increasing=False, tolerance=0.01)[0] == NOT_REPRODUCED


def test_better_for_larger_x_needs_the_win_at_the_top_and_no_loss_in_the_upper_half() -> None:
    # 003 Fig. 10 full (ε = 60, 3 seeds): K = 20 ties all clients at T = 5, 10 and loses beyond the
    # margin from T = 15 on — the claim "K-random better for larger T" is contradicted, not untested
    allc = [(5, Estimate(1.662, 0.0081, 3)), (10, Estimate(1.152, 0.0042, 3)), (15, Estimate(0.8678, 0.0005, 3)),
            (40, Estimate(0.8384, 0.0053, 3)), (80, Estimate(1.658, 0.0025, 3))]
    krand = [(5, Estimate(1.662, 0.008, 3)), (10, Estimate(1.152, 0.0045, 3)), (15, Estimate(0.9351, 0.0009, 3)),
             (40, Estimate(1.316, 0.012, 3)), (80, Estimate(2.083, 0.0062, 3))]
    verdict, why = better_for_larger(krand, allc, tolerance=0.01, lower_is_better=True)
    assert verdict == NOT_REPRODUCED and "b better at x ∈ {15, 40, 80}" in why
    # the crossover the paper describes: b wins at small x, a at the larger half
    a = [(1, 2.0), (2, 1.5), (3, 1.0), (4, 0.8)]
    b = [(1, 1.5), (2, 1.5), (3, 1.2), (4, 1.1)]
    assert better_for_larger(a, b, tolerance=0.01, lower_is_better=True)[0] == REPRODUCED
    assert better_for_larger(b, a, tolerance=0.01, lower_is_better=True)[0] == NOT_REPRODUCED
    # a tie at the largest x decides nothing; so does a win at the top with a loss lower in the upper half
    assert better_for_larger([(1, 1.0), (2, 1.0)], [(1, 1.0), (2, 1.005)], tolerance=0.01,
                             lower_is_better=True)[0] == INCONCLUSIVE
    mixed_a = [(1, 1.0), (2, 1.5), (3, 1.5), (4, 0.9)]
    mixed_b = [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)]
    assert better_for_larger(mixed_a, mixed_b, tolerance=0.01, lower_is_better=True)[0] == INCONCLUSIVE
    # higher-is-better (accuracy) flips the side
    assert better_for_larger(b, a, tolerance=0.01, lower_is_better=False)[0] == REPRODUCED
    assert better_for_larger([(1, 1.0)], [(1, 2.0)], tolerance=0.01, lower_is_better=True)[0] == INCONCLUSIVE
