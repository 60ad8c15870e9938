"""UDP (000 Alg. 1), CRD (Alg. 2) and Lei's baseline: noise, releases, T discounting, budget."""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.algorithms.registry import BuildContext, build_algorithm, build_sampler
from dpfl.algorithms.udp import UdpCrd, local_sensitivity
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.privacy.calibration import udp_noise_std, udp_noise_std_after_change, udp_sensitivity
from dpfl.rng import SeedSequence

U, N, LR, C, EPS, DELTA = 6, 40, 0.5, 1.0, 4.0, 1e-3


def _build(name: str, rounds: int = 10, k: int = U, sizes: list[int] | None = None, **opts):
    raw = {
        "rounds": rounds,
        "partition": {"kind": "iid", "num_clients": U, "samples_per_client": N},
        "algorithm": {"name": name, "options": {"epsilon": EPS, "clip_norm": C, **opts}},
        "privacy": {"delta": DELTA},
        "sampling": {"kind": "fixed", "clients_per_round": k},
        "local": {"lr": LR, "batch_size": None},
    }
    cfg = parse_config(raw)
    sampler = build_sampler(cfg.sampling, U)
    sz = torch.tensor(sizes or [N] * U)
    return build_algorithm(cfg.algorithm, sampler, BuildContext(cfg, U, sz, 7))


def _round(algo, t: int, params: torch.Tensor, train_loss: float = 0.0) -> tuple[torch.Tensor, dict]:
    seeds = SeedSequence(0)
    clients = algo.sample(t, U, seeds)
    info = RoundInfo(t, U, clients, seeds)
    algo.releases(info, torch.full((clients.numel(),), N), False)
    local = LocalResult(params.repeat(clients.numel(), 1), torch.full((clients.numel(),), train_loss),
                        torch.full((clients.numel(),), N))
    out = algo.server_step(params, local, info)
    return out.global_params, out.metrics


def test_sensitivity_one_step_is_eq13_and_more_steps_use_the_safe_bound() -> None:
    assert local_sensitivity(LR, C, N) == udp_sensitivity(LR, C, N)
    assert local_sensitivity(LR, C, N, epochs=3) == pytest.approx(2 * LR * C / N + 2 * 2 * LR * C, rel=1e-12)


def test_full_batch_is_required() -> None:
    raw = {"rounds": 5, "partition": {"kind": "iid", "num_clients": U, "samples_per_client": N},
           "algorithm": {"name": "udp", "options": {"epsilon": EPS, "clip_norm": C}},
           "local": {"lr": LR, "batch_size": 64}}
    cfg = parse_config(raw)
    with pytest.raises(ConfigError, match="batch_size: null"):
        build_algorithm(cfg.algorithm, build_sampler(cfg.sampling, U), BuildContext(cfg, U, torch.tensor([N] * U), 7))


def test_udp_releases_use_theorem1_noise_and_cohort_weights() -> None:
    sizes = [20, 20, 40, 40, 60, 60]
    algo = _build("udp", rounds=10, k=3, sizes=sizes)
    seeds = SeedSequence(3)
    clients = algo.sample(0, U, seeds)
    rel = algo.releases(RoundInfo(0, U, clients, seeds), torch.tensor([sizes[c] for c in clients]), False)
    ids = clients.tolist()
    sigma = {c: udp_noise_std(EPS, DELTA, udp_sensitivity(LR, C, sizes[c]), 0.5, 10) for c in ids}
    server = {c: r for r in rel if r.observer == "server" for c in r.client_ids}
    for c in ids:
        assert server[c].noise_std == pytest.approx(sigma[c], rel=1e-12)
        assert server[c].sensitivity == pytest.approx(2 * LR * C / sizes[c], rel=1e-12)
    # record-level unit: sampling clients does not amplify, so the public view is charged per
    # participant at the drawn cohort: p_c·Δ_c against the cohort's noise (000 eq. 2)
    public = {c: r for r in rel if r.observer == "public" for c in r.client_ids}
    assert set(public) == set(ids)
    total = sum(sizes[c] for c in ids)
    p = {c: sizes[c] / total for c in ids}
    noise = math.sqrt(sum((p[c] * sigma[c]) ** 2 for c in ids))
    for c in ids:
        assert public[c].noise_std == pytest.approx(noise, rel=1e-9)
        assert public[c].sensitivity == pytest.approx(p[c] * 2 * LR * C / sizes[c], rel=1e-9)


def test_udp_claim_after_T_rounds_is_the_target_and_run_stops_at_T() -> None:
    algo = _build("udp", rounds=12, k=4)
    params = torch.zeros(7)
    for t in range(12):
        assert algo.should_stop(t) is None
        params, _ = _round(algo, t, params)
    claims = algo.claimed_epsilon(12)
    assert max(claims.values()) == pytest.approx(EPS, rel=1e-9)  # Thm 1 inverted exactly
    assert algo.should_stop(12) is not None


def test_noise_is_added_with_the_declared_std() -> None:
    algo = _build("udp", rounds=10)
    sigma = udp_noise_std(EPS, DELTA, udp_sensitivity(LR, C, N), 1.0, 10)
    params = torch.zeros(20000)
    new, metrics = _round(algo, 0, params)
    expected = sigma / math.sqrt(U)  # equal weights 1/U
    se = expected / math.sqrt(2 * params.numel())  # standard error of a sample std
    assert abs(float(new.std()) - expected) < 5 * se  # flake budget ~6e-7
    assert metrics["noise_std_mean"] == pytest.approx(sigma, rel=1e-12)
    again, _ = _round(_build("udp", rounds=10), 0, params)
    assert torch.equal(new, again)  # seeded by (round, client, "noise")


def test_crd_discounts_T_and_recomputes_noise_by_theorem4() -> None:
    algo = _build("udp-crd", rounds=10, threshold=1e-3, discount=0.5)
    assert isinstance(algo, UdpCrd)
    losses = iter([2.0, 1.5, 1.4999, 1.2, 1.1, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    algo._loss = lambda params: next(losses)  # V(w^0), V(w^1), ...: stalls after round 1
    params = torch.zeros(7)
    sens = udp_sensitivity(LR, C, N)
    s0 = udp_noise_std(EPS, DELTA, sens, 1.0, 10)
    params, m0 = _round(algo, 0, params)
    assert m0["crd_T"] == 10 and not m0["crd_triggered"]
    params, m1 = _round(algo, 1, params)
    assert m1["crd_triggered"] and m1["crd_T"] == math.floor(0.5 * (10 - 1)) + 1 == 5
    params, m2 = _round(algo, 2, params)
    s2 = udp_noise_std_after_change(EPS, DELTA, sens, 1.0, 5 - 2, [s0, s0])
    assert m2["noise_std_mean"] == pytest.approx(s2, rel=1e-12) and s2 < s0
    t = 3
    while algo.should_stop(t) is None:
        params, m = _round(algo, t, params)
        t += 1
    assert t == 5 and "discounted from 10 to 5" in algo.should_stop(5)
    assert algo.trajectory == [10, 5, 5, 5, 5]
    # the whole budget is spent exactly by the rounds actually run (000 eq. 25-29)
    assert max(algo.claimed_epsilon(5).values()) == pytest.approx(EPS, rel=1e-9)
    state = algo.state_dict()
    fresh = _build("udp-crd", rounds=10, threshold=1e-3, discount=0.5)
    fresh.load_state_dict(state)
    assert fresh.current_rounds == 5 and fresh.history == algo.history


def test_crd_train_loss_rise_variant_discounts_to_ceil_beta_T_and_is_not_certified() -> None:
    """The variant (not 000 Alg. 2): a rise of the participants' averaged training loss sets
    T ← ⌈βT⌉; its losses are exact releases against both observers (certified ε = ∞)."""
    algo = _build("udp-crd", rounds=10, discount=0.45, trigger="train-loss-rise")
    default = _build("udp-crd", rounds=10)
    assert algo.reports_train_loss and not default.reports_train_loss
    sens = udp_sensitivity(LR, C, N)
    s0 = udp_noise_std(EPS, DELTA, sens, 1.0, 10)
    params = torch.zeros(7)
    ms = []
    for t, loss in enumerate([2.0, 1.8, 1.9, 1.7]):  # rises in round 2 only
        params, m = _round(algo, t, params, train_loss=loss)
        ms.append(m)
    assert [m["crd_T"] for m in ms] == [10, 10, math.ceil(0.45 * 10), 5] == [10, 10, 5, 5]
    assert [m["crd_triggered"] for m in ms] == [False, False, True, False]
    assert ms[1]["crd_train_loss"] == pytest.approx(1.8)
    s3 = udp_noise_std_after_change(EPS, DELTA, sens, 1.0, 5 - 3, [s0, s0, s0])
    assert ms[3]["noise_std_mean"] == pytest.approx(s3, rel=1e-12)
    assert algo.should_stop(4) is None and algo.should_stop(5) is not None
    # the losses are exact releases of the participants against both observers, and the
    # budget the filter holds contains them (otherwise the filter would halt at round 1)
    seeds = SeedSequence(0)
    clients = algo.sample(4, U, seeds)
    rel = algo.releases(RoundInfo(4, U, clients, seeds), torch.full((U,), N), False)
    exact = {(r.observer, tuple(r.client_ids)) for r in rel if r.kind == "exact"}
    assert exact == {("server", tuple(clients.tolist())), ("public", tuple(clients.tolist()))}
    plan = algo.privacy_filter_plan(U, seeds)
    assert all({r.observer for r in rs if r.kind == "exact"} == {"server", "public"} for rs, _ in plan)
    assert not any(r.kind == "exact" for rs, _ in default.privacy_filter_plan(U, seeds) for r in rs)
    assert any("train-loss-rise" in line for line in algo.not_covered())
    # a discount at or past the current round ends the run after it
    late = _build("udp-crd", rounds=4, discount=0.45, trigger="train-loss-rise")
    p = torch.zeros(7)
    for t, loss in enumerate([1.0, 0.9, 0.8, 1.2]):
        p, m = _round(late, t, p, train_loss=loss)
    assert m["crd_T"] == 4 and late.should_stop(4) is not None  # ⌈0.45·4⌉ = 2 <= 3: stored as t + 1
    # a round without a finite loss (diverged, or not sent) neither triggers nor moves the reference
    nan = _build("udp-crd", rounds=10, trigger="train-loss-rise")
    _, m = _round(nan, 0, torch.zeros(7), train_loss=1.0)
    _, m = _round(nan, 1, torch.zeros(7), train_loss=float("nan"))
    assert not m["crd_triggered"] and m["crd_T"] == 10 and nan.previous_loss == 1.0
    _, m = _round(nan, 2, torch.zeros(7), train_loss=1.5)
    assert m["crd_triggered"] and m["crd_T"] == math.ceil(0.9 * 10) == 9


def test_lei_decays_noise_linearly_and_stops_within_budget() -> None:
    algo = _build("udp-lei", rounds=10)
    params = torch.zeros(7)
    s0 = udp_noise_std(EPS, DELTA, udp_sensitivity(LR, C, N), 1.0, 10)
    t, stds = 0, []
    while algo.should_stop(t) is None:
        params, m = _round(algo, t, params)
        stds.append(m["noise_std_mean"])
        t += 1
    assert stds[0] == pytest.approx(s0, rel=1e-12)
    assert stds[3] == pytest.approx(s0 * (1 - 3 / 20), rel=1e-12)
    assert 5 <= t < 10  # k = 1/(2T): the budget runs out after about 2T/3 rounds
    assert max(algo.claimed_epsilon(t).values()) <= EPS
    assert "would take client" in algo.should_stop(t)


def test_per_client_epsilons_and_not_covered() -> None:
    algo = _build("udp", rounds=5, epsilon=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                  clip_norm_source="median_unclipped_norms")
    stds = algo._noise_stds(0)
    assert stds[0] == pytest.approx(6 * stds[5], rel=1e-12)
    assert any("median" in line for line in algo.not_covered())
    with pytest.raises(ConfigError, match="one per client"):
        _build("udp", rounds=5, epsilon=[1.0, 2.0])
    crd = _build("udp-crd", rounds=5)
    assert any("test loss" in line for line in crd.not_covered())
