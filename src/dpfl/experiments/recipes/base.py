"""Recipe types, discovery, and the sweep that runs a recipe and writes its report."""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpfl.config import RunConfig, run_id
from dpfl.errors import ConfigError
from dpfl.experiments.records import (
    RECORDS_FILE,
    CombinedSource,
    RecordStore,
    RunSource,
    config_hash,
    current_hash,
    make_record,
    read_records,
    to_run_record,
    write_records,
)
from dpfl.privacy.accounting.certify import Certificate
from dpfl.rounds.result import PrivacySummary
from dpfl.store import RunRecord, RunStore

SCALES = ("smoke", "reduced", "full")
#: beside a report: what its recipe measured on the runs' saved models (:meth:`ReportContext.measured`)
MEASURED_FILE = "measured.json"
#: store statuses of a run that has not ended (a later `reproduce` resumes it from its checkpoint)
IN_PROGRESS = ("running", "interrupted")

# Each module exposes ``RECIPES: list[Recipe]``; modules not shipped are skipped.
_RECIPE_MODULES = (
    "dpfl.experiments.recipes.udp_crd",
    "dpfl.experiments.recipes.ldp_fl",
    "dpfl.experiments.recipes.pmidp_fl",
    "dpfl.experiments.recipes.nbafl",
    "dpfl.experiments.recipes.dp_fedavg_blur_lus",
    "dpfl.experiments.recipes.fleet",
)


# --------------------------------------------------------------------------- certified ε in reports

#: Written after a certified ε whose certificate holds given the cohorts drawn in its run
#: (``Certificate.basis == "given-cohorts"``); :func:`basis_footnote` explains it under the report.
GIVEN_COHORTS_MARK = "†"
GIVEN_COHORTS_NOTE = (f"{GIVEN_COHORTS_MARK} given the cohorts drawn in this run: a valid statement about this run "
                      "(the draw is independent of the data), not (ε, δ)-DP of the random schedule; unmarked "
                      "figures hold ex ante")
UNRECORDED_BASIS_NOTE = ("certified figures of runs from stores written before certificates recorded their basis "
                         "carry no basis and no mark (whether they hold ex ante or given the cohorts drawn is not "
                         "recorded)")


def stored_privacy(rec: RunRecord | None) -> PrivacySummary | None:
    """A stored run's privacy summary (None: not ended, or not private)."""
    return None if rec is None else PrivacySummary.of(rec.result)


def basis_mark(*certs: Certificate | None) -> str:
    """:data:`GIVEN_COHORTS_MARK` if a figure rests on a given-cohorts certificate, else "".

    A figure taken over several runs (the largest over seeds) is marked if any of its
    certificates is; a certificate without a basis (older stores) is not marked.
    """
    return GIVEN_COHORTS_MARK if any(c is not None and c.basis == "given-cohorts" for c in certs) else ""


def basis_footnote(body: str, records: list[RunRecord]) -> list[str]:
    """The footnote line under a report: what a marked figure is conditional on, and that figures
    of runs stored before certificates recorded their basis carry none. Empty when neither applies."""
    marked = GIVEN_COHORTS_MARK in body
    unrecorded = False
    for rec in records:
        summary = stored_privacy(rec)
        certs = [*(summary.certified or {}).values(), *(summary.spent or {}).values()] if summary else []
        unrecorded |= any(c.basis is None for c in certs)
    if marked and unrecorded:
        return [f"{GIVEN_COHORTS_NOTE}, except that {UNRECORDED_BASIS_NOTE}.", ""]
    if marked:
        return [f"{GIVEN_COHORTS_NOTE}.", ""]
    if unrecorded:
        return [f"Certified ε: {UNRECORDED_BASIS_NOTE}.", ""]
    return []


@dataclass(frozen=True)
class RecipeRun:
    """One run of a recipe: a label, its config, and the coordinates it is plotted at."""

    label: str
    config: RunConfig
    coords: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReportContext:
    """What a recipe's report function reads: its runs, their stored records and rounds (from the run
    store, or from the result records beside the report), and the numbers it measured on what a
    record does not hold (:meth:`measured`)."""

    recipe: Recipe
    scale: str
    store: RunSource
    runs: list[tuple[RecipeRun, RunRecord, list[dict[str, Any]]]]
    out_dir: Path
    #: True when the report is written from its records alone: :meth:`measured` reads, never computes
    from_records: bool = False
    #: what :meth:`measured` returned, by key (written as ``measured.json`` beside the report)
    measured_values: dict[str, Any] = field(default_factory=dict)

    def measured(self, key: str, compute: Callable[[], Any]) -> Any:
        """A number (or a JSON value) a report measures on what a run's record does not hold, such
        as its final model's weights.

        Written from the run store, ``compute()`` is called and its value kept under ``key``; the
        sweep writes the kept values as ``measured.json`` beside the report. Written from the records
        (``--from-records``), the value is read from that file instead, so the report reads the same
        byte for byte without the saved models. The value goes through JSON both ways, so it renders
        the same either way.

        Raises:
            ConfigError: from the records, ``key`` is not in ``measured.json``.
        """
        if self.from_records:
            if key not in self.measured_values:
                raise ConfigError(f"the report of {self.recipe.key} at scale {self.scale!r} needs {key!r}, measured on "
                                  f"the runs' saved models, and {self.out_dir / MEASURED_FILE} does not hold it; "
                                  "write the report from the run store that holds the models (--report-only)")
            return self.measured_values[key]
        value = json.loads(json.dumps(compute(), allow_nan=True))
        self.measured_values[key] = value
        return value


@dataclass(frozen=True)
class Recipe:
    """A reproduced figure or table.

    Attributes:
        key: "<paper>/<figure>", e.g. "000/fig5".
        title: what the figure shows.
        paper: the paper file it comes from.
        paper_claim: markdown: the paper's stated values or qualitative claims for this figure.
        build: scale ("smoke" | "reduced" | "full") → the runs.
        report: writes the PNG(s) into ``ctx.out_dir`` and returns the markdown body (our table,
            the paper's values next to ours, and a verdict on each claim, measured not assumed).
        notes: substitutions and scale reductions, stated on the report (e.g. a stand-in data set).
    """

    key: str
    title: str
    paper: str
    paper_claim: str
    build: Callable[[str], list[RecipeRun]]
    report: Callable[[ReportContext], str]
    notes: str = ""


def all_recipes() -> dict[str, Recipe]:
    found: dict[str, Recipe] = {}
    for name in _RECIPE_MODULES:
        module = importlib.import_module(name)  # a module that fails to import is an error
        for recipe in module.RECIPES:
            found[recipe.key] = recipe
    return found


def get_recipe(key: str) -> Recipe:
    table = all_recipes()
    if key not in table:
        raise ConfigError(f"unknown reproduction {key!r}; valid: {sorted(table)}")
    return table[key]


SMOKE_NOTE = ("**Smoke scale: a handful of clients and rounds, a check that the pipeline runs end to end. "
              "Its numbers and verdicts say nothing about the paper's claims.**")
"""Heads every smoke-scale report (so a decided verdict at smoke scale is never read as a finding)."""


def reproduce(
    recipe: Recipe,
    scale: str,
    store: RunStore | None,
    out_root: Path,
    *,
    data_dir: str | None = None,
    run_one: Callable[[RunConfig], Any] | None = None,
    report_only: bool = False,
    max_runs: int | None = None,
    from_records: bool = False,
    notice: Callable[[str], None] | None = None,
) -> Path:
    """Run every run of ``recipe`` at ``scale`` (finished runs are skipped) and write its report
    and its result records (``records.jsonl`` beside the report, see :mod:`dpfl.experiments.records`).

    A run whose record is already beside the report is not run again: its numbers are read from
    the record. With ``from_records`` the report is written from the records alone (no store, no
    training). With ``max_runs`` set, at most that many missing runs are run (in the recipe's order;
    ``0`` runs none), their records are added, and the report covers the runs held so far, marked
    as partial. A sweep too long for one sitting is run in pieces this way, on one machine (each
    piece resumes the run it stopped in from its checkpoint) or on several (commit the records
    between pieces).

    Returns:
        the path of the markdown report.

    Raises:
        ConfigError: bad ``scale`` or ``max_runs``; a run is missing from the store and the records
            (without ``max_runs``); with ``max_runs``, no run of the recipe is held yet;
            ``from_records`` with ``max_runs`` > 0 (that would train).
    """
    if max_runs is not None and (isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 0):
        raise ConfigError(f"`max_runs` must be an integer >= 0. Found {max_runs!r}.")
    if from_records and max_runs:
        raise ConfigError(f"--from-records trains nothing: --max-runs must be 0 or absent with it. Found {max_runs}.")
    partial = max_runs is not None
    if scale not in SCALES:
        raise ConfigError(f"`scale` must be one of {list(SCALES)}. Found {scale!r}.")
    runs = recipe.build(scale)
    if not runs:
        return _computed(recipe, scale, out_root, store)
    if data_dir:
        runs = [
            RecipeRun(r.label, r.config.model_copy(update={"data": r.config.data.model_copy(update={"dir": data_dir})}),
                      r.coords)
            for r in runs
        ]
    out_dir = out_root / recipe.key.replace("/", "_") / scale
    records_path = out_dir / RECORDS_FILE
    kept = read_records(records_path)
    if from_records and not kept:
        raise ConfigError(f"no result records of {recipe.key} at scale {scale!r}: {records_path} is missing or "
                          f"empty; run `dpfl reproduce {recipe.key} --scale {scale}` (or with --max-runs N) first")
    by_hash = {current_hash(r): r for r in kept}
    hashes = [config_hash(r.config) for r in runs]
    stale = len(set(by_hash) - set(hashes))
    if stale and notice is not None:
        notice(f"{stale} record(s) in {records_path} match no run of {recipe.key} at scale {scale!r} "
               "(the recipe changed since they were written); they are left out"
               + ("" if from_records else " and dropped from the file"))
    # a run recorded beside another report (the same config, e.g. a grid shared by a reduced and a
    # full figure) is not run again: its record is taken, relabelled as this recipe's cell
    borrowed: dict[str, dict[str, Any]] = {}
    if not from_records:
        wanted = {h for h in hashes if h not in by_hash}
        if wanted and store is not None:
            wanted = {h for h, r in zip(hashes, runs, strict=True)
                      if h in wanted and not _finished(store.find(run_id(r.config)))}
        borrowed = records_elsewhere(out_root, records_path, wanted) if wanted else {}
        if borrowed and notice is not None:
            notice(f"{len(borrowed)} run(s) of {recipe.key} at scale {scale!r} are recorded beside other reports: "
                   "their records are taken, not run again")
        by_hash.update(borrowed)
    if from_records or store is None:
        if not from_records:
            raise ConfigError("a run store is needed unless the report is written from its records")
        source: RunSource = RecordStore(records_path, kept)
    else:
        source = CombinedSource(store, RecordStore(records_path, kept + list(borrowed.values())))
    started = time.perf_counter()
    if not report_only and not from_records:
        if run_one is None:
            raise ConfigError("reproduce needs `run_one` to make the runs it does not hold")
        started_runs = 0
        for r, h in zip(runs, hashes, strict=True):
            if h in by_hash:
                continue  # a recorded result: not run again
            if partial:
                if store is not None and _finished(store.find(run_id(r.config))):
                    continue
                if started_runs >= max_runs:  # type: ignore[operator]
                    break
                started_runs += 1
            run_one(r.config)
    elapsed = time.perf_counter() - started
    records: list[tuple[RecipeRun, RunRecord, list[dict[str, Any]]]] = []
    in_progress: list[tuple[RecipeRun, RunRecord]] = []
    new_records: list[dict[str, Any]] = []
    for r, h in zip(runs, hashes, strict=True):
        rec = None if from_records else store.find(run_id(r.config))  # type: ignore[union-attr]
        if rec is not None and rec.status not in IN_PROGRESS:
            rows = store.rounds(rec.run_id)  # type: ignore[union-attr]
            records.append((r, rec, rows))
            new_records.append(make_record(r.label, r.coords, r.config, rec, rows))
            continue
        if h in by_hash:
            record = by_hash[h]
            if h in borrowed:
                record = {**record, "label": r.label, "cell": r.coords}
            records.append((r, to_run_record(record), list(record["rounds"])))
            new_records.append(record)
            continue
        if rec is None:
            if partial:
                continue
            where = records_path if from_records else f"{store.path if store else '?'} or {records_path}"
            raise ConfigError(f"run {r.label!r} of {recipe.key} is not in {where}; "
                              + ("run without --from-records to make it, or pass --max-runs 0 to report the runs "
                                 "held so far" if from_records else
                                 "run without --report-only, or pass --max-runs 0 to report the runs held so far"))
        # a run cut short (it resumes from its checkpoint): its last round is not a result
        if not partial:
            raise ConfigError(f"run {r.label!r} of {recipe.key} is not finished (status {rec.status!r}); run "
                              "without --report-only to resume it, or pass --max-runs 0 for a partial report")
        in_progress.append((r, rec))
    if not records:
        raise ConfigError(f"no run of {recipe.key} at scale {scale!r} is in "
                          f"{records_path if from_records else (store.path if store else '?')} yet; run with "
                          "--max-runs N (N >= 1) first")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not from_records:
        write_records(records_path, new_records)
    measured_path = out_dir / MEASURED_FILE
    ctx = ReportContext(recipe, scale, source, records, out_dir, from_records=from_records,
                        measured_values=_read_measured(measured_path) if from_records else {})
    body = recipe.report(ctx)
    if not from_records:
        if ctx.measured_values:
            text = json.dumps(ctx.measured_values, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=True)
            measured_path.write_text(text + "\n", encoding="utf-8")
        else:
            measured_path.unlink(missing_ok=True)
    distinct = {rec.run_id: rows for _, rec, rows in records}  # a run may serve two cells of a recipe
    total_run_seconds = sum(sum(x.get("seconds", 0.0) for x in rows) for rows in distinct.values())
    shared = len(records) - len(distinct)
    if notice is not None:
        notice(f"{recipe.key} ({scale}): {len(records)} run(s) reported, this invocation {elapsed:.0f} s")
    lines = [
        f"# {recipe.key}: {recipe.title}",
        "",
        f"Paper: `{recipe.paper}`. Scale: **{scale}**. Runs: {len(distinct)} "
        + (f"for {len(records)} cells ({shared} run(s) serve two cells) " if shared else "")
        + f"(training time summed over runs: {total_run_seconds:.0f} s).",
        f"Command: `dpfl reproduce {recipe.key} --scale {scale}`. Result records: `{RECORDS_FILE}` beside this "
        f"report (one line per run); `dpfl reproduce {recipe.key} --scale {scale} --from-records` rewrites this "
        "report from them, without a run store and without training.",
        "",
    ]
    if scale == "smoke":
        lines[4:4] = ["", SMOKE_NOTE]
    finished = sum(1 for _, rec, _ in records if rec.status == "finished")
    if partial and len(records) < len(runs):
        lines[3:3] = [
            f"**Partial report: {finished} of the {len(runs)} runs of this scale are finished "
            f"({len(records) + len(in_progress)} stored). Every number and verdict below covers only the "
            f"ended runs"
            f"{' (not the ' + str(len(in_progress)) + ' cut short, listed under Runs)' if in_progress else ''}; "
            f"run `dpfl reproduce {recipe.key} --scale {scale} --max-runs N` again to add N more.**",
            "",
        ]
    if recipe.notes:
        lines += ["## Notes", "", recipe.notes, ""]
    lines += ["## The paper says", "", recipe.paper_claim, "", "## Ours", "", body, ""]
    lines += basis_footnote(body, [rec for _, rec, _ in records])
    lines += ["## Runs", ""]
    lines += ["| label | run id | status |", "|---|---|---|"]
    lines += [f"| {r.label} | {rec.run_id} | {rec.status} |" for r, rec, _ in records]
    lines += [f"| {r.label} | {rec.run_id} | {rec.status} (cut short: not in the numbers above) |"
              for r, rec in in_progress]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _finished(rec: RunRecord | None) -> bool:
    return rec is not None and rec.status == "finished"


def records_elsewhere(out_root: Path, own: Path, wanted: set[str]) -> dict[str, dict[str, Any]]:
    """The finished runs among ``wanted`` (config hashes) recorded beside other reports under
    ``out_root`` (``*/*/records.jsonl`` but ``own``), the first record found per hash, folders in
    sorted order."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(out_root.glob(f"*/*/{RECORDS_FILE}")):
        if path.resolve() == own.resolve():
            continue
        for record in read_records(path):
            if record.get("status") != "finished":
                continue
            h = current_hash(record)
            if h in wanted and h not in found:
                found[h] = record
        if len(found) == len(wanted):
            break
    return found


def _read_measured(path: Path) -> dict[str, Any]:
    """The values of a report's ``measured.json`` (empty when it has none).

    Raises:
        ConfigError: the file is not a JSON object.
    """
    if not path.is_file():
        return {}
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not JSON ({err.msg} at line {err.lineno}); restore the file from git") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path} must hold a JSON object of measured values. Found {type(values).__name__}.")
    return values


def _computed(recipe: Recipe, scale: str, out_root: Path, store: RunStore | None) -> Path:
    """The report of a recipe with no runs (a figure computed from the paper's formulas): no
    training and nothing to record, so it reads the same with or without a store or records."""
    del store
    out_dir = out_root / recipe.key.replace("/", "_") / scale
    out_dir.mkdir(parents=True, exist_ok=True)
    body = recipe.report(ReportContext(recipe, scale, RecordStore(out_dir / RECORDS_FILE, []), [], out_dir))
    lines = [
        f"# {recipe.key}: {recipe.title}",
        "",
        f"Paper: `{recipe.paper}`. Scale: **{scale}** (computed, no runs: every scale is the same computation).",
        f"Command: `dpfl reproduce {recipe.key} --scale {scale}` (seconds, no data).",
        "",
    ]
    if recipe.notes:
        lines += ["## Notes", "", recipe.notes, ""]
    lines += ["## The paper says", "", recipe.paper_claim, "", "## Ours", "", body, ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
