"""The part that adds noise and the part that declares the release agree, for every private
algorithm built on a per-round plan.

For each algorithm one round is run on a cohort whose trained models are known exactly (zeros,
or a constant vector inside every clip), with P = 40 000 coordinates:

* per client, the std of ``client_step``'s output minus the noise-free (clipped) input, measured
  over the P coordinates, equals the ``noise_std`` of the server-observer Gaussian release the
  algorithm declares for that client;
* the std of ``aggregate``'s output minus the noise-free aggregate equals the ``noise_std`` of the
  public release (the broadcast);
* two-point reports (LDP-FL): the log-odds of the high value for an input at the top of the
  range equals the declared per-coordinate ε.

Tolerance and flake budget: a sample std of P = 40 000 i.i.d. Gaussian draws has relative
standard error 1/sqrt(2P) = 0.35%, so the 2% tolerance is 5.6 standard errors: a correct
implementation fails one check with probability < 2.2e-8 (two-sided), < 1e-6 over the 43
Gaussian checks here. For the two-point log-odds the standard error at ε = 1 over P draws is
1/sqrt(P·p(1 − p)) ≈ 0.011 (p = e/(e + 1)), and the tolerance 0.05 is 4.4 SE: < 1e-5 per row,
< 5e-5 over its 4 rows. The seeds are fixed, so the test is deterministic. A wrong noise formula
(e.g. std vs variance, a missing sqrt(K), the pre-top-up std) is off by far more than 2%.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.algorithms.registry import BuildContext, build_algorithm, build_sampler
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.config import parse_config
from dpfl.privacy.releases import GaussianRelease, Release
from dpfl.rng import SeedSequence

P = 40_000
TOL = 0.02
SIZES = [20, 35, 12, 50, 28, 40]


def _build(name: str, options: dict[str, Any], *, sampling: dict[str, Any] | None = None,
           local: dict[str, Any] | None = None, rounds: int = 10) -> PrivateAlgorithm:
    raw = {
        "rounds": rounds,
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "algorithm": {"name": name, "options": options},
        "privacy": {"delta": 1e-5},
        "sampling": sampling or {"kind": "fixed", "clients_per_round": 4},
        "local": local or {"lr": 0.5, "batch_size": None},
    }
    cfg = parse_config(raw)
    algo = build_algorithm(cfg.algorithm, build_sampler(cfg.sampling, len(SIZES)),
                           BuildContext(cfg, len(SIZES), torch.tensor(SIZES), P))
    assert isinstance(algo, PrivateAlgorithm)
    return algo


def _round_inputs(algo: PrivateAlgorithm, value: float = 0.0) -> tuple[RoundInfo, LocalResult, torch.Tensor]:
    seeds = SeedSequence(11)
    clients = algo.sample(0, len(SIZES), seeds)
    info = RoundInfo(0, len(SIZES), clients, seeds)
    k = int(clients.numel())
    params = torch.full((k, P), value, dtype=torch.float32)
    sizes = torch.tensor([SIZES[c] for c in clients.tolist()])
    return info, LocalResult(params, torch.zeros(k), sizes), params.clone()


def _server_std(releases: list[Release], client: int) -> float:
    (rel,) = [r for r in releases if r.observer == "server" and isinstance(r, GaussianRelease)
              and r.client_ids is not None and client in r.client_ids]
    return rel.noise_std


def _public_std(releases: list[Release]) -> float:
    stds = {r.noise_std for r in releases if r.observer == "public" and isinstance(r, GaussianRelease)}
    assert len(stds) == 1, stds
    return stds.pop()


def _measured(diff: torch.Tensor) -> float:
    return float(diff.double().std())


def _check_round(algo: PrivateAlgorithm, clean_aggregate: Any, value: float = 0.0) -> tuple[list[Release], dict]:
    """One round: each upload's noise vs its server release, the broadcast's vs its public release.

    ``clean_aggregate(clean_uploads, uploads)`` is the noise-free aggregate of the round."""
    info, local, clean = _round_inputs(algo, value)
    releases = algo.releases(info, local.num_samples, False)
    global_params = torch.zeros(P)
    uploads = algo.client_step(global_params, local, info)
    clean_up = clean - global_params
    for row, c in enumerate(info.clients.tolist()):
        declared = _server_std(releases, c)
        got = _measured(uploads.params[row] - clean_up[row])
        assert got == pytest.approx(declared, rel=TOL), (c, got, declared)
    out = algo.aggregate(global_params, uploads, info)
    expected = clean_aggregate(clean_up, uploads)
    got = _measured(out.global_params - expected)
    assert got == pytest.approx(_public_std(releases), rel=TOL)
    return releases, out.metrics


def _sample_weighted(clean: torch.Tensor, uploads: Any) -> torch.Tensor:
    n = uploads.num_samples.double()
    return ((n / n.sum()).unsqueeze(1) * clean.double()).sum(0)


# --------------------------------------------------------------------------- UDP (000)


@pytest.mark.parametrize("name", ["udp", "udp-crd", "udp-lei"])
def test_udp_adds_the_noise_it_declares(name: str) -> None:
    algo = _build(name, {"epsilon": 4.0, "clip_norm": 1.0})
    if name == "udp-crd":  # CRD's test-loss rule needs a model; the noise does not
        algo._after_round = lambda old, new, info, uploads: {}  # type: ignore[attr-defined]
    releases, _ = _check_round(algo, _sample_weighted)
    plan = algo.plan(RoundInfo(0, 6, algo.sample(0, 6, SeedSequence(11)), SeedSequence(11)))  # type: ignore[attr-defined]
    assert all(_server_std(releases, c) == plan.noise_stds[c] for c in algo.sample(0, 6, SeedSequence(11)).tolist())
    assert math.isfinite(_public_std(releases))


# --------------------------------------------------------------------------- NbAFL (003)


@pytest.mark.parametrize("sampling", [{"kind": "all"}, {"kind": "fixed", "clients_per_round": 4}])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_nbafl_adds_the_noise_it_declares(sampling: dict[str, Any]) -> None:
    # clip C = 1e3 keeps the constant models (norm 0.5·sqrt(P) = 100) unclipped; L = 1 < T/sqrt(N)
    # gives a downlink noise (Thm 1), and ε = 5 < −T ln(1 − K/N) lets Lemma 4 have a value
    algo = _build("nbafl", {"epsilon": 5.0, "clip_norm": 1e3, "exposures": 1}, sampling=sampling, rounds=10,
                  local={"lr": 0.1})
    releases, metrics = _check_round(algo, _sample_weighted, value=0.5)
    cal = algo.calibration()  # type: ignore[attr-defined]
    assert cal.uplink_noise_std > 0 and cal.downlink_noise_std > 0
    assert metrics["downlink_noise_std"] == cal.downlink_noise_std


# --------------------------------------------------------------------------- MI-DP and PMIDP-FL (002)


def _first_row(clean: torch.Tensor, uploads: Any) -> torch.Tensor:
    del uploads
    return clean[0].double()  # every row is the same model: any weights sum to it


@pytest.mark.parametrize("name", ["midp-server", "midp-client", "pmidp-fl"])
def test_midp_adds_the_noise_it_declares(name: str) -> None:
    # C = 1e3 keeps the constant models (norm 100) unclipped; budgets differ per client
    options = {"epsilons": [2e3, 3e3, 4e3, 5e3, 6e3, 8e3], "clip_norm": 1e3}
    algo = _build(name, options)
    releases, metrics = _check_round(algo, _first_row, value=0.5)
    if name == "midp-server":
        assert metrics["client_noise_std"] == 0 and metrics["server_noise_std"] == _public_std(releases) > 0
    else:
        assert _public_std(releases) == pytest.approx(metrics["aggregate_noise_std"], rel=1e-12)


def test_midp_client_top_up_after_dropouts_is_what_the_arrivals_release_states() -> None:
    algo = _build("midp-client", {"epsilon": 3e3, "clip_norm": 1e3})
    info, local, clean = _round_inputs(algo, 0.5)
    algo.releases(info, local.num_samples, False)
    uploads = algo.client_step(torch.zeros(P), local, info).select(torch.tensor([0, 2]))
    out = algo.aggregate(torch.zeros(P), uploads, info)
    got = algo.releases_for_arrivals(info, uploads.clients, uploads.num_samples, False)
    # the broadcast carries the arrivals' client noise plus the server's top-up
    assert out.metrics["server_noise_std"] > 0
    measured = _measured(out.global_params - clean[0])
    assert measured == pytest.approx(_public_std(got), rel=TOL)


# --------------------------------------------------------------------------- LDP-FL (001)


def test_ldp_fl_randomizes_at_the_epsilon_it_declares() -> None:
    eps = 1.0
    algo = _build("ldp-fl", {"epsilon": eps, "range": "fixed", "center": 0.0, "radius": 1.0})
    info, local, _ = _round_inputs(algo, 1.0)  # every weight at the top of the range, c + r
    releases = algo.releases(info, local.num_samples, False)
    (declared,) = {r.epsilon for r in releases if r.observer == "server"}  # type: ignore[attr-defined]
    uploads = algo.client_step(torch.zeros(P), local, info)
    for row in uploads.params:
        # 001 eq. 2 at x = c + r: the high value with probability e^ε/(e^ε + 1), so the log-odds is ε
        high = float((row > 0).double().mean())
        assert math.log(high / (1 - high)) == pytest.approx(declared, abs=0.05)


def test_ldp_fl_private_ranges_are_noised_at_the_std_they_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch import nn

    from dpfl.algorithms import ldp_fl
    from dpfl.client.layout import ParamLayout

    algo = _build("ldp-fl", {"epsilon": 1.0, "range": "private-minmax", "range_noise_multiplier": 0.7})
    algo.layout = ParamLayout.of(nn.Sequential(nn.Linear(200, 200, bias=False)))  # type: ignore[attr-defined]
    used: list[float] = []
    real = ldp_fl.log_range_reports

    def spy(params: torch.Tensor, sizes: list[int], lo: float, hi: float, std: float, gens: list) -> torch.Tensor:
        used.append(std)
        return real(params, sizes, lo, hi, std, gens)

    monkeypatch.setattr(ldp_fl, "log_range_reports", spy)
    info, local, _ = _round_inputs(algo, 0.01)
    releases = algo.releases(info, local.num_samples, False)
    algo.client_step(torch.zeros(P), local, info)
    gauss = {(r.noise_std, r.sensitivity) for r in releases if isinstance(r, GaussianRelease)}
    assert used and gauss == {(used[0], algo.range_sensitivity())}  # type: ignore[attr-defined]
    assert used[0] == pytest.approx(0.7 * algo.range_sensitivity(), rel=1e-12)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- DP-FedAvg, secure aggregation


@pytest.mark.parametrize("summed", [False, True], ids=["shares-per-row", "shares-summed"])
@pytest.mark.parametrize("participation", ["visible", "hidden"])
def test_dp_fedavg_secure_sum_carries_the_skellam_variance_it_declares(participation: str, summed: bool) -> None:
    """The decoded broadcast minus the noise-free mean has per-coordinate variance μ/(γm)² — the
    Skellam variance of the public release in integer units, decoded — within 2% over P
    coordinates (the rounding adds at most K/4 integer units² per coordinate: 1e-9 of μ here),
    whether each row draws its share (a client, the sequential engine) or the server step draws
    their sum at once (``summed_shares``: the vectorized engine). Each upload is a residue modulo
    2^b, and its share's variance is what the client declares; with summed shares a row carries
    no noise (its residues are the encoded update)."""
    import dataclasses

    from dpfl.privacy.releases import SkellamRelease

    raw = {
        "rounds": 5,
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "privacy": {"delta": 1e-5, "secure_aggregation": True, "participation": participation},
        "sampling": {"kind": "poisson", "sample_rate": 0.6},
        "local": {"lr": 0.5, "batch_size": None},
    }
    cfg = parse_config(raw)
    algo = build_algorithm(cfg.algorithm, build_sampler(cfg.sampling, len(SIZES)),
                           BuildContext(cfg, len(SIZES), torch.tensor(SIZES), P))
    assert isinstance(algo, PrivateAlgorithm)
    info, local, clean = _round_inputs(algo, 0.001)  # every row of norm 0.2 <= S = 0.5
    info = dataclasses.replace(info, summed_shares=summed)
    plan = algo.round_plan(info)
    releases = algo.releases(info, local.num_samples, True)
    (public,) = [r for r in releases if r.observer == "public"]
    assert isinstance(public, SkellamRelease) and public.amplifiable
    uploads = algo.client_step(torch.zeros(P), local, info)
    encoded = algo.pipeline(plan).encode(
        clean.clone(), [info.seeds.generator(0, int(c), "rounding") for c in info.clients.tolist()], None)
    # summed shares: the rows are the encoded integers (no share; reduced modulo 2^b in the sum);
    # else each row is its client's upload, residues modulo 2^b of the encoding plus a share
    assert uploads.params.dtype == torch.int64
    if summed:
        assert torch.equal(uploads.params, encoded)
    else:
        assert int(uploads.params.min()) >= 0 and int(uploads.params.max()) < 2 ** plan.secure.bits
        assert not torch.equal(uploads.params, algo.pipeline(plan).to_residues(encoded))
    assert float(uploads.declared["noise_variance"][0]) == pytest.approx(plan.share_variance)
    out = algo.aggregate(torch.zeros(P), uploads, info)
    expected = clean.double().sum(0) / plan.denominator
    got = float((out.global_params.double() - expected).var())
    want = public.variance / (plan.secure.scale * plan.denominator) ** 2
    assert got == pytest.approx(want, rel=TOL)


# --------------------------------------------------------------------------- DP-FTRL / correlated noise


@pytest.mark.parametrize("mechanism", ["blt", "banded", "tree", "independent"])
def test_dp_ftrl_adds_its_strategys_noise_round_after_round(mechanism: str) -> None:
    """Over n = 6 rounds with zero updates (every client at its turn: b = 2), each round's model
    movement is η·σC·w_t/m: its std over the P coordinates equals σC·sqrt((W·Wᵀ)_tt)/m (2%), and its
    correlation with the previous round's movement is the strategy's (W·Wᵀ)_{t,t−1} normalized
    (within 0.05: 8 standard errors of a correlation over P pairs, 1/sqrt(P) = 0.005)."""
    import numpy as np

    algo = _build("dp-ftrl", {"mechanism": mechanism, "noise_multiplier": 2.0, "clip_norm": 0.5},
                  sampling={"kind": "min_separation", "min_separation": 2}, rounds=6)
    seeds = SeedSequence(11)
    w = algo.strategy.noise_matrix()
    cov = w @ w.T
    params = torch.zeros(P)
    moves = []
    m = algo.calibration().denominator
    for t in range(6):
        clients = algo.sample(t, len(SIZES), seeds)
        info = RoundInfo(t, len(SIZES), clients, seeds)
        info = info.with_plan(algo.plan(info))
        k = int(clients.numel())
        local = LocalResult(torch.zeros(k, P), torch.zeros(k), torch.tensor([SIZES[c] for c in clients.tolist()]))
        out = algo.aggregate(params, algo.client_step(params, local, info), info)
        moves.append((out.global_params - params).double())
        params = out.global_params
        want = 2.0 * 0.5 * math.sqrt(cov[t, t]) / m
        assert _measured(moves[-1]) == pytest.approx(want, rel=TOL), (t, _measured(moves[-1]), want)
        if t:
            corr = float(np.corrcoef(moves[-1].numpy(), moves[-2].numpy())[0, 1])
            assert corr == pytest.approx(cov[t, t - 1] / math.sqrt(cov[t, t] * cov[t - 1, t - 1]), abs=0.05)
