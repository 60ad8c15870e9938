"""Config schema (strict keys, overrides, ids) and the SQLite run store."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpfl.config import apply_overrides, load_config, parse_config, run_id
from dpfl.errors import ConfigError
from dpfl.store import RunStore


def test_defaults_and_builtin_default_config() -> None:
    cfg = load_config("default")  # the main job: private
    assert cfg.algorithm.name == "dp-fedavg" and cfg.privacy.delta == 1e-5 and cfg.rounds == 100
    plain = load_config("fedavg-mnist")
    assert plain.partition.num_clients == 100 and plain.rounds == 20 and plain.algorithm.name == "fedavg"


def test_unknown_keys_are_errors_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown key `local.lrate`"):
        parse_config({"local": {"lrate": 0.1}})
    with pytest.raises(ConfigError, match="unknown key `round`"):
        parse_config({"round": 3})


def test_value_errors_name_the_value() -> None:
    with pytest.raises(ConfigError, match=r"local\.lr.*-1"):
        parse_config({"local": {"lr": -1}})
    with pytest.raises(ConfigError, match="rounds"):
        parse_config({"rounds": 0})


def test_overrides_parse_yaml_values() -> None:
    raw = apply_overrides({"local": {"lr": 0.1}}, ["local.lr=0.5", "rounds=3", "local.batch_size=null"])
    cfg = parse_config(raw)
    assert cfg.local.lr == 0.5 and cfg.rounds == 3 and cfg.local.batch_size is None
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["rounds"])


def test_run_id_depends_on_config_and_seed_only() -> None:
    a, b = parse_config({"seed": 1}), parse_config({"seed": 1, "rounds": 20})
    assert run_id(a) == run_id(b)
    assert run_id(a) != run_id(parse_config({"seed": 2}))


def test_unknown_builtin_lists_names() -> None:
    with pytest.raises(ConfigError, match="default"):
        load_config("no-such-config")


def test_store_round_trip_and_resume_bookkeeping(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs" / "s.sqlite")
    store.start("abc", {"name": "x", "algorithm": {"name": "fedavg"}, "data": {"name": "mnist"},
                        "model": {"name": "mlp"}}, {"torch": "2"})
    for t in range(5):
        store.log_round("abc", t, {"test_accuracy": t / 10})
    store.drop_rounds_after("abc", 2)
    assert [r["round"] for r in store.rounds("abc")] == [0, 1, 2]
    store.add_notice("abc", 1, "formula-range", "c used at ε = 50")
    store.add_notice("abc", 1, "formula-range", "c used at ε = 50")
    assert len(store.notices("abc")) == 1
    store.finish("abc", "finished", {"test_accuracy": 0.9})
    assert store.get("ab").result == {"test_accuracy": 0.9}
    with pytest.raises(ConfigError, match="no run"):
        store.get("zzz")


def test_corrupt_store_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "s.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="not a readable SQLite"):
        RunStore(bad)


def test_run_id_ignores_the_folder_of_verified_data_only() -> None:
    a = parse_config({"data": {"name": "mnist", "dir": "data"}})
    b = parse_config({"data": {"name": "mnist", "dir": "/elsewhere/data"}})
    assert run_id(a) == run_id(b)
    c = parse_config({"data": {"name": "mnist", "dir": "data", "verify": False}})
    d = parse_config({"data": {"name": "mnist", "dir": "/elsewhere", "verify": False}})
    assert run_id(c) != run_id(d)


def test_privacy_summary_prints_infinite_epsilon() -> None:
    from dpfl.commands.run import _privacy_summary
    from dpfl.rounds.result import PrivacySummary

    cert = {"epsilon": "inf", "delta": 1e-5, "method": "rdp", "observer": "server",
            "privacy_unit": "client", "relation": "replace_one"}
    stored = {"claimed_epsilon": 5.0, "certified": {"headline": cert, "observers": {"server": cert}}}
    text = _privacy_summary(PrivacySummary.from_dict(stored))
    assert "certified epsilon: inf" in text and "claimed epsilon: 5" in text


def test_a_read_only_store_is_read_without_writing_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    store = RunStore(tmp_path / "s.sqlite")
    store.start("abc", {"name": "x"}, {})
    store.log_round("abc", 0, {"test_accuracy": 0.5})
    store.finish("abc", "finished", {"test_accuracy": 0.5})
    for extra in tmp_path.glob("s.sqlite-*"):  # as a copied or archived store: no WAL files
        extra.unlink()
    real = os.access
    # a read-only folder and file (permissions do not stop root, so the check is simulated)
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else real(p, mode))
    opened = RunStore(tmp_path / "s.sqlite")
    assert [r.run_id for r in opened.list()] == ["abc"] and opened.rounds("abc")[0]["test_accuracy"] == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]


def test_nothing_is_created_until_the_first_write(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "a" / "b" / "s.sqlite")
    assert store.find("abc") is None and store.list() == [] and store.rounds("abc") == []
    with pytest.raises(ConfigError, match="no run store at"):
        store.get("abc")
    assert not (tmp_path / "a").exists()
    store.start("abc", {"name": "x"}, {})
    assert store.exists()
