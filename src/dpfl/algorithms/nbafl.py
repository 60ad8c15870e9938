"""NbAFL (003 Algorithm 1): noising before aggregation, with optional K-random scheduling.

Each scheduled client minimizes its proximal local objective F_i(w) + (μ/2)‖w − w^{t−1}‖²
(``LocalTraining.prox_mu``, set by :meth:`NbAfl.configure_local`; the engine runs the
``local:`` settings of the run config), clips its *local parameters* (not the update) to L2
norm C (Alg. 1 line 8), adds N(0, σ_U² I) from its own generator and uploads w̃_i. The server
aggregates Σ p_i w̃_i (eq. 1: p_i = |D_i|/Σ_j|D_j| over the cohort, or uniform) and adds
N(0, σ_D² I) (Alg. 1 line 15); the noised aggregate is the next global model.

Noise levels (003 §III-A, Theorem 1, Lemma 4; every formula from
:mod:`dpfl.privacy.calibration`):

* σ_U = c·L·Δs_U/ε with c = sqrt(2 ln(1.25/δ)), Δs_U = 2C/m (m = the smallest local data set),
  L = the exposure count (default T, every upload exposed);
* σ_D from Theorem 1 (all N clients) or Lemma 4 (K of N clients per round, ``sampling.kind:
  fixed``). Lemma 4 has no value when ε >= −T·ln(1 − K/N) (eq. 69) — as at the paper's own
  Fig. 4–5 settings (N = 50, K = 20, T = 25, ε ∈ {50, 60, 100}); building the algorithm then
  fails with :class:`dpfl.errors.PrivacyPreconditionError`, unless ``downlink_noise: none``
  asks explicitly for uplink noise only (the claimed ε is then computed for that noise).

**Sensitivity — the paper's and the enforced one differ.** The paper's uplink sensitivity
2C/m rests on "argmin of a sum = mean of per-sample argmins" (eq. 4), which is false in
general. What the code enforces is the parameter clip: any change of a client's data moves its
clipped parameters by at most 2C (replace-one). The *claimed* ε
(:func:`dpfl.privacy.accounting.claimed.nbafl_claimed_epsilon`) uses 2C/m, as the paper does;
the *certified* ε (the ledger) uses 2C, per observer:

* server — sees every upload w̃_i (σ_U against 2C), knows whom it scheduled (no sampling
  amplification); the paper's uplink eavesdropper sees at most L of a client's uploads, the
  honest-but-curious server sees all of them;
* public — sees the broadcast Σ p_i w̃_i + n_D: noise sqrt(Σ p_i² σ_U² + σ_D²) against
  max_i p_i · 2C, amplified by the secret K-of-N schedule under K-random scheduling when the
  clients are interchangeable (uniform weights or equal data sets); with weights by unequal
  sizes each participant is charged p_i·2C at the drawn cohort, unamplified
  (:mod:`dpfl.privacy.accounting.broadcast`).

Privacy unit "client" under replace-one: a parameter clip bounds any change of a client's data,
which covers the paper's unit (one record) too.

**Floating-point-safe uplinks** (``privacy.gaussian_noise: lattice``, a deployment's default): each
upload is round(γw̃_i) + Sk(μ) sent as integer/γ
(:class:`dpfl.privacy.mechanisms.lattice.NearestLatticeGaussian`: nearest rounding, μ = (zΔ2)²,
z = σ_U/2C, Δ2 = 2Cγ + √d), recorded as that Skellam release (server); the public's release is the
downlink Gaussian against max_i p_i·Δ2/γ (:meth:`NbAflPlan.lattice_releases`). The downlink noise
n_D itself is still drawn in floating point.

References:
    003_c42e3eb46a620b42.txt, Algorithm 1; §III-A (eq. 4–6); Lemma 1 (eq. 8); Theorem 1
    (eq. 10); §V and Lemma 4 (eq. 21–22); Appendix B and F.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import NbAflOptions, parse_options
from dpfl.algorithms.private import Calibration, CanaryHooks, PrivateAlgorithm, RoundPlan
from dpfl.client.context import LocalProblem, LocalResult, RoundInfo
from dpfl.client.local import LocalTraining
from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.broadcast import broadcast_mode, interchangeable
from dpfl.privacy.accounting.claimed import nbafl_claimed_epsilon
from dpfl.privacy.calibration import (
    classical_gaussian_constant,
    nbafl_downlink_noise_std,
    nbafl_downlink_noise_std_k_random,
    nbafl_uplink_noise_std,
    nbafl_uplink_sensitivity,
)
from dpfl.privacy.mechanisms import (
    add_gaussian_noise,
    add_gaussian_noise_per_client,
    clip_by_l2_norm,
)
from dpfl.privacy.mechanisms.lattice import NearestLatticeGaussian, nearest_lattice, release_values
from dpfl.privacy.releases import Release, SkellamRelease, federated_round_releases
from dpfl.rng import SERVER
from dpfl.sampling import AllClients, FixedSizeSampler
from dpfl.server.aggregators import WeightedMean

__all__ = ["ALGORITHMS", "NbAfl", "NbAflCalibration", "NbAflOptions", "NbAflPlan", "nbafl_calibration"]


@dataclass(frozen=True)
class NbAflCalibration(Calibration):
    """What 003 fixes before the run, from the settings alone.

    Attributes:
        uplink_noise_std: σ_U = c·L·Δs_U/ε (003 §III-A, eq. 8), 0 without noise.
        downlink_noise_std: σ_D of Theorem 1 (eq. 10) or Lemma 4 (K-random, eq. 22), 0 when off.
        clip_norm: C. sensitivity: the enforced 2C (parameter clip, replace-one client).
        paper_sensitivity: Δs_U = 2C/m (eq. 5–6), used for the claim only.
        num_clients: N. cohort: K scheduled per round. min_samples: m.
        rounds: T. exposures: L.
    """

    uplink_noise_std: float
    downlink_noise_std: float
    clip_norm: float
    sensitivity: float
    paper_sensitivity: float
    num_clients: int
    cohort: int
    min_samples: int
    rounds: int
    exposures: int

    @property
    def k_random(self) -> bool:
        """Whether fewer than all clients are scheduled per round (Lemma 4 applies)."""
        return self.cohort < self.num_clients

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (to print or store next to the config)."""
        return {**dataclasses.asdict(self), "k_random": self.k_random}


def nbafl_calibration(options: NbAflOptions, *, client_sizes: list[int], cohort: int, rounds: int,
                      exposures: int, delta: float) -> NbAflCalibration:
    """003's noise levels for these settings: a pure function (every formula from
    :mod:`dpfl.privacy.calibration`).

    Raises:
        PrivacyPreconditionError: Lemma 4 has no value at these settings (eq. 69), naming them.

    References:
        003_c42e3eb46a620b42.txt, §III-A (eq. 8), Theorem 1 (eq. 10), Lemma 4 (eq. 21–22).
    """
    o = options
    m, n, t, ell = min(client_sizes), len(client_sizes), int(rounds), int(exposures)

    def done(sigma_u: float, sigma_d: float) -> NbAflCalibration:
        return NbAflCalibration(sigma_u, sigma_d, float(o.clip_norm), 2.0 * o.clip_norm,
                                nbafl_uplink_sensitivity(o.clip_norm, m), n, int(cohort), m, t, ell)

    if o.epsilon is None:
        return done(0.0, 0.0)
    sigma_u = nbafl_uplink_noise_std(o.epsilon, delta, o.clip_norm, m, ell)
    if o.downlink_noise == "none":
        return done(sigma_u, 0.0)
    if cohort >= n:
        return done(sigma_u, nbafl_downlink_noise_std(o.epsilon, delta, o.clip_norm, m, n, t, ell))
    try:
        sigma_d = nbafl_downlink_noise_std_k_random(o.epsilon, delta, o.clip_norm, m, n, cohort, t, ell)
    except PrivacyPreconditionError as err:
        raise PrivacyPreconditionError(
            f"nbafl with K-random scheduling (K = {cohort} of N = {n}, T = {t}, "
            f"epsilon = {o.epsilon:g}): {err} Use fewer rounds, a smaller epsilon or more "
            "scheduled clients, or set `algorithm.options.downlink_noise: none` to run with the "
            "uplink noise only (its claimed epsilon is then reported for that noise)."
        ) from None
    return done(sigma_u, sigma_d)


@dataclass(frozen=True)
class NbAflPlan(RoundPlan):
    """Every noise number of one NbAFL round, from the calibration (its round plan).

    ``client_step`` adds ``uplink_noise_std`` to each clipped upload, ``aggregate`` adds
    ``downlink_noise_std`` to the weighted mean, and :meth:`releases` states exactly these
    numbers to the ledger.

    Attributes:
        round_idx: the round. uplink_noise_std: σ_U. downlink_noise_std: σ_D.
        clip_norm: C. sensitivity: the enforced 2C.
        uniform: p_i = 1/K (else |D_i| / Σ_cohort |D_j|, eq. 1).
        public_mode: :func:`dpfl.privacy.accounting.broadcast.broadcast_mode`'s answer.
    """

    round_idx: int
    uplink_noise_std: float
    downlink_noise_std: float
    clip_norm: float
    sensitivity: float
    uniform: bool
    public_mode: str
    dim: int = 0  # d, the model's size (the lattice form's √d)
    lattice: bool = False  # ``privacy.gaussian_noise: lattice``: each uplink is a lattice release

    @property
    def uplink(self) -> NearestLatticeGaussian | None:
        """The uplinks' lattice release (σ_U against 2C, nearest rounding, Skellam noise), None
        without uplink noise or without the lattice form."""
        if not self.lattice:
            return None
        return nearest_lattice(self.dim, self.sensitivity, self.uplink_noise_std)

    def lattice_releases(self, ids: list[int], weights: list[float]) -> list[Release]:
        """Each uplink as the Skellam release it is (server), and the broadcast Σ p_i w̃_i + n_D
        (public): with downlink noise, the downlink Gaussian alone against max p_i·Δ2/γ — a client's
        rounded uplink moves by at most Δ2/γ whatever the uplink noises, which are independent of
        the data (the divergences are jointly (quasi-)convex, so the mixture over the uplink noise
        is priced by its worst component); without it, the uplinks' own Skellam releases (the
        broadcast is a post-processing of them)."""
        mech = self.uplink
        assert mech is not None
        server = SkellamRelease("server", mech.variance, mech.l2_sensitivity, mech.l1_sensitivity, tuple(ids),
                                lattice=True, scale=mech.scale)
        if self.downlink_noise_std == 0:
            return [server, dataclasses.replace(server, observer="public")]
        public = federated_round_releases(
            ids, 0.0, mech.l2_sensitivity / mech.scale, weights, server_noise_std=self.downlink_noise_std,
            per_client_public=self.public_mode == "per_client", amplifiable=self.public_mode == "amplified")
        return [server, *(r for r in public if r.observer == "public")]

    def aggregator(self, num_samples: torch.Tensor) -> WeightedMean:
        """The weights p_i of the rows whose sample counts are ``num_samples`` (eq. 1)."""
        if self.uniform:
            return WeightedMean.uniform(int(num_samples.numel()))
        return WeightedMean.by_samples(num_samples)

    def releases(self, ids: list[int], num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        """Each upload (σ_U against 2C) and the broadcast Σ p_i w̃_i + n_D (003 eq. 31–33)."""
        weights = self.aggregator(num_samples).weights.tolist() if num_samples.numel() else []
        if self.uplink is not None:
            return self.lattice_releases([int(c) for c in ids], weights) if ids else []
        no_noise = self.uplink_noise_std == 0 and self.downlink_noise_std == 0
        return federated_round_releases(
            ids,
            self.uplink_noise_std,
            self.sensitivity,  # enforced: parameters clipped to C, replace-one
            weights,
            server_noise_std=self.downlink_noise_std,
            ideal_secure_sum=ideal_secure_sum,
            # no noise at all: charge the broadcast to the cohort, unamplified (ε = ∞ either way;
            # the accountant cannot wrap a non-private event in K-of-N sampling)
            per_client_public=no_noise or self.public_mode == "per_client",
            amplifiable=self.public_mode == "amplified",
        )

    def declared(self, client: int) -> dict[str, float]:
        """Each client's uplink noise σ_U."""
        del client
        return {"noise_std": self.uplink_noise_std}



def nbafl_epsilon_for_uplink_noise_std(uplink_noise_std: float, delta: float, clip_norm: float,
                                       min_samples: int, exposures: int) -> float:
    """The ε whose σ_U = c·L·Δs_U/ε (003 §III-A, eq. 8; Δs_U = 2C/m, eq. 5–6) is
    ``uplink_noise_std``: the paper's calibration, inverted (what ``dpfl account nbafl
    --noise-std`` sets as the ``epsilon`` option, so the dry run then adds exactly σ_U).

    References:
        003, §III-A eq. 5–8.
    """
    return (classical_gaussian_constant(delta) * exposures * nbafl_uplink_sensitivity(clip_norm, min_samples)
            / float(uplink_noise_std))


class NbAfl(PrivateAlgorithm[NbAflPlan]):
    """See the module docstring.

    Args:
        options: validated options.
        sampler: :class:`dpfl.sampling.AllClients` (Alg. 1) or :class:`FixedSizeSampler`
            (K-random scheduling, §V).
        client_sizes: |D_i| of every client [N] (public: m is its minimum).
        rounds: T, the number of aggregations the noise is calibrated for.
        delta: the paper's δ (also the certified δ of the run).
    """

    name = "nbafl"
    relation = "replace_one"
    privacy_unit = "client"

    def __init__(
        self, options: NbAflOptions, sampler: Any, client_sizes: torch.Tensor, rounds: int, delta: float,
        *, num_params: int | None = None, gaussian_noise: str | None = None,
    ) -> None:
        if not isinstance(sampler, (AllClients, FixedSizeSampler)):
            raise ConfigError(
                "nbafl schedules all clients or K of N uniformly without replacement (003 §V): "
                f"`sampling.kind` must be 'all' or 'fixed'. Found {sampler.describe().get('kind')!r}."
            )
        self.options = options
        self.sampler = sampler
        self.num_clients = int(client_sizes.numel())
        self.client_sizes = [int(n) for n in client_sizes.tolist()]
        self.min_samples = int(client_sizes.min())
        self.rounds = int(rounds)
        self.delta = float(delta)
        self.exposures = self.rounds if options.exposures is None else int(options.exposures)
        if self.exposures > self.rounds:
            raise ConfigError(
                f"nbafl: `exposures` (L) must be <= `rounds` (T) (003 §II-B). Found L = {self.exposures}, "
                f"T = {self.rounds}."
            )
        self.cohort = self.num_clients if isinstance(sampler, AllClients) else int(sampler.num_sampled)
        if self.cohort > self.num_clients:
            raise ConfigError(
                f"`sampling.clients_per_round` ({self.cohort}) exceeds the number of clients ({self.num_clients})."
            )
        self._local: LocalTraining | None = None  # set by configure_local
        self._calibration = nbafl_calibration(options, client_sizes=self.client_sizes, cohort=self.cohort,
                                              rounds=self.rounds, exposures=self.exposures, delta=self.delta)
        self.num_params = int(num_params or 0)
        if gaussian_noise == "lattice":
            if self.num_params <= 0:
                self.lattice_refusal = "a model of unknown size"
            elif self.uplink_noise_std == 0:
                self.lattice_refusal = "no uplink noise"
            else:
                self.gaussian_release = "lattice"

    # ------------------------------------------------------------------ calibration

    def calibration(self) -> NbAflCalibration:
        """σ_U, σ_D and the sensitivities fixed before the run (:func:`nbafl_calibration`)."""
        return self._calibration

    @property
    def uplink_noise_std(self) -> float:
        """σ_U of the calibration."""
        return self._calibration.uplink_noise_std

    @property
    def downlink_noise_std(self) -> float:
        """σ_D of the calibration."""
        return self._calibration.downlink_noise_std

    @property
    def k_random(self) -> bool:
        """Whether fewer than all clients are scheduled per round (Lemma 4 applies)."""
        return self._calibration.k_random

    def plan(self, info: RoundInfo) -> NbAflPlan:
        """Every noise number of round ``info.round_idx`` (the same calibrated levels every round)."""
        return NbAflPlan(info.round_idx, self.uplink_noise_std, self.downlink_noise_std, float(self.options.clip_norm),
                         self._calibration.sensitivity, self.options.weights == "uniform", self._public_mode(),
                         dim=self.num_params, lattice=self.gaussian_release == "lattice")

    # ------------------------------------------------------------------ the round

    def configure_local(self, problem: LocalProblem) -> LocalProblem:
        """Adds the proximal term (μ/2)‖w − w^{t−1}‖² of Alg. 1 line 6 to the local objective."""
        local = dataclasses.replace(problem.local, prox_mu=self.options.prox_mu)
        self._local = local
        return dataclasses.replace(problem, local=local)

    def _local_steps(self, num_samples: torch.Tensor) -> int:
        """Local SGD steps of the largest client this round (for the β estimate of dpfl.theory)."""
        local = self._local
        if local is None:
            return 1
        if local.steps is not None:
            return int(local.steps)
        n = int(num_samples.max())
        b = n if local.batch_size is None else min(local.batch_size, n)
        return local.epochs * -(-n // b)

    def _public_mode(self) -> str:
        """How the public's view is recorded (:func:`dpfl.privacy.accounting.broadcast.broadcast_mode`):
        amplified by the K-random schedule only for interchangeable clients (uniform weights or
        equal local data sets), else per participant at the drawn cohort."""
        same = self.options.weights == "uniform" or interchangeable(self.client_sizes)
        return broadcast_mode(self.sampler.describe(), self.relation, self.privacy_unit, same)

    splits_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """Alg. 1 lines 6–9 on each client: clip the local parameters to C, add N(0, σ_U² I)."""
        plan = self.round_plan(info)
        clipped, norms = clip_by_l2_norm(local.params, plan.clip_norm)
        mech = plan.uplink
        if plan.uplink_noise_std > 0:
            gens = [info.seeds.noise_generator(info.round_idx, int(c), "noise") for c in info.clients.tolist()]
            if mech is not None:  # round(γw_i) + Sk(μ), uploaded as integer/γ (a fixed function of it)
                values = release_values(clipped, [mech] * len(gens), gens)
                clipped = values.to(clipped.dtype).to(clipped.device)
            else:
                clipped = add_gaussian_noise_per_client(clipped, plan.uplink_noise_std, gens)
        k = int(info.clients.numel())
        return Uploads(info.clients, clipped, local.num_samples, local.train_loss,
                       {"noise_std": torch.full((k,), plan.uplink_noise_std, dtype=torch.float64)},
                       diagnostics={"param_norm": norms.detach().to(torch.float64).cpu()})

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """Alg. 1 lines 14–15: Σ p_i w̃_i over the uploads that arrived, plus N(0, σ_D² I)."""
        plan = self.round_plan(info)
        aggregate = plan.aggregator(uploads.num_samples)(uploads.params)
        if plan.downlink_noise_std > 0:
            gen = info.seeds.noise_generator(info.round_idx, SERVER, "server_noise")
            aggregate = add_gaussian_noise(aggregate.unsqueeze(0), plan.downlink_noise_std, gen)[0]
        metrics: dict[str, Any] = {}
        norms = uploads.diagnostics.get("param_norm")  # simulation only: never sent by a client
        if norms is not None and norms.numel():
            metrics = {"param_norm_mean": float(norms.mean()), "param_norm_max": float(norms.max()),
                       "clipped_fraction": float((norms > self.options.clip_norm).float().mean())}
        return RoundOutput(aggregate.to(global_params.device), {
            **metrics,
            "uplink_noise_std": plan.uplink_noise_std,
            "downlink_noise_std": plan.downlink_noise_std,
            "local_steps": self._local_steps(uploads.num_samples),
            "min_samples": self.min_samples,
        })

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        # diagnostics for dpfl.theory.nbafl.estimate_constants (β, B): clean local updates, which
        # only a simulation can see
        updates = local.params - global_params.to(local.params.device)
        update_sq_norm_mean = float(updates.pow(2).sum(1).mean())
        mean_update_sq_norm = float(updates.mean(0).pow(2).sum())
        del updates
        out = super().server_step(global_params, local, info)
        out.metrics.update({"update_sq_norm_mean": update_sq_norm_mean, "mean_update_sq_norm": mean_update_sq_norm})
        return out

    # ------------------------------------------------------------------ the paper's claim

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        """003's ε for the noise actually added, after ``rounds_done`` aggregations.

        Uplink: ε_U = c·L'·Δs_U/σ_U with L' = min(L, rounds done); downlink: Theorem 1 resp.
        Lemma 4 inverted for the rounds done (:func:`nbafl_claimed_epsilon`); the larger.
        """
        if rounds_done == 0:
            return 0.0
        if self.uplink_noise_std == 0:
            return float("inf")
        claim = nbafl_claimed_epsilon(
            self.uplink_noise_std,
            self.downlink_noise_std,
            self.delta,
            self.options.clip_norm,
            self.min_samples,
            self.num_clients,
            rounds_done,
            min(self.exposures, rounds_done),
            self.cohort if self.k_random else None,
        )
        return claim.epsilon

    @property
    def paper_sensitivity(self) -> float:
        """Δs_U = 2C/m, the paper's uplink sensitivity (used for the claim only)."""
        return self._calibration.paper_sensitivity

    def canaries(self) -> CanaryHooks:
        """Audit canaries: each a row of norm C (NbAFL's uploads are clipped models); the plan is
        the round's own."""
        return CanaryHooks(
            rows=lambda g, d: float(self.options.clip_norm) * d,
            num_samples=lambda sizes: int(sizes.median()),
            extend=lambda plan, real_k, joined, num_canaries: plan,
            silence=lambda plan: dataclasses.replace(plan, uplink_noise_std=0.0, downlink_noise_std=0.0),
        )

    def claim_notion(self) -> str:
        return (f"003 (Thm 1 / Lemma 4): 'global' (ε, δ={self.delta:g})-DP per record, uplink (L = "
                f"{self.exposures} exposures) and downlink (T broadcasts), with sensitivity 2C/m = "
                f"{self.paper_sensitivity:.4g}; the certified ε uses the enforced 2C = "
                f"{2 * self.options.clip_norm:g} (parameter clip, replace-one client)")

    def not_covered(self) -> list[str]:
        notes = []
        if self.options.epsilon is not None:
            notes.append(
                "the claimed epsilon rests on the paper's sensitivity 2C/m (eq. 5-6: argmin of a sum = "
                "mean of argmins), not on the enforced 2C; the classical Gaussian constant is used "
                "outside its proven range (epsilon < 1) and composed linearly")
        if self.options.downlink_noise == "none" and self.options.epsilon is not None:
            notes.append("downlink noise disabled by `downlink_noise: none`: the broadcast carries the "
                         "aggregated uplink noise only")
        return notes


def _build(options: dict[str, Any], sampler: Any, ctx: Any) -> NbAfl:

    return NbAfl(parse_options(NbAflOptions, options, "nbafl"), sampler, ctx.client_sizes, ctx.config.rounds,
                 ctx.privacy.delta, num_params=getattr(ctx, "num_params", None),
                 gaussian_noise=getattr(ctx.privacy, "gaussian_noise", None))


ALGORITHMS = {"nbafl": _build}
