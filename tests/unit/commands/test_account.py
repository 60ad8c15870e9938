"""``dpfl account`` (dpfl.commands.account) through a tiny argparse harness calling ``register``."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import dp_accounting as dpa
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpfl.commands.account import register
from dpfl.errors import ConfigError, DpflError, PrivacyPreconditionError

COARSE = ["--pld-discretization", "1e-2"]


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dpfl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert _run(argv) == 0
    return json.loads(capsys.readouterr().out)


def _num(x: Any) -> float:
    return math.inf if x == "inf" else float(x)


DPFEDAVG = ["account", "dp-fedavg", "--noise-multiplier", "1.0", "--sample-rate", "0.04",
            "--rounds", "1000", "--delta", "2.94e-4", "--json"]
UDP = ["account", "udp", "--epsilon", "8", "--delta", "1e-3", "--clients", "50", "--sampled", "30",
       "--rounds", "200", "--lr", "0.05", "--clip", "1.0", "--samples-per-client", "800", "--json"]


def test_dp_fedavg_exact_form(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(DPFEDAVG + COARSE, capsys)
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.04, dpa.GaussianDpEvent(1.0)), 1000)
    direct = rdp.RdpAccountant().compose(event).get_epsilon(2.94e-4)
    assert out["epsilon_rdp"] == pytest.approx(direct, rel=1e-10)
    assert 5.0 < out["epsilon_pld"] <= out["epsilon_rdp"] + 0.05
    assert out["epsilon_claimed"] == pytest.approx(direct)  # 004 accounts with the moments accountant
    assert out["privacy_unit"] == "client" and out["relation"] == "add_remove"
    assert out["observers"]["public"]["delta"] == pytest.approx(2.94e-4)


def test_dp_fedavg_server_observer_and_inverse(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "dp-fedavg", "--epsilon", "6", "--sample-rate", "0.04", "--rounds", "200",
                 "--delta", "2.94e-4", "--clients", "3400", "--json", *COARSE], capsys)
    inv = out["inverse"]
    assert inv["noise_multiplier_certified"] == min(inv["noise_multiplier_rdp"], inv["noise_multiplier_pld"])
    # the paper calibrates with the moments accountant (RDP); PLD certifies that noise tighter
    assert out["noise_multiplier"] == pytest.approx(inv["noise_multiplier_paper"])
    assert out["epsilon_claimed"] <= 6.0 + 1e-6
    assert out["observers"]["public"]["epsilon"] <= 6.0 + 1e-6
    # client-split noise: the server sees sigma/sqrt(|P_t|) per upload -> far worse
    assert out["observer"] == "server"
    assert _num(out["observers"]["server"]["epsilon"]) > 10 * out["observers"]["public"]["epsilon"]


def test_udp_exact_form(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(UDP + COARSE, capsys)
    sens = 2 * 0.05 * 1.0 / 800  # 000 eq. 13
    sigma = sens * math.sqrt(2 * 0.6 * 200 * math.log(1e3)) / 8  # 000 Thm 1, eq. 10
    assert out["noise_std"] == pytest.approx(sigma, rel=1e-12)
    assert out["epsilon_claimed"] == pytest.approx(8.0)
    obs = out["observers"]
    assert set(obs) == {"server", "public"}
    for cert in obs.values():
        assert cert["epsilon_rdp"] >= cert["epsilon_pld"] - 0.05
        assert cert["privacy_unit"] == "record" and cert["relation"] == "replace_one"
        assert cert["delta"] == pytest.approx(1e-3)
    assert out["observer"] == "server"
    assert out["epsilon_rdp"] == obs["server"]["epsilon_rdp"]
    assert out["epsilon_pld"] == obs["server"]["epsilon_pld"]
    assert obs["public"]["epsilon"] < obs["server"]["epsilon"]
    assert out["epsilon_rdp"] > 8.0  # the paper under-noises against the server
    assert out["inverse"]["noise_std_certified"] > sigma


def test_nbafl_forward_and_paper_sensitivity(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "nbafl", "--epsilon", "50", "--delta", "0.01", "--clients", "50", "--rounds", "25",
                 "--clip", "10", "--min-samples", "1200", "--json", *COARSE], capsys)
    assert out["epsilon_claimed"] == pytest.approx(50.0)
    assert out["sensitivity"] == 20.0 and out["sensitivity_paper"] == pytest.approx(20 / 1200)
    assert out["epsilon"] > 1e5  # the enforced 2C against sigma_U computed for 2C/m
    assert out["epsilon_if_paper_sensitivity"]["server"] < out["epsilon"]
    assert any("classical constant" in w["message"] for w in out["formula_warnings"])


def test_nbafl_k_random_at_the_papers_settings_is_a_clear_error() -> None:
    with pytest.raises(PrivacyPreconditionError, match="log of a non-positive number"):
        _run(["account", "nbafl", "--epsilon", "50", "--delta", "0.01", "--clients", "50", "--sampled", "20",
              "--rounds", "25", "--clip", "10", "--min-samples", "1200", "--json"])


def test_midp_server_side_noise_gives_no_protection_against_the_server(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "midp", "--epsilon", "10", "--mode", "server", "--clients", "100", "--clip", "10",
                 "--dim", "1000", "--rounds", "5", "--delta", "1e-5", "--json", *COARSE], capsys)
    assert out["epsilon_claimed"] == pytest.approx(10.0)
    assert out["observers"]["server"]["epsilon"] == "inf" and out["epsilon"] == "inf"
    assert _num(out["observers"]["public"]["epsilon"]) < math.inf


def test_ldp_fl_without_shuffler_composes_d_t_reports(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "ldp-fl", "--epsilon", "1", "--dim", "100", "--rounds", "3", "--clients", "100",
                 "--delta", "1e-5", "--json", *COARSE], capsys)
    assert out["epsilon_claimed"] == 1.0 and out["epsilon_claimed_unshuffled"] == 300.0
    server = out["observers"]["server"]
    assert server["epsilon_pure"] == pytest.approx(300.0)
    assert server["epsilon"] <= 300.0
    assert any("not applicable" in n for n in out["notes"])  # n = 100 is outside FMT21's range


def test_ldp_fl_inverse_meets_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "ldp-fl", "--target-epsilon", "20", "--dim", "10", "--rounds", "2", "--clients", "50",
                 "--delta", "1e-5", "--json", *COARSE], capsys)
    assert out["inverse"]["epsilon_per_weight"] >= 20 / 20
    assert _num(out["epsilon"]) <= 20.0 + 1e-6


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--epsilon", "0"], r"--epsilon.*0"),
        (["--epsilon", "-1"], r"--epsilon.*-1"),
        (["--epsilon", "8", "--delta", "1.5"], r"--delta.*1\.5"),
        (["--epsilon", "8", "--sampled", "60"], r"\(60\).*\(50\)"),
    ],
)
def test_bad_values_are_config_errors_naming_the_value(argv: list[str], pattern: str) -> None:
    base = {"--delta": "1e-3", "--clients": "50", "--rounds": "20", "--lr": "0.05", "--clip": "1.0",
            "--samples-per-client": "800"}
    for i in range(0, len(argv), 2):
        base[argv[i]] = argv[i + 1]
    flat = [x for kv in base.items() for x in kv]
    with pytest.raises(ConfigError, match=pattern):
        _run(["account", "udp", *flat, "--json"])


def test_the_cli_turns_errors_into_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    cli = pytest.importorskip("dpfl.cli")
    code = cli.main(["account", "dp-fedavg", "--noise-multiplier", "1.0", "--sample-rate", "0.04",
                     "--rounds", "10", "--delta", "2", "--json"])
    assert code == 2
    assert "--delta" in capsys.readouterr().err
    assert issubclass(ConfigError, DpflError)


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([a for a in DPFEDAVG if a != "--json"] + COARSE) == 0
    text = capsys.readouterr().out
    assert "certified epsilon" in text and "public" in text and "claimed epsilon" in text


def test_udp_public_is_charged_per_participation(capsys: pytest.CaptureFixture[str]) -> None:
    """UDP protects a record: sampling clients does not amplify it, so the public is charged per
    participation (K_max participations by the Binomial tail, as the server), unamplified."""
    out = _json(UDP + COARSE, capsys)
    public, server = out["observers"]["public"], out["observers"]["server"]
    assert any("unamplified" in n for n in public["notes"])
    assert public["epsilon"] < server["epsilon"]  # the mean's noise sqrt(K) times the upload's multiplier


def test_pld_discretization_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"discretization.*-1"):
        _run([*DPFEDAVG, "--pld-discretization", "-1"])


def test_a_billion_rounds_answer_fast_by_rdp(capsys: pytest.CaptureFixture[str]) -> None:
    """10^9 sampled rounds: the PLD self-composition would take minutes, so it is skipped with a
    note and RDP (linear in the count) answers; equal to dp_accounting's RDP called directly."""
    argv = [x if x != "1000" else "1000000000" for x in DPFEDAVG]
    out = _json(argv, capsys)
    public = out["observers"]["public"]
    assert public["method"] == "rdp"
    from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS

    direct = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS)).compose(
        dpa.PoissonSampledDpEvent(0.04, dpa.GaussianDpEvent(1.0)), 1_000_000_000).get_epsilon(2.94e-4)
    assert public["epsilon"] == pytest.approx(direct, rel=1e-9)
    assert any("PLD: skipped" in n for n in public["notes"])


def test_the_parser_default_pld_step_is_the_accountants() -> None:
    """The parser holds the default as a literal (building it imports no accountant)."""
    from dpfl.commands.account import PLD_DISCRETIZATION
    from dpfl.privacy.accounting.certify import DEFAULT_PLD_DISCRETIZATION

    assert PLD_DISCRETIZATION == DEFAULT_PLD_DISCRETIZATION


def test_dpfl_version(capsys: pytest.CaptureFixture[str]) -> None:
    import dpfl
    from dpfl.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dpfl {dpfl.__version__}"
