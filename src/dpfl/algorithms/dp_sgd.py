"""DP-SGD-FedAvg: FedAvg whose clients train with per-sample DP-SGD — record-level privacy.

A baseline next to the five papers' systems: the same model can be trained with user-level
protection (``dp-fedavg``: one client's whole data is the unit) or record-level protection
(``dp-sgd-fedavg``: one training record is the unit), and the certificate says which.

**Local step** (Abadi et al. 2016, Algorithm 1, with Poisson sampling as in their §3.1
moments-accountant analysis). In each of its local steps client k includes each of its records
independently with probability q_k, clips every included per-sample gradient to L2 norm C
(``clip_norm``), sums them, adds N(0, (z·C)² I) (``noise_multiplier`` z) and divides by the
*expected* batch size q_k·|D_k| (a fixed denominator: the step is exactly the sampled Gaussian
sum query the accountant prices, whatever the realized batch size; an empty batch still takes a
noise-only step), then takes a plain SGD step with ``local.lr``. The engines do this
(:class:`dpfl.client.local.DpSgd`, set by :meth:`DpSgdFedAvg.configure_local`): Poisson masks from
the client's stream (round, k, "batch"), noise from (round, k, "noise"), so the vectorized and the
sequential engine (and a real client) draw the same numbers.

* q_k: ``record_sample_rate`` if given (the same for every client; then ``local.batch_size``
  must be null), else q_k = min(1, B/|D_k|) from ``local.batch_size`` B (the expected batch is
  B, as in the usual "batch size / dataset size" convention).
* Steps per round: ``local.steps`` if given, else ``local.epochs`` × ⌈1/q_k⌉ (one epoch is 1/q
  steps in expectation; with q_k = B/|D_k| that is ⌈|D_k|/B⌉, an ordinary epoch's batches).

**Server.** Each client uploads its update w_k − w; the server takes the sample-weighted mean
(FedAvg, 000 eq. 2) and adds no noise: the privacy is entirely the clients' DP-SGD.

**Privacy.** Unit: one record; relation: add/remove one record (Poisson sampling is analysed
under add/remove; dp_accounting certifies it under that relation only). One local step is
``PoissonSampledDpEvent(q_k, GaussianDpEvent(z))`` (the sum's sensitivity is C when a record is
added or removed); a client's round is ``steps_k`` of them composed adaptively
(:class:`dpfl.privacy.accounting.ledger.SampledGaussianRelease`). The server sees each upload — a
post-processing of the noisy steps — so each participant is charged that event against the
server; the public sees the mean, a post-processing of the uploads, and is charged the same
event per participant: no amplification by client sampling is claimed (a record's guarantee
would need the record's client to be sampled secretly *and* the mean's other terms to be
independent of it; dpfl does not claim it — a valid, possibly loose statement). The claimed ε
is Abadi et al.'s moments accountant for the same event, which is dp_accounting's RDP accountant
on it (``claimed.dpsgd_claimed_epsilon``: T Poisson-sampled Gaussians, here T = steps_k ×
rounds taken part, q = q_k); the certificate is the tightest of RDP (more orders) and PLD, so
never above the claim.

**Local optimizer.** Plain SGD only. Momentum and Adam applied to the noisy gradients are
post-processing and would keep the guarantee; they are refused until the engines' DP-SGD path is
tested with them (the limiting case and the engine agreement are established for plain SGD).

References:
    M. Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Algorithm 1 and §3.1;
    I. Mironov, K. Talwar, L. Zhang, "Rényi Differential Privacy of the Sampled Gaussian
    Mechanism", 2019; 000_3304bf6f36c753f8.txt eq. 2 (weighted mean).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import DpSgdOptions, parse_options
from dpfl.algorithms.private import Calibration, PrivateAlgorithm, RoundPlan
from dpfl.client.context import LocalProblem, LocalResult, RoundInfo
from dpfl.client.local import (
    DpSgd,
    LocalTraining,
    dp_sgd_noise_std,
    dp_sgd_sample_rate,
    dp_sgd_steps,
)
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.claimed import dpsgd_claimed_epsilon
from dpfl.privacy.releases import Release, SampledGaussianRelease
from dpfl.server.aggregators import WeightedMean

__all__ = ["ALGORITHMS", "DpSgdFedAvg", "DpSgdOptions"]


@dataclass(frozen=True)
class DpSgdCalibration(Calibration):
    """What dp-sgd-fedavg fixes before the run from the public sizes and the local training: z,
    and per client q_k, its number of local steps and its step noise std z·C/(q_k|D_k|)."""

    noise_multiplier: float
    sample_rates: tuple[float, ...]
    steps: tuple[int, ...]
    step_noise_stds: tuple[float, ...]


@dataclass(frozen=True)
class DpSgdPlan(RoundPlan):
    """The numbers of one dp-sgd-fedavg round (the same every round): z, and per client its
    record sample rate q_k, its number of local steps and its step noise std z·C/(q_k|D_k|)."""

    round_idx: int
    noise_multiplier: float
    sample_rates: tuple[float, ...]
    steps: tuple[int, ...]
    step_noise_stds: tuple[float, ...]

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """Each participant's DP-SGD steps (``steps_k`` Poisson-sampled Gaussians of multiplier z
        at rate q_k), against both observers; clients with equal (q_k, steps) share a release."""
        del num_samples, ideal_secure_sum
        groups: dict[tuple[float, int], list[int]] = {}
        for c in ids:
            groups.setdefault((self.sample_rates[c], self.steps[c]), []).append(c)
        return [SampledGaussianRelease(obs, self.noise_multiplier, q, steps, tuple(members))
                for obs in ("server", "public") for (q, steps), members in groups.items()]

    def declared(self, client: int) -> dict[str, float]:
        c = int(client)
        return {"noise_std": self.step_noise_stds[c], "noise_multiplier": self.noise_multiplier,
                "record_sample_rate": float(self.sample_rates[c]), "local_steps": float(self.steps[c])}


class DpSgdFedAvg(PrivateAlgorithm[DpSgdPlan]):
    """See the module docstring."""

    name = "dp-sgd-fedavg"
    relation = "add_remove"
    claim_observer = "server"  # Abadi et al.: each client's released model, which the server receives
    privacy_unit = "record"
    local_optimizers = frozenset({"sgd"})
    local_optimizer_reason = (
        "the accountant prices the noisy gradients of plain DP-SGD steps; momentum or Adam would only "
        "post-process them, but dpfl's DP-SGD engines are tested with plain SGD only")

    def __init__(self, options: DpSgdOptions, sampler: Any, ctx: Any) -> None:
        cfg = ctx.config
        self.options = options
        self.sampler = sampler
        self.num_clients = int(ctx.num_clients)
        self.delta = float(ctx.privacy.delta)
        if options.record_sample_rate is not None and cfg.local.batch_size is not None:
            raise ConfigError(
                f"{self.name}: give the record sampling rate once: `algorithm.options.record_sample_rate` "
                f"(= {options.record_sample_rate:g}) with `local.batch_size: null`, or `local.batch_size` "
                f"alone (q_k = batch_size / |D_k|). Found local.batch_size = {cfg.local.batch_size!r}."
            )
        self.sizes = [int(n) for n in ctx.client_sizes.tolist()]
        # the local training the engines will run (configure_local installs exactly this)
        base = LocalTraining.from_config(cfg.local)
        self.local = dataclasses.replace(
            base, per_sample_clip=float(options.clip_norm),
            dp_sgd=DpSgd(float(options.noise_multiplier), options.record_sample_rate))
        self.sample_rates = [dp_sgd_sample_rate(n, self.local) for n in self.sizes]
        self.steps = [dp_sgd_steps(n, self.local) for n in self.sizes]
        self.step_noise_stds = [dp_sgd_noise_std(n, self.local) for n in self.sizes]
        # participation: rounds each client took part in before the latest planned round, and
        # that round's (index, participants) — releases() may be asked again for the same round
        self._done = [0] * self.num_clients
        self._current: tuple[int, list[int]] | None = None

    # ------------------------------------------------------------------ engine configuration

    def configure_local(self, problem: LocalProblem) -> LocalProblem:
        """DP-SGD in the clients' local training: Poisson batches, per-sample clip C, noise z·C."""
        local = dataclasses.replace(problem.local, per_sample_clip=self.local.per_sample_clip,
                                    dp_sgd=self.local.dp_sgd)
        if local != self.local:
            raise ConfigError(
                f"{self.name}: the engine's local training {local} differs from the one the privacy "
                f"plan was computed for {self.local}; build the run from one config."
            )
        return dataclasses.replace(problem, local=local)

    # ------------------------------------------------------------------ privacy

    def calibration(self) -> DpSgdCalibration:
        """z and each client's q_k, steps and step noise std (:class:`DpSgdCalibration`)."""
        return DpSgdCalibration(float(self.options.noise_multiplier), tuple(float(q) for q in self.sample_rates),
                                tuple(int(s) for s in self.steps), tuple(float(x) for x in self.step_noise_stds))

    def plan(self, info: RoundInfo) -> DpSgdPlan:
        """The same numbers every round: z, and each client's q_k, steps and step noise std."""
        return DpSgdPlan(info.round_idx, float(self.options.noise_multiplier), tuple(self.sample_rates),
                         tuple(self.steps), tuple(float(x) for x in self.step_noise_stds))

    def releases(self, info: RoundInfo, num_samples: torch.Tensor, ideal_secure_sum: bool) -> list[Release]:
        """Each participant's DP-SGD steps, charged to it against both observers (the server sees
        its upload; the public a mean of uploads — post-processing; no client-sampling
        amplification). Secure aggregation would not change this (the sum is post-processing)."""
        ids = [int(c) for c in info.clients.tolist()]
        self._note_participants(info.round_idx, ids)
        return self.round_plan(info).releases(ids, num_samples, ideal_secure_sum)

    def _note_participants(self, round_idx: int, ids: list[int]) -> None:
        if self._current is not None and self._current[0] != round_idx:
            if round_idx < self._current[0]:
                raise ConfigError(f"{self.name}: round {round_idx} planned after round {self._current[0]}")
            for c in self._current[1]:
                self._done[c] += 1
        self._current = (round_idx, list(ids))

    def _participations(self, rounds_done: int) -> list[int]:
        counts = list(self._done)
        if self._current is not None and self._current[0] < rounds_done:
            for c in self._current[1]:
                counts[c] += 1
        return counts

    def claimed_epsilon(self, rounds_done: int) -> dict[int, float]:
        """Abadi et al.'s moments accountant per client: steps_k × (rounds it took part in)
        Poisson-sampled Gaussians (q_k, z) — dp_accounting's RDP accountant on that event."""
        counts = self._participations(rounds_done)
        return {c: _claim(float(self.options.noise_multiplier), self.sample_rates[c], self.steps[c] * counts[c],
                          self.delta) for c in range(self.num_clients)}

    def claim_notion(self) -> str:
        return (f"Abadi et al. 2016 (moments accountant = dp_accounting RDP): (ε, δ={self.delta:g})-DP per record "
                "of each client, add/remove, Poisson record sampling q_k over steps × rounds taken part; no "
                "amplification by client sampling")

    def not_covered(self) -> list[str]:
        out = ["client sizes |D_k| are treated as public (each upload declares it; it sets the denominator "
               "q_k|D_k| and the aggregation weight): the add/remove-one-record guarantee is for the noisy "
               "gradients and models, with the size of the client's data held fixed"]
        if self.options.record_sample_rate is None:
            out.append("q_k = batch_size/|D_k| and the number of local steps are computed from |D_k| (public, "
                       "as above); set `record_sample_rate` and `local.steps` to fix them independently of the data")
        return out

    # ------------------------------------------------------------------ the round, split at the wire

    splits_rounds = True

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """The DP-SGD model's update Δ_k = w_k − w (the noise was added at every local step);
        declares the step noise std z·C/(q_k|D_k|), z, q_k and the number of steps."""
        updates = local.params.sub_(global_params.to(local.params.device))
        ids = [int(c) for c in info.clients.tolist()]
        plan = self.round_plan(info)
        declared = {k: torch.tensor([v[k] for v in (plan.declared(c) for c in ids)], dtype=torch.float64)
                    for k in ("noise_std", "noise_multiplier", "record_sample_rate", "local_steps")}
        return Uploads(info.clients, updates, local.num_samples, local.train_loss, declared)

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """w ← w + Σ_k p_k Δ_k, p_k = |D_k| / Σ_j |D_j| over the uploads that arrived (000 eq. 2);
        no server noise. Nothing arrived: the model is unchanged."""
        del info
        if uploads.num_rows == 0:
            return RoundOutput(global_params.clone(), {"arrived": 0})
        mean = WeightedMean.by_samples(uploads.num_samples)(uploads.params)
        new_global = global_params + mean.to(global_params.device)
        return RoundOutput(new_global, {
            "update_norm_mean": float(uploads.params.norm(dim=1).mean()),
            "noise_multiplier": float(self.options.noise_multiplier),
            "step_noise_std_mean": float(uploads.declared["noise_std"].mean()),
        })

    # ------------------------------------------------------------------ state

    def client_state(self, client: int | None = None, info: RoundInfo | None = None) -> dict[str, Any]:
        del client, info
        return {}  # a client needs nothing from the server: its plan follows from the config

    def state_dict(self) -> dict[str, Any]:
        return {"participations": list(self._done),
                "current": None if self._current is None else [self._current[0], list(self._current[1])]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "participations" in state:
            self._done = [int(x) for x in state["participations"]]
        if "current" in state:
            cur = state["current"]
            self._current = None if cur is None else (int(cur[0]), [int(c) for c in cur[1]])


@functools.lru_cache(maxsize=4096)
def _claim(noise_multiplier: float, sample_rate: float, count: int, delta: float) -> float:
    if count == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return dpsgd_claimed_epsilon(noise_multiplier, sample_rate, count, delta)


def _build(options: dict[str, Any], sampler: Any, ctx: Any) -> DpSgdFedAvg:

    return DpSgdFedAvg(parse_options(DpSgdOptions, options, "dp-sgd-fedavg"), sampler, ctx)


ALGORITHMS = {"dp-sgd-fedavg": _build}
