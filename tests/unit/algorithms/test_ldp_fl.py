"""LDP-FL (001): two-point reports, unbiased mean by id, ranges, the server's view, accounting."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from dpfl.algorithms.ldp_fl import LdpFl, LdpFlOptions, ldp_fl_privacy
from dpfl.algorithms.options import parse_options
from dpfl.algorithms.registry import algorithms
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.client.layout import ParamLayout
from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms import two_point_values
from dpfl.rng import SeedSequence
from dpfl.sampling import AllClients
from dpfl.server.shuffle import IdMultisets


def _algo(p: int, layout: ParamLayout | None = None, **options: Any) -> LdpFl:
    return LdpFl(parse_options(LdpFlOptions, options, "ldp-fl"), AllClients(), p, 1e-5, layout)


def _step(algo: LdpFl, local: torch.Tensor, global_params: torch.Tensor, seed: int = 0, round_idx: int = 0):
    k = local.shape[0]
    info = RoundInfo(round_idx, k, torch.arange(k), SeedSequence(seed))
    res = LocalResult(local.clone(), torch.zeros(k), torch.ones(k, dtype=torch.long))
    return algo.server_step(global_params, res, info)


def test_one_client_report_is_exactly_one_of_the_two_values() -> None:
    p, c, r, eps = 4000, 0.1, 0.075, 1.0
    algo = _algo(p, epsilon=eps, range="fixed", center=c, radius=r)
    w = c + r * (2 * torch.rand(1, p, generator=torch.Generator().manual_seed(0)) - 1)
    out = _step(algo, w, torch.zeros(p)).global_params  # the mean of one report is the report
    low, high = two_point_values(torch.tensor(c, dtype=torch.float64), torch.tensor(r, dtype=torch.float64), eps)
    low32, high32 = float(low), float(high)
    assert set(out.unique().tolist()) == {torch.tensor(low32).item(), torch.tensor(high32).item()}
    assert math.isclose(high32 - c, r * (math.e + 1) / (math.e - 1), rel_tol=1e-6)  # 001 eq. 2


def test_mean_by_id_is_unbiased_within_four_standard_errors() -> None:
    # 300 clients, 400 weights spread over the range; flake budget: |z| < 4 has probability
    # 1 - 6e-5 for the pooled statistic (fixed seed: deterministic).
    k, p, c, r, eps = 300, 400, 0.0, 0.075, 0.5
    algo = _algo(p, epsilon=eps, range="fixed", center=c, radius=r)
    w = c + r * (2 * torch.rand(k, p, generator=torch.Generator().manual_seed(1)) - 1)
    est = _step(algo, w, torch.zeros(p), seed=5).global_params.double()
    true = w.double().mean(0)
    coth = 1.0 / math.tanh(eps / 2)
    var = ((r * coth) ** 2 - (w.double() - c) ** 2).sum(0) / k**2  # 001 Lemma 3-4, eq. (6)-(7)
    z = (est - true) / var.sqrt()
    pooled = float((est - true).sum() / var.sum().sqrt())
    assert abs(pooled) < 4.0
    assert 0.85 < float(z.std()) < 1.15  # per-id errors have unit standard error (Lemma 4)
    assert float(z.abs().max()) < 5.0


def test_weights_outside_the_range_are_clipped_and_counted() -> None:
    algo = _algo(10, epsilon=2.0, range="fixed", radius=0.1)
    w = torch.tensor([[0.5] * 5 + [0.0] * 5])
    out = _step(algo, w, torch.zeros(10))
    assert out.metrics["clipped_fraction"] == 0.5


def test_the_server_side_receives_only_per_id_multisets() -> None:
    algo = _algo(30, epsilon=1.0, range="fixed", radius=0.1)
    seen: list[Any] = []
    inner = algo.aggregate_by_id

    def spy(arg: IdMultisets) -> torch.Tensor:
        seen.append(arg)
        return inner(arg)

    algo.aggregate_by_id = spy  # type: ignore[method-assign]
    _step(algo, torch.zeros(8, 30), torch.zeros(30))
    assert len(seen) == 1 and type(seen[0]) is IdMultisets
    assert seen[0].num_reports().tolist() == [8] * 30


def test_seeded_rounds_are_reproducible_and_depend_on_the_round() -> None:
    algo = _algo(50, epsilon=1.0, range="fixed", radius=0.1)
    w = torch.zeros(6, 50)
    a = _step(algo, w, torch.zeros(50), seed=3).global_params
    b = _step(algo, w, torch.zeros(50), seed=3).global_params
    c = _step(algo, w, torch.zeros(50), seed=3, round_idx=1).global_params
    assert torch.equal(a, b) and not torch.equal(a, c)


def _two_layer_layout() -> ParamLayout:
    return ParamLayout.of(nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1)))  # 6 + 2 + 2 + 1 = 11


def test_global_model_ranges_follow_each_layer_of_the_public_model() -> None:
    layout = _two_layer_layout()
    algo = _algo(11, layout, epsilon=1.0, range="global-model")
    g = torch.tensor([-0.2, 0.1, 0.3, 0.0, 0.0, 0.0, 1.0, 2.0, -0.5, 0.5, 0.05])
    c, r, radii = algo.ranges(g, torch.zeros(2, 11))
    assert radii == pytest.approx([0.5, 2.0, 1.0, 0.05])  # max - min, raised to max|w| (bias 1)
    assert torch.all(c == 0)
    torch.testing.assert_close(r, torch.tensor([0.5] * 6 + [2.0] * 2 + [1.0] * 2 + [0.05], dtype=torch.float64))
    assert algo.not_covered() and all("client-minmax" not in x for x in algo.not_covered())


def test_client_minmax_ranges_use_the_local_models_and_say_the_certificate_is_infinite() -> None:
    layout = _two_layer_layout()
    algo = _algo(11, layout, epsilon=1.0, range="client-minmax", range_scale=2.0)
    local = torch.zeros(2, 11)
    local[0, 0], local[1, 1] = -0.1, 0.3
    _, _, radii = algo.ranges(torch.zeros(11), local)
    assert radii[0] == pytest.approx(0.8) and radii[1] == pytest.approx(1e-6)
    assert any("infinite" in x and "private-minmax" in x for x in algo.not_covered())


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="`radius` is required"):
        _algo(5, epsilon=1.0)
    with pytest.raises(ConfigError, match="applies to `range: fixed` only"):
        _algo(5, epsilon=1.0, range="global-model", radius=0.1)
    with pytest.raises(ConfigError, match="unknown option `eps`"):
        _algo(5, eps=1.0, radius=0.1)
    with pytest.raises(ConfigError, match="needs the model's parameter layout"):
        _step(_algo(5, epsilon=1.0, range="global-model"), torch.zeros(2, 5), torch.zeros(5))
    assert "ldp-fl" in algorithms()


def test_releases_claim_and_certificates() -> None:
    d = 1000
    algo = _algo(d, epsilon=0.5, range="fixed", radius=0.1)
    info = RoundInfo(0, 4, torch.tensor([0, 2, 3]), SeedSequence(0))
    rel = algo.releases(info, torch.ones(3), False)
    assert {(x.observer, x.kind, x.epsilon, x.num_coordinates, x.client_ids) for x in rel} == {
        ("server", "two_point", 0.5, d, (0, 2, 3)), ("public", "two_point", 0.5, d, (0, 2, 3))}
    assert algo.claimed_epsilon(0) == 0.0 and algo.claimed_epsilon(7) == 0.5  # 001: ε per weight, whole run
    stmt = ldp_fl_privacy(0.5, d, 3, 100, 1e-5)
    assert stmt.unshuffled <= 3 * d * 0.5 + 1e-9  # never above the paper's own T·d·ε
    assert stmt.unshuffled > 0.5 * 3 * d * 0.5**2 / 2  # but far above the claimed ε
    assert stmt.shuffled is None and "not applicable" in stmt.shuffled_note  # n = 100: FMT fails
    assert stmt.with_shuffler == stmt.unshuffled
    big = ldp_fl_privacy(0.5, 1, 1, 10**7, 1e-5)  # one coordinate, ten million reports
    assert big.shuffled is not None and big.shuffled < 0.5 and big.with_shuffler == big.shuffled


def test_non_finite_local_weights_are_reported_as_the_center() -> None:
    """Diverged local training (NaN/Inf weights) must not end the run: such a weight is
    randomized as if it were c, which the randomizer's ε-LDP covers (any input in the range)."""
    p, c, r, eps = 2000, 0.0, 0.075, 1.0
    algo = _algo(p, epsilon=eps, range="fixed", center=c, radius=r)
    w = torch.zeros(1, p)
    w[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    info = RoundInfo(0, 1, torch.arange(1), SeedSequence(0))
    up = algo.client_step(torch.zeros(p), LocalResult(w.clone(), torch.zeros(1), torch.ones(1, dtype=torch.long)), info)
    low, high = two_point_values(torch.tensor(c, dtype=torch.float64), torch.tensor(r, dtype=torch.float64), eps)
    assert bool(torch.isfinite(up.params).all())
    assert set(up.params.unique().tolist()) <= {float(torch.tensor(float(low)).float()),
                                                float(torch.tensor(float(high)).float())}
    assert float(up.diagnostics["non_finite"][0]) == 3 and not up.declared  # diagnostics never leave a client
    # at the center both values are equally likely: the three weights are a fair coin each,
    # exactly as for a real weight 0 (same generator stream as a finite input would use)
    ref = algo.client_step(torch.zeros(p),
                           LocalResult(torch.zeros(1, p), torch.zeros(1), torch.ones(1, dtype=torch.long)), info)
    assert torch.equal(up.params, ref.params)
