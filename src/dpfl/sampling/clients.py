"""Client samplers: one object both draws each round's cohort and tells the accountant how.

Each sampler has

* ``sample(num_clients, generator) -> LongTensor`` — the sorted ids of this round's cohort, drawn
  only from the explicit generator (no global RNG): a ``torch.Generator`` or a ChaCha20
  :class:`~dpfl.rng.CsprngGenerator`, through :mod:`dpfl.privacy.mechanisms.draw`;
* ``wrap_event(event, num_clients) -> DpEvent`` — the ``dp_accounting`` event of one round of this
  sampling applied to ``event`` (built by :func:`dpfl.privacy.accounting.events.sampled_event`,
  the single implementation shared with the ledger);
* ``describe() -> dict`` — a JSON-serializable description; a ledger built for one sampler
  refuses rounds that report another (:class:`dpfl.privacy.accounting.ledger.PrivacyLedger`).

Because the accountant takes the sampler object itself, the sampling the engine performs and the
sampling the accountant assumes cannot disagree (pfl's "simulate fixed-size cohorts, account for
Poisson" mistake is unrepresentable).

This module imports only :mod:`dpfl.errors`, :mod:`dpfl.rng`, :mod:`dpfl.privacy.accounting.events` and
:mod:`dpfl.privacy.mechanisms.draw` from dpfl.

References:
    004 Algorithm 1 line 3 (Poisson sampling with probability p); 000 Algorithm 1 and 003 §IV
    (K of N clients without replacement, q = K/N); dp_accounting ``PoissonSampledDpEvent`` and
    ``SampledWithoutReplacementDpEvent``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import torch
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import sampled_event, validate_sampling
from dpfl.privacy.mechanisms.draw import rand, randperm
from dpfl.rng import CsprngGenerator, NoiseGenerator

__all__ = ["AllClients", "ClientSampler", "FixedSizeSampler", "PoissonSampler", "sampler_from_description"]


def _check_num_clients(num_clients: int) -> int:
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ConfigError(f"`num_clients` must be a positive integer. Found {num_clients!r}.")
    return num_clients


def _check_generator(generator: NoiseGenerator) -> None:
    if not isinstance(generator, (torch.Generator, CsprngGenerator)):
        raise ConfigError(
            f"`generator` must be a torch.Generator or a dpfl.rng.CsprngGenerator (dpfl never uses a global RNG). "
            "Found "
            f"{type(generator).__name__}."
        )


class ClientSampler(abc.ABC):
    """Base of the samplers: shared ``wrap_event`` through the sampler's own description."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-serializable description (what the ledger checks every round)."""

    @abc.abstractmethod
    def sample(self, num_clients: int, generator: NoiseGenerator) -> torch.Tensor:
        """Sorted ids of this round's cohort, drawn only from ``generator``."""

    def wrap_event(self, event: dpe.DpEvent, num_clients: int) -> dpe.DpEvent:
        """One round of this sampling applied to ``event`` (no wrapper for full participation)."""
        return sampled_event(event, self.describe(), _check_num_clients(num_clients))

    def check(self, num_clients: int) -> None:
        """Raise ConfigError if this sampler cannot sample from ``num_clients`` clients."""
        validate_sampling(self.describe(), _check_num_clients(num_clients))


@dataclass(frozen=True)
class AllClients(ClientSampler):
    """Every client takes part in every round (full participation; no amplification).

    >>> AllClients().sample(4, torch.Generator().manual_seed(0)).tolist()
    [0, 1, 2, 3]
    """

    def describe(self) -> dict[str, Any]:
        return {"kind": "all"}

    def sample(self, num_clients: int, generator: NoiseGenerator) -> torch.Tensor:
        """All ids ``0..num_clients-1`` (the generator is not consumed)."""
        _check_generator(generator)
        return torch.arange(_check_num_clients(num_clients), dtype=torch.long)


@dataclass(frozen=True)
class FixedSizeSampler(ClientSampler):
    """K of N clients uniformly without replacement each round (000's and 003's K-random scheme).

    Accounted as ``SampledWithoutReplacementDpEvent`` — certified by RDP under replace-one
    (Wang, Balle, Kasiviswanathan 2019); dp_accounting's PLD does not support it.

    Args:
        num_sampled: K, the cohort size.
    """

    num_sampled: int

    def __post_init__(self) -> None:
        validate_sampling({"kind": "fixed_size", "num_sampled": self.num_sampled})

    def describe(self) -> dict[str, Any]:
        return {"kind": "fixed_size", "num_sampled": int(self.num_sampled)}

    def sample(self, num_clients: int, generator: NoiseGenerator) -> torch.Tensor:
        """K distinct sorted ids drawn uniformly (a random permutation's first K).

        Raises:
            ConfigError: ``num_sampled > num_clients``, naming both values.
        """
        _check_generator(generator)
        self.check(num_clients)
        perm = randperm(num_clients, generator)
        return torch.sort(perm[: self.num_sampled]).values.to(torch.long)


@dataclass(frozen=True)
class PoissonSampler(ClientSampler):
    """Each client independently with probability q each round (004 Algorithm 1, line 3).

    The cohort size is random — Binomial(N, q) — and **may be empty**: the engine must handle an
    empty cohort (skip training, and broadcast nothing or only server noise; the ledger still
    records whatever is released). Accounted as ``PoissonSampledDpEvent`` under add/remove.

    Args:
        sample_rate: q in (0, 1].
    """

    sample_rate: float

    def __post_init__(self) -> None:
        validate_sampling({"kind": "poisson", "sample_rate": self.sample_rate})

    def describe(self) -> dict[str, Any]:
        return {"kind": "poisson", "sample_rate": float(self.sample_rate)}

    def sample(self, num_clients: int, generator: NoiseGenerator) -> torch.Tensor:
        """Sorted ids of the clients whose independent U(0,1) draw falls below q (maybe empty)."""
        _check_generator(generator)
        n = _check_num_clients(num_clients)
        draws = rand(n, generator, dtype=torch.float64)
        return torch.nonzero(draws < self.sample_rate, as_tuple=False).reshape(-1).to(torch.long)


def sampler_from_description(descriptor: dict[str, Any]) -> ClientSampler:
    """Rebuild a sampler from ``describe()`` output (e.g. from a stored run).

    >>> sampler_from_description({"kind": "poisson", "sample_rate": 0.5})
    PoissonSampler(sample_rate=0.5)
    """
    d = validate_sampling(descriptor)
    if d["kind"] == "all":
        return AllClients()
    if d["kind"] == "fixed_size":
        return FixedSizeSampler(d["num_sampled"])
    if d["kind"] == "poisson":
        return PoissonSampler(d["sample_rate"])
    from dpfl.sampling import schemas  # they build on this module

    if d["kind"] == "min_separation":
        return schemas.MinSeparationSampler(min_separation=d["min_separation"],
                                            max_participations=d["max_participations"])
    if d["kind"] == "cyclic_poisson":
        return schemas.CyclicPoissonSampler(groups=d["groups"], sample_rate=d["sample_rate"])
    fields = {k: v for k, v in d.items() if k != "kind"}
    return schemas.AvailabilitySampler(**fields)
