"""DP-FedAvg (004 Algorithm 1), with BLUR and LUS (004 Algorithm 2) and adaptive clipping.

Each round every client joins independently with probability p (the sampler); each sampled
client runs Q local SGD steps (``local.steps``), clips its update Δ to L2 norm S, and — in the
``local`` variant of 004 Alg. 1 (LocalUpdate line 8) — adds N(0, S²σ²/|P_t| I) before
uploading; the server sums the uploads, divides by the **expected** cohort size m = pN (the
fixed-denominator estimator of McMahan et al. 2018; m = K for fixed-size sampling) and takes a
server step w ← w + η_g · Σ Δ̃ / m. In the ``central`` variant the server adds the same total
noise once, N(0, (Sσ)² I), to the sum: the broadcast model is identically distributed, but the
server sees clean uploads. 004 Alg. 1 line 7 divides by the realized |P_t|; that estimator's
denominator changes when a client is added, so the Gaussian sum query the certificate prices
would not be what is released — dpfl uses the fixed denominator, whose release *is* that query
(the sum's noise is Sσ whatever |P_t| is: the clients split it over the realized cohort, and
the server tops up what did not arrive). An empty round (|P_t| = 0, possible under Poisson
sampling) still releases w ← w + η_g · N(0, (Sσ)² I) / m, drawn by the server: the same
mechanism with an empty sum, never an un-noised repeat of the model.

Options on top of plain DP-FedAvg (``dp-fedavg-blur-lus`` sets the paper's defaults λ = 0.4,
c = 0.7):

* ``blur_lambda`` λ > 0 — BLUR (004 eq. 5, 7): the local objective gains
  (λ/2)·max(0, ‖w − w^t‖² − S²) (:mod:`dpfl.client.blur`).
* ``lus_sparsity`` c > 0 — LUS (004 eq. 11–15): per layer keep the (1 − c)·d_j entries of Δ with
  the largest |∂f/∂w · Δw| (gradient at the final local weights), zero the rest, *then* clip and
  noise (:mod:`dpfl.client.lus`, which states precisely why the sensitivity stays S).
* ``adaptive_clip`` — quantile-based clipping of Andrew et al. 2021
  (:mod:`dpfl.server.adaptive_clip`): S_t follows a target quantile of the update norms through
  a noised count; ``noise_multiplier`` is then the *total* multiplier of the round, split between
  the update and the count so that the pair is exactly one Gaussian release of that multiplier.
* ``target_epsilon`` instead of ``noise_multiplier`` — σ is calibrated so that the paper's own
  claim (moments accountant, Poisson sampling, δ of the run) after ``rounds`` rounds equals it
  (:func:`dpfl.privacy.accounting.claimed.dpfedavg_noise_multiplier`).

Privacy: the sensitivity of the sum of clipped updates to adding or removing one client is S,
so the broadcast mean carries noise multiplier σ (public observer, amplified by the secret
Poisson sample). Against the server, the local variant protects each upload only with
multiplier σ/sqrt(|P_t|), and the central variant not at all — unless secure aggregation hides
the uploads. The paper's claim is the moments accountant for the public view
(:func:`dpfl.privacy.accounting.claimed.dpfedavg_claimed_epsilon`).

References:
    004_32e0c8f847edac12.txt, Algorithms 1–2, eq. 5, 7, 11–15 and Theorem 1; Andrew et al. 2021.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.private import Calibration, PrivateAlgorithm, RoundPlan
from dpfl.client.blur import BlurTerm
from dpfl.client.context import LocalProblem, LocalResult, RoundInfo
from dpfl.client.lus import sparsify_updates
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.claimed import dpfedavg_claimed_epsilon, dpfedavg_noise_multiplier
from dpfl.privacy.accounting.cohorts import broadcast_mode
from dpfl.privacy.accounting.ledger import Release, federated_round_releases
from dpfl.privacy.calibration import (
    combined_noise_multiplier,
    dpfedavg_client_noise_std,
    update_noise_multiplier,
)
from dpfl.privacy.mechanisms import (
    add_gaussian_noise,
    add_gaussian_noise_per_client,
    clip_by_l2_norm,
)
from dpfl.rng import SERVER
from dpfl.server.adaptive_clip import COUNT_SENSITIVITY, QuantileClipRule


class AdaptiveClipOptions(BaseModel):
    """``adaptive_clip: {...}`` (Andrew et al. 2021; defaults as they, Flower and TFF use)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_unclipped_quantile: float = Field(0.5, ge=0, le=1, description="γ")
    learning_rate: float = Field(0.2, ge=0, description="η_C of the geometric update")
    count_noise_std: float | None = Field(
        None, gt=0, description="σ_b on the centered count; default expected cohort / 20")


class DpFedAvgOptions(BaseModel):
    """Options of ``algorithm: {name: dp-fedavg, options: {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float | None = Field(None, ge=0, description="σ of 004 Alg. 1 (total, with adaptive clipping)")
    target_epsilon: float | None = Field(
        None, gt=0, description="calibrate σ so the paper's claimed ε after `rounds` rounds is this")
    clip_norm: float = Field(..., gt=0, description="S, the L2 bound of each client update (initial S with adaptive_clip)")
    server_lr: float = Field(1.0, gt=0, description="η_g")
    variant: Literal["local", "central"] = "local"
    blur_lambda: float = Field(0.0, ge=0, description="λ of BLUR (004 eq. 5); 0 = off")
    lus_sparsity: float = Field(0.0, ge=0, lt=1, description="c of LUS (004 eq. 14); 0 = off")
    adaptive_clip: AdaptiveClipOptions | None = None

    @model_validator(mode="after")
    def _one_noise_setting(self) -> DpFedAvgOptions:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("give exactly one of `noise_multiplier` and `target_epsilon`")
        return self


def _expected_cohort(sampler: Any, num_clients: int) -> float:
    desc = sampler.describe()
    if desc.get("kind") == "poisson":
        return float(desc["sample_rate"]) * num_clients
    if "num_sampled" in desc:
        return float(desc["num_sampled"])
    return float(num_clients)


@dataclass(frozen=True)
class DpFedAvgCalibration(Calibration):
    """What DP-FedAvg fixes before the run (:func:`dpfedavg_calibration`).

    Attributes:
        noise_multiplier: z, the round's total multiplier (004 Alg. 1's σ; with adaptive clipping
            the joint multiplier of update and count).
        update_multiplier: z_Δ = (z⁻² − (2σ_b)⁻²)^−½, the update's share (z without adaptive clipping).
        count_noise_std: σ_b of the count query (0 without adaptive clipping or without noise).
        denominator: m = qN, the fixed denominator (expected cohort size).
        sample_rate: q, the client sampling rate.
    """

    noise_multiplier: float
    update_multiplier: float
    count_noise_std: float
    denominator: float
    sample_rate: float


def dpfedavg_calibration(options: DpFedAvgOptions, sampler: Any, num_clients: int, delta: float,
                         rounds: int | None) -> DpFedAvgCalibration:
    """z (given, or calibrated so that 004's own claim after ``rounds`` rounds is
    ``target_epsilon``), its split between update and count (Andrew et al. 2021, Thm 1) and the
    fixed denominator: a pure function of the options and the public facts.

    Raises:
        ConfigError: ``target_epsilon`` without ``rounds``; a split that cannot exist.
    """
    desc = sampler.describe()
    q = desc.get("sample_rate")
    if q is None:
        q = desc.get("num_sampled", num_clients) / num_clients
    m = _expected_cohort(sampler, num_clients)
    if options.noise_multiplier is not None:
        z = float(options.noise_multiplier)
    else:
        if rounds is None:
            raise ConfigError("`target_epsilon` needs the number of rounds to calibrate σ.")
        assert options.target_epsilon is not None
        z = dpfedavg_noise_multiplier(options.target_epsilon, float(q), rounds, delta)
    count_std, z_update = 0.0, z
    ac = options.adaptive_clip
    if ac is not None and z > 0:
        count_std = float(ac.count_noise_std if ac.count_noise_std is not None else m / 20.0)
        z_update = update_noise_multiplier(z, count_std)
    return DpFedAvgCalibration(z, z_update, count_std, float(m), float(q))


@dataclass(frozen=True)
class NoisePlan(RoundPlan):
    """Every noise number of one DP-FedAvg round, from one calibration (its round plan).

    The clients add ``client_std`` each (local variant) and the server adds ``server_std`` to the
    sum (central variant) or tops the sum up to ``sum_std`` when fewer than ``cohort`` uploads
    arrive; the count query of adaptive clipping likewise. :meth:`releases` states exactly these
    numbers to the ledger, so what is added and what is certified cannot drift apart.

    Attributes:
        round_idx: the round. clip_norm: S_t. cohort: |P_t|. denominator: m = qN (the fixed denominator).
        central: the server adds all the noise. sum_std: S_t·z_Δ, the noise the sum carries.
        client_std: S_t·z_Δ/sqrt(|P_t|) per client (local variant), else 0.
        count_std: σ_b of the count query (0 without adaptive clipping or without noise).
        count_client_std: σ_b/sqrt(|P_t|) per client (local variant), else 0.
        amplified: the cohort is a secret sample of interchangeable clients (the broadcast may be
            amplified by it: every client adds the same share, and the fixed denominator makes
            the numbers every cohort's).
        count_query: adaptive clipping: the clients also send their (noised) clipped bit.
    """

    round_idx: int
    clip_norm: float
    cohort: int
    denominator: float
    central: bool
    sum_std: float
    client_std: float
    count_std: float
    count_client_std: float
    amplified: bool
    count_query: bool = False

    @property
    def server_std(self) -> float:
        """Noise the server adds to the update sum in every round (central variant)."""
        return self.sum_std if self.central else 0.0

    @property
    def count_server_std(self) -> float:
        """Noise the server adds to the count in every round (central variant)."""
        return self.count_std if self.central else 0.0

    def topup_std(self, arrived: int) -> float:
        """What the server adds to the sum when ``arrived`` of the cohort's uploads arrived (local)."""
        if self.central or arrived >= self.cohort and arrived:
            return 0.0
        return math.sqrt(max(0.0, self.sum_std**2 - arrived * self.client_std**2))

    def count_topup_std(self, arrived: int) -> float:
        """The same top-up for the count query."""
        if self.central or self.count_std == 0 or arrived >= self.cohort and arrived:
            return 0.0
        return math.sqrt(max(0.0, self.count_std**2 - arrived * self.count_client_std**2))

    def public_release(self) -> Release:
        """The broadcast of this round, the same for every cohort — the empty one included: the
        round's mechanism is PoissonSampled(q, Gaussian(z)) whatever the secret sample turns out
        to be, so no outcome of the sample may declare a cheaper event than the noise it draws.

        Without adaptive clipping: the sum's Gaussian, std S_t·z_Δ against S_t, over m. With it:
        the update and the count are two Gaussian queries about the same cohort, jointly one
        Gaussian of multiplier z = (z_Δ⁻² + (2σ_b)⁻²)^−½ (Andrew et al. 2021, Thm 1) — the total
        multiplier the user set — amplified once by the sample. An empty round draws both noises
        (the update top-up and the count top-up), so it is charged the same joint z.
        """
        m = self.denominator
        if self.count_std == 0:
            return Release.gaussian("public", self.sum_std / m, self.clip_norm / m, None, amplifiable=self.amplified)
        z = combined_noise_multiplier(self.sum_std / self.clip_norm, self.count_std / COUNT_SENSITIVITY)
        return Release.gaussian("public", z if math.isfinite(z) else 0.0, 1.0 if math.isfinite(z) else 0.0, None,
                                amplifiable=self.amplified)

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 secure_aggregation: bool = False) -> list[Release]:
        """The releases of this round's rows ``ids``: each upload (server; none in an empty
        round), and :meth:`public_release`, which does not depend on ``ids`` (nor on the sample
        counts: the fixed denominator weighs every client 1/m)."""
        del num_samples
        k, m = len(ids), self.denominator
        out: list[Release] = []
        if k:
            # the sum carries S·z_Δ: the clients' shares, or the server's (central variant)
            top = self.sum_std if self.client_std == 0 else 0.0
            out += federated_round_releases(
                ids, self.client_std, self.clip_norm, [1.0 / m] * k, server_noise_std=top / m,
                secure_aggregation=secure_aggregation, amplifiable=self.amplified)
            if self.count_std > 0:
                top_c = self.count_std if self.count_client_std == 0 else 0.0
                out += federated_round_releases(
                    ids, self.count_client_std, COUNT_SENSITIVITY, [1.0] * k, server_noise_std=top_c,
                    secure_aggregation=secure_aggregation, amplifiable=self.amplified)
        # The server sees the per-client releases (no amplification: they compose exactly).
        return [r for r in out if r.observer == "server"] + [self.public_release()]

    def declared(self, client: int) -> dict[str, float]:
        """Each client's noise shares (the same for every client of the cohort)."""
        del client
        declared = {"noise_std": self.client_std}
        if self.count_query:
            declared["count_noise_std"] = self.count_client_std
        return declared


class DpFedAvg(PrivateAlgorithm[NoisePlan]):
    """See the module docstring."""

    name = "dp-fedavg"
    relation = "add_remove"
    claim_observer = "public"  # 004 Thm 1 is about the broadcast models
    privacy_unit = "client"

    def __init__(
        self,
        options: DpFedAvgOptions,
        sampler: Any,
        num_clients: int,
        delta: float,
        *,
        rounds: int | None = None,
    ) -> None:
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.delta = delta
        self._calibration = dpfedavg_calibration(options, sampler, num_clients, delta, rounds)
        self.noise_multiplier = self._calibration.noise_multiplier
        self.update_multiplier = self._calibration.update_multiplier
        self.count_noise_std = self._calibration.count_noise_std
        # m: the fixed denominator of the cohort sum (expected cohort size, public)
        self.denominator = self._calibration.denominator
        self.clip_norm = float(options.clip_norm)  # S_t: changes only with adaptive clipping
        self._layer_sizes: list[int] | None = None
        self._rule: QuantileClipRule | None = None
        ac = options.adaptive_clip
        if ac is not None:
            self._rule = QuantileClipRule(ac.target_unclipped_quantile, ac.learning_rate, self.denominator)

    def calibration(self) -> DpFedAvgCalibration:
        """z, its update/count split and the fixed denominator (:func:`dpfedavg_calibration`)."""
        return self._calibration

    # ------------------------------------------------------------------ set-up

    def _sample_rate(self) -> float:
        desc = self.sampler.describe()
        q = desc.get("sample_rate")
        if q is None:
            q = desc.get("num_sampled", self.num_clients) / self.num_clients
        return float(q)

    def configure_local(self, problem: LocalProblem) -> LocalProblem:
        """BLUR adds its objective term; LUS asks the engine for ∇f at the final local weights."""
        o = self.options
        self._layer_sizes = problem.layout.sizes()
        local = problem.local
        terms = problem.extra_terms
        if o.blur_lambda > 0:
            terms = (*terms, BlurTerm(o.blur_lambda, lambda: self.clip_norm))
        if o.lus_sparsity > 0:
            local = dataclasses.replace(local, final_gradient=True)
        return dataclasses.replace(problem, local=local, extra_terms=terms)

    # ------------------------------------------------------------------ noise: one calibration

    def plan(self, info: RoundInfo) -> NoisePlan:
        """Every noise number of round ``info.round_idx`` with |P_t| = ``info.cohort``, from S_t
        at the start of the round and the calibrated multipliers: the only place they are
        computed (the clients add, the server tops up, and the ledger is told, all from this
        plan; the loop fixes it before :meth:`aggregate` moves S_t on)."""
        return self.plan_for_cohort(info.round_idx, info.cohort)

    def plan_for_cohort(self, round_idx: int, cohort: int) -> NoisePlan:
        """:meth:`plan` of round ``round_idx`` for a cohort of ``cohort`` clients at the current S_t."""
        local = self.options.variant == "local"
        z = self.update_multiplier
        client_std = dpfedavg_client_noise_std(self.clip_norm, z, cohort) if local and z > 0 and cohort else 0.0
        count_client = (self.count_noise_std / math.sqrt(cohort)
                        if local and self._rule is not None and self.count_noise_std > 0 and cohort else 0.0)
        return NoisePlan(
            round_idx=int(round_idx), clip_norm=self.clip_norm, cohort=int(cohort), denominator=self.denominator, central=not local,
            sum_std=self.clip_norm * z, client_std=client_std,
            count_std=self.count_noise_std if self._rule is not None else 0.0, count_client_std=count_client,
            amplified=broadcast_mode(self.sampler.describe(), self.relation, self.privacy_unit, True) != "shared",
            count_query=self._rule is not None,
        )

    def releases_for_arrivals(self, info: RoundInfo, arrived: torch.Tensor, num_samples: torch.Tensor,
                              secure_aggregation: bool) -> list[Release]:
        """After dropouts: :meth:`aggregate` tops the noise of the broadcast up to the plan, so
        the public release is the planned one; the server saw only the uploads that arrived (or,
        with secure aggregation, their sum *without* the top-up it adds itself)."""
        plan = self.round_plan(info)
        actual = plan.releases(arrived.tolist(), num_samples, secure_aggregation)
        return [r for r in actual if r.observer == "server"] + [plan.public_release()]

    # ------------------------------------------------------------------ the round

    splits_rounds = True
    releases_empty_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """004 Alg. 1 LocalUpdate: Δ = w_k − w (LUS-sparsified), clipped to S_t; in the local
        variant plus N(0, S_t²σ²/|P_t| I) from the client's own stream; with adaptive clipping
        also the client's (noised, in the local variant) centered bit b_k − ½."""
        o = self.options
        plan = self.round_plan(info)
        clip = plan.clip_norm
        updates = local.params.sub_(global_params.to(local.params.device))
        rows = int(info.clients.numel())
        declared: dict[str, torch.Tensor] = {}
        diagnostics: dict[str, torch.Tensor] = {}  # simulation-only metrics, never sent
        if o.lus_sparsity > 0:
            if local.final_grads is None or self._layer_sizes is None:
                raise ConfigError("LUS needs the final-weights gradient: build DP-FedAvg through the runner "
                                  "(configure_local sets `local.final_gradient`).")
            diagnostics["dense_update_norm"] = updates.norm(dim=1).detach().to(torch.float64).cpu()
            updates = sparsify_updates(updates, local.final_grads.to(updates.device), self._layer_sizes, o.lus_sparsity)
        clipped, norms = clip_by_l2_norm(updates, clip)
        client_std = plan.client_std
        dev = clipped.device
        gens = [info.seeds.generator(info.round_idx, int(c), "noise", device=dev) for c in info.clients.tolist()]
        if client_std > 0:
            clipped = add_gaussian_noise_per_client(clipped, client_std, gens)
        declared["noise_std"] = torch.full((rows,), client_std, dtype=torch.float64)
        diagnostics["update_norm"] = norms.detach().to(torch.float64).cpu()
        if self._rule is not None:
            # the count noise is drawn after the update noise from the same per-client streams
            counts = QuantileClipRule.centered_bits(norms.detach().cpu(), clip).to(torch.float64)
            client_cs = plan.count_client_std
            if client_cs > 0:
                z = torch.stack([torch.randn((), generator=g, dtype=torch.float64, device=g.device).cpu() for g in gens])
                counts = counts + client_cs * z
            declared["count"] = counts
            declared["count_noise_std"] = torch.full((rows,), client_cs, dtype=torch.float64)
        return Uploads(info.clients, clipped, local.num_samples, local.train_loss, declared, diagnostics=diagnostics)

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """004 Alg. 1 lines 7–9 with a fixed denominator: the sum of the uploads that arrived
        over m = pN, server noise in the central variant, server step; adaptive clipping updates
        S_t from the noised count.

        If fewer clients arrive than the noise was split over (K' < K = |P_t|, or an empty
        round), the server tops the sum up with N(0, (K − K')·σ_c² I) from its own stream (all
        of S_t·z_Δ when K = 0), so that the broadcast carries exactly the planned noise (and
        likewise for the count): the recorded guarantee stays true, never silently weaker.
        """
        o = self.options
        plan = self.round_plan(info)
        k = plan.cohort
        arrived = uploads.num_rows
        clip = plan.clip_norm
        dev = uploads.params.device if uploads.params.numel() else global_params.device
        client_std = plan.client_std
        missing = k - arrived
        if missing < 0:
            raise ConfigError(f"dp-fedavg: {arrived} uploads for a cohort of {k}")
        total = (uploads.params.sum(0) if arrived else torch.zeros_like(global_params)).to(dev)
        topup_std = plan.topup_std(arrived)
        if topup_std > 0:
            topup = info.seeds.generator(info.round_idx, SERVER, "topup", device=dev)
            total = add_gaussian_noise(total.unsqueeze(0), topup_std, topup)[0]
        server_gen = info.seeds.generator(info.round_idx, SERVER, "server_noise", device=dev)
        if plan.server_std > 0:
            total = add_gaussian_noise(total.unsqueeze(0), plan.server_std, server_gen)[0]
        mean = total / plan.denominator
        new_global = global_params + o.server_lr * mean.to(global_params.device)
        norms = uploads.diagnostics.get("update_norm")  # simulation only: a client never sends its norm
        metrics: dict[str, Any] = {"clip_norm": clip} if arrived else {"clip_norm": clip, "arrived": 0}
        if "dense_update_norm" in uploads.diagnostics:
            metrics["dense_update_norm_mean"] = float(uploads.diagnostics["dense_update_norm"].mean())
        if self._rule is not None:
            total_count = float(uploads.declared["count"].sum()) if arrived else 0.0
            top_cs = plan.count_topup_std(arrived)
            if top_cs > 0:
                topup_c = info.seeds.generator(info.round_idx, SERVER, "topup_count")
                total_count += float(torch.randn((), generator=topup_c, dtype=torch.float64)) * top_cs
            if plan.count_server_std > 0:
                total_count += float(torch.randn((), generator=server_gen, dtype=torch.float64,
                                                 device=dev)) * plan.count_server_std
            frac = self._rule.unclipped_fraction(total_count)
            self.clip_norm = self._rule.next_clip(clip, frac)
            metrics["unclipped_fraction_noised"] = frac
        if norms is not None:
            metrics.update({
                "update_norm_mean": float(norms.mean()),
                "update_norms": [round(float(x), 6) for x in norms.tolist()],
                "clipped_fraction": float((norms > clip).float().mean()),
            })
        metrics.update({
            "client_noise_std": client_std,
            "noise_multiplier": self.noise_multiplier,
        })
        if missing:
            metrics["topped_up_clients"] = missing
        return RoundOutput(new_global, metrics)

    def certified_noise_multiplier(self, target_epsilon: float, rounds: int) -> float:
        """The smallest total multiplier z whose broadcast — this algorithm's own public release
        (:meth:`NoisePlan.public_release`), under its own sampler, ``rounds`` times — the
        accountant certifies at ``target_epsilon`` (the public's ex-ante guarantee; δ of the run).
        ``dpfl account dp-fedavg --epsilon`` then dry-runs the config with that z."""
        from dpfl.privacy.accounting.certify import calibrate_noise_multiplier
        from dpfl.privacy.accounting.events import compose

        def event(z: float) -> Any:
            scaled = dataclasses.replace(self.plan_for_cohort(0, 0), sum_std=self.clip_norm * z, count_std=0.0)
            one = self.sampler.wrap_event(scaled.public_release().event(), self.num_clients)
            return compose([one] * int(rounds))

        return calibrate_noise_multiplier(event, target_epsilon, self.delta, relation=self.relation)

    # ------------------------------------------------------------------ claims and state

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        if rounds_done == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return float("inf")
        return dpfedavg_claimed_epsilon(self.noise_multiplier, self._sample_rate(), rounds_done, self.delta)

    def claim_notion(self) -> str:
        return (f"004 (moments accountant, Thm 1): (ε, δ={self.delta:g})-DP per client, add/remove, "
                "for the broadcast models under Poisson sampling")

    def not_covered(self) -> list[str]:
        return []

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clip_norm" in state:
            self.clip_norm = float(state["clip_norm"])


def _build(options: dict[str, Any], sampler: Any, ctx: Any, defaults: dict[str, Any] | None = None) -> DpFedAvg:
    from dpfl.algorithms.registry import parse_options

    merged = {**(defaults or {}), **options}
    name = "dp-fedavg-blur-lus" if defaults else "dp-fedavg"
    return DpFedAvg(parse_options(DpFedAvgOptions, merged, name), sampler, ctx.num_clients, ctx.privacy.delta,
                    rounds=ctx.config.rounds)


def _build_blur_lus(options: dict[str, Any], sampler: Any, ctx: Any) -> DpFedAvg:
    return _build(options, sampler, ctx, {"blur_lambda": 0.4, "lus_sparsity": 0.7})


ALGORITHMS = {"dp-fedavg": _build, "dp-fedavg-blur-lus": _build_blur_lus}
