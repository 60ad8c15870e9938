"""Runs a validated config end to end: data → partition → model → engine → rounds → store.

Every completed round is written to the run store; a checkpoint every ``checkpoint_every`` rounds
lets a killed run continue with the same command and end with exactly the model an uninterrupted
run gives (all randomness is keyed by (round, client, purpose), see :mod:`dpfl.rng`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.func import functional_call

from dpfl.algorithms.base import Algorithm, RoundOutput, Uploads
from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.algorithms.registry import BuildContext, build_algorithm, build_sampler
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.client.local import LocalTraining, check_local_optimizer
from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.config import RunConfig, run_id
from dpfl.store import RunStore
from dpfl.models import build_model, per_sample_loss
from dpfl.privacy.accounting.ledger import PrivacyLedger, Release
from dpfl.privacy.notices import collect_range_warnings
from dpfl.rng import SERVER, SeedSequence
from dpfl.sim.base import ClientData, Engine, LocalProblem
from dpfl.sim.checkpoint import clean_orphans, load_checkpoint, save_checkpoint
from dpfl.sim.ray_engine import RayEngine  # imports Ray only when a RayEngine is built
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine

ENGINES: dict[str, type[Engine]] = {"vectorized": VectorizedEngine, "sequential": SequentialEngine, "ray": RayEngine}


@dataclass
class Experiment:
    """Everything a run needs, built from a config (no training yet)."""

    config: RunConfig
    run_id: str
    seeds: SeedSequence
    dataset: Any
    data: ClientData
    problem: LocalProblem
    engine: Engine
    algorithm: Algorithm
    init_params: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    notices: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunResult:
    run_id: str
    status: str
    rounds_done: int
    final: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)


def partition_clients(config: RunConfig, dataset: Any) -> list[np.ndarray]:
    """Client index arrays for the config's partition (deterministic for the run's seed)."""
    from dpfl.data import partition as P

    pc = config.partition
    labels = dataset.y_train.cpu().numpy()
    seed = SeedSequence(config.seed).seed(0, SERVER, "partition") % (2**63)
    n = labels.shape[0]
    if pc.kind == "iid":
        if pc.sizes is not None:
            if len(pc.sizes) != pc.num_clients:
                raise ConfigError(
                    f"`partition.sizes` has {len(pc.sizes)} entries but `partition.num_clients` is {pc.num_clients}."
                )
            return P.partition_iid(n, sizes=list(pc.sizes), seed=seed)
        return P.partition_iid(n, num_clients=pc.num_clients, samples_per_client=pc.samples_per_client, seed=seed)
    if pc.kind == "dirichlet":
        if pc.alpha is None:
            raise ConfigError("`partition.alpha` is required for a Dirichlet partition.")
        return P.partition_dirichlet(labels, num_clients=pc.num_clients, alpha=pc.alpha, seed=seed,
                                     min_samples_per_client=pc.min_size)
    if pc.kind == "classes":
        if pc.classes_per_client is None:
            raise ConfigError("`partition.classes_per_client` is required for a k-classes partition.")
        return P.partition_k_classes(labels, num_clients=pc.num_clients, classes_per_client=pc.classes_per_client,
                                     samples_per_client=pc.samples_per_client, seed=seed)
    if pc.kind == "groups":
        groups = pc.group_sizes or list(P.UNBALANCED_GROUP_SIZES_000)
        return P.partition_size_groups(n, num_clients=pc.num_clients, group_sizes=groups, seed=seed)
    if dataset.groups_train is None:
        raise ConfigError(f"data set {config.data.name!r} has no natural client ids; use another `partition.kind`.")
    parts = P.partition_natural(dataset.groups_train, min_samples=pc.min_size)
    if pc.num_clients > len(parts):
        raise ConfigError(
            f"`partition.num_clients` ({pc.num_clients}) exceeds the {len(parts)} natural clients of {config.data.name!r}."
        )
    return parts[: pc.num_clients]


def check_names(config: RunConfig) -> None:
    """Check what can be checked without the data, so that a typo costs no data loading: the
    data set, model and algorithm names, the model's option names, and the device.

    Raises:
        ConfigError: the first problem found, naming the key, the value and the valid choices.
    """
    from dpfl.algorithms.registry import algorithms
    from dpfl.data import dataset_info
    from dpfl.models.registry import model_options

    dataset_info(config.data.name)
    accepted = model_options(config.model.name)
    unknown = sorted(set(config.model.options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"model {config.model.name!r} does not take option(s) {unknown}. "
            f"Its options are {sorted(accepted) if accepted else 'none'}."
        )
    table = algorithms()
    if config.algorithm.name not in table:
        raise ConfigError(f"unknown algorithm {config.algorithm.name!r}; valid: {sorted(table)}")
    check_device(config.device)


def check_device(name: str) -> torch.device:
    """The torch device ``name`` if this machine has it.

    Raises:
        ConfigError: an unknown device name, or a GPU this machine does not have.
    """
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"`device`: {name!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'.") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"`device`: {name!r} asks for a CUDA GPU but this machine has none; use 'cpu'.")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"`device`: {name!r} asks for GPU {device.index} but this machine has {count} (0..{count - 1}).")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"`device`: {name!r} asks for Apple's MPS backend, which this machine does not have; use 'cpu'.")
    elif device.type != "cpu":
        raise ConfigError(f"`device`: {name!r} is not supported; use 'cpu', 'cuda', 'cuda:N' or 'mps'.")
    return device


def build_experiment(config: RunConfig) -> Experiment:
    from dpfl.data import load_dataset

    check_names(config)
    torch.set_num_threads(config.threads)
    seeds = SeedSequence(config.seed)
    dataset = load_dataset(config.data.name, config.data.dir, verify=config.data.verify)
    parts = partition_clients(config, dataset)
    if config.sampling.kind == "fixed" and (config.sampling.clients_per_round or 0) > len(parts):
        raise ConfigError(
            f"`sampling.clients_per_round` ({config.sampling.clients_per_round}) exceeds the number of clients ({len(parts)})."
        )
    device = check_device(config.device)
    data = ClientData(
        dataset.x_train.to(device),
        dataset.y_train.to(device),
        [torch.as_tensor(p, dtype=torch.long) for p in parts],
    )
    model = build_model(
        config.model.name,
        tuple(dataset.input_shape),
        dataset.num_classes,
        generator=seeds.generator(0, SERVER, "init"),
        **config.model.options,
    ).to(device)
    local = LocalTraining.from_config(config.local)
    problem = LocalProblem(
        model,
        local,
        loss_kind=getattr(model, "loss_kind", "cross_entropy"),
        l2_penalty=float(getattr(model, "l2_penalty", 0.0)),
        penalized_params=tuple(getattr(model, "penalized_params", ())),
    )
    sampler = build_sampler(config.sampling, data.num_clients)
    ctx = BuildContext(config, data.num_clients, data.sizes(), problem.layout.numel)
    with collect_range_warnings() as range_notices:
        algorithm = build_algorithm(config.algorithm, sampler, ctx)
    configure = getattr(algorithm, "configure_local", None)
    if configure is not None:  # e.g. UDP's per-sample clipping, NbAFL's proximal term, BLUR
        problem = configure(problem)
    check_local_optimizer(algorithm, problem.local)
    set_validation = getattr(algorithm, "set_validation", None)
    if set_validation is not None:  # server-held test data, e.g. CRD's stopping rule (000 Alg. 2)
        set_validation(dataset.x_test.to(device), dataset.y_test.to(device))
    engine = ENGINES[config.engine](problem, data, seeds)
    return Experiment(
        config=config,
        run_id=run_id(config),
        seeds=seeds,
        dataset=dataset,
        data=data,
        problem=problem,
        engine=engine,
        algorithm=algorithm,
        init_params=problem.layout.flatten(model).to(device),
        x_test=dataset.x_test.to(device),
        y_test=dataset.y_test.to(device),
        notices=[{"kind": "formula-range", **w.to_dict()} for w in range_notices],
    )


@torch.no_grad()
def evaluate(problem: LocalProblem, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, batch: int = 2000) -> dict[str, float]:
    """Test loss (the data term of the objective) and accuracy of a flat parameter vector."""
    views = problem.layout.views(params)
    total_loss, correct = 0.0, 0
    for start in range(0, x.shape[0], batch):
        out = functional_call(problem.module, views, (x[start : start + batch],))
        yb = y[start : start + batch]
        total_loss += float(per_sample_loss(problem.loss_kind, out, yb).sum())
        if problem.loss_kind == "hinge":
            scores = out.reshape(-1)
            correct += int(((scores > 0).long() == yb).sum())
        else:
            correct += int((out.argmax(-1) == yb).sum())
    n = max(int(x.shape[0]), 1)
    return {"test_loss": total_loss / n, "test_accuracy": correct / n}


def environment() -> dict[str, Any]:
    """Versions and commit recorded with every run."""
    import dpfl

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "dpfl": dpfl.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("dp-accounting", "pydantic", "flwr", "ray", "matplotlib"):
        try:
            env[dist.replace("-", "_")] = version(dist)
        except PackageNotFoundError:
            env[dist.replace("-", "_")] = None
    env["git_commit"] = dpfl_commit()
    return env


def dpfl_commit() -> str | None:
    """The git commit of dpfl's own checkout when dpfl runs from one (an editable install or
    ``PYTHONPATH=src``), else ``None``.

    dpfl's source is ``<checkout>/src/dpfl``; the commit is recorded only when that checkout's
    top level is exactly ``<checkout>`` and it holds dpfl's ``pyproject.toml`` — an installed
    copy inside another project's repository (e.g. its virtual environment) records nothing
    rather than that project's commit. The version is recorded separately (``env["dpfl"]``).
    """
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent.parent
    if package.parent.name != "src" or not (checkout / "pyproject.toml").is_file():
        return None
    try:
        if 'name = "dpfl"' not in (checkout / "pyproject.toml").read_text(encoding="utf-8"):
            return None
        top = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, UnicodeDecodeError, subprocess.SubprocessError):
        return None
    lines = top.stdout.split()
    if top.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != checkout:
        return None
    return lines[1]


def params_digest(params: torch.Tensor) -> str:
    return hashlib.sha256(params.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


ProgressFn = Callable[[int, int, dict[str, Any], float], None]
NoticeFn = Callable[[str], None]
EmitFn = Callable[[str, str, "int | None"], None]
RemoteCohort = Callable[[torch.Tensor, RoundInfo, Algorithm, EmitFn], Uploads]
"""Trains a round's cohort somewhere else (e.g. on Flower SuperNodes) and returns the valid
uploads that arrived: (global params, round info, algorithm, emit(kind, message, round)) → rows."""


class ServerStep(Protocol):
    """What ``run_experiment(..., wrap=)`` returns: the server step the loop calls and its
    checkpoint state (every :class:`Algorithm` is one)."""

    def server_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> RoundOutput: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _make_ledger(exp: Experiment) -> PrivacyLedger | None:
    algo = exp.algorithm
    if not isinstance(algo, PrivateAlgorithm):
        return None
    pc = exp.config.privacy
    return PrivacyLedger(
        num_clients=exp.data.num_clients,
        sampler=algo.sampler,
        delta=pc.delta,
        relation=algo.relation,
        privacy_unit=algo.privacy_unit,
        pld_every=pc.pld_every,
    )


def _make_budget(exp: Experiment) -> PrivacyLedger | None:
    """The ex-ante budget of an algorithm whose noise or length is chosen from data (its Rényi
    filter, :meth:`PrivateAlgorithm.privacy_filter_plan`), else None."""
    algo = exp.algorithm
    if not isinstance(algo, PrivateAlgorithm):
        return None
    plan = algo.privacy_filter_plan(exp.data.num_clients, exp.seeds)
    if plan is None:
        return None
    # the plan names its participants itself (it does not depend on the cohorts drawn)
    budget = PrivacyLedger(num_clients=exp.data.num_clients, sampler={"kind": "all"},
                           delta=exp.config.privacy.delta, relation=algo.relation,
                           privacy_unit=algo.privacy_unit, pld_every=0)
    for i, (planned, parts) in enumerate(plan):
        budget.record_round(i, planned, sampling={"kind": "all"}, participants=parts, certify_round=False)
    return budget


@dataclass
class _Gate:
    """What the privacy gate of a round decided (before any training)."""

    releases: list[Any]
    claimed_after: float | dict[int, float] | None
    stop_reason: str | None
    exceeded_noted: bool


def _privacy_gate(algo: PrivateAlgorithm, ledger: PrivacyLedger, budget: PrivacyLedger | None, info: RoundInfo,
                  exp: Experiment, emit: EmitFn, exceeded_noted: bool) -> _Gate:
    """The round's releases and claim, and whether the run must stop before it: the target ε, the
    Rényi filter's budget, and (strict mode) the paper's claim. Shared by runs and dry runs."""
    config = exp.config
    t = info.round_idx
    clients = info.clients.tolist()
    with collect_range_warnings() as range_notices:
        releases = algo.releases(info, exp.data.sizes(clients), config.privacy.secure_aggregation)
        claimed_after = algo.claimed_epsilon(t + 1)
    for w in range_notices:
        emit("formula-range", str(w), t)
    target = config.privacy.target_epsilon
    if target is not None and ledger.would_exceed(releases, target, participants=clients):
        reason = (f"stopped before round {t + 1}: it would take the certified epsilon above "
                  f"privacy.target_epsilon = {target:g}")
        emit("target-epsilon", reason, t)
        return _Gate(releases, claimed_after, reason, exceeded_noted)
    if budget is not None and not ledger.within_budget(budget, releases, participants=clients):
        reason = (f"stopped before round {t + 1}: it would take a client's RDP above the "
                  "budget fixed before the run at some order (Renyi filter)")
        emit("privacy-filter", reason, t)
        return _Gate(releases, claimed_after, reason, exceeded_noted)
    # once noted (and not strict) the comparison with the claim has nothing left to decide
    check_claim = algo.claim_comparable and (config.privacy.strict or not exceeded_noted)
    claim = _claim_value(claimed_after) if check_claim else None
    if claim is not None and ledger.would_exceed(releases, claim, participants=clients):
        msg = (f"round {t + 1}: the certified epsilon exceeds the paper's claimed epsilon "
               f"{claim:.4g} ({algo.claim_notion()})")
        if config.privacy.strict:
            raise PrivacyPreconditionError(msg + "; refusing to run it (privacy.strict).")
        if not exceeded_noted:
            emit("claim-exceeded", msg + "; continuing (set privacy.strict to refuse).", t)
            exceeded_noted = True
    return _Gate(releases, claimed_after, None, exceeded_noted)


def _arrivals_exceed(ledger: PrivacyLedger, budget: PrivacyLedger | None, releases: list[Any],
                     arrived: list[int], config: RunConfig, t: int) -> str | None:
    """Why the aggregate of a round's arrivals must not be broadcast (None: it may be): the
    releases of the arrivals would exceed the Rényi filter's budget or the target ε, which the
    gate checked only for the planned cohort."""
    if budget is not None and not ledger.within_budget(budget, releases, participants=arrived):
        return (f"stopped in round {t + 1}: with {len(arrived)} arrivals its broadcast would take a client's RDP "
                "above the budget fixed before the run (Renyi filter); the aggregate was not broadcast")
    target = config.privacy.target_epsilon
    if target is not None and ledger.would_exceed(releases, target, participants=arrived):
        return (f"stopped in round {t + 1}: with {len(arrived)} arrivals its broadcast would take the certified "
                f"epsilon above privacy.target_epsilon = {target:g}; the aggregate was not broadcast")
    return None


def privacy_result(algo: PrivateAlgorithm, ledger: PrivacyLedger, budget: PrivacyLedger | None,
                   config: RunConfig) -> dict[str, Any]:
    """The privacy part of a run's result: claimed ε, certified ε per observer, and (adaptive
    algorithms) what was spent next to the ex-ante guarantee."""
    certs = ledger.certify_all("best") if ledger.rounds_recorded else None
    spent = None
    if budget is not None:
        # adaptively chosen noise: the guarantee is the budget the filter enforced (RDP only: the
        # filter holds order by order); what happened is shown as spent, not as a guarantee
        spent, certs = certs, budget.certify_all("rdp")
    out: dict[str, Any] = {
        "claimed_epsilon": ledger.claimed_epsilon,
        "claim_notion": algo.claim_notion(),
        "certified": certs,
        "delta": config.privacy.delta,
        "not_covered": algo.not_covered(),
        "claim_comparable": algo.claim_comparable,
    }
    if spent is not None:
        out["spent"] = spent
        out["certified_basis"] = (
            "ex-ante budget of a Renyi filter (Feldman & Zrnic 2021): the run's noise and length were "
            "chosen from data; 'spent' composes the releases that happened and is not a guarantee")
    if ledger.rounds_recorded and ledger.num_clients <= 5000:
        # per client, the guarantee: the budget under a filter (what was spent next to it)
        guarantee = budget if budget is not None else ledger
        out["client_epsilons_rdp"] = {
            obs: {str(c): e for c, e in guarantee.client_epsilons(obs, "rdp").items()} for obs in ("server", "public")
        }
        if budget is not None:
            out["client_epsilons_rdp_spent"] = {
                obs: {str(c): e for c, e in ledger.client_epsilons(obs, "rdp").items()} for obs in ("server", "public")
            }
    return out


def dry_run(config: RunConfig, notice: NoticeFn | None = None) -> dict[str, Any]:
    """The privacy statement of a run without training it: the same algorithm objects, sampling,
    calibration, privacy gate and ledger as :func:`run_experiment`, with no local training and no
    aggregation (``dpfl account CONFIG``).

    The result equals the run's own ``final["privacy"]`` whenever the releases do not depend on
    training: every algorithm with fixed settings; CRD (whose headline is its ex-ante budget,
    the same in both); PMIDP-FL with adaptive thresholds (infinite either way); adaptive clipping
    in DP-FedAvg (the clip norm moves, the multiplier does not). An algorithm that ends a run
    early from data (CRD) is dry-run for its planned rounds: the "spent" figure is the plan's.
    A dry run assumes every upload arrives: a deployment whose round loses uploads records what
    its arrivals really released (more, for weights renormalized over fewer clients).

    Returns:
        ``{"rounds": rounds planned, "stop_reason": ..., "privacy": {...}}`` (``privacy`` is None
        for a non-private algorithm).
    """
    if config.privacy.secure_aggregation:
        raise ConfigError(
            "`privacy.secure_aggregation: true` is not available for runs: no dpfl runtime implements "
            "secure aggregation yet; `dpfl account ALGORITHM ... --secure-aggregation` gives the what-if.")
    exp = build_experiment(config)
    algo = exp.algorithm
    ledger = _make_ledger(exp)
    if ledger is None or not isinstance(algo, PrivateAlgorithm):
        return {"rounds": 0, "stop_reason": None, "privacy": None}
    budget = _make_budget(exp)

    def emit(kind: str, message: str, round_idx: int | None = None) -> None:
        if notice is not None:
            notice(f"{kind}: {message}")

    stop_reason, rounds = None, 0
    exceeded_noted = False
    for t in range(config.rounds):
        reason = algo.should_stop(t)
        if reason:
            stop_reason = reason
            break
        clients = algo.sample(t, exp.data.num_clients, exp.seeds)
        info = RoundInfo(t, exp.data.num_clients, clients, exp.seeds)
        gate = _privacy_gate(algo, ledger, budget, info, exp, emit, exceeded_noted)
        exceeded_noted = gate.exceeded_noted
        if gate.stop_reason is not None:
            stop_reason = gate.stop_reason
            break
        ledger.record_round(t, gate.releases, sampling=algo.sampler.describe(), participants=clients.tolist(),
                            claimed_epsilon=gate.claimed_after, certify_round=False)
        rounds = t + 1
    return {"rounds": rounds, "stop_reason": stop_reason, "privacy": privacy_result(algo, ledger, budget, config)}


MAX_CONSECUTIVE_EMPTY_ROUNDS = 3
"""On real clients, a run stops (status ``failed``) after this many rounds in a row in which no
upload arrived; a run in which every round was empty is ``failed`` too, never ``finished``."""


def checkpoint_path(store: RunStore, rid: str, checkpoint_dir: str | Path | None = None) -> Path:
    """Where the checkpoint of run ``rid`` in ``store`` lives: ``<dir>/<rid>@<store file name>.pt``
    with ``<dir>`` = ``checkpoint_dir`` or ``checkpoints/`` next to the store, so that runs of the
    same config in two stores of one folder never resume from each other's checkpoint."""
    folder = Path(checkpoint_dir) if checkpoint_dir is not None else store.path.parent / "checkpoints"
    return folder / f"{rid}@{store.path.name}.pt"


def _server_charges(planned: list[Release], clients: list[int]) -> list[Release]:
    """The server-observer releases of ``clients``' uploads as planned for their round: what the
    server saw of an upload it received but did not aggregate (rejected, late)."""
    want = set(clients)
    out = []
    for rel in planned:
        ids = sorted(want if rel.client_ids is None else want.intersection(rel.client_ids))
        if ids:
            out.append(Release(rel.observer, rel.kind, rel.noise_std, rel.sensitivity, tuple(ids), rel.epsilon,
                               rel.num_coordinates))
    return out


def _claim_value(claimed: float | dict[int, float] | None) -> float | None:
    if isinstance(claimed, dict):
        return max(claimed.values()) if claimed else None
    return claimed


def _entry_metrics(metrics: dict[str, Any], entry: dict[str, Any], claimed: Any) -> None:
    metrics["epsilon_claimed"] = _claim_value(claimed)
    rdp = entry["certified_rdp"]
    metrics["epsilon_certified_rdp"] = {k: float(v) for k, v in rdp.items()}
    metrics["epsilon_certified"] = max(float(v) for v in rdp.values())
    if "certified" in entry:
        metrics["certified"] = entry["certified"]


def run_experiment(
    config: RunConfig,
    store: RunStore,
    *,
    checkpoint_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    notice: NoticeFn | None = None,
    restart: bool = False,
    remote: RemoteCohort | None = None,
    secure_rng: bool = False,
    wrap: Callable[[Experiment], ServerStep] | None = None,
) -> RunResult:
    """Run (or resume, or return the stored result of) the run a config defines.

    Private algorithms get a privacy ledger: each round's releases are declared after the cohort
    is drawn and before training; the run stops before a round that would take the certified ε
    above ``privacy.target_epsilon``, and in ``privacy.strict`` mode refuses a round whose
    certified ε would exceed the paper's claimed ε. Notices (a formula used outside its proven
    range, a certified ε above the claimed one) are stored with the run and passed to ``notice``.

    With ``remote`` (the Flower adapter), clients train and run the algorithm's client step
    elsewhere; the server aggregates the uploads that arrived and the ledger records what the
    round really released for them (:meth:`PrivateAlgorithm.releases_for_arrivals`).

    ``secure_rng`` seeds every server-side draw (cohort sample, server noise) from the OS CSPRNG
    instead of the config's seed: what a deployment needs, since anyone who knows the seed can
    recompute the noise. Runs are then not reproducible.

    ``wrap(exp)`` (simulation only) returns the algorithm whose ``server_step`` the loop calls
    instead of ``exp.algorithm``'s, e.g. :class:`dpfl.audit.canary.CanaryAlgorithm` adding canary
    clients. Sampling, ``releases``, the claimed ε, ``should_stop`` and the ledger stay the inner
    algorithm's; checkpoints and the final model file hold the wrapper's ``state_dict`` (which
    must include the inner one), so a resumed wrapped run continues exactly.
    """
    if config.privacy.secure_aggregation:
        raise ConfigError(
            "`privacy.secure_aggregation: true` is not available for runs: no dpfl runtime implements "
            "secure aggregation yet, so every client's upload reaches the server in the clear and a "
            "certificate that lets the server see only the sum would be false. Remove the setting; "
            "`dpfl account ... --secure-aggregation` gives the what-if figure.")
    exp = build_experiment(config)
    if remote is not None and not exp.algorithm.splits_rounds:
        raise ConfigError(
            f"algorithm {config.algorithm.name!r} does not split its round into a client step and a "
            "server step yet, so it cannot run on real clients; run it in simulation.")
    if remote is not None and wrap is not None:
        raise ConfigError("a wrapped server step (e.g. audit canaries) runs in simulation only, not on real clients.")
    wrapper = wrap(exp) if wrap is not None else None
    stepper: ServerStep = wrapper if wrapper is not None else exp.algorithm
    # a run on real clients, or with a wrapped server step, is another run than the simulation
    # of the same config: its id carries the cohort's or the wrapper's tag
    rid = exp.run_id
    for part, default in ((remote, "remote"), (wrapper, "wrapped")):
        if part is not None:
            rid += f"-{getattr(part, 'tag', default)}"
    if secure_rng:
        rid += "-secure"
        exp.seeds = SeedSequence.secure_mode()
        exp.engine.seeds = exp.seeds
    ckpt_path = checkpoint_path(store, rid, checkpoint_dir)
    owner = store.path.name
    clean_orphans(ckpt_path.parent, prefix=ckpt_path.name)  # left by a writer killed mid-write
    clean_orphans(store.path.parent / "models", prefix=f"{rid}.pt")
    existing = store.find(rid)
    if existing is not None and existing.problem is None and existing.status in ("finished", "stopped") and not restart:
        return RunResult(rid, existing.status, len(store.rounds(rid)), existing.result or {}, store.rounds(rid))
    if restart and ckpt_path.exists():
        ckpt_path.unlink()
    if existing is not None and existing.problem is not None and not restart:
        raise ConfigError(f"run {rid} in {store.path}: {existing.problem}; `--restart` runs it anew")
    ledger = _make_ledger(exp)
    store.start(rid, config.model_dump(mode="json"), environment())
    # from here on the run is registered: whatever stops it is stored with it, never left `running`
    try:
        return _run_rounds(config, store, exp, rid, stepper, ckpt_path, ledger,
                           progress=progress, notice=notice, remote=remote, owner=owner, secure_rng=secure_rng)
    except KeyboardInterrupt:
        store.finish(rid, "interrupted", None)
        raise
    except BaseException as err:
        with contextlib.suppress(Exception):
            store.finish(rid, "failed", {"error": f"{type(err).__name__}: {err}"})
        raise


def _run_rounds(
    config: RunConfig,
    store: RunStore,
    exp: Experiment,
    rid: str,
    stepper: ServerStep,
    ckpt_path: Path,
    ledger: PrivacyLedger | None,
    *,
    progress: ProgressFn | None,
    notice: NoticeFn | None,
    remote: RemoteCohort | None,
    owner: str,
    secure_rng: bool,
) -> RunResult:
    """The rounds of a registered run (see :func:`run_experiment`)."""

    def emit(kind: str, message: str, round_idx: int | None = None) -> None:
        store.add_notice(rid, round_idx, kind, message)
        if notice is not None:
            notice(message)

    for n in exp.notices:
        emit(n["kind"], n["message"])
    algo = exp.algorithm
    budget = _make_budget(exp)  # a Rényi filter's ex-ante budget (adaptive algorithms), else None
    if isinstance(algo, PrivateAlgorithm):
        for line in algo.not_covered():
            emit("not-covered", line)

    params = exp.init_params.clone()
    start_round = 0
    state = load_checkpoint(ckpt_path, run_id=rid, owner=owner, check_owner=True)
    if state is not None:
        stored = len(store.rounds(rid))
        if stored < int(state["rounds_done"]):
            raise ConfigError(f"checkpoint {ckpt_path} is at round {state['rounds_done']} but the store {store.path} "
                              f"holds {stored} rounds of run {rid}: it does not belong to this store; delete it or "
                              "use --restart")
        params = state["global_params"].to(params.device)
        stepper.load_state_dict(state.get("algorithm", {}))
        if ledger is not None and state.get("ledger") is not None:
            ledger = PrivacyLedger.from_dict(state["ledger"], sampler=algo.sampler)  # type: ignore[attr-defined]
        start_round = int(state["rounds_done"])
    store.drop_rounds_after(rid, start_round - 1)

    t_start = time.perf_counter()
    last_eval: dict[str, float] = {}
    status, stop_reason, rounds_done = "finished", None, start_round
    # "noted once" notices stay once across resumes
    stored_notices: list[dict[str, Any]] = store.notices(rid) if start_round > 0 else []
    exceeded_noted = any(n["kind"] == "claim-exceeded" for n in stored_notices)
    # Releases whose noise a redo would draw afresh (real clients, or the OS CSPRNG) are charged
    # before the round's aggregate is used: a checkpoint holding the charge is written while the
    # cohort trains, so a server killed mid-round resumes with the round already charged.
    charge_ahead = remote is not None or secure_rng
    planned_server: dict[int, list[Release]] = {}  # per round: what an upload shows the server
    empty_rounds = consecutive_empty = 0
    if state is not None:
        empty_rounds = int(state.get("empty_rounds", 0))
        consecutive_empty = int(state.get("consecutive_empty", 0))

    def checkpoint(done: int, ledger_state: dict[str, Any] | None, algo_state: dict[str, Any]) -> None:
        save_checkpoint(ckpt_path, {"run_id": rid, "rounds_done": done, "global_params": params.cpu(),
                                    "algorithm": algo_state, "ledger": ledger_state, "empty_rounds": empty_rounds,
                                    "consecutive_empty": consecutive_empty}, owner=owner)

    def charge_unused(final: bool = False) -> int:
        """Charge the server observer for uploads it received but did not aggregate."""
        seen = getattr(remote, "unused_uploads", None)
        if ledger is None or seen is None:
            return 0
        assert isinstance(algo, PrivateAlgorithm)
        by_round: dict[int, list[int]] = {}
        for r, c in seen(final=final, emit=emit):
            by_round.setdefault(int(r), []).append(int(c))
        charged = 0
        for r, clients_seen in sorted(by_round.items()):
            extra = _server_charges(planned_server.get(r, []), clients_seen)
            if extra:
                ledger.record_round(r, extra, sampling=algo.sampler.describe(), participants=sorted(set(clients_seen)))
                charged += len(set(clients_seen))
        return charged

    try:
        for t in range(start_round, config.rounds):
            t0 = time.perf_counter()
            round_start_state = stepper.state_dict() if charge_ahead else {}
            reason = algo.should_stop(t)
            if reason:
                stop_reason = reason
                emit("early-end", reason, t)
                break
            clients = algo.sample(t, exp.data.num_clients, exp.seeds)
            info = RoundInfo(t, exp.data.num_clients, clients, exp.seeds)
            metrics: dict[str, Any] = {"clients": int(clients.numel())}
            releases = claimed_after = None
            if ledger is not None:
                assert isinstance(algo, PrivateAlgorithm)
                gate = _privacy_gate(algo, ledger, budget, info, exp, emit, exceeded_noted)
                releases, claimed_after, exceeded_noted = gate.releases, gate.claimed_after, gate.exceeded_noted
                if gate.stop_reason is not None:
                    status, stop_reason = "stopped", gate.stop_reason
                    break
            participants = clients
            if clients.numel() > 0 and remote is None:
                local = exp.engine.train(params, clients.tolist(), t)
                metrics["train_loss"] = float(local.train_loss.mean())
                out = stepper.server_step(params, local, info)
                params = out.global_params
                metrics.update(out.metrics)
            elif clients.numel() > 0:
                if releases is not None:
                    planned_server[t] = [r for r in releases if r.observer == "server"]
                    if charge_ahead and ledger is not None:
                        # every upload of this cohort, and every one still outstanding, may reach
                        # the server from now on: a checkpoint that charges them all
                        ahead = ledger.to_dict()
                        still_out: Callable[[], list[tuple[int, int]]] = getattr(remote, "outstanding", list)
                        late = [(t, int(c)) for c in clients.tolist()] + still_out()
                        for r in sorted({r for r, _ in late}):
                            who = sorted({c for q, c in late if q == r})
                            ahead["rounds"].append({"round": r, "participants": who, "claimed_epsilon": None, "releases": [
                                x.to_dict() for x in _server_charges(planned_server.get(r, []), who)]})
                        checkpoint(t, ahead, round_start_state)
                uploads = remote(params, info, algo, emit)
                participants = uploads.clients
                if uploads.num_rows:
                    metrics["train_loss"] = float(uploads.train_loss.mean())
                metrics["arrived"] = uploads.num_rows
                if releases is not None and uploads.num_rows < clients.numel():
                    assert isinstance(algo, PrivateAlgorithm) and ledger is not None
                    releases = (algo.releases_for_arrivals(info, uploads.clients, uploads.num_samples,
                                                           config.privacy.secure_aggregation)
                                if uploads.num_rows else [])
                    withheld = (_arrivals_exceed(ledger, budget, releases, uploads.clients.tolist(), config, t)
                                if uploads.num_rows else None)
                    if withheld is not None:
                        # fewer arrivals can release more than planned (larger weights): the
                        # uploads reached the server and are charged; the aggregate is withheld
                        ledger.record_round(t, [r for r in releases if r.observer == "server"],
                                            sampling=algo.sampler.describe(), participants=participants.tolist(),
                                            claimed_epsilon=claimed_after)
                        status, stop_reason = "stopped", withheld
                        emit("privacy-filter" if budget is not None else "target-epsilon", withheld, t)
                        break
                if ledger is not None and releases is not None and charge_ahead:
                    # charged before the aggregate is used (a redo is charged as the release it is)
                    assert isinstance(algo, PrivateAlgorithm)
                    entry = ledger.record_round(t, releases, sampling=algo.sampler.describe(),
                                                participants=participants.tolist(), claimed_epsilon=claimed_after)
                    releases = None
                    metrics["charged_unaggregated"] = charge_unused()
                    checkpoint(t, ledger.to_dict(), round_start_state)
                    _entry_metrics(metrics, entry, claimed_after)
                if uploads.num_rows:
                    consecutive_empty = 0
                    out = algo.aggregate(params, uploads, info)
                    params = out.global_params
                    metrics.update(out.metrics)
                else:  # nothing to aggregate: nothing is released, the model stays as it was
                    empty_rounds += 1
                    consecutive_empty += 1
                    metrics["empty"] = True
                    emit("round-empty", f"round {t + 1}: no upload of the {int(clients.numel())} scheduled clients "
                         "arrived; the round is skipped (global model unchanged, nothing released)", t)
            elif algo.releases_empty_rounds:  # an empty cohort: the round's noise is still released
                out = algo.aggregate(params, Uploads.empty(int(params.numel()), params.device), info)
                params = out.global_params
                metrics.update(out.metrics)
            if ledger is not None and releases is not None:
                assert isinstance(algo, PrivateAlgorithm)
                entry = ledger.record_round(t, releases, sampling=algo.sampler.describe(),
                                            participants=participants.tolist(), claimed_epsilon=claimed_after)
                _entry_metrics(metrics, entry, claimed_after)
            if (t + 1) % config.eval_every == 0 or t + 1 == config.rounds:
                last_eval = evaluate(exp.problem, params, exp.x_test, exp.y_test)
                metrics.update(last_eval)
            metrics["seconds"] = time.perf_counter() - t0
            # an infinite certified epsilon (an un-noised release) is a true statement, not divergence
            if not all(math.isfinite(v) for k, v in metrics.items()
                       if isinstance(v, float) and not k.startswith("epsilon")):
                metrics["non_finite"] = True
            store.log_round(rid, t, metrics)
            rounds_done = t + 1
            if consecutive_empty >= MAX_CONSECUTIVE_EMPTY_ROUNDS:
                status = "failed"
                stop_reason = (f"stopped after round {t + 1}: no upload arrived in {consecutive_empty} rounds in a "
                               "row (check the round timeout and the SuperNodes' logs)")
                emit("empty-rounds", stop_reason, t)
                break
            if t + 1 < config.rounds and (charge_ahead or (t + 1) % config.checkpoint_every == 0):
                checkpoint(t + 1, ledger.to_dict() if ledger is not None else None, stepper.state_dict())
            if progress is not None:
                progress(t + 1, config.rounds, metrics, time.perf_counter() - t_start)
        if remote is not None and ledger is not None:
            charge_unused(final=True)  # late uploads of the last rounds
    except KeyboardInterrupt:
        store.finish(rid, "interrupted", None)
        raise
    finally:
        close = getattr(exp.engine, "close", None)  # e.g. the Ray engine's actors
        if close is not None:
            close()
    if not last_eval or stop_reason:
        last_eval = evaluate(exp.problem, params, exp.x_test, exp.y_test)
    final: dict[str, Any] = {
        "rounds": rounds_done,
        **last_eval,
        "params_sha256": params_digest(params),
        "num_clients": exp.data.num_clients,
    }
    if remote is not None and rounds_done > 0 and empty_rounds >= rounds_done:
        status = "failed"  # not "finished": the model is the initial one
        stop_reason = stop_reason or f"no upload arrived in any of the {rounds_done} rounds"
    if empty_rounds:
        final["empty_rounds"] = empty_rounds
    if stop_reason:
        final["stop_reason"] = stop_reason
    if ledger is not None:
        assert isinstance(algo, PrivateAlgorithm)
        final["privacy"] = privacy_result(algo, ledger, budget, config)
    model_path = store.path.parent / "models" / f"{rid}.pt"
    save_checkpoint(model_path, {"run_id": rid, "global_params": params.cpu(), "layout": exp.problem.layout,
                                 "algorithm": stepper.state_dict()}, owner=owner)
    final["model_path"] = str(model_path)
    if status == "failed":  # the same command resumes it, with everything already charged
        consecutive_empty = 0
        checkpoint(rounds_done, ledger.to_dict() if ledger is not None else None, stepper.state_dict())
    elif ckpt_path.exists():
        ckpt_path.unlink()
    store.finish(rid, status, final)
    return RunResult(rid, status, rounds_done, final, store.rounds(rid))
