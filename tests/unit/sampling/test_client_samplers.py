"""Client samplers (dpfl.sampling.clients): exact cases, moments, determinism, their events."""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.sampling import AllClients, FixedSizeSampler, PoissonSampler, sampler_from_description


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_all_clients() -> None:
    s = AllClients()
    assert s.sample(5, _gen()).tolist() == [0, 1, 2, 3, 4]
    g = dpa.GaussianDpEvent(1.0)
    assert s.wrap_event(g, 5) == g
    assert s.describe() == {"kind": "all"}


def test_fixed_size_exact_size_sorted_unique() -> None:
    s = FixedSizeSampler(7)
    gen = _gen(1)
    for _ in range(50):
        ids = s.sample(20, gen)
        assert ids.dtype == torch.long and ids.numel() == 7
        assert ids.tolist() == sorted(set(ids.tolist()))
        assert 0 <= int(ids.min()) and int(ids.max()) < 20


def test_fixed_size_larger_than_population_names_both_values() -> None:
    with pytest.raises(ConfigError, match=r"`num_sampled` \(30\).*`num_clients` \(10\)"):
        FixedSizeSampler(30).sample(10, _gen())
    with pytest.raises(ConfigError, match="num_sampled"):
        FixedSizeSampler(0)


def test_fixed_size_events() -> None:
    g = dpa.GaussianDpEvent(1.0)
    assert FixedSizeSampler(3).wrap_event(g, 10) == dpa.SampledWithoutReplacementDpEvent(10, 3, g)
    assert FixedSizeSampler(10).wrap_event(g, 10) == g  # full participation
    with pytest.raises(ConfigError):
        FixedSizeSampler(11).wrap_event(g, 10)


def test_fixed_size_inclusion_rate_is_k_over_n() -> None:
    # each client is included with probability K/N = 0.3; over R = 4000 rounds the count of client
    # 0 is Binomial(4000, 0.3): SE = sqrt(4000 * 0.3 * 0.7) = 29.0. Tolerance 4 SE: flake budget
    # P(|Z| > 4) ~ 6e-5 per run (the seed is fixed, so the test is deterministic anyway).
    s, gen, rounds = FixedSizeSampler(3), _gen(2), 4000
    hits = sum(int(0 in s.sample(10, gen).tolist()) for _ in range(rounds))
    assert abs(hits - rounds * 0.3) <= 4 * math.sqrt(rounds * 0.3 * 0.7)


def test_poisson_cohort_size_moments() -> None:
    # |cohort| ~ Binomial(100, 0.1): mean 10, var 9. Mean of R = 2000 draws: SE = 3/sqrt(2000).
    # Tolerance 4 SE (flake budget ~6e-5 per run).
    s, gen, rounds = PoissonSampler(0.1), _gen(3), 2000
    sizes = torch.tensor([float(s.sample(100, gen).numel()) for _ in range(rounds)])
    assert abs(float(sizes.mean()) - 10.0) <= 4 * 3 / math.sqrt(rounds)
    ids = s.sample(100, gen)
    assert ids.tolist() == sorted(set(ids.tolist())) and ids.dtype == torch.long


def test_poisson_may_return_an_empty_cohort() -> None:
    s, gen = PoissonSampler(0.01), _gen(4)
    sizes = [s.sample(5, gen).numel() for _ in range(200)]  # P(empty) = 0.99^5 = 0.95
    assert 0 in sizes
    assert s.sample(5, _gen(4)).shape == (s.sample(5, _gen(4)).numel(),)


def test_poisson_events() -> None:
    g = dpa.GaussianDpEvent(1.0)
    assert PoissonSampler(0.2).wrap_event(g, 10) == dpa.PoissonSampledDpEvent(0.2, g)
    assert PoissonSampler(1.0).wrap_event(g, 10) == g
    with pytest.raises(ConfigError, match="sample_rate"):
        PoissonSampler(1.5)


@pytest.mark.parametrize("sampler", [AllClients(), FixedSizeSampler(4), PoissonSampler(0.3)])
def test_same_seed_same_cohort(sampler: object) -> None:
    a = [sampler.sample(12, g).tolist() for g in [_gen(9)] for _ in range(5)]  # type: ignore[attr-defined]
    b = [sampler.sample(12, g).tolist() for g in [_gen(9)] for _ in range(5)]  # type: ignore[attr-defined]
    assert a == b


@pytest.mark.parametrize("sampler", [AllClients(), FixedSizeSampler(4), PoissonSampler(0.3)])
def test_description_round_trip(sampler: object) -> None:
    assert sampler_from_description(sampler.describe()) == sampler  # type: ignore[attr-defined]


def test_only_an_explicit_generator_is_accepted() -> None:
    with pytest.raises(ConfigError, match="torch.Generator"):
        PoissonSampler(0.5).sample(10, 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="num_clients"):
        AllClients().sample(0, _gen())
