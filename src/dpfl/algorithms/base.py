"""What an algorithm is: a small composition of named parts run once per round.

An algorithm decides which clients take part (its sampler), how they train (the local problem
options), what each client does to its update before sending it (client transforms), and how the
server turns the cohort's messages into the next global model (aggregation plus server-side
transforms). Engines (simulation, Flower) call these parts and contain no algorithm logic.

The round is split where the wire is: :meth:`Algorithm.client_step` is everything a client does
to its own trained model before sending it (clip, noise, randomize — row k depends only on client
k's data and client k's own random stream), and :meth:`Algorithm.aggregate` is everything the
server does with what arrives. In simulation :meth:`Algorithm.server_step` runs both on the
stacked cohort; the Flower adapter runs ``client_step`` on each SuperNode for its one row and
``aggregate`` in the ServerApp, so the same code — and the same random draws — serve both.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from dpfl.client.context import LocalResult, RoundInfo
from dpfl.rng import SERVER, SeedSequence


@dataclass
class Uploads:
    """What the clients of a round send to the server, stacked in the order of ``clients``.

    Attributes:
        clients: ids of the rows [K] (a subset of the cohort when clients dropped out).
        params: the vector each client sends [K, P] (model or update: the algorithm's choice).
        num_samples: |D_k| of each row [K] (public: declared by the client, fixed by the run).
        train_loss: mean local objective of each row [K].
        declared: per-row values the client states about what it did, e.g. ``noise_std`` [K];
            the server checks them against its own plan and rejects a row that disagrees.
        diagnostics: per-row values for the simulation's metrics only (e.g. exact update norms):
            never sent over the wire, so empty on Flower; ``aggregate`` must not need them.
        secure_sum: under secure aggregation on real clients, the modular sum of the rows' integer
            uploads as the protocol delivered it (int64 residues [P']); ``params`` is then empty
            [0, P'] and ``clients`` are the clients whose uploads are in the sum. None otherwise
            (in simulation the algorithm sums ``params`` itself).
        shuffled: split & shuffle (001 §4): when an anonymizing shuffler process already mixed
            the rows, the per-id multisets it produced (:class:`dpfl.server.shuffle.IdMultisets`,
            no client ids, no order) and ``params`` is empty [0, P]; else None (in simulation
            the algorithm's own trusted shuffler mixes ``params``).
        params_sum: in simulation, a streamed cohort (:meth:`Algorithm.accumulate`): the sum of
            the rows' ``params`` [P], folded block by block, and ``params`` is empty [0, P] (the
            rows were dropped after each block); every other per-row field is kept. None otherwise.
    """

    clients: torch.Tensor
    params: torch.Tensor
    num_samples: torch.Tensor
    train_loss: torch.Tensor
    declared: dict[str, torch.Tensor] = field(default_factory=dict)
    shuffled: Any = None
    diagnostics: dict[str, torch.Tensor] = field(default_factory=dict)
    secure_sum: torch.Tensor | None = None
    params_sum: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        return int(self.clients.numel())

    def summed_params(self) -> torch.Tensor:
        """Σ_k params_k [P]: ``params_sum`` for a streamed cohort, else the sum of the rows."""
        return self.params_sum if self.params_sum is not None else self.params.sum(0)

    def fold(self, block: Uploads) -> Uploads:
        """These rows and ``block``'s as one streamed cohort: the sum of their ``params`` (in their
        dtype: floats up to summation order; int64 exact modulo 2^64, so a modular sum of
        residues is unchanged), the other per-row fields concatenated and sorted by client id."""
        if self.secure_sum is not None or block.secure_sum is not None or self.shuffled is not None \
                or block.shuffled is not None:
            raise ValueError("only simulation's uploads fold into a streamed cohort (not a protocol's secure "
                             "sum or a shuffler's multisets)")
        if self.params.shape[1:] != block.params.shape[1:]:
            raise ValueError(f"uploads of length {tuple(block.params.shape[1:])} do not fold into uploads of "
                             f"length {tuple(self.params.shape[1:])}")
        total = self.summed_params() + block.summed_params().to(self.params.device)
        clients = torch.cat([self.clients, block.clients])
        order = torch.argsort(clients)

        def rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.cat([a, b])[order]

        keys = set(self.declared) | set(block.declared)
        missing = keys - (set(self.declared) & set(block.declared))
        if missing and self.num_rows and block.num_rows:
            raise ValueError(f"uploads declaring {sorted(missing)} in some blocks only do not fold")
        empty = torch.zeros(0, dtype=torch.float64)
        return Uploads(
            clients[order], torch.empty_like(self.params[:0]), rows(self.num_samples, block.num_samples),
            rows(self.train_loss, block.train_loss),
            {k: rows(self.declared.get(k, empty), block.declared.get(k, empty)) for k in keys},
            None,
            {k: rows(self.diagnostics[k], block.diagnostics[k])
             for k in set(self.diagnostics) & set(block.diagnostics)},
            params_sum=total,
        )

    @staticmethod
    def empty(num_params: int, device: torch.device | str = "cpu") -> Uploads:
        """No rows: what the server has in a round whose cohort is empty or never arrived."""
        return Uploads(torch.zeros(0, dtype=torch.long), torch.zeros(0, num_params, device=device),
                       torch.zeros(0, dtype=torch.long), torch.zeros(0))

    def select(self, rows: torch.Tensor) -> Uploads:
        """The rows at positions ``rows`` (a LongTensor or a boolean mask)."""
        return Uploads(self.clients[rows], self.params[rows], self.num_samples[rows], self.train_loss[rows],
                       {k: v[rows] for k, v in self.declared.items()}, None,
                       {k: v[rows] for k, v in self.diagnostics.items()})

    @staticmethod
    def cat(parts: list[Uploads]) -> Uploads:
        """Rows of several uploads, sorted by client id."""
        clients = torch.cat([p.clients for p in parts])
        order = torch.argsort(clients)
        keys = set().union(*(p.declared for p in parts)) if parts else set()
        diag = set.intersection(*(set(p.diagnostics) for p in parts)) if parts else set()
        return Uploads(
            clients[order],
            torch.cat([p.params for p in parts])[order],
            torch.cat([p.num_samples for p in parts])[order],
            torch.cat([p.train_loss for p in parts])[order],
            {k: torch.cat([p.declared[k] for p in parts])[order] for k in keys},
            None,
            {k: torch.cat([p.diagnostics[k] for p in parts])[order] for k in diag},
        )


@dataclass
class RoundOutput:
    """The new global model and what the round measured."""

    global_params: torch.Tensor
    metrics: dict[str, Any] = field(default_factory=dict)


class Algorithm(abc.ABC):
    """Base of every algorithm; subclasses are registered in :mod:`dpfl.algorithms.registry`."""

    name: ClassVar[str] = "algorithm"
    # The client sampler (``dpfl.sampling``): draws the cohort and describes itself to the
    # accountant, so the sampling performed and the sampling accounted are the same object.
    sampler: Any

    def sample(self, info_round: int, num_clients: int, seeds: SeedSequence) -> torch.Tensor:
        """The cohort of round ``info_round`` (sorted client ids), drawn by :attr:`sampler`
        from the server's stream (round, SERVER, "sample").

        The one implementation for every algorithm: what differs between them (all clients,
        fixed-K as NbAFL's K-random scheduling of 003 §V, Poisson) is the sampler object, not
        this method, so no algorithm overrides it and every cohort comes from the same stream.
        """
        if getattr(self.sampler, "memory", False):  # a participation schema (dpfl.sampling.schemas)
            return self.sampler.sample_round(info_round, num_clients,
                                             lambda t: seeds.noise_generator(t, SERVER, "sample"))
        return self.sampler.sample(num_clients, seeds.noise_generator(info_round, SERVER, "sample"))

    # Whether the algorithm is split into client_step / aggregate (needed by the Flower adapter).
    splits_rounds: ClassVar[bool] = False
    # Whether uploads go through an anonymizing shuffler (001 split & shuffle): on Flower they
    # are then sealed for a shuffler SuperNode and ``aggregate`` receives ``Uploads.shuffled``.
    shuffles_uploads: ClassVar[bool] = False
    # Whether ``aggregate`` needs of the rows' ``params`` only their sum (``Uploads.summed_params``)
    # and of everything else only per-row values: the in-process cohort then runs ``client_step``
    # block by block and folds each block into a running sum (:meth:`accumulate`), so the
    # cohort's [K, P] uploads never exist at once (``Uploads.params_sum``).
    sums_uploads: ClassVar[bool] = False
    # Whether a round with an empty cohort still releases something (``aggregate`` is called
    # with no rows), e.g. DP-FedAvg's fixed-denominator noise; otherwise the model is unchanged.
    releases_empty_rounds: ClassVar[bool] = False
    # Local optimizers (``dpfl.client.optim.OPTIMIZER_KINDS``; "sgd" = plain SGD) the algorithm's
    # privacy analysis covers, with the reason; None = any (e.g. the update or model is clipped).
    local_optimizers: ClassVar[frozenset[str] | None] = None
    local_optimizer_reason: ClassVar[str] = ""
    # Whether a client sends its training loss with its upload. A private algorithm's client keeps
    # it (an unnoised function of its data) unless the algorithm needs it and records the exact
    # release that it is (udp-crd's train-loss-rise variant).
    reports_train_loss: bool = False

    def plan(self, info: RoundInfo) -> Any:
        """The round's frozen plan, computed once and read by every part of the round (a private
        algorithm's noise, clip and weights: :class:`dpfl.algorithms.private.PrivateAlgorithm`);
        None for an algorithm without one."""
        return None

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        """Client transforms on the cohort's updates, then aggregation into the new global model."""
        return self.aggregate(global_params, self.client_step(global_params, local, info), info)

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """What the clients ``info.clients`` send after local training (row k: client k only)."""
        raise NotImplementedError(f"{self.name} does not split its round into client and server steps")

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """The new global model from the rows that arrived (``uploads.clients`` ⊆ the cohort)."""
        raise NotImplementedError(f"{self.name} does not split its round into client and server steps")

    def client_step_bytes(self, num_params: int) -> int:
        """Bytes one row of :meth:`client_step` may allocate beyond its local parameters (its
        temporaries): a streamed cohort sizes its blocks to hold them within the engine's budget."""
        return 4 * num_params

    def accumulate(self, acc: Uploads | None, block: Uploads) -> Uploads:
        """The uploads of a streamed cohort so far (``acc``; None before the first block) with
        ``block``'s rows folded in (:meth:`Uploads.fold`); only for :attr:`sums_uploads`."""
        if not self.sums_uploads:
            raise NotImplementedError(f"{self.name} aggregates the stacked uploads; it does not stream a cohort")
        if acc is None:  # fresh tensors, never views: a view would keep the block's rows alive

            def none_of(v: torch.Tensor) -> torch.Tensor:
                return torch.empty((0, *v.shape[1:]), dtype=v.dtype, device=v.device)

            acc = Uploads(none_of(block.clients), none_of(block.params), none_of(block.num_samples),
                          none_of(block.train_loss), {k: none_of(v) for k, v in block.declared.items()}, None,
                          {k: none_of(v) for k, v in block.diagnostics.items()},
                          params_sum=torch.zeros(block.params.shape[1:], dtype=block.params.dtype,
                                                 device=block.params.device))
        return acc.fold(block)

    def declared_plan(self, info: RoundInfo, client: int) -> dict[str, float]:
        """What ``client`` must declare in its upload this round (e.g. its noise std)."""
        del info, client
        return {}

    def client_state(self, client: int | None = None, info: RoundInfo | None = None) -> dict[str, Any]:
        """Server-held state ``client`` needs to run :meth:`client_step` of round ``info`` (default:
        all of it; override to send a client only its own part). ``None``: what every client
        needs. ``info`` is the server's view of the round (its plan fixed), when there is one."""
        del client, info
        return self.state_dict()

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
