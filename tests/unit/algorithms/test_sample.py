"""One ``sample()`` for every algorithm: the sampler draws from the stream (t, SERVER, "sample").

The cohorts below were drawn by the per-algorithm copies this implementation replaced (same
seed, same stream): they pin the seed stream, so a change of stream or sampler shows up here.
"""

from __future__ import annotations

import inspect

import pytest

from dpfl.algorithms import dp_fedavg, fedavg, ldp_fl, midp, nbafl, udp
from dpfl.algorithms.base import Algorithm
from dpfl.rng import SeedSequence
from dpfl.sampling import AllClients, FixedSizeSampler, PoissonSampler

ALGORITHM_CLASSES = [fedavg.FedAvg, ldp_fl.LdpFl, midp.MidpScheme, midp.PmidpFl, nbafl.NbAfl, udp.Udp,
                     udp.UdpCrd, udp.UdpLei, dp_fedavg.DpFedAvg]


class _Bare(Algorithm):
    """The base class alone, with a sampler: what every algorithm inherits."""

    def __init__(self, sampler: object) -> None:
        self.sampler = sampler


@pytest.mark.parametrize("cls", ALGORITHM_CLASSES, ids=lambda c: c.__name__)
def test_no_algorithm_overrides_sample(cls: type[Algorithm]) -> None:
    assert cls.sample is Algorithm.sample, inspect.getsourcefile(cls)


@pytest.mark.parametrize(("sampler", "expected"), [
    (FixedSizeSampler(3), [[0, 2, 7], [0, 3, 7], [0, 1, 2]]),
    (PoissonSampler(0.3), [[2], [0, 2, 5, 9], [0, 5, 6, 7, 8]]),
    (AllClients(), [list(range(10))] * 3),
])
def test_cohorts_are_bit_identical_to_the_former_copies(sampler: object, expected: list[list[int]]) -> None:
    algo = _Bare(sampler)
    seeds = SeedSequence(7)
    assert [algo.sample(t, 10, seeds).tolist() for t in range(3)] == expected
