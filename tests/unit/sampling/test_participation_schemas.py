"""Participation schemas (dpfl.sampling.schemas): what each enforces, that a cohort depends on the
seed and the round only, that a restored schedule continues it, and that the ledger refuses a round
that breaks the schema before recording anything."""

from __future__ import annotations

import pytest
import torch

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy import PrivacyLedger
from dpfl.privacy.releases import ExactRelease, FactorizationRelease, TreeRelease
from dpfl.rng import SERVER, SeedSequence
from dpfl.sampling import AvailabilitySampler, CyclicPoissonSampler, MinSeparationSampler
from dpfl.sampling.clients import sampler_from_description


def gens(seed: int = 0):
    seeds = SeedSequence(seed)
    return lambda t: seeds.generator(t, SERVER, "sample")


def _gaps_and_counts(cohorts: list[list[int]]) -> tuple[int, dict[int, int]]:
    last: dict[int, int] = {}
    counts: dict[int, int] = {}
    smallest = 10**9
    for t, cohort in enumerate(cohorts):
        for c in cohort:
            if c in last:
                smallest = min(smallest, t - last[c])
            last[c] = t
            counts[c] = counts.get(c, 0) + 1
    return smallest, counts


def test_cyclic_order_is_every_client_every_b_rounds_at_most_k_times() -> None:
    s = MinSeparationSampler(min_separation=5, max_participations=3)
    cohorts = [s.sample_round(t, 23, gens()).tolist() for t in range(20)]
    gap, counts = _gaps_and_counts(cohorts)
    assert gap == 5 and max(counts.values()) == 3 and set(counts) == set(range(23))
    assert cohorts[15:] == [[]] * 5  # every client has taken part k = 3 times
    assert cohorts[2] == [2, 7, 12, 17, 22]


@pytest.mark.parametrize("rate", [0.3, 1.0])
def test_cyclic_poisson_samples_only_the_rounds_group(rate: float) -> None:
    s = CyclicPoissonSampler(groups=4, sample_rate=rate)
    n, rounds = 400, 200
    sizes = []
    for t in range(rounds):
        cohort = s.sample_round(t, n, gens(3)).tolist()
        assert all(c % 4 == t % 4 for c in cohort)
        sizes.append(len(cohort))
    # the mean cohort is q·N/b = rate·100; over 200 rounds its standard error is
    # sqrt(100·q(1−q)/200) (0.32 at q = 0.3, 0 at q = 1): within 4 standard errors
    se = (100 * rate * (1 - rate) / rounds) ** 0.5
    assert abs(sum(sizes) / rounds - 100 * rate) <= 4 * se + 1e-12


def test_availability_follows_the_day_and_enforces_the_schema() -> None:
    s = AvailabilitySampler(min_separation=6, max_participations=4, period=24, window=0.25, checkin_rate=0.2,
                            spread=0.1, seed=1)
    n = 2000
    cohorts = [s.sample_round(t, n, gens(1)).tolist() for t in range(96)]
    gap, counts = _gaps_and_counts(cohorts)
    assert gap >= 6 and max(counts.values()) <= 4
    sizes = torch.tensor([len(c) for c in cohorts], dtype=torch.float64)
    # diurnal: the busiest hour of the day is many times the quietest (phases spread by 0.1 day)
    by_hour = sizes.reshape(4, 24).mean(0)
    assert by_hour.max() > 5 * (by_hour.min() + 1)
    # a few percent of the fleet per round on average (window 0.25 × check-in 0.2 = 5%, minus the skipped)
    assert 0.01 * n < float(sizes.mean()) < 0.05 * n
    # every cohort member was online that round
    for t in (0, 5, 30):
        online = s.online(t, n)
        assert all(bool(online[c]) for c in cohorts[t])


def test_availability_max_cohort_keeps_the_first_to_check_in() -> None:
    s = AvailabilitySampler(min_separation=1, period=4, window=1.0, checkin_rate=0.5, max_cohort=7)
    assert all(len(s.sample_round(t, 100, gens()).tolist()) == 7 for t in range(10))


def test_a_cohort_is_a_function_of_the_seed_and_round_and_a_restore_continues_it() -> None:
    a = AvailabilitySampler(min_separation=3, period=12, window=0.5, checkin_rate=0.5)
    seq = [a.sample_round(t, 300, gens(7)).tolist() for t in range(30)]
    b = AvailabilitySampler(min_separation=3, period=12, window=0.5, checkin_rate=0.5)
    assert b.sample_round(29, 300, gens(7)).tolist() == seq[29]  # drawn in order first
    c = AvailabilitySampler(min_separation=3, period=12, window=0.5, checkin_rate=0.5)
    for t in range(12):
        c.sample_round(t, 300, gens(7))
    state = c.state_dict()
    d = AvailabilitySampler(min_separation=3, period=12, window=0.5, checkin_rate=0.5)
    d.load_state_dict(state)
    assert [d.sample_round(t, 300, gens(7)).tolist() for t in range(12, 30)] == seq[12:]
    assert d.participations(before=12) == c.participations(before=12)
    with pytest.raises(ConfigError, match="cannot restore"):
        MinSeparationSampler(min_separation=3).load_state_dict(state)


def test_memoryless_sampling_is_refused_and_descriptions_round_trip() -> None:
    for s in (MinSeparationSampler(min_separation=2, max_participations=3),
              CyclicPoissonSampler(groups=3, sample_rate=0.25),
              AvailabilitySampler(min_separation=4, max_cohort=9, seed=5)):
        with pytest.raises(ConfigError, match="needs the round"):
            s.sample(10, torch.Generator())
        assert sampler_from_description(s.describe()).describe() == s.describe()
    with pytest.raises(ConfigError, match="min_separation"):
        MinSeparationSampler(min_separation=0)
    with pytest.raises(ConfigError, match="sample_rate"):
        CyclicPoissonSampler(groups=2, sample_rate=1.5)


def _tree_round(ids: list[int]) -> list:
    return [TreeRelease("public", 2.0, 4, ids), ExactRelease("server", ids)]


def test_the_ledger_refuses_a_client_two_rounds_apart_under_b_4_before_any_release() -> None:
    s = AvailabilitySampler(min_separation=4)
    ledger = PrivacyLedger(num_clients=8, sampler=s, delta=1e-5, pld_every=0)
    ledger.record_round(0, _tree_round([0, 5]), sampling=s.describe(), participants=[0, 5])
    ledger.record_round(1, _tree_round([1]), sampling=s.describe(), participants=[1])
    before = ledger.to_dict()
    with pytest.raises(PrivacyPreconditionError, match="client 0 took part in round 0 and again in round 2"):
        ledger.record_round(2, _tree_round([0, 3]), sampling=s.describe(), participants=[0, 3])
    with pytest.raises(PrivacyPreconditionError, match="1 rounds apart"):
        ledger.would_exceed(_tree_round([1]), 10.0, participants=[1])  # the next round is 2; client 1 was in 1
    assert ledger.to_dict() == before  # nothing recorded
    # a saved ledger replays its schema state: the same refusal after a restore
    again = PrivacyLedger.from_dict(before, sampler=s)
    with pytest.raises(PrivacyPreconditionError, match="min_separation = 4"):
        again.record_round(3, _tree_round([5]), sampling=s.describe(), participants=[5])
    # a cyclic order also refuses a client off its turn
    c = MinSeparationSampler(min_separation=4)
    cyclic = PrivacyLedger(num_clients=8, sampler=c, delta=1e-5, pld_every=0)
    with pytest.raises(PrivacyPreconditionError, match="client 1 is not one of them"):
        cyclic.record_round(0, _tree_round([0, 1]), sampling=c.describe(), participants=[0, 1])


def test_the_ledger_refuses_a_kth_plus_one_participation() -> None:
    s = MinSeparationSampler(min_separation=1, max_participations=2)
    ledger = PrivacyLedger(num_clients=2, sampler=s, delta=1e-5, pld_every=0)
    rel = [FactorizationRelease("public", "blt", 1.0, 1.0, [0]), ExactRelease("server", [0])]
    ledger.record_round(0, rel, sampling=s.describe(), participants=[0])
    ledger.record_round(1, rel, sampling=s.describe(), participants=[0])
    with pytest.raises(PrivacyPreconditionError, match="max_participations = 2"):
        ledger.record_round(2, rel, sampling=s.describe(), participants=[0])


def test_cyclic_poisson_group_releases_charge_every_member_and_refuse_another_group() -> None:
    s = CyclicPoissonSampler(groups=2, sample_rate=0.5)
    ledger = PrivacyLedger(num_clients=4, sampler=s, delta=1e-5, pld_every=0)
    group0 = FactorizationRelease("public", "banded", 2.0, 1.0, [0, 2], sample_rate=0.5)
    ledger.record_round(0, [group0, ExactRelease("server", [2])], sampling=s.describe(), participants=[2])
    public = ledger.client_epsilons("public")
    assert public[0] == public[2] > 0 and public.get(1, 0.0) == 0.0  # client 0 charged though not sampled
    assert ledger.certify("public", 0).basis == "ex-ante"
    with pytest.raises(PrivacyPreconditionError, match="samples group 1"):
        ledger.record_round(1, [group0], sampling=s.describe(), participants=[])
    with pytest.raises(PrivacyPreconditionError, match="cyclic_poisson"):
        PrivacyLedger(num_clients=4, sampler=MinSeparationSampler(min_separation=2), delta=1e-5).record_round(
            0, [group0], sampling={"kind": "min_separation", "min_separation": 2}, participants=[])


def test_a_late_charge_of_an_earlier_round_does_not_move_the_schema_back() -> None:
    """A deployment charges uploads that arrived after their round was recorded (the round loop's
    late charges): the schema is checked for new rounds only, and a client's last round never moves back."""
    s = AvailabilitySampler(min_separation=2)
    ledger = PrivacyLedger(num_clients=4, sampler=s, delta=1e-5, pld_every=0)
    ledger.record_round(0, _tree_round([0]), sampling=s.describe(), participants=[0])
    ledger.record_round(1, _tree_round([1]), sampling=s.describe(), participants=[1])
    ledger.record_round(2, _tree_round([0]), sampling=s.describe(), participants=[0])
    # client 3's round-1 upload and a second copy of client 0's round-0 upload arrive late
    ledger.record_round(1, [ExactRelease("server", [3])], sampling=s.describe(), participants=[3])
    ledger.record_round(0, [ExactRelease("server", [0])], sampling=s.describe(), participants=[0])
    # the next round is 3 (not 1): client 1 may take part (2 rounds after round 1) ...
    assert not ledger.would_exceed(_tree_round([1]), 100.0, participants=[1], observer="public")
    # ... and client 0's last round is still 2 (not 0): round 3 is 1 round after it
    with pytest.raises(PrivacyPreconditionError, match="client 0 took part in round 2 and again in round 3"):
        ledger.would_exceed(_tree_round([0]), 100.0, participants=[0], observer="public")


def test_dropouts_in_a_cyclic_turn_make_the_public_figure_conditional() -> None:
    s = MinSeparationSampler(min_separation=2)
    ledger = PrivacyLedger(num_clients=4, sampler=s, delta=1e-5, pld_every=0)
    rel = [FactorizationRelease("public", "banded", 2.0, 1.0, [0, 2])]
    ledger.record_round(0, rel, sampling=s.describe(), participants=[0, 2])
    assert ledger.certify("public", method="rdp").basis == "ex-ante"
    ledger.record_round(1, [FactorizationRelease("public", "banded", 2.0, 1.0, [1])], sampling=s.describe(),
                        participants=[1])  # client 3 did not arrive on its turn
    assert ledger.certify("public", method="rdp").basis == "given-cohorts"


def test_the_ledger_checks_the_cyclic_turn_and_the_groups_sampling() -> None:
    s = MinSeparationSampler(min_separation=2)
    ledger = PrivacyLedger(num_clients=4, sampler=s, delta=1e-5, pld_every=0)
    with pytest.raises(PrivacyPreconditionError, match="client 1 is not one of them"):
        ledger.record_round(0, _tree_round([1]), sampling=s.describe(), participants=[1])
    c = CyclicPoissonSampler(groups=2, sample_rate=0.5)
    ledger = PrivacyLedger(num_clients=4, sampler=c, delta=1e-5, pld_every=0)
    for wrong in (FactorizationRelease("public", "banded", 2.0, 1.0, [0], sample_rate=0.5),
                  FactorizationRelease("public", "banded", 2.0, 1.0, [0, 2], sample_rate=0.01)):
        with pytest.raises(PrivacyPreconditionError, match="whole group 0"):
            ledger.record_round(0, [wrong], sampling=c.describe(), participants=[])


def test_an_infinite_noise_against_an_infinite_sensitivity_is_refused() -> None:
    with pytest.raises(ConfigError, match="inf/inf"):
        FactorizationRelease("public", "banded", float("inf"), float("inf"), [0])


def test_an_algorithm_that_assumes_random_sampling_refuses_a_schema() -> None:
    """dp-fedavg's claim and calibration assume a Poisson sample: under a schema it would claim an
    amplification the fleet does not provide, so the build refuses and names dp-ftrl."""
    from dpfl.config import parse_config
    from dpfl.rounds import build_plan

    raw = {"rounds": 4, "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 1.0}},
           "sampling": {"kind": "cyclic_poisson", "min_separation": 2, "sample_rate": 0.5}}
    with pytest.raises(ConfigError, match="participation schema; algorithm 'dp-fedavg' assumes random"):
        build_plan(parse_config(raw), [10] * 6, 10)
