"""dpfl as a library: your model, your data, any algorithm, two epsilons.

    import dpfl
    data = dpfl.FederatedData.from_tensors(x_train, y_train, x_test, y_test,
                                           partition={"kind": "iid", "num_clients": 100})
    result = dpfl.train(MyNet(), data, "dp-fedavg",
                        options={"noise_multiplier": 1.0, "clip_norm": 1.0},
                        sampling={"kind": "poisson", "sample_rate": 0.1}, rounds=50)
    result.model                     # the trained nn.Module (a copy; yours is untouched)
    result.privacy.epsilon("public") # certified ε against the public; result.claimed_epsilon

:func:`train` is a thin face over the same round loop, store and checkpoints as ``dpfl run``
(:mod:`dpfl.rounds`): a run's id is a hash of its settings *and* of the data, partition and
initial model, so calling :func:`train` again after a crash resumes it and calling it after it
finished returns the stored result. :func:`account` is the dry run of the same plan.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dpfl.config import RunConfig, parse_config
from dpfl.data.checks import check_client_sizes
from dpfl.errors import ConfigError
from dpfl.rounds.build import Experiment, assemble, check_device, partition_clients
from dpfl.rounds.loop import RoundObserver
from dpfl.rounds.result import DryRunResult, PrivacySummary
from dpfl.store import RunStore


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"`{name}` cannot be read as a tensor: {err}") from None


def _digest(*tensors: torch.Tensor) -> hashlib._Hash:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
    return h


@dataclass(frozen=True)
class FederatedData:
    """A data set split across clients: training samples, a test set, and who holds what.

    Build it with :meth:`from_tensors`, :meth:`from_datasets` or :meth:`builtin`. The partition
    is either a ``partition`` spec as in a YAML config (``{"kind": "iid" | "dirichlet" |
    "classes" | "groups", "num_clients": N, ...}``, drawn from the run's seed) or an explicit
    ``clients`` mapping client id → training sample indices, which must cover every training
    sample exactly once.

    Attributes:
        x_train: training inputs, float ``[n, *input_shape]``.
        y_train: training labels, integer ``[n]``.
        x_test: test inputs, float ``[m, *input_shape]``.
        y_test: test labels, integer ``[m]``.
        num_classes: number of classes.
        input_shape: the shape of one input.
        partition: the partition spec, drawn from the run's seed (default: IID over 10
            clients); with ``clients``, only recorded (IID over as many clients).
        clients: explicit client → training sample indices, or None (``partition`` draws them).
        name: the data's label in the run's name and id (``"user-data"``; a built-in data
            set's name).
        groups_train: a built-in data set's natural client of each training sample (FEMNIST's
            writers, for ``partition: {kind: natural}``), else None.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    partition: dict[str, Any] = field(default_factory=lambda: {"kind": "iid", "num_clients": 10})
    clients: tuple[np.ndarray, ...] | None = None
    name: str = "user-data"
    groups_train: Any = None

    @classmethod
    def from_tensors(cls, x_train: Any, y_train: Any, x_test: Any, y_test: Any, *, num_classes: int | None = None,
                     partition: Mapping[str, Any] | None = None,
                     clients: Mapping[int, Sequence[int]] | Sequence[Sequence[int]] | None = None,
                     name: str = "user-data") -> FederatedData:
        """From tensors (or arrays): inputs ``[n, *input_shape]`` (float), integer labels ``[n]``.

        Args:
            x_train, y_train: the training inputs and labels.
            x_test, y_test: the test inputs and labels (the global model is evaluated on them).
            num_classes: default ``max(label) + 1`` over train and test.
            partition: a partition spec (default: IID over 10 clients); not with ``clients``.
            clients: client id → indices into the training set (ids 0..N-1), or a list of index
                lists; every training sample must be held by exactly one client.
            name: a label for the data in the run's name (``"user-data"``).

        Raises:
            ConfigError: mismatched lengths, non-integer labels, a label outside the classes, or
                a partition that loses or duplicates samples.
        """
        xt, yt = _as_tensor(x_train, "x_train").float(), _as_tensor(y_train, "y_train")
        xs, ys = _as_tensor(x_test, "x_test").float(), _as_tensor(y_test, "y_test")
        for xn, yn, x, y in (("x_train", "y_train", xt, yt), ("x_test", "y_test", xs, ys)):
            if x.ndim < 2:
                raise ConfigError(f"`{xn}` must be [samples, *input_shape]. Found shape {tuple(x.shape)}.")
            if y.ndim != 1 or y.shape[0] != x.shape[0]:
                raise ConfigError(f"`{yn}` must be one label per sample of `{xn}` ({x.shape[0]}). "
                                  f"Found shape {tuple(y.shape)}.")
            if y.dtype.is_floating_point or y.dtype == torch.bool:
                raise ConfigError(f"`{yn}` must hold integer class labels. Found dtype {y.dtype}.")
        if xt.shape[1:] != xs.shape[1:]:
            raise ConfigError(f"train and test inputs differ in shape: {tuple(xt.shape[1:])} vs {tuple(xs.shape[1:])}.")
        yt, ys = yt.long(), ys.long()
        top = int(max(int(yt.max()), int(ys.max()) if ys.numel() else 0)) + 1
        k = top if num_classes is None else int(num_classes)
        if min(int(yt.min()), int(ys.min()) if ys.numel() else 0) < 0 or top > k:
            raise ConfigError(f"labels must lie in 0..{k - 1} (`num_classes` = {k}). Found {int(yt.min())}..{top - 1}.")
        if partition is not None and clients is not None:
            raise ConfigError("give either `partition` (a spec) or `clients` (explicit indices), not both.")
        parts = None if clients is None else _check_clients(clients, int(xt.shape[0]))
        spec = dict(partition) if partition is not None else {"kind": "iid", "num_clients": 10}
        if parts is not None:
            spec = {"kind": "iid", "num_clients": len(parts)}
        return cls(xt, yt, xs, ys, k, tuple(int(s) for s in xt.shape[1:]), spec, parts, name)

    @classmethod
    def from_datasets(
        cls, train: torch.utils.data.Dataset, test: torch.utils.data.Dataset, **kwargs: Any
    ) -> FederatedData:
        """From any two map-style ``torch.utils.data.Dataset`` of ``(input, label)`` pairs
        (read once into memory).

        Args:
            train: the training set, held by the clients.
            test: the test set (the global model is evaluated on it).
            **kwargs: ``num_classes``, ``partition``, ``clients``, ``name``, as
                :meth:`from_tensors`.
        """

        def read(ds: Any, which: str) -> tuple[torch.Tensor, torch.Tensor]:
            try:
                n = len(ds)
            except TypeError:
                raise ConfigError(f"the {which} data set has no length; give a map-style Dataset.") from None
            if n == 0:
                raise ConfigError(f"the {which} data set is empty.")
            xs, ys = zip(*(ds[i] for i in range(n)), strict=True)
            return torch.stack([torch.as_tensor(x) for x in xs]), torch.as_tensor([int(y) for y in ys])

        xt, yt = read(train, "training")
        xs, ys = read(test, "test")
        return cls.from_tensors(xt, yt, xs, ys, **kwargs)

    @classmethod
    def builtin(cls, name: str, data_dir: str | Path = "data", *, partition: Mapping[str, Any] | None = None,
                verify: bool = True) -> FederatedData:
        """A built-in data set read from ``data_dir`` (``dpfl data fetch NAME`` puts it there).

        Args:
            name: ``mnist``, ``fmnist``, ``cifar10``, ... (``dpfl data list``).
            data_dir: the data directory holding ``<folder>/<file>`` (``data``).
            partition: a partition spec (default: IID over 10 clients).
            verify: check every file against its pinned sha256 first.
        """
        from dpfl.data import load_dataset

        ds = load_dataset(name, str(data_dir), verify=verify)
        spec = dict(partition) if partition is not None else {"kind": "iid", "num_clients": 10}
        return cls(ds.x_train, ds.y_train, ds.x_test, ds.y_test, int(ds.num_classes), tuple(ds.input_shape),
                   spec, None, name, ds.groups_train)

    @property
    def num_clients(self) -> int:
        return len(self.clients) if self.clients is not None else int(self.partition.get("num_clients", 0))

    def __repr__(self) -> str:
        """A summary, never the tensors: name, clients, samples, input shape, classes."""
        split = ("explicit clients" if self.clients is not None
                 else ", ".join(f"{k}={v!r}" for k, v in self.partition.items()))
        return (f"FederatedData({self.name!r}: {self.num_clients} clients ({split}), "
                f"{int(self.x_train.shape[0]):,} training and {int(self.x_test.shape[0]):,} test samples, "
                f"input shape {tuple(self.input_shape)} {str(self.x_train.dtype).removeprefix('torch.')}, "
                f"{self.num_classes} classes)")

    def fingerprint(self) -> str:
        """A hash of the samples, labels and explicit partition (part of a run's id)."""
        h = _digest(self.x_train, self.y_train, self.x_test, self.y_test)
        if self.clients is not None:
            for p in self.clients:
                h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
        return h.hexdigest()[:12]


def _check_clients(clients: Mapping[int, Sequence[int]] | Sequence[Sequence[int]], n: int) -> tuple[np.ndarray, ...]:
    if isinstance(clients, Mapping):
        ids = sorted(int(k) for k in clients)
        if ids != list(range(len(ids))):
            raise ConfigError(f"`clients` ids must be 0..{len(ids) - 1}. "
                              f"Found {ids[:8]}{' ...' if len(ids) > 8 else ''}.")
        lists = [clients[k] for k in sorted(clients)]
    else:
        lists = list(clients)
    if not lists:
        raise ConfigError("`clients` holds no client.")
    parts = [np.asarray(idx, dtype=np.int64).reshape(-1) for idx in lists]
    try:
        check_client_sizes(parts)
    except ConfigError as err:
        raise ConfigError(f"`clients`: {err}") from None
    for cid, arr in enumerate(parts):
        if arr.min() < 0 or arr.max() >= n:
            raise ConfigError(f"`clients`: client {cid} holds index {int(arr.max() if arr.max() >= n else arr.min())}, "
                              f"outside the {n} training samples.")
    counts = np.bincount(np.concatenate(parts), minlength=n)
    if (counts > 1).any():
        dup = int(np.flatnonzero(counts > 1)[0])
        raise ConfigError(f"`clients`: training sample {dup} is held by {int(counts[dup])} clients; a partition "
                          f"must give each sample to one client ({int((counts > 1).sum())} duplicated).")
    if (counts == 0).any():
        lost = int(np.flatnonzero(counts == 0)[0])
        raise ConfigError(f"`clients`: training sample {lost} is held by no client ({int((counts == 0).sum())} of {n} "
                          "lost); select the samples you use before building the data set.")
    return tuple(parts)


def _code_bytes(obj: Any, seen: set[int] | None = None) -> bytes:
    """The code that defines ``obj``'s behaviour: its source when Python can find it, else its
    compiled code (bytecode, constants and names, nested code included) — so editing a model's
    ``forward`` or a loss function makes another run even where no source file exists (a REPL,
    ``exec``)."""
    import inspect
    import types

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return b""
    seen.add(id(obj))
    try:
        return inspect.getsource(obj).encode()
    except (OSError, TypeError):
        pass
    if isinstance(obj, types.CodeType):
        parts = [obj.co_code, repr(obj.co_names).encode()]
        for const in obj.co_consts:
            parts.append(_code_bytes(const, seen) if isinstance(const, types.CodeType) else repr(const).encode())
        return b"|".join(parts)
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return _code_bytes(getattr(obj, "__func__", obj).__code__, seen)
    if isinstance(obj, type):
        return b"|".join(_code_bytes(v, seen) for _, v in sorted(vars(obj).items())
                         if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)))
    if isinstance(obj, (staticmethod, classmethod)):
        return _code_bytes(obj.__func__, seen)
    if isinstance(obj, property):
        return b"|".join(_code_bytes(f, seen) for f in (obj.fget, obj.fset) if f is not None)
    return _code_bytes(type(obj), seen) + repr(obj).encode()  # a callable object: its class and state


def _code_digest(obj: Any) -> str:
    """SHA-256 (12 hex digits) of :func:`_code_bytes`; for a module, of every class it is built
    from (torch's own layers by name: their code is the installed torch's)."""
    h = hashlib.sha256()
    if isinstance(obj, nn.Module):
        classes = sorted({type(m) for m in obj.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}")
        for cls in classes:
            h.update(f"{cls.__module__}.{cls.__qualname__}".encode())
            if not cls.__module__.startswith("torch."):
                h.update(_code_bytes(cls))
    else:
        h.update(_code_bytes(obj))
    return h.hexdigest()[:12]


def _model_fingerprint(model: nn.Module) -> str:
    """The weights, the architecture (``repr``) and the code of every class the model is built
    from: editing ``forward`` is another run."""
    h = _digest(*[p for _, p in sorted(model.state_dict().items())])
    h.update(repr(model).encode())
    h.update(type(model).__qualname__.encode())
    h.update(_code_digest(model).encode())
    return h.hexdigest()[:12]


def _check_model(model: nn.Module) -> None:
    if not isinstance(model, nn.Module):
        raise ConfigError(f"`model` must be a torch.nn.Module. Found {type(model).__name__}.")
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"model {type(model).__name__} has no trainable parameters.")
    from dpfl.models.validate import check_model

    check_model(model)  # layers dpfl cannot train privately (BatchNorm, other buffers), each with its fix


def _config(data: FederatedData, model: nn.Module, algorithm: str, options: Mapping[str, Any] | None,
            rounds: int, sampling: Mapping[str, Any] | None, local: Mapping[str, Any] | None,
            privacy: Mapping[str, Any] | None, seed: int, engine: str, threads: int | None,
            checkpoint_every: int, eval_every: int, name: str, device: str = "cpu") -> RunConfig:
    raw: dict[str, Any] = {
        "name": name,
        "seed": seed,
        "rounds": rounds,
        # the data and model are the user's: their fingerprints make the run id theirs
        "data": {"name": f"{data.name}@{data.fingerprint()}", "dir": "", "verify": False},
        "partition": dict(data.partition),
        "model": {"name": f"{type(model).__name__}@{_model_fingerprint(model)}"},
        "algorithm": {"name": algorithm, "options": dict(options or {})},
        "sampling": dict(sampling or {"kind": "all"}),
        "local": dict(local or {}),
        "privacy": dict(privacy or {}),
        "engine": engine,
        "device": device,
        "checkpoint_every": checkpoint_every,
        "eval_every": eval_every,
    }
    if threads is not None:
        raw["threads"] = threads
    return parse_config(raw)


def _named(name: str | None, loss: Any, default: str) -> str:
    """The run's name; a user loss is part of it (so that another loss is another run)."""
    base = name or default
    if loss is None:
        return base
    qual = f"{getattr(loss, '__module__', '?')}.{getattr(loss, '__qualname__', type(loss).__name__)}"
    return f"{base} loss={qual}#{_code_digest(loss)[:8]}"  # its code too: an edited loss is another run


def _choose_engine(engine: str, model: nn.Module, data: FederatedData, say: Callable[[str], None] | None) -> str:
    """``auto``: the vectorized engine when the model trains on it exactly as alone, else the
    sequential reference loop (said in one line)."""
    if engine != "auto":
        return engine
    from torch.func import functional_call

    from dpfl.sim.kernel import CohortForward

    params = {n: p.detach() for n, p in model.named_parameters()}
    x = data.x_train[:3].to(next(iter(params.values())).device)  # the probe runs where the model is
    try:
        with torch.no_grad():
            alone = functional_call(model, params, (x,))
    except Exception:  # noqa: BLE001 - the model fails alone: no engine trains it, and building the run
        return "sequential"  # says why in one line (rounds.build.check_model_output), nothing about engines
    try:
        with torch.no_grad():
            stacked = {n: torch.stack([p, p]) for n, p in params.items()}
            together = CohortForward(model)(stacked, torch.stack([x, x]))
        same = torch.allclose(together[0], alone, rtol=1e-4, atol=1e-5)
    except Exception as err:  # noqa: BLE001 - any failure means: not vectorizable here
        same, why = False, f"{type(err).__name__}: {err}"
    else:
        why = "its cohort forward pass differs from the model's own"
    if same:
        return "vectorized"
    if say is not None:
        say(f"engine: sequential (the vectorized engine cannot train {type(model).__name__}: {why})")
    return "sequential"


def _device_name(device: str | torch.device, *, available: bool = True) -> str:
    """``device`` as a config's name (a ``torch.device`` as its string), checked on this machine
    when ``available``.

    Raises:
        ConfigError: not a device name of a config, or a device this machine does not have.
    """
    if not isinstance(device, (str, torch.device)):
        raise ConfigError(f"`device` must be a device name such as 'cpu' or 'cuda', or a torch.device. "
                          f"Found {device!r}.")
    name = str(device)
    parse_config({"device": name})  # the name's form, with the config's message
    if available:
        check_device(name)  # this machine has it
    return name


def _build(model: nn.Module, data: FederatedData, config: RunConfig, *, train: bool, loss: Any = None) -> Experiment:
    from dpfl.data.registry import FederatedDataset

    ds = FederatedDataset(name=data.name, x_train=data.x_train, y_train=data.y_train, x_test=data.x_test,
                          y_test=data.y_test, num_classes=data.num_classes, input_shape=data.input_shape,
                          groups_train=data.groups_train)
    parts = list(data.clients) if data.clients is not None else partition_clients(config, ds)
    return assemble(config, ds, parts, copy.deepcopy(model), train=train, loss=loss)


def _warn_unheard(notices: Sequence[Mapping[str, Any]], notice: Callable[[str], None] | None) -> None:
    """A δ ≥ 1/n notice, and one that the model's outputs look like probabilities, as a
    ``UserWarning`` when notices go nowhere (``notice=None``): they are never silent."""
    if notice is not None:
        return
    for n in notices:
        if n["kind"] in ("delta", "model-output"):
            warnings.warn(n["message"], UserWarning, stacklevel=3)


def _progress_fn(progress: bool | Callable[[int, int, dict[str, Any], float], None] | None, rounds: int,
                 label: str, stack: contextlib.ExitStack) -> Callable[[int, int, dict[str, Any], float], None] | None:
    """What :func:`train` calls after each round for its ``progress`` argument (a progress line
    entered on ``stack`` for ``True``, or ``None`` on a terminal)."""
    if callable(progress):
        return progress
    if progress is None:
        progress = sys.stderr.isatty()
    if progress is not True and progress is not False:
        raise ConfigError(f"`progress` must be True, False, None or a callable. Found {progress!r}.")
    if not progress:
        return None
    from dpfl.progress import RoundProgress

    short = label if len(label) <= 40 else label[:39] + "…"
    return stack.enter_context(RoundProgress(rounds, short))


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the trained global model (a copy of the model given, with the final weights).
        run_id: the stored run's id (``dpfl report RUN_ID``, ``dpfl export RUN_ID``).
        status: "finished", "stopped" (a privacy budget or an early end) or "failed".
        rounds: rounds completed.
        history: per-round metrics (loss, accuracy, certified ε, ...).
        final: the stored final record.
        privacy: claimed and certified ε per observer (None for a non-private algorithm).
    """

    model: nn.Module
    run_id: str
    status: str
    rounds: int
    history: list[dict[str, Any]]
    final: dict[str, Any]
    privacy: PrivacySummary | None

    @property
    def test_accuracy(self) -> float | None:
        acc = self.final.get("test_accuracy")
        return None if acc is None else float(acc)

    @property
    def claimed_epsilon(self) -> float | None:
        return None if self.privacy is None else self.privacy.claimed_max

    def certified_epsilon(self, observer: str | None = None) -> float | None:
        """Certified ε against an observer (None for a non-private algorithm).

        Args:
            observer: ``"server"`` or ``"public"``, in any case; None: the worst of both.

        Raises:
            ConfigError: another observer (the message names the valid ones).
        """
        if self.privacy is None:
            PrivacySummary(None, None, "", False, 0.0).epsilon(observer)  # the observer's name checked all the same
            return None
        return self.privacy.epsilon(observer)


def train(model: nn.Module, data: FederatedData, algorithm: str = "dp-fedavg", *,
          options: Mapping[str, Any] | None = None, rounds: int = 20,
          sampling: Mapping[str, Any] | None = None, local: Mapping[str, Any] | None = None,
          privacy: Mapping[str, Any] | None = None, seed: int = 0, engine: str = "auto",
          store: str | Path | RunStore | None = "runs/dpfl.sqlite", restart: bool = False,
          progress: bool | Callable[[int, int, dict[str, Any], float], None] | None = None,
          notice: Callable[[str], None] | None = print, threads: int | None = None,
          checkpoint_every: int = 5, eval_every: int = 1, name: str | None = None,
          loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
          observers: Sequence[RoundObserver] = (), device: str | torch.device = "cpu") -> TrainResult:
    """Train ``model`` on ``data`` with a DP-FL algorithm; both epsilons in the result.

    Args:
        model: any ``torch.nn.Module`` mapping a batch ``[B, *input_shape]`` to logits
            ``[B, num_classes]``; its current weights are the initial global model. It is copied,
            never modified. Modules with buffers (BatchNorm) are refused: use GroupNorm.
        data: a :class:`FederatedData`.
        algorithm: a name (``dpfl options`` lists them: ``fedavg``, ``dp-fedavg``, ``udp``,
            ``nbafl``, ``ldp-fl``, ``pmidp-fl``, ...).
        options: the algorithm's options, as ``algorithm.options`` in a YAML config (e.g.
            ``{"noise_multiplier": 1.0, "clip_norm": 1.0}``); None: its defaults.
        rounds: rounds T to run (a privacy budget may stop the run earlier).
        sampling, local, privacy: the config sections of the same names (e.g. ``{"kind":
            "poisson", "sample_rate": 0.1}``, ``{"lr": 0.1, "epochs": 1, "batch_size": 32}``,
            ``{"delta": 1e-5, "target_epsilon": 8}``); None: every client every round, and
            the config's defaults.
        seed: seeds every random stream of the run (the partition, the clients' sampling and
            batches, the noise; the initial weights are ``model``'s own); part of the run id,
            like every setting.
        engine: "auto" (vectorized when the model's layers allow it, else sequential),
            "vectorized", "sequential" or "ray".
        device: where the engine trains, as in a YAML config: "cpu" (default), "cuda",
            "cuda:N", "mps", or a ``torch.device``. Checked first: a device this machine does
            not have is a ``ConfigError`` naming it, before anything is built. A GPU run is
            another run than the CPU run of the same settings (another run id: on the GPU,
            DP-SGD's and DP-FedAvg's noise comes from the GPU's generators). ``result.model``
            is a copy of ``model`` on ``model``'s own device, whatever ``device`` trained it.
        store: the run store (as ``dpfl run --store``): the run is stored, checkpointed and
            resumed from there; a finished run is returned from it, with a notice saying so
            (``restart`` runs it again). ``None``: no store — the run trains in a temporary folder
            that is removed afterwards (nothing to resume, nothing returned from an earlier run).
        restart: train the run anew from round 1 even if ``store`` holds it: its checkpoint
            and stored result are discarded (as ``dpfl run --restart``).
        notice: where notices go (formula ranges, budget stops; default ``print``; None: nowhere).
        progress: ``True``: one line per round on stderr (round, loss, accuracy, certified ε,
            elapsed and remaining time), a live bar in a terminal; ``False``: silent; ``None``
            (default): on when stderr is a terminal; or a callable ``(done, total, metrics,
            seconds)`` called after each round.
        observers: :class:`~dpfl.rounds.loop.RoundObserver` s that see every round's metrics,
            e.g. ``[dpfl.CsvMetrics("metrics.csv"), dpfl.TensorBoardMetrics("tb")]``
            (:mod:`dpfl.rounds.observers`).
        loss: a per-sample loss replacing cross-entropy, written as for one batch: ``(outputs
            [B, C], targets [B]) -> losses [B]``, e.g. ``lambda out, y: F.cross_entropy(out, y,
            reduction="none")``. It is probed once when the run is built; one that handles
            leading dimensions itself is called on a whole cohort's ``[K, B, C]``, else on
            ``[K·B, C]`` (:mod:`dpfl.client.user_loss`). It is part of the run's identity by its
            qualified name and its code (an edited loss is another run).
        threads: torch's CPU threads for the run (``torch.set_num_threads``); None: the run
            config's default, 2.
        checkpoint_every: checkpoint every this many rounds (with ``store``, a killed run
            resumes from the last checkpoint).
        eval_every: evaluate the global model on the test set every this many rounds, and
            after the last.
        name: the run's label, shown with its id (``dpfl runs``); default
            ``"<algorithm>-<data name>-<model class>"``. A ``loss`` adds its qualified name.
            Part of the run id.

    δ at or above 1/n (n: clients for client-level DP, samples for record-level DP) is accepted
    with a notice, and a ``UserWarning`` when ``notice`` is None.

    Raises:
        ConfigError: a bad setting, a model whose output does not match the classes, a model
            with buffers, an option the algorithm does not take, a loss that is not one loss
            per sample, NaN or inf in the inputs, labels outside the classes, a client without
            samples.
    """
    from dpfl.rounds.session import run_experiment
    from dpfl.sim.checkpoint import load_checkpoint

    device_name = _device_name(device)
    _check_model(model)
    chosen = _choose_engine(engine, model, data, notice)
    config = _config(data, model, algorithm, options, rounds, sampling, local, privacy, seed, chosen, threads,
                     checkpoint_every, eval_every,
                     _named(name, loss, f"{algorithm}-{data.name}-{type(model).__name__}"),
                     device_name)
    exp = _build(model, data, config, train=True, loss=loss)
    _warn_unheard(exp.notices, notice)
    with contextlib.ExitStack() as stack:
        if store is None:  # no store: a temporary one, gone when the run has been read back
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dpfl-run-")))
            run_store = RunStore(folder / "run.sqlite")
        else:
            run_store = store if isinstance(store, RunStore) else RunStore(store)
        progress_fn = _progress_fn(progress, config.rounds, config.name, stack)
        res = run_experiment(config, run_store, progress=progress_fn, notice=notice, restart=restart, experiment=exp,
                             observers=tuple(observers))
        if res.stored_notice is not None and notice is not None:
            notice(res.stored_notice)
        saved = load_checkpoint(res.final["model_path"]) if "model_path" in res.final else None
        if store is None:
            res.final.pop("model_path", None)  # the file is gone with the temporary store
    trained = copy.deepcopy(model)
    params = saved["global_params"] if saved is not None else exp.init_params
    views = exp.problem.layout.views(params.to(exp.init_params.device))
    with torch.no_grad():
        for n, p in trained.named_parameters():
            if n in views:
                p.copy_(views[n].reshape(p.shape))
    return TrainResult(trained, res.run_id, res.status, res.rounds_done, res.history, res.final, res.privacy)


def account(model: nn.Module, data: FederatedData, algorithm: str = "dp-fedavg", *,
            options: Mapping[str, Any] | None = None, rounds: int = 20,
            sampling: Mapping[str, Any] | None = None, local: Mapping[str, Any] | None = None,
            privacy: Mapping[str, Any] | None = None, seed: int = 0, per_round: bool = False,
            notice: Callable[[str], None] | None = None,
            loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
            device: str | torch.device = "cpu") -> DryRunResult:
    """The privacy of :func:`train` with the same arguments, without training (a dry run of the
    same sampling, calibration and ledger): ``result.privacy`` per observer, ``result.rounds``.

    Args:
        model, data, algorithm, options, rounds, sampling, local, privacy, seed, loss: as
            :func:`train`.
        per_round: also the certified ε (RDP) per observer after each round, in
            ``result.per_round``.
        notice: where notices go (formula ranges, budget stops; default None: nowhere).
        device: taken so that :func:`train`'s arguments can be passed as they are: a dry run
            trains nowhere, so only the name's form is checked (a GPU run is planned on any
            machine).
    """
    from dpfl.rounds.session import dry_run

    _device_name(device, available=False)
    _check_model(model)
    config = _config(data, model, algorithm, options, rounds, sampling, local, privacy, seed, "sequential", None,
                     5, 1, _named(None, loss, f"{algorithm}-{data.name}-{type(model).__name__}"))
    exp = _build(model, data, config, train=False, loss=loss)
    _warn_unheard(exp.notices, notice)
    return dry_run(config, notice, per_round=per_round, experiment=exp)
