"""Positive-integer environment variables (Ray shards, a SuperNode's torch threads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpfl.errors import ConfigError, env_positive_int
from dpfl.runtime.flower.warm import NODE_THREADS_ENV, node_threads


def test_unset_or_blank_is_none_and_a_whole_number_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPFL_TEST_INT", raising=False)
    assert env_positive_int("DPFL_TEST_INT") is None
    monkeypatch.setenv("DPFL_TEST_INT", "  ")
    assert env_positive_int("DPFL_TEST_INT") is None
    monkeypatch.setenv("DPFL_TEST_INT", "3")
    assert env_positive_int("DPFL_TEST_INT") == 3


@pytest.mark.parametrize(("raw", "shown"), [("0", "0"), ("-2", "-2"), ("two", "'two'"), ("1.5", "'1.5'")])
def test_anything_else_is_refused_naming_the_variable_and_value(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                                shown: str) -> None:
    monkeypatch.setenv("DPFL_TEST_INT", raw)
    with pytest.raises(ConfigError, match=rf"\$DPFL_TEST_INT must be a positive integer\. Found {shown}\."):
        env_positive_int("DPFL_TEST_INT")


def test_a_node_takes_the_configs_threads_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NODE_THREADS_ENV, raising=False)
    assert node_threads() is None
    monkeypatch.setenv(NODE_THREADS_ENV, "2")
    assert node_threads() == 2
    assert env_positive_int(NODE_THREADS_ENV, {NODE_THREADS_ENV: "5"}) == 5  # another environment


def test_a_local_federation_shares_the_cores_among_its_nodes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    import os

    from dpfl.runtime.flower.local import LocalFederation

    monkeypatch.delenv(NODE_THREADS_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert LocalFederation(4, workdir=tmp_path / "a").env[NODE_THREADS_ENV] == "2"
    assert LocalFederation(20, workdir=tmp_path / "b").env[NODE_THREADS_ENV] == "1"
    monkeypatch.setenv(NODE_THREADS_ENV, "3")  # the caller's setting wins
    assert LocalFederation(4, workdir=tmp_path / "c").env[NODE_THREADS_ENV] == "3"
    monkeypatch.setenv(NODE_THREADS_ENV, "none")  # refused before any process starts
    with pytest.raises(ConfigError, match=r"\$DPFL_NODE_THREADS must be a positive integer\. Found 'none'"):
        LocalFederation(4, workdir=tmp_path / "d")
