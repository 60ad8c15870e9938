"""DP-FTRL's certificates against independent computations: dp-accounting called directly on the
tree event, TF Privacy's tree-restart formula written out, and the Gaussian mechanism at the
sensitivity of each client's participation pattern computed from the dense C (brute force)."""

from __future__ import annotations

import math
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS
from dpfl.rounds import build_plan, dry_run

N = 24


def _plan(options: dict[str, Any], sampling: dict[str, Any], rounds: int) -> Any:
    raw = {"name": "ftrl", "seed": 5, "rounds": rounds, "algorithm": {"name": "dp-ftrl", "options": options},
           "sampling": sampling, "privacy": {"delta": 1e-5}}
    cfg = parse_config(raw)
    return cfg, build_plan(cfg, [30] * N, 100)


def _public(cfg: Any, exp: Any) -> Any:
    out = dry_run(cfg, experiment=exp)
    assert out.privacy is not None and out.privacy.certified is not None
    return out.privacy.certified["public"]


def test_one_epoch_of_the_tree_is_dp_accountings_single_epoch_tree_event() -> None:
    # b = rounds = 24 = N: every client once, in one tree of 24 leaves
    cfg, exp = _plan({"mechanism": "tree", "noise_multiplier": 3.0, "clip_norm": 1.0},
                     {"kind": "min_separation", "min_separation": N}, rounds=N)
    acc = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), dpa.NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(dpa.SingleEpochTreeAggregationDpEvent(3.0, N))
    assert _public(cfg, exp).epsilon_rdp == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


def test_tree_restarts_are_tf_privacys_formula_written_out() -> None:
    # trees of 8 rounds restarted 3 times, every client once per tree: RDP Σ_epochs α·⌈log2(8+1)⌉/(2σ²)
    cfg, exp = _plan({"mechanism": "tree", "noise_multiplier": 2.5, "clip_norm": 1.0},
                     {"kind": "min_separation", "min_separation": 8}, rounds=24)
    orders = np.array(DEFAULT_RDP_ORDERS)
    curve = 3 * orders * math.ceil(math.log2(8 + 1)) / (2 * 2.5**2)
    eps, _ = rdp.compute_epsilon(orders, curve, 1e-5)
    assert _public(cfg, exp).epsilon_rdp == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize("mechanism,sampling", [
    ("blt", {"kind": "min_separation", "min_separation": 4}),
    ("banded", {"kind": "min_separation", "min_separation": 4}),
    ("blt", {"kind": "availability", "min_separation": 3,
             "availability": {"period": 6, "window": 0.5, "checkin_rate": 0.6}}),
])
def test_the_public_certificate_is_the_gaussian_at_the_worst_clients_pattern(
        mechanism: str, sampling: dict[str, Any]) -> None:
    sigma = 2.0
    cfg, exp = _plan({"mechanism": mechanism, "noise_multiplier": sigma, "clip_norm": 1.0}, sampling, rounds=20)
    algo = exp.algorithm
    gram = np.abs(algo.strategy.encoder_matrix().T @ algo.strategy.encoder_matrix())
    out = dry_run(cfg, experiment=exp)
    # every client's pattern, from the schedule the dry run drew (the sampler's memory)
    patterns = algo.sampler.participations()
    worst = max(float(gram[np.ix_(r, r)].sum()) for r in patterns.values())
    acc = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    acc.compose(dpa.GaussianDpEvent(sigma / math.sqrt(worst)))
    cert = out.privacy.certified["public"]
    assert cert.epsilon_rdp == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    pld = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    pld.compose(dpa.GaussianDpEvent(sigma / math.sqrt(worst)))
    assert cert.epsilon_pld == pytest.approx(pld.get_epsilon(1e-5), rel=2e-3)
    # the claim: the schema's worst pattern, never below what happened
    assert out.privacy.claimed_epsilon >= cert.epsilon_rdp * (1 - 1e-12)


def test_amplified_banded_is_the_poisson_sampled_gaussian_per_round_of_the_group() -> None:
    sigma, q = 1.5, 0.5
    cfg, exp = _plan({"mechanism": "banded", "noise_multiplier": sigma, "clip_norm": 1.0},
                     {"kind": "cyclic_poisson", "min_separation": 4, "sample_rate": q}, rounds=20)
    algo = exp.algorithm
    cols = [math.sqrt(algo.strategy.column_inner(t, t)) for t in range(20)]
    events = [dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma / cols[t])) for t in range(0, 20, 4)]
    acc = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    acc.compose(dpa.ComposedDpEvent(events))
    cert = _public(cfg, exp)  # client 0 is in group 0: rounds 0, 4, …, 16; the worst client
    assert cert.epsilon_rdp == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert cert.basis == "ex-ante"


def test_settings_the_guarantee_does_not_cover_are_refused() -> None:
    with pytest.raises(ConfigError, match="restart_every"):
        _plan({"mechanism": "tree", "noise_multiplier": 1.0, "clip_norm": 1.0, "restart_every": 8},
              {"kind": "min_separation", "min_separation": 4}, rounds=16)
    with pytest.raises(ConfigError, match="bands"):
        _plan({"mechanism": "banded", "noise_multiplier": 1.0, "clip_norm": 1.0, "bands": 6},
              {"kind": "min_separation", "min_separation": 4}, rounds=16)
    with pytest.raises(ConfigError, match="cyclic Poisson"):
        _plan({"mechanism": "blt", "noise_multiplier": 1.0, "clip_norm": 1.0},
              {"kind": "cyclic_poisson", "min_separation": 4, "sample_rate": 0.5}, rounds=16)
    with pytest.raises(ConfigError, match="participation schema"):
        _plan({"mechanism": "blt", "noise_multiplier": 1.0, "clip_norm": 1.0},
              {"kind": "poisson", "sample_rate": 0.5}, rounds=16)
