"""Secure aggregation in simulation (DP-FedAvg's integer pipeline with distributed Skellam noise):
the run's certificates against values computed independently here — the Skellam RDP bound and
the Poisson amplification bound written out again from the papers, dp-accounting's RDP-to-(ε, δ)
conversion, and dp-accounting's Gaussian as a floor — and the run itself (decoding, engines,
colluding clients, refusals)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from scipy.optimize import brentq
from scipy.special import comb
from scipy.stats import norm
from secure_transports import OwnCoinsTransport

from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.privacy.releases.skellam_gdp import certified_unit_eta
from dpfl.rounds import dry_run, run_experiment
from dpfl.store import RunStore

N, Q, ROUNDS, Z, CLIP, DELTA = 12, 0.5, 4, 1.2, 0.5, 1e-5
ORDERS = list(range(2, 41))  # exp((α−1)ε(α)) stays finite in floating point


def _cfg(data: Path, privacy: dict[str, Any], *, noise: float = Z, engine: str = "vectorized",
         **options: Any) -> Any:
    return parse_config({
        "name": "secure", "seed": 3, "rounds": ROUNDS,
        "data": {"name": "mnist", "dir": str(data), "verify": False},
        "partition": {"kind": "iid", "num_clients": N, "samples_per_client": 20},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": noise, "clip_norm": CLIP, **options}},
        "sampling": {"kind": "poisson", "sample_rate": Q},
        "privacy": {"delta": DELTA, "secure_aggregation": True, **privacy},
        "local": {"lr": 0.1, "steps": 2, "batch_size": 10},
        "engine": engine, "eval_every": ROUNDS,
    })


def _akl(alpha: int, mu: float, d2: float, d1: float) -> float:
    """Agarwal, Kairouz, Liu 2021, Thm 3.5, written out again."""
    return alpha * d2 ** 2 / (2 * mu) + min(((2 * alpha - 1) * d2 ** 2 + 6 * d1) / (4 * mu ** 2), 3 * d1 / (2 * mu))


def _binomial(alpha: int, q: float, eps: Any) -> float:
    """The Poisson-subsampled RDP of a symmetric-noise sum (the binomial expansion without Zhu & Wang's
    factor 3; docs/proofs/skellam-subsampling.md), summed term by term in floating point (small orders only)."""
    total = (1 - q) ** (alpha - 1) * (alpha * q - q + 1)
    total += sum(comb(alpha, ell) * q ** ell * (1 - q) ** (alpha - ell) * math.exp((ell - 1) * eps(ell))
                 for ell in range(2, alpha + 1))
    return min(math.log(total) / (alpha - 1), eps(alpha))


def _dominating_pld(mu: float, d2: float, q: float, rounds: int) -> float:
    """dp-accounting's PLD (add/remove, dpfl's grid 1e-3) of ``rounds`` Poisson-sampled Gaussian pairs of
    multiplier 1/(η̄·Δ2), η̄ the certified unit-shift GDP parameter of Sk(μ)."""
    cert = certified_unit_eta(mu)
    assert cert is not None
    acc = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=1e-3)
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(1.0 / (cert.eta * d2))), rounds)
    return float(acc.get_epsilon(DELTA))


def _secure(result: Any) -> Any:
    return result.final["privacy"]["certified"]["observers"]


def test_hidden_participation_gives_the_server_the_publics_certificate(mnist_fixture: Path, tmp_path: Path) -> None:
    res = run_experiment(_cfg(mnist_fixture, {"participation": "hidden"}), RunStore(tmp_path / "s.sqlite"))
    assert res.status == "finished"
    obs = _secure(res)
    server, public = obs["server"], obs["public"]
    assert server["epsilon"] == pytest.approx(public["epsilon"], rel=1e-12)
    assert server["basis"] == public["basis"] == "ex-ante" and server["method"] == "pld"
    # independently: Δ2 from conditional rounding on γS (d = 7850 logistic parameters), μ = (zΔ2)²
    from dpfl.rounds import build_plan

    cal = build_plan(_cfg(mnist_fixture, {"participation": "hidden"}), [20] * N, 7850).algorithm.calibration()
    sec = cal.secure_sum
    d = 7850
    gs = sec.scale * CLIP
    d2 = math.sqrt(gs ** 2 + d / 4 + math.sqrt(2 * math.log(1 / sec.beta)) * (gs + math.sqrt(d) / 2))
    assert sec.l2_sensitivity == pytest.approx(d2, rel=1e-12)
    d1 = min(d2 ** 2, math.sqrt(d) * d2)
    mu = (Z * d2) ** 2
    rdp = np.array([ROUNDS * _binomial(a, Q, lambda o: _akl(o, mu, d2, d1)) for a in ORDERS])
    want = rdp_acc.compute_epsilon(np.array(ORDERS, dtype=float), rdp, DELTA)[0]
    # the RDP route prices on a finer grid of orders: never above the integer-order figure, and close
    assert server["epsilon_rdp"] <= want * (1 + 1e-9)
    assert server["epsilon_rdp"] >= want * 0.98
    # never below the continuous Gaussian of dp-accounting at the same multiplier
    acc = rdp_acc.RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(Z)), ROUNDS)
    assert server["epsilon_rdp"] >= acc.get_epsilon(DELTA)
    # the certificate: dp-accounting's PLD of the Poisson-sampled Gaussian pair of multiplier 1/(η̄Δ2) that
    # dominates the sum (docs/proofs/skellam-gdp.md), called here directly; never below the Gaussian's own PLD
    assert server["epsilon"] == pytest.approx(_dominating_pld(mu, d2, Q, ROUNDS), rel=1e-9)
    assert _dominating_pld(mu, math.sqrt(mu) / Z, Q, ROUNDS) <= server["epsilon"] < server["epsilon_rdp"]


def test_visible_participation_charges_each_participation_unamplified(mnist_fixture: Path, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(_cfg(mnist_fixture, {}), store)
    obs = _secure(res)
    assert obs["server"]["basis"] == "given-cohorts"
    from dpfl.rounds import build_plan

    plan = build_plan(_cfg(mnist_fixture, {}), [20] * N, 7850)
    counts: dict[int, int] = {}
    for t in range(ROUNDS):  # the run's cohorts: the same sampler on the same stream
        for c in plan.algorithm.sample(t, N, plan.seeds).tolist():
            counts[c] = counts.get(c, 0) + 1
    sec = plan.algorithm.calibration().secure_sum
    d2, d1, mu = sec.l2_sensitivity, sec.l1_sensitivity, sec.variance
    # the server sees the full-noise sum once per participation: the worst client is the one drawn
    # most often (every round's sum has all its sampled shares: no dropouts in simulation)
    worst = max(counts.values())
    rdp = np.array([worst * _akl(a, mu, d2, d1) for a in ORDERS])
    want = rdp_acc.compute_epsilon(np.array(ORDERS, dtype=float), rdp, DELTA)[0]
    assert obs["server"]["epsilon_rdp"] <= want * (1 + 1e-9) and obs["server"]["epsilon_rdp"] >= want * 0.98
    # the certificate: `worst` unamplified Gaussian pairs of multiplier 1/(η̄Δ2) compose to a Gaussian of
    # μ = η̄Δ2·√worst, whose ε at δ solves Balle & Wang's δ(ε) (2018, Thm 8)
    cert = certified_unit_eta(mu)
    assert cert is not None
    m = cert.eta * d2 * math.sqrt(worst)

    def excess(e: float) -> float:
        return float(norm.cdf(-e / m + m / 2) - math.exp(e) * norm.cdf(-e / m - m / 2)) - DELTA

    assert obs["server"]["epsilon"] == pytest.approx(brentq(excess, 0.0, 100.0, xtol=1e-12), rel=1e-6)
    # the public's view is the hidden one's: the same amplified sum
    hidden = dry_run(_cfg(mnist_fixture, {"participation": "hidden"})).privacy
    assert hidden is not None and hidden.certified is not None
    assert obs["public"]["epsilon"] == pytest.approx(hidden.certified["public"].epsilon, rel=1e-12)


def test_colluding_clients_raise_the_servers_epsilon(mnist_fixture: Path) -> None:
    eps = []
    for c in (0, 2, 6, N):
        out = dry_run(_cfg(mnist_fixture, {"participation": "hidden", "colluding_clients": c})).privacy
        assert out is not None and out.certified is not None
        eps.append(out.certified["server"].epsilon)
        assert out.certified["public"].epsilon == pytest.approx(eps[0], rel=1e-12)  # the public is unaffected
    assert eps[0] < eps[1] < eps[2] and math.isinf(eps[3])


def test_the_decoded_secure_sum_is_the_float_sum_up_to_rounding(mnist_fixture: Path) -> None:
    """Without noise (z = 0) the secure aggregate equals the ordinary one up to the rounding of
    each coordinate to 1/γ per client (and float summation order)."""
    import torch

    from dpfl.algorithms.registry import BuildContext, build_algorithm, build_sampler
    from dpfl.client.context import LocalResult, RoundInfo
    from dpfl.rng import SeedSequence

    outs = []
    for secure in (True, False):
        cfg = _cfg(mnist_fixture, {}, noise=0.0)
        if not secure:
            raw = cfg.model_dump(mode="json")
            raw["privacy"] = {"delta": DELTA}
            cfg = parse_config(raw)
        algo = build_algorithm(cfg.algorithm, build_sampler(cfg.sampling, N),
                               BuildContext(cfg, N, torch.tensor([20] * N), 7850))
        seeds = SeedSequence(5)
        clients = algo.sample(0, N, seeds)
        info = RoundInfo(0, N, clients, seeds)
        k = int(clients.numel())
        trained = torch.randn(k, 7850, generator=torch.Generator().manual_seed(9)) * 0.01
        out = algo.server_step(torch.zeros(7850), LocalResult(trained, torch.zeros(k), torch.full((k,), 20)), info)
        outs.append((out.global_params.double(), k, algo))
    (sec, k, algo), (flt, _, _) = outs
    gamma = algo.calibration().secure_sum.scale
    m = algo.calibration().denominator
    assert 0 < float((sec - flt).abs().max()) <= k / gamma / m
    assert float((sec - flt).abs().max()) < 1e-3 * float(flt.abs().max())


def test_a_rerun_is_bit_identical(mnist_fixture: Path, tmp_path: Path) -> None:
    """Rounding, shares, rotation and the absent clients' shares come from the run's streams."""
    cfg = _cfg(mnist_fixture, {"participation": "hidden"}, secure_sum={"rotation": True})
    one = run_experiment(cfg, RunStore(tmp_path / "a.sqlite"))
    two = run_experiment(cfg, RunStore(tmp_path / "b.sqlite"))
    assert one.final["params_sha256"] == two.final["params_sha256"]


@pytest.mark.parametrize(("privacy", "options", "match"), [
    ({}, {"variant": "central"}, "variant: central"),
    ({}, {"adaptive_clip": {"count_noise_std": 5.0}}, "adaptive_clip"),
])
def test_unsupported_settings_are_named(mnist_fixture: Path, privacy: dict[str, Any], options: dict[str, Any],
                                        match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        dry_run(_cfg(mnist_fixture, privacy, **options))


def test_hidden_participation_needs_poisson_sampling_and_secure_aggregation(mnist_fixture: Path) -> None:
    cfg = _cfg(mnist_fixture, {"participation": "hidden"})
    raw = cfg.model_dump(mode="json")
    raw["sampling"] = {"kind": "all"}
    with pytest.raises(ConfigError, match="participation: hidden.*poisson"):
        dry_run(parse_config(raw))
    raw = cfg.model_dump(mode="json")
    raw["privacy"] = {"delta": DELTA, "participation": "hidden"}
    with pytest.raises(ConfigError, match="secure_aggregation"):
        parse_config(raw)


def test_a_wrap_prone_configuration_is_refused(mnist_fixture: Path) -> None:
    with pytest.raises(ConfigError, match="wrap around"):
        dry_run(_cfg(mnist_fixture, {}, secure_sum={"bits": 12, "scale": 4000.0}))


def test_account_shows_the_servers_epsilon_per_number_of_colluding_clients(
        mnist_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import yaml

    from dpfl.cli import main

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_cfg(mnist_fixture, {"participation": "hidden"}).model_dump(mode="json")))
    assert main(["account", str(path), "--colluding", "0,3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_c = {int(c): cert["epsilon"] for c, cert in out["colluding"].items()}
    assert by_c[0] == pytest.approx(out["privacy"]["certified"]["observers"]["server"]["epsilon"], rel=1e-12)
    direct = dry_run(_cfg(mnist_fixture, {"participation": "hidden", "colluding_clients": 3})).privacy
    assert direct is not None and direct.certified is not None
    assert by_c[3] == pytest.approx(direct.certified["server"].epsilon, rel=1e-12) and by_c[3] > by_c[0]
    plain = tmp_path / "plain.yaml"
    raw = _cfg(mnist_fixture, {}).model_dump(mode="json")
    raw["privacy"] = {"delta": DELTA}
    plain.write_text(yaml.safe_dump(raw))
    assert main(["account", str(plain), "--colluding", "1"]) == 2
    assert "secure_aggregation" in capsys.readouterr().err


def test_the_calibration_keeps_the_noise_drawable(mnist_fixture: Path) -> None:
    from dpfl.rounds import build_plan

    # a large multiplier: the automatic scale keeps μ/2 within one exact Poisson draw
    sec = build_plan(_cfg(mnist_fixture, {}, noise=100.0), [20] * N, 7850).algorithm.calibration().secure_sum
    assert sec.variance / 2 <= 2.0 ** 40
    # a user scale that would need an inexact draw is refused, naming the setting
    with pytest.raises(ConfigError, match="secure_sum.scale"):
        dry_run(_cfg(mnist_fixture, {}, secure_sum={"bits": 62, "scale": 2.0 ** 34}))


def test_rotation_signs_do_not_depend_on_the_randomness_source(mnist_fixture: Path) -> None:
    """A client and the server draw the noise from independent OS-CSPRNG streams in a deployment;
    the rotation must still be the same on both sides, or the decoded sum is garbage."""
    import torch

    from dpfl.client.context import RoundInfo
    from dpfl.rng import SeedSequence
    from dpfl.rounds import build_plan

    algo = build_plan(_cfg(mnist_fixture, {}, secure_sum={"rotation": True}), [20] * N, 7850).algorithm
    pipe = algo.pipeline(algo.plan(RoundInfo(3, N, torch.tensor([0, 1]), SeedSequence(1))))
    one = algo._rotation_signs(pipe, RoundInfo(3, N, torch.tensor([0]), SeedSequence.secure_mode()))
    two = algo._rotation_signs(pipe, RoundInfo(3, N, torch.tensor([1]), SeedSequence.secure_mode()))
    other_round = algo._rotation_signs(pipe, RoundInfo(4, N, torch.tensor([1]), SeedSequence.secure_mode()))
    assert one is not None and two is not None and other_round is not None
    assert torch.equal(one, two) and not torch.equal(one, other_round)


# ---------------------------------------------------------------------------------------------
# hidden participation with the clients' own coins (what a deployment does), in process


def test_the_clients_own_coins_sample_them_and_hide_it(mnist_fixture: Path, tmp_path: Path) -> None:
    """Each client's coin is its own Poisson sample: a client whose coin is 0 uploads exactly its
    Skellam share on a zero update (same shape, same modulus), one whose coin is 1 its encoded
    update; the server is certified the public's figure, which equals the simulation's."""
    import torch

    from dpfl.rounds import build_plan

    cfg = _cfg(mnist_fixture, {"participation": "hidden"})
    transport = OwnCoinsTransport(cfg)
    res = run_experiment(cfg, RunStore(tmp_path / "d.sqlite"), remote=transport)
    assert res.status == "finished"
    obs = _secure(res)
    sim = _secure(run_experiment(cfg, RunStore(tmp_path / "s.sqlite")))
    assert obs["server"]["epsilon"] == pytest.approx(obs["public"]["epsilon"], rel=1e-12)
    assert obs["public"]["epsilon"] == pytest.approx(sim["public"]["epsilon"], rel=1e-12)
    assert obs["server"]["basis"] == "ex-ante"
    algo = build_plan(cfg, [20] * N, 7850).algorithm
    seeds = transport.exp.seeds
    sampled = 0
    for t, clients, residues in transport.rows:
        plan = algo.plan_for_cohort(t, N)
        pipe = algo.pipeline(plan)
        assert (residues.shape == (N, pipe.padded_dim) and int(residues.min()) >= 0
                and int(residues.max()) < pipe.modulus)
        for row, c in zip(residues, clients.tolist(), strict=True):
            coin = float(torch.rand((), generator=seeds.generator(t, c, "coin"), dtype=torch.float64)) < Q
            from dpfl.privacy.mechanisms.integer import skellam_noise

            share = skellam_noise((pipe.padded_dim,), plan.share_variance, seeds.generator(t, c, "noise"))
            signal = pipe.decode(pipe.to_residues(row - share), None)
            assert bool(signal.abs().max() > 0) == coin, (t, c)
            sampled += coin
    # the coins are Bernoulli(q): 48 coins, mean within 4 standard errors of q
    n = ROUNDS * N
    assert abs(sampled / n - Q) <= 4 * math.sqrt(Q * (1 - Q) / n)


def test_own_coins_after_a_dropout_charge_the_server_the_survivors_shares(mnist_fixture: Path, tmp_path: Path) -> None:
    """A client lost before its masked vector: the server's sum carries N − 1 shares (its top-up
    does not protect against it), the public's the planned μ; both still amplified by the coins."""
    cfg = _cfg(mnist_fixture, {"participation": "hidden"})
    store = RunStore(tmp_path / "d.sqlite")
    res = run_experiment(cfg, store, remote=OwnCoinsTransport(cfg, drop=lambda t: [3] if t == 1 else []))
    assert res.status == "finished"
    rounds = store.rounds(res.run_id)
    assert [r["arrived"] for r in rounds] == [N, N - 1, N, N]
    obs = _secure(res)
    full = dry_run(cfg).privacy
    assert full is not None and full.certified is not None
    assert obs["public"]["epsilon"] == pytest.approx(full.certified["public"].epsilon, rel=1e-12)
    assert obs["server"]["basis"] == "ex-ante"
    # independently: three rounds of Sk(μ) and one of Sk(μ(N−1)/N), each amplified by q (binomial expansion)
    from dpfl.rounds import build_plan

    sec = build_plan(cfg, [20] * N, 7850).algorithm.calibration().secure_sum
    d2, d1, mu = sec.l2_sensitivity, sec.l1_sensitivity, sec.variance
    rdp = np.array([3 * _binomial(a, Q, lambda o: _akl(o, mu, d2, d1))
                    + _binomial(a, Q, lambda o: _akl(o, mu * (N - 1) / N, d2, d1)) for a in ORDERS])
    want = rdp_acc.compute_epsilon(np.array(ORDERS, dtype=float), rdp, DELTA)[0]
    assert obs["server"]["epsilon"] > obs["public"]["epsilon"]
    assert want * 0.98 <= obs["server"]["epsilon_rdp"] <= want * (1 + 1e-9)
    assert obs["server"]["epsilon"] <= obs["server"]["epsilon_rdp"]


def test_a_secure_sum_no_vector_reached_charges_the_server_nothing(mnist_fixture: Path, tmp_path: Path) -> None:
    """Own coins, round 2 halted (no masked vector reached the server): the server learned nothing
    that round — its figure is three rounds' (finite), the public's four (the server drew the
    whole planned noise)."""
    cfg = _cfg(mnist_fixture, {"participation": "hidden"})
    store = RunStore(tmp_path / "d.sqlite")
    res = run_experiment(cfg, store, remote=OwnCoinsTransport(cfg, drop=lambda t: list(range(N)) if t == 1 else []))
    assert res.status == "finished" and [r["arrived"] for r in store.rounds(res.run_id)] == [N, 0, N, N]
    obs = _secure(res)
    from dpfl.rounds import build_plan

    sec = build_plan(cfg, [20] * N, 7850).algorithm.calibration().secure_sum
    d2, d1, mu = sec.l2_sensitivity, sec.l1_sensitivity, sec.variance

    def eps(rounds: int) -> float:
        rdp = np.array([rounds * _binomial(a, Q, lambda o: _akl(o, mu, d2, d1)) for a in ORDERS])
        return float(rdp_acc.compute_epsilon(np.array(ORDERS, dtype=float), rdp, DELTA)[0])

    assert math.isfinite(obs["server"]["epsilon"]) and obs["server"]["epsilon"] < obs["public"]["epsilon"]
    assert eps(3) * 0.98 <= obs["server"]["epsilon_rdp"] <= eps(3) * (1 + 1e-9)
    assert eps(4) * 0.98 <= obs["public"]["epsilon_rdp"] <= eps(4) * (1 + 1e-9)
    # the certificates: the dominating sampled Gaussian's PLD over three and four rounds
    assert obs["server"]["epsilon"] == pytest.approx(_dominating_pld(mu, d2, Q, 3), rel=1e-9)
    assert obs["public"]["epsilon"] == pytest.approx(_dominating_pld(mu, d2, Q, 4), rel=1e-9)


@pytest.mark.parametrize("participation", ["visible", "hidden"])
def test_charged_ahead_a_secure_round_costs_its_fewest_shares(mnist_fixture: Path, participation: str) -> None:
    """Before a secure round on real clients the loop charges what the server may see at worst: a
    completed sum with only ``fewest_in_sum`` vectors (their shares), for every client of the
    cohort (visible) or as the round's shared release (own coins)."""
    import torch

    from dpfl.client.context import RoundInfo
    from dpfl.privacy.releases import SkellamRelease
    from dpfl.rounds import build_experiment
    from dpfl.rounds.loop import _worst_secure_sum
    from dpfl.rounds.session import make_gate

    cfg = _cfg(mnist_fixture, {"participation": participation, "colluding_clients": 1})
    exp = build_experiment(cfg)
    gate = make_gate(exp)
    assert gate is not None
    algo = exp.algorithm
    hidden = participation == "hidden"
    clients = torch.arange(N) if hidden else torch.tensor([1, 4, 5, 9])
    info = RoundInfo(0, N, clients, exp.seeds, hidden_participation=hidden)
    info = info.with_plan(algo.plan(info))

    class Secure:
        def fewest_in_sum(self, n: int) -> int:
            return 3

    (worst,) = _worst_secure_sum(Secure(), gate, info, clients)  # type: ignore[arg-type, misc]
    plan = algo.round_plan(info)
    assert isinstance(worst, SkellamRelease) and worst.observer == "server"
    assert worst.variance == pytest.approx((3 - 1) * plan.share_variance, rel=1e-12)
    if hidden:
        assert worst.client_ids is None and worst.amplifiable
    else:
        assert worst.client_ids == (1, 4, 5, 9) and not worst.amplifiable

    class Plain:
        def fewest_in_sum(self, n: int) -> None:
            return None

    assert _worst_secure_sum(Plain(), gate, info, clients) is None  # type: ignore[arg-type]
