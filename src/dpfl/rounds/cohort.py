"""Where a round's cohort trains: the :class:`Cohort` protocol and its implementations.

The round loop (:mod:`dpfl.rounds.loop`) is the same for every runtime; only the cohort differs:

* :class:`InProcessCohort` — the simulator: an engine (vectorized, sequential or Ray shards)
  trains the cohort and the server step runs on the stacked rows; every upload arrives. With the
  vectorized engine and an algorithm that needs only the sum of the uploads
  (``Algorithm.sums_uploads``), the cohort is streamed instead: each block of clients is trained,
  run through the client step and folded into a running sum before the next block trains, so
  the cohort's [K, P] rows never exist at once.
  The canary audit is an in-process cohort whose server step adds canary clients
  (:class:`dpfl.audit.canary.CanaryAlgorithm`).
* :class:`UploadCohort` — clients elsewhere (Flower SuperNodes): a transport sends the global
  model and returns the uploads that arrived; the algorithm aggregates them. Uploads may be
  lost, late or rejected, so the loop charges them before the aggregate is used.
* :class:`DryCohort` — ``dpfl account CONFIG``: no training, no aggregation; the loop still
  samples, calibrates, gates and records the releases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from dpfl.algorithms.base import Algorithm, RoundOutput, Uploads
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.sim.base import Engine

EmitFn = Callable[[str, str, "int | None"], None]


@dataclass
class Collected:
    """What reached the server in a round.

    Attributes:
        clients: ids of the clients whose upload arrived (a subset of the cohort).
        num_samples: their sample counts.
        train_loss: their mean local objective (None when nothing trained).
        payload: what the cohort's :meth:`Cohort.aggregate` needs (in process the stacked local
            result, or a streamed cohort's folded uploads; the uploads of a transport; None in a
            dry run).
    """

    clients: torch.Tensor
    num_samples: torch.Tensor
    train_loss: torch.Tensor | None
    payload: Any = None

    @property
    def num_rows(self) -> int:
        return int(self.clients.numel())


class ServerStep(Protocol):
    """A server step the in-process cohort calls, and its checkpoint state (every
    :class:`~dpfl.algorithms.base.Algorithm` is one)."""

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Cohort(Protocol):
    """Trains a round's cohort and turns what arrives into the next global model.

    Attributes:
        tag: appended to the run id (``<id>-<tag>``) when the run differs from the in-process
            simulation of the same config (a deployment, an audit); None otherwise.
        remote: uploads cross a network: they may be lost, late or rejected, and a redo of a
            round draws fresh noise, so the loop charges each round before using its aggregate.
        trains: False for a dry run (no training, no evaluation, no model).
        hidden_participation: every client of the population is asked each round and decides
            with its own secret coin whether its update is in the secure sum: the loop does not
            sample, the round's cohort is the whole population.
    """

    tag: str | None
    remote: bool
    trains: bool
    hidden_participation: bool

    def fewest_in_sum(self, cohort_size: int) -> int | None:
        """The fewest uploads a completed secure sum of a cohort of ``cohort_size`` can hold (what
        the server may see at worst), or None when uploads are not securely summed."""
        ...

    def collect(self, params: torch.Tensor, info: RoundInfo, emit: EmitFn) -> Collected:
        """Train ``info.clients`` from ``params``; what reached the server."""
        ...

    def aggregate(self, params: torch.Tensor, collected: Collected, info: RoundInfo) -> RoundOutput:
        """The next global model from what arrived (at least one row)."""
        ...

    def empty_round(self, params: torch.Tensor, info: RoundInfo) -> RoundOutput:
        """A round whose cohort is empty but that still releases (fixed-denominator noise)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The server step's checkpoint state."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def unused_uploads(self, *, final: bool, emit: EmitFn) -> list[tuple[int, int]] | None:
        """(round, client) of uploads the server received but did not aggregate since the last
        call (rejected, late), or None when the cohort cannot have any."""
        ...

    def outstanding(self) -> list[tuple[int, int]]:
        """(round, client) of uploads still expected (they may reach the server later)."""
        ...

    def close(self) -> None: ...


class InProcessCohort:
    """The simulator: ``engine`` trains the stacked cohort, ``step.server_step`` aggregates; or,
    streamed (:meth:`streams`), the engine trains block by block, ``algorithm.client_step`` runs on
    each block and ``algorithm.accumulate`` folds it, and ``algorithm.aggregate`` takes the sum.
    Both draw the same numbers: every client's from its own streams, the server's once per round.

    Args:
        engine: the engine (vectorized, sequential or Ray shards).
        algorithm: the run's algorithm.
        step: the server step to call (default: the algorithm; an audit passes its canary wrapper,
            whose ``tag`` then names the run).
    """

    remote = False
    trains = True
    hidden_participation = False

    def __init__(self, engine: Engine, algorithm: Algorithm, step: ServerStep | None = None) -> None:
        self.engine = engine
        self.algorithm = algorithm
        self.step: ServerStep = step if step is not None else algorithm
        self.tag: str | None = getattr(step, "tag", "wrapped") if step is not None else None

    def fewest_in_sum(self, cohort_size: int) -> int | None:
        return None

    def streams(self) -> bool:
        """Whether rounds are streamed: the engine trains in blocks (``train_blocks``), the
        algorithm needs only the uploads' sum, and no wrapper replaces its server step (an
        audit's canaries join the stacked rows)."""
        return (self.step is self.algorithm and self.algorithm.sums_uploads
                and callable(getattr(self.engine, "train_blocks", None)))

    def _server_view(self, info: RoundInfo) -> RoundInfo:
        if self.engine.name != "sequential":  # the reference engine draws every client's share itself
            return dataclasses.replace(info, summed_shares=True)
        return info

    def collect(self, params: torch.Tensor, info: RoundInfo, emit: EmitFn) -> Collected:
        if self.streams():
            uploads = self._stream(params, self._server_view(info))
            return Collected(uploads.clients, uploads.num_samples, uploads.train_loss, uploads)
        local = self.engine.train(params, info.clients.tolist(), info.round_idx)
        return Collected(info.clients, local.num_samples, local.train_loss, local)

    def _stream(self, params: torch.Tensor, info: RoundInfo) -> Uploads:
        """Train, client-step and fold the cohort block by block (each block's rows are dropped
        before the next block trains); the folded uploads, rows sorted by client id."""
        train_blocks = self.engine.train_blocks  # type: ignore[attr-defined]
        row_bytes = self.algorithm.client_step_bytes(int(params.numel()))
        acc: Uploads | None = None
        for ids, local in train_blocks(params, info.clients.tolist(), info.round_idx, row_bytes=row_bytes):
            block = self.algorithm.client_step(params, local, info.for_clients(ids))
            del local
            acc = self.algorithm.accumulate(acc, block)
            del block
        if acc is None:
            raise ValueError(f"round {info.round_idx}: the engine trained no block of the "
                             f"{int(info.clients.numel())} clients")
        return acc

    def aggregate(self, params: torch.Tensor, collected: Collected, info: RoundInfo) -> RoundOutput:
        info = self._server_view(info)
        if isinstance(collected.payload, Uploads):  # a streamed round: the client step already ran
            return self.algorithm.aggregate(params, collected.payload, info)
        return self.step.server_step(params, collected.payload, info)

    def empty_round(self, params: torch.Tensor, info: RoundInfo) -> RoundOutput:
        return self.algorithm.aggregate(params, Uploads.empty(int(params.numel()), params.device), info)

    def state_dict(self) -> dict[str, Any]:
        return self.step.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step.load_state_dict(state)

    def unused_uploads(self, *, final: bool, emit: EmitFn) -> list[tuple[int, int]] | None:
        return None

    def outstanding(self) -> list[tuple[int, int]]:
        return []

    def close(self) -> None:
        close = getattr(self.engine, "close", None)  # e.g. the Ray engine's actors
        if close is not None:
            close()


Transport = Callable[[torch.Tensor, RoundInfo, Algorithm, EmitFn], Uploads]
"""Trains a round's cohort somewhere else (e.g. on Flower SuperNodes) and returns the valid
uploads that arrived: (global params, round info, algorithm, emit(kind, message, round)) → rows.
It may also offer ``tag``, ``hidden_participation``, ``fewest_in_sum(cohort_size)``,
``unused_uploads(final=, emit=)`` and ``outstanding()``."""


class UploadCohort:
    """Clients elsewhere: ``transport`` runs local training and the algorithm's client step on
    the clients' machines and returns the uploads that arrived; the algorithm aggregates them."""

    remote = True
    trains = True

    def __init__(self, transport: Transport, algorithm: Algorithm) -> None:
        self.transport = transport
        self.algorithm = algorithm
        self.tag: str | None = getattr(transport, "tag", "remote")
        # the transport asks every client and each decides with its own secret coin (hidden
        # participation): the loop does not sample, the round's rows are the whole population
        self.hidden_participation = bool(getattr(transport, "hidden_participation", False))

    def fewest_in_sum(self, cohort_size: int) -> int | None:
        """The transport's fewest uploads a completed secure sum can hold (None: no secure sum)."""
        fewest = getattr(self.transport, "fewest_in_sum", None)
        return None if fewest is None else fewest(cohort_size)

    def collect(self, params: torch.Tensor, info: RoundInfo, emit: EmitFn) -> Collected:
        uploads = self.transport(params, info, self.algorithm, emit)
        return Collected(uploads.clients, uploads.num_samples, uploads.train_loss if uploads.num_rows else None,
                         uploads)

    def aggregate(self, params: torch.Tensor, collected: Collected, info: RoundInfo) -> RoundOutput:
        return self.algorithm.aggregate(params, collected.payload, info)

    def empty_round(self, params: torch.Tensor, info: RoundInfo) -> RoundOutput:
        return self.algorithm.aggregate(params, Uploads.empty(int(params.numel()), params.device), info)

    def state_dict(self) -> dict[str, Any]:
        return self.algorithm.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.algorithm.load_state_dict(state)

    def unused_uploads(self, *, final: bool, emit: EmitFn) -> list[tuple[int, int]] | None:
        seen = getattr(self.transport, "unused_uploads", None)
        return None if seen is None else list(seen(final=final, emit=emit))

    def outstanding(self) -> list[tuple[int, int]]:
        still_out: Callable[[], list[tuple[int, int]]] = getattr(self.transport, "outstanding", list)
        return list(still_out())

    def close(self) -> None:
        pass


class DryCohort:
    """No training and no aggregation: the loop samples, calibrates, gates and records only.

    Every scheduled upload is taken to arrive (a deployment that loses uploads records what its
    arrivals really released)."""

    tag: str | None = None
    remote = False
    trains = False
    hidden_participation = False

    def __init__(self, client_sizes: Callable[[list[int]], torch.Tensor]) -> None:
        self.client_sizes = client_sizes

    def fewest_in_sum(self, cohort_size: int) -> int | None:
        return None

    def collect(self, params: torch.Tensor, info: RoundInfo, emit: EmitFn) -> Collected:
        return Collected(info.clients, self.client_sizes(info.clients.tolist()), None)

    def aggregate(self, params: torch.Tensor, collected: Collected, info: RoundInfo) -> RoundOutput:
        return RoundOutput(params)

    def empty_round(self, params: torch.Tensor, info: RoundInfo) -> RoundOutput:
        return RoundOutput(params)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def unused_uploads(self, *, final: bool, emit: EmitFn) -> list[tuple[int, int]] | None:
        return None

    def outstanding(self) -> list[tuple[int, int]]:
        return []

    def close(self) -> None:
        pass
