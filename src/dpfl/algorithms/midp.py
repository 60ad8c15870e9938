"""MI-DP federated learning (002 §IV) and PMIDP-FL with personalized budgets (002 §V).

Three algorithms, one round structure — every client trains locally, its *local parameters*
(not an update) are clipped to L2 norm C (eq. 4.6), Gaussian noise is added, and the server
takes a weighted mean:

* ``midp-server`` (Theorem 1, eq. 4.7–4.8): clean clipped uploads, the server adds
  N(0, σ_s² I) to the weighted mean, σ_s = C·max p_i / sqrt(d(e^{2ε/d} − 1)).
* ``midp-client`` (Corollary 1, eq. 4.9–4.11): every client adds N(0, σ_c² I),
  σ_c = C·max p_i / sqrt(d(e^{2ε/d} − 1)·Σ p_k²). With personalized budgets the basic scheme
  must serve the smallest ε_k (eq. 5.21 / 5.22 with one C): the baseline of 002 Figs. 9–10.
* ``pmidp-fl`` (Algorithm 2, Corollary 2): client k clips to its own threshold C_{k,t}, adapted
  after every round by C_{k,t+1} = C_{k,t} − η_c (C_{k,t} − ‖w_k^t‖) (eq. 5.17–5.18), adds
  N(0, σ_{k,t}² I) with σ_{k,t} = C_{k,t}/sqrt(dN(e^{2ε_k/d} − 1)) (eq. 5.32) and declares
  σ_{k,t}; the server weighs the uploads by p_{k,t} ∝ 1/σ_{k,t} (eq. 5.33), computed from the
  *declared* stds only (it never sees ε_k or C_{k,t}).

Split at the wire (:class:`dpfl.algorithms.base.Algorithm`). ``client_step``: the clip and the
client noise, from the client's own stream; ``aggregate``: the weighted mean and any server noise.
Declared per upload: ``noise_std`` (σ_c; 0 for ``midp-server``; σ_{k,t} for PMIDP, which also
declares C_{k,t} and its next threshold C_{k,t+1}). σ_c and σ_s depend on the whole cohort (its
weights and smallest ε_k): the server plans them and sends σ_c with ``client_state``; PMIDP's
C_{k,t} is server-held client state sent the same way, and its σ_{k,t} uses N = the cohort size.
Dropouts (K' < K arrive): the weights are renormalized over the arrivals; ``midp-server``
calibrates σ_s to them, ``midp-client`` tops the aggregate up to that same std from the server's
stream, so eq. 4.7 still holds for the arrivals; PMIDP weighs the arrivals by their declared σ
(no top-up) and the ledger records that broadcast per client. ``releases_for_arrivals`` records
exactly the noise that was added in each case.

Theorem 2: with the same ε the aggregate noise of the client- and the server-side scheme has the
same std, sqrt(Σ p_k² σ_c²) = σ_s, hence the same utility (eq. 4.16).

Budgets: one ``epsilon`` for everybody, a list ``epsilons`` (one per client), or the paper's
draw ε_k ~ N(μ_ε, σ_ε²) floored at ``epsilon_floor`` = 1 (002 §VI-B), taken from the generator
(0, server, "misc") of the run seed — the same seed gives the same budgets to every algorithm.

Privacy, two epsilons (DESIGN.md):

* claimed — ε-MI-DP in **nats** per client, eq. 5.25 for the noise actually added
  (:mod:`dpfl.privacy.accounting.claimed`). The paper states it *per round* for the current
  aggregate ("for each global epoch t") and never composes the T broadcasts; we report it
  unchanged, as a per-round number that does not grow with the rounds run.
* certified — (ε, δ)-DP at the run's δ for the Gaussian actually added, composed over the rounds
  actually run, per observer, per client; privacy unit a whole client, replace-one (the local
  parameters of one client replaced by any other vector of norm <= C), enforced sensitivity 2C
  per upload, consistent with ``dpfl account midp``. The server sees each upload: noise σ_c
  (client side), σ_{k,t} (PMIDP), or none at all (server side: ε = ∞ against the server). The
  public sees the broadcast: total noise against max p·2C, or per client p_k·2C_k for PMIDP.

References:
    002_2503fd7671e29121.txt, eq. 4.6–4.11, 4.14–4.16, 5.17–5.18, 5.21–5.22, 5.25, 5.32–5.33,
    Algorithm 2, §VI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import MidpOptions, PmidpOptions, _Budgets, parse_options
from dpfl.algorithms.private import Calibration, PrivateAlgorithm, RoundPlan
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.broadcast import broadcast_mode, interchangeable
from dpfl.privacy.accounting.claimed import (
    midp_claimed_epsilon,
    midp_client_claimed_epsilon,
    midp_server_claimed_epsilon,
    pmidp_claimed_epsilon,
)
from dpfl.privacy.calibration import (
    midp_client_noise_std,
    midp_server_noise_std,
    pmidp_aggregation_weights,
    pmidp_client_noise_std,
)
from dpfl.privacy.mechanisms import (
    add_gaussian_noise,
    add_gaussian_noise_per_client,
    clip_by_l2_norm,
    per_client_l2_norms,
)
from dpfl.privacy.releases import Release, federated_round_releases
from dpfl.rng import SERVER, NoiseGenerator, SeedSequence
from dpfl.server.aggregators import WeightedMean

__all__ = [
    "ALGORITHMS",
    "MidpOptions",
    "MidpPlan",
    "MidpScheme",
    "PmidpFl",
    "PmidpOptions",
    "PmidpPlan",
    "client_budgets",
    "midp_plan",
    "pmidp_plan",
    "round_releases",
]


def client_budgets(options: _Budgets, num_clients: int, seed: int) -> np.ndarray:
    """ε_k (nats) of every client, from the options (see the module docstring).

    A drawn budget uses the stream (0, server, "misc") of the run seed, never a global RNG:
    ε_k = max(floor, μ_ε + σ_ε·z_k), z ~ N(0, I_N) in float64.

    References:
        002_2503fd7671e29121.txt, §VI-B ("we set the minimum value of ε_k to be 1").
    """
    if options.epsilon is not None:
        return np.full(num_clients, float(options.epsilon))
    if options.epsilons is not None:
        if len(options.epsilons) != num_clients:
            raise ConfigError(
                f"`epsilons` must list one budget per client: N = {num_clients}. Found "
                f"{len(options.epsilons)}.")
        return np.asarray(options.epsilons, dtype=np.float64)
    assert options.epsilon_mean is not None and options.epsilon_std is not None
    gen = SeedSequence(seed).generator(0, SERVER, "misc")
    z = torch.randn(num_clients, generator=gen, dtype=torch.float64).numpy()
    return np.maximum(options.epsilon_floor, options.epsilon_mean + options.epsilon_std * z)


def round_releases(
    client_ids: list[int],
    client_noise_stds: list[float] | float,
    clip_norms: list[float] | float,
    weights: list[float],
    *,
    server_noise_std: float = 0.0,
    ideal_secure_sum: bool = False,
    per_client_public: bool = False,
    amplifiable: bool = False,
) -> list[Release]:
    """The releases of one MI-DP round: enforced sensitivity 2C_k per upload (replace-one).

    Used by the algorithms and by the reports that replay a run's stored per-round numbers into
    a per-client ledger, so both speak of the same releases.
    """
    sens = 2.0 * clip_norms if isinstance(clip_norms, (int, float)) else [2.0 * c for c in clip_norms]
    return federated_round_releases(
        client_ids, client_noise_stds, sens, weights, server_noise_std=server_noise_std,
        ideal_secure_sum=ideal_secure_sum, per_client_public=per_client_public, amplifiable=amplifiable)


def _weights(weighting: str, num_samples: torch.Tensor) -> WeightedMean:
    if weighting == "uniform":
        return WeightedMean.uniform(int(num_samples.numel()))
    return WeightedMean.by_samples(num_samples)


def _noise_generators(info: RoundInfo) -> list[NoiseGenerator]:
    return [info.seeds.noise_generator(info.round_idx, int(c), "noise") for c in info.clients.tolist()]


def _floats(values: Any) -> list[float]:
    """Full-precision floats for the stored metrics (the reports replay the ledger from them)."""
    return [float(v) for v in values]


# --------------------------------------------------------------------------- basic schemes


@dataclass(frozen=True)
class MidpCalibration(Calibration):
    """What a basic scheme fixes before the run: every client's budget ε_k (nats), C, d, the
    weighting and the side; the noise stds depend on each cohort (eq. 4.7 / 4.9 in its plan)."""

    budgets: tuple[float, ...]
    clip_norm: float
    dim: int
    weighting: str
    side: str


@dataclass(frozen=True)
class PmidpCalibration(Calibration):
    """What PMIDP-FL fixes before the run: every client's budget ε_k (nats), C_{k,1}, d, η_c; the
    noise stds follow the thresholds and the cohort (eq. 5.32 in its plan)."""

    budgets: tuple[float, ...]
    initial_clip_norm: float
    dim: int
    clip_lr: float


@dataclass(frozen=True)
class MidpPlan(RoundPlan):
    """Every noise number of one round of a basic scheme, fixed by the server for its cohort.

    ``client_step`` adds ``client_std`` (``midp-client``), ``aggregate`` adds ``server_std``
    (``midp-server``) or, after dropouts, the top-up of :meth:`for_arrivals`, and the releases
    state exactly those numbers: one object for what is added and what is certified.

    Attributes:
        round_idx: the round. clients: the cohort. weights: p_k of the cohort (eq. 3.2).
        epsilon: the cohort's smallest ε_k (eq. 5.21–5.22 with one C).
        clip_norm: C. dim: d. side: "server" or "client".
        client_std: σ_c (eq. 4.9), 0 for ``midp-server``.
        server_std: σ_s (eq. 4.7) for the planned weights, 0 for ``midp-client``.
        public_mode: :func:`dpfl.privacy.accounting.broadcast.broadcast_mode`'s answer.
    """

    round_idx: int
    clients: tuple[int, ...]
    weights: tuple[float, ...]
    epsilon: float
    clip_norm: float
    dim: int
    side: str
    client_std: float
    server_std: float
    public_mode: str
    weighting: str = "samples"

    def for_arrivals(self, weights: list[float]) -> tuple[float, float]:
        """(client noise std the arrivals added, noise std the server adds) when the rows whose
        renormalized weights are ``weights`` arrive.

        All arrived: the plan. After dropouts (K' < K) the plan's noise no longer matches eq. 4.7
        for the arrivals' weights p'_k: ``midp-server`` adds σ_s' = eq. 4.7 at max p'_k (the
        cohort's smallest ε); ``midp-client`` tops up to the same σ_s', adding
        N(0, max(0, σ_s'² − σ_c² Σ p'_k²) I) — the per-round ε-MI-DP of the survivors is kept.
        """
        if len(weights) == len(self.clients):
            return self.client_std, self.server_std
        target = midp_server_noise_std(self.epsilon, self.clip_norm, max(weights), self.dim)
        if self.side == "server":
            return 0.0, target
        have_sq = float((torch.tensor(weights, dtype=torch.float64) ** 2).sum()) * self.client_std**2
        return self.client_std, math.sqrt(max(0.0, target**2 - have_sq))

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """The releases of the rows ``ids`` (sample counts ``num_samples``, weighed as the plan's
        weighting; None: the cohort's planned weights) with the noise of :meth:`for_arrivals`."""
        if not ids:
            return []
        weights = (list(self.weights) if num_samples is None
                   else _weights(self.weighting, num_samples).weights.double().tolist())
        return self.releases_weighted(ids, weights, ideal_secure_sum)

    def declared(self, client: int) -> dict[str, float]:
        """σ_c (``midp-client``) or 0 (``midp-server``)."""
        del client
        return {"noise_std": self.client_std if self.side == "client" else 0.0}

    def releases_weighted(self, ids: list[int], weights: list[float], ideal_secure_sum: bool) -> list[Release]:
        """The releases of the rows ``ids`` (weights ``weights``) with the noise of :meth:`for_arrivals`."""
        client_std, server_std = self.for_arrivals(weights)
        return round_releases(ids, client_std, self.clip_norm, weights, server_noise_std=server_std,
                              ideal_secure_sum=ideal_secure_sum, per_client_public=self.public_mode == "per_client",
                              amplifiable=self.public_mode == "amplified")

    @property
    def claimed_epsilon(self) -> float:
        """002's per-round ε-MI-DP (nats, eq. 5.25) of the planned broadcast, worst client."""
        w = list(self.weights)
        return float(midp_claimed_epsilon([self.clip_norm], w, [self.client_std] * len(w), self.server_std,
                                          self.dim).max())


def midp_plan(side: str, budgets: np.ndarray, clip_norm: float, dim: int, weighting: str, round_idx: int,
              clients: list[int], num_samples: torch.Tensor, public_mode: str) -> MidpPlan:
    """The plan of one round of a basic scheme for the cohort ``clients``: a pure function.

    With personalized budgets the basic scheme serves the cohort's smallest ε_k (eq. 5.21–5.22
    with a common C): σ_s of eq. 4.7 (``midp-server``) or σ_c of eq. 4.9 (``midp-client``).

    References:
        002_2503fd7671e29121.txt, eq. 4.7, 4.9, 5.21–5.22.
    """
    agg = _weights(weighting, num_samples)
    eps = float(budgets[clients].min()) if clients else math.inf
    client_std = server_std = 0.0
    if clients and side == "server":
        server_std = midp_server_noise_std(eps, clip_norm, agg.max_weight, dim)
    elif clients:
        client_std = midp_client_noise_std(eps, clip_norm, agg.weights.double().numpy(), dim)
    return MidpPlan(round_idx, tuple(clients), tuple(agg.weights.double().tolist()), eps, float(clip_norm), int(dim),
                    side, client_std, server_std, public_mode, weighting)


class MidpScheme(PrivateAlgorithm[MidpPlan]):
    """The two basic schemes of 002 §IV: noise on the server (Thm 1) or on the clients (Cor. 1)."""

    claim_comparable: ClassVar[bool] = False  # ε-MI-DP in nats (002 Def. 2-3) is not (ε, δ)-DP

    relation: ClassVar[str] = "replace_one"
    privacy_unit: ClassVar[str] = "client"

    def __init__(self, side: Literal["server", "client"], options: MidpOptions, sampler: Any,
                 num_clients: int, dim: int, seed: int, delta: float,
                 client_sizes: torch.Tensor | None = None) -> None:
        self.side = side
        self.name = f"midp-{side}"  # type: ignore[misc]
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.dim = dim
        self.delta = delta
        self.budgets = client_budgets(options, num_clients, seed)
        # |D_k| of every client (public, fixed by the run): lets the server plan a cohort's
        # weights before anything arrives (declared_plan); None: only from what is passed in
        self.client_sizes = None if client_sizes is None else torch.as_tensor(client_sizes, dtype=torch.long)
        self._claimed: float | None = None
        self._received: tuple[int, float] | None = None  # (round, σ_c) sent by the server (client side)

    def calibration(self) -> MidpCalibration:
        """What is fixed before the run (:class:`MidpCalibration`)."""
        return MidpCalibration(tuple(float(e) for e in self.budgets.tolist()), float(self.options.clip_norm),
                               int(self.dim), str(self.options.weighting), str(self.side))

    def plan(self, info: RoundInfo, num_samples: torch.Tensor | None = None) -> MidpPlan:
        """The plan of round ``info.round_idx`` for its whole cohort ``info.clients`` (server side):
        a pure function (:func:`midp_plan`), fixed once per round by the loop.

        σ_c (eq. 4.9) and σ_s (eq. 4.7) depend on the whole cohort — its weights p_k and its
        smallest ε_k — which a real client does not know: the server sends σ_c with
        :meth:`client_state`. ``num_samples`` are the cohort's |D_k| (default: the sizes the
        algorithm was built with).
        """
        ids = [int(c) for c in info.clients.tolist()]
        if num_samples is None:
            if self.client_sizes is None:
                raise ConfigError(f"{self.name}: the clients' sample counts are needed to plan round "
                                  f"{info.round_idx + 1} (build the algorithm through the registry)")
            num_samples = self.client_sizes[ids]
        return midp_plan(self.side, self.budgets, self.options.clip_norm, self.dim, self.options.weighting,
                         info.round_idx, ids, num_samples, self._public_mode())

    def _plan_of(self, info: RoundInfo, num_samples: torch.Tensor | None = None) -> MidpPlan:
        """The round's fixed plan, or (nobody fixed it) the plan for these rows' sample counts."""
        return info.plan if info.plan is not None else self.plan(info, num_samples)

    def _public_mode(self) -> str:
        """How the public's view is recorded: amplified by a secret sample only when every client
        has the same budget (the noise follows the cohort's smallest ε_k, eq. 4.7 / 4.9) and the
        same weight rule (uniform, or equal data sets); else per participant at the drawn cohort
        (:mod:`dpfl.privacy.accounting.broadcast`)."""
        sizes = (None if self.options.weighting == "uniform" or self.client_sizes is None
                 else self.client_sizes.tolist())
        same = (interchangeable(self.budgets.tolist(), sizes)
                and (sizes is not None or self.options.weighting == "uniform"))
        return broadcast_mode(self.sampler.describe(), self.relation, self.privacy_unit, same)

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        if info.clients.numel() == 0:
            return []
        plan = self._plan_of(info, num_samples)
        self._claimed = plan.claimed_epsilon
        return plan.releases_weighted(info.clients.tolist(), list(plan.weights), ideal_secure_sum)

    def releases_for_arrivals(self, info: RoundInfo, arrived: torch.Tensor, num_samples: torch.Tensor,
                              ideal_secure_sum: bool) -> list[Release]:
        """The arrivals' uploads (σ_c each, planned for the whole cohort) and the broadcast with
        the noise :meth:`aggregate` really added for them (:meth:`MidpPlan.for_arrivals`)."""
        if int(arrived.numel()) == 0:
            return []
        full = int(arrived.numel()) == info.cohort
        plan = self._plan_of(info, num_samples if full else None)
        weights = _weights(self.options.weighting, num_samples).weights.double().tolist()
        return plan.releases_weighted(arrived.tolist(), weights, ideal_secure_sum)

    # ------------------------------------------------------------------ the round, split at the wire

    splits_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """Each client: clip its local parameters to C (eq. 4.6); ``midp-client`` adds
        N(0, σ_c² I) (eq. 4.9) from the client's own stream and declares σ_c (``midp-server``
        declares 0). σ_c depends on the whole cohort: computed here when the rows are the
        cohort (simulation), else taken from the server's plan (:meth:`client_state`)."""
        del global_params
        std = 0.0
        if self.side == "client" and info.clients.numel():
            if info.plan is not None or int(info.clients.numel()) == info.cohort:
                std = self._plan_of(info, local.num_samples).client_std
            else:
                std = self._received_std(info)
        clipped, _ = clip_by_l2_norm(local.params, self.options.clip_norm)
        if std > 0:
            clipped = add_gaussian_noise_per_client(clipped, std, _noise_generators(info))
        rows = int(info.clients.numel())
        return Uploads(info.clients, clipped, local.num_samples, local.train_loss,
                       {"noise_std": torch.full((rows,), std, dtype=torch.float64)})

    def _received_std(self, info: RoundInfo) -> float:
        if self._received is not None and self._received[0] == info.round_idx:
            return self._received[1]
        raise ConfigError(
            f"midp-client: the client noise std of round {info.round_idx + 1} (002 eq. 4.9) depends on the "
            "whole cohort's weights and smallest budget; a client learns it from the server's round state "
            "(client_state), which did not reach this client")

    def client_state(self, client: int | None = None, info: RoundInfo | None = None) -> dict[str, Any]:
        """σ_c of round ``info``'s plan (the only server state a client needs)."""
        del client
        if info is None or info.clients.numel() == 0:
            return {}
        plan = self._plan_of(info)
        return {"round_plan": {"round": plan.round_idx, "client_noise_std": plan.client_std}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rp = state.get("round_plan")
        if rp is not None:
            self._received = (int(rp["round"]), float(rp["client_noise_std"]))

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """Σ p_k x̃_k over the arrivals (eq. 3.2), plus the server's noise: σ_s (eq. 4.7) for
        ``midp-server``; for ``midp-client`` none, or the top-up after dropouts (:meth:`MidpPlan.for_arrivals`)."""
        if uploads.num_rows == 0:
            return RoundOutput(global_params.clone(), {"arrived": 0})
        full = uploads.num_rows == info.cohort
        plan = self._plan_of(info, uploads.num_samples if full else None)
        agg = _weights(self.options.weighting, uploads.num_samples)
        client_std, server_std = plan.for_arrivals(agg.weights.double().tolist())
        mean = agg(uploads.params)
        if server_std > 0:  # midp-server's σ_s, or midp-client's top-up after dropouts
            purpose = "server_noise" if self.side == "server" else "topup"
            gen = info.seeds.noise_generator(info.round_idx, SERVER, purpose)
            mean = add_gaussian_noise(mean.unsqueeze(0), server_std, gen)[0]
        aggregate_std = math.sqrt(float((agg.weights.double() ** 2).sum()) * client_std**2 + server_std**2)
        metrics: dict[str, Any] = {
            "client_noise_std": client_std,
            "server_noise_std": server_std,
            "aggregate_noise_std": aggregate_std,
            "max_weight": agg.max_weight,
        }
        missing = info.cohort - uploads.num_rows
        if missing:
            metrics["arrived"] = uploads.num_rows
            if self.side == "client":
                metrics["topped_up_clients"] = missing
        return RoundOutput(mean.to(global_params.device), metrics)

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        # diagnostics only a simulation can see: the unclipped local-model norms (never uploaded)
        norms = per_client_l2_norms(local.params)
        out = super().server_step(global_params, local, info)
        metrics: dict[str, Any] = {
            "param_norm_mean": float(norms.mean()),
            "clipped_fraction": float((norms > self.options.clip_norm).float().mean()),
        }
        metrics.update(out.metrics)
        return RoundOutput(out.global_params, metrics)

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        if rounds_done == 0:
            return 0.0
        return self._claimed

    def claim_notion(self) -> str:
        eq = "Theorem 1 eq. 4.7" if self.side == "server" else "Corollary 1 eq. 4.9"
        return (f"002 ({eq}, eq. 5.25): client-level epsilon-MI-DP in nats of one round's aggregate, "
                "not composed over rounds; not (epsilon, delta)-DP")

    def not_covered(self) -> list[str]:
        out = []
        if self.side == "server":
            out.append("server-side noise: the server sees every clipped upload in the clear "
                       "(certified epsilon against the server is infinite)")
        return out


# --------------------------------------------------------------------------- PMIDP-FL


@dataclass(frozen=True)
class PmidpPlan(RoundPlan):
    """Every noise number of one PMIDP-FL round for its rows: C_{k,t} and σ_{k,t} (eq. 5.32).

    ``client_step`` clips row k to ``clip_norms[k]`` and adds ``noise_stds[k]``, ``declared_plan``
    states it, and :meth:`releases` tells the ledger the same numbers (p_{k,t} ∝ 1/σ_{k,t},
    eq. 5.33, over the rows asked for). Fixed before the round: :meth:`PmidpFl.aggregate` moves
    the thresholds on to C_{k,t+1}, never this plan.

    Attributes:
        round_idx: the round. clients: the rows planned. cohort: N of eq. 5.32 (the clients the
        round aggregates). clip_norms: C_{k,t}. noise_stds: σ_{k,t}. dim: d.
        adaptive: η_c > 0 (each threshold update is an exact release).
    """

    round_idx: int
    clients: tuple[int, ...]
    cohort: int
    clip_norms: tuple[float, ...]
    noise_stds: tuple[float, ...]
    dim: int
    adaptive: bool

    def rows(self, clients: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(C_{k,t}, σ_{k,t}) of ``clients`` (a subset of :attr:`clients`)."""
        pos = {c: i for i, c in enumerate(self.clients)}
        idx = [pos[int(c)] for c in clients]
        return np.asarray(self.clip_norms)[idx], np.asarray(self.noise_stds)[idx]

    def claimed_epsilon(self, clients: list[int]) -> dict[int, float]:
        """002's per-round ε_k-MI-DP (nats, eq. 5.25) of ``clients``."""
        clips, stds = self.rows(clients)
        claimed = pmidp_claimed_epsilon(clips, stds, self.dim)
        return {int(c): float(e) for c, e in zip(clients, claimed, strict=True)}

    def declared(self, client: int) -> dict[str, float]:
        """Client k's σ_{k,t}."""
        _, stds = self.rows([int(client)])
        return {"noise_std": float(stds[0])}

    def releases(self, clients: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """The uploads of ``clients`` and their broadcast, weighted by eq. 5.33 over them, per client
        (p_k·2C_k against the total noise).

        Adaptive clipping (η_c > 0) also releases each participant's unclipped norm without
        noise: C_{k,t+1} = C_{k,t} − η_c (C_{k,t} − ‖w_k^t‖) (eq. 5.18) is declared to the server
        with the upload (it plans σ_{k,t+1} from it), so the server recovers ‖w_k^t‖ exactly; the
        public sees it through the next rounds' noise scale σ_{k,t+1} ∝ C_{k,t+1} and weights
        p_{k,t+1} ∝ 1/σ_{k,t+1} (eq. 5.32–5.33), a data-dependent noise that no accountant here
        covers. Both observers: an exact release (ε = ∞), as LDP-FL's client-minmax ranges.
        The weights depend on the declared noise only, not on ``num_samples``.
        """
        del num_samples
        if not clients:
            return []
        clips, stds = self.rows(clients)
        weights = pmidp_aggregation_weights(stds)
        out = round_releases(clients, stds.tolist(), clips.tolist(), weights.tolist(),
                             ideal_secure_sum=ideal_secure_sum, per_client_public=True)
        if self.adaptive:
            out += [Release.exact("server", clients), Release.exact("public", clients)]
        return out


def pmidp_plan(budgets: np.ndarray, clip_norms: np.ndarray, dim: int, round_idx: int, clients: list[int],
               cohort: int, adaptive: bool) -> PmidpPlan:
    """C_{k,t} and σ_{k,t} = C_{k,t}/sqrt(dN(e^{2ε_k/d} − 1)) of ``clients`` with N = ``cohort``:
    a pure function of the budgets and the current thresholds.

    References:
        002_2503fd7671e29121.txt, eq. 5.32.
    """
    clips = clip_norms[clients]
    stds = [pmidp_client_noise_std(float(e), float(c), dim, int(cohort))
            for e, c in zip(budgets[clients], clips, strict=True)]
    return PmidpPlan(round_idx, tuple(int(c) for c in clients), int(cohort), tuple(float(c) for c in clips),
                     tuple(float(s) for s in stds), int(dim), bool(adaptive))


class PmidpFl(PrivateAlgorithm[PmidpPlan]):
    """PMIDP-FL (002 Algorithm 2): personalized budgets, adaptive clipping, inverse-noise weights."""

    claim_comparable: ClassVar[bool] = False  # ε-MI-DP in nats (002 Def. 2-3) is not (ε, δ)-DP

    name = "pmidp-fl"
    relation: ClassVar[str] = "replace_one"
    privacy_unit: ClassVar[str] = "client"

    def __init__(self, options: PmidpOptions, sampler: Any, num_clients: int, dim: int, seed: int,
                 delta: float) -> None:
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.dim = dim
        self.delta = delta
        self.budgets = client_budgets(options, num_clients, seed)
        self.clip_norms = np.full(num_clients, float(options.clip_norm))  # C_{k,t}
        self._claimed: dict[int, float] = {}
        # the latest round's plan for its cohort, fixed before the round: aggregate() moves the
        # thresholds on to C_{k,t+1}, and later questions about round t still get C_{k,t}

    def calibration(self) -> PmidpCalibration:
        """What is fixed before the run (:class:`PmidpCalibration`)."""
        return PmidpCalibration(tuple(float(e) for e in self.budgets.tolist()), float(self.options.clip_norm),
                                int(self.dim), float(self.options.clip_lr))

    def plan(self, info: RoundInfo) -> PmidpPlan:
        """The plan of round ``info.round_idx`` for the rows ``info.clients`` (eq. 5.32 with N =
        ``info.cohort``), from the thresholds C_{k,t} at the start of the round: a pure function
        (:func:`pmidp_plan`), fixed once per round by the loop (before :meth:`aggregate` moves the
        thresholds on); a SuperNode plans its own row from the same numbers."""
        ids = [int(c) for c in info.clients.tolist()]
        return pmidp_plan(self.budgets, self.clip_norms, self.dim, info.round_idx, ids, info.cohort,
                          self.options.clip_lr > 0)

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        del num_samples  # eq. 5.33 weights depend on the declared noise only
        ids = [int(c) for c in info.clients.tolist()]
        if not ids:
            return []
        plan = self.round_plan(info)
        self._claimed.update(plan.claimed_epsilon(ids))
        return plan.releases(ids, None, ideal_secure_sum)

    def releases_for_arrivals(self, info: RoundInfo, arrived: torch.Tensor, num_samples: torch.Tensor,
                              ideal_secure_sum: bool) -> list[Release]:
        """The arrivals' uploads with the C_{k,t}, σ_{k,t} planned for the cohort (N = K: each σ is
        what its client added), and the broadcast weighted by eq. 5.33 over the arrivals only —
        as :meth:`aggregate` weighs them. No top-up: the recorded public release is per client,
        p'_k·2C_k against the arrivals' total noise, whatever it became."""
        del num_samples
        return self.round_plan(info).releases([int(c) for c in arrived.tolist()], None, ideal_secure_sum)

    @staticmethod
    def weighted_by_declared_noise(noisy_uploads: torch.Tensor,
                                   declared_noise_stds: list[float]) -> tuple[torch.Tensor, np.ndarray]:
        """The server's whole view: noisy uploads and their declared stds → p_{k,t}, Σ p_k x̃_k.

        References:
            002_2503fd7671e29121.txt, eq. 5.33.
        """
        weights = pmidp_aggregation_weights(declared_noise_stds)
        return WeightedMean(torch.as_tensor(weights, dtype=torch.float32))(noisy_uploads), weights

    # ------------------------------------------------------------------ the round, split at the wire

    splits_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """Client k (Algorithm 2): clip to its C_{k,t} (eq. 5.19), add N(0, σ_{k,t}² I) with
        σ_{k,t} from its own ε_k and C_{k,t} and N = the cohort size (eq. 5.32), from its own
        stream; declare σ_{k,t}, C_{k,t} and its next threshold C_{k,t+1} (eq. 5.17–5.18 on its
        unclipped norm), which the server needs to plan σ_{k,t+1}.

        C_{k,t} is the client's state, held by the server between rounds (a client may sit out
        rounds, a node may restart) and sent with :meth:`client_state`; ε_k is fixed by the run.
        """
        del global_params
        clips, stds = self.round_plan(info).rows(info.clients.tolist())
        dtype = local.params.dtype
        clipped, norms = clip_by_l2_norm(local.params, torch.as_tensor(clips, dtype=dtype))
        noisy = add_gaussian_noise_per_client(clipped, torch.as_tensor(stds, dtype=dtype), _noise_generators(info))
        eta = self.options.clip_lr
        nxt = clips - eta * (clips - norms.double().cpu().numpy()) if eta > 0 else clips
        return Uploads(info.clients, noisy, local.num_samples, local.train_loss, {
            "noise_std": torch.as_tensor(stds, dtype=torch.float64),
            "clip_norm": torch.as_tensor(clips, dtype=torch.float64),
            "next_clip_norm": torch.as_tensor(nxt, dtype=torch.float64),
        })

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """The server (eq. 5.33): p_{k,t} ∝ 1/σ_{k,t} from the *declared* (validated) stds of the
        uploads that arrived, Σ p_k x̃_k; then it records each arrival's next threshold."""
        del info
        if uploads.num_rows == 0:
            return RoundOutput(global_params.clone(), {"arrived": 0})
        stds = uploads.declared["noise_std"].to(torch.float64).cpu().numpy()
        mean, weights = self.weighted_by_declared_noise(uploads.params, stds.tolist())
        rejected = 0
        if "next_clip_norm" in uploads.declared:
            nxt = uploads.declared["next_clip_norm"].to(torch.float64).cpu().numpy()
            ok = np.isfinite(nxt) & (nxt > 0)  # eq. 5.18 keeps C > 0; anything else keeps C_{k,t}
            rejected = int((~ok).sum())
            self.clip_norms[uploads.clients.numpy()[ok]] = nxt[ok]
        clips = uploads.declared.get("clip_norm")
        extra = {"rejected_next_clip_norms": rejected} if rejected else {}
        return RoundOutput(mean.to(global_params.device), {
            **extra,
            "noise_stds": _floats(stds),
            "clip_norms": _floats(clips.tolist()) if clips is not None else [],
            "weights": _floats(weights),
            "max_weight": float(weights.max()),
            "aggregate_noise_std": float(math.sqrt(float(np.sum((weights * stds) ** 2)))),
        })

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        # diagnostics only a simulation can see: the unclipped local-model norms (never uploaded)
        clips = self.clip_norms[info.clients.numpy()]
        norms = per_client_l2_norms(local.params)
        out = super().server_step(global_params, local, info)
        metrics: dict[str, Any] = {
            "param_norm_mean": float(norms.mean()),
            "clipped_fraction": float(
                (norms > torch.as_tensor(clips, dtype=norms.dtype, device=norms.device)).float().mean()),
        }
        metrics.update(out.metrics)
        return RoundOutput(out.global_params, metrics)

    def claimed_epsilon(self, rounds_done: int) -> dict[int, float] | float | None:
        if rounds_done == 0:
            return 0.0
        return dict(self._claimed)

    def claim_notion(self) -> str:
        return ("002 (Corollary 2 eq. 5.32-5.33, eq. 5.25): personalized client-level epsilon_k-MI-DP "
                "in nats of one round's aggregate, per client, not composed over rounds; not "
                "(epsilon, delta)-DP")

    def not_covered(self) -> list[str]:
        out = []
        if self.options.clip_lr > 0:
            out.append(
                "adaptive clip norms C_{k,t} (002 eq. 5.17-5.18, eta_c = "
                f"{self.options.clip_lr:g}) are computed from the clients' unclipped local-model "
                "norms, i.e. from private data, without noise: each upload declares C_{k,t+1}, from "
                "which the server recovers the unclipped norm exactly, and the public sees it through "
                "the data-dependent noise scale and weights of the next broadcasts. The certified "
                "epsilon is therefore infinite against both observers (recorded as a non-private "
                "release); set `clip_lr: 0` for a finite certificate. The paper's claimed epsilon "
                "ignores this release")
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norms": self.clip_norms.tolist(),
                "claimed": {str(k): v for k, v in self._claimed.items()}}

    def client_state(self, client: int | None = None, info: RoundInfo | None = None) -> dict[str, Any]:
        """A client's own threshold C_{k,t} (all of them only for ``client=None``, in simulation)."""
        if client is None:
            return {"clip_norms": self.clip_norms.tolist()}
        return {"own_clip_norm": [int(client), float(self.clip_norms[int(client)])]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clip_norms" in state:
            clips = np.asarray(state["clip_norms"], dtype=np.float64)
            if clips.shape != (self.num_clients,):
                raise ConfigError(
                    f"checkpoint holds {clips.shape[0]} clip norms for {self.num_clients} clients.")
            self.clip_norms = clips
        if "own_clip_norm" in state:  # on a SuperNode: only this client's threshold
            k, c = state["own_clip_norm"]
            self.clip_norms[int(k)] = float(c)
        self._claimed = {int(k): float(v) for k, v in state.get("claimed", {}).items()}


# --------------------------------------------------------------------------- registry


def midp_epsilon_for_noise_std(side: str, noise_std: float, clip_norm: float, weights: list[float], dim: int) -> float:
    """The per-round ε-MI-DP budget (nats) whose eq. 4.7 (``server``) or eq. 4.9 (``client``)
    noise is ``noise_std``: 002's calibration, inverted (what ``dpfl account midp --noise-std``
    sets as the ``epsilon`` option, so the dry run then adds exactly ``noise_std``).

    References:
        002_2503fd7671e29121.txt, eq. 4.7, 4.9 (Theorem 1, Corollary 1).
    """
    if side == "server":
        return float(midp_server_claimed_epsilon(noise_std, clip_norm, max(weights), dim))
    return float(midp_client_claimed_epsilon(noise_std, clip_norm, weights, dim))


def _build_scheme(side: Literal["server", "client"]) -> Any:
    def build(options: dict[str, Any], sampler: Any, ctx: Any) -> MidpScheme:

        opts = parse_options(MidpOptions, options, f"midp-{side}")
        return MidpScheme(side, opts, sampler, ctx.num_clients, ctx.num_params, ctx.config.seed,
                          ctx.privacy.delta, client_sizes=ctx.client_sizes)

    return build


def _build_pmidp(options: dict[str, Any], sampler: Any, ctx: Any) -> PmidpFl:

    opts = parse_options(PmidpOptions, options, "pmidp-fl")
    return PmidpFl(opts, sampler, ctx.num_clients, ctx.num_params, ctx.config.seed, ctx.privacy.delta)


ALGORITHMS = {
    "midp-server": _build_scheme("server"),
    "midp-client": _build_scheme("client"),
    "pmidp-fl": _build_pmidp,
}
