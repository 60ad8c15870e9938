"""The ``dpfl data`` subcommand, driven through an argparse parser as ``dpfl.cli`` builds it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from dpfl.commands import data as data_command
from dpfl.errors import ConfigError, DataFormatError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dpfl")
    data_command.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def test_parser_shape() -> None:
    args = _parse("data", "fetch", "mnist", "adult", "--dir", "/d", "--from", "/a", "--from", "/b")
    assert args.func is data_command.run_fetch
    assert args.names == ["mnist", "adult"] and args.data_dir == Path("/d")
    assert args.from_dirs == [Path("/a"), Path("/b")]
    assert _parse("data", "list").func is data_command.run_list
    with pytest.raises(SystemExit):
        _parse("data")  # a sub-subcommand is required


def test_unknown_name_fails_before_any_work(tmp_path: Path) -> None:
    args = _parse("data", "fetch", "mnist", "emnist", "--dir", str(tmp_path))
    with pytest.raises(ConfigError, match="unknown data set 'emnist'; valid names: mnist, fashion-mnist"):
        args.func(args)
    assert list(tmp_path.iterdir()) == []


def test_list_on_an_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("data", "list", "--dir", str(tmp_path))
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "missing" in out and f"mnist: run `dpfl data fetch mnist --dir {tmp_path}`" in out


def test_default_dir_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DPFL_DATA_DIR", str(tmp_path / "env-data"))
    args = _parse("data", "list", "--no-verify")
    assert args.func(args) == 0
    assert f"--dir {tmp_path / 'env-data'}" in capsys.readouterr().out


def test_fetch_femnist_without_sources_explains_leaf(tmp_path: Path) -> None:
    args = _parse("data", "fetch", "femnist", "--dir", str(tmp_path), "--quiet")
    with pytest.raises(DataFormatError, match="produce it with LEAF"):
        args.func(args)


def test_fetch_from_shared_then_list(tmp_path: Path, kit: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kit.shared_folder("adult")
    args = _parse("data", "fetch", "adult", "--dir", str(tmp_path), "--from", str(kit.shared_data), "--quiet")
    assert args.func(args) == 0
    assert "adult: 3 file(s)" in capsys.readouterr().out
    (tmp_path / "adult" / "adult.test").write_text("tampered\n")
    args = _parse("data", "list", "--dir", str(tmp_path))
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "adult: run `dpfl data fetch adult" in out
