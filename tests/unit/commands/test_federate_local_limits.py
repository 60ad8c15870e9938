"""`dpfl federate local default`: the built-in config has 1,000 clients, i.e. 1,000 SuperNodes on one
machine. It is refused in one line naming ``partition.num_clients`` and the ways to run it, before
any process starts; ``--nodes`` equal to the clients asks for them all."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("flwr")

from dpfl.cli import main  # noqa: E402
from dpfl.commands.federate import LOCAL_NODE_LIMIT  # noqa: E402
from dpfl.runtime.flower import local  # noqa: E402


class _Started(Exception):
    pass


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """LocalFederation replaced by a recorder that stops the command where processes would start."""
    calls: list[int] = []

    def fake(self: Any, num_nodes: int, **_: Any) -> None:
        calls.append(num_nodes)
        raise _Started

    monkeypatch.setattr(local.LocalFederation, "__init__", fake)
    return calls


def test_the_default_config_is_refused_in_one_line(started: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["federate", "local", "default"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "partition.num_clients = 1000" in err and f"at most {LOCAL_NODE_LIMIT}" in err
    assert "--set partition.num_clients=" in err and "--nodes 1000" in err
    assert started == []


def test_fewer_clients_or_an_explicit_nodes_count_start_the_federation(started: list[int]) -> None:
    with pytest.raises(_Started):
        main(["federate", "local", "default", "--set", "partition.num_clients=4"])
    with pytest.raises(_Started):
        main(["federate", "local", "default", "--set", f"partition.num_clients={LOCAL_NODE_LIMIT}"])
    with pytest.raises(_Started):
        main(["federate", "local", "default", "--nodes", "1000"])
    assert started == [4, LOCAL_NODE_LIMIT, 1000]


def test_nodes_other_than_the_clients_are_refused(started: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["federate", "local", "default", "--nodes", "8"]) == 2
    assert "--nodes 8" in capsys.readouterr().err and started == []
