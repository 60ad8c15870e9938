"""Reports regenerated from their committed result records (``records.jsonl``), without the run store.

A tiny recipe (three DP-FedAvg runs of 2 rounds on the MNIST-format fixture) is trained, its store
deleted, and its report written again from the records: the same text and the same figure. A sweep
run in pieces on "different machines" (a fresh store per piece) adds the records of the runs it made
and never runs a recorded one again. Every report committed with records regenerates byte for byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dpfl import cli  # noqa: E402
from dpfl.config import RunConfig, parse_config  # noqa: E402
from dpfl.errors import ConfigError  # noqa: E402
from dpfl.experiments.recipes.base import (  # noqa: E402
    MEASURED_FILE,
    SMOKE_NOTE,
    Recipe,
    RecipeRun,
    ReportContext,
    get_recipe,
    reproduce,
)
from dpfl.experiments.records import RECORDS_FILE, read_records  # noqa: E402
from dpfl.rounds import PrivacySummary, run_experiment  # noqa: E402
from dpfl.store import RunStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _tiny_recipe(data_dir: Path) -> Recipe:
    def build(scale: str) -> list[RecipeRun]:
        runs = []
        for i, z in enumerate((0.8, 1.2, 2.0)):
            cfg = parse_config({
                "name": f"records z={z}", "seed": i, "rounds": 2,
                "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
                "partition": {"kind": "iid", "num_clients": 6, "samples_per_client": 20},
                "model": {"name": "logistic"},
                "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": z, "clip_norm": 0.5}},
                "sampling": {"kind": "fixed", "clients_per_round": 3},
                "privacy": {"delta": 1e-5},
                "local": {"lr": 0.1, "steps": 2, "batch_size": 10},
            })
            runs.append(RecipeRun(f"z={z}", cfg, {"z": z, "seed": i}))
        return runs

    def report(ctx: ReportContext) -> str:
        lines = ["| z | accuracy | train loss per round | claimed ε | certified ε (server) |", "|---|---|---|---|---|"]
        fig, ax = plt.subplots(figsize=(3, 2))
        for run, rec, rows in ctx.runs:
            priv = PrivacySummary.of(rec.result)
            assert priv is not None and priv.certified is not None
            losses = [r["train_loss"] for r in ctx.store.rounds(rec.run_id)]
            assert losses == [r["train_loss"] for r in rows]
            lines.append(f"| {run.coords['z']} | {rec.result['test_accuracy']!r} | {losses!r} | "
                         f"{priv.claimed_epsilon!r} | {priv.certified['server'].epsilon!r} |")
            ax.plot([r["round"] for r in rows], losses, label=run.label)
        ax.legend()
        fig.savefig(ctx.out_dir / "tiny.png", dpi=60)
        plt.close(fig)
        return "\n".join(lines)

    return Recipe("999/records", "records round trip", "none", "claim", build, report)


def _runner(store: RunStore, ran: list[str]):  # type: ignore[no-untyped-def]
    def run_one(config: RunConfig) -> Any:
        ran.append(config.name)
        return run_experiment(config, store)
    return run_one


def test_a_report_regenerates_from_its_records_after_the_store_is_deleted(
        mnist_fixture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    recipe, out = _tiny_recipe(mnist_fixture), tmp_path / "reports"
    store_dir = tmp_path / "machine"
    store, ran = RunStore(store_dir / "s.sqlite"), []
    path = reproduce(recipe, "smoke", store, out, run_one=_runner(store, ran))
    assert len(ran) == 3
    text, png = path.read_text(), (path.parent / "tiny.png").read_bytes()
    assert text.count(SMOKE_NOTE) == 1 and text.index(SMOKE_NOTE) < text.index("## The paper says")
    records = read_records(path.parent / RECORDS_FILE)
    assert [r["label"] for r in records] == ["z=0.8", "z=1.2", "z=2.0"]  # the recipe's order
    for rec, stored in zip(records, (store.get(r["run_id"]) for r in records), strict=True):
        assert rec["status"] == "finished" and len(rec["rounds"]) == 2
        assert rec["epsilon"]["claimed"] == stored.result["privacy"]["claimed_epsilon"]
        assert set(rec["epsilon"]["certified"]) == {"server", "public"}
        assert rec["epsilon"]["certified"]["server"]["method"] and rec["epsilon"]["certified"]["server"]["basis"]
        assert "dir" not in rec["config"]["data"] and "model_path" not in rec["final"]  # no machine paths, no weights
    raw = (path.parent / RECORDS_FILE).read_text()
    assert str(mnist_fixture) not in raw and str(store_dir) not in raw

    shutil.rmtree(store_dir)  # the store, its checkpoints and its models
    path.unlink()
    (path.parent / "tiny.png").unlink()
    again = reproduce(recipe, "smoke", None, out, from_records=True)
    assert again.read_text() == text
    assert (again.parent / "tiny.png").read_bytes() == png
    assert (again.parent / RECORDS_FILE).read_text() == raw  # read, not rewritten
    assert not store_dir.exists()

    # the command line: --from-records never opens the store it is given
    monkeypatch.setattr("dpfl.experiments.recipes.get_recipe", lambda key: recipe)
    path.unlink()
    assert cli.main(["reproduce", "999/records", "--scale", "smoke", "--out", str(out), "--from-records",
                     "--store", str(store_dir / "s.sqlite")]) == 0
    assert path.read_text() == text and not store_dir.exists()
    assert "--from-records" in capsys.readouterr().out

    # a store with a recorded run missing the others still reports all three (records complete the store)
    other = RunStore(tmp_path / "other" / "s.sqlite")
    assert reproduce(recipe, "smoke", other, out, run_one=_runner(other, ran)).read_text() == text
    assert len(ran) == 3 and other.list() == []  # nothing trained again


def test_a_sweep_continues_in_pieces_on_fresh_machines_from_the_records(mnist_fixture: Path, tmp_path: Path) -> None:
    recipe, out, ran = _tiny_recipe(mnist_fixture), tmp_path / "reports", []
    records_path = out / "999_records" / "smoke" / RECORDS_FILE
    firsts: list[str] = []
    for piece in range(2):
        store = RunStore(tmp_path / f"machine{piece}" / "s.sqlite")  # another machine: only the records travel
        text = reproduce(recipe, "smoke", store, out, run_one=_runner(store, ran), max_runs=1).read_text()
        assert len(ran) == piece + 1 and len(store.list()) == 1  # one missing cell run, none re-run
        lines = records_path.read_text().splitlines()
        assert len(lines) == piece + 1
        firsts.append(lines[0])
        assert f"Partial report: {piece + 1} of the 3 runs" in text
        shutil.rmtree(tmp_path / f"machine{piece}")
    assert firsts[0] == firsts[1]  # a recorded run is carried over unchanged
    # the last cell is neither stored nor recorded; the way out named is the one --from-records takes
    with pytest.raises(ConfigError, match=r"z=2\.0.*pass --max-runs 0 to report the runs held so far"):
        reproduce(recipe, "smoke", None, out, from_records=True)
    assert "Partial report: 2 of the 3" in reproduce(recipe, "smoke", None, out, from_records=True,
                                                     max_runs=0).read_text()
    with pytest.raises(ConfigError, match="trains nothing"):
        reproduce(recipe, "smoke", None, out, from_records=True, max_runs=1)
    store = RunStore(tmp_path / "machine2" / "s.sqlite")
    text = reproduce(recipe, "smoke", store, out, run_one=_runner(store, ran), max_runs=5).read_text()
    assert ran == ["records z=0.8", "records z=1.2", "records z=2.0"]
    assert "Partial" not in text
    shutil.rmtree(tmp_path / "machine2")
    assert reproduce(recipe, "smoke", None, out, from_records=True).read_text() == text
    assert [json.loads(x)["label"] for x in records_path.read_text().splitlines()] == ["z=0.8", "z=1.2", "z=2.0"]


def test_from_records_without_records_names_the_file_and_the_way_out(mnist_fixture: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"records\.jsonl is missing or empty; run `dpfl reproduce 999/records"):
        reproduce(_tiny_recipe(mnist_fixture), "smoke", None, tmp_path, from_records=True)


COMMITTED = sorted(p.parent for p in (ROOT / "reports").glob(f"*/*/{RECORDS_FILE}"))


# the full-scale reports regenerate the same way as the smoke and reduced ones, from more records: slow
@pytest.mark.parametrize("folder", [pytest.param(p, marks=pytest.mark.slow) if p.name == "full" else p
                                    for p in COMMITTED], ids=[f"{p.parent.name}/{p.name}" for p in COMMITTED])
def test_every_committed_report_with_records_regenerates_byte_for_byte(folder: Path, tmp_path: Path) -> None:
    key = folder.parent.name.replace("_", "/", 1)
    out = tmp_path / "reports" / folder.parent.name / folder.name
    out.mkdir(parents=True)
    shutil.copy(folder / RECORDS_FILE, out / RECORDS_FILE)
    if (folder / MEASURED_FILE).is_file():  # what the report measured on the runs' saved models
        shutil.copy(folder / MEASURED_FILE, out / MEASURED_FILE)
    committed = (folder / "report.md").read_text()
    # a sweep continued in pieces commits a partial report: it is rewritten as one (--max-runs 0)
    partial = "**Partial report:" in committed
    path = reproduce(get_recipe(key), folder.name, None, tmp_path / "reports", from_records=True,
                     max_runs=0 if partial else None)
    assert path.read_text() == committed


def test_a_run_recorded_beside_another_report_is_taken_not_run_again(mnist_fixture: Path, tmp_path: Path) -> None:
    first, out = _tiny_recipe(mnist_fixture), tmp_path / "reports"
    store, ran = RunStore(tmp_path / "a" / "s.sqlite"), []
    reproduce(first, "smoke", store, out, run_one=_runner(store, ran))
    assert len(ran) == 3
    # a second recipe whose runs are the first's, plus one new: on a machine with an empty store
    base_runs = first.build("smoke")
    extra = RecipeRun("z=3.0", base_runs[0].config.model_copy(update={"name": "records z=3.0", "seed": 7}),
                      {"z": 3.0, "seed": 7})

    def build(scale: str) -> list[RecipeRun]:
        return [RecipeRun("again " + r.label, r.config, {**r.coords, "again": True}) for r in base_runs] + [extra]

    second = Recipe("999/again", "records shared", "none", "claim", build, first.report)
    other, ran2, notices = RunStore(tmp_path / "b" / "s.sqlite"), [], []
    path = reproduce(second, "smoke", other, out, run_one=_runner(other, ran2), notice=notices.append)
    assert ran2 == ["records z=3.0"]  # the three recorded beside 999/records are taken, not trained
    assert any("3 run(s) of 999/again" in n and "recorded beside other reports" in n for n in notices)
    records = read_records(path.parent / RECORDS_FILE)
    assert [r["label"] for r in records] == ["again z=0.8", "again z=1.2", "again z=2.0", "z=3.0"]
    assert all(r["cell"]["again"] for r in records[:3])
    theirs = read_records(out / "999_records" / "smoke" / RECORDS_FILE)
    assert [r["rounds"] for r in records[:3]] == [r["rounds"] for r in theirs]
    # the report is then its own: deleting the other report's records changes nothing
    text = path.read_text()
    shutil.rmtree(out / "999_records")
    assert reproduce(second, "smoke", None, out, from_records=True).read_text() == text


def test_every_committed_smoke_report_and_only_those_say_their_verdicts_mean_nothing() -> None:
    reports = sorted((ROOT / "reports").glob("*/*/report.md"))
    assert len(reports) > 40
    smoke = {p for p in reports if p.parent.name == "smoke"}
    assert len(smoke) >= 20
    for p in reports:
        assert (SMOKE_NOTE in p.read_text()) == (p in smoke), p


def test_what_a_report_measures_on_saved_models_and_wall_times_survive_the_store(
        mnist_fixture: Path, tmp_path: Path) -> None:
    tiny = _tiny_recipe(mnist_fixture)
    calls: list[str] = []

    def model_bytes(path: str) -> int:
        calls.append(path)
        return Path(path).stat().st_size  # only the machine that ran holds the file

    def report(ctx: ReportContext) -> str:
        lines = []
        for run, rec, _ in ctx.runs:
            size = ctx.measured(f"model-bytes/{run.label}", lambda rec=rec: model_bytes(rec.result["model_path"]))
            lines.append(f"| {run.label} | {size} | {rec.updated_at - rec.created_at!r} |")
        return "\n".join(lines)

    recipe = Recipe("999/records", "measured", "none", "claim", tiny.build, report)
    store_dir, out = tmp_path / "machine", tmp_path / "reports"
    store, ran = RunStore(store_dir / "s.sqlite"), []
    path = reproduce(recipe, "smoke", store, out, run_one=_runner(store, ran))
    text = path.read_text()
    assert len(calls) == 3
    measured = json.loads((path.parent / MEASURED_FILE).read_text())
    assert sorted(measured) == ["model-bytes/z=0.8", "model-bytes/z=1.2", "model-bytes/z=2.0"]
    assert all(isinstance(v, int) and v > 0 for v in measured.values())
    for record in read_records(path.parent / RECORDS_FILE):
        stored = store.get(record["run_id"])
        assert record["wall_seconds"] == stored.updated_at - stored.created_at > 0

    shutil.rmtree(store_dir)
    assert reproduce(recipe, "smoke", None, out, from_records=True).read_text() == text
    assert len(calls) == 3  # read from measured.json, not measured again

    (path.parent / MEASURED_FILE).write_text("{}\n")
    with pytest.raises(ConfigError, match=r"needs 'model-bytes/z=0\.8'.*measured\.json does not hold it"):
        reproduce(recipe, "smoke", None, out, from_records=True)
    (path.parent / MEASURED_FILE).write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        reproduce(recipe, "smoke", None, out, from_records=True)
