"""Algorithms by name. An unknown name is an error that lists the valid names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpfl.algorithms.base import Algorithm
from dpfl.algorithms.fedavg import FedAvg
from dpfl.errors import ConfigError
from dpfl.experiments.config import AlgorithmConfig, SamplingConfig
from dpfl.sampling import AllClients, FixedSizeSampler, PoissonSampler


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
    if cfg.sample_rate is None:
        raise ConfigError("`sampling.sample_rate` is required when `sampling.kind` is 'poisson'.")
    return PoissonSampler(cfg.sample_rate)


def _fedavg(options: dict[str, Any], sampler: Any) -> Algorithm:
    if options:
        raise ConfigError(f"fedavg takes no `algorithm.options`; found {sorted(options)}.")
    return FedAvg(sampler)


ALGORITHMS: dict[str, Callable[[dict[str, Any], Any], Algorithm]] = {
    "fedavg": _fedavg,
}


def build_algorithm(cfg: AlgorithmConfig, sampler: Any) -> Algorithm:
    if cfg.name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {cfg.name!r}; valid: {sorted(ALGORITHMS)}")
    return ALGORITHMS[cfg.name](dict(cfg.options), sampler)
