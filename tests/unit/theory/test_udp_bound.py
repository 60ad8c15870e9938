"""000 Theorem 2 (eq. 22) calculator and `dpfl bound udp`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpfl.cli import main
from dpfl.errors import ConfigError
from dpfl.theory.udp import UdpConstants, estimate_constants, theorem2_bound, theorem2_curve

BASE = UdpConstants(smoothness=2.0, pl=0.05, lr=0.5, divergence=0.1, sensitivity=1.4e-3,
                    clients=50, sampled=30, gap=2.0)


def test_bound_matches_eq22_term_by_term() -> None:
    t, eps, delta = 40, 8.0, 1e-3
    a = 1 - 2 * 0.05 * 0.5 + 0.05 * 0.25 * 2.0
    k0 = 2.0**2 * 1.4e-3**2 / 0.05
    k1 = 0.25 * 4.0 * 0.1 / (2 * 0.05)
    noise = k0 * t * 30 / 50**2 * 50 * math.log(1 / delta) / eps**2
    sampling = k1 * 50 * 20 / (30 * 49)
    expected = a**t * 2.0 + (1 - a**t) * (noise + sampling)
    assert theorem2_bound(BASE, t, [eps], [delta]) == pytest.approx(expected, rel=1e-12)


def test_full_participation_drops_the_sampling_term_and_T0_is_the_gap() -> None:
    full = UdpConstants(2.0, 0.05, 0.5, 123.0, 1.4e-3, 50, 50, 2.0)
    none = UdpConstants(2.0, 0.05, 0.5, 0.0, 1.4e-3, 50, 50, 2.0)
    assert theorem2_bound(full, 30, [4.0], [1e-3]) == pytest.approx(theorem2_bound(none, 30, [4.0], [1e-3]))
    assert theorem2_bound(full, 0, [4.0], [1e-3]) == pytest.approx(2.0)


def test_interior_optimum_moves_up_with_epsilon() -> None:
    best = [theorem2_curve(BASE, [e], [1e-3], 2000).best_rounds for e in (2.0, 4.0, 8.0)]
    assert 1 < best[0] < best[1] < best[2] < 2000


def test_invalid_contraction_is_rejected() -> None:
    bad = UdpConstants(2.0, 5.0, 0.5, 0.0, 1e-3, 50, 50, 2.0)  # A = 1 - 5 + 2.5 < 0
    with pytest.raises(ConfigError, match="contraction"):
        theorem2_bound(bad, 10, [4.0], [1e-3])


def test_estimate_constants_recovers_a_geometric_decay() -> None:
    a, floor = 0.9, 0.3
    losses = [floor + 2.0 * a**t for t in range(1, 40)] + [floor - 1e-3]
    cfg = {"local": {"lr": 0.5}, "algorithm": {"options": {"epsilon": 4.0, "clip_norm": 1.0}},
           "partition": {"num_clients": 50, "samples_per_client": 800}, "privacy": {"delta": 1e-3},
           "sampling": {"kind": "fixed", "clients_per_round": 30}}
    est = estimate_constants(losses, cfg)
    assert est["contraction"] == pytest.approx(a, abs=0.01)
    assert est["sampled"] == 30 and est["sensitivity"] == pytest.approx(2 * 0.5 * 1.0 / 800)


def test_cli_prints_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "b.png"
    code = main(["bound", "udp", "--epsilon", "4", "8", "--delta", "1e-3", "--clients", "50", "--lr", "0.5",
                 "--L", "2", "--mu", "0.05", "--clip", "1.12", "--samples-per-client", "800", "--gap", "2",
                 "--t-max", "500", "--plot", str(png), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    b4, b8 = (c["best_rounds"] for c in data["curves"])
    assert b4 < b8 and png.stat().st_size > 1000
