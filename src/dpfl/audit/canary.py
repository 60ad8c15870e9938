"""Canary clients inside a real run: a wrapper algorithm and the audited run.

:class:`CanaryAlgorithm` wraps a private dpfl algorithm. Each round, after the real cohort has
trained, it appends rows for the canary clients sampled that round to the cohort's
:class:`LocalResult` and calls the inner ``server_step`` on the extended cohort, so canaries pass
through exactly the same clipping, noise and aggregation code as real clients (canary ids are
``num_clients + j``, so each canary gets its own noise stream from :mod:`dpfl.rng`). Everything
the ledger sees — ``sample``, ``releases``, ``claimed_epsilon`` — is the inner algorithm's, called
with the *real* cohort only: the ledger and the claimed ε keep describing the real clients.

Canary participation follows the run's sampling: under Poisson sampling with rate q each canary
joins a round independently with probability q; with a fixed cohort of K out of N, with
probability K/N (independently: the marginal of a fixed-size sample, not its joint law); with
all-clients sampling, every round. A round in which no real client was sampled is skipped
whole, canaries included (the runner skips it too).

Per algorithm (what a canary row is, and why real clients are not weakened):

* **DP-FedAvg** (004 Alg. 1): row = θ_t + S·u (the inner code clips the difference to S: it stays
  S·u). Local variant: 004's per-client std S·z/sqrt(|P_t|) would shrink as canaries enlarge the
  cohort and weaken each real upload against the server, so during the canary round the wrapper
  pins the inner calibration to the *real* cohort size: each upload keeps std S·z/sqrt(K), and the
  noise on the sum grows to S·z·sqrt((K+c)/K) ≥ S·z (never less than declared). Central variant:
  the server noise on the mean is S·z/(K+c), i.e. exactly S·z on the sum — the declared public
  release. The mean divides by K+c instead of K (utility, not privacy). Adaptive clipping and LUS
  are refused (canaries would move the clip norm; LUS needs gradients canaries do not have).
* **NbAFL** (003 Alg. 1): the code clips local *parameters* to C and averages them, so row = C·u
  (a parameter vector of norm C in a random direction, untouched by the clip), with the median
  real client size as its sample count. Uplink and downlink stds are fixed when the algorithm is
  built and do not depend on the cohort; canaries only lower the real clients' aggregation
  weights, which lowers their sensitivity. Not weakened.
* **UDP** (000 Alg. 1): uploads are local parameters with per-client noise σ_i; a canary copies a
  template real client (the one of median size): row = θ_t + s·u with s that client's enforced
  per-record sensitivity, its sample count and its σ for the round. The real clients' σ_i are
  committed by ``releases`` before training and are not touched; canaries only lower real
  aggregation weights. Not weakened. The canary shift s is per *record*, so the audit estimates
  the per-record ε of the template client.

An audited run is an ordinary run of :func:`dpfl.rounds.run_experiment` with the
wrapper as its server step (``wrap=``): it is stored as ``<run id>-audit<N>``, checkpointed, and
resumed like any run. The wrapper's checkpoint state is its canary participations plus the inner
algorithm's state, and every canary draw is keyed by (round, canary id, purpose), so a killed
audit resumed with the same command ends with the model and the estimate of an uninterrupted one.

The audit's observer is the final model only (θ_T − θ_0), so its empirical ε is compared with
the certified ε of the *public* observer (which sees every broadcast, hence is at least as
large), and with the paper's claimed ε.

Every audit is run twice: the second run is the same config, seed and canaries with every noise
number of every round plan set to 0 (``CanaryAlgorithm(silent=True)``, ``_Adapter.silence``), in
a temporary store. The lower end of its estimate is the audit's **reach** — the largest ε this
audit can show in this setting — and the verdict is ``inconclusive`` when the reach is below the
certified ε (:mod:`dpfl.audit.reach`). A finished stored audit keeps its reach with it.

References:
    Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy Estimation for
    Federated Learning", arXiv 2302.03098 (see :mod:`dpfl.audit.estimate` for what we could and
    could not confirm of its recipe).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dpfl.algorithms.base import RoundOutput
from dpfl.algorithms.private import CanaryHooks, PrivateAlgorithm
from dpfl.audit.estimate import EpsilonEstimate, estimate_epsilon
from dpfl.audit.reach import predicted_reach, reach_cap, signal_ratio, verdict
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.rng import SeedSequence

if TYPE_CHECKING:
    from dpfl.rounds import Experiment, NoticeFn, ProgressFn
    from dpfl.rounds.result import PrivacySummary, RunResult
    from dpfl.store import RunStore

__all__ = ["AuditResult", "CanaryAlgorithm", "canary_cosines", "run_audited"]

SUPPORTED = ("dp-fedavg", "dp-fedavg-blur-lus", "nbafl", "udp")


def _adapter(algo: Any) -> CanaryHooks:
    """How canaries enter ``algo``'s rounds: the algorithm says (:meth:`PrivateAlgorithm.canaries`)."""
    hooks = algo.canaries() if isinstance(algo, PrivateAlgorithm) else None
    if hooks is None:
        raise ConfigError(f"audit: algorithm {getattr(algo, 'name', type(algo).__name__)!r} is not supported; "
                          f"supported: {', '.join(SUPPORTED)}.")
    return hooks


# ---------------------------------------------------------------------------- the wrapper


def _unit_directions(seeds: SeedSequence, first_id: int, count: int, dim: int) -> torch.Tensor:
    """``count`` independent uniform unit vectors in R^dim, one stream per canary id."""
    out = torch.empty(count, dim, dtype=torch.float32)
    for j in range(count):
        g = seeds.generator(0, first_id + j, "misc")
        v = torch.randn(dim, generator=g, dtype=torch.float64)
        out[j] = (v / v.norm()).float()
    return out


def _join_probability(sampler: Any, num_clients: int) -> float:
    desc = sampler.describe()
    if desc.get("kind") == "poisson":
        return float(desc["sample_rate"])
    if "num_sampled" in desc:
        return float(desc["num_sampled"]) / num_clients
    return 1.0


class CanaryAlgorithm:
    """A private algorithm with ``num_canaries`` canary clients (see the module docstring).

    Attribute access falls through to the inner algorithm, so the wrapper can stand where the
    algorithm stands; only ``server_step`` and the checkpoint state differ. ``tag``
    (``audit<N>``) tells the runner that the audited run is another run than the plain one.

    ``silent=True`` runs the *un-noised* mechanism: every round plan the inner step sees has its
    noise numbers set to 0 (the ledger and the sampling still follow the declared plan). It is
    the run that measures the audit's reach (:mod:`dpfl.audit.reach`), tagged
    ``audit<N>-noise-removed``; its certificate is false and it is never stored.
    """

    def __init__(self, inner: PrivateAlgorithm, num_canaries: int, num_params: int, num_clients: int,
                 seeds: SeedSequence, *, silent: bool = False) -> None:
        if num_canaries < 2:
            raise ConfigError(f"audit: `canaries` must be at least 2. Found {num_canaries}.")
        self.inner = inner
        self.adapter = _adapter(inner)
        self.num_canaries = int(num_canaries)
        self.num_clients = int(num_clients)
        self.seeds = seeds
        self.first_canary_id = self.num_clients
        self.directions = _unit_directions(seeds, self.first_canary_id, self.num_canaries, num_params)
        self.join_probability = _join_probability(inner.sampler, self.num_clients)
        self.participations = torch.zeros(self.num_canaries, dtype=torch.long)
        self.silent = bool(silent)
        self.tag = f"audit{self.num_canaries}" + ("-noise-removed" if self.silent else "")

    def state_dict(self) -> dict[str, Any]:
        """The inner algorithm's state and how often each canary joined so far."""
        return {"inner": self.inner.state_dict(), "participations": self.participations.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner", {}))
        if "participations" in state:
            counts = torch.as_tensor(state["participations"], dtype=torch.long)
            if counts.shape != (self.num_canaries,):
                raise ConfigError(f"audit: the saved state has {counts.numel()} canaries, not {self.num_canaries}.")
            self.participations = counts.clone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def canaries_in_round(self, round_idx: int) -> list[int]:
        """Indices j of the canaries joining round ``round_idx`` (own sampling stream per canary)."""
        if self.join_probability >= 1.0:
            return list(range(self.num_canaries))
        out = []
        for j in range(self.num_canaries):
            g = self.seeds.generator(round_idx, self.first_canary_id + j, "sample")
            if float(torch.rand((), generator=g, dtype=torch.float64)) < self.join_probability:
                out.append(j)
        return out

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput:
        if self.silent:
            info = info.with_plan(self.adapter.silence(self.inner.round_plan(info)))
        joined = self.canaries_in_round(info.round_idx)
        if not joined:
            out = self.inner.server_step(global_params, local, info)
            return RoundOutput(out.global_params, {**out.metrics, "canaries": 0})
        real_k = int(info.clients.numel())
        dev, dtype = local.params.device, local.params.dtype
        dirs = self.directions[joined].to(device=dev, dtype=dtype)
        rows = self.adapter.rows(global_params.to(dev), dirs).to(dtype)
        c = len(joined)
        n_c = self.adapter.num_samples(local.num_samples)
        ext = LocalResult(
            params=torch.cat([local.params, rows]),
            train_loss=torch.cat([local.train_loss, torch.zeros(c, dtype=local.train_loss.dtype,
                                                                device=local.train_loss.device)]),
            num_samples=torch.cat([local.num_samples,
                                   torch.full((c,), n_c, dtype=local.num_samples.dtype,
                                              device=local.num_samples.device)]),
            final_grads=None,
        )
        ids = torch.tensor([self.first_canary_id + j for j in joined], dtype=info.clients.dtype)
        plan = self.adapter.extend(self.inner.round_plan(info), real_k, c, self.num_canaries)
        ext_info = RoundInfo(info.round_idx, self.num_clients + self.num_canaries,
                             torch.cat([info.clients, ids]), info.seeds, plan=plan)
        out = self.inner.server_step(global_params, ext, ext_info)
        self.participations[joined] += 1
        metrics = {k: v for k, v in out.metrics.items() if not isinstance(v, list)}  # per-row lists mix canaries
        metrics["canaries"] = c
        return RoundOutput(out.global_params, metrics)


def canary_cosines(directions: torch.Tensor, model_change: torch.Tensor) -> np.ndarray:
    """cos(u_j, θ_T − θ_0) for unit rows u_j."""
    delta = model_change.detach().double().cpu()
    norm = float(delta.norm())
    if norm == 0:
        return np.zeros(directions.shape[0])
    return (directions.double() @ delta / norm).numpy()


# ---------------------------------------------------------------------------- the audited run


@dataclass
class AuditResult:
    """An audited run: its record, the canary estimate, and the estimate of the same audit with the
    noise removed (whose lower end is the audit's reach, :mod:`dpfl.audit.reach`)."""

    run_id: str
    status: str
    rounds_done: int
    final: dict[str, Any]
    history: list[dict[str, Any]]
    estimate: EpsilonEstimate
    reach_estimate: EpsilonEstimate

    @property
    def audit(self) -> dict[str, Any]:
        """The audit entry (``final["privacy"]["audit"]``)."""
        return dict(self.final["privacy"]["audit"])


@dataclass
class _CanaryRun:
    res: RunResult
    exp: Experiment
    wrapped: CanaryAlgorithm
    final_params: torch.Tensor
    privacy: PrivacySummary


def _canary_run(config: Any, num_canaries: int, store: RunStore, *, restart: bool,
                checkpoint_dir: str | Path | None, break_noise: Callable[[Any], None] | None, silent: bool,
                progress: ProgressFn | None, notice: NoticeFn | None) -> _CanaryRun:
    """One run of ``config`` with canaries (``silent``: with the noise removed), and its final model."""
    from dpfl.rounds import run_experiment
    from dpfl.rounds.result import PrivacySummary
    from dpfl.sim.checkpoint import load_checkpoint

    built: dict[str, Any] = {}

    def wrap(exp: Experiment) -> CanaryAlgorithm:
        algo = exp.algorithm
        if not isinstance(algo, PrivateAlgorithm):
            raise ConfigError(f"audit: algorithm {config.algorithm.name!r} adds no noise to audit; "
                              f"supported: {', '.join(SUPPORTED)}.")
        if break_noise is not None:
            break_noise(algo)
        wrapped = CanaryAlgorithm(algo, num_canaries, exp.problem.layout.numel, exp.data.num_clients, exp.seeds,
                                  silent=silent)
        if break_noise is not None:
            wrapped.tag += "-broken-noise"
        built["exp"], built["wrapped"] = exp, wrapped
        return wrapped

    res = run_experiment(config, store, checkpoint_dir=checkpoint_dir, progress=progress, notice=notice,
                         restart=restart, wrap=wrap)
    exp, wrapped = built["exp"], built["wrapped"]
    model = load_checkpoint(res.final["model_path"])
    if model is None or model.get("run_id") != res.run_id:
        raise ConfigError(f"audit: the final model {res.final['model_path']} of run {res.run_id} is missing; "
                          "run the audit again with restart (`--restart`).")
    wrapped.load_state_dict(model.get("algorithm", {}))
    summary = PrivacySummary.of(res.final)
    if summary is None:
        raise ConfigError(f"audit: run {res.run_id} has no privacy summary to audit against.")
    return _CanaryRun(res, exp, wrapped, model["global_params"], summary)


def run_audited(
    config: Any,
    num_canaries: int = 100,
    *,
    num_unseen: int = 1000,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    store: RunStore | None = None,
    restart: bool = False,
    checkpoint_dir: str | Path | None = None,
    break_noise: Callable[[Any], None] | None = None,
    progress: ProgressFn | None = None,
    notice: NoticeFn | None = None,
) -> AuditResult:
    """Run ``config`` with canary clients, estimate the empirical ε of its final model, and
    measure the audit's reach (the same audit with the noise removed, :mod:`dpfl.audit.reach`).

    The run is :func:`dpfl.rounds.run_experiment` with :class:`CanaryAlgorithm` as
    its server step: stored in ``store`` as ``<run id>-audit<N>`` with checkpoints, so a killed
    audit resumes where it stopped and a finished one is not run again (``restart`` runs it
    anew). The estimate is then computed from the run's final model file and stored in the run's
    result as ``privacy.audit``. Without ``store`` the run goes to a temporary store that is
    deleted afterwards (nothing to resume; the result has no ``model_path``).

    The reach needs a second run of the same size, with every noise number 0; it always goes to a
    temporary store (its certificate would be false) and gets neither ``progress`` nor
    ``notice``. A finished stored audit whose entry holds the reach for the same unseen count,
    bootstrap and confidence reuses it.

    ``break_noise`` (tests only) may alter the built inner algorithm before the run, e.g. to
    simulate a noise bug the ledger does not know about; such a run is tagged
    ``audit<N>-broken-noise`` so it never shares a stored run or a checkpoint with a correct one.
    The reach run does not get it (with the noise removed, a noise bug has nothing to alter).

    Returns:
        An :class:`AuditResult` whose ``final["privacy"]["audit"]`` holds the empirical ε with its
        interval next to the certified (public and headline) and claimed ε, the ``reach`` and the
        ``verdict`` (``violation``, ``consistent`` or ``inconclusive``), and the ``flag``: the
        whole interval lies above the certified public ε.
    """
    from dpfl.store import RunStore

    settings = {"unseen": int(num_unseen), "bootstrap": int(bootstrap), "confidence": float(confidence)}
    with tempfile.TemporaryDirectory(prefix="dpfl-audit-") as tmp:
        run_store = store if store is not None else RunStore(Path(tmp) / "runs.sqlite")
        main = _canary_run(config, num_canaries, run_store, restart=restart, checkpoint_dir=checkpoint_dir,
                           break_noise=break_noise, silent=False, progress=progress, notice=notice)
        res = main.res
        stored = ((res.final.get("privacy") or {}).get("audit") or {}) if not restart else {}
        reach_est: EpsilonEstimate | None = None
        if stored.get("reach_settings") == settings and isinstance(stored.get("reach_estimate"), dict):
            reach_est = EpsilonEstimate.from_dict(stored["reach_estimate"])
        else:
            quiet = _canary_run(config, num_canaries, RunStore(Path(tmp) / "reach.sqlite"), restart=True,
                                checkpoint_dir=None, break_noise=None, silent=True, progress=None, notice=None)
            reach_est = _estimate(quiet, num_unseen=num_unseen, bootstrap=bootstrap, confidence=confidence)
        est = _estimate(main, num_unseen=num_unseen, bootstrap=bootstrap, confidence=confidence)
        audit = _audit_entry(main, est, reach_est, settings)
        final = dict(res.final)
        final["privacy"] = dataclasses.replace(main.privacy, extra={**main.privacy.extra, "audit": audit}).to_dict()
        final["seconds"] = float(sum(m.get("seconds", 0.0) for m in res.history))
        if store is None:
            del final["model_path"]  # in the temporary store, gone with it
        else:
            run_store.finish(res.run_id, res.status, final)
    return AuditResult(res.run_id, res.status, res.rounds_done, final, res.history, est, reach_est)


def _estimate(run: _CanaryRun, *, num_unseen: int, bootstrap: int, confidence: float) -> EpsilonEstimate:
    """The canary estimate of one run's final model (unseen directions and bootstrap seed are
    keyed by the run's seed, so the audit and its un-noised twin use the same ones)."""
    exp, wrapped = run.exp, run.wrapped
    n, dim = exp.data.num_clients, exp.problem.layout.numel
    change = run.final_params.detach().cpu() - exp.init_params.detach().cpu()
    cos_in = canary_cosines(wrapped.directions, change)
    unseen = _unit_directions(exp.seeds, n + wrapped.num_canaries, num_unseen, dim)
    cos_out = canary_cosines(unseen, change)
    return estimate_epsilon(cos_in, cos_out, float(run.privacy.delta), confidence=confidence, bootstrap=bootstrap,
                            seed=exp.seeds.seed(0, n, "misc") % (2**32))


def _audit_entry(run: _CanaryRun, est: EpsilonEstimate, reach_est: EpsilonEstimate,
                 settings: dict[str, Any]) -> dict[str, Any]:
    """The canary estimate next to the run's certified and claimed ε, with the reach and verdict."""
    privacy, wrapped = run.privacy, run.wrapped
    dim = int(run.exp.problem.layout.numel)
    public, head = privacy.certificate("public"), privacy.headline
    cert_public = None if public is None else float(public.epsilon)
    delta, conf, unseen = float(privacy.delta), float(settings["confidence"]), int(settings["unseen"])
    counts = wrapped.participations.double().numpy()
    reach = float(reach_est.epsilon_low)
    joined = bool(counts.sum() > 0) and int(counts.size) >= 2
    cap = reach_cap(unseen, dim, counts, delta=delta, confidence=conf) if joined else 0.0
    signal = signal_ratio(reach_est.mean_inserted - reach_est.mean_unseen, counts) if joined else math.inf
    share = None if not joined or math.isinf(signal) else wrapped.num_canaries / (signal + wrapped.num_canaries)
    best = None
    if joined and not math.isinf(signal):
        m = wrapped.num_canaries
        options = sorted({max(2, m // 4), max(2, m // 2), m, 2 * m, 4 * m})
        predicted = {k: predicted_reach(k, unseen, dim, counts, signal=signal, delta=delta, confidence=conf)
                     for k in options}
        k_best = max(options, key=lambda k: (predicted[k], k == m))
        best = {"canaries": k_best, "reach": predicted[k_best], "reach_with_current": predicted[m]}
    algo = wrapped.inner
    return {
        "method": "one-shot canary cosines (Andrew et al., arXiv 2302.03098); observer: final model",
        "empirical_epsilon": est.epsilon,
        "empirical_epsilon_interval": [est.epsilon_low, est.epsilon_high],
        "certified_epsilon_public": cert_public,
        "certified_epsilon_headline": None if head is None else float(head.epsilon),
        "claimed_epsilon": _claim_value(privacy.claimed_epsilon),
        "claim_comparable": algo.claim_comparable,
        "flag": bool(cert_public is not None and est.epsilon_low > cert_public),
        "verdict": verdict(est.epsilon_low, reach, cert_public),
        "reach": reach,
        "reach_method": "lower end of the same audit with the noise removed (dpfl.audit.reach)",
        "reach_cap": cap,
        "reach_canary_share": share,
        "reach_best_canaries": best,
        "reach_settings": settings,
        "reach_estimate": reach_est.to_dict(),
        "dimension": dim,
        "canaries": wrapped.num_canaries,
        "unseen_canaries": unseen,
        "canary_participations_mean": float(wrapped.participations.double().mean()),
        "join_probability": wrapped.join_probability,
        "estimate": est.to_dict(),
    }


def _claim_value(claimed: Any) -> float | None:
    if isinstance(claimed, dict):
        return max(claimed.values()) if claimed else None
    if claimed is None:
        return None
    return float(claimed) if math.isfinite(float(claimed)) else float("inf")
