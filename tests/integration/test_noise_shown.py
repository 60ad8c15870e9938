"""A budget stop says what it would have cost, and the noise a run chose is shown (with its ratio
to the update's scale, and a notice when the noise swamps the signal). Tiny runs of dpfl.train."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dpfl
from dpfl.cli import main
from dpfl.rounds.noise import SWAMPED_RATIO, noise_line
from dpfl.store import RunStore


def _data(dim: int = 8) -> dpfl.FederatedData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, dim, generator=g)
    y = (x @ torch.randn(dim, 3, generator=g)).argmax(1)
    return dpfl.FederatedData.from_tensors(x[:240], y[:240], x[240:], y[240:],
                                           partition={"kind": "iid", "num_clients": 12})


def _train(store: Path, options: dict[str, Any], *, dim: int = 8, rounds: int = 3, notices: list[str] | None = None,
           **kw: Any) -> dpfl.TrainResult:
    torch.manual_seed(0)
    return dpfl.train(nn.Linear(dim, 3), _data(dim), "dp-fedavg", options={"clip_norm": 1.0, **options},
                      sampling={"kind": "poisson", "sample_rate": 0.5}, rounds=rounds, store=store,
                      notice=None if notices is None else notices.append, progress=False, **kw)


def test_a_target_epsilon_stop_names_the_observer_the_epsilon_and_what_would_fit(tmp_path: Path) -> None:
    # Fails before the change: the stop said only "stopped before round N: it would take the certified
    # epsilon above privacy.target_epsilon = 5", no observer, no figures, no noise that would fit.
    res = _train(tmp_path / "s.sqlite", {"noise_multiplier": 0.8}, rounds=5, privacy={"target_epsilon": 5})
    why = res.final["stop_reason"]
    assert why.startswith("stopped before round ") and "privacy.target_epsilon = 5 (against the " in why
    assert " now, " in why and "RDP, worst client" in why
    assert "of the 5 planned rounds fit at noise multiplier 0.8" in why
    assert "would keep the public's certified epsilon within 5 for all 5 rounds" in why  # the certified inverse
    assert res.final["noise"]["noise_multiplier"] == 0.8


def test_a_calibrated_noise_multiplier_is_in_the_final_record_report_and_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Fails before the change: the σ calibrated from options.target_epsilon was only in the history.
    store = tmp_path / "s.sqlite"
    res = _train(store, {"target_epsilon": 3.0})
    noise = res.final["noise"]
    z = res.history[0]["noise_multiplier"]
    assert noise["noise_multiplier"] == z and noise["calibrated_from_target_epsilon"] == 3.0
    assert noise["noise_std"] > 0 and noise["update_scale"] > 0 and noise["measured_rounds"] == 3
    assert noise["noise_to_signal"] == pytest.approx(noise["noise_std"] / noise["update_scale"], rel=0.5)
    assert "noise_to_signal" in res.history[0]
    assert main(["report", res.run_id, "--store", str(store)]) == 0
    assert f"noise multiplier {z:.4g} (calibrated from algorithm.options.target_epsilon = 3)" in capsys.readouterr().out
    assert main(["runs", "--store", str(store), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["noise_multiplier"] == z and row["noise_to_signal"] == noise["noise_to_signal"]
    assert main(["runs", "--store", str(store)]) == 0
    assert "σ" in capsys.readouterr().out


def test_noise_that_swamps_the_signal_is_noticed_once_and_stored(tmp_path: Path) -> None:
    # Fails before the change: nothing pointed at noise 10+ times the update's scale.
    store = tmp_path / "s.sqlite"
    notices: list[str] = []
    res = _train(store, {"noise_multiplier": 5.0}, dim=200, notices=notices)
    assert res.final["noise"]["noise_to_signal"] > SWAMPED_RATIO
    swamped = [n for n in notices if "the noise swamps the signal" in n]
    assert len(swamped) == 1 and "noise multiplier 5" in swamped[0] and "sample more clients" in swamped[0]
    kinds = [n["kind"] for n in RunStore(store).notices(res.run_id)]
    assert kinds.count("noise-swamps-signal") == 1
    line = noise_line(res.final["noise"])
    assert line is not None and "the noise swamps the signal" in line
    quiet = _train(tmp_path / "q.sqlite", {"noise_multiplier": 0.5}, notices=(q := []))
    assert quiet.final["noise"]["noise_to_signal"] < SWAMPED_RATIO
    assert not [n for n in q if "swamps" in n]
