"""Building a run: data → partition → model → sampler → algorithm → engine (no training yet).

Also what every run records about itself (:func:`environment`) and how a model is evaluated.
Imports the layers below it only (``algorithms``, ``sim``, ``data``, ``models``, ``config``);
never ``experiments``, ``runtime`` or ``commands``.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.func import functional_call

from dpfl.algorithms.base import Algorithm
from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.algorithms.registry import BuildContext, build_algorithm, build_sampler
from dpfl.client.local import LocalTraining, check_local_optimizer
from dpfl.client.user_loss import adapt_loss, check_loss_per_sample_grads
from dpfl.config import RunConfig, run_id
from dpfl.errors import ConfigError
from dpfl.models import build_model, per_sample_loss
from dpfl.privacy.notices import collect_range_warnings
from dpfl.rng import SERVER, SeedSequence
from dpfl.sim.base import ClientData, Engine, LocalProblem
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
    engine: Engine | None
    algorithm: Algorithm
    init_params: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    notices: list[dict[str, Any]] = field(default_factory=list)


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
            f"`partition.num_clients` ({pc.num_clients}) exceeds the {len(parts)} natural clients of "
            f"{config.data.name!r}."
        )
    return parts[: pc.num_clients]


def check_names(config: RunConfig) -> None:
    """Check what can be checked without the data, so that a typo costs no data loading: the
    data set, model and algorithm names, the model's option names, and the device (on this
    machine, and not with the Ray engine, whose actors train on the CPU).

    Raises:
        ConfigError: the first problem found, naming the key, the value and the valid choices.
    """
    from dpfl.algorithms.registry import algorithms
    from dpfl.data import dataset_info
    from dpfl.models.registry import model_options

    if is_reference(config.data.name):
        resolve_reference(config.data.name, "data.name")
    else:
        dataset_info(config.data.name)
    if is_reference(config.model.name):
        resolve_reference(config.model.name, "model.name")
        accepted: Any = list(config.model.options)  # the user's factory checks its own options
    else:
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
    if check_device(config.device).type != "cpu" and config.engine == "ray":
        raise ConfigError(f"engine 'ray' trains on CPU actors; `device` must be 'cpu'. Found {config.device!r}.")


def check_device(name: str) -> torch.device:
    """The torch device ``name`` if this machine has it: where a run's engine trains (the one
    place a config's ``device`` becomes a ``torch.device``; :func:`assemble` places the model and
    the data on it, and the engines place what they create beside them).

    Raises:
        ConfigError: an unknown device name, or a GPU this machine does not have.
    """
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"`device`: {name!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'.") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"`device`: {name!r} asks for a CUDA GPU but this machine has none; use 'cpu'.")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"`device`: {name!r} asks for GPU {device.index} but this machine has {count} "
                              f"(0..{count - 1}).")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"`device`: {name!r} asks for Apple's MPS backend, which this machine does not have; "
                              "use 'cpu'.")
    elif device.type != "cpu":
        raise ConfigError(f"`device`: {name!r} is not supported; use 'cpu', 'cuda', 'cuda:N' or 'mps'.")
    return device


def is_reference(name: str) -> bool:
    """Whether a data set or model name is a ``module:attribute`` reference to user code."""
    return ":" in name


def resolve_reference(name: str, key: str) -> Any:
    """The object a ``module:attribute`` reference names (``key``: the config key, for errors).

    Raises:
        ConfigError: the module cannot be imported or has no such attribute.
    """
    import importlib

    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"`{key}`: {name!r} is not a `module:attribute` reference (e.g. 'mypkg.models:make_net').")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):  # the user's module itself
            raise ConfigError(
                f"`{key}`: cannot import module {module_name!r} of {name!r}: no module {missing!r} on Python's "
                f"module search path (sys.path: PYTHONPATH and the installed packages; `dpfl` does not add the "
                f"working directory). If it is a file or folder here, run with PYTHONPATH=. (e.g. `PYTHONPATH=. "
                f"dpfl run CONFIG`), or install it.") from None
        raise ConfigError(f"`{key}`: module {module_name!r} of {name!r} was found but importing it failed: "
                          f"{err}") from None
    except ImportError as err:
        raise ConfigError(f"`{key}`: cannot import module {module_name!r} of {name!r}: {err}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"`{key}`: module {module_name!r} has no attribute {attr!r}.")
        obj = getattr(obj, part)
    return obj


def load_config_dataset(config: RunConfig) -> Any:
    """The data set a config names: a built-in (:func:`dpfl.data.load_dataset`) or a user
    ``module:function`` called with the data directory, returning a
    :class:`~dpfl.data.registry.FederatedDataset` (or anything with ``x_train``, ``y_train``,
    ``x_test``, ``y_test``, ``num_classes``, ``input_shape``)."""
    if is_reference(config.data.name):
        loader = resolve_reference(config.data.name, "data.name")
        dataset = loader(config.data.dir)
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test", "num_classes", "input_shape")
                   if not hasattr(dataset, k)]
        if missing:
            raise ConfigError(f"`data.name`: {config.data.name!r} returned a {type(dataset).__name__} without "
                              f"{missing}; return a dpfl.data.FederatedDataset.")
        if not hasattr(dataset, "groups_train"):
            dataset.groups_train = None
        return dataset
    from dpfl.data import load_dataset

    return load_dataset(config.data.name, config.data.dir, verify=config.data.verify)


def run_seeds(config: RunConfig) -> SeedSequence:
    """The run's seed sequence: every stream from ``seed``; with ``privacy.noise_generator: csprng``
    the noise streams (noise, sampling coins, shuffles) from fresh ChaCha20 keys instead
    (:meth:`dpfl.rng.SeedSequence.noise_generator`)."""
    return SeedSequence(config.seed, noise="chacha20" if config.privacy.noise_generator == "csprng" else "torch")


def build_config_model(config: RunConfig, dataset: Any, seeds: SeedSequence) -> torch.nn.Module:
    """The model a config names: a built-in (:func:`dpfl.models.build_model`, initialized from
    the run's seed) or a user ``module:function`` called as ``f(input_shape, num_classes,
    **options)`` under ``torch.manual_seed`` of the run's init stream."""
    if is_reference(config.model.name):
        factory = resolve_reference(config.model.name, "model.name")
        init_seed = int(seeds.seed(0, SERVER, "init") % (2**63))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            model = factory(tuple(dataset.input_shape), int(dataset.num_classes), **config.model.options)
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(f"`model.name`: {config.model.name!r} returned a {type(model).__name__}, "
                              "not a torch.nn.Module.")
        return model
    return build_model(
        config.model.name,
        tuple(dataset.input_shape),
        dataset.num_classes,
        generator=seeds.generator(0, SERVER, "init"),
        **config.model.options,
    )


def build_experiment(config: RunConfig, *, train: bool = True) -> Experiment:
    """Build the run ``config`` defines: data, partition, model, sampler, algorithm and engine.

    ``train=False`` (a dry run) builds no engine: the algorithm, its sampler and the public
    client sizes are all a dry run needs.
    """
    check_names(config)
    torch.set_num_threads(config.threads)
    seeds = SeedSequence(config.seed)
    dataset = load_config_dataset(config)
    parts = partition_clients(config, dataset)
    model = build_config_model(config, dataset, seeds)
    return assemble(config, dataset, parts, model, train=train)


def assemble(config: RunConfig, dataset: Any, parts: Sequence[Any], model: torch.nn.Module, *,
             train: bool = True, rid: str | None = None, loss: Any = None) -> Experiment:
    """An experiment from a data set, its client index arrays and a model (what
    :func:`build_experiment` reads from the config; the Python API passes a user's own).

    Raises:
        ConfigError: more sampled clients than exist, or a model whose output does not match the
            data set's classes.
    """
    torch.set_num_threads(config.threads)
    seeds = run_seeds(config)
    if config.sampling.kind == "fixed" and (config.sampling.clients_per_round or 0) > len(parts):
        raise ConfigError(
            f"`sampling.clients_per_round` ({config.sampling.clients_per_round}) exceeds the number of clients "
            f"({len(parts)})."
        )
    device = check_device(config.device)
    check_data(dataset, parts)
    data = ClientData(
        dataset.x_train.to(device),
        dataset.y_train.to(device),
        [torch.as_tensor(p, dtype=torch.long) for p in parts],
    )
    model = model.to(device)
    check_model_output(model, dataset, config.model.name)
    probe = None
    if loss is not None:  # a user loss: probed once on the model's outputs for a few samples
        with torch.no_grad():
            probe = (model(dataset.x_train[:4].to(device)), dataset.y_train[:4].to(device))
        loss = adapt_loss(loss, *probe)
    output_notices = model_output_notices(model, dataset, loss if loss is not None
                                          else getattr(model, "loss_kind", "cross_entropy"), config.model.name)
    local = LocalTraining.from_config(config.local)
    problem = LocalProblem(
        model,
        local,
        loss_kind=loss if loss is not None else getattr(model, "loss_kind", "cross_entropy"),
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
    if probe is not None and problem.local.per_sample_clip is not None:
        check_loss_per_sample_grads(problem.loss_kind, *probe)
    set_validation = getattr(algorithm, "set_validation", None)
    if set_validation is not None:  # server-held test data, e.g. CRD's stopping rule (000 Alg. 2)
        set_validation(dataset.x_test.to(device), dataset.y_test.to(device))
    engine = ENGINES[config.engine](problem, data, seeds) if train else None
    return Experiment(
        config=config,
        run_id=rid if rid is not None else run_id(config),
        seeds=seeds,
        dataset=dataset,
        data=data,
        problem=problem,
        engine=engine,
        algorithm=algorithm,
        init_params=problem.layout.flatten(model).to(device),
        x_test=dataset.x_test.to(device),
        y_test=dataset.y_test.to(device),
        notices=[{"kind": "formula-range", **w.to_dict()} for w in range_notices]
        + delta_notices(config, algorithm, data.sizes()) + output_notices,
    )


def check_data(dataset: Any, parts: Sequence[Any]) -> None:
    """What a run's data must satisfy before any round: finite inputs (training and test), labels
    in ``0..num_classes-1``, no client without samples (:mod:`dpfl.data.checks`, one pass each).

    Raises:
        ConfigError: the first problem found, naming the offending value and where it is.
    """
    from dpfl.data.checks import check_client_sizes, check_finite_inputs, check_labels

    classes = int(dataset.num_classes)
    check_client_sizes(parts)
    check_finite_inputs(dataset.x_train, "training inputs")
    check_finite_inputs(dataset.x_test, "test inputs")
    check_labels(dataset.y_train, classes, "training labels")
    check_labels(dataset.y_test, classes, "test labels")


def delta_notices(config: RunConfig, algorithm: Any, sizes: torch.Tensor) -> list[dict[str, Any]]:
    """A ``delta`` notice when δ ≥ 1/n, n the number of privacy units: clients for client-level
    DP, training samples held by the clients for record-level DP (accepted, said loudly)."""
    from dpfl.data.checks import delta_notice

    unit = getattr(algorithm, "privacy_unit", None)
    if not isinstance(algorithm, PrivateAlgorithm) or unit is None:
        return []
    units = int(sizes.numel()) if unit == "client" else int(sizes.sum())
    message = delta_notice(float(config.privacy.delta), units, str(unit))
    return ([] if message is None else [{"kind": "delta", "message": message}]) + lattice_notices(config, algorithm)


def lattice_notices(config: RunConfig, algorithm: Any) -> list[dict[str, Any]]:
    """A ``gaussian-noise`` notice when ``privacy.gaussian_noise: lattice`` (a deployment's default)
    meets an algorithm or configuration without the lattice form: its Gaussian releases stay
    floating-point, said loudly (the privacy statement's ``gaussian_noise`` reads "float")."""
    if config.privacy.gaussian_noise != "lattice" or getattr(algorithm, "gaussian_release", "float") == "lattice":
        return []
    why = getattr(algorithm, "lattice_refusal", None) or f"{config.algorithm.name} has no lattice form yet"
    return [{"kind": "gaussian-noise",
             "message": (f"privacy.gaussian_noise: lattice — kept the floating-point Gaussian noise: {why}. Its "
                         "low-order bits may depend on the data (Mironov 2012); the certificate prices ideal "
                         "Gaussian noise.")}]


@torch.no_grad()
def check_model_output(model: torch.nn.Module, dataset: Any, name: str) -> None:
    """A model's output on two training samples must be ``[2, num_classes]`` logits (or ``[2]``
    scores for the SVM's hinge loss).

    Raises:
        ConfigError: the model fails on the data's input shape, or its output shape does not match.
    """
    x = dataset.x_train[:2].to(next(iter(model.parameters()), torch.zeros(())).device)
    try:
        out = model(x)
    except Exception as err:  # noqa: BLE001 - any failure of user code is reported with the shapes
        shape = tuple(dataset.input_shape)
        hint = ("; the inputs look channels-last [H, W, C], and torch's convolutions expect [C, H, W]: "
                "x.permute(0, 3, 1, 2)" if len(shape) == 3 and shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4)
                and "channels" in str(err) else "")
        raise ConfigError(f"model {name!r} fails on inputs of shape {tuple(x.shape)} (data set input shape "
                          f"{shape}): {type(err).__name__}: {err}{hint}") from None
    want = ((x.shape[0],) if getattr(model, "loss_kind", "cross_entropy") == "hinge"
            else (x.shape[0], int(dataset.num_classes)))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        classes = int(dataset.num_classes)
        stray = _labels_beyond(out, want, dataset)
        if stray is not None and stray[0]:  # a few labels beyond the model's logits: name them, not the model
            _, width, first, counts = stray
            raise ConfigError(f"{first} lies outside 0..{width - 1}, the classes model {name!r} returns {width} logits "
                              f"for ({counts}; with them the data set has {classes} classes): fix those labels, or "
                              f"make the model return {classes} logits.")
        raise ConfigError(f"model {name!r} returns outputs of shape {got} for a batch of {x.shape[0]}; the data set "
                          f"has {classes} classes, so it must return {want} (one logit per class)"
                          + ("." if stray is None else f"; {stray[3]}, e.g. {stray[2]}."))


@torch.no_grad()
def model_output_notices(model: torch.nn.Module, dataset: Any, loss_kind: Any, name: str) -> list[dict[str, Any]]:
    """A ``model-output`` notice when the model's outputs on a few training samples are already
    probabilities (each row ≥ 0 and summing to 1 within 1e-4) while the loss applies log_softmax
    itself: the built-in cross entropy, or a user loss that gives cross entropy's values on them.
    Such a model trains on the wrong loss (log_softmax of probabilities), slowly or not at all.

    Log-probabilities (a final log_softmax) need no notice: log_softmax of them is themselves, so
    the loss and its gradients are those of the logits.
    """
    if loss_kind == "hinge":
        return []
    x = dataset.x_train[:4].to(next(iter(model.parameters()), torch.zeros(())).device)
    out = model(x)
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[1] < 2 or not out.dtype.is_floating_point:
        return []
    out = out.float()
    if not (bool((out >= 0).all()) and torch.allclose(out.sum(dim=1), torch.ones(out.shape[0], device=out.device),
                                                      rtol=0.0, atol=1e-4)):
        return []
    y = dataset.y_train[:4].to(out.device)
    if callable(loss_kind):  # a user loss: only one that applies log_softmax itself (cross entropy's values)
        try:
            mine = loss_kind(out, y)
            same = isinstance(mine, torch.Tensor) and torch.allclose(
                mine.float().reshape(-1), torch.nn.functional.cross_entropy(out, y, reduction="none"),
                rtol=1e-4, atol=1e-5)
        except Exception:  # noqa: BLE001 - the loss's own checks report its failures
            same = False
        if not same:
            return []
    what = "the built-in cross-entropy loss" if loss_kind == "cross_entropy" else "the loss"
    return [{"kind": "model-output", "message": (
        f"model {name!r} returns probabilities (its outputs on {out.shape[0]} training samples are >= 0 and sum to "
        f"1 per row), but {what} applies log_softmax itself and expects logits: training would minimise the wrong "
        "loss and learn slowly or not at all. Return logits: drop the final softmax (nn.Softmax / F.softmax) "
        "from the model's forward.")}]


def _labels_beyond(out: Any, want: tuple[int, ...], dataset: Any) -> tuple[bool, int, str, str] | None:
    """For a model with W logits, fewer than the data set's classes: (whether the labels ≥ W are
    rare — under 1% of all samples: stray labels rather than a model too narrow —, W, the first
    such label and where it is, their counts). None when no label is ≥ W or the output is not
    ``[B, W]``."""
    if len(want) != 2 or not isinstance(out, torch.Tensor) or out.dim() != 2 or not 1 < out.shape[1] < want[1]:
        return None
    width = int(out.shape[1])
    counts, first, total, beyond_total = [], "", 0, 0
    for which, y in (("training", dataset.y_train), ("test", dataset.y_test)):
        beyond = (y >= width).nonzero().reshape(-1)
        counts.append(f"{beyond.numel()} of {y.numel()} {which}")
        total, beyond_total = total + int(y.numel()), beyond_total + int(beyond.numel())
        if not first and beyond.numel():
            first = f"label {int(y[beyond[0]])} at {which} sample {int(beyond[0])}"
    if not beyond_total:
        return None
    return beyond_total < 0.01 * total, width, first, f"{', '.join(counts)} labels are >= {width}"


@torch.no_grad()
def evaluate(
    problem: LocalProblem, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, batch: int = 2000
) -> dict[str, float]:
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




@dataclass
class Plan:
    """What a dry run needs of a run: its algorithm (sampler, calibration, releases), the public
    client sizes and the seeds — no data, model or engine."""

    config: RunConfig
    seeds: SeedSequence
    algorithm: Algorithm
    client_sizes: torch.Tensor
    num_params: int
    notices: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num_clients(self) -> int:
        return int(self.client_sizes.numel())

    def sizes(self, clients: Any = None) -> torch.Tensor:
        """Samples of ``clients`` (all when None)."""
        if clients is None:
            return self.client_sizes.clone()
        return self.client_sizes[torch.as_tensor(list(clients), dtype=torch.long)]


def build_plan(config: RunConfig, client_sizes: Any, num_params: int) -> Plan:
    """A dry run's build from shapes only: ``client_sizes`` (samples per client) and the model's
    ``num_params`` — what the per-paper ``dpfl account ALGORITHM`` shortcuts know. The algorithm
    is built by the same registry and factory as a run's, from the same public facts.

    Raises:
        ConfigError: no clients, a client without samples, or ``num_params`` < 1.
    """
    sizes = torch.as_tensor(list(client_sizes), dtype=torch.long)
    if sizes.numel() == 0:
        raise ConfigError("a plan needs at least one client. Found none.")
    if int(sizes.min()) < 1:
        raise ConfigError(f"every client needs at least one sample. Found {int(sizes.min())}.")
    if int(num_params) < 1:
        raise ConfigError(f"`num_params` must be >= 1. Found {num_params}.")
    from dpfl.algorithms.registry import algorithms

    if config.algorithm.name not in algorithms():
        raise ConfigError(f"unknown algorithm {config.algorithm.name!r}; valid: {sorted(algorithms())}")
    sampler = build_sampler(config.sampling, int(sizes.numel()))
    ctx = BuildContext(config, int(sizes.numel()), sizes, int(num_params))
    with collect_range_warnings() as range_notices:
        algorithm = build_algorithm(config.algorithm, sampler, ctx)
    check_local_optimizer(algorithm, LocalTraining.from_config(config.local))
    return Plan(config, run_seeds(config), algorithm, sizes, int(num_params),
                [{"kind": "formula-range", **w.to_dict()} for w in range_notices]
                + delta_notices(config, algorithm, sizes))


def plan_of(exp: Experiment) -> Plan:
    """The dry-run view of a built experiment."""
    return Plan(exp.config, exp.seeds, exp.algorithm, exp.data.sizes(), exp.problem.layout.numel, list(exp.notices))
