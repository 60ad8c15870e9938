"""UDP (000 Alg. 1), UDP with CRD (000 Alg. 2), and Lei's decaying-noise baseline.

**Local step (all three).** Each sampled client runs full-batch gradient descent on its own
data with every per-sample gradient clipped to L2 norm C (000 Alg. 1 lines 5–9):
w_i = w − (η/|D_i|) Σ_m clip_C(∇ℓ(w; D_{i,m})). The engine does this vectorized
(``LocalTraining(batch_size=None, per_sample_clip=C)``; set by :meth:`Udp.configure_local`).
The client then adds N(0, σ_i² I) to its *parameters* and uploads them; the server aggregates
w = Σ_k p_k w̃_k with p_k = |D_k| / Σ_{j in cohort} |D_j| (000 eq. 2, normalized over the cohort
so the weights sum to 1, as the proof of Thm 2 assumes with p_k = 1/K for equal sizes).

**Sensitivity.** Replace-one record of client i (equal-size neighbours), one local step (E = 1):
Δℓ_i = 2ηC/|D_i| (000 eq. 13, :func:`dpfl.privacy.calibration.udp_sensitivity`). With
``local.epochs`` E > 1 full-batch steps the two trajectories differ after the first step, so
every later clipped gradient may differ, not just the replaced one; without assumptions on the
loss the only safe bound is

    Δℓ_i(E) = 2ηC/|D_i| + (E − 1)·2ηC      (each later step moves the difference by <= 2ηC),

which is what dpfl uses (and records in the ledger). The often-quoted 2ηCE/|D_i| holds only when
the clipped gradient step is non-expansive (e.g. a convex, β-smooth loss with η <= 2/β and the
clip inactive); dpfl cannot check that, so it does not use it. With an L2 penalty κ (000 eq. 32)
the bound needs |1 − ηκ| <= 1, i.e. ηκ <= 2 (checked).

**Noise.**
* ``udp`` — σ_i = Δℓ_i·sqrt(2qT ln(1/δ_i))/ε_i in every round (Thm 1, eq. 10), T fixed.
* ``udp-crd`` — after each round t the server compares the test loss: if
  V(w^t) − V(w^{t+1}) < ζ it sets T ← ⌊β(T − t)⌋ + t (Alg. 2 line 19, t the 0-based index of the
  round just run, as printed) and the following rounds use σ_i from Thm 4 (eq. 25) computed from
  the stds actually used so far. The run ends before round t when t >= T
  (:meth:`should_stop`); the trajectory of T is in the round metrics (``crd_T``).
  Option ``trigger: train-loss-rise`` is a *variant*, not Alg. 2: the discount fires when the
  participants' averaged training loss (each client's mean local objective, averaged over the
  uploads) rose from the previous round, and T ← ⌈βT⌉ — a reading of CRD found in public
  implementations of 000. Those losses are functions of the clients' data sent without noise, so
  each round also makes an exact release of its participants against both observers (the server
  receives the losses; the public sees the T they steer): certified ε = ∞. It exists to compare
  the two readings' accuracy side by side (000 reports), not as a private option.
* ``udp-lei`` — "Lei's approach" of 000 §5.4 (ref. [29], Yu et al., S&P 2019): the noise std is
  reduced linearly, σ_i^t = σ_i^0 (1 − k·t), starting from the Thm 1 std of the initial T
  (σ_i^0 = the ``udp`` std), until the privacy loss would exceed ε_i; the run then stops. The
  privacy loss is measured with 000's own accountant (the budget identity behind Thm 1/4,
  :func:`dpfl.privacy.accounting.claimed.udp_claimed_epsilon`), so all three baselines spend the
  same claimed budget. ``noise_decay`` k defaults to 1/(2T): the std falls to ≈ 2/3 of σ^0 when
  the budget runs out after ≈ 2T/3 rounds. [29] offers several schedules (time-based,
  exponential, step, polynomial) with its own accountant; 000 describes only "reduced linearly",
  hence this one.

**Split at the wire.** ``client_step``: the noise N(0, σ_i² I) on each client's parameters from
its own stream, declaring σ_i (``declared_plan`` is the server's σ_i of the round).
``aggregate``: the weighted mean over the uploads that arrived, then CRD's test on the server's
data. σ_i is the server's schedule: a client receives it with ``client_state`` (the checkpoint
state: the committed stds of every round so far and, for CRD, the current T and whether eq. 25
must be recomputed), so CRD's and Lei's changing noise reaches real clients. After dropouts the
weights are renormalized over the arrivals and nothing needs topping up (each upload carries
its own σ_i): the default ``releases_for_arrivals`` records exactly that round. The clean
local-step norm is a simulation-only diagnostic (``local_step_norm_mean``), never uploaded.

**Claimed vs certified.** The claimed ε_i is 000's own formula for the noise actually added
(sum over every round run; q amortizes the rounds a client sat out). The ledger certifies per
observer: the server sees each upload unamplified (sensitivity Δℓ_k, noise σ_k), the public sees
the weighted mean (noise sqrt(Σ p_k² σ_k²)), each participant charged p_k Δℓ_k at the cohort
drawn, unamplified: the privacy unit is a record, and a cohort without the client consists of
other clients' whole models, so sampling clients does not amplify a record's guarantee
(:mod:`dpfl.privacy.accounting.broadcast`); with full participation one broadcast (sensitivity
max_k p_k Δℓ_k) is charged to everybody. Privacy unit: one record;
relation: replace-one.

**Floating-point-safe uploads** (``privacy.gaussian_noise: lattice``, a deployment's default; ``udp``
and ``udp-lei``): w̃_k = (round(γ_k w_k) + Sk(μ_k))/γ_k
(:class:`dpfl.privacy.mechanisms.lattice.NearestLatticeGaussian`: nearest rounding, so two
neighbours' integers differ by at most Δ2 = γ_kΔℓ_k + √d; μ_k = (σ_k/Δℓ_k · Δ2)², AKL21 Thm 3.5),
each recorded as that Skellam release; the broadcast as a post-processing of the uploads (the same
Skellam releases, to the public: a weighted sum of Skellams is not Skellam, so the aggregate noise
the Gaussian's public release credits is not claimed). ``udp-crd`` keeps the Gaussian (its Rényi
filter's budget is planned in Gaussian releases).

References:
    000_3304bf6f36c753f8.txt, Algorithm 1, Algorithm 2, eq. 2, eq. 10, eq. 13, eq. 25, §5.4.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.func import functional_call

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import UdpCrdOptions, UdpLeiOptions, UdpOptions, parse_options
from dpfl.algorithms.private import Calibration, CanaryHooks, PrivateAlgorithm, RoundPlan
from dpfl.client.context import LocalProblem, LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.models import per_sample_loss
from dpfl.privacy.accounting.broadcast import broadcast_mode, worst_cohort_multipliers
from dpfl.privacy.accounting.claimed import udp_claimed_epsilon
from dpfl.privacy.calibration import udp_noise_std, udp_noise_std_after_change, udp_sensitivity
from dpfl.privacy.mechanisms import add_gaussian_noise_per_client
from dpfl.privacy.mechanisms.lattice import NearestLatticeGaussian, nearest_lattice, release_values
from dpfl.privacy.releases import Release, SkellamRelease, federated_round_releases
from dpfl.server.aggregators import WeightedMean

__all__ = ["ALGORITHMS", "Udp", "UdpCalibration", "UdpCrd", "UdpCrdOptions", "UdpLei", "UdpLeiOptions",
           "UdpOptions", "UdpPlan", "local_sensitivity", "udp_calibration"]


# --------------------------------------------------------------------------- helpers


def local_sensitivity(lr: float, clip_norm: float, num_samples: int, epochs: int = 1) -> float:
    """L2 sensitivity of E full-batch steps of per-sample-clipped gradients (replace-one record).

    E = 1 is 000 eq. 13 (:func:`udp_sensitivity`). For E > 1 the safe bound of the module
    docstring: 2ηC/|D_i| + (E − 1)·2ηC (no smoothness or convexity assumed).

    >>> local_sensitivity(0.1, 1.0, 800)
    0.00025
    >>> round(local_sensitivity(0.1, 1.0, 800, epochs=2), 6)
    0.20025
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"`local.epochs` must be an integer >= 1. Found {epochs!r}.")
    first = udp_sensitivity(lr, clip_norm, num_samples)
    return first + (epochs - 1) * udp_sensitivity(lr, clip_norm, 1)


def _per_client(name: str, value: float | list[float], num_clients: int) -> list[float]:
    if isinstance(value, list):
        if len(value) != num_clients:
            raise ConfigError(
                f"`algorithm.options.{name}` lists {len(value)} values but there are {num_clients} clients; "
                "give one value for all clients or exactly one per client."
            )
        return [float(x) for x in value]
    return [float(value)] * num_clients


def _sample_rate(sampler: Any, num_clients: int) -> float:
    desc = sampler.describe()
    kind = desc.get("kind")
    if kind == "all":
        return 1.0
    if kind == "fixed_size":
        return float(desc["num_sampled"]) / num_clients
    if kind == "poisson":
        return float(desc["sample_rate"])
    raise ConfigError(f"UDP needs `sampling.kind` all, fixed or poisson. Found {desc}.")


Evaluator = Callable[[torch.Tensor], float]


# --------------------------------------------------------------------------- calibration and plan


@dataclass(frozen=True)
class UdpCalibration(Calibration):
    """What 000 fixes before the run, from the settings alone (one entry per client).

    Attributes:
        sample_rate: q = K/U (000 Thm 1).
        total_rounds: T of Thm 1 (CRD: the initial T).
        sizes: |D_i|.
        epsilons, deltas: (ε_i, δ_i).
        sensitivities: Δℓ_i, 000 eq. 13 for one local step, the safe bound for E > 1
            (:func:`local_sensitivity`).
        thm1_noise_stds: σ_i of Thm 1 (eq. 10) for T rounds.
    """

    sample_rate: float
    total_rounds: int
    sizes: tuple[int, ...]
    epsilons: tuple[float, ...]
    deltas: tuple[float, ...]
    sensitivities: tuple[float, ...]
    thm1_noise_stds: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (to print or store next to the config)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def udp_calibration(options: UdpOptions, *, sizes: list[int], lr: float, epochs: int, total_rounds: int,
                    sample_rate: float, delta: float) -> UdpCalibration:
    """000 Thm 1's numbers for every client: a pure function of the settings.

    References:
        000_3304bf6f36c753f8.txt, eq. 10 and eq. 13.
    """
    n = len(sizes)
    epsilons = _per_client("epsilon", options.epsilon, n)
    deltas = _per_client("delta", options.delta if options.delta is not None else float(delta), n)
    sens = [local_sensitivity(lr, options.clip_norm, size, epochs) for size in sizes]
    stds = [udp_noise_std(e, d, s, sample_rate, total_rounds) for e, d, s in zip(epsilons, deltas, sens, strict=True)]
    return UdpCalibration(float(sample_rate), int(total_rounds), tuple(int(x) for x in sizes), tuple(epsilons),
                          tuple(deltas), tuple(sens), tuple(stds))


@dataclass(frozen=True)
class UdpPlan(RoundPlan):
    """Every noise number of one UDP round: σ_i^t and Δℓ_i of every client.

    ``client_step`` adds ``noise_stds[i]`` to client i's parameters, ``declared_plan`` states
    it, and :meth:`releases` tells the ledger the same numbers: what is added and what is
    certified come from this one object.
    """

    round_idx: int
    noise_stds: tuple[float, ...]
    sensitivities: tuple[float, ...]
    sizes: tuple[int, ...]
    per_client_public: bool
    dim: int = 0  # d, the model's size (the lattice form's √d)
    lattice: bool = False  # ``privacy.gaussian_noise: lattice``: each upload is a lattice release

    def mechanism(self, client: int) -> NearestLatticeGaussian | None:
        """Client k's lattice release (:func:`~dpfl.privacy.mechanisms.lattice.nearest_lattice`: σ_k
        against Δℓ_k, nearest rounding, Skellam noise), None without noise or without the lattice form."""
        if not self.lattice:
            return None
        return nearest_lattice(self.dim, self.sensitivities[client], self.noise_stds[client])

    def lattice_releases(self, ids: list[int]) -> list[Release]:
        """Each upload as the Skellam release it is (unamplified, replace-one), to the server and —
        the broadcast being a weighted mean of the uploads, a post-processing of them — to the
        public with the same numbers (a weighted sum of Skellams is not Skellam: the aggregate
        noise the floating-point Gaussian's public release credits is not claimed)."""
        groups: dict[tuple[float, float, float, float], list[int]] = {}
        out: list[Release] = []
        for c in ids:
            mech = self.mechanism(c)
            if mech is None:  # no noise: the exact upload
                out += [Release.gaussian(obs, 0.0, self.sensitivities[c], [c]) for obs in ("server", "public")]
            else:
                groups.setdefault((mech.variance, mech.l2_sensitivity, mech.l1_sensitivity, mech.scale), []).append(c)
        for (var, d2, d1, scale), cs in groups.items():
            out += [SkellamRelease(obs, var, d2, d1, tuple(cs), lattice=True, scale=scale)
                    for obs in ("server", "public")]
        return out

    def weights(self, ids: list[int]) -> list[float]:
        """p_k = |D_k| / Σ_{j in ids} |D_j| (000 eq. 2, normalized over the rows)."""
        n = [self.sizes[c] for c in ids]
        total = float(sum(n))
        return [x / total for x in n]

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """The releases of a round whose rows are ``ids``: each upload (σ_k against Δℓ_k) and the
        weighted mean (000 eq. 2; the weights come from the public sizes the plan holds)."""
        del num_samples
        if self.lattice:
            return self.lattice_releases([int(c) for c in ids])
        return federated_round_releases(
            ids,
            [self.noise_stds[c] for c in ids],
            [self.sensitivities[c] for c in ids],
            self.weights(ids) if ids else [],
            ideal_secure_sum=ideal_secure_sum,
            per_client_public=self.per_client_public,
        )

    def declared(self, client: int) -> dict[str, float]:
        """Client k's σ_k^t."""
        return {"noise_std": float(self.noise_stds[int(client)])}


# --------------------------------------------------------------------------- UDP


class Udp(PrivateAlgorithm[UdpPlan]):
    """000 Algorithm 1 (see the module docstring); the base of CRD and Lei's baseline."""

    name = "udp"
    relation = "replace_one"
    claim_observer = "server"  # 000 Thm 1: each client's upload, against the server
    privacy_unit = "record"
    local_optimizers = frozenset({"sgd"})
    local_optimizer_reason = ("000's Thm 1 sensitivity 2ηC/|D_i| (eq. 13) assumes each local step is one "
                              "full-batch clipped gradient step of plain gradient descent")

    def __init__(self, options: UdpOptions, sampler: Any, ctx: Any) -> None:
        cfg = ctx.config
        self.options = options
        self.sampler = sampler
        self.num_clients = int(ctx.num_clients)
        if cfg.local.batch_size is not None or cfg.local.steps is not None:
            raise ConfigError(
                f"{self.name} trains each client by full-batch gradient descent (000 Alg. 1): set "
                f"`local.batch_size: null` and `local.steps: null`. Found batch_size = "
                f"{cfg.local.batch_size!r}, steps = {cfg.local.steps!r}."
            )
        self.lr = float(cfg.local.lr)
        self.epochs = int(cfg.local.epochs)
        self.total_rounds = int(options.rounds if options.rounds is not None else cfg.rounds)
        if self.total_rounds > cfg.rounds:
            raise ConfigError(
                f"`algorithm.options.rounds` (T = {self.total_rounds}) exceeds the run's `rounds` "
                f"({cfg.rounds}); the run would end before spending its budget. Raise `rounds`."
            )
        self.sizes = [int(n) for n in ctx.client_sizes.tolist()]
        self._calibration = udp_calibration(
            options, sizes=self.sizes, lr=self.lr, epochs=self.epochs, total_rounds=self.total_rounds,
            sample_rate=_sample_rate(sampler, self.num_clients), delta=float(ctx.privacy.delta))
        self.epsilons = list(self._calibration.epsilons)
        self.deltas = list(self._calibration.deltas)
        self.sample_rate = self._calibration.sample_rate
        self.sensitivities = list(self._calibration.sensitivities)
        self.history: list[list[float]] = []  # σ_i^τ of every round run, all clients
        self.problem: LocalProblem | None = None
        self.num_params = int(getattr(ctx, "num_params", 0) or 0)
        if getattr(ctx.privacy, "gaussian_noise", None) == "lattice":
            self.lattice_refusal = self._lattice_refusal()
            self.gaussian_release = "lattice" if self.lattice_refusal is None else "float"

    def _lattice_refusal(self) -> str | None:
        """Why this run keeps the floating-point Gaussian under ``gaussian_noise: lattice`` (None: it
        has the lattice form)."""
        if self.num_params <= 0:
            return "a model of unknown size"
        return None

    def calibration(self) -> UdpCalibration:
        """The numbers Thm 1 fixed before the run (:func:`udp_calibration` of the settings)."""
        return self._calibration

    # ------------------------------------------------------------------ engine configuration

    def configure_local(self, problem: LocalProblem) -> LocalProblem:
        """Full-batch GD with per-sample gradients clipped to C (000 Alg. 1 lines 5–9)."""
        if problem.local.prox_mu or problem.extra_terms:
            raise ConfigError(f"{self.name}: the local objective must have no proximal or extra terms.")
        if self.epochs > 1 and problem.l2_penalty * self.lr > 2.0:
            raise ConfigError(
                f"{self.name}: with local.epochs > 1 the sensitivity bound needs lr·κ <= 2; found "
                f"lr = {self.lr:g}, κ = {problem.l2_penalty:g}."
            )
        local = dataclasses.replace(
            problem.local, batch_size=None, steps=None, per_sample_clip=float(self.options.clip_norm)
        )
        self.problem = dataclasses.replace(problem, local=local)
        return self.problem

    # ------------------------------------------------------------------ noise schedule

    def _thm1_stds(self) -> list[float]:
        """σ_i of Thm 1 (eq. 10) for the T fixed before the run, every client."""
        return list(self._calibration.thm1_noise_stds)

    def _noise_stds(self, round_idx: int) -> list[float]:
        """σ_i for round ``round_idx`` (all clients); Thm 1 with the fixed T."""
        if self.history:
            return self.history[-1]
        return self._thm1_stds()

    def _commit(self, round_idx: int) -> list[float]:
        if round_idx < len(self.history):
            return self.history[round_idx]
        if round_idx != len(self.history):
            raise ConfigError(f"round {round_idx} planned out of order (history has {len(self.history)} rounds)")
        stds = self._noise_stds(round_idx)
        self.history.append(list(stds))
        return self.history[round_idx]

    def plan(self, info: RoundInfo) -> UdpPlan:
        """Every noise number of round ``info.round_idx``: the schedule's σ_i^t (Thm 1; CRD's eq. 25
        after T changed; Lei's linear decay), committed to the history the first time the round
        is asked for (the history row is the round's one computation of σ_i^t; the plan is a
        frozen view of it), so the clients, the declarations and the ledger all get the same
        numbers."""
        round_idx = info.round_idx
        stds = self._commit(round_idx)
        # a record-level unit: sampling clients never amplifies the public's view (privacy/accounting/broadcast.py)
        mode = broadcast_mode(self.sampler.describe(), self.relation, self.privacy_unit, False)
        return UdpPlan(round_idx, tuple(stds), self._calibration.sensitivities, self._calibration.sizes,
                       per_client_public=mode == "per_client", dim=self.num_params,
                       lattice=self.gaussian_release == "lattice")

    # ------------------------------------------------------------------ a round

    def should_stop(self, round_idx: int) -> str | None:
        if round_idx >= self.total_rounds:
            return f"{self.name}: T = {self.total_rounds} rounds done"
        return None

    # ------------------------------------------------------------------ the round, split at the wire

    splits_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """000 Alg. 1 line 10 on each client: w̃_i = w_i + N(0, σ_i² I) from the client's own stream
        (round, i, "noise"); declares σ_i.

        σ_i of round t is the server's schedule (:meth:`plan`): fixed by Thm 1 for ``udp`` and
        ``udp-lei``, and for ``udp-crd`` recomputed by eq. 25 after T changed — server state that
        a real client receives with :meth:`client_state` (the committed stds and CRD's T).
        """
        plan = self.round_plan(info)
        ids = [int(c) for c in info.clients.tolist()]
        stds = torch.tensor([plan.noise_stds[c] for c in ids], dtype=torch.float64)
        gens = [info.seeds.noise_generator(info.round_idx, c, "noise") for c in ids]
        if plan.lattice:  # round(γ_k w_k) + Sk(μ_k), uploaded as integer/γ_k (a fixed function of it)
            values = release_values(local.params, [plan.mechanism(c) for c in ids], gens)
            noisy = values.to(local.params.dtype).to(local.params.device)
        else:
            noisy = add_gaussian_noise_per_client(local.params, stds.to(local.params.dtype), gens)
        return Uploads(info.clients, noisy, local.num_samples, local.train_loss, {"noise_std": stds})

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """000 eq. 2 over the uploads that arrived: w = Σ_k p_k w̃_k, p_k = |D_k| / Σ_j |D_j| (the
        weights renormalized over the arrivals; every upload carries its own σ_k, so nothing
        needs topping up and :meth:`releases_for_arrivals` is the default). CRD then tests the
        new model on the server's data (Alg. 2 lines 17–19)."""
        if uploads.num_rows == 0:
            return RoundOutput(global_params.clone(), {"arrived": 0, "rounds_planned": self.total_rounds})
        stds = uploads.declared["noise_std"].to(torch.float64)
        new_global = WeightedMean.by_samples(uploads.num_samples)(uploads.params).to(global_params.device)
        metrics: dict[str, Any] = {
            "noise_std_mean": float(stds.mean()),
            "noise_std_max": float(stds.max()),
            "rounds_planned": self.total_rounds,
        }
        metrics.update(self._after_round(global_params, new_global, info, uploads))
        return RoundOutput(new_global, metrics)

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        # a diagnostic only a simulation can see: the clean local step ‖w_k − w‖ (never uploaded)
        step_norms = (local.params - global_params.to(local.params.device)).norm(dim=1)
        out = super().server_step(global_params, local, info)
        metrics = {k: v for k, v in out.metrics.items() if k in ("noise_std_mean", "noise_std_max")}
        metrics["local_step_norm_mean"] = float(step_norms.mean())
        metrics.update(out.metrics)
        return RoundOutput(out.global_params, metrics)

    def _after_round(self, old: torch.Tensor, new: torch.Tensor, info: RoundInfo, uploads: Uploads) -> dict[str, Any]:
        del old, new, info, uploads
        return {}

    # ------------------------------------------------------------------ privacy claims

    def claimed_epsilon(self, rounds_done: int) -> dict[int, float] | None:
        if rounds_done == 0:
            return {i: 0.0 for i in range(self.num_clients)}
        rows = self.history[:rounds_done]  # releases() has committed round rounds_done - 1
        if not rows:
            return {i: 0.0 for i in range(self.num_clients)}
        first = rows[0]
        if all(r == first for r in rows):  # constant noise (plain UDP): the closed form in T, same value
            return {
                i: udp_claimed_epsilon([first[i]], self.deltas[i], self.sensitivities[i], self.sample_rate,
                                       repeat=len(rows))
                for i in range(self.num_clients)
            }
        return {
            i: udp_claimed_epsilon([r[i] for r in rows], self.deltas[i], self.sensitivities[i], self.sample_rate)
            for i in range(self.num_clients)
        }

    def canaries(self) -> CanaryHooks | None:
        """Audit canaries: each noised, weighed and bounded as the template client (the median
        size), a row of its sensitivity's norm around the global model."""
        if self.gaussian_release == "lattice":
            raise ConfigError(f"audit: {self.name} with `privacy.gaussian_noise: lattice` is not supported (canary "
                              "rows are not lattice releases); audit the floating-point twin "
                              "(`gaussian_noise: float`).")
        order = np.argsort(np.asarray(self.sizes), kind="stable")
        tpl = int(order[len(order) // 2])

        def extend(plan: UdpPlan, real_k: int, joined: int, num_canaries: int) -> UdpPlan:
            return dataclasses.replace(
                plan, noise_stds=(*plan.noise_stds, *([plan.noise_stds[tpl]] * num_canaries)),
                sensitivities=(*plan.sensitivities, *([plan.sensitivities[tpl]] * num_canaries)),
                sizes=(*plan.sizes, *([plan.sizes[tpl]] * num_canaries)))

        return CanaryHooks(
            rows=lambda g, d: g.unsqueeze(0) + self.sensitivities[tpl] * d,
            num_samples=lambda sizes: int(self.sizes[tpl]),
            extend=extend,
            silence=lambda plan: dataclasses.replace(plan, noise_stds=tuple(0.0 for _ in plan.noise_stds)),
        )

    def claim_notion(self) -> str:
        return (f"000 (Thm 1/4): (ε_i, δ_i = {min(self.deltas):g})-DP per client against the server, one "
                "record, replace-one, moments bound with q = K/U")

    def not_covered(self) -> list[str]:
        out = []
        if self.options.clip_norm_source == "median_unclipped_norms":
            out.append(
                f"clip norm C = {self.options.clip_norm:g} was chosen as the median of unclipped per-sample "
                "gradient norms measured on the clients' training data (000 §5.2); that choice looks at "
                "private data and is not privatized, so the certified epsilon does not cover it"
            )
        if self.epochs > 1:
            out.append(
                f"local.epochs = {self.epochs}: the sensitivity used is the safe bound "
                "2ηC/|D_i| + (E−1)·2ηC, not 000's one-step 2ηC/|D_i|; the paper's claim assumes one step"
            )
        return out

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(r) for r in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [list(map(float, r)) for r in state.get("history", [])]


# --------------------------------------------------------------------------- CRD


class UdpCrd(Udp):
    """000 Algorithm 2: UDP with communication rounds discounting (see the module docstring).

    The test loss V is evaluated by the server on its own test data, handed over by the runner
    through :meth:`set_validation`.
    """

    name = "udp-crd"

    def canaries(self) -> CanaryHooks | None:
        """Not auditable: the audit's canaries follow UDP's fixed schedule, not this variant's
        data-dependent changes of the noise."""
        return None

    def _lattice_refusal(self) -> str | None:
        return "udp-crd's Rényi filter plans its budget in Gaussian releases (no lattice form of the filter yet)"

    def __init__(self, options: UdpCrdOptions, sampler: Any, ctx: Any) -> None:
        super().__init__(options, sampler, ctx)
        self.crd = options
        self.current_rounds = self.total_rounds
        self.previous_loss: float | None = None
        self.trajectory: list[int] = []
        self._recompute = False
        self._validation: tuple[torch.Tensor, torch.Tensor] | None = None
        # the train-loss-rise variant needs each participant's training loss on the wire
        self.reports_train_loss = options.trigger == "train-loss-rise"

    def set_validation(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The server's test data for V(w) (000 Alg. 2 line 17)."""
        self._validation = (x, y)

    def _loss(self, params: torch.Tensor) -> float:
        if self.problem is None:
            raise ConfigError("udp-crd: configure_local must run before training (the runner calls it).")
        if self._validation is None:
            raise ConfigError("udp-crd: the server's test data was not set (the runner calls set_validation).")
        x, y = self._validation
        x, y = x.to(params.device), y.to(params.device)
        views = self.problem.layout.views(params)
        total = 0.0
        with torch.no_grad():
            for start in range(0, x.shape[0], 2000):
                out = functional_call(self.problem.module, views, (x[start : start + 2000],))
                total += float(per_sample_loss(self.problem.loss_kind, out, y[start : start + 2000]).sum())
        return total / max(int(x.shape[0]), 1)

    def should_stop(self, round_idx: int) -> str | None:
        if round_idx >= self.current_rounds:
            return (f"udp-crd: T discounted from {self.total_rounds} to {self.current_rounds}; "
                    f"stopping after {round_idx} rounds")
        return None

    def _noise_stds(self, round_idx: int) -> list[float]:
        if not self.history:
            return super()._noise_stds(round_idx)
        if not self._recompute:
            return self.history[-1]  # T unchanged: eq. 30-31 give the same std
        self._recompute = False
        remaining = self.current_rounds - round_idx
        return [
            udp_noise_std_after_change(e, d, s, self.sample_rate, remaining, [r[i] for r in self.history])
            for i, (e, d, s) in enumerate(zip(self.epsilons, self.deltas, self.sensitivities, strict=True))
        ]

    def _after_round(self, old: torch.Tensor, new: torch.Tensor, info: RoundInfo, uploads: Uploads) -> dict[str, Any]:
        t = info.round_idx
        if self.crd.trigger == "train-loss-rise":
            return self._after_round_train_loss(t, uploads)
        before = self.previous_loss if self.previous_loss is not None else self._loss(old)
        after = self._loss(new)
        self.previous_loss = after
        triggered = (before - after) < self.crd.threshold
        if triggered:
            self.current_rounds = math.floor(self.crd.discount * (self.current_rounds - t)) + t
            self._recompute = True
        self.trajectory.append(self.current_rounds)
        return {"crd_T": self.current_rounds, "crd_triggered": bool(triggered), "crd_test_loss": after}

    def _after_round_train_loss(self, t: int, uploads: Uploads) -> dict[str, Any]:
        """The variant: discount when the participants' averaged training loss rose, T ← ⌈βT⌉."""
        losses = uploads.train_loss.to(torch.float64)
        finite = losses[torch.isfinite(losses)]  # a diverged or missing loss says nothing either way
        if finite.numel() == 0:
            self.trajectory.append(self.current_rounds)
            return {"crd_T": self.current_rounds, "crd_triggered": False}
        after = float(finite.mean())
        before = self.previous_loss
        self.previous_loss = after
        triggered = before is not None and after > before
        if triggered:
            # ⌈βT⌉ at or below the round just run ends the run after it (stored as t + 1)
            self.current_rounds = max(math.ceil(self.crd.discount * self.current_rounds), t + 1)
            self._recompute = True
        self.trajectory.append(self.current_rounds)
        return {"crd_T": self.current_rounds, "crd_triggered": bool(triggered), "crd_train_loss": after}

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        out = super().releases(info, num_samples, ideal_secure_sum)
        if self.crd.trigger == "train-loss-rise":
            ids = [int(c) for c in info.clients.tolist()]
            if ids:  # their unnoised training losses (server) and the T they steer (public)
                out += [Release.exact("server", ids), Release.exact("public", ids)]
        return out

    def privacy_filter_plan(self, num_clients: int, seeds: Any) -> list[tuple[list[Release], list[int]]]:
        """The budget CRD's adaptive noise and length must stay within (a Rényi filter), fixed
        before the run and independent of the cohorts drawn: T rounds at the Thm 1 noise with
        every client taking part — against the server its upload (σ_i against Δℓ_i), against
        the public the broadcast of the worst cohort containing it (per client, at the smallest
        cohort a round can have; :func:`dpfl.privacy.accounting.broadcast.worst_cohort_multipliers`).
        CRD keeps Σ_t 1/σ_t² within Thm 1's budget (eq. 25), so in a round whose uploads all
        arrive the filter never binds; it binds after dropouts (fewer arrivals, larger weights).
        """
        del seeds
        stds = self._thm1_stds()
        ids = list(range(num_clients))
        desc = self.sampler.describe()
        releases: list[Release] = [Release.gaussian("server", stds[c], self.sensitivities[c], [c]) for c in ids]
        if broadcast_mode(desc, self.relation, self.privacy_unit, False) == "shared":
            full = UdpPlan(-1, tuple(stds), self._calibration.sensitivities, self._calibration.sizes, False)
            releases += [r for r in full.releases(ids, None, False) if r.observer == "public"]
        else:
            smallest = int(desc["num_sampled"]) if desc["kind"] == "fixed_size" else 1
            z = worst_cohort_multipliers(cohort_size=smallest, noise_stds=stds, sensitivities=self.sensitivities,
                                         weighting="samples", sizes=self.sizes)
            releases += [Release.gaussian("public", float(z[c]), 1.0, [c]) for c in ids]
        if self.crd.trigger == "train-loss-rise":  # the budget must hold the exact releases the variant makes
            releases += [Release.exact("server", ids), Release.exact("public", ids)]
        return [(releases, ids) for _ in range(self.total_rounds)]

    def not_covered(self) -> list[str]:
        variant = []
        if self.crd.trigger == "train-loss-rise":
            variant = [
                "trigger train-loss-rise (a variant, not 000 Alg. 2): each participant's training loss reaches "
                "the server without noise and steers T, which the public sees - exact releases, certified "
                "epsilon infinite; the claimed epsilon is 000's formula for the noise added, which ignores them. "
                "Its Renyi-filter budget is infinite too, so the filter never halts it (after dropouts Alg. 2 "
                "may stop where the variant goes on)"
            ]
        return super().not_covered() + variant + [
            "CRD's stopping rule compares the test loss of successive global models (000 Alg. 2 line 17) "
            "on data the server holds; the number of rounds and the later noise stds depend on it. The "
            "composition of the releases that happened is therefore not a guarantee (adaptively chosen "
            "noise): the certified epsilon is the budget fixed before the run - plain UDP's T rounds at "
            "the Thm 1 noise (RDP) - and the run halts before any round that would exceed it at any RDP "
            "order (a Renyi filter, Feldman & Zrnic 2021). The spent figure is shown separately"
        ]

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "current_rounds": self.current_rounds,
            "previous_loss": self.previous_loss,
            "trajectory": list(self.trajectory),
            "recompute": self._recompute,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.current_rounds = int(state.get("current_rounds", self.total_rounds))
        prev = state.get("previous_loss")
        self.previous_loss = None if prev is None else float(prev)
        self.trajectory = [int(x) for x in state.get("trajectory", [])]
        self._recompute = bool(state.get("recompute", False))


# --------------------------------------------------------------------------- Lei


class UdpLei(Udp):
    """Lei's approach as used by 000 §5.4: linearly decaying noise until the budget is spent."""

    name = "udp-lei"

    def canaries(self) -> CanaryHooks | None:
        """Not auditable: the audit's canaries follow UDP's fixed schedule, not this variant's
        data-dependent changes of the noise."""
        return None

    def __init__(self, options: UdpLeiOptions, sampler: Any, ctx: Any) -> None:
        super().__init__(options, sampler, ctx)
        self.noise_decay = options.noise_decay if options.noise_decay is not None else 1.0 / (2 * self.total_rounds)
        self.initial_stds = self._thm1_stds()  # σ_i^0 = the udp std

    def _scheduled(self, round_idx: int) -> list[float]:
        factor = 1.0 - self.noise_decay * round_idx
        return [s * factor for s in self.initial_stds]

    def _noise_stds(self, round_idx: int) -> list[float]:
        return self._scheduled(round_idx)

    def should_stop(self, round_idx: int) -> str | None:
        stds = self._scheduled(round_idx)
        if min(stds) <= 0:
            return f"udp-lei: the linear schedule reached zero noise at round {round_idx}"
        for i in range(self.num_clients):
            eps = udp_claimed_epsilon([r[i] for r in self.history[:round_idx]] + [stds[i]],
                                      self.deltas[i], self.sensitivities[i], self.sample_rate)
            if eps > self.epsilons[i] * (1 + 1e-12):
                return (f"udp-lei: round {round_idx + 1} would take client {i}'s privacy loss to "
                        f"{eps:.4g} > epsilon = {self.epsilons[i]:g}; stopping after {round_idx} rounds")
        return None


# --------------------------------------------------------------------------- registry


def _build(cls: type[Udp], model: type[UdpOptions], name: str) -> Callable[[dict[str, Any], Any, Any], Udp]:
    def build(options: dict[str, Any], sampler: Any, ctx: Any) -> Udp:

        return cls(parse_options(model, options, name), sampler, ctx)  # type: ignore[arg-type]

    return build


ALGORITHMS = {
    "udp": _build(Udp, UdpOptions, "udp"),
    "udp-crd": _build(UdpCrd, UdpCrdOptions, "udp-crd"),
    "udp-lei": _build(UdpLei, UdpLeiOptions, "udp-lei"),
}


def udp_epsilon_for_noise_std(noise_std: float, delta: float, lr: float, clip_norm: float, samples: int,
                              sample_rate: float, rounds: int) -> float:
    """The ε whose Theorem 1 noise (000 eq. 10) is ``noise_std`` for a client of ``samples``
    records: 000's own budget identity, inverted (what ``dpfl account udp --noise-std`` sets as
    the ``epsilon`` option, so the dry run then adds exactly ``noise_std``).

    References:
        000, eq. 10 and 13 (sensitivity 2ηC/|D_i|).
    """
    return udp_claimed_epsilon([float(noise_std)], delta, udp_sensitivity(lr, clip_norm, samples), sample_rate,
                               repeat=rounds)

