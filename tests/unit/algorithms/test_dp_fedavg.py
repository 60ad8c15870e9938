"""DP-FedAvg options: calibration to a claimed ε, BLUR/LUS wiring, adaptive clipping and its ledger."""

from __future__ import annotations

import logging
import math

import dp_accounting as dpa
import pytest
import torch

from dpfl.algorithms.dp_fedavg import AdaptiveClipOptions, DpFedAvg, DpFedAvgOptions
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.client.lus import sparsify_updates
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.claimed import dpfedavg_claimed_epsilon
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.calibration import combined_noise_multiplier, update_noise_multiplier
from dpfl.rng import SeedSequence
from dpfl.sampling.clients import AllClients, PoissonSampler

logging.getLogger("absl").setLevel(logging.ERROR)


def _algo(n: int = 20, q: float = 0.5, **opts: object) -> DpFedAvg:
    raw = {"clip_norm": 1.0, "noise_multiplier": 1.0, **opts}
    sampler = PoissonSampler(q) if q < 1 else AllClients()
    return DpFedAvg(DpFedAvgOptions(**raw), sampler, n, 1e-3, rounds=10)


def test_exactly_one_noise_setting() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        DpFedAvgOptions(clip_norm=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        DpFedAvgOptions(clip_norm=1.0, noise_multiplier=1.0, target_epsilon=2.0)


def test_target_epsilon_calibrates_the_papers_claim() -> None:
    algo = _algo(100, 0.04, noise_multiplier=None, target_epsilon=4.0)
    claimed = dpfedavg_claimed_epsilon(algo.noise_multiplier, 0.04, 10, 1e-3)
    assert claimed <= 4.0
    assert claimed == pytest.approx(4.0, rel=1e-3)
    assert algo.claimed_epsilon(10) == pytest.approx(claimed)


def test_noise_split_of_andrew_et_al() -> None:
    zu = update_noise_multiplier(1.2, 2.0)
    assert zu > 1.2
    assert combined_noise_multiplier(zu, 2 * 2.0) == pytest.approx(1.2, rel=1e-12)
    with pytest.raises(ConfigError, match="2·count_noise_std"):
        update_noise_multiplier(1.0, 0.5)


def test_adaptive_clipping_public_release_is_one_gaussian_of_the_total_multiplier() -> None:
    n, q, rounds = 200, 0.1, 5
    ac = AdaptiveClipOptions(count_noise_std=3.0)
    algo = _algo(n, q, noise_multiplier=0.9, adaptive_clip=ac)
    ledger = PrivacyLedger(num_clients=n, sampler=algo.sampler, delta=1e-3, relation="add_remove",
                           privacy_unit="client", pld_every=0)
    seeds = SeedSequence(0)
    for t in range(rounds):
        clients = algo.sample(t, n, seeds)
        info = RoundInfo(t, n, clients, seeds)
        rels = algo.releases(info, torch.ones(clients.numel()), False)
        public = [r for r in rels if r.observer == "public"]
        assert len(public) == 1 and public[0].client_ids is None
        assert public[0].noise_std / public[0].sensitivity == pytest.approx(0.9, rel=1e-9)
        server = [r for r in rels if r.observer == "server"]
        assert {r.sensitivity for r in server} == {algo.clip_norm, 0.5}  # update and count
        ledger.record_round(t, rels, sampling=algo.sampler, participants=clients.tolist())
    # independent check: the public ε is that of T Poisson-sampled Gaussians of multiplier 0.9
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(0.9)), rounds)
    assert ledger.certify("public", method="rdp").epsilon == pytest.approx(acc.get_epsilon(1e-3), rel=1e-6)


def _local(global_params: torch.Tensor, updates: torch.Tensor, grads: torch.Tensor | None = None) -> LocalResult:
    k = updates.shape[0]
    return LocalResult(global_params + updates, torch.zeros(k), torch.ones(k, dtype=torch.long), grads)


def test_adaptive_clip_follows_the_median_without_noise() -> None:
    k, p = 41, 8
    algo = _algo(k, 1.0, noise_multiplier=0.0, clip_norm=0.05,
                 adaptive_clip=AdaptiveClipOptions(target_unclipped_quantile=0.5, learning_rate=0.2))
    seeds = SeedSequence(1)
    direction = torch.nn.functional.normalize(torch.ones(k, p), dim=1)
    norms = torch.linspace(0.5, 1.5, k)  # median 1.0
    g = torch.zeros(p)
    for t in range(150):
        info = RoundInfo(t, k, torch.arange(k), seeds)
        algo.server_step(g, _local(g, direction * norms[:, None]), info)
    # no noise: C moves by exp(±η·(b̃−γ)) with b̃ a multiple of 1/41 → it settles within a step of the median
    assert algo.clip_norm == pytest.approx(1.0, abs=0.05)
    assert algo.state_dict() == {"clip_norm": algo.clip_norm}


def test_noise_free_limit_is_the_clipped_sparsified_mean() -> None:
    k, sizes = 6, [5, 7]
    algo = _algo(k, 1.0, noise_multiplier=0.0, clip_norm=0.5, lus_sparsity=0.5)
    algo._layer_sizes = sizes  # set by configure_local in a run
    gen = torch.Generator().manual_seed(0)
    upd, grads = torch.randn(k, 12, generator=gen), torch.randn(k, 12, generator=gen)
    g = torch.randn(12, generator=gen)
    out = algo.server_step(g, _local(g, upd.clone(), grads), RoundInfo(0, k, torch.arange(k), SeedSequence(0)))
    sparse = sparsify_updates(upd, grads, sizes, 0.5)
    expected = g + (sparse * torch.clamp(0.5 / sparse.norm(dim=1, keepdim=True), max=1.0)).mean(0)
    assert torch.allclose(out.global_params, expected, atol=1e-6)
    assert out.metrics["update_norms"] == pytest.approx(sparse.norm(dim=1).tolist(), abs=1e-5)


def test_lus_without_final_gradients_is_an_error() -> None:
    algo = _algo(4, 1.0, lus_sparsity=0.5)
    g = torch.zeros(3)
    with pytest.raises(ConfigError, match="final-weights gradient"):
        algo.server_step(g, _local(g, torch.ones(4, 3)), RoundInfo(0, 4, torch.arange(4), SeedSequence(0)))


def test_noise_has_the_declared_std() -> None:
    # local variant: per-client std S·σ/sqrt(K); the mean's std is S·σ/K (flake budget: 5 SE)
    k, p = 16, 20000
    algo = _algo(k, 1.0, noise_multiplier=2.0, clip_norm=1.0)
    g = torch.zeros(p)
    out = algo.server_step(g, _local(g, torch.zeros(k, p)), RoundInfo(0, k, torch.arange(k), SeedSequence(3)))
    std = float(out.global_params.std())
    target = 1.0 * 2.0 / k
    assert abs(std - target) < 5 * target / math.sqrt(2 * p)


# ---------------------------------------------------------------- fixed denominator (McMahan et al. 2018)


def test_the_cohort_sum_is_divided_by_the_expected_cohort_size() -> None:
    """Poisson rate q = 0.25 of N = 20: m = qN = 5, whatever |P_t| is (here 3). The realized-size
    mean (004 Alg. 1 line 7) changes its denominator with the cohort, which the certificate's
    Gaussian sum query does not price."""
    algo = _algo(20, 0.25, noise_multiplier=0.0, clip_norm=10.0)
    g = torch.zeros(4)
    upd = torch.tensor([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 0]])
    out = algo.server_step(g, _local(g, upd.clone()), RoundInfo(0, 20, torch.tensor([2, 7, 11]), SeedSequence(0)))
    assert torch.allclose(out.global_params, upd.sum(0) / 5.0)


@pytest.mark.parametrize("variant", ["local", "central"])
def test_an_empty_round_releases_the_sum_query_noise_and_is_charged(variant: str) -> None:
    """|P_t| = 0 under Poisson sampling: the broadcast is w + N(0, (Sσ)²)/m, drawn by the server
    (std within 2% over 10^5 coordinates: the std of a sample std is ≈ 0.22% here), and the
    round's release is the sampled Gaussian of multiplier σ, like every other round."""
    n, q, z, s, p = 40, 0.1, 1.5, 0.8, 100_000
    algo = _algo(n, q, noise_multiplier=z, clip_norm=s, variant=variant)
    g = torch.zeros(p)
    info = RoundInfo(0, n, torch.zeros(0, dtype=torch.long), SeedSequence(5))
    from dpfl.algorithms.base import Uploads

    out = algo.aggregate(g, Uploads.empty(p), info)
    assert abs(float(out.global_params.std()) / (s * z / (q * n)) - 1) < 0.02
    assert out.metrics["arrived"] == 0
    (pub,) = algo.releases(info, torch.zeros(0, dtype=torch.long), False)
    assert pub.observer == "public" and pub.client_ids is None and pub.cohort_bound
    assert pub.noise_std / pub.sensitivity == pytest.approx(z, rel=1e-12)
    ledger = PrivacyLedger(num_clients=n, sampler=algo.sampler, delta=1e-3, relation="add_remove",
                           privacy_unit="client", pld_every=0)
    ledger.record_round(0, [pub], sampling=algo.sampler, participants=[])
    direct = dpa.rdp.RdpAccountant().compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))).get_epsilon(1e-3)
    assert ledger.certify("public", method="rdp").epsilon == pytest.approx(direct, rel=1e-9)
