"""Recipe reports say what each certified ε is conditional on: a figure whose certificate holds
given the cohorts drawn is marked, and the report carries one footnote saying what the mark means
(and that runs from stores written before certificates recorded their basis carry none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpfl.config import RunConfig, load_config, run_id
from dpfl.experiments.recipes.base import (
    GIVEN_COHORTS_MARK,
    GIVEN_COHORTS_NOTE,
    UNRECORDED_BASIS_NOTE,
    Recipe,
    RecipeRun,
    ReportContext,
    basis_mark,
    reproduce,
    stored_privacy,
)
from dpfl.privacy.accounting.certify import Basis, Certificate
from dpfl.rounds.result import PrivacySummary
from dpfl.store import RunStore


def _cert(observer: str, basis: Basis | None) -> Certificate:
    return Certificate(epsilon=2.0, delta=1e-5, method="rdp", observer=observer, privacy_unit="client",
                       relation="add_remove", basis=basis)


def _stored(server: Basis | None, public: Basis | None) -> dict[str, Any]:
    summary = PrivacySummary(certified={"server": _cert("server", server), "public": _cert("public", public)},
                             claimed_epsilon=1.0, claim_notion="", claim_comparable=True, delta=1e-5)
    out = summary.to_dict()
    for c in (out["certified"]["headline"], *out["certified"]["observers"].values()):
        if c["basis"] is None:
            del c["basis"]  # stores written before certificates recorded their basis have no key
    return out


def test_only_a_given_cohorts_certificate_is_marked() -> None:
    assert basis_mark(_cert("server", "given-cohorts")) == GIVEN_COHORTS_MARK
    assert basis_mark(_cert("public", "ex-ante")) == basis_mark(_cert("public", None)) == basis_mark(None) == ""
    # a figure over several runs (the largest over seeds) is marked if any of its certificates is
    assert basis_mark(_cert("server", "ex-ante"), None, _cert("server", "given-cohorts")) == GIVEN_COHORTS_MARK


def _report_of(tmp_path: Path, bases: list[tuple[Basis | None, Basis | None]]) -> str:
    base = load_config("fedavg-mnist")
    store = RunStore(tmp_path / "s.sqlite")

    def build(scale: str) -> list[RecipeRun]:
        return [RecipeRun(f"run {i}", base.model_copy(update={"seed": i, "name": f"basis {i}"}), {"i": i})
                for i in range(len(bases))]

    def run_one(config: RunConfig) -> None:
        rid = run_id(config)
        store.start(rid, config.model_dump(mode="json"), {})
        store.finish(rid, "finished", {"test_accuracy": 0.5, "privacy": _stored(*bases[config.seed])})

    def report(ctx: ReportContext) -> str:  # as the recipes write a certified ε per observer
        rows = []
        for run, rec, _ in ctx.runs:
            priv = stored_privacy(rec)
            assert priv is not None
            rows.append(f"| {run.label} | " + " | ".join(
                f"{c.epsilon:g}{basis_mark(c)}" for c in (priv.certificate("server"), priv.certificate("public"))
                if c is not None) + " |")
        return "\n".join(rows)

    recipe = Recipe("999/basis", "basis marks", "none", "claim", build, report)
    return reproduce(recipe, "smoke", store, tmp_path, run_one=run_one).read_text()


def test_a_report_with_a_marked_figure_says_what_the_mark_means(tmp_path: Path) -> None:
    text = _report_of(tmp_path, [("given-cohorts", "ex-ante")])
    assert f"| run 0 | 2{GIVEN_COHORTS_MARK} | 2 |" in text
    assert f"{GIVEN_COHORTS_NOTE}." in text and UNRECORDED_BASIS_NOTE not in text
    # the footnote closes the body, before the list of runs
    assert text.index(GIVEN_COHORTS_NOTE) < text.index("## Runs")


def test_a_report_without_marks_has_no_footnote(tmp_path: Path) -> None:
    text = _report_of(tmp_path, [("ex-ante", "ex-ante")])
    assert GIVEN_COHORTS_MARK not in text and "given the cohorts" not in text and UNRECORDED_BASIS_NOTE not in text


def test_runs_stored_without_a_basis_are_unmarked_and_the_footnote_says_so(tmp_path: Path) -> None:
    text = _report_of(tmp_path, [(None, None)])
    assert "| run 0 | 2 | 2 |" in text and GIVEN_COHORTS_MARK not in text
    assert UNRECORDED_BASIS_NOTE in text
    # next to marked figures, "unmarked figures hold ex ante" is qualified for them
    text = _report_of(tmp_path / "mixed", [("given-cohorts", "ex-ante"), (None, None)])
    assert f"{GIVEN_COHORTS_NOTE}, except that {UNRECORDED_BASIS_NOTE}." in text
