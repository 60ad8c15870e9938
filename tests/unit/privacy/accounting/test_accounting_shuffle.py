"""Shuffle amplification (dpfl.privacy.accounting.shuffle): Feldman, McMillan, Talwar 2021."""

from __future__ import annotations

import math

import pytest

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting import shuffle as sh


def test_closed_form_by_hand() -> None:
    # eps0 = 1, n = 1e5, delta = 1e-6:
    # inner = 8 sqrt(e ln(4e6)) / sqrt(1e5) + 8 e / 1e5 = 0.162624 + 0.000217 = 0.162842
    # eps = ln(1 + (e - 1)/(e + 1) * inner) = ln(1 + 0.462117 * 0.162842) = 0.072555
    e = math.e
    inner = 8 * math.sqrt(e * math.log(4e6)) / math.sqrt(1e5) + 8 * e / 1e5
    assert inner == pytest.approx(0.162842, abs=1e-6)
    assert sh.shuffle_amplified_epsilon(1.0, 100_000, 1e-6) == pytest.approx(0.072555, abs=1e-6)


def test_validity_condition_boundary() -> None:
    n, delta = 10_000, 1e-6
    limit = math.log(n / (16 * math.log(2 / delta)))
    assert sh.max_local_epsilon(n, delta) == pytest.approx(limit)
    assert sh.shuffle_amplified_epsilon(limit, n, delta) <= limit
    with pytest.raises(PrivacyPreconditionError, match=r"3\.763.*n = 10000.*epsilon0 = 3\.8") as err:
        sh.shuffle_amplified_epsilon(3.8, n, delta)
    assert "No amplified bound" in str(err.value)


def test_ldp_fl_paper_setting_is_outside_the_theorem() -> None:
    # 001: n = 100 clients; no eps0 > 0 satisfies the condition at any useful delta
    assert sh.max_local_epsilon(100, 1e-5) < 0
    with pytest.raises(PrivacyPreconditionError):
        sh.shuffle_amplified_epsilon(0.1, 100, 1e-5)


def test_amplification_grows_with_n_and_never_exceeds_eps0() -> None:
    values = [sh.shuffle_amplified_epsilon(0.5, n, 1e-6) for n in (10**4, 10**5, 10**6)]
    assert values[0] > values[1] > values[2]
    assert all(v <= 0.5 for v in values)


def test_advanced_composition_picks_the_better_bound() -> None:
    # small eps, many releases: advanced wins; one release: basic
    eps, dlt = sh.advanced_composition(0.01, 1e-9, 10_000, 1e-6)
    basic = 0.01 * 10_000
    adv = math.sqrt(2 * 10_000 * math.log(1e6)) * 0.01 + 10_000 * 0.01 * math.expm1(0.01)
    assert eps == pytest.approx(min(basic, adv)) and eps == pytest.approx(adv)
    assert dlt == pytest.approx(10_000 * 1e-9 + 1e-6)
    assert sh.advanced_composition(1.0, 0.0, 1, 1e-6) == (1.0, 0.0)


def test_shuffled_two_point_composes_d_times_t_releases_within_delta() -> None:
    res = sh.shuffled_two_point_epsilon(0.5, 1_000_000, num_coordinates=10, rounds=3, delta=1e-5)
    assert res.releases == 30
    assert res.delta <= 1e-5 * (1 + 1e-12)
    assert res.epsilon_per_release == pytest.approx(sh.shuffle_amplified_epsilon(0.5, 1_000_000, 1e-5 / 60))
    assert res.epsilon < 30 * 0.5


def test_inputs_are_validated() -> None:
    with pytest.raises(ConfigError, match="epsilon0"):
        sh.shuffle_amplified_epsilon(0.0, 100, 1e-6)
    with pytest.raises(ConfigError, match="num_users"):
        sh.shuffle_amplified_epsilon(1.0, 0, 1e-6)
    with pytest.raises(ConfigError, match="delta"):
        sh.shuffle_amplified_epsilon(1.0, 100, 1.0)
