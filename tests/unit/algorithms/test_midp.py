"""MI-DP (002 §IV) and PMIDP-FL (002 §V): limiting cases, calibration, Theorem 2, per-client ledger."""

from __future__ import annotations

import math
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
import torch

from dpfl.algorithms.midp import MidpOptions, MidpScheme, PmidpFl, PmidpOptions, client_budgets
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.calibration import (
    midp_client_noise_std,
    midp_server_noise_std,
    pmidp_aggregation_weights,
    pmidp_client_noise_std,
)
from dpfl.rng import SeedSequence
from dpfl.sampling import AllClients

DELTA = 1e-5


def _scheme(side: str, dim: int, n: int, **opts: Any) -> MidpScheme:
    return MidpScheme(side, MidpOptions(**opts), AllClients(), n, dim, seed=3, delta=DELTA)  # type: ignore[arg-type]


def _pmidp(dim: int, n: int, **opts: Any) -> PmidpFl:
    return PmidpFl(PmidpOptions(**opts), AllClients(), n, dim, seed=3, delta=DELTA)


def _round(params: torch.Tensor, t: int = 0, sizes: list[int] | None = None) -> tuple[LocalResult, RoundInfo]:
    k = params.shape[0]
    n = torch.tensor(sizes if sizes is not None else [10] * k)
    local = LocalResult(params.clone(), torch.zeros(k), n)
    return local, RoundInfo(t, k, torch.arange(k), SeedSequence(11))


# ---------------------------------------------------------------- limiting cases


@pytest.mark.parametrize("side", ["server", "client"])
def test_no_noise_no_clip_is_fedavg(side: str) -> None:
    gen = torch.Generator().manual_seed(0)
    params = torch.randn(5, 30, generator=gen)
    sizes = [1, 2, 3, 4, 10]
    algo = _scheme(side, 30, 5, epsilon=1e12, clip_norm=1e9)
    local, info = _round(params, sizes=sizes)
    out = algo.server_step(torch.zeros(30), local, info)
    p = torch.tensor(sizes, dtype=torch.float32) / sum(sizes)
    torch.testing.assert_close(out.global_params, p @ params, atol=1e-6, rtol=0)


def test_no_noise_is_the_closed_form_clipped_mean() -> None:
    params = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 2.0]])
    for side in ("server", "client"):
        algo = _scheme(side, 2, 3, epsilon=1e12, clip_norm=1.0, weighting="uniform")
        local, info = _round(params)
        out = algo.server_step(torch.zeros(2), local, info)
        expected = torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 1.0]]).mean(0)
        torch.testing.assert_close(out.global_params, expected, atol=1e-6, rtol=0)
    pm = _pmidp(2, 3, epsilon=50.0, clip_norm=1.0)  # σ ≈ 1e-11: PMIDP needs σ > 0
    local, info = _round(params)
    out = pm.server_step(torch.zeros(2), local, info)
    torch.testing.assert_close(out.global_params, expected, atol=1e-6, rtol=0)


def test_pmidp_with_equal_budgets_and_fixed_clip_is_the_client_scheme() -> None:
    gen = torch.Generator().manual_seed(1)
    params = torch.randn(4, 50, generator=gen)
    basic = _scheme("client", 50, 4, epsilon=7.0, clip_norm=2.0, weighting="uniform")
    pm = _pmidp(50, 4, epsilon=7.0, clip_norm=2.0)
    a = basic.server_step(torch.zeros(50), *_round(params)[:1], _round(params)[1]).global_params
    b = pm.server_step(torch.zeros(50), *_round(params)[:1], _round(params)[1]).global_params
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)  # same noise streams, same σ, p = 1/N


# ---------------------------------------------------------------- calibration


def test_noise_std_comes_from_calibration_and_is_what_is_added() -> None:
    d, k, c, eps = 100_000, 8, 3.0, 10.0
    zeros = torch.zeros(k, d)
    srv = _scheme("server", d, k, epsilon=eps, clip_norm=c)
    cli = _scheme("client", d, k, epsilon=eps, clip_norm=c)
    out_s = srv.server_step(torch.zeros(d), *_round(zeros)[:1], _round(zeros)[1])
    out_c = cli.server_step(torch.zeros(d), *_round(zeros)[:1], _round(zeros)[1])
    sigma_s = midp_server_noise_std(eps, c, 1 / k, d)
    sigma_c = midp_client_noise_std(eps, c, [1 / k] * k, d)
    assert out_s.metrics["server_noise_std"] == sigma_s and out_s.metrics["client_noise_std"] == 0
    assert out_c.metrics["client_noise_std"] == sigma_c and out_c.metrics["server_noise_std"] == 0
    # empirical std of the aggregate noise: relative SE 1/sqrt(2d) = 0.22%; tolerance 5 SE
    tol = 5 / math.sqrt(2 * d)
    assert float(out_s.global_params.std()) == pytest.approx(sigma_s, rel=tol)
    assert float(out_c.global_params.std()) == pytest.approx(sigma_c / math.sqrt(k), rel=tol)


def test_theorem2_client_and_server_side_give_the_same_aggregate_noise() -> None:
    """002 Theorem 2 (eq. 4.16): same ε → same aggregate noise std, hence the same utility.

    Aggregate noise measured over d = 200,000 coordinates for 3 budgets and unequal weights:
    each std estimate has relative SE 1/sqrt(2d) ≈ 0.16%; the two agree within 1% (≈ 4.5 SE of
    their difference), and each matches σ_s within 5 SE. Fixed seeds: deterministic.
    """
    d, k, c = 200_000, 10, 10.0
    sizes = [600 + 40 * i for i in range(k)]
    for eps in (5.0, 10.0, 20.0):
        zeros = torch.zeros(k, d)
        srv = _scheme("server", d, k, epsilon=eps, clip_norm=c)
        cli = _scheme("client", d, k, epsilon=eps, clip_norm=c)
        s = srv.server_step(torch.zeros(d), *_round(zeros, sizes=sizes)[:1], _round(zeros, sizes=sizes)[1])
        cl = cli.server_step(torch.zeros(d), *_round(zeros, sizes=sizes)[:1], _round(zeros, sizes=sizes)[1])
        std_s, std_c = float(s.global_params.std()), float(cl.global_params.std())
        assert std_c / std_s == pytest.approx(1.0, abs=0.01)
        assert s.metrics["aggregate_noise_std"] == pytest.approx(cl.metrics["aggregate_noise_std"], rel=1e-9)
        assert std_s == pytest.approx(s.metrics["aggregate_noise_std"], rel=5 / math.sqrt(2 * d))


def test_personalized_budgets_basic_scheme_serves_the_smallest_budget() -> None:
    d, k = 1000, 4
    algo = _scheme("client", d, k, epsilons=[3.0, 9.0, 1.5, 20.0], clip_norm=1.0)
    zeros = torch.zeros(k, d)
    out = algo.server_step(torch.zeros(d), *_round(zeros)[:1], _round(zeros)[1])
    assert out.metrics["client_noise_std"] == midp_client_noise_std(1.5, 1.0, [0.25] * 4, d)


def test_pmidp_sigma_and_inverse_noise_weights() -> None:
    d, k = 5000, 6
    eps = [1.0, 2.0, 5.0, 10.0, 20.0, 40.0]
    pm = _pmidp(d, k, epsilons=eps, clip_norm=4.0)
    gen = torch.Generator().manual_seed(2)
    out = pm.server_step(torch.zeros(d), *_round(torch.randn(k, d, generator=gen))[:1],
                         _round(torch.zeros(k, d))[1])
    stds = np.array(out.metrics["noise_stds"])
    expected = [pmidp_client_noise_std(e, 4.0, d, k) for e in eps]
    np.testing.assert_allclose(stds, expected, rtol=1e-7)
    w = np.array(out.metrics["weights"])
    np.testing.assert_allclose(w * stds, np.full(k, (w * stds)[0]), rtol=1e-12)  # p_k ∝ 1/σ_k
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(w) > 0)  # larger budget → less noise → more weight


def test_server_weights_use_only_the_declared_stds() -> None:
    uploads = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mean, w = PmidpFl.weighted_by_declared_noise(uploads, [1.0, 3.0])
    np.testing.assert_allclose(w, pmidp_aggregation_weights([1.0, 3.0]))
    torch.testing.assert_close(mean, torch.tensor([0.75, 0.25]))


def test_adaptive_clipping_follows_eq_5_18_and_resumes_exactly() -> None:
    d, k, eta = 20, 3, 0.3
    params = torch.zeros(k, d)
    params[:, 0] = torch.tensor([2.0, 10.0, 5.0])  # norms 2, 10, 5
    pm = _pmidp(d, k, epsilon=500.0, clip_norm=4.0, clip_lr=eta)
    pm.server_step(torch.zeros(d), *_round(params)[:1], _round(params)[1])
    np.testing.assert_allclose(pm.clip_norms, [4 - eta * (4 - 2), 4 - eta * (4 - 10), 4 - eta * (4 - 5)])
    other = _pmidp(d, k, epsilon=500.0, clip_norm=4.0, clip_lr=eta)
    other.load_state_dict(pm.state_dict())
    np.testing.assert_array_equal(other.clip_norms, pm.clip_norms)
    assert "norms" in " ".join(pm.not_covered())


def test_drawn_budgets_are_seeded_and_floored() -> None:
    opts = PmidpOptions(epsilon_mean=5.0, epsilon_std=15.0, clip_norm=1.0)
    a, b = client_budgets(opts, 500, 9), client_budgets(opts, 500, 9)
    np.testing.assert_array_equal(a, b)
    assert a.min() == 1.0 and (a == 1.0).sum() > 100  # P(N(5, 15²) < 1) ≈ 0.39
    assert not np.array_equal(a, client_budgets(opts, 500, 10))
    assert abs(np.median(a) - 5.0) < 2.5  # the floor does not move the median of N(5, 15²)
    with pytest.raises(ConfigError, match="one budget per client"):
        client_budgets(PmidpOptions(epsilons=[1.0, 2.0], clip_norm=1.0), 3, 0)


def test_budget_sources_are_exclusive() -> None:
    with pytest.raises(ValueError, match="exactly one budget source"):
        MidpOptions(epsilon=1.0, epsilon_mean=2.0, epsilon_std=1.0, clip_norm=1.0)
    with pytest.raises(ValueError, match="exactly one budget source"):
        MidpOptions(clip_norm=1.0)


# ---------------------------------------------------------------- claimed and certified


def test_claimed_epsilon_inverts_the_calibration() -> None:
    d, k = 200_000, 100
    for side in ("server", "client"):
        algo = _scheme(side, d, k, epsilon=5.0, clip_norm=10.0)
        algo.releases(RoundInfo(0, k, torch.arange(k), SeedSequence(0)), torch.full((k,), 600), False)
        assert algo.claimed_epsilon(1) == pytest.approx(5.0, rel=1e-9)
        assert algo.claimed_epsilon(50) == algo.claimed_epsilon(1)  # per round, never composed
    pm = _pmidp(d, 4, epsilons=[1.0, 5.0, 10.0, 20.0], clip_norm=10.0)
    pm.releases(RoundInfo(0, 4, torch.arange(4), SeedSequence(0)), torch.full((4,), 600), False)
    claimed = pm.claimed_epsilon(1)
    assert isinstance(claimed, dict)
    np.testing.assert_allclose([claimed[i] for i in range(4)], [1.0, 5.0, 10.0, 20.0], rtol=1e-9)


def _ledger(n: int) -> PrivacyLedger:
    return PrivacyLedger(num_clients=n, sampler=AllClients(), delta=DELTA, relation="replace_one",
                         privacy_unit="client", pld_every=0)


def _rdp_epsilon(z: float, rounds: int) -> float:
    acc = dpa.rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    acc.compose(dpa.GaussianDpEvent(z), rounds)
    return float(acc.get_epsilon(DELTA))


def test_per_client_ledger_gives_each_client_its_own_certified_epsilon() -> None:
    d, k, rounds, c = 200_000, 4, 3, 10.0
    eps = [2.0, 5.0, 10.0, 40.0]
    pm = _pmidp(d, k, epsilons=eps, clip_norm=c)
    ledger = _ledger(k)
    for t in range(rounds):
        info = RoundInfo(t, k, torch.arange(k), SeedSequence(0))
        rel = pm.releases(info, torch.full((k,), 600), False)
        ledger.record_round(t, rel, sampling=AllClients(), participants=range(k),
                            claimed_epsilon=pm.claimed_epsilon(t + 1))
    server = ledger.client_epsilons("server")
    public = ledger.client_epsilons("public")
    stds = [pmidp_client_noise_std(e, c, d, k) for e in eps]
    for i in range(k):
        # the server sees client i's upload: noise σ_i against sensitivity 2C, every round
        assert server[i] == pytest.approx(_rdp_epsilon(stds[i] / (2 * c), rounds), rel=1e-6)
    assert sorted(server.values()) == [server[i] for i in range(k)]  # bigger ε_k → bigger certified ε
    assert len(set(np.round(list(public.values()), 6))) == k
    assert all(public[i] < server[i] for i in range(k))


def test_server_side_scheme_is_not_private_against_the_server() -> None:
    d, k = 1000, 5
    algo = _scheme("server", d, k, epsilon=5.0, clip_norm=1.0)
    ledger = _ledger(k)
    rel = algo.releases(RoundInfo(0, k, torch.arange(k), SeedSequence(0)), torch.full((k,), 10), False)
    ledger.record_round(0, rel, sampling=AllClients(), participants=range(k))
    assert math.isinf(ledger.certify("server", method="rdp").epsilon)
    sigma_s = midp_server_noise_std(5.0, 1.0, 1 / k, d)
    assert ledger.certify("public", method="rdp").epsilon == pytest.approx(
        _rdp_epsilon(sigma_s / (2 * 1.0 / k), 1), rel=1e-6)
    cli = _scheme("client", d, k, epsilon=5.0, clip_norm=1.0)
    ledger2 = _ledger(k)
    rel = cli.releases(RoundInfo(0, k, torch.arange(k), SeedSequence(0)), torch.full((k,), 10), False)
    ledger2.record_round(0, rel, sampling=AllClients(), participants=range(k))
    # Theorem 2 for the public: equal aggregate noise and sensitivity → equal certified ε
    assert ledger2.certify("public", method="rdp").epsilon == pytest.approx(
        ledger.certify("public", method="rdp").epsilon, rel=1e-6)


@pytest.mark.parametrize("side", ["client", "server"])
def test_ledger_agrees_with_dpfl_account_midp(side: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The runs' per-observer certified ε equals `dpfl account midp` for the same settings."""
    import json

    from dpfl.cli import main

    d, k, rounds = 1000, 10, 3
    assert main(["account", "midp", "--epsilon", "5", "--mode", side, "--clients", str(k), "--clip", "10",
                 "--dim", str(d), "--rounds", str(rounds), "--delta", str(DELTA), "--json"]) == 0
    account = json.loads(capsys.readouterr().out)
    algo = _scheme(side, d, k, epsilon=5.0, clip_norm=10.0)
    ledger = _ledger(k)
    for t in range(rounds):
        rel = algo.releases(RoundInfo(t, k, torch.arange(k), SeedSequence(0)), torch.full((k,), 600), False)
        ledger.record_round(t, rel, sampling=AllClients(), participants=range(k))
    assert algo.claimed_epsilon(rounds) == pytest.approx(account["epsilon_claimed"], rel=1e-9)
    for obs in ("server", "public"):
        ours = ledger.certify(obs).epsilon  # type: ignore[arg-type]
        theirs = float(account["observers"][obs]["epsilon"])
        assert ours == pytest.approx(theirs, rel=1e-6) or (math.isinf(ours) and math.isinf(theirs))


@pytest.mark.parametrize("clip_lr", [0.0, 0.1])
def test_adaptive_thresholds_leak_the_norm_so_the_certificate_is_infinite(clip_lr: float) -> None:
    """With η_c > 0 each upload declares C_{k,t+1} = C − η_c (C − ‖w_k‖) (eq. 5.18): the server
    solves it for the unclipped norm exactly, so no finite ε holds against it (nor against the
    public, whose next broadcasts carry noise scaled by it). With η_c = 0 the certificate is
    the Gaussian's and finite."""
    n, dim = 4, 6
    algo = _pmidp(dim, n, epsilon=5.0, clip_norm=1.0, clip_lr=clip_lr)
    local, info = _round(torch.randn(n, dim, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    up = algo.client_step(torch.zeros(dim), local, info)
    norms = local.params.norm(dim=1).double()
    if clip_lr:
        c, nxt = up.declared["clip_norm"], up.declared["next_clip_norm"]
        recovered = c - (c - nxt) / clip_lr  # what the server computes from two declared numbers
        assert torch.allclose(recovered, norms, rtol=1e-9)
    ledger = PrivacyLedger(num_clients=n, sampler=AllClients(), delta=1e-5, relation="replace_one",
                           privacy_unit="client", pld_every=0)
    ledger.record_round(0, algo.releases(info, local.num_samples, False), sampling=AllClients(),
                        participants=range(n))
    for obs in ("server", "public"):
        eps = ledger.certify(obs).epsilon
        assert math.isinf(eps) if clip_lr else math.isfinite(eps)
    assert any("infinite" in line for line in algo.not_covered()) == bool(clip_lr)
