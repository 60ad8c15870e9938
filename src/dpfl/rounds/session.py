"""A run end to end: build, register in the store, resume, the round loop, the final record.

:func:`run_experiment` is what ``dpfl run``, the Flower ServerApp, the canary audit and the Python
API call; :func:`dry_run` is ``dpfl account CONFIG``: the same build, sampling, calibration, gate
and ledger with a :class:`~dpfl.rounds.cohort.DryCohort` and no store. Every completed round is
written to the run store; a checkpoint every ``checkpoint_every`` rounds lets a killed run continue
with the same command and end with exactly the model an uninterrupted run gives (all randomness
is keyed by (round, client, purpose), see :mod:`dpfl.rng`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.config import RunConfig, deployment_config
from dpfl.errors import ConfigError
from dpfl.rng import SeedSequence
from dpfl.rounds.build import (
    Experiment,
    Plan,
    build_experiment,
    environment,
    evaluate,
    params_digest,
    plan_of,
)
from dpfl.rounds.cohort import (
    Cohort,
    DryCohort,
    InProcessCohort,
    ServerStep,
    Transport,
    UploadCohort,
)
from dpfl.rounds.gate import PrivacyGate, WhatIfUplinkGate
from dpfl.rounds.loop import LoopState, RoundObserver, run_rounds
from dpfl.rounds.noise import noise_record
from dpfl.rounds.result import DryRunResult, RunResult
from dpfl.sim.checkpoint import clean_orphans, load_checkpoint, save_checkpoint
from dpfl.store import RunStore

ProgressFn = Callable[[int, int, dict[str, Any], float], None]
NoticeFn = Callable[[str], None]
CohortFactory = Callable[[Experiment], Cohort]

SECURE_AGGREGATION_REFUSED = (
    "`privacy.secure_aggregation: true` is not available for {what}: {why}, so every client's upload "
    "would reach the server in the clear and a certificate that lets the server see only the sum would "
    "be false. Remove the setting{hint}.")


def check_secure_aggregation(config: RunConfig, algorithm: Any, *, remote: Any, wrapped: bool) -> None:
    """Refuse ``privacy.secure_aggregation`` where nothing provides it: an algorithm without an
    integer pipeline, a deployment whose cohort does not run a secure sum (``remote`` without a
    true ``secure_sum`` attribute; hidden participation needs ``hidden_participation`` too: the
    clients' own coins, ``hidden_participation``), a wrapped server step (audit canaries).
    Simulation of DP-FedAvg computes the integer pipeline and the modular sum the server would obtain.

    Raises:
        ConfigError: naming what cannot provide it.
    """
    if not config.privacy.secure_aggregation:
        return
    name = config.algorithm.name
    if not getattr(algorithm, "implements_secure_aggregation", False):
        raise ConfigError(SECURE_AGGREGATION_REFUSED.format(
            what=f"algorithm {name!r}", why="it has no integer pipeline for a secure sum",
            hint="; DP-FedAvg has one (`algorithm.name: dp-fedavg`, or `dpfl account dp-fedavg --secure-aggregation`)"))
    if remote is not None and remote is not False and not getattr(remote, "secure_sum", False):
        raise ConfigError(SECURE_AGGREGATION_REFUSED.format(
            what="this deployment", why="its transport does not run a secure sum (dpfl's Flower runtime runs "
            "SecAgg+ for it; a transport of your own must offer `secure_sum`)",
            hint=", or run the same config in simulation (`dpfl run`)"))
    if (remote is not None and remote is not False and config.privacy.participation == "hidden"
            and not getattr(remote, "hidden_participation", False)):
        raise ConfigError(SECURE_AGGREGATION_REFUSED.format(
            what="deployed runs with `participation: hidden`",
            why="its transport does not let each client draw its own secret coin (`hidden_participation`)",
            hint=" or use `participation: visible`"))
    if wrapped:
        raise ConfigError(SECURE_AGGREGATION_REFUSED.format(
            what="audits", why="the canary audit wraps the server step outside the secure sum", hint=""))


def checkpoint_path(store: RunStore, rid: str, checkpoint_dir: str | Path | None = None) -> Path:
    """Where the checkpoint of run ``rid`` in ``store`` lives: ``<dir>/<rid>@<store file name>.pt``
    with ``<dir>`` = ``checkpoint_dir`` or ``checkpoints/`` next to the store, so that runs of the
    same config in two stores of one folder never resume from each other's checkpoint."""
    folder = Path(checkpoint_dir) if checkpoint_dir is not None else store.path.parent / "checkpoints"
    return folder / f"{rid}@{store.path.name}.pt"


def make_gate(exp: Experiment) -> PrivacyGate | None:
    """The privacy gate of a built run (None for a non-private algorithm)."""
    algo = exp.algorithm
    if not isinstance(algo, PrivateAlgorithm):
        return None
    return PrivacyGate(algo, exp.data.num_clients, exp.data.sizes, exp.config.privacy, exp.seeds,
                       planned_rounds=exp.config.rounds)


class _StoreRecorder:
    """The loop's recorder for a stored run: notices, rounds and checkpoints."""

    def __init__(self, store: RunStore, rid: str, exp: Experiment, ckpt: Path, owner: str,
                 progress: ProgressFn | None, notice: NoticeFn | None,
                 observers: tuple[RoundObserver, ...] = ()) -> None:
        self.store, self.rid, self.exp, self.ckpt, self.owner = store, rid, exp, ckpt, owner
        self._progress, self._notice, self.observers = progress, notice, observers

    def notice(self, kind: str, message: str, round_idx: int | None = None) -> None:
        self.store.add_notice(self.rid, round_idx, kind, message)
        if self._notice is not None:
            self._notice(message)

    def evaluate(self, params: torch.Tensor) -> dict[str, float]:
        return evaluate(self.exp.problem, params, self.exp.x_test, self.exp.y_test)

    def log_round(self, round_idx: int, metrics: dict[str, Any]) -> None:
        self.store.log_round(self.rid, round_idx, metrics)
        for observer in self.observers:
            observer.log_round(round_idx, metrics)

    def checkpoint(self, state: LoopState, ledger_state: dict[str, Any] | None, algo_state: dict[str, Any]) -> None:
        save_checkpoint(self.ckpt, {"run_id": self.rid, "rounds_done": state.rounds_done,
                                    "global_params": state.params.cpu(), "algorithm": algo_state,
                                    "ledger": ledger_state, "empty_rounds": state.empty_rounds,
                                    "consecutive_empty": state.consecutive_empty}, owner=self.owner)

    def progress(self, done: int, total: int, metrics: dict[str, Any], seconds: float) -> None:
        if self._progress is not None:
            self._progress(done, total, metrics, seconds)


class _NullRecorder:
    """A dry run's recorder: notices go to ``notice``; nothing is stored."""

    def __init__(self, notice: NoticeFn | None) -> None:
        self._notice = notice

    def notice(self, kind: str, message: str, round_idx: int | None = None) -> None:
        if self._notice is not None:
            self._notice(f"{kind}: {message}")

    def evaluate(self, params: torch.Tensor) -> dict[str, float]:
        return {}

    def log_round(self, round_idx: int, metrics: dict[str, Any]) -> None:
        pass

    def checkpoint(self, state: LoopState, ledger_state: dict[str, Any] | None, algo_state: dict[str, Any]) -> None:
        pass

    def progress(self, done: int, total: int, metrics: dict[str, Any], seconds: float) -> None:
        pass


def run_experiment(
    config: RunConfig,
    store: RunStore,
    *,
    checkpoint_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    notice: NoticeFn | None = None,
    restart: bool = False,
    remote: Transport | None = None,
    secure_rng: bool = False,
    wrap: Callable[[Experiment], ServerStep] | None = None,
    experiment: Experiment | None = None,
    observers: tuple[RoundObserver, ...] = (),
) -> RunResult:
    """Run (or resume, or return the stored result of) the run a config defines.

    Private algorithms get a privacy gate (:class:`~dpfl.rounds.gate.PrivacyGate`): each round's
    releases are declared after the cohort is drawn and before training; the run stops before a
    round that would take the certified ε above ``privacy.target_epsilon``, and in
    ``privacy.strict`` mode refuses a round whose certified ε would exceed the paper's claimed ε.
    Notices are stored with the run and passed to ``notice``.

    The cohort trains in process (the config's engine) unless ``remote`` is given: a transport
    (the Flower adapter) on which clients train and run the algorithm's client step elsewhere;
    the ledger then records what each round really released for the uploads that arrived.

    ``secure_rng`` seeds every server-side draw (cohort sample, server noise) from the OS CSPRNG
    instead of the config's seed: what a deployment needs. Runs are then not reproducible, and
    ``privacy.gaussian_noise`` unset means "lattice" (:func:`dpfl.config.deployment_config`).

    ``wrap(exp)`` (simulation only) returns the server step the in-process cohort calls instead of
    the algorithm's, e.g. :class:`dpfl.audit.canary.CanaryAlgorithm`; sampling, releases, the
    claim and the ledger stay the algorithm's, checkpoints hold the wrapper's state.

    ``experiment``: an already built experiment of ``config`` (the Python API builds it from a
    user's model and data); by default the config is built.

    ``observers`` see every round of the run (:class:`~dpfl.rounds.loop.RoundObserver`), those
    already stored first: a CSV or TensorBoard log is complete after a resume or a stored result.
    """
    if secure_rng and experiment is None:
        config = deployment_config(config)  # a deployment's Gaussian releases are lattice releases by default
    exp = experiment if experiment is not None else build_experiment(config)
    check_secure_aggregation(config, exp.algorithm, remote=remote, wrapped=wrap is not None)
    if remote is not None and not exp.algorithm.splits_rounds:
        raise ConfigError(
            f"algorithm {config.algorithm.name!r} does not split its round into a client step and a "
            "server step yet, so it cannot run on real clients; run it in simulation.")
    if remote is not None and wrap is not None:
        raise ConfigError("a wrapped server step (e.g. audit canaries) runs in simulation only, not on real clients.")
    cohort: Cohort
    if remote is not None:
        cohort = UploadCohort(remote, exp.algorithm)
    else:
        if exp.engine is None:
            raise ConfigError("the experiment was built without an engine (a dry run's); it cannot train.")
        cohort = InProcessCohort(exp.engine, exp.algorithm, wrap(exp) if wrap is not None else None)
    return run_on(exp, cohort, store, checkpoint_dir=checkpoint_dir, progress=progress, notice=notice,
                  restart=restart, secure_rng=secure_rng, observers=observers)


def run_on(
    exp: Experiment,
    cohort: Cohort,
    store: RunStore,
    *,
    checkpoint_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    notice: NoticeFn | None = None,
    restart: bool = False,
    secure_rng: bool = False,
    observers: tuple[RoundObserver, ...] = (),
) -> RunResult:
    """Run a built experiment on ``cohort``, stored in ``store`` (see :func:`run_experiment`)."""
    # a run on real clients, or with a wrapped server step, is another run than the simulation of
    # the same config: its id carries the cohort's tag
    rid = exp.run_id + (f"-{cohort.tag}" if cohort.tag else "")
    if secure_rng:
        rid += "-secure"
        # a deployment draws every noise from ChaCha20 under fresh OS keys, whatever the config's generator
        exp.seeds = SeedSequence.secure_mode("chacha20")
        if exp.engine is not None:
            exp.engine.seeds = exp.seeds
    ckpt_path = checkpoint_path(store, rid, checkpoint_dir)
    owner = store.path.name
    stored = _stored_result(store, rid, restart)
    if stored is None:
        with store.lease(rid):  # one writer per run: refused while a live process writes it
            stored = _leased(exp, cohort, store, rid, ckpt_path, owner, progress, notice, restart, secure_rng,
                             observers)
        if stored.stored is None:
            return stored
    for observer in observers:  # a stored result: its observers still see every round
        _replay(observer, rid, stored.history)
        observer.close()
    return stored


def _replay(observer: RoundObserver, rid: str, rows: list[dict[str, Any]]) -> None:
    """Open ``observer`` on run ``rid`` and show it the stored rounds ``rows``."""
    observer.open(rid)
    for row in rows:
        observer.log_round(int(row["round"]), {k: v for k, v in row.items() if k != "round"})


def _stored_result(store: RunStore, rid: str, restart: bool) -> RunResult | None:
    existing = store.find(rid)
    if existing is not None and existing.problem is None and existing.status in ("finished", "stopped") and not restart:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(existing.updated_at))
        return RunResult(rid, existing.status, len(store.rounds(rid)), existing.result or {}, store.rounds(rid),
                         stored=f"{existing.status} {when} in {store.path}")
    return None


def _leased(exp: Experiment, cohort: Cohort, store: RunStore, rid: str, ckpt_path: Path, owner: str,
            progress: ProgressFn | None, notice: NoticeFn | None, restart: bool, secure_rng: bool,
            observers: tuple[RoundObserver, ...] = ()) -> RunResult:
    """The run, with its lease held: start it or resume it, store whatever stops it."""
    stored = _stored_result(store, rid, restart)  # finished by the writer that held the lease before
    if stored is not None:
        return stored
    config = exp.config
    clean_orphans(ckpt_path.parent, prefix=ckpt_path.name)  # left by a writer killed mid-write
    clean_orphans(store.path.parent / "models", prefix=f"{rid}.pt")
    existing = store.find(rid)
    if restart and ckpt_path.exists():
        ckpt_path.unlink()
    if existing is not None and existing.problem is not None and not restart:
        raise ConfigError(f"run {rid} in {store.path}: {existing.problem}; `--restart` runs it anew")
    gate = make_gate(exp)
    store.start(rid, config.model_dump(mode="json"), environment())
    # from here on the run is registered: whatever stops it is stored with it, never left `running`
    try:
        return _registered(exp, cohort, gate, store, rid, ckpt_path, owner, progress, notice, secure_rng,
                           observers)
    except KeyboardInterrupt:
        store.finish(rid, "interrupted", None)
        raise
    except BaseException as err:
        with contextlib.suppress(Exception):
            store.finish(rid, "failed", {"error": f"{type(err).__name__}: {err}"})
        raise


def _registered(exp: Experiment, cohort: Cohort, gate: PrivacyGate | None, store: RunStore, rid: str,
                ckpt_path: Path, owner: str, progress: ProgressFn | None, notice: NoticeFn | None,
                secure_rng: bool, observers: tuple[RoundObserver, ...] = ()) -> RunResult:
    """The rounds of a registered run: resume, loop, final record."""
    config, algo = exp.config, exp.algorithm
    recorder = _StoreRecorder(store, rid, exp, ckpt_path, owner, progress, notice, observers)
    for n in exp.notices:
        recorder.notice(n["kind"], n["message"])
    if isinstance(algo, PrivateAlgorithm):
        for line in algo.not_covered():
            recorder.notice("not-covered", line)

    state = LoopState(exp.init_params.clone())
    saved = load_checkpoint(ckpt_path, run_id=rid, owner=owner, check_owner=True)
    if saved is not None:
        stored = len(store.rounds(rid))
        if stored < int(saved["rounds_done"]):
            raise ConfigError(f"checkpoint {ckpt_path} is at round {saved['rounds_done']} but the store {store.path} "
                              f"holds {stored} rounds of run {rid}: it does not belong to this store; delete it or "
                              "use --restart")
        state = LoopState(saved["global_params"].to(state.params.device), int(saved["rounds_done"]),
                          int(saved.get("empty_rounds", 0)), int(saved.get("consecutive_empty", 0)))
        cohort.load_state_dict(saved.get("algorithm", {}))
        if gate is not None and saved.get("ledger") is not None:
            gate.restore(saved["ledger"])
    store.drop_rounds_after(rid, state.rounds_done - 1)
    for observer in observers:
        _replay(observer, rid, store.rounds(rid))
    if gate is not None and state.rounds_done > 0:  # "noted once" notices stay once across resumes
        kinds = {n["kind"] for n in store.notices(rid)}
        gate.exceeded_noted = "claim-exceeded" in kinds
        gate.order_grid_noted = "claim-order-grid" in kinds
    try:
        outcome = run_rounds(algo, cohort, gate, recorder, state, rounds=config.rounds,
                             num_clients=exp.data.num_clients, seeds=exp.seeds, eval_every=config.eval_every,
                             checkpoint_every=config.checkpoint_every, charge_ahead=cohort.remote or secure_rng)
    except KeyboardInterrupt:
        store.finish(rid, "interrupted", None)
        raise
    finally:
        cohort.close()
        for observer in observers:
            observer.close()
    status, stop_reason, last_eval = outcome.status, outcome.stop_reason, outcome.last_eval
    params, rounds_done = state.params, state.rounds_done
    if not last_eval or stop_reason:
        last_eval = recorder.evaluate(params)
    final: dict[str, Any] = {
        "rounds": rounds_done,
        **last_eval,
        "params_sha256": params_digest(params),
        "num_clients": exp.data.num_clients,
    }
    if cohort.remote and rounds_done > 0 and state.empty_rounds >= rounds_done:
        status = "failed"  # not "finished": the model is the initial one
        stop_reason = stop_reason or f"no upload arrived in any of the {rounds_done} rounds"
    if state.empty_rounds:
        final["empty_rounds"] = state.empty_rounds
    if stop_reason:
        final["stop_reason"] = stop_reason
    if gate is not None:
        final["privacy"] = gate.summary().to_dict()
        noise = noise_record(algo, store.rounds(rid))
        if noise is not None:
            final["noise"] = noise
    model_path = store.path.parent / "models" / f"{rid}.pt"
    save_checkpoint(model_path, {"run_id": rid, "global_params": params.cpu(), "layout": exp.problem.layout,
                                 "algorithm": cohort.state_dict()}, owner=owner)
    final["model_path"] = str(model_path)
    if status == "failed":  # the same command resumes it, with everything already charged
        state.consecutive_empty = 0
        recorder.checkpoint(state, gate.ledger.to_dict() if gate is not None else None, cohort.state_dict())
    elif ckpt_path.exists():
        ckpt_path.unlink()
    store.finish(rid, status, final)
    return RunResult(rid, status, rounds_done, final, store.rounds(rid))


def dry_run(config: RunConfig, notice: NoticeFn | None = None, *, per_round: bool = False,
            experiment: Experiment | Plan | None = None,
            what_if_secure_aggregation: bool = False,
            what_if_uplink_sensitivity: float | None = None) -> DryRunResult:
    """The privacy statement of a run without training it: the same algorithm objects, sampling,
    calibration, privacy gate and ledger as :func:`run_experiment`, on a
    :class:`~dpfl.rounds.cohort.DryCohort` (``dpfl account CONFIG``).

    The result equals the run's own ``final["privacy"]`` whenever the releases do not depend on
    training: every algorithm with fixed settings; CRD (whose headline is its ex-ante budget,
    the same in both); PMIDP-FL with adaptive thresholds (infinite either way); adaptive clipping
    in DP-FedAvg (the clip norm moves, the multiplier does not). An algorithm that ends a run
    early from data (CRD) is dry-run for its planned rounds: the "spent" figure is the plan's.
    A dry run assumes every upload arrives: a deployment whose round loses uploads records what
    its arrivals really released (more, for weights renormalized over fewer clients).

    Args:
        per_round: also return, per round, the certified ε (RDP) per observer after it.
        experiment: a built experiment or a shapes-only :class:`~dpfl.rounds.build.Plan`
            (:func:`~dpfl.rounds.build.build_plan`); by default the config is built (its data
            read for the client sizes), with no engine.
        what_if_secure_aggregation: price the rounds as if an ideal secure sum hid the uploads
            from the server (the algorithms' own ``releases(..., ideal_secure_sum=True)``).
            No command uses it: DP-FedAvg's secure aggregation is real (``privacy.secure_aggregation``,
            priced as runs execute it, also by ``dpfl account dp-fedavg --secure-aggregation``), and
            the other algorithms refuse the setting.
        what_if_uplink_sensitivity: price every Gaussian release the server observes about a
            client (its upload) at this L2 sensitivity instead of the one the code enforces
            (:func:`~dpfl.rounds.gate.with_uplink_sensitivity`, applied by the dry run's gate
            before it checks and records): e.g. 003's uplink at the paper's Δs_U = 2C/m instead
            of the enforced 2C. The cohorts are the config's (drawn from its seed), the noise
            and the public's releases the algorithm's; runs have no such setting. Not combined
            with ``what_if_secure_aggregation`` (the server's release is then the sum's).

    Raises:
        ConfigError: ``privacy.secure_aggregation`` in the config; both what-ifs at once; a
            what-if sensitivity that is not a finite number > 0.
    """
    if what_if_uplink_sensitivity is not None and what_if_secure_aggregation:
        raise ConfigError("`what_if_uplink_sensitivity` prices each upload the server sees; with "
                          "`what_if_secure_aggregation` it sees only their sum: ask one what-if at a time.")
    privacy = config.privacy
    if what_if_secure_aggregation:
        privacy = privacy.model_copy(update={"secure_aggregation": True})
    if experiment is None:
        experiment = build_experiment(config, train=False)
    plan = plan_of(experiment) if isinstance(experiment, Experiment) else experiment
    algo = plan.algorithm
    check_secure_aggregation(config, algo, remote=None, wrapped=False)
    if not isinstance(algo, PrivateAlgorithm):
        return DryRunResult(0, None, None)
    gate: PrivacyGate
    if what_if_uplink_sensitivity is not None:
        gate = WhatIfUplinkGate(algo, plan.num_clients, plan.sizes, privacy, plan.seeds,
                                uplink_sensitivity=what_if_uplink_sensitivity, planned_rounds=config.rounds)
    else:
        gate = PrivacyGate(algo, plan.num_clients, plan.sizes, privacy, plan.seeds, planned_rounds=config.rounds)
    recorder = _NullRecorder(notice)
    for n in plan.notices:
        recorder.notice(n["kind"], n["message"])
    rows: list[dict[str, Any]] = []

    def after_round(t: int, entry: dict[str, Any]) -> None:
        certs = gate.ledger.certify_all("rdp")
        rows.append({"round": t + 1, **{obs: c["epsilon"] for obs, c in certs["observers"].items()}})

    state = LoopState(torch.zeros(plan.num_params))
    outcome = run_rounds(algo, DryCohort(plan.sizes), gate, recorder, state,
                         rounds=config.rounds, num_clients=plan.num_clients, seeds=plan.seeds,
                         per_round=after_round if per_round else None)
    return DryRunResult(state.rounds_done, outcome.stop_reason, gate.summary(), tuple(rows))
