"""Seeing a run: progress from dpfl.train, per-round metrics through round observers (CSV,
TensorBoard), `dpfl runs` with the certified ε per observer, `report --json` with the per-round
history, and plots of several runs (overlaid; accuracy vs certified ε) whose titles are never cut."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import matplotlib.figure
import pytest
import torch
from torch import nn

import dpfl
from dpfl.cli import main
from dpfl.errors import ConfigError
from dpfl.rounds.observers import CsvMetrics, TensorBoardMetrics, tensorboard_available
from dpfl.store import RunStore

ROUNDS = 3
LONG_NAME = "a user's run with a long descriptive name " * 4


def _data() -> dpfl.FederatedData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 8, generator=g)
    y = (x @ torch.randn(8, 3, generator=g)).argmax(1)
    return dpfl.FederatedData.from_tensors(x[:240], y[:240], x[240:], y[240:],
                                           partition={"kind": "iid", "num_clients": 12})


def _train(store: Path, z: float, **kw: Any) -> dpfl.TrainResult:
    torch.manual_seed(0)
    kw.setdefault("progress", False)
    return dpfl.train(nn.Linear(8, 3), _data(), "dp-fedavg", options={"noise_multiplier": z, "clip_norm": 1.0},
                      sampling={"kind": "poisson", "sample_rate": 0.5}, rounds=ROUNDS, store=store, notice=None,
                      name=f"{LONG_NAME}z={z}", **kw)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dpfl.TrainResult]]:
    store = tmp_path_factory.mktemp("seeing") / "runs" / "dpfl.sqlite"
    return store, [_train(store, 0.8), _train(store, 2.0)]


def test_progress_true_prints_one_line_per_round_false_and_default_off_the_terminal_are_silent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _train(tmp_path / "a.sqlite", 1.0, progress=True)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "round " in ln]
    assert [ln.split("round ", 1)[1].split()[0] for ln in lines] == [f"{t}/{ROUNDS}" for t in range(1, ROUNDS + 1)]
    assert all("ε server" in ln and "acc " in ln and "ETA" in ln for ln in lines)
    _train(tmp_path / "b.sqlite", 1.0, progress=False)
    _train(tmp_path / "c.sqlite", 1.0)  # default None: on only when stderr is a terminal (here it is not)
    assert capsys.readouterr().err == ""
    seen: list[int] = []
    _train(tmp_path / "d.sqlite", 1.0, progress=lambda done, total, metrics, s: seen.append(done))
    assert seen == list(range(1, ROUNDS + 1))
    with pytest.raises(ConfigError, match="`progress` must be True, False, None or a callable"):
        _train(tmp_path / "e.sqlite", 1.0, progress="yes")


def test_csv_observer_gets_every_round_also_from_a_stored_result(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    res = _train(store, 1.0, observers=[CsvMetrics(tmp_path / "m" / "{run_id}.csv")])
    path = tmp_path / "m" / f"{res.run_id}.csv"
    rows = list(csv.DictReader(path.open()))
    assert [int(r["round"]) for r in rows] == list(range(1, ROUNDS + 1))
    stored = RunStore(store).rounds(res.run_id)
    for row, m in zip(rows, stored, strict=True):
        assert float(row["test_accuracy"]) == pytest.approx(m["test_accuracy"], rel=1e-12)
        assert float(row["epsilon_certified_rdp.server"]) == pytest.approx(m["epsilon_certified_rdp"]["server"])
    path.unlink()
    again = _train(store, 1.0, observers=[CsvMetrics(path)])  # returned from the store: replayed
    assert again.run_id == res.run_id and list(csv.DictReader(path.open())) == rows


def test_tensorboard_observer_writes_events_or_says_what_to_install(tmp_path: Path) -> None:
    if not tensorboard_available():
        with pytest.raises(ConfigError, match="pip install tensorboard"):
            TensorBoardMetrics(tmp_path / "tb")
        return
    res = _train(tmp_path / "s.sqlite", 1.0, observers=[TensorBoardMetrics(tmp_path / "tb")])
    assert list((tmp_path / "tb" / res.run_id).glob("events.out.tfevents.*"))


def test_runs_lists_accuracy_and_certified_epsilon_per_observer(
        two_runs: tuple[Path, list[dpfl.TrainResult]], capsys: pytest.CaptureFixture[str]) -> None:
    store, results = two_runs
    assert main(["runs", "--store", str(store), "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    for res in results:
        row = rows[res.run_id]
        assert row["test_accuracy"] == res.test_accuracy and row["rounds"] == ROUNDS
        assert row["epsilon_certified"] == {"server": res.certified_epsilon("server"),
                                            "public": res.certified_epsilon("public")}
        assert row["epsilon_claimed"] == res.claimed_epsilon
    assert main(["runs", "--store", str(store)]) == 0
    table = capsys.readouterr().out
    assert "ε server" in table and "ε public" in table
    for res in results:
        line = next(ln for ln in table.splitlines() if res.run_id in ln)
        assert f"{res.certified_epsilon('server'):.4g}" in line and f"{res.test_accuracy:.4f}" in line


def test_report_json_carries_the_per_round_history(two_runs: tuple[Path, list[dpfl.TrainResult]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store, (res, _) = two_runs
    assert main(["report", res.run_id, "--store", str(store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    history = report["history"]
    assert [h["round"] for h in history] == list(range(1, ROUNDS + 1))
    for h, stored in zip(history, res.history, strict=True):
        assert h["test_accuracy"] == stored["test_accuracy"]
        assert h["epsilon_certified_rdp"] == stored["epsilon_certified_rdp"]


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What each saved figure showed: its title's extent within the figure, its axes' lines."""
    saved: list[dict[str, Any]] = []
    real = matplotlib.figure.Figure.savefig

    def savefig(self: matplotlib.figure.Figure, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        renderer = self.canvas.get_renderer()
        title = self._suptitle
        saved.append({"title": title.get_text() if title is not None else "",
                      "title_box": title.get_window_extent(renderer) if title is not None else None,
                      "fig_box": self.bbox, "axes": [[ln.get_xydata() for ln in ax.get_lines()] for ax in self.axes]})

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved


def test_a_long_run_name_is_wrapped_never_cut(two_runs: tuple[Path, list[dpfl.TrainResult]],
                                              figures: list[dict[str, Any]], tmp_path: Path) -> None:
    store, (res, _) = two_runs
    assert main(["plot", res.run_id, "--store", str(store), "--out", str(tmp_path / "one.png")]) == 0
    (fig,) = figures
    box, page = fig["title_box"], fig["fig_box"]
    assert box.x0 >= page.x0 and box.x1 <= page.x1 and box.y1 <= page.y1, (box, page)
    assert " ".join(fig["title"].split()) .startswith(" ".join(f"{LONG_NAME}z=0.8".split()))  # the full name


def test_plot_overlays_several_runs(two_runs: tuple[Path, list[dpfl.TrainResult]],
                                    figures: list[dict[str, Any]], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    store, results = two_runs
    out = tmp_path / "both.png"
    assert main(["plot", *(r.run_id for r in results), "--store", str(store), "--out", str(out)]) == 0
    assert out.stat().st_size > 1000 and capsys.readouterr().out.strip() == str(out)
    (fig,) = figures
    loss_lines, acc_lines = fig["axes"]
    assert len(loss_lines) == len(acc_lines) == 2
    for res, line in zip(results, acc_lines, strict=True):
        assert line[:, 1].tolist() == [h["test_accuracy"] for h in res.history]
    box, page = fig["title_box"], fig["fig_box"]
    assert box.x0 >= page.x0 and box.x1 <= page.x1


def test_plot_accuracy_against_certified_epsilon_across_runs(two_runs: tuple[Path, list[dpfl.TrainResult]],
                                                             figures: list[dict[str, Any]], tmp_path: Path) -> None:
    store, results = two_runs
    assert main(["plot", "--vs-epsilon", "--observer", "public", *(r.run_id for r in results),
                 "--store", str(store), "--out", str(tmp_path / "eps.png")]) == 0
    (fig,) = figures
    (lines,) = fig["axes"]
    markers = [ln for ln in lines if len(ln) == 1]  # each run's final certificate
    assert sorted(tuple(m[0]) for m in markers) == sorted((r.certified_epsilon("public"), r.test_accuracy)
                                                          for r in results)
    assert results[0].certified_epsilon("public") > results[1].certified_epsilon("public")  # less noise
