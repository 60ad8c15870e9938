"""Run metadata → dp_accounting events (dpfl.privacy.accounting.events)."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpfl.errors import ConfigError
from dpfl.privacy.accounting import events as ev


def _rdp(event: dpa.DpEvent, rel: dpa.NeighboringRelation = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE) -> np.ndarray:
    return rdp.RdpAccountant(neighboring_relation=rel).compose(event).rdp


# ---------------------------------------------------------------- Gaussian releases


def test_gaussian_event_carries_noise_over_enforced_sensitivity() -> None:
    assert ev.gaussian_event(3.0, 1.5) == dpa.GaussianDpEvent(2.0)
    assert ev.noise_multiplier(3.0, 1.5) == 2.0


def test_gaussian_event_limits() -> None:
    # nothing about the unit released -> no-op; a real release without noise -> non-private
    assert isinstance(ev.gaussian_event(1.0, 0.0), dpa.NoOpDpEvent)
    assert isinstance(ev.gaussian_event(0.0, 1.0), dpa.NonPrivateDpEvent)
    with pytest.raises(ConfigError, match="noise_std"):
        ev.gaussian_event(-1.0, 1.0)


def test_compose_groups_equal_events_without_changing_the_rdp() -> None:
    events = [dpa.GaussianDpEvent(1.0), dpa.GaussianDpEvent(2.0), dpa.GaussianDpEvent(1.0)]
    grouped = ev.compose(events)
    assert isinstance(grouped, dpa.ComposedDpEvent)
    assert dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1.0), 2) in grouped.events
    np.testing.assert_allclose(_rdp(grouped), _rdp(dpa.ComposedDpEvent(events)), rtol=1e-12)
    assert isinstance(ev.compose([]), dpa.NoOpDpEvent)
    assert ev.compose([dpa.GaussianDpEvent(3.0)]) == dpa.GaussianDpEvent(3.0)


def test_changing_noise_composes_each_round_as_it_happened() -> None:
    # CRD: 3 rounds at z = 2, then T changes and 2 rounds at z = 1.5
    zs = [2.0, 2.0, 2.0, 1.5, 1.5]
    event = ev.gaussian_rounds_event(zs)
    direct = dpa.ComposedDpEvent([dpa.GaussianDpEvent(z) for z in zs])
    np.testing.assert_allclose(_rdp(event), _rdp(direct), rtol=1e-12)
    # Gaussian RDP is alpha/(2 z^2): the sum over rounds, worked by hand at alpha = 2
    acc = rdp.RdpAccountant(orders=[2.0]).compose(event)
    assert acc.rdp[0] == pytest.approx(3 * 2 / (2 * 4.0) + 2 * 2 / (2 * 2.25))


# ---------------------------------------------------------------- aggregates


def test_aggregate_noise_std_by_hand() -> None:
    # sqrt(0.5^2 * 2^2 + 0.5^2 * 4^2 + 1^2) = sqrt(1 + 4 + 1)
    assert ev.aggregate_noise_std([2.0, 4.0], [0.5, 0.5], 1.0) == pytest.approx(math.sqrt(6.0))


def test_aggregate_sensitivity_is_max_weight_times_sensitivity() -> None:
    assert ev.aggregate_sensitivity(2.0, [0.2, 0.5, 0.3]) == pytest.approx(1.0)
    assert ev.aggregate_sensitivity([1.0, 4.0], [0.5, 0.25]) == pytest.approx(1.0)


def test_fewer_arrivals_than_the_noise_was_split_over_gives_less_noise() -> None:
    # noise split over K = 4 clients (std 1 each, mean weights 1/4): multiplier 0.5 / (1/4) = 2;
    # only 2 arrive (weights 1/2): 0.7071 / (1/2) = 1.414 -- weaker, and that is what is recorded
    planned = ev.aggregate_noise_std([1.0] * 4, [0.25] * 4) / ev.aggregate_sensitivity(1.0, [0.25] * 4)
    actual = ev.aggregate_noise_std([1.0] * 2, [0.5] * 2) / ev.aggregate_sensitivity(1.0, [0.5] * 2)
    assert planned == pytest.approx(2.0)
    assert actual == pytest.approx(math.sqrt(2.0))


# ---------------------------------------------------------------- sampling


def test_sampled_event_follows_the_description() -> None:
    g = dpa.GaussianDpEvent(1.0)
    assert ev.sampled_event(g, {"kind": "all"}, 10) == g
    assert ev.sampled_event(g, {"kind": "poisson", "sample_rate": 0.1}, 10) == dpa.PoissonSampledDpEvent(0.1, g)
    assert (ev.sampled_event(g, {"kind": "fixed_size", "num_sampled": 3}, 10)
            == dpa.SampledWithoutReplacementDpEvent(10, 3, g))
    # full participation is not sampling
    assert ev.sampled_event(g, {"kind": "fixed_size", "num_sampled": 10}, 10) == g
    assert ev.sampled_event(g, {"kind": "poisson", "sample_rate": 1.0}, 10) == g


def test_sampling_validation_names_the_values() -> None:
    with pytest.raises(ConfigError, match=r"\(30\).*\(10\)"):
        ev.validate_sampling({"kind": "fixed_size", "num_sampled": 30}, 10)
    with pytest.raises(ConfigError, match="sample_rate"):
        ev.validate_sampling({"kind": "poisson", "sample_rate": 0.0})
    with pytest.raises(ConfigError, match="unknown sampling kind"):
        ev.validate_sampling({"kind": "bernoulli"})


def test_drop_sampling_removes_every_wrapper() -> None:
    g = dpa.GaussianDpEvent(1.0)
    nested = dpa.SelfComposedDpEvent(
        dpa.ComposedDpEvent([dpa.PoissonSampledDpEvent(0.1, g), dpa.SampledWithoutReplacementDpEvent(5, 2, g)]), 3
    )
    stripped = ev.drop_sampling(nested)
    assert stripped == dpa.SelfComposedDpEvent(dpa.ComposedDpEvent([g, g]), 3)


def test_amplification_support_matrix() -> None:
    g = dpa.GaussianDpEvent(1.0)
    poisson, wor = dpa.PoissonSampledDpEvent(0.1, g), dpa.SampledWithoutReplacementDpEvent(5, 2, g)
    assert ev.amplification_support(poisson, "add_remove") == {"rdp": True, "pld": True}
    assert ev.amplification_support(poisson, "replace_one") == {"rdp": False, "pld": False}
    assert ev.amplification_support(wor, "replace_one") == {"rdp": True, "pld": False}
    assert ev.amplification_support(wor, "add_remove") == {"rdp": False, "pld": False}


# ---------------------------------------------------------------- two-point randomizer (001)


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_two_point_is_randomized_response_with_ratio_exactly_e_eps(eps: float) -> None:
    p = ev.two_point_noise_parameter(eps)
    keep, flip = 1 - p / 2, p / 2
    assert keep / flip == pytest.approx(math.exp(eps), rel=1e-12)


def test_two_point_release_composes_d_coordinates_over_t_rounds() -> None:
    event = ev.two_point_event(0.5, num_coordinates=7, rounds=3)
    assert isinstance(event, dpa.SelfComposedDpEvent) and event.count == 21
    assert ev.pure_epsilon(event) == pytest.approx(21 * 0.5)
    # RDP of the composition never exceeds the pure bound (orders up to inf behave like eps)
    acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE).compose(event)
    assert acc.get_epsilon(1e-6) <= 21 * 0.5 + 0.5


def test_pure_epsilon_is_none_for_gaussian() -> None:
    assert ev.pure_epsilon(dpa.GaussianDpEvent(1.0)) is None


@pytest.mark.parametrize("bad", [0.0, -1.0, 1.0, 2.0])
def test_validate_delta(bad: float) -> None:
    with pytest.raises(ConfigError, match="delta"):
        ev.validate_delta(bad)
