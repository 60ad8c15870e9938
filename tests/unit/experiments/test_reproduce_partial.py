"""`reproduce(..., max_runs=N)`: a sweep run in pieces, each piece reporting what is stored so far."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpfl.config import RunConfig, load_config, run_id
from dpfl.errors import ConfigError
from dpfl.experiments.recipes.base import Recipe, RecipeRun, ReportContext, reproduce
from dpfl.store import RunStore


def _recipe(n: int) -> Recipe:
    base = load_config("fedavg-mnist")

    def build(scale: str) -> list[RecipeRun]:
        return [RecipeRun(f"run {i}", base.model_copy(update={"seed": i, "name": f"partial {i}"}), {"i": i})
                for i in range(n)]

    def report(ctx: ReportContext) -> str:
        return "seen: " + ",".join(str(r.coords["i"]) for r, rec, _ in ctx.runs if rec.status == "finished")

    return Recipe("999/test", "partial sweeps", "none", "claim", build, report)


def _runner(store: RunStore, ran: list[int]):  # type: ignore[no-untyped-def]
    def run_one(config: RunConfig) -> None:
        ran.append(config.seed)
        rid = run_id(config)
        store.start(rid, config.model_dump(mode="json"), {})
        store.finish(rid, "finished", {"test_accuracy": 0.5})
    return run_one


def test_max_runs_runs_the_next_unfinished_runs_and_marks_the_report_partial(tmp_path: Path) -> None:
    store, ran = RunStore(tmp_path / "s.sqlite"), []
    recipe = _recipe(5)
    path = reproduce(recipe, "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=2)
    text = path.read_text()
    assert ran == [0, 1]
    assert "Partial report: 2 of the 5 runs" in text and "seen: 0,1" in text
    # the next piece skips the finished runs and runs the next two
    reproduce(recipe, "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=2)
    assert ran == [0, 1, 2, 3]
    # a piece that finishes the sweep writes a complete report
    text = reproduce(recipe, "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=9).read_text()
    assert ran == [0, 1, 2, 3, 4]
    assert "Partial" not in text and "seen: 0,1,2,3,4" in text


def test_max_runs_zero_reports_only_and_an_empty_store_is_an_error(tmp_path: Path) -> None:
    store, ran = RunStore(tmp_path / "s.sqlite"), []
    with pytest.raises(ConfigError, match="no run of 999/test"):
        reproduce(_recipe(3), "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=0)
    assert ran == []
    with pytest.raises(ConfigError, match="max_runs"):
        reproduce(_recipe(3), "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=-1)
    # without max_runs a missing run is still an error that names the way out
    with pytest.raises(ConfigError, match="--max-runs"):
        reproduce(_recipe(3), "smoke", store, tmp_path, run_one=_runner(store, ran), report_only=True)


def test_a_run_cut_short_is_listed_but_not_reported(tmp_path: Path) -> None:
    """A run killed mid-way (status running/interrupted) must not enter the numbers as if it had ended."""
    store, ran = RunStore(tmp_path / "s.sqlite"), []
    base = load_config("fedavg-mnist")
    seen: list[list[str]] = []

    def build(scale: str) -> list[RecipeRun]:
        return [RecipeRun(f"run {i}", base.model_copy(update={"seed": i, "name": f"cut {i}"}), {"i": i})
                for i in range(3)]

    def report(ctx: ReportContext) -> str:  # no status filter of its own, like the real recipes
        seen.append([rec.status for _, rec, _ in ctx.runs])
        return "seen: " + ",".join(str(r.coords["i"]) for r, _, _ in ctx.runs)

    recipe = Recipe("999/cut", "cut runs", "none", "claim", build, report)
    reproduce(recipe, "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=2)
    for status in ("running", "interrupted"):
        cut = run_id(build("smoke")[2].config)
        store.start(cut, build("smoke")[2].config.model_dump(mode="json"), {})
        store.finish(cut, status, None)
        text = reproduce(recipe, "smoke", store, tmp_path, run_one=_runner(store, ran), max_runs=0).read_text()
        assert seen[-1] == ["finished", "finished"] and "seen: 0,1" in text
        assert "Partial report: 2 of the 3 runs" in text and "3 stored" in text
        assert f"| run 2 | {cut} | {status} (cut short: not in the numbers above) |" in text
        # a report that claims to be complete refuses it, naming the run and how to go on
        with pytest.raises(ConfigError, match=r"run 'run 2' of 999/cut is not finished \(status '" + status):
            reproduce(recipe, "smoke", store, tmp_path, run_one=_runner(store, ran), report_only=True)
    assert ran == [0, 1]
