"""Participation schemas: samplers with memory, for fleets whose cohorts cannot be sampled at random.

A cross-device fleet cannot give DP-FedAvg its premise: devices check in when they are idle,
charging and on Wi-Fi, so the server neither draws the cohort at random nor can it hide who was
available. What it *can* enforce is a participation schema — each client at most ``k`` times,
consecutive participations at least ``b`` rounds apart — which is all the correlated-noise
mechanisms need (DP-FTRL, banded matrix factorization, BLT: :mod:`dpfl.privacy.mechanisms.correlated`).

Three samplers, each drawing the cohort *and* describing itself to the accountant, as the
memoryless samplers of :mod:`.clients` do (the schema the engine enforces is the schema the ledger
prices; :class:`dpfl.privacy.accounting.ledger.PrivacyLedger` refuses a round that breaks it):

* :class:`MinSeparationSampler` — cyclic order, the canonical b-min-separation schema: client i
  belongs to group i mod b and round t takes group t mod b (every client every b rounds, at most
  k times). Deterministic: no amplification (Kairouz et al. 2021 §4, "tree restarts" per epoch;
  Choquette-Choo et al. 2023, the min-separation participation schema).
* :class:`CyclicPoissonSampler` — the same b fixed groups, round t *Poisson-samples* group t mod b
  with rate q: the schema of amplified banded MF (Choquette-Choo et al. 2023, "(Amplified) Banded
  Matrix Factorization", §4): amplification a fleet can honestly provide, since only the server's
  coin decides among the group's clients.
* :class:`AvailabilitySampler` — device availability the server does not choose: each client has a
  diurnal window of the period in which it is online, and checks in with a probability while
  online; the server takes whoever checked in, skips a client whose last participation is fewer
  than b rounds ago or who has taken part k times, and (optionally) keeps the first ``max_cohort``
  to check in. No amplification can be claimed (the server knows who was available).

Each has ``sample_round(round_idx, num_clients, generator_for)`` — the cohort of round t, drawn from
``generator_for(t)`` (the server's stream (t, SERVER, "sample")); rounds not yet drawn are drawn in
order first, so a cohort is a function of the seed and the round only — and ``participations()``
(every client's rounds so far), ``state_dict``/``load_state_dict`` (what a checkpoint keeps),
``schema()`` (b, k) and ``expected_cohort(N)`` (the public denominator of a round's sum). The
memoryless ``sample(num_clients, generator)`` is refused: these samplers need the round.

This module imports only :mod:`dpfl.errors`, :mod:`dpfl.rng`, :mod:`dpfl.privacy.accounting.events`,
:mod:`dpfl.privacy.mechanisms.draw` (the coins and orders, from a torch or a ChaCha20 generator) and
:mod:`.clients` from dpfl.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import validate_sampling
from dpfl.privacy.mechanisms.draw import rand, randperm
from dpfl.rng import CsprngGenerator, NoiseGenerator
from dpfl.sampling.clients import ClientSampler, _check_num_clients

__all__ = ["AvailabilitySampler", "CyclicPoissonSampler", "MinSeparationSampler", "ScheduleSampler"]

GeneratorFor = Callable[[int], NoiseGenerator]


@dataclass
class ScheduleSampler(ClientSampler):
    """Base of the samplers with memory: the rounds drawn so far, in order (see the module)."""

    _cohorts: list[list[int]] = field(default_factory=list, init=False, repr=False, compare=False)
    _num_clients: int | None = field(default=None, init=False, repr=False, compare=False)
    _last: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _count: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    memory = True

    def sample(self, num_clients: int, generator: NoiseGenerator) -> torch.Tensor:
        raise ConfigError(f"the {self.describe()['kind']} schema needs the round: use "
                          "`sample_round(round_idx, num_clients, generator_for)` (Algorithm.sample does).")

    # ------------------------------------------------------------------ the schedule

    def schema(self) -> tuple[int, int | None]:
        """(b, k): the least separation between a client's participations and the most of them
        (None: unlimited) that this sampler enforces."""
        d = self.describe()
        return int(d.get("min_separation", d.get("groups", 1))), d.get("max_participations")

    def expected_cohort(self, num_clients: int) -> float:
        """A public, data-independent cohort size: the fixed denominator of a round's sum."""
        raise NotImplementedError

    def _draw(self, round_idx: int, num_clients: int, generator: NoiseGenerator) -> list[int]:
        raise NotImplementedError

    def sample_round(self, round_idx: int, num_clients: int, generator_for: GeneratorFor) -> torch.Tensor:
        """Sorted ids of round ``round_idx``'s cohort (drawing the rounds before it first)."""
        n = _check_num_clients(num_clients)
        self.check(n)
        if isinstance(round_idx, bool) or not isinstance(round_idx, int) or round_idx < 0:
            raise ConfigError(f"`round_idx` must be an integer >= 0. Found {round_idx!r}.")
        if self._num_clients is None:
            self._num_clients = n
        elif self._num_clients != n:
            raise ConfigError(f"this schedule was drawn for {self._num_clients} clients, not {n}.")
        while len(self._cohorts) <= round_idx:
            t = len(self._cohorts)
            gen = generator_for(t)
            if not isinstance(gen, (torch.Generator, CsprngGenerator)):
                raise ConfigError("`generator_for` must return a torch.Generator or a dpfl.rng.CsprngGenerator. "
                                  f"Found {type(gen).__name__}.")
            cohort = sorted(self._draw(t, n, gen))
            last, count = self._state_arrays(n)  # rounds before t
            self._cohorts.append(cohort)
            if cohort:
                ids = torch.tensor(cohort, dtype=torch.long)
                last[ids] = t
                count[ids] += 1
        return torch.tensor(self._cohorts[round_idx], dtype=torch.long)

    def participations(self, before: int | None = None) -> dict[int, list[int]]:
        """Client → the rounds (ascending) it took part in, among the rounds drawn before ``before``."""
        out: dict[int, list[int]] = {}
        for t, cohort in enumerate(self._cohorts[:before]):
            for c in cohort:
                out.setdefault(c, []).append(t)
        return out

    def _state_arrays(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(last round, count) per client over the rounds drawn so far (never: a very negative
        round); kept up to date as rounds are drawn, rebuilt once after a restore."""
        if self._last is None or self._count is None or self._last.numel() != n:
            last = torch.full((n,), -(1 << 40), dtype=torch.long)
            count = torch.zeros(n, dtype=torch.long)
            for t, cohort in enumerate(self._cohorts):
                if cohort:
                    ids = torch.tensor(cohort, dtype=torch.long)
                    last[ids] = t
                    count[ids] += 1
            self._last, self._count = last, count
        return self._last, self._count

    def state_dict(self) -> dict[str, Any]:
        return {"describe": self.describe(), "num_clients": self._num_clients,
                "cohorts": [list(c) for c in self._cohorts]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("describe") != self.describe():
            raise ConfigError(f"a saved schedule of {state.get('describe')} cannot restore {self.describe()}.")
        self._num_clients = state.get("num_clients")
        self._cohorts = [sorted(int(c) for c in cohort) for cohort in state.get("cohorts", [])]
        self._last = self._count = None


def _positive_int(name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")


@dataclass
class MinSeparationSampler(ScheduleSampler):
    """Cyclic order: group i mod b, round t takes group t mod b (at most k participations each).

    >>> s = MinSeparationSampler(min_separation=3)
    >>> [s.sample_round(t, 7, lambda _: torch.Generator()).tolist() for t in range(4)]
    [[0, 3, 6], [1, 4], [2, 5], [0, 3, 6]]
    """

    min_separation: int = 1
    max_participations: int | None = None

    def __post_init__(self) -> None:
        validate_sampling(self.describe())

    def describe(self) -> dict[str, Any]:
        return {"kind": "min_separation", "min_separation": int(self.min_separation),
                "max_participations": self.max_participations, "order": "cyclic"}

    def expected_cohort(self, num_clients: int) -> float:
        return float(math.ceil(_check_num_clients(num_clients) / self.min_separation))

    def _draw(self, round_idx: int, num_clients: int, generator: NoiseGenerator) -> list[int]:
        b, k = self.min_separation, self.max_participations
        if k is not None and round_idx // b >= k:
            return []
        return list(range(round_idx % b, num_clients, b))


@dataclass
class CyclicPoissonSampler(ScheduleSampler):
    """b fixed groups (i mod b); round t Poisson-samples group t mod b with rate q.

    >>> s = CyclicPoissonSampler(groups=2, sample_rate=1.0)
    >>> s.sample_round(1, 5, lambda t: torch.Generator().manual_seed(t)).tolist()
    [1, 3]
    """

    groups: int = 1
    sample_rate: float = 1.0

    def __post_init__(self) -> None:
        validate_sampling(self.describe())

    def describe(self) -> dict[str, Any]:
        return {"kind": "cyclic_poisson", "groups": int(self.groups), "sample_rate": float(self.sample_rate)}

    def schema(self) -> tuple[int, int | None]:
        return int(self.groups), None

    def group(self, round_idx: int, num_clients: int) -> list[int]:
        """The clients round ``round_idx`` samples from (its group, t mod b)."""
        return list(range(round_idx % self.groups, _check_num_clients(num_clients), self.groups))

    def expected_cohort(self, num_clients: int) -> float:
        return self.sample_rate * math.ceil(_check_num_clients(num_clients) / self.groups)

    def _draw(self, round_idx: int, num_clients: int, generator: NoiseGenerator) -> list[int]:
        members = self.group(round_idx, num_clients)
        draws = rand(len(members), generator, dtype=torch.float64)
        return [members[i] for i in torch.nonzero(draws < self.sample_rate).reshape(-1).tolist()]


@dataclass
class AvailabilitySampler(ScheduleSampler):
    """Device check-ins the server does not choose (a diurnal availability simulator).

    Client i is online in rounds t with ((t − φ_i) mod P) < w·P, where P = ``period`` rounds (a
    "day"), w = ``window`` (the fraction of the day a device is idle, charging and on Wi-Fi) and
    the phase φ_i is drawn once, around ``peak`` with spread ``spread``·P (most devices charge at
    night), from ``seed`` (public: who can be online is not a secret the guarantee rests on).
    While online it checks in with probability ``checkin_rate`` (round t's stream). The server
    takes whoever checked in, skips a client whose last participation is fewer than
    ``min_separation`` rounds ago or who has taken part ``max_participations`` times, and keeps
    the first ``max_cohort`` to check in (a random order: round t's stream), if set.

    >>> s = AvailabilitySampler(min_separation=4, period=8, window=1.0, checkin_rate=1.0)
    >>> [len(s.sample_round(t, 8, lambda t: torch.Generator().manual_seed(t))) for t in range(5)]
    [8, 0, 0, 0, 8]
    """

    min_separation: int = 1
    max_participations: int | None = None
    period: int = 24
    window: float = 0.25
    checkin_rate: float = 0.2
    peak: float = 0.0
    spread: float = 0.15
    max_cohort: int | None = None
    seed: int = 0
    _phases: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_sampling(self.describe())

    def describe(self) -> dict[str, Any]:
        return {"kind": "availability", "min_separation": int(self.min_separation),
                "max_participations": self.max_participations, "period": int(self.period),
                "window": float(self.window), "checkin_rate": float(self.checkin_rate), "peak": float(self.peak),
                "spread": float(self.spread), "max_cohort": self.max_cohort, "seed": int(self.seed)}

    def phases(self, num_clients: int) -> torch.Tensor:
        """φ_i for every client (rounds, in [0, P)), drawn once from ``seed``."""
        n = _check_num_clients(num_clients)
        if self._phases is None or self._phases.numel() != n:
            gen = torch.Generator().manual_seed(int(self.seed))
            raw = self.peak * self.period + self.spread * self.period * torch.randn(n, generator=gen,
                                                                                   dtype=torch.float64)
            self._phases = torch.remainder(raw, float(self.period))
        return self._phases

    def online(self, round_idx: int, num_clients: int) -> torch.Tensor:
        """Bool mask of the clients online in round ``round_idx`` (before they check in)."""
        pos = torch.remainder(round_idx - self.phases(num_clients), float(self.period))
        return pos < self.window * self.period

    def expected_cohort(self, num_clients: int) -> float:
        n = _check_num_clients(num_clients)
        checked_in = n * self.window * self.checkin_rate
        return float(min(checked_in, self.max_cohort)) if self.max_cohort is not None else float(checked_in)

    def _draw(self, round_idx: int, num_clients: int, generator: NoiseGenerator) -> list[int]:
        n = num_clients
        checks_in = rand(n, generator, dtype=torch.float64) < self.checkin_rate
        order = randperm(n, generator)  # the order in which the check-ins arrive
        last, count = self._state_arrays(n)  # the rounds before this one (it is appended after the draw)
        eligible = self.online(round_idx, n) & checks_in & (round_idx - last >= self.min_separation)
        if self.max_participations is not None:
            eligible &= count < self.max_participations
        arriving = order[eligible[order]]
        if self.max_cohort is not None:
            arriving = arriving[: self.max_cohort]
        return arriving.tolist()
