"""Each ``dpfl account ALGORITHM`` shortcut is the dry run of a config: its ``--json`` equals
:func:`dpfl.rounds.dry_run` of the hand-written equivalent config built from shapes
(:func:`dpfl.rounds.build_plan`), ε to 1e-9, for a few settings each."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import pytest

from dpfl.commands.account import register
from dpfl.config import parse_config
from dpfl.rounds import build_plan, dry_run


def _shortcut(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="dpfl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["account", *argv, "--json"])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def _num(x: Any) -> float:
    return math.inf if x == "inf" else float(x)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    x, y = _num(a), _num(b)
    return (math.isinf(x) and math.isinf(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-12)


def _config(name: str, options: dict[str, Any], rounds: int, delta: float, sampling: dict[str, Any],
            local: dict[str, Any] | None = None) -> Any:
    raw: dict[str, Any] = {"rounds": rounds, "algorithm": {"name": name, "options": options},
                           "sampling": sampling, "privacy": {"delta": delta}}
    if local:
        raw["local"] = local
    return parse_config(raw)


FULL_BATCH = {"lr": 0.05, "epochs": 1, "batch_size": None, "steps": None}

# shortcut arguments → (config, client sizes, number of parameters), written by hand
CASES: dict[str, tuple[list[str], Any, list[int], int]] = {
    "udp-sampled": (
        ["udp", "--epsilon", "8", "--delta", "1e-3", "--clients", "20", "--sampled", "6", "--rounds", "15",
         "--lr", "0.05", "--clip", "1.0", "--samples-per-client", "800"],
        _config("udp", {"epsilon": 8.0, "clip_norm": 1.0}, 15, 1e-3,
                {"kind": "fixed", "clients_per_round": 6}, FULL_BATCH), [800] * 20, 1),
    "udp-all": (
        ["udp", "--epsilon", "2", "--delta", "1e-5", "--clients", "10", "--rounds", "8",
         "--lr", "0.05", "--clip", "0.5", "--samples-per-client", "100"],
        _config("udp", {"epsilon": 2.0, "clip_norm": 0.5}, 8, 1e-5, {"kind": "all"}, FULL_BATCH), [100] * 10, 1),
    "udp-forward": (  # the noise std given: the config's epsilon is 000 eq. 10 solved for it
        ["udp", "--noise-std", "0.002", "--delta", "1e-3", "--clients", "20", "--sampled", "5", "--rounds", "12",
         "--lr", "0.05", "--clip", "1.0", "--samples-per-client", "800"],
        _config("udp", {"epsilon": (2 * 0.05 / 800) * math.sqrt(2 * 0.25 * 12 * math.log(1e3)) / 0.002,
                        "clip_norm": 1.0}, 12, 1e-3, {"kind": "fixed", "clients_per_round": 5}, FULL_BATCH),
        [800] * 20, 1),
    "dp-fedavg": (
        ["dp-fedavg", "--noise-multiplier", "1.1", "--sample-rate", "0.2", "--rounds", "20", "--clients", "30",
         "--delta", "1e-5"],
        _config("dp-fedavg", {"noise_multiplier": 1.1, "clip_norm": 1.0}, 20, 1e-5,
                {"kind": "poisson", "sample_rate": 0.2}), [1] * 30, 1),
    "dp-fedavg-target": (
        ["dp-fedavg", "--epsilon", "4", "--sample-rate", "0.5", "--rounds", "10", "--clients", "12",
         "--delta", "1e-4"],
        _config("dp-fedavg", {"target_epsilon": 4.0, "clip_norm": 1.0}, 10, 1e-4,
                {"kind": "poisson", "sample_rate": 0.5}), [1] * 12, 1),
    "nbafl-all": (
        ["nbafl", "--epsilon", "50", "--delta", "0.01", "--clients", "10", "--rounds", "5", "--clip", "10",
         "--min-samples", "1200"],
        _config("nbafl", {"epsilon": 50.0, "clip_norm": 10.0, "downlink_noise": "paper"}, 5, 0.01, {"kind": "all"}),
        [1200] * 10, 1),
    "nbafl-k-random-uplink": (
        ["nbafl", "--epsilon", "5", "--delta", "0.01", "--clients", "20", "--sampled", "5", "--rounds", "6",
         "--exposures", "3", "--clip", "1", "--min-samples", "100", "--downlink-noise", "none"],
        _config("nbafl", {"epsilon": 5.0, "clip_norm": 1.0, "exposures": 3, "downlink_noise": "none"}, 6, 0.01,
                {"kind": "fixed", "clients_per_round": 5}), [100] * 20, 1),
    "midp-server": (
        ["midp", "--epsilon", "10", "--mode", "server", "--clients", "8", "--clip", "10", "--dim", "1000",
         "--rounds", "4", "--delta", "1e-5"],
        _config("midp-server", {"epsilon": 10.0, "clip_norm": 10.0, "weighting": "uniform"}, 4, 1e-5,
                {"kind": "all"}), [1] * 8, 1000),
    "midp-client": (
        ["midp", "--epsilon", "3", "--mode", "client", "--clients", "6", "--clip", "1", "--dim", "50",
         "--rounds", "3", "--delta", "1e-5"],
        _config("midp-client", {"epsilon": 3.0, "clip_norm": 1.0, "weighting": "uniform"}, 3, 1e-5,
                {"kind": "all"}), [1] * 6, 50),
    "ldp-fl": (
        ["ldp-fl", "--epsilon", "1", "--dim", "20", "--rounds", "3", "--clients", "10", "--delta", "1e-5"],
        _config("ldp-fl", {"epsilon": 1.0, "range": "fixed", "radius": 0.3}, 3, 1e-5, {"kind": "all"}),
        [1] * 10, 20),
    "ldp-fl-client-minmax": (
        ["ldp-fl", "--epsilon", "0.5", "--dim", "5", "--rounds", "2", "--clients", "4", "--delta", "1e-5",
         "--range", "client-minmax"],
        _config("ldp-fl", {"epsilon": 0.5, "range": "client-minmax"}, 2, 1e-5, {"kind": "all"}), [1] * 4, 5),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_shortcut_is_the_dry_run_of_its_config(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, config, sizes, num_params = CASES[case]
    out = _shortcut(argv, capsys)
    want = dry_run(config, experiment=build_plan(config, sizes, num_params)).privacy
    assert want is not None and want.certified is not None
    for obs, cert in want.certified.items():
        got = out["observers"][obs]
        for key in ("epsilon", "epsilon_rdp", "epsilon_pld", "epsilon_pure"):
            assert _same(got[key], getattr(cert, key)), (obs, key, got[key], getattr(cert, key))
        assert (got["method"], got["delta"], got["privacy_unit"], got["relation"]) == (
            cert.method, cert.delta, cert.privacy_unit, cert.relation)
    head = want.headline
    assert head is not None and out["observer"] == head.observer
    assert _same(out["epsilon_rdp"], head.epsilon_rdp) and _same(out["epsilon_pld"], head.epsilon_pld)
    assert _same(out["epsilon_claimed"], want.claimed_max)
    # the printed config is the hand-written one in every field the dry run reads
    printed = parse_config(out["config"])
    for part in ("rounds", "algorithm", "sampling", "privacy", "local"):
        if part == "local" and not config.algorithm.name.startswith("udp"):
            continue
        got_part, want_part = getattr(printed, part), getattr(config, part)
        if part == "algorithm":
            assert got_part.name == want_part.name
            opts = {k: v for k, v in got_part.options.items() if k != "radius"}
            want_opts = {k: v for k, v in want_part.options.items() if k != "radius"}  # radius: no privacy effect
            assert opts.keys() == want_opts.keys()
            for k, v in opts.items():
                assert v == (pytest.approx(want_opts[k], rel=1e-12) if isinstance(v, float) else want_opts[k]), k
        else:
            assert got_part == want_part, part


@pytest.mark.parametrize("participation", ["visible", "hidden"])
def test_secure_aggregation_is_the_dry_run_of_the_secure_config(participation: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    argv, config, sizes, _ = CASES["dp-fedavg"]
    out = _shortcut([*argv, "--secure-aggregation", "--participation", participation, "--dim", "300"], capsys)
    sa = config.model_copy(update={"privacy": config.privacy.model_copy(
        update={"secure_aggregation": True, "participation": participation})})
    want = dry_run(sa, experiment=build_plan(sa, sizes, 300)).privacy
    assert want is not None and want.certified is not None
    for obs, cert in want.certified.items():
        for key in ("epsilon", "epsilon_rdp", "epsilon_pld"):
            assert _same(out["observers"][obs][key], getattr(cert, key)), (obs, key)
    assert parse_config(out["config"]).privacy == sa.privacy


def test_a_dp_fedavg_config_with_secure_aggregation_is_priced_as_the_skellam_sum() -> None:
    _, config, sizes, num_params = CASES["dp-fedavg"]
    sa = config.model_copy(update={"privacy": config.privacy.model_copy(
        update={"secure_aggregation": True, "participation": "hidden"})})
    got = dry_run(sa, experiment=build_plan(sa, sizes, num_params)).privacy
    assert got is not None and got.certified is not None
    # hidden participation: the server's view is the public's
    assert got.certified["server"].epsilon == pytest.approx(got.certified["public"].epsilon, rel=1e-12)
    assert got.certified["server"].method == "pld" and got.certified["server"].basis == "ex-ante"
