"""Each ``dpfl account`` shortcut's ``--help`` label says what it runs: it is composed from the
configs the shortcut builds (issue: ``dp-fedavg`` was labelled "central" but built the variant
without secure aggregation). These tests fail on the hand-written labels of before."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from dpfl.commands.account import register
from dpfl.commands.dry_run import compose_label

# shortcut → its forms: (the flag that changes what runs, "" for none; the arguments of a run of it)
FORMS: dict[str, list[tuple[str, list[str]]]] = {
    "udp": [("", ["--epsilon", "2", "--clients", "4", "--rounds", "2", "--lr", "0.1", "--clip", "1",
                  "--samples-per-client", "10"]),
            ("--sampled", ["--epsilon", "2", "--clients", "4", "--sampled", "2", "--rounds", "2", "--lr", "0.1",
                           "--clip", "1", "--samples-per-client", "10"])],
    "dp-fedavg": [("", ["--noise-multiplier", "1", "--sample-rate", "0.5", "--rounds", "2", "--clients", "10"]),
                  ("--secure-aggregation", ["--noise-multiplier", "1", "--sample-rate", "0.5", "--rounds", "2",
                                            "--clients", "10", "--secure-aggregation"])],
    "nbafl": [("", ["--noise-std", "1", "--clients", "4", "--rounds", "2", "--clip", "1", "--min-samples", "10"]),
              ("--sampled", ["--noise-std", "1", "--clients", "4", "--sampled", "2", "--rounds", "2", "--clip", "1",
                             "--min-samples", "10"])],
    "midp": [("", ["--epsilon", "1", "--clients", "4", "--clip", "1", "--dim", "3", "--rounds", "2"]),
             ("--mode server", ["--epsilon", "1", "--clients", "4", "--clip", "1", "--dim", "3", "--rounds", "2",
                                "--mode", "server"])],
    "ldp-fl": [("", ["--epsilon", "1", "--dim", "3", "--rounds", "2", "--clients", "4"])],
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpfl")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def _labels() -> dict[str, str]:
    account = _parser()._subparsers._group_actions[0].choices["account"]  # type: ignore[union-attr]
    return {a.dest: a.help for a in account._subparsers._group_actions[0]._choices_actions}  # type: ignore[union-attr]


def _built_config(parser: argparse.ArgumentParser, name: str, argv: list[str],
                  capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    args = parser.parse_args(["account", name, *argv, "--delta", "1e-5", "--json"])
    assert args.func(args) == 0
    return dict(json.loads(capsys.readouterr().out)["config"])


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_shortcut_label_is_composed_from_the_configs_it_builds(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    built = [(flag, _built_config(parser, name, argv, capsys)) for flag, argv in FORMS[name]]
    assert _labels()[name] == compose_label(built)


def test_dp_fedavg_label_says_no_secure_aggregation_and_never_central() -> None:
    label = _labels()["dp-fedavg"]
    assert "central" not in label  # was "004 DP-FedAvg (central, Poisson sampling)"
    assert label.startswith("004 DP-FedAvg (Gaussian noise split over the clients, no secure aggregation")
    assert "--secure-aggregation: distributed Skellam noise" in label
