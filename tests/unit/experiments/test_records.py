"""Result records: matched to a recipe's runs by config hash, read back with clear errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from dpfl.config import load_config, run_id
from dpfl.errors import ConfigError
from dpfl.experiments.records import (
    RecordStore,
    config_hash,
    current_hash,
    epsilon_summary,
    make_record,
    read_records,
    write_records,
)
from dpfl.store import RunStore


def test_the_hash_ignores_the_data_folder_and_equals_the_run_id_for_verified_data() -> None:
    cfg = load_config("fedavg-mnist")
    moved = cfg.model_copy(update={"data": cfg.data.model_copy(update={"dir": "elsewhere"})})
    assert config_hash(cfg) == config_hash(moved) == run_id(cfg)
    unverified = cfg.model_copy(update={"data": cfg.data.model_copy(update={"verify": False})})
    assert config_hash(unverified) != config_hash(cfg)  # a different config is a different cell
    assert config_hash(cfg.model_copy(update={"seed": cfg.seed + 1})) != config_hash(cfg)


def _record(tmp_path: Path) -> dict:
    cfg = load_config("fedavg-mnist")
    store = RunStore(tmp_path / "s.sqlite")
    store.start(run_id(cfg), cfg.model_dump(mode="json"), {})
    store.finish(run_id(cfg), "finished", {"test_accuracy": 0.5, "model_path": "runs/models/x.pt"})
    return make_record("a", {"i": 0}, cfg, store.get(run_id(cfg)), [{"round": 1, "train_loss": 1.0}])


def test_a_record_written_before_a_config_field_existed_still_matches(tmp_path: Path) -> None:
    record = _record(tmp_path)
    assert "model_path" not in record["final"] and "dir" not in record["config"]["data"]
    older = copy.deepcopy(record)
    del older["config"]["privacy"]["pld_every"]  # a field added later, with its default
    assert current_hash(older) == current_hash(record) == record["config_hash"]
    changed = copy.deepcopy(record)
    changed["config"]["rounds"] += 1
    assert current_hash(changed) != record["config_hash"]


def test_records_round_trip_and_a_bad_line_is_named(tmp_path: Path) -> None:
    record = _record(tmp_path)
    path = tmp_path / "r" / "records.jsonl"
    write_records(path, [record])
    assert read_records(path) == [record]
    store = RecordStore(path)
    assert store.find(record["run_id"]).result == {"test_accuracy": 0.5}  # type: ignore[union-attr]
    assert store.rounds(record["run_id"]) == [{"round": 1, "train_loss": 1.0}]
    assert store.find("nope") is None and store.rounds("nope") == [] and len(store.list()) == 1
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ConfigError, match=r"records\.jsonl:2 is not a JSON line"):
        read_records(path)
    path.write_text('{"label": "x"}\n')
    with pytest.raises(ConfigError, match=r"records\.jsonl:1 is not a run record: missing \['config_hash'"):
        read_records(path)
    assert read_records(tmp_path / "absent.jsonl") == []


def test_the_epsilon_summary_keeps_both_epsilons_per_observer() -> None:
    cert = {"epsilon": 3.5, "delta": 1e-5, "method": "pld", "basis": "ex-ante", "notes": ["n"]}
    result = {"privacy": {"claimed_epsilon": 2.0, "claim_comparable": True, "delta": 1e-5,
                          "certified": {"headline": cert,
                                        "observers": {"server": cert, "public": {**cert, "epsilon": 1.0}}}}}
    assert epsilon_summary(result) == {
        "claimed": 2.0, "claim_comparable": True, "delta": 1e-5,
        "certified": {"public": {"epsilon": 1.0, "method": "pld", "basis": "ex-ante"},
                      "server": {"epsilon": 3.5, "method": "pld", "basis": "ex-ante"}},
    }
    assert epsilon_summary({"test_accuracy": 0.9}) is None and epsilon_summary(None) is None
