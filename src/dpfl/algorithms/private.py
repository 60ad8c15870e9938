"""The privacy side of an algorithm: what each round releases, and what its paper claims.

A private algorithm says, after the cohort is drawn and *before* any training, which releases
the round will make (:class:`dpfl.privacy.accounting.ledger.Release`: per observer, the noise
std and the sensitivity the code enforces). The runner uses that to stop before a round that
would exceed ``privacy.target_epsilon``, records it in the ledger after the round, and stores the
paper's own claimed ε next to the certified one. No formula lives here: calibration and claims
come from :mod:`dpfl.privacy`.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast

import torch

from dpfl.algorithms.base import Algorithm
from dpfl.client.context import RoundInfo
from dpfl.privacy.releases import Observer, Release


class Calibration:
    """What a private algorithm fixes before the run, from its settings and the public facts
    alone (client sizes, cohort size, rounds, δ, the model's size): every noise level the plans
    draw from. Built by a pure function of the algorithm's module (``udp_calibration``,
    ``nbafl_calibration``, ``dpfedavg_calibration``, …) and shown by
    :meth:`PrivateAlgorithm.calibration`. Subclasses are frozen dataclasses.
    """

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (tuples as lists)."""
        assert dataclasses.is_dataclass(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


class RoundPlan(abc.ABC):
    """Every noise number of one round and the releases they imply: a frozen object.

    An algorithm's :meth:`PrivateAlgorithm.plan` builds one per round from its calibration and
    the round's public facts (round index, cohort size, S_t, …); the round loop fixes it once
    (``RoundInfo.plan``) and every part of the round reads that one object: the client step adds
    its noise, the aggregate its server noise and top-ups, the client declares it, the gate and
    the ledger are told its releases. A round therefore cannot declare a cheaper event than the
    noise it draws, and no answer depends on call order or on state cached on the algorithm.
    Subclasses are frozen dataclasses with a ``round_idx`` field (the round they plan).
    """

    round_idx: int

    @abc.abstractmethod
    def releases(self, ids: list[int], num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        """The releases of this round when the rows ``ids`` (with sample counts ``num_samples``)
        are aggregated: each observer's view, for every cohort, the empty one included.
        ``ideal_secure_sum`` prices the what-if of an ideal secure sum (the server sees only the
        sum of the uploads as they are); the Skellam sum of ``privacy.secure_aggregation`` is the
        plan's own (DP-FedAvg's integer pipeline), whatever this flag says."""

    def declared(self, client: int) -> dict[str, float]:
        """What ``client`` must declare in its upload (its noise numbers), checked by the server."""
        del client
        return {}


PlanT = TypeVar("PlanT", bound=RoundPlan)


@dataclass(frozen=True)
class CanaryHooks:
    """How an audit's canary clients (:mod:`dpfl.audit.canary`) enter an algorithm's rounds: their
    rows, sample counts, and the round plan that covers them (the real round's plan, extended:
    nothing on the algorithm is patched). An algorithm that supports audits returns them from
    :meth:`PrivateAlgorithm.canaries`.

    Attributes:
        rows: (global params [P], unit directions [c, P]) → the canaries' upload rows [c, P].
        num_samples: (the real cohort's sample counts) → each canary's sample count.
        extend: (the real round's plan, real cohort size, canaries joining, all canaries) → the
            plan of the rows (real and canary).
        silence: a round plan → the same plan with every noise number 0 (the un-noised mechanism
            whose canary signal the audit's reach is measured against).
    """

    rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    num_samples: Callable[[torch.Tensor], int]
    extend: Callable[[Any, int, int, int], Any]
    silence: Callable[[Any], Any]


class PrivateAlgorithm(Algorithm, Generic[PlanT]):
    """An algorithm whose rounds are recorded in a privacy ledger.

    Class attributes:
        relation: the neighbouring relation its sensitivities are stated under.
        privacy_unit: "client" (a client's whole data) or "record" (one sample).
        claim_comparable: whether the claimed ε is an (ε, δ)-DP ε comparable with the certified one.
    """

    relation: ClassVar[str] = "add_remove"
    privacy_unit: ClassVar[str] = "client"
    # False when the paper's claim is in another notion than (ε, δ)-DP (002's ε-MI-DP in nats,
    # 001's per-weight LDP ε): the runner then shows both numbers but does not compare them.
    claim_comparable: ClassVar[bool] = True
    # The observer the paper's claim is about ("server": the uploads; "public": the broadcast
    # models), or None when it covers both (then the worst observer is compared). The gate
    # compares the claim with that observer's certified ε; the headline stays the worst observer.
    claim_observer: ClassVar[Observer | None] = None
    # Whether the algorithm has an integer pipeline for secure aggregation (its releases then
    # price the modular sum with distributed noise); the others refuse `privacy.secure_aggregation`.
    implements_secure_aggregation: ClassVar[bool] = False
    # How its real-valued Gaussian releases are drawn (``privacy.gaussian_noise``): "float" (x + σZ
    # in floating point) unless the algorithm built their lattice form
    # (:mod:`dpfl.privacy.mechanisms.lattice`) and records them as Skellam releases ("lattice");
    # ``lattice_refusal`` says why a run that asked for the lattice form did not get it.
    gaussian_release: str = "float"
    lattice_refusal: str | None = None

    @abc.abstractmethod
    def calibration(self) -> Calibration:
        """The numbers fixed before the run (:class:`Calibration`): what every round plan draws from."""

    @abc.abstractmethod
    def plan(self, info: RoundInfo) -> PlanT:
        """The plan of round ``info.round_idx`` for a cohort of ``info.cohort``: a pure function
        of the calibration and the algorithm's public state at the start of the round."""

    def round_plan(self, info: RoundInfo) -> PlanT:
        """The round's plan as fixed by the loop (``info.plan``), or computed from the same
        public facts where nobody fixed it (a real client, a unit test)."""
        return cast(PlanT, info.plan) if info.plan is not None else self.plan(info)

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        """The releases round ``info.round_idx`` will make for this cohort (before training):
        its plan's, for the rows ``info.clients``."""
        return self.round_plan(info).releases([int(c) for c in info.clients.tolist()], num_samples,
                                              ideal_secure_sum)

    def upload_norm_limits(self, info: RoundInfo, num_samples: torch.Tensor, num_params: int) -> dict[int, float]:
        """Per client of the cohort, the largest upload norm its clipping and declared noise allow
        (what a server rejects an upload beyond): the tightest
        :meth:`~dpfl.privacy.releases.Release.upload_norm_limit` of the server releases naming the
        client, for a client-level unit; a client with a randomized report has no limit."""
        if self.privacy_unit != "client":
            return {}
        with warnings.catch_warnings():  # range notices were already stored by the runner
            warnings.simplefilter("ignore")
            releases = self.releases(info, num_samples, False)
        limits: dict[int, float] = {}
        unbounded: set[int] = set()
        for rel in releases:
            if rel.observer != "server" or rel.client_ids is None:
                continue
            limit = rel.upload_norm_limit(num_params)
            if limit is None:
                continue  # e.g. a declared threshold says nothing about the upload's norm
            for c in rel.client_ids:
                if math.isinf(limit):
                    unbounded.add(c)
                else:
                    limits[c] = min(limits.get(c, math.inf), limit)
        return {c: v for c, v in limits.items() if math.isfinite(v) and c not in unbounded}

    def declared_plan(self, info: RoundInfo, client: int) -> dict[str, float]:
        """What ``client`` must declare this round: its plan's numbers."""
        return self.round_plan(info).declared(client)

    def releases_for_arrivals(self, info: RoundInfo, arrived: torch.Tensor, num_samples: torch.Tensor,
                              ideal_secure_sum: bool) -> list[Release]:
        """The releases a round really made when only ``arrived`` of the cohort reached the
        server (dropouts, stragglers, rejected uploads); ``num_samples`` are theirs.

        Default: the releases of a round whose rows are the arrived clients, each noised as
        planned for the whole cohort (:meth:`releases` must use ``info.cohort`` for anything
        calibrated to the cohort and ``info.clients`` for the rows). An algorithm that restores
        the planned guarantee (e.g. by topping up noise) overrides this.
        """
        return self.releases(info.for_clients(arrived), num_samples, ideal_secure_sum)

    @abc.abstractmethod
    def claimed_epsilon(self, rounds_done: int) -> float | dict[int, float] | None:
        """The paper's own ε after ``rounds_done`` rounds, in the paper's notion."""

    def claim_at_integer_orders(self, rounds_done: int) -> float | None:
        """The claim's own formula restricted to integer RDP orders; None (the default): the claim
        is not an RDP bound over orders.

        A mechanism whose RDP is proven at integer orders only (the Poisson-sampled Skellam sum of
        secure aggregation, docs/proofs/skellam-subsampling.md) cannot reach a claim computed at
        fractional orders even when it adds as much noise; the gate compares its certificate with
        this figure to tell that gap (the order grid) from a real excess.
        """
        del rounds_done
        return None

    def claim_notion(self) -> str:
        """One line: the notion, unit and δ of :meth:`claimed_epsilon`."""
        return f"{self.name}: (ε, δ)-DP per {self.privacy_unit}"

    def privacy_filter_plan(self, num_clients: int, seeds: Any) -> list[tuple[list[Release], list[int]]] | None:
        """Rounds (releases, participants) fixed before the run whose composition is the run's
        privacy budget, for algorithms whose noise or length is chosen adaptively from data.

        None (the default): the releases are fixed by the settings, and the composition of what
        happened is the guarantee. Otherwise the runner halts before a round that would take any
        client's RDP above this plan at any order (a Rényi filter,
        :meth:`dpfl.privacy.accounting.ledger.PrivacyLedger.within_budget`), and the plan's
        certificate is the headline; the composition of what happened is shown as spent.
        """
        del num_clients, seeds
        return None

    def canaries(self) -> CanaryHooks | None:
        """How audit canaries enter this algorithm's rounds; None (the default): not auditable.

        Raises:
            ConfigError: the algorithm is auditable, but not with these options.
        """
        return None

    def not_covered(self) -> list[str]:
        """Data-dependent choices the certified ε does not account for (stated in the report)."""
        return []
