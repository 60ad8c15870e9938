"""fleet/availability: the experiment's grid, its public denominator and its verdicts (fake runs)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import GIVEN_COHORTS_MARK, ReportContext
from dpfl.experiments.recipes.fleet import LABELS, METHODS, expected_cohort
from dpfl.privacy.accounting.certify import Certificate
from dpfl.rounds.result import PrivacySummary
from dpfl.sampling.schemas import AvailabilitySampler


def test_the_reduced_grid_is_the_issue_s_grid_ordered_seed_by_seed() -> None:
    runs = get_recipe("fleet/availability").build("reduced")
    assert len(runs) == 2 * 3 * 5 * 3 == 90
    # --max-runs takes runs in order: every cell's first seed comes before any second seed
    seeds = [r.coords["seed"] for r in runs]
    assert seeds == sorted(seeds) and seeds[:30] == [0] * 30
    cells = {(r.coords["dataset"], r.coords["method"], r.coords["epsilon"]) for r in runs}
    assert len(cells) == 30
    for r in runs:
        c = r.config
        assert c.rounds >= 500 and c.partition.num_clients >= 1000
        opts = c.algorithm.options
        # only the noise differs between methods: one server optimizer, one clip, one denominator
        assert (opts["server_lr"], opts["server_momentum"], opts["clip_norm"]) == (0.15, 0.9, 1.0)
        assert opts["denominator"] == pytest.approx(2000 * 6 / 7 / 24)
        assert opts["target_epsilon"] == r.coords["epsilon"]
        if r.coords["method"] == "poisson":
            assert c.sampling.kind == "cyclic_poisson" and c.sampling.min_separation == 1
            assert c.sampling.sample_rate * 2000 == pytest.approx(opts["denominator"])
            assert opts["mechanism"] == "independent"
        else:
            assert c.sampling.kind == "availability" and c.sampling.min_separation == 24
            assert opts["mechanism"] == r.coords["method"]


def test_expected_cohort_matches_the_availability_simulator() -> None:
    """The public denominator (a formula) against the cohorts the sampler draws: within 3% over
    480 rounds after the first day (the first day has no earlier participations to skip)."""
    n, period = 2000, 24
    sampler = AvailabilitySampler(min_separation=24, period=period, window=0.25, checkin_rate=0.5, spread=0.15)
    import torch

    sizes = [len(sampler.sample_round(t, n, lambda t: torch.Generator().manual_seed(1000 + t))) for t in range(500)]
    mean = sum(sizes[period:]) / len(sizes[period:])
    # by hand: at r = 1/2 the uniform π = 1/(w + 1) solves the chain's balance equations
    # (column i: π(Σ_{m=1}^{i+1} 2^-m + 2^-(i+1)) = π), so p = w/(w + 1) = 6/7 with w = 6
    assert expected_cohort(n, period) == pytest.approx(n * 6 / 7 / period, rel=1e-12)
    assert mean == pytest.approx(expected_cohort(n, period), rel=0.03)


def _stored(claim: float) -> dict[str, Any]:
    cert = Certificate(epsilon=claim - 0.5, delta=1e-5, method="pld", observer="public", privacy_unit="client",
                       relation="add_remove", basis="given-cohorts")
    server = Certificate(epsilon=math.inf, delta=1e-5, method="rdp", observer="server", privacy_unit="client",
                         relation="add_remove", basis="given-cohorts")
    return PrivacySummary(certified={"public": cert, "server": server}, claimed_epsilon=claim, claim_notion="",
                          claim_comparable=True, delta=1e-5).to_dict()


def _ctx(tmp_path: Path, accs: dict[tuple[str, float], list[float]]) -> ReportContext:
    runs = []
    for (method, eps), values in accs.items():
        for seed, acc in enumerate(values):
            rec = SimpleNamespace(config={}, result={"privacy": _stored(eps), "noise": {"noise_multiplier": 3.0}})
            rows = [{"round": 0, "clients": 80, "seconds": 0.1}, {"round": 1, "clients": 84, "test_accuracy": acc}]
            coords = {"dataset": "mnist", "method": method, "epsilon": eps, "seed": seed}
            runs.append((SimpleNamespace(label=f"{method} {eps} {seed}", coords=coords), rec, rows))
    return ReportContext(get_recipe("fleet/availability"), "reduced", None, runs, tmp_path)  # type: ignore[arg-type]


def test_the_ordering_verdicts_follow_the_rules(tmp_path: Path) -> None:
    accs = {
        # ε = 8: BLT ≈ banded within 0.2 points on 3 seeds, both 5 points above the tree, tree 5 above
        ("blt", 8.0): [0.900, 0.901, 0.902], ("banded", 8.0): [0.899, 0.900, 0.901],
        ("tree", 8.0): [0.850, 0.852, 0.848], ("independent", 8.0): [0.800, 0.801, 0.799],
        ("poisson", 8.0): [0.950, 0.951, 0.949],
        # ε = 2: the tree beats banded MF beyond the margin (refutes "banded > tree" over all cells)
        ("blt", 2.0): [0.700, 0.702, 0.698], ("banded", 2.0): [0.600, 0.601, 0.599],
        ("tree", 2.0): [0.650, 0.651, 0.649], ("independent", 2.0): [0.651, 0.650, 0.649],
        ("poisson", 2.0): [0.700, 0.701, 0.699],
    }
    text = get_recipe("fleet/availability").report(_ctx(tmp_path, accs))
    assert (tmp_path / "accuracy_vs_epsilon.png").is_file()
    assert f"| {LABELS['blt']} | 70.00 ± 0.12 | 90.10 ± 0.06 |" in text
    def row(a: str, word: str, b: str) -> str:
        prefix = f"| {LABELS[a]} {word} {LABELS[b]} |"
        (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
        return line

    # BLT vs banded at ε = 2 differs by 10 points: equivalence refuted there, so over all cells too
    assert row("blt", "≈", "banded").endswith("| not reproduced | reproduced | **not reproduced** |")
    assert row("banded", ">", "tree").endswith("| not reproduced | reproduced | **not reproduced** |")
    assert row("blt", ">", "tree").endswith("| reproduced | reproduced | **reproduced** |")
    # the tree ties the independent noise at ε = 2: inconclusive there, so not reproduced over all
    assert row("tree", ">", "independent").endswith("| inconclusive | reproduced | **inconclusive** |")
    assert "the sampled reference is above BLT (Δ +4.90 points" in text
    assert "the sampled reference is within the margin of BLT (Δ +0.00 points" in text
    # claimed and certified ε side by side, the given-cohorts mark on the certificate
    assert f"| MNIST | {LABELS['tree']} | 8 | 3 | 7.5{GIVEN_COHORTS_MARK} | 82.0 |" in text
    assert set(METHODS) == set(LABELS)


def test_one_seed_leaves_the_equality_untested(tmp_path: Path) -> None:
    accs = {("blt", 8.0): [0.900], ("banded", 8.0): [0.900], ("tree", 8.0): [0.5], ("independent", 8.0): [0.4],
            ("poisson", 8.0): [0.95]}
    text = get_recipe("fleet/availability").report(_ctx(tmp_path, accs))
    assert "one seed: no replications, no test of equality either way" in text
