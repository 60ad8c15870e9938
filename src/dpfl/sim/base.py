"""The interface of the simulation engines.

An engine trains a cohort of clients from the same global parameters and returns their local
parameters stacked as [K, P]. The vectorized engine (:mod:`dpfl.sim.vectorized`) and the
sequential reference (:mod:`dpfl.sim.sequential`) must give the same numbers for the same seed.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch

from dpfl.client.context import ClientData, LocalProblem, LocalResult
from dpfl.rng import SeedSequence

__all__ = ["ClientData", "Engine", "LocalProblem", "LocalResult"]


class Engine(abc.ABC):
    """Interface of the simulation engines."""

    name = "engine"

    def __init__(self, problem: LocalProblem, data: ClientData, seeds: SeedSequence) -> None:
        self.problem = problem
        self.data = data
        self.seeds = seeds

    @abc.abstractmethod
    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        """Train ``clients`` from ``global_params`` [P] in round ``round_idx``."""
