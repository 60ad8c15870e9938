"""LDP-FL's range agreement (001 §3.3): ``client-minmax`` certified as ε = ∞, ``private-minmax``
(noisy log2 max|w| reports, :mod:`dpfl.privacy.mechanisms.log_range`) accounted in the ledger."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dp_accounting as dpa
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from torch import nn

from dpfl.algorithms.ldp_fl import LdpFl, LdpFlOptions, ldp_fl_privacy
from dpfl.algorithms.options import parse_options
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.client.layout import ParamLayout
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms import (
    agree_log_ranges,
    layer_log_max_abs,
    log_range_reports,
    log_range_sensitivity,
)
from dpfl.rng import SeedSequence
from dpfl.rounds import build_experiment, run_experiment
from dpfl.sampling import AllClients
from dpfl.store import RunStore

DELTA = 1e-5


def _algo(p: int, layout: ParamLayout | None = None, **options: Any) -> LdpFl:
    return LdpFl(parse_options(LdpFlOptions, options, "ldp-fl"), AllClients(), p, DELTA, layout)


def _layout() -> ParamLayout:
    return ParamLayout.of(nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1)))  # 6 + 2 + 2 + 1 = 11


# ---------------------------------------------------------------- the mechanism


def test_range_report_noise_has_the_stated_std_and_zero_mean() -> None:
    # 500 clients × 200 layers = 10^5 draws; true values are strictly inside the clip range, so
    # report - clipped value is the noise alone. Tolerances: the sample std of 10^5 normals has
    # relative standard error 1/sqrt(2·10^5) = 0.22%, so 2% is ~9 standard errors; the mean is
    # checked at 4 standard errors (σ/sqrt(10^5)).
    k, layers, size = 500, 200, 3
    gen = torch.Generator().manual_seed(11)
    x = (0.01 + torch.rand(k, layers * size, generator=gen, dtype=torch.float64)) * (
        torch.randint(0, 2, (k, layers * size), generator=gen) * 2 - 1)
    sizes = [size] * layers
    r_min, r_max, z = 1e-4, 10.0, 0.7
    sigma = z * log_range_sensitivity(r_min, r_max, layers)
    gens = [torch.Generator().manual_seed(1000 + i) for i in range(k)]
    reports = log_range_reports(x, sizes, r_min, r_max, sigma, gens)
    clean = layer_log_max_abs(x, sizes, r_min, r_max)
    noise = (reports - clean).reshape(-1)
    assert noise.numel() == 100_000
    std, mean = float(noise.std()), float(noise.mean())
    assert abs(std / sigma - 1.0) < 0.02, (std, sigma)
    assert abs(mean) < 4.0 * sigma / math.sqrt(noise.numel()), (mean, sigma)
    # the clean part is log2 of the largest finite |w| per layer, within the clip range
    expect = torch.log2(x.abs().reshape(k, layers, size).amax(dim=2))
    torch.testing.assert_close(clean, expect, rtol=0, atol=1e-12)
    # Δ = log2(r_max/r_min)·sqrt(L) (every coordinate moves at most the clip width)
    assert log_range_sensitivity(r_min, r_max, layers) == pytest.approx(math.log2(1e5) * math.sqrt(200), rel=1e-12)


def test_non_finite_and_zero_layers_report_the_floor() -> None:
    x = torch.tensor([[float("nan"), float("inf"), 0.5, 0.0, 0.0, 1e9]])
    v = layer_log_max_abs(x, [3, 2, 1], 1e-4, 10.0)
    assert v.tolist() == [[-1.0, math.log2(1e-4), math.log2(10.0)]]  # 0.5; none finite non-zero; clipped


def test_agreed_radius_is_clamped_with_huge_noise_and_exact_with_tiny_noise() -> None:
    layout = _layout()
    gen = torch.Generator().manual_seed(3)
    local = 0.3 * torch.randn(5, 11, generator=gen)
    info = RoundInfo(0, 5, torch.arange(5), SeedSequence(4))
    # tiny noise: r_l = s · 2^(mean_k log2 max|w_kl|) = s · (geometric mean of the max |w|)
    tiny = _algo(11, layout, epsilon=1.0, range="private-minmax", range_noise_multiplier=1e-12, range_scale=1.5)
    _, r, radii = tiny.private_ranges(local, info)
    expect = []
    for off, size in zip(layout.offsets, layout.sizes(), strict=True):
        logs = [math.log2(max(abs(float(v)) for v in local[k, off : off + size])) for k in range(5)]
        expect.append(1.5 * 2.0 ** (sum(logs) / 5))
    assert radii == pytest.approx(expect, rel=1e-6)
    assert r.tolist() == pytest.approx([expect[0]] * 6 + [expect[1]] * 2 + [expect[2]] * 2 + [expect[3]], rel=1e-6)
    # huge noise: every layer's radius is pushed to a clamp end (never outside [min, max])
    huge = _algo(11, layout, epsilon=1.0, range="private-minmax", range_noise_multiplier=1e6,
                 min_radius=1e-3, max_radius=2.0)
    for seed in range(5):
        _, r, radii = huge.private_ranges(local, RoundInfo(0, 5, torch.arange(5), SeedSequence(seed)))
        assert all(x in (1e-3, 2.0) for x in radii), radii
        assert float(r.min()) >= 1e-3 and float(r.max()) <= 2.0
    # the agreement itself: clamped mean in log2 space
    reports = torch.tensor([[-3.0, 50.0], [-5.0, 50.0]], dtype=torch.float64)
    assert agree_log_ranges(reports, 2.0, 1e-4, 10.0).tolist() == [2.0 * 2.0**-4, 10.0]


def test_private_minmax_client_step_uses_the_agreed_radii_and_releases_its_cost() -> None:
    layout = _layout()
    algo = _algo(11, layout, epsilon=1.0, range="private-minmax", range_noise_multiplier=2.0)
    assert algo.splits_rounds is False
    local = 0.2 * torch.randn(4, 11, generator=torch.Generator().manual_seed(0))
    info = RoundInfo(0, 4, torch.arange(4), SeedSequence(9))
    out = algo.server_step(torch.zeros(11), LocalResult(local, torch.zeros(4), torch.ones(4, dtype=torch.long)), info)
    _, _, radii = algo.private_ranges(local, info)  # same streams: the same agreement
    assert out.metrics["range_radius"] == [round(x, 8) for x in radii]
    delta_l2 = math.log2(10.0 / 1e-4) * math.sqrt(4)  # defaults: min_radius 1e-4, max_radius 10, L = 4
    assert out.metrics["range_sensitivity"] == pytest.approx(delta_l2, rel=1e-12)
    assert out.metrics["range_noise_std"] == pytest.approx(2.0 * delta_l2, rel=1e-12)
    rel = algo.releases(RoundInfo(0, 4, torch.tensor([0, 2]), SeedSequence(9)), torch.ones(2), False)
    gauss = sorted((x.observer, x.noise_std, x.sensitivity, x.client_ids) for x in rel if x.kind == "gaussian")
    assert [(o, c) for o, _, _, c in gauss] == [("public", (0, 2)), ("server", (0, 2))]
    for _, std, sens, _ in gauss:
        assert std == pytest.approx(2.0 * delta_l2, rel=1e-12) and sens == pytest.approx(delta_l2, rel=1e-12)
    with pytest.raises(ConfigError, match="private-minmax.*whole cohort"):
        algo.client_step(torch.zeros(11), LocalResult(local[:1], torch.zeros(1), torch.ones(1, dtype=torch.long)),
                         RoundInfo(1, 4, torch.tensor([0]), SeedSequence(9), cohort_size=4))


def test_bad_range_options_are_refused_naming_the_value() -> None:
    with pytest.raises(ConfigError, match="needs `range_noise_multiplier`"):
        _algo(11, _layout(), epsilon=1.0, range="private-minmax")
    with pytest.raises(ConfigError, match=r"`max_radius` \(0\.001\) must be larger than `min_radius` \(0\.01\)"):
        _algo(11, _layout(), epsilon=1.0, range="private-minmax", range_noise_multiplier=1.0,
              min_radius=0.01, max_radius=0.001)
    with pytest.raises(ConfigError, match=r"`max_radius` \(0\.0001\) must be larger than `min_radius` \(0\.0001\)"):
        _algo(11, _layout(), epsilon=1.0, range="private-minmax", range_noise_multiplier=1.0, max_radius=1e-4)
    with pytest.raises(ConfigError, match="`range_noise_multiplier` applies to `range: private-minmax` only"):
        _algo(11, _layout(), epsilon=1.0, range="global-model", range_noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="`max_radius` applies to `range: private-minmax` only"):
        _algo(11, _layout(), epsilon=1.0, range="client-minmax", max_radius=1.0)
    with pytest.raises(ConfigError, match="range_noise_multiplier"):
        _algo(11, _layout(), epsilon=1.0, range="private-minmax", range_noise_multiplier=0.0)


# ---------------------------------------------------------------- short runs through the ledger

EPS, ROUNDS, Z = 1.0, 2, 3.0


def _run(mode_options: dict[str, Any], data_dir: Path, tmp_path: Path) -> tuple[Any, Any]:
    raw: dict[str, Any] = {
        "name": f"ranges-{mode_options['range']}", "seed": 5, "rounds": ROUNDS,
        "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
        "partition": {"kind": "iid", "num_clients": 4, "sizes": [20, 30, 25, 15]},
        "model": {"name": "mlp", "options": {"hidden": 4}},
        "algorithm": {"name": "ldp-fl", "options": {"epsilon": EPS, **mode_options}},
        "sampling": {"kind": "all"},
        "privacy": {"delta": DELTA},
        "local": {"lr": 0.05, "epochs": 1, "batch_size": None},
        "eval_every": ROUNDS,
    }
    cfg = parse_config(raw)
    res = run_experiment(cfg, RunStore(tmp_path / f"{mode_options['range']}.sqlite"))
    return res, build_experiment(cfg)


def _certified(res: Any, observer: str) -> float:
    return float(res.final["privacy"]["certified"]["observers"][observer]["epsilon"])


@pytest.fixture(scope="module")
def runs(mnist_fixture: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    tmp = tmp_path_factory.mktemp("ranges")
    return {m: _run({"range": m, **extra}, mnist_fixture, tmp) for m, extra in (
        ("global-model", {}), ("client-minmax", {}), ("private-minmax", {"range_noise_multiplier": Z}))}


def test_client_minmax_run_is_certified_infinite_and_keeps_the_claim(runs: dict[str, tuple[Any, Any]]) -> None:
    res, _ = runs["client-minmax"]
    assert res.status == "finished" and res.rounds_done == ROUNDS
    assert _certified(res, "server") == math.inf and _certified(res, "public") == math.inf
    assert res.final["privacy"]["claimed_epsilon"] == EPS  # 001's per-weight ε, unchanged
    assert any("infinite" in x for x in res.final["privacy"]["not_covered"])
    assert res.history[-1]["epsilon_total_unshuffled"] == math.inf  # per-round metric agrees
    # the same run with public ranges has a finite certificate
    assert math.isfinite(_certified(runs["global-model"][0], "server"))


def test_private_minmax_run_is_the_independent_composition(runs: dict[str, tuple[Any, Any]]) -> None:
    res, exp = runs["private-minmax"]
    assert res.status == "finished" and res.rounds_done == ROUNDS
    assert res.final["privacy"]["claimed_epsilon"] == EPS
    d = exp.problem.layout.numel
    layers = len(exp.problem.layout.sizes())
    assert (d, layers) == (784 * 4 + 4 + 4 * 10 + 10, 4)
    # independent: dp_accounting's RDP accountant (on the ledger's order grid, replace-one)
    # on d·T binary randomized responses (001 eq. 2's worst pair: noise parameter 2/(1+e^ε)) and T
    # Gaussian range reports with multiplier σ/Δ = Z
    sigma = Z * math.log2(10.0 / 1e-4) * math.sqrt(layers)
    delta_l2 = math.log2(10.0 / 1e-4) * math.sqrt(layers)
    from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS

    acc = rdp_acc.RdpAccountant(list(DEFAULT_RDP_ORDERS), neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(EPS)), num_buckets=2), d * ROUNDS)
    acc.compose(dpa.GaussianDpEvent(sigma / delta_l2), ROUNDS)
    expect = acc.get_epsilon(DELTA)
    for obs in ("server", "public"):
        cert = res.final["privacy"]["certified"]["observers"][obs]
        assert cert["method"] == "rdp"
        assert _certified(res, obs) == pytest.approx(expect, rel=1e-9)
    # the per-round metric (ldp_fl_privacy) states the same composition
    assert res.history[-1]["epsilon_total_unshuffled"] == pytest.approx(expect, rel=1e-9)
    assert ldp_fl_privacy(EPS, d, ROUNDS, 4, DELTA, Z).unshuffled == pytest.approx(expect, rel=1e-9)
    # strictly more than the same run with free (public) ranges
    free = runs["global-model"][0]
    assert _certified(res, "server") > _certified(free, "server")
    assert _certified(res, "public") > _certified(free, "public")


def test_ldp_fl_privacy_composes_the_range_report_into_both_statements() -> None:
    from dpfl.privacy.accounting.shuffle import shuffled_two_point_epsilon

    # one coordinate, ten million reports: shuffle amplification applies (see test_ldp_fl.py)
    base = ldp_fl_privacy(0.5, 1, 1, 10**7, DELTA)
    with_range = ldp_fl_privacy(0.5, 1, 1, 10**7, DELTA, 1.0)
    assert with_range.unshuffled > base.unshuffled
    # shuffled: the amplified bound at δ/2 plus the (unshuffled) Gaussian report at δ/2
    gauss = dpa.get_epsilon_gaussian(1.0, DELTA / 2)  # closed form, one release, multiplier 1
    amp = shuffled_two_point_epsilon(0.5, 10**7, 1, 1, DELTA / 2).epsilon
    assert with_range.shuffled == pytest.approx(amp + gauss, rel=1e-9)
    assert "range reports" in with_range.shuffled_note
    exact = ldp_fl_privacy(0.5, 1, 1, 10**7, DELTA, 0.0)  # client-minmax: un-noised bounds
    assert exact.unshuffled == math.inf and exact.with_shuffler == math.inf
