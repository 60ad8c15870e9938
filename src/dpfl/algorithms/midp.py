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
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpfl.algorithms.base import RoundOutput
from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.claimed import midp_claimed_epsilon, pmidp_claimed_epsilon
from dpfl.privacy.accounting.ledger import Release, federated_round_releases
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
)
from dpfl.rng import SERVER, SeedSequence
from dpfl.server.aggregators import WeightedMean

__all__ = [
    "ALGORITHMS",
    "MidpOptions",
    "MidpScheme",
    "PmidpFl",
    "PmidpOptions",
    "client_budgets",
    "round_releases",
]


# --------------------------------------------------------------------------- options


class _Budgets(BaseModel):
    """Where the clients' budgets ε_k (nats) come from: exactly one of three sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float | None = Field(None, gt=0, description="one ε-MI-DP budget (nats) for all")
    epsilons: list[float] | None = Field(None, description="ε_k per client (nats), length N")
    epsilon_mean: float | None = Field(None, description="μ_ε of the paper's draw (002 §VI-B)")
    epsilon_std: float | None = Field(None, ge=0, description="σ_ε of the paper's draw")
    epsilon_floor: float = Field(1.0, gt=0, description="smallest drawn ε_k (the paper: 1)")
    clip_norm: float = Field(..., gt=0, description="C of eq. 4.6 (PMIDP: C_{k,1})")
    weighting: Literal["samples", "uniform"] = Field(
        "samples", description="p_k: |D_k|/|D| (002 eq. 3.2) or 1/K")

    @model_validator(mode="after")
    def _one_source(self) -> _Budgets:
        given = [name for name, v in (("epsilon", self.epsilon), ("epsilons", self.epsilons),
                                      ("epsilon_mean", self.epsilon_mean)) if v is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one budget source: `epsilon`, `epsilons`, or `epsilon_mean` with "
                f"`epsilon_std`. Found {given or 'none'}")
        if (self.epsilon_mean is None) != (self.epsilon_std is None):
            raise ValueError("`epsilon_mean` and `epsilon_std` go together")
        if self.epsilons is not None and not all(math.isfinite(e) and e > 0 for e in self.epsilons):
            raise ValueError(f"`epsilons` must all be finite and > 0. Found {self.epsilons[:5]}")
        return self


class MidpOptions(_Budgets):
    """Options of ``midp-server`` / ``midp-client``."""


class PmidpOptions(_Budgets):
    """Options of ``pmidp-fl`` (Algorithm 2)."""

    clip_lr: float = Field(0.0, ge=0, le=1, description="η_c of eq. 5.18 (0: fixed C)")


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
    secure_aggregation: bool = False,
    per_client_public: bool = False,
) -> list[Release]:
    """The releases of one MI-DP round: enforced sensitivity 2C_k per upload (replace-one).

    Used by the algorithms and by the reports that replay a run's stored per-round numbers into
    a per-client ledger, so both speak of the same releases.
    """
    sens = 2.0 * clip_norms if isinstance(clip_norms, (int, float)) else [2.0 * c for c in clip_norms]
    return federated_round_releases(
        client_ids, client_noise_stds, sens, weights, server_noise_std=server_noise_std,
        secure_aggregation=secure_aggregation, per_client_public=per_client_public)


def _weights(weighting: str, num_samples: torch.Tensor) -> WeightedMean:
    if weighting == "uniform":
        return WeightedMean.uniform(int(num_samples.numel()))
    return WeightedMean.by_samples(num_samples)


def _noise_generators(info: RoundInfo) -> list[torch.Generator]:
    return [info.seeds.generator(info.round_idx, int(c), "noise") for c in info.clients.tolist()]


def _floats(values: Any) -> list[float]:
    """Full-precision floats for the stored metrics (the reports replay the ledger from them)."""
    return [float(v) for v in values]


# --------------------------------------------------------------------------- basic schemes


class MidpScheme(PrivateAlgorithm):
    """The two basic schemes of 002 §IV: noise on the server (Thm 1) or on the clients (Cor. 1)."""

    claim_comparable: ClassVar[bool] = False  # ε-MI-DP in nats (002 Def. 2-3) is not (ε, δ)-DP

    relation: ClassVar[str] = "replace_one"
    privacy_unit: ClassVar[str] = "client"

    def __init__(self, side: Literal["server", "client"], options: MidpOptions, sampler: Any,
                 num_clients: int, dim: int, seed: int, delta: float) -> None:
        self.side = side
        self.name = f"midp-{side}"  # type: ignore[misc]
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.dim = dim
        self.delta = delta
        self.budgets = client_budgets(options, num_clients, seed)
        self._claimed: float | None = None

    def sample(self, info_round: int, num_clients: int, seeds: SeedSequence) -> torch.Tensor:
        return self.sampler.sample(num_clients, seeds.generator(info_round, SERVER, "sample"))

    def _plan(self, clients: torch.Tensor, num_samples: torch.Tensor) -> tuple[WeightedMean, float, float]:
        """(aggregation weights, client noise std, server noise std) for this cohort.

        With personalized budgets the basic scheme serves the cohort's smallest ε_k
        (eq. 5.21–5.22 with a common C).
        """
        agg = _weights(self.options.weighting, num_samples)
        eps = float(self.budgets[clients.numpy()].min())
        c = self.options.clip_norm
        if self.side == "server":
            return agg, 0.0, midp_server_noise_std(eps, c, agg.max_weight, self.dim)
        return agg, midp_client_noise_std(eps, c, agg.weights.double().numpy(), self.dim), 0.0

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, secure_aggregation: bool) -> list[Release]:
        if info.clients.numel() == 0:
            return []
        agg, client_std, server_std = self._plan(info.clients, num_samples)
        weights = agg.weights.double().tolist()
        self._claimed = float(midp_claimed_epsilon(
            [self.options.clip_norm], weights, [client_std] * len(weights), server_std, self.dim).max())
        return round_releases(info.clients.tolist(), client_std, self.options.clip_norm, weights,
                              server_noise_std=server_std, secure_aggregation=secure_aggregation)

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        agg, client_std, server_std = self._plan(info.clients, local.num_samples)
        clipped, norms = clip_by_l2_norm(local.params, self.options.clip_norm)
        if client_std > 0:
            clipped = add_gaussian_noise_per_client(clipped, client_std, _noise_generators(info))
        mean = agg(clipped)
        if server_std > 0:
            gen = info.seeds.generator(info.round_idx, SERVER, "server_noise")
            mean = add_gaussian_noise(mean.unsqueeze(0), server_std, gen)[0]
        aggregate_std = math.sqrt(float((agg.weights.double() ** 2).sum()) * client_std**2 + server_std**2)
        return RoundOutput(mean.to(global_params.device), {
            "param_norm_mean": float(norms.mean()),
            "clipped_fraction": float((norms > self.options.clip_norm).float().mean()),
            "client_noise_std": client_std,
            "server_noise_std": server_std,
            "aggregate_noise_std": aggregate_std,
            "max_weight": agg.max_weight,
        })

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


class PmidpFl(PrivateAlgorithm):
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

    def sample(self, info_round: int, num_clients: int, seeds: SeedSequence) -> torch.Tensor:
        return self.sampler.sample(num_clients, seeds.generator(info_round, SERVER, "sample"))

    def _client_stds(self, clients: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(C_{k,t}, σ_{k,t}) of the cohort: eq. 5.32 with N = the number of aggregated clients."""
        ids = clients.numpy()
        clips = self.clip_norms[ids]
        k = len(ids)
        stds = np.array([pmidp_client_noise_std(float(e), float(c), self.dim, k)
                         for e, c in zip(self.budgets[ids], clips, strict=True)])
        return clips, stds

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, secure_aggregation: bool) -> list[Release]:
        del num_samples  # eq. 5.33 weights depend on the declared noise only
        if info.clients.numel() == 0:
            return []
        clips, stds = self._client_stds(info.clients)
        weights = pmidp_aggregation_weights(stds)
        claimed = pmidp_claimed_epsilon(clips, stds, self.dim)
        self._claimed.update({int(c): float(e) for c, e in zip(info.clients.tolist(), claimed, strict=True)})
        return round_releases(info.clients.tolist(), stds.tolist(), clips.tolist(), weights.tolist(),
                              secure_aggregation=secure_aggregation, per_client_public=True)

    @staticmethod
    def aggregate(noisy_uploads: torch.Tensor, declared_noise_stds: list[float]) -> tuple[torch.Tensor, np.ndarray]:
        """The server's whole view: noisy uploads and their declared stds → p_{k,t}, Σ p_k x̃_k.

        References:
            002_2503fd7671e29121.txt, eq. 5.33.
        """
        weights = pmidp_aggregation_weights(declared_noise_stds)
        return WeightedMean(torch.as_tensor(weights, dtype=torch.float32))(noisy_uploads), weights

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        ids = info.clients.numpy()
        clips, stds = self._client_stds(info.clients)
        # client side: clip to C_{k,t} (eq. 5.19), noise σ_{k,t} (eq. 5.32), declare σ_{k,t}
        clipped, norms = clip_by_l2_norm(local.params, torch.as_tensor(clips, dtype=local.params.dtype))
        noisy = add_gaussian_noise_per_client(
            clipped, torch.as_tensor(stds, dtype=local.params.dtype), _noise_generators(info))
        # server side: only (noisy uploads, declared stds)
        mean, weights = self.aggregate(noisy, stds.tolist())
        # client side, for the next round: eq. 5.17–5.18 on the unclipped local-model norm
        eta = self.options.clip_lr
        if eta > 0:
            norm_np = norms.double().cpu().numpy()
            self.clip_norms[ids] = clips - eta * (clips - norm_np)
        return RoundOutput(mean.to(global_params.device), {
            "param_norm_mean": float(norms.mean()),
            "clipped_fraction": float((norms > torch.as_tensor(clips, dtype=norms.dtype)).float().mean()),
            "noise_stds": _floats(stds),
            "clip_norms": _floats(clips),
            "weights": _floats(weights),
            "max_weight": float(weights.max()),
            "aggregate_noise_std": float(math.sqrt(float(np.sum((weights * stds) ** 2)))),
        })

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
                "norms, i.e. from private data; the declared sigma_{k,t} (proportional to C_{k,t}) "
                "reveals them to the server and the weights p_{k,t} reveal them to the public. The "
                "certified epsilon covers the Gaussian releases at the enforced sensitivity "
                "2 C_{k,t}, not this release of the norms")
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norms": self.clip_norms.tolist(),
                "claimed": {str(k): v for k, v in self._claimed.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clip_norms" in state:
            clips = np.asarray(state["clip_norms"], dtype=np.float64)
            if clips.shape != (self.num_clients,):
                raise ConfigError(
                    f"checkpoint holds {clips.shape[0]} clip norms for {self.num_clients} clients.")
            self.clip_norms = clips
        self._claimed = {int(k): float(v) for k, v in state.get("claimed", {}).items()}


# --------------------------------------------------------------------------- registry


def _build_scheme(side: Literal["server", "client"]) -> Any:
    def build(options: dict[str, Any], sampler: Any, ctx: Any) -> MidpScheme:
        from dpfl.algorithms.registry import parse_options

        opts = parse_options(MidpOptions, options, f"midp-{side}")
        return MidpScheme(side, opts, sampler, ctx.num_clients, ctx.num_params, ctx.config.seed,
                          ctx.privacy.delta)

    return build


def _build_pmidp(options: dict[str, Any], sampler: Any, ctx: Any) -> PmidpFl:
    from dpfl.algorithms.registry import parse_options

    opts = parse_options(PmidpOptions, options, "pmidp-fl")
    return PmidpFl(opts, sampler, ctx.num_clients, ctx.num_params, ctx.config.seed, ctx.privacy.delta)


ALGORITHMS = {
    "midp-server": _build_scheme("server"),
    "midp-client": _build_scheme("client"),
    "pmidp-fl": _build_pmidp,
}
