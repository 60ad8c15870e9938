"""``dpfl account`` shortcuts (dpfl.commands.account) through a tiny argparse harness calling ``register``.

The shortcuts dry-run the config their arguments describe; the figures here are checked against
dp_accounting called directly on the composition a hand derivation gives (the RDP orders are
dpfl's, DEFAULT_RDP_ORDERS, so the comparison is exact to rounding).
"""

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
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS


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


def _rdp_eps(event: dpa.DpEvent, delta: float, count: int = 1) -> float:
    """ε by dp_accounting's RDP accountant on dpfl's orders (a Gaussian's RDP α/(2z²) is the same
    under add/remove and under replace-one with the replace-one sensitivity)."""
    return float(rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS)).compose(event, count).get_epsilon(delta))


def _gaussian_count(eps_rdp: float, z: float, delta: float, max_count: int) -> int:
    """The k for which k compositions of a Gaussian of multiplier z give ``eps_rdp`` (to 1e-9)."""
    hits = [k for k in range(1, max_count + 1)
            if _rdp_eps(dpa.GaussianDpEvent(z), delta, k) == pytest.approx(eps_rdp, rel=1e-9)]
    assert len(hits) == 1, (eps_rdp, hits)
    return hits[0]


DPFEDAVG = ["account", "dp-fedavg", "--noise-multiplier", "1.0", "--sample-rate", "0.04",
            "--rounds", "200", "--clients", "100", "--delta", "2.94e-4", "--json"]
UDP = ["account", "udp", "--epsilon", "8", "--delta", "1e-3", "--clients", "50", "--sampled", "30",
       "--rounds", "60", "--lr", "0.05", "--clip", "1.0", "--samples-per-client", "800", "--json"]


def test_dp_fedavg_public_and_claim_are_the_sampled_gaussian(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(DPFEDAVG, capsys)
    direct = _rdp_eps(dpa.PoissonSampledDpEvent(0.04, dpa.GaussianDpEvent(1.0)), 2.94e-4, 200)
    public = out["observers"]["public"]
    assert public["epsilon_rdp"] == pytest.approx(direct, rel=1e-9)
    assert public["epsilon_pld"] <= public["epsilon_rdp"] + 0.05
    assert out["epsilon_claimed"] == pytest.approx(direct, rel=1e-6)  # 004 accounts with the moments accountant
    assert public["privacy_unit"] == "client" and public["relation"] == "add_remove"
    assert public["delta"] == pytest.approx(2.94e-4)


def test_dp_fedavg_server_is_the_worst_clients_split_noise(capsys: pytest.CaptureFixture[str]) -> None:
    """Against the server each upload carries sigma/sqrt(|P_t|) (004 Alg. 1 LocalUpdate line 8),
    unamplified, over the rounds the client took part in: recompose the worst client's rounds
    from the seeded cohorts and price them with dp_accounting directly."""
    from dpfl.rng import SERVER, SeedSequence
    from dpfl.sampling.clients import PoissonSampler

    out = _json(DPFEDAVG, capsys)
    seeds, sampler = SeedSequence(out["config"]["seed"]), PoissonSampler(0.04)
    rounds: dict[int, list[int]] = {}
    for t in range(200):
        cohort = sampler.sample(100, seeds.generator(t, SERVER, "sample"))
        for c in cohort.tolist():
            rounds.setdefault(int(c), []).append(int(cohort.numel()))
    worst = max(
        _rdp_eps(dpa.ComposedDpEvent([dpa.GaussianDpEvent(1.0 / math.sqrt(k)) for k in sizes]), 2.94e-4)
        for sizes in rounds.values())
    assert out["observers"]["server"]["epsilon_rdp"] == pytest.approx(worst, rel=1e-9)
    assert out["observer"] == "server" and out["epsilon_rdp"] == out["observers"]["server"]["epsilon_rdp"]


def test_dp_fedavg_inverse(capsys: pytest.CaptureFixture[str]) -> None:
    from dpfl.privacy.accounting.claimed import dpfedavg_noise_multiplier

    out = _json(["account", "dp-fedavg", "--epsilon", "6", "--sample-rate", "0.04", "--rounds", "100",
                 "--delta", "2.94e-4", "--clients", "60", "--json"], capsys)
    inv = out["inverse"]
    assert out["noise_multiplier"] == pytest.approx(dpfedavg_noise_multiplier(6.0, 0.04, 100, 2.94e-4), rel=1e-12)
    assert out["epsilon_claimed"] <= 6.0 + 1e-6
    assert out["observers"]["public"]["epsilon"] <= 6.0 + 1e-6
    # the multiplier a rigorous accountant needs: meets the target (dp_accounting's RDP may be looser
    # than the PLD that certifies it, never tighter), and the dry run of that config says so
    assert inv["noise_multiplier_certified"] <= inv["noise_multiplier_paper"]
    assert inv["epsilon_public_at_certified"] <= 6.0 + 1e-6
    # client-split noise: the server sees sigma/sqrt(|P_t|) per upload -> far worse
    assert out["observer"] == "server"
    assert _num(out["observers"]["server"]["epsilon"]) > 10 * out["observers"]["public"]["epsilon"]


def test_dp_fedavg_secure_aggregation_prices_the_skellam_sum(capsys: pytest.CaptureFixture[str]) -> None:
    """``--secure-aggregation`` is the config with ``privacy.secure_aggregation: true``: the integer
    pipeline's Skellam sum (its PLD through the dominating Gaussian pair, below its RDP route), not a
    what-if; the server sees the sum, not each upload."""
    plain = _json(DPFEDAVG, capsys)
    secure = _json([*DPFEDAVG, "--secure-aggregation"], capsys)
    assert "what_if" not in secure and secure["config"]["privacy"]["secure_aggregation"] is True
    sec = secure["secure_aggregation"]
    assert sec["participation"] == "visible" and sec["dim"] == 1 and sec["variance"] > 0
    for obs in ("server", "public"):
        cert = secure["observers"][obs]
        assert cert["method"] == "pld" and _num(cert["epsilon_pld"]) < _num(cert["epsilon_rdp"])
        assert any("skellam-gdp" in n for n in cert["notes"])
    assert _num(secure["observers"]["server"]["epsilon"]) < _num(plain["observers"]["server"]["epsilon"])
    hidden = _json([*DPFEDAVG, "--secure-aggregation", "--participation", "hidden", "--dim", "500"], capsys)
    assert hidden["secure_aggregation"]["participation"] == "hidden" and hidden["secure_aggregation"]["dim"] == 500
    # hidden participation: the server's view is the public's
    assert hidden["observers"]["server"]["epsilon"] == pytest.approx(hidden["observers"]["public"]["epsilon"],
                                                                     rel=1e-12)


def test_secure_aggregation_options_need_the_flag() -> None:
    for extra in (["--participation", "hidden"], ["--dim", "10"]):
        with pytest.raises(ConfigError, match="--secure-aggregation"):
            _run([a for a in DPFEDAVG if a != "--json"] + extra)


def test_udp_exact_form(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(UDP, capsys)
    sens = 2 * 0.05 * 1.0 / 800  # 000 eq. 13
    sigma = sens * math.sqrt(2 * 0.6 * 60 * math.log(1e3)) / 8  # 000 Thm 1, eq. 10
    assert out["noise_std"] == pytest.approx(sigma, rel=1e-12)
    assert out["epsilon_claimed"] == pytest.approx(8.0)
    obs = out["observers"]
    for cert in obs.values():
        assert cert["epsilon_rdp"] >= cert["epsilon_pld"] - 0.05
        assert cert["privacy_unit"] == "record" and cert["relation"] == "replace_one"
        assert cert["delta"] == pytest.approx(1e-3)
    # the server: the worst client's k uploads, each N(0, sigma^2) against Delta, unamplified;
    # the public: the same k rounds' means (weights 1/K, equal sizes): noise sigma/sqrt(K) against
    # Delta/K, charged per participation, unamplified (a record-level unit)
    k = _gaussian_count(obs["server"]["epsilon_rdp"], sigma / sens, 1e-3, 60)
    assert 0.6 * 60 - 4 * math.sqrt(60 * 0.24) <= k <= 60
    z_pub = (sigma / math.sqrt(30)) / (sens / 30)
    assert obs["public"]["epsilon_rdp"] == pytest.approx(_rdp_eps(dpa.GaussianDpEvent(z_pub), 1e-3, k), rel=1e-9)
    assert out["observer"] == "server"
    assert out["epsilon_rdp"] == obs["server"]["epsilon_rdp"] and out["epsilon_pld"] == obs["server"]["epsilon_pld"]


def test_udp_forward_is_the_inverse_of_the_paper_formula(capsys: pytest.CaptureFixture[str]) -> None:
    inverse = _json(UDP, capsys)
    argv = list(UDP)
    argv[argv.index("--epsilon") : argv.index("--epsilon") + 2] = ["--noise-std", repr(inverse["noise_std"])]
    forward = _json(argv, capsys)
    assert forward["noise_std"] == pytest.approx(inverse["noise_std"], rel=1e-12)
    assert forward["epsilon_claimed"] == pytest.approx(8.0, rel=1e-12)
    for obs in ("server", "public"):
        assert forward["observers"][obs]["epsilon"] == pytest.approx(inverse["observers"][obs]["epsilon"], rel=1e-9)


def test_nbafl_paper_settings(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "nbafl", "--epsilon", "50", "--delta", "0.01", "--clients", "50", "--rounds", "25",
                 "--clip", "10", "--min-samples", "1200", "--json"], capsys)
    assert out["epsilon_claimed"] == pytest.approx(50.0)
    assert out["sensitivity"] == 20.0 and out["sensitivity_paper"] == pytest.approx(20 / 1200)
    sigma_u = math.sqrt(2 * math.log(1.25 / 0.01)) * 25 * (20 / 1200) / 50  # 003 §III-A, L = T
    assert out["noise_std"] == pytest.approx(sigma_u, rel=1e-12)
    # every client uploads every round: 25 Gaussians of multiplier sigma_U / 2C against the server
    assert out["observers"]["server"]["epsilon_rdp"] == pytest.approx(
        _rdp_eps(dpa.GaussianDpEvent(sigma_u / 20.0), 0.01, 25), rel=1e-9)
    assert out["epsilon"] > 1e5  # the enforced 2C against sigma_U computed for 2C/m
    assert any("classical constant" in n for n in out["notices"])


def test_nbafl_forward_without_downlink(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "nbafl", "--noise-std", "30", "--delta", "0.01", "--clients", "20", "--sampled", "5",
                 "--rounds", "10", "--clip", "1", "--min-samples", "100", "--json"], capsys)
    assert out["noise_std"] == pytest.approx(30.0, rel=1e-12) and out["downlink_noise_std"] == 0.0
    assert out["config"]["algorithm"]["options"]["downlink_noise"] == "none"


def test_nbafl_k_random_at_the_papers_settings_is_a_clear_error() -> None:
    with pytest.raises(PrivacyPreconditionError, match="log of a non-positive number"):
        _run(["account", "nbafl", "--epsilon", "50", "--delta", "0.01", "--clients", "50", "--sampled", "20",
              "--rounds", "25", "--clip", "10", "--min-samples", "1200", "--json"])


def test_midp_server_side_noise_gives_no_protection_against_the_server(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "midp", "--epsilon", "10", "--mode", "server", "--clients", "100", "--clip", "10",
                 "--dim", "1000", "--rounds", "5", "--delta", "1e-5", "--json"], capsys)
    assert out["epsilon_claimed"] == pytest.approx(10.0)
    assert out["observers"]["server"]["epsilon"] == "inf" and out["epsilon"] == "inf"
    # 002 eq. 4.7: sigma_s = C max p / sqrt(d (e^{2 eps / d} - 1)); the public sees it against 2C/N
    sigma_s = 10 * 0.01 / math.sqrt(1000 * math.expm1(2 * 10 / 1000))
    # the printed noise is the algorithm's own plan, whose weights are the float32 aggregation
    # weights (1/N rounded to float32: a relative 2e-8 below the exact formula)
    assert out["noise_std"] == pytest.approx(sigma_s, rel=1e-7)
    assert out["observers"]["public"]["epsilon_rdp"] == pytest.approx(
        _rdp_eps(dpa.GaussianDpEvent(sigma_s / (20 / 100)), 1e-5, 5), rel=1e-9)


def test_ldp_fl_without_shuffler_composes_d_t_reports(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["account", "ldp-fl", "--epsilon", "1", "--dim", "100", "--rounds", "3", "--clients", "100",
                 "--delta", "1e-5", "--json", "--trusted-shuffler"], capsys)
    assert out["epsilon_claimed"] == 1.0 and out["epsilon_claimed_unshuffled"] == 300.0
    server = out["observers"]["server"]
    assert server["epsilon_pure"] == pytest.approx(300.0)  # d T reports of eps = 1 each
    assert server["epsilon"] <= 300.0
    shuffler = out["what_if"]["trusted_shuffler"]
    assert shuffler["shuffled"] is None and "not applicable" in shuffler["shuffled_note"]  # n = 100: outside FMT21


def test_ldp_fl_client_minmax_ranges_are_an_exact_release(capsys: pytest.CaptureFixture[str]) -> None:
    """client-minmax publishes the cohort's exact bounds: the ledger charges it (epsilon = inf); the
    old shortcut had no range at all."""
    base = ["account", "ldp-fl", "--dim", "10", "--rounds", "2", "--clients", "20", "--delta", "1e-5", "--json"]
    assert _num(_json([*base, "--epsilon", "0.5"], capsys)["epsilon"]) < math.inf
    assert _json([*base, "--epsilon", "0.5", "--range", "client-minmax"], capsys)["epsilon"] == "inf"
    with pytest.raises(ConfigError, match="target-epsilon.*20"):
        _run([*base, "--target-epsilon", "20", "--range", "client-minmax"])


def test_ldp_fl_inverse_is_the_largest_meeting_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--dim", "10", "--rounds", "2", "--clients", "50", "--delta", "1e-5", "--json"]
    out = _json(["account", "ldp-fl", "--target-epsilon", "20", *base], capsys)
    eps0 = out["inverse"]["epsilon_per_weight"]
    assert eps0 >= 20 / 20 and out["epsilon_per_weight"] == eps0
    assert _num(out["epsilon"]) <= 20.0 + 1e-9
    above = _json(["account", "ldp-fl", "--epsilon", repr(eps0 * 1.001), *base], capsys)
    assert _num(above["epsilon"]) > 20.0


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--epsilon", "0"], r"--epsilon.*0"),
        (["--epsilon", "-1"], r"--epsilon.*-1"),
        (["--epsilon", "8", "--delta", "1.5"], r"--delta.*1\.5"),
        (["--epsilon", "8", "--sampled", "60"], r"\(60\).*\(50\)"),
        (["--epsilon", "8", "--rounds", "1000000000"], r"--rounds.*1000000000"),
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
                     "--rounds", "10", "--clients", "10", "--delta", "2", "--json"])
    assert code == 2
    assert "--delta" in capsys.readouterr().err
    assert issubclass(ConfigError, DpflError)


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([a for a in DPFEDAVG if a != "--json"] + ["--secure-aggregation"]) == 0
    text = capsys.readouterr().out
    assert "certified epsilon" in text and "public" in text and "claimed epsilon" in text
    assert "secure aggregation: distributed Skellam" in text
    assert "what-if" not in text


def test_per_round(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json([*UDP, "--per-round"], capsys)
    rows = out["per_round"]
    assert [r["round"] for r in rows] == list(range(1, 61))
    assert rows[-1]["server"] == pytest.approx(out["observers"]["server"]["epsilon_rdp"], rel=1e-9)


def test_dpfl_version(capsys: pytest.CaptureFixture[str]) -> None:
    import dpfl
    from dpfl.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dpfl {dpfl.__version__}"
