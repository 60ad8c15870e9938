"""NbAFL (003 Alg. 1): limiting case, calibrated noise, K-random preconditions, per-observer releases."""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch

from dpfl.algorithms.nbafl import ALGORITHMS, NbAfl
from dpfl.algorithms.registry import BuildContext
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.client.local import LocalTraining
from dpfl.config import parse_config
from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.calibration import (
    nbafl_downlink_noise_std,
    nbafl_downlink_noise_std_k_random,
    nbafl_uplink_noise_std,
)
from dpfl.rng import SERVER, SeedSequence
from dpfl.sampling import AllClients, FixedSizeSampler, PoissonSampler
from dpfl.server.aggregators import WeightedMean

N, M, T, DELTA = 50, 600, 25, 0.01


def _build(options: dict, sampler=None, sizes=None, rounds: int = T) -> NbAfl:
    cfg = parse_config({"rounds": rounds, "privacy": {"delta": DELTA}})
    sizes = torch.full((N,), M) if sizes is None else sizes
    ctx = BuildContext(cfg, int(sizes.numel()), sizes, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FormulaRangeWarning: epsilon/L >= 1 (the runner records it)
        return ALGORITHMS["nbafl"](options, sampler or AllClients(), ctx)


def _info(clients: list[int], round_idx: int = 3, seed: int = 11) -> RoundInfo:
    return RoundInfo(round_idx, N, torch.tensor(clients), SeedSequence(seed))


def test_limit_no_noise_huge_clip_is_fedavg_with_the_proximal_term() -> None:
    algo = _build({"epsilon": None, "clip_norm": 1e12, "prox_mu": 0.3})

    @dataclasses.dataclass
    class Problem:  # a LocalProblem stand-in: configure_local only replaces `local`
        local: LocalTraining

    assert algo.configure_local(Problem(LocalTraining(lr=0.1))).local.prox_mu == 0.3  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(0)
    params = torch.randn(3, 40, generator=gen)
    sizes = torch.tensor([10, 30, 60])
    out = algo.server_step(torch.zeros(40), LocalResult(params.clone(), torch.zeros(3), sizes), _info([1, 4, 9]))
    expected = WeightedMean.by_samples(sizes)(params)  # FedAvg: Σ |D_i|/|D| w_i (003 eq. 1)
    torch.testing.assert_close(out.global_params, expected, rtol=0, atol=1e-6)
    assert out.metrics["uplink_noise_std"] == 0 and out.metrics["clipped_fraction"] == 0


def test_clipping_is_on_the_whole_parameter_vector() -> None:
    algo = _build({"epsilon": None, "clip_norm": 1.0, "weights": "uniform"})
    params = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    out = algo.server_step(torch.zeros(2), LocalResult(params, torch.zeros(2), torch.tensor([5, 5])), _info([0, 1]))
    torch.testing.assert_close(out.global_params, torch.tensor([(0.6 + 0.3) / 2, (0.8 + 0.4) / 2]))
    assert out.metrics["clipped_fraction"] == 0.5


def test_noise_levels_are_the_calibrated_ones() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        algo = _build({"epsilon": 60.0, "clip_norm": 10.0, "exposures": 1})  # T = 25 > L sqrt(N): σ_D > 0
        sigma_u = nbafl_uplink_noise_std(60.0, DELTA, 10.0, M, 1)
        sigma_d = nbafl_downlink_noise_std(60.0, DELTA, 10.0, M, N, T, 1)
    assert algo.uplink_noise_std == sigma_u and algo.downlink_noise_std == sigma_d > 0
    # default L = T: T <= L sqrt(N), so Theorem 1 adds no downlink noise
    default = _build({"epsilon": 60.0, "clip_norm": 10.0})
    assert default.exposures == T and default.downlink_noise_std == 0.0


def test_added_noise_has_the_calibrated_std_and_comes_from_the_keyed_generators() -> None:
    algo = _build({"epsilon": 1.0, "clip_norm": 1.0, "exposures": 1, "weights": "uniform"}, rounds=25)
    sigma_u, sigma_d = algo.uplink_noise_std, algo.downlink_noise_std
    assert sigma_u > 0 and sigma_d > 0
    k, p = 4, 250_000
    clients = [2, 5, 7, 11]
    info = _info(clients)
    out = algo.server_step(torch.zeros(p), LocalResult(torch.zeros(k, p), torch.zeros(k), torch.full((k,), M)), info)
    # exact: zero parameters → the aggregate is mean_i σ_U z_i + σ_D z_D with the keyed streams
    z = torch.stack([torch.randn(p, generator=info.seeds.generator(3, c, "noise")) for c in clients])
    z_d = torch.randn(p, generator=info.seeds.generator(3, SERVER, "server_noise"))
    torch.testing.assert_close(out.global_params, sigma_u * z.mean(0) + sigma_d * z_d, rtol=1e-5, atol=1e-7)
    # moment: std of the broadcast noise = sqrt(σ_U²/K + σ_D²) within 4 standard errors (σ/sqrt(2p))
    target = math.sqrt(sigma_u**2 / k + sigma_d**2)
    assert abs(float(out.global_params.std()) - target) < 4 * target / math.sqrt(2 * p)


def test_k_random_at_the_papers_settings_fails_at_build_time() -> None:
    with pytest.raises(PrivacyPreconditionError, match=r"K = 20 of N = 50.*downlink_noise: none"):
        _build({"epsilon": 60.0, "clip_norm": 10.0}, FixedSizeSampler(20))
    uplink_only = _build({"epsilon": 60.0, "clip_norm": 10.0, "downlink_noise": "none"}, FixedSizeSampler(20))
    assert uplink_only.downlink_noise_std == 0.0 and uplink_only.k_random
    assert any("downlink noise disabled" in n for n in uplink_only.not_covered())
    # where Lemma 4 is defined (ε < −T ln(1 − K/N) = 12.77) the lemma's σ_D is used
    ok = _build({"epsilon": 5.0, "clip_norm": 10.0, "exposures": 1}, FixedSizeSampler(20))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ok.downlink_noise_std == nbafl_downlink_noise_std_k_random(5.0, DELTA, 10.0, M, N, 20, T, 1) > 0


def test_poisson_sampling_and_bad_exposures_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="'all' or 'fixed'"):
        _build({"epsilon": 60.0, "clip_norm": 10.0}, PoissonSampler(0.4))
    with pytest.raises(ConfigError, match="exposures"):
        _build({"epsilon": 60.0, "clip_norm": 10.0, "exposures": 26})
    with pytest.raises(ConfigError, match="unknown option"):
        _build({"epsilon": 60.0, "clip_norm": 10.0, "sigma": 1})


def test_releases_per_observer_use_the_enforced_sensitivity() -> None:
    algo = _build({"epsilon": 1.0, "clip_norm": 2.0, "exposures": 1}, FixedSizeSampler(10), rounds=25)
    sizes = torch.tensor([100, 300])
    info = _info([3, 8])
    rel = algo.releases(info, sizes, ideal_secure_sum=False)
    server = [r for r in rel if r.observer == "server"]
    public = [r for r in rel if r.observer == "public"]
    assert len(server) == 1 and server[0].client_ids == (3, 8)
    assert server[0].noise_std == algo.uplink_noise_std and server[0].sensitivity == 4.0  # 2C
    (pub,) = public
    p = [0.25, 0.75]
    assert pub.client_ids is None  # a broadcast: amplified by the secret K-of-N schedule
    assert pub.sensitivity == pytest.approx(0.75 * 4.0)  # max p_i × 2C
    assert pub.noise_std == pytest.approx(math.sqrt(sum(w * w for w in p) * algo.uplink_noise_std**2
                                                    + algo.downlink_noise_std**2))
    secure = algo.releases(info, sizes, ideal_secure_sum=True)
    assert all(r.noise_std < algo.uplink_noise_std for r in secure if r.observer == "server")


def test_claimed_epsilon_round_trips_the_papers_target_and_names_both_sensitivities() -> None:
    algo = _build({"epsilon": 60.0, "clip_norm": 10.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert algo.claimed_epsilon(T) == pytest.approx(60.0, rel=1e-9)
        assert algo.claimed_epsilon(5) == pytest.approx(60.0 * 5 / T, rel=1e-9)  # L' = min(L, t) exposures
    note = algo.claim_notion()
    assert "2C/m" in note and "2C = 20" in note
    assert _build({"epsilon": None, "clip_norm": 1.0}).claimed_epsilon(3) == math.inf


def test_unequal_sizes_use_the_smallest_data_set() -> None:
    sizes = torch.tensor([400] * 49 + [200])
    algo = _build({"epsilon": 60.0, "clip_norm": 10.0}, sizes=sizes)
    assert algo.min_samples == 200
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert algo.uplink_noise_std == nbafl_uplink_noise_std(60.0, DELTA, 10.0, 200, T)


def test_a_run_ledger_certifies_what_dpfl_account_nbafl_says(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import json

    from dpfl.commands.account import register
    from dpfl.privacy.accounting.ledger import PrivacyLedger

    n, rounds = 5, 4
    cfg = parse_config({"rounds": rounds, "privacy": {"delta": DELTA}})
    sizes = torch.full((n,), M)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        algo = ALGORITHMS["nbafl"]({"epsilon": 60.0, "clip_norm": 10.0}, AllClients(), BuildContext(cfg, n, sizes, 10))
        ledger = PrivacyLedger(num_clients=n, sampler=algo.sampler, delta=DELTA, relation=algo.relation,
                               privacy_unit=algo.privacy_unit)
        for t in range(rounds):
            info = RoundInfo(t, n, torch.arange(n), SeedSequence(0))
            ledger.record_round(t, algo.releases(info, sizes, False), sampling=algo.sampler.describe(),
                                participants=range(n))
        parser = argparse.ArgumentParser(prog="dpfl")
        register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["account", "nbafl", "--epsilon", "60", "--delta", str(DELTA), "--clients", str(n),
                                  "--rounds", str(rounds), "--clip", "10", "--min-samples", str(M), "--json"])
        assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    for observer in ("server", "public"):
        ours = ledger.certify(observer, None, "rdp").epsilon_rdp
        assert ours == pytest.approx(float(out["observers"][observer]["epsilon_rdp"]), rel=1e-9), observer
