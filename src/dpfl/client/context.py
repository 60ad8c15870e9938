"""What a client works with: its data, the local problem, the result of local training, and
what it may know about the round. Shared by the simulation engines and the Flower client."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dpfl.client.layout import ParamLayout
from dpfl.client.local import LocalTraining
from dpfl.errors import ConfigError
from dpfl.models.losses import LossFn, check_loss
from dpfl.models.validate import check_model
from dpfl.rng import SeedSequence


@dataclass
class ClientData:
    """Training samples and which of them each client holds.

    Attributes:
        x: all training inputs [N, ...] (float32, on the training device).
        y: all training targets [N] (int64).
        client_indices: per client, a LongTensor of indices into ``x``.
    """

    x: torch.Tensor
    y: torch.Tensor
    client_indices: list[torch.Tensor]

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ConfigError(f"inputs and targets differ in length: {self.x.shape[0]} vs {self.y.shape[0]}")
        for i, idx in enumerate(self.client_indices):
            if idx.numel() == 0:
                raise ConfigError(f"client {i} holds no samples; every client needs at least one")

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    def sizes(self, clients: Sequence[int] | None = None) -> torch.Tensor:
        ids = range(self.num_clients) if clients is None else clients
        return torch.tensor([self.client_indices[int(i)].numel() for i in ids], dtype=torch.long)


ObjectiveTerm = Callable[[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]], torch.Tensor]
"""A data-independent term of the local objective: (client parameters {name: [K, ...]},
round-start global parameters {name: [...]}) -> per-client value [K] (e.g. BLUR, 004 eq. 5)."""


@dataclass
class LocalProblem:
    """The model and objective every client minimizes locally.

    Attributes:
        module: the model (its own parameters are ignored; parameters come from the flat vector).
            Checked by :func:`dpfl.models.validate.check_model`: no BatchNorm, no persistent
            buffers (use GroupNorm / LayerNorm).
        loss_kind: "cross_entropy" or "hinge" (see :func:`dpfl.models.per_sample_loss`), or a
            per-sample loss function ``(outputs, targets) -> losses`` (:data:`dpfl.models.LossFn`:
            no reduction, any leading dimensions, vmap-compatible), e.g. label-smoothed cross
            entropy.
        local: local training settings.
        l2_penalty: κ of 000 eq. 32 applied to ``penalized_params`` (0 for none).
        extra_terms: further data-independent objective terms (see :data:`ObjectiveTerm`).
    """

    module: nn.Module
    local: LocalTraining
    loss_kind: str | LossFn = "cross_entropy"
    l2_penalty: float = 0.0
    penalized_params: tuple[str, ...] = ()
    extra_terms: tuple[ObjectiveTerm, ...] = ()
    layout: ParamLayout = field(init=False)

    def __post_init__(self) -> None:
        check_model(self.module)
        check_loss(self.loss_kind)
        self.module.eval()  # no dropout randomness outside our generators
        self.layout = ParamLayout.of(self.module)


@dataclass
class LocalResult:
    """The cohort after local training.

    Attributes:
        params: local parameters [K, P].
        train_loss: mean local objective over the client's steps [K].
        num_samples: samples held by each client [K].
        final_grads: with ``local.final_gradient``, the gradient of each client's full-data loss
            at its final local weights [K, P]; else None.
    """

    params: torch.Tensor
    train_loss: torch.Tensor
    num_samples: torch.Tensor
    final_grads: torch.Tensor | None = None


@dataclass(frozen=True)
class RoundInfo:
    """What the parts of a round may know about it.

    ``clients`` are the ids of the rows being processed: the whole cohort on the server and in
    simulation; on a real client (Flower) only its own id, with ``cohort_size`` telling it how
    many clients the round's noise is split over (it is not told who the others are).
    """

    round_idx: int
    num_clients: int
    clients: torch.Tensor  # ids of the rows, sorted
    seeds: SeedSequence
    cohort_size: int | None = None  # None: the rows are the whole cohort
    # The round's frozen plan (``dpfl.algorithms.private.RoundPlan``: every noise number and the
    # releases they imply), fixed once by the round loop before anything runs and read by the
    # client step, the aggregate, the gate and the cohort. None where nobody fixed it (a real
    # client, a unit test): the algorithm then computes it from the same public facts.
    plan: Any = None
    # Hidden participation on real clients: the rows are the whole population and each client
    # decides with its own secret coin of probability q (stream (t, k, "coin")) whether its update
    # enters the secure sum; nobody else learns the outcome. False in simulation and elsewhere.
    hidden_participation: bool = False
    # Simulation's shortcut under secure aggregation (the vectorized and Ray engines): nobody sees
    # a single upload, only the modular sum, so the server step draws the sum of the rows' noise
    # shares as one Skellam of their summed variance (sums of Skellams are Skellam: the same
    # distribution) instead of one per row. False: each row draws its own share from its stream,
    # as a client does (the sequential engine, real clients).
    summed_shares: bool = False

    @property
    def cohort(self) -> int:
        """The number of clients scheduled this round."""
        return int(self.clients.numel()) if self.cohort_size is None else int(self.cohort_size)

    def for_clients(self, clients: torch.Tensor) -> RoundInfo:
        """The same round seen for a subset of its rows (the cohort size is kept)."""
        return dataclasses.replace(self, clients=clients, cohort_size=self.cohort)

    def with_plan(self, plan: Any) -> RoundInfo:
        """The same round with its plan fixed."""
        return dataclasses.replace(self, plan=plan)
