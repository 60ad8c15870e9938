"""DP-FTRL and matrix-factorization noise: private federated training when clients cannot be sampled.

Each round the cohort a participation schema gives (:mod:`dpfl.sampling.schemas`: cyclic order,
cyclic Poisson, or whoever checks in) runs Q local SGD steps (``local``), clips its update Δ to L2
norm C and uploads it; the server sums the uploads, adds σC·w_t — round t's entry of noise
*correlated across rounds* by a strategy (:mod:`dpfl.privacy.mechanisms.correlated`) — divides by
a public denominator m (the schema's expected cohort) and takes a server step with heavy-ball
momentum β and a learning rate η_t that cools down linearly over the last ``cooldown_rounds``.
Streamed, the noise is w = C⁻¹z (the tree: the differences of Honaker's prefix estimates), so the
models released are a post-processing of C·x + z, x the rounds' clipped sums:

* ``blt`` — buffered linear Toeplitz C (Dvijotham et al. 2024, arXiv 2404.16706), its parameters
  optimized for n = ``rounds``, the min-separation b and the workload (prefix sums, or momentum
  β); memory ``buffers``·|θ|;
* ``banded`` — banded Toeplitz C with ``bands`` <= b (Choquette-Choo et al. 2023, arXiv
  2306.08153), optimized likewise; memory (bands − 1)·|θ|; under cyclic Poisson it is *amplified*
  (each client's rounds are Poisson-sampled Gaussians, §4);
* ``tree`` — DP-FTRL's binary tree with Honaker's estimator, restarted every ``restart_every``
  <= b rounds (Kairouz et al. 2021, arXiv 2103.00039); memory O(log n)·|θ|;
* ``independent`` — C = I: fresh noise every round, i.e. central DP-FedAvg certified *without*
  amplification by sampling (what DP-FedAvg can honestly claim on a fleet that cannot be sampled).

Privacy (:mod:`dpfl.privacy.releases.factorization`, :mod:`dpfl.privacy.releases.tree`): the
public sees the models; a participation at round t adds G_tt + 2·Σ_{s<t} |G_st| to the client's
squared sensitivity (clip = 1; G = CᵀC, s its earlier rounds), recorded as one Gaussian per
participation (tree: one dp-accounting tree event per participation, at most one per tree).
The certificate is the composition at the participation pattern drawn (ex ante for a cyclic
schedule; given the check-ins under availability); the *claim* is the papers' figure, the
Gaussian mechanism at the schema's worst-case sensitivity (any pattern of at most k
participations b apart), which the certificate never exceeds. The server sees each clipped update
(central DP: a trusted server adds the noise after the sum) — certified ε = ∞ against it, stated,
never hidden; with an ideal secure sum it still learns the exact sum of the clipped updates.
Relation: add/remove of one client's updates with the schedule fixed (zero-out).

References:
    Kairouz et al. 2021 (arXiv 2103.00039); Choquette-Choo et al. 2023 (arXiv 2306.08153);
    Dvijotham et al. 2024 (arXiv 2404.16706); Denisov et al. 2022 (arXiv 2202.08312).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import DpFtrlOptions, parse_options
from dpfl.algorithms.private import Calibration, PrivateAlgorithm, RoundPlan
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.claimed import (
    amplified_mf_claimed_epsilon,
    mf_claimed_epsilon,
    tree_restart_claimed_epsilon,
)
from dpfl.privacy.mechanisms import clip_by_l2_norm
from dpfl.privacy.mechanisms.correlated import (
    IdentityStrategy,
    NoiseStream,
    Strategy,
    TreeStrategy,
    optimize_banded_toeplitz,
    optimize_blt,
)
from dpfl.privacy.releases import ExactRelease, FactorizationRelease, Release, TreeRelease
from dpfl.rng import SERVER

__all__ = ["DpFtrl", "DpFtrlCalibration", "FtrlPlan", "build_strategy"]

_STRATEGY_KIND = {"blt": "blt", "banded": "banded", "independent": "identity", "tree": "tree"}


@lru_cache(maxsize=16)
def build_strategy(mechanism: str, rounds: int, min_separation: int, max_participations: int,
                   bands: int | None, buffers: int, restart_every: int | None, momentum: float) -> Strategy:
    """The strategy of ``mechanism`` for ``rounds`` rounds and the schema (b, k) — optimized for the
    workload (prefix sums, or heavy-ball momentum β > 0) where it is optimized (banded, BLT).
    Deterministic, and cached per process (a dry run and the run share it)."""
    workload: Any = ("momentum", momentum) if momentum > 0 else "prefix"
    if mechanism == "independent":
        return IdentityStrategy(rounds)
    if mechanism == "tree":
        period = restart_every or min_separation
        if period > min_separation:
            raise ConfigError(f"dp-ftrl tree: `restart_every` ({period}) must be at most `sampling.min_separation` "
                              f"({min_separation}), so that no client takes part twice in one tree.")
        return TreeStrategy(rounds, restart_every=period)
    if mechanism == "banded":
        b = bands or min_separation
        if b > min_separation:
            raise ConfigError(f"dp-ftrl banded: `bands` ({b}) must be at most `sampling.min_separation` "
                              f"({min_separation}): the sensitivity is proven for bands <= b.")
        return optimize_banded_toeplitz(rounds, min(b, rounds), min_separation=min_separation,
                                        max_participations=max_participations, workload=workload)
    if mechanism == "blt":
        return optimize_blt(rounds, min_separation=min_separation, max_participations=max_participations,
                            num_buffers=buffers, workload=workload)
    raise ConfigError(f"unknown dp-ftrl mechanism {mechanism!r}; valid: {sorted(_STRATEGY_KIND)}.")


@dataclass(frozen=True)
class DpFtrlCalibration(Calibration):
    """What DP-FTRL fixes before the run.

    Attributes:
        mechanism: blt | banded | tree | independent.
        noise_multiplier: σ, the std of z per coordinate over the clip norm.
        min_separation: b. max_participations: k (⌈n/b⌉ when the schema sets none).
        max_sensitivity: the schema's worst-case sensitivity of C (clip = 1): the claim's.
        denominator: m, the public cohort size the noisy sum is divided by.
        sample_rate: q under cyclic Poisson (amplified), else 1.
        memory_vectors: the vectors of |θ| the noise stream holds between rounds.
        strategy: the strategy's JSON form (its optimized parameters).
    """

    mechanism: str
    noise_multiplier: float
    min_separation: int
    max_participations: int
    max_sensitivity: float
    denominator: float
    sample_rate: float
    memory_vectors: int
    strategy: dict[str, Any]


@dataclass(frozen=True)
class FtrlPlan(RoundPlan):
    """Every noise number of one DP-FTRL round.

    Attributes:
        round_idx: t. clip_norm: C. noise_std: σC (std of z per coordinate).
        increments: (client, squared-sensitivity increment at clip 1) for the cohort, in order.
        mechanism: blt | banded | tree | independent. tree_steps: the leaves of round t's tree.
        sample_rate: q under cyclic Poisson, else 1. group: round t's group under cyclic Poisson.
        column_norm: ‖C[:, t]‖ (the amplified release's sensitivity at clip 1).
    """

    round_idx: int
    clip_norm: float
    noise_std: float
    mechanism: str
    increments: tuple[tuple[int, float], ...]
    tree_steps: int = 0
    sample_rate: float = 1.0
    group: tuple[int, ...] = ()
    column_norm: float = 0.0

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """The server sees the clipped updates (or, with an ideal secure sum, their exact sum): ε = ∞
        for the rows; the public sees the models: one release per participation (cyclic Poisson: the
        round's whole group, amplified)."""
        del num_samples, ideal_secure_sum
        out: list[Release] = []
        if ids:
            out.append(ExactRelease("server", tuple(ids)))
        kind = _STRATEGY_KIND[self.mechanism]
        if self.sample_rate < 1.0:
            if self.group:
                out.append(FactorizationRelease("public", kind, self.noise_std, self.clip_norm * self.column_norm,
                                                self.group, sample_rate=self.sample_rate))
            return out
        if not ids:
            return out
        inc = dict(self.increments)
        if self.mechanism == "tree":
            z = self.noise_std / self.clip_norm if self.clip_norm > 0 else math.inf
            out.append(TreeRelease("public", z, self.tree_steps, tuple(ids)))
            return out
        by_increment: dict[float, list[int]] = defaultdict(list)
        for c in ids:
            if c not in inc:
                raise ConfigError(f"dp-ftrl: client {c} is not in round {self.round_idx}'s planned cohort.")
            by_increment[inc[c]].append(c)
        for value, clients in sorted(by_increment.items()):
            out.append(FactorizationRelease("public", kind, self.noise_std,
                                            self.clip_norm * math.sqrt(max(value, 0.0)), tuple(clients)))
        return out


    def declared(self, client: int) -> dict[str, float]:
        """A client adds no noise (the server adds the correlated noise after the sum)."""
        del client
        return {"noise_std": 0.0}


class DpFtrl(PrivateAlgorithm[FtrlPlan]):
    """See the module docstring."""

    name = "dp-ftrl"
    relation = "add_remove"
    claim_observer = "public"
    privacy_unit = "client"
    splits_rounds = True
    releases_empty_rounds = True
    sums_uploads = True

    def __init__(self, options: DpFtrlOptions, sampler: Any, num_clients: int, delta: float, rounds: int) -> None:
        desc = sampler.describe()
        if not getattr(sampler, "memory", False):
            raise ConfigError(
                f"dp-ftrl needs a participation schema (`sampling.kind`: min_separation, cyclic_poisson or "
                f"availability); found {desc.get('kind')!r}. With random client sampling use dp-fedavg.")
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.delta = delta
        self.rounds = int(rounds)
        b, k = sampler.schema()
        kind = desc["kind"]
        if k is None:
            k = math.ceil(self.rounds / b)
        q = float(desc["sample_rate"]) if kind == "cyclic_poisson" else 1.0
        if kind == "cyclic_poisson" and options.mechanism not in ("banded", "independent"):
            raise ConfigError(f"dp-ftrl {options.mechanism} under cyclic Poisson: only banded MF (bands <= b) and "
                              "independent noise are amplified by it; use sampling.kind min_separation or "
                              "availability for BLT and the tree.")
        self.strategy = build_strategy(options.mechanism, self.rounds, b, k, options.bands, options.buffers,
                                       options.restart_every, options.server_momentum)
        self._worst: dict[tuple[int, int], float] = {}
        self.max_sensitivity = float(self.strategy.max_sensitivity(b, k))
        self.sample_rate = q
        z = options.noise_multiplier
        if z is None:
            assert options.target_epsilon is not None
            z = self._calibrate(options.target_epsilon, b, k)
        denominator = options.denominator or float(sampler.expected_cohort(num_clients))
        if not denominator > 0:
            raise ConfigError(f"dp-ftrl: the schema's expected cohort is {denominator}; set `denominator`.")
        self._calibration = DpFtrlCalibration(
            mechanism=options.mechanism, noise_multiplier=float(z), min_separation=b, max_participations=k,
            max_sensitivity=self.max_sensitivity, denominator=float(denominator), sample_rate=q,
            memory_vectors=int(self.strategy.memory_vectors), strategy=self.strategy.to_dict())
        self.noise_multiplier = float(z)
        self.clip_norm = float(options.clip_norm)
        self._history: dict[int, list[int]] = {}
        self._stream: NoiseStream | None = None
        self._momentum: torch.Tensor | None = None

    # ------------------------------------------------------------------ calibration and claim

    def _claim_event_epsilon(self, z: float, b: int, k: int, rounds_done: int) -> float:
        """The papers' ε at multiplier ``z`` after ``rounds_done`` rounds (the schema's worst case)."""
        if rounds_done <= 0:
            return 0.0
        if z == 0:
            return math.inf
        parts = min(k, math.ceil(rounds_done / b))
        if self.sample_rate < 1.0:
            col = max(math.sqrt(self.strategy.column_inner(t, t)) for t in range(min(b, self.rounds)))
            return amplified_mf_claimed_epsilon(z, col, self.sample_rate, parts, self.delta)
        if self.options.mechanism == "tree":
            period = self.options.restart_every or b
            return tree_restart_claimed_epsilon(z, [min(period, self.rounds)] * parts, self.delta)
        return mf_claimed_epsilon(z, self._worst_sensitivity(b, parts), self.delta)

    def _worst_sensitivity(self, b: int, parts: int) -> float:
        key = (b, parts)
        if key not in self._worst:
            self._worst[key] = float(self.strategy.max_sensitivity(b, parts))
        return self._worst[key]

    def _calibrate(self, target: float, b: int, k: int) -> float:
        """The smallest σ whose claim (the schema's worst case over the whole run) is the target."""
        lo, hi = 1e-3, 1.0
        while self._claim_event_epsilon(hi, b, k, self.rounds) > target:
            hi *= 2
            if hi > 1e6:
                raise ConfigError(f"dp-ftrl: no noise multiplier below 1e6 reaches target_epsilon = {target}.")
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if self._claim_event_epsilon(mid, b, k, self.rounds) > target:
                lo = mid
            else:
                hi = mid
            if hi / lo < 1 + 1e-6:
                break
        return hi

    def calibration(self) -> DpFtrlCalibration:
        return self._calibration

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        c = self._calibration
        return self._claim_event_epsilon(self.noise_multiplier, c.min_separation, c.max_participations, rounds_done)

    def claim_notion(self) -> str:
        c = self._calibration
        schema = (f"cyclic Poisson, b = {c.min_separation}, q = {c.sample_rate:g}" if c.sample_rate < 1
                  else f"at most {c.max_participations} participations, >= {c.min_separation} rounds apart")
        return (f"{c.mechanism} noise: (ε, δ={self.delta:g})-DP per client, zero-out, for the released models, "
                f"worst participation pattern of the schema ({schema})")

    def not_covered(self) -> list[str]:
        out = ["the server sees every clipped update (central DP: a trusted server adds the correlated noise); "
               "its certificate is ε = ∞ and the guarantee is the public's",
               "the run's stored metrics (cohort sizes, un-noised update norms and training losses) are the "
               "experimenter's view, not the public's"]
        if self.sample_rate < 1.0:
            out.append("cyclic Poisson: the groups (client i in group i mod b) are public; who was sampled in a "
                       "round, and how many, must stay hidden from the public (the amplification rests on it)")
        else:
            out.append("the participation schedule (who took part when) is public, as is each client's sample count")
        return out

    # ------------------------------------------------------------------ the plan

    def _increment(self, client: int, t: int) -> float:
        previous = [s for s in self._history.get(client, ()) if s < t]
        return float(self.strategy.sensitivity_increment(t, previous))

    def plan(self, info: RoundInfo) -> FtrlPlan:
        """Round t's numbers: σC, each cohort client's increment from its earlier rounds (recorded
        here, idempotently, so a second call for the same round gives the same plan)."""
        t = int(info.round_idx)
        if t >= self.rounds:
            raise ConfigError(f"dp-ftrl's strategy was built for {self.rounds} rounds; round {t} is beyond it.")
        cohort = [int(c) for c in info.clients.tolist()]
        increments = tuple((c, self._increment(c, t)) for c in cohort)
        for c in cohort:
            rounds = self._history.setdefault(c, [])
            if t not in rounds:
                rounds.append(t)
                rounds.sort()
        group: tuple[int, ...] = ()
        col = 0.0
        if self.sample_rate < 1.0:
            group = tuple(self.sampler.group(t, self.num_clients))
            col = math.sqrt(self.strategy.column_inner(t, t))
        steps = 0
        if self.options.mechanism == "tree":
            period = self.options.restart_every or self._calibration.min_separation
            start = (t // period) * period
            steps = min(period, self.rounds - start)
        return FtrlPlan(round_idx=t, clip_norm=self.clip_norm, noise_std=self.clip_norm * self.noise_multiplier,
                        mechanism=self.options.mechanism, increments=increments, tree_steps=steps,
                        sample_rate=self.sample_rate, group=group, column_norm=col)

    # ------------------------------------------------------------------ the round

    def client_step_bytes(self, num_params: int) -> int:
        return 4 * num_params

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """Δ = w_k − w clipped to C: what a client sends (no noise: the server adds it)."""
        plan = self.round_plan(info)
        updates = local.params.sub_(global_params.to(local.params.device))
        clipped, norms = clip_by_l2_norm(updates, plan.clip_norm)
        rows = int(info.clients.numel())
        return Uploads(info.clients, clipped, local.num_samples, local.train_loss,
                       {"noise_std": torch.zeros(rows, dtype=torch.float64)},
                       diagnostics={"update_norm": norms.detach().to(torch.float64).cpu()})

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """Σ clipped updates + σC·w_t, over m, then the server step (momentum β, η_t with cooldown)."""
        o = self.options
        plan = self.round_plan(info)
        t = plan.round_idx
        if uploads.num_rows and uploads.params_sum is None:
            # the rows themselves (a deployment's uploads): the trusted server clips them again, so a
            # faulty client's oversized update cannot exceed the sensitivity (a no-op for honest rows)
            total = clip_by_l2_norm(uploads.params, plan.clip_norm)[0].sum(0)
        else:
            total = uploads.summed_params() if uploads.num_rows else torch.zeros_like(global_params)
        w = self._draw(t, int(total.numel()), total, info)
        noisy = total + plan.noise_std * w.to(total.dtype)
        mean = noisy / self._calibration.denominator
        if o.server_momentum > 0:
            prev = self._momentum
            self._momentum = mean if prev is None else o.server_momentum * prev.to(mean.device) + mean
            step = self._momentum
        else:
            step = mean
        lr = self.learning_rate(t)
        new_global = global_params + lr * step.to(global_params.device)
        metrics: dict[str, Any] = {"clip_norm": plan.clip_norm, "noise_multiplier": self.noise_multiplier,
                                   "server_lr": lr}
        norms = uploads.diagnostics.get("update_norm")
        if norms is not None and norms.numel():
            metrics.update({"update_norm_mean": float(norms.mean()),
                            "clipped_fraction": float((norms > plan.clip_norm).float().mean())})
        if not uploads.num_rows:
            metrics["arrived"] = 0
        return RoundOutput(new_global, metrics)

    def _draw(self, t: int, num_params: int, like: torch.Tensor, info: RoundInfo) -> torch.Tensor:
        """w_t, drawing (and, after a resume, replaying) the rounds up to t in order."""
        if self._stream is None or self._stream.num_params != num_params:
            self._stream = self.strategy.noise_stream(num_params, dtype=torch.float32, device=like.device)
        stream = self._stream
        if stream.next_round > t:
            raise ConfigError(f"dp-ftrl: round {t}'s noise was already drawn (the stream is at round "
                              f"{stream.next_round}).")
        if stream.next_round < t and not info.seeds.reproducible_noise:
            raise ConfigError("dp-ftrl: a resumed run whose noise is not seeded (secure mode, or "
                              "`privacy.noise_generator: csprng`) cannot rebuild its correlated noise (its streams "
                              "are not reproducible); restart the run.")
        w = torch.empty(0)
        while stream.next_round <= t:
            r = stream.next_round
            w = stream.next(r, info.seeds.noise_generator(r, SERVER, "correlated_noise", device=like.device))
        return w

    def learning_rate(self, t: int) -> float:
        """η_t: ``server_lr``, decaying linearly to ``cooldown_final``·η over the last ``cooldown_rounds``."""
        o = self.options
        start = self.rounds - o.cooldown_rounds
        if o.cooldown_rounds <= 0 or t < start:
            return o.server_lr
        frac = (t - start + 1) / o.cooldown_rounds
        return o.server_lr * (1.0 - frac * (1.0 - o.cooldown_final))

    # ------------------------------------------------------------------ state

    def client_state(self, client: int | None = None, info: RoundInfo | None = None) -> dict[str, Any]:
        """A client needs nothing of the server's state (it clips its update; the clip is public)."""
        del client, info
        return {}

    def state_dict(self) -> dict[str, Any]:
        # the schedule itself is not saved: the sampler redraws the rounds before a resumed one
        # from their streams (a cohort is a function of the seed and the round)
        state: dict[str, Any] = {"history": {str(c): list(r) for c, r in self._history.items()}}
        if self._momentum is not None:
            state["momentum"] = self._momentum.detach().cpu().clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "history" in state:
            self._history = {int(c): [int(x) for x in r] for c, r in state["history"].items()}
        if "momentum" in state:
            self._momentum = state["momentum"].clone()  # moved to the parameters' device when used
        self._stream = None  # rebuilt by replaying the rounds before the next one


def _build(options: dict[str, Any], sampler: Any, ctx: Any) -> DpFtrl:
    opts = parse_options(DpFtrlOptions, options, "dp-ftrl")
    return DpFtrl(opts, sampler, ctx.num_clients, ctx.privacy.delta, ctx.config.rounds)


ALGORITHMS = {"dp-ftrl": _build}
