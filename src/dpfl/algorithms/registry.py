"""Algorithms by name. An unknown name is an error that lists the valid names."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from dpfl.algorithms.base import Algorithm
from dpfl.algorithms.fedavg import FedAvg
from dpfl.algorithms.options import parse_options
from dpfl.config import AlgorithmConfig, AvailabilityConfig, PrivacyConfig, RunConfig, SamplingConfig
from dpfl.errors import ConfigError
from dpfl.sampling import AllClients, FixedSizeSampler, PoissonSampler
from dpfl.sampling.schemas import AvailabilitySampler, CyclicPoissonSampler, MinSeparationSampler


def build_sampler(cfg: SamplingConfig, num_clients: int) -> Any:
    """The client sampler a config asks for, checked against the population size."""
    if cfg.kind == "all":
        return AllClients()
    if cfg.kind == "fixed":
        if cfg.clients_per_round is None:
            raise ConfigError("`sampling.clients_per_round` is required when `sampling.kind` is 'fixed'.")
        if cfg.clients_per_round > num_clients:
            raise ConfigError(
                f"`sampling.clients_per_round` ({cfg.clients_per_round}) exceeds the number of clients ({num_clients})."
            )
        return FixedSizeSampler(cfg.clients_per_round)
    if cfg.kind in ("min_separation", "cyclic_poisson", "availability"):
        return _schema_sampler(cfg, num_clients)
    if cfg.sample_rate is None:
        raise ConfigError("`sampling.sample_rate` is required when `sampling.kind` is 'poisson'.")
    return PoissonSampler(cfg.sample_rate)


def _schema_sampler(cfg: SamplingConfig, num_clients: int) -> Any:
    """A participation schema (:mod:`dpfl.sampling.schemas`), checked against the population."""
    b = cfg.min_separation
    assert b is not None  # the config's validator requires it
    if b > num_clients and cfg.kind != "availability":
        raise ConfigError(f"`sampling.min_separation` ({b}) exceeds the number of clients ({num_clients}): some "
                          "rounds would have nobody to take part.")
    if cfg.kind == "min_separation":
        return MinSeparationSampler(min_separation=b, max_participations=cfg.max_participations)
    if cfg.kind == "cyclic_poisson":
        if cfg.sample_rate is None:
            raise ConfigError("`sampling.sample_rate` is required when `sampling.kind` is 'cyclic_poisson' (the rate "
                              "at which round t samples group t mod b).")
        return CyclicPoissonSampler(groups=b, sample_rate=cfg.sample_rate)
    a = cfg.availability or AvailabilityConfig()
    return AvailabilitySampler(min_separation=b, max_participations=cfg.max_participations, period=a.period,
                               window=a.window, checkin_rate=a.checkin_rate, peak=a.peak, spread=a.spread,
                               max_cohort=a.max_cohort, seed=a.seed)


@dataclass(frozen=True)
class BuildContext:
    """What an algorithm may know when it is built (all public, data-independent facts)."""

    config: RunConfig
    num_clients: int
    client_sizes: torch.Tensor  # samples per client
    num_params: int

    @property
    def privacy(self) -> PrivacyConfig:
        return self.config.privacy


def _fedavg(options: dict[str, Any], sampler: Any, ctx: BuildContext) -> Algorithm:
    from dpfl.algorithms.options import FedAvgOptions

    opts = parse_options(FedAvgOptions, options, "fedavg")
    return FedAvg(sampler, clip_range=None if opts.clip_radius is None else (opts.clip_center, opts.clip_radius))


Factory = Callable[[dict[str, Any], Any, BuildContext], Algorithm]

# Each module listed here exposes ``ALGORITHMS: dict[str, Factory]`` (its names and builders).
# A module that fails to import is an error, never a silently missing algorithm.
_ALGORITHM_MODULES = (
    "dpfl.algorithms.dp_fedavg",
    "dpfl.algorithms.udp",
    "dpfl.algorithms.nbafl",
    "dpfl.algorithms.ldp_fl",
    "dpfl.algorithms.midp",
    "dpfl.algorithms.dp_sgd",
    "dpfl.algorithms.dp_ftrl",
)


def algorithms() -> dict[str, Factory]:
    """Every algorithm name and its builder."""
    found: dict[str, Factory] = {"fedavg": _fedavg}
    for name in _ALGORITHM_MODULES:
        module = importlib.import_module(name)
        found.update(module.ALGORITHMS)
    return found


def build_algorithm(cfg: AlgorithmConfig, sampler: Any, ctx: BuildContext) -> Algorithm:
    table = algorithms()
    if cfg.name not in table:
        raise ConfigError(f"unknown algorithm {cfg.name!r}; valid: {sorted(table)}")
    if getattr(sampler, "memory", False) and cfg.name not in SCHEMA_ALGORITHMS:
        # the other algorithms' claims and calibrations assume a random sample (004's Poisson, 000's and
        # 003's K-random scheduling): under a participation schema they would claim an amplification
        raise ConfigError(
            f"`sampling.kind: {sampler.describe()['kind']}` is a participation schema; algorithm {cfg.name!r} "
            f"assumes random client sampling. Use one of {sorted(SCHEMA_ALGORITHMS)} (dp-ftrl with "
            "`mechanism: independent` is DP-FedAvg certified without amplification).")
    return table[cfg.name](dict(cfg.options), sampler, ctx)


# the algorithms whose privacy statements are made for a participation schema (dpfl.sampling.schemas)
SCHEMA_ALGORITHMS = frozenset({"dp-ftrl", "fedavg"})
