"""What an algorithm is: a small composition of named parts run once per round.

An algorithm decides which clients take part (its sampler), how they train (the local problem
options), what each client does to its update before sending it (client transforms), and how the
server turns the cohort's messages into the next global model (aggregation plus server-side
transforms). Engines (simulation, Flower) call these parts and contain no algorithm logic.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from dpfl.client.context import LocalResult, RoundInfo
from dpfl.rng import SeedSequence


@dataclass
class RoundOutput:
    """The new global model and what the round measured."""

    global_params: torch.Tensor
    metrics: dict[str, Any] = field(default_factory=dict)


class Algorithm(abc.ABC):
    """Base of every algorithm; subclasses are registered in :mod:`dpfl.algorithms.registry`."""

    name: ClassVar[str] = "algorithm"

    @abc.abstractmethod
    def sample(self, info_round: int, num_clients: int, seeds: SeedSequence) -> torch.Tensor:
        """The cohort of round ``info_round`` (sorted client ids)."""

    @abc.abstractmethod
    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        """Client transforms on the cohort's updates, then aggregation into the new global model."""

    def should_stop(self, round_idx: int) -> str | None:
        """A reason to end the run before round ``round_idx`` (e.g. CRD lowered T), else None."""
        del round_idx
        return None

    def state_dict(self) -> dict[str, Any]:
        """Mutable algorithm state for checkpoints (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        del state
