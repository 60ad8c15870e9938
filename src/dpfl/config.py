"""Run configuration: a strict pydantic schema, YAML files, and ``--set key=value`` overrides.

Unknown keys are errors (a typo must never silently fall back to a default), and so are a
boolean where a number is expected (``rounds: true`` is not 1), a non-finite number, a key given
twice in one YAML mapping and an empty config file. A run is a validated config plus its seed;
:func:`run_id` hashes both.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from dpfl.errors import ConfigError

MAX_ROUNDS = 100_000
"""Upper bound of ``rounds``: 100 times the longest schedule of the reproduced papers (T = 1000
in 004); a larger value is a typo or a run of weeks on a CPU."""

MAX_LR = 3.4e38
"""Upper bound of ``local.lr``: the largest float32 (the dtype of every model), rounded down."""


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not a boolean ({str(value).lower()})")
    return value


Int = Annotated[int, BeforeValidator(_not_a_bool)]
"""An integer; ``true``/``false`` are refused (pydantic would read them as 1/0)."""

Float = Annotated[float, BeforeValidator(_not_a_bool), AllowInfNan(False)]
"""A finite number; booleans, ``.inf`` and ``.nan`` are refused."""

Bool = Annotated[bool, Strict()]
"""``true`` or ``false`` only (not 1, 0 or "yes")."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    """Which data set, where, and whether to verify its files against the pinned checksums
    (``verify: false`` only for files in the standard formats that are not the published data,
    e.g. tiny smoke-test files)."""

    name: str = "mnist"
    dir: str = "data"
    verify: Bool = True


class PartitionConfig(_Strict):
    """How training samples are split across clients (see :mod:`dpfl.data.partition`)."""

    kind: Literal["iid", "dirichlet", "classes", "groups", "natural"] = "iid"
    num_clients: Int = Field(100, ge=1)
    samples_per_client: Int | None = Field(None, ge=1)
    sizes: list[Annotated[Int, Field(ge=1)]] | None = None
    alpha: Float | None = Field(None, gt=0)
    classes_per_client: Int | None = Field(None, ge=1)
    group_sizes: list[Annotated[Int, Field(ge=1)]] | None = None
    min_size: Int = Field(1, ge=1)


class ModelConfig(_Strict):
    name: str = "mlp"
    options: dict[str, Any] = Field(default_factory=dict)


class SgdConfig(_Strict):
    """``local.optimizer`` for SGD as ``torch.optim.SGD`` (dampening 0, no Nesterov); with both
    options 0 it is plain SGD."""

    name: Literal["sgd"] = "sgd"
    momentum: Float = Field(0.0, ge=0, lt=1)
    weight_decay: Float = Field(0.0, ge=0)


class AdamConfig(_Strict):
    """``local.optimizer`` for Adam as ``torch.optim.Adam`` (L2 weight decay, no AMSGrad)."""

    name: Literal["adam"]
    betas: tuple[Annotated[Float, Field(ge=0, lt=1)], Annotated[Float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    eps: Float = Field(1e-8, gt=0)
    weight_decay: Float = Field(0.0, ge=0)


def _optimizer_name_default(value: Any) -> Any:
    if isinstance(value, dict) and "name" not in value:
        return {"name": "sgd", **value}  # `optimizer: {momentum: 0.9}` is SGD with momentum
    return value


_PLAIN_SGD = SgdConfig.model_validate({})

OptimizerConfig = Annotated[SgdConfig | AdamConfig, Field(discriminator="name"),
                            BeforeValidator(_optimizer_name_default)]


class LocalConfig(_Strict):
    """How clients train locally (see :class:`dpfl.client.local.LocalTraining`).

    ``optimizer`` is a strict block, e.g. ``{name: adam, betas: [0.9, 0.999]}`` or
    ``{name: sgd, momentum: 0.9, weight_decay: 1e-4}``; its state is per client and reset every
    round. The default (plain SGD) is left out of the serialized config, so run ids of configs
    that do not name an optimizer are what they were before the block existed.
    """

    lr: Float = 0.05
    epochs: Int = Field(1, ge=1)
    batch_size: Int | None = Field(64, ge=1)
    steps: Int | None = Field(None, ge=1)
    optimizer: OptimizerConfig = Field(default_factory=lambda: _PLAIN_SGD)

    @model_serializer(mode="wrap")
    def _omit_plain_sgd(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if isinstance(data, dict) and self.optimizer == _PLAIN_SGD:
            data.pop("optimizer", None)
        return data

    @field_validator("lr")
    @classmethod
    def _positive_lr(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"must be a positive number. Found {v}")
        if v > MAX_LR:
            raise ValueError(f"must be at most {MAX_LR:g} (the largest float32). Found {v:g}")
        return v


class AvailabilityConfig(_Strict):
    """Device check-ins the server does not choose (``sampling.kind: availability``,
    :class:`dpfl.sampling.schemas.AvailabilitySampler`): each client is online in a diurnal window
    of ``window`` of every ``period`` rounds, around ``peak`` (a fraction of the period) with
    phases spread by ``spread``, and checks in with probability ``checkin_rate`` while online;
    the server keeps at most ``max_cohort`` of them (the first to check in)."""

    period: Int = Field(24, ge=1)
    window: Float = Field(0.25, gt=0, le=1)
    checkin_rate: Float = Field(0.2, gt=0, le=1)
    peak: Float = Field(0.0, ge=0, le=1)
    spread: Float = Field(0.15, ge=0)
    max_cohort: Int | None = Field(None, ge=1)
    seed: Int = Field(0, ge=0)


class SamplingConfig(_Strict):
    """Which clients take part in a round: all, a fixed-size uniform sample, Poisson — or a
    participation schema for a fleet that cannot be sampled (:mod:`dpfl.sampling.schemas`):
    ``min_separation`` (cyclic order: client i every b rounds, at most ``max_participations``
    times), ``cyclic_poisson`` (b fixed groups, round t Poisson-samples group t mod b at
    ``sample_rate``) and ``availability`` (whoever checks in, at least b rounds apart)."""

    kind: Literal["all", "fixed", "poisson", "min_separation", "cyclic_poisson", "availability"] = "all"
    clients_per_round: Int | None = Field(None, ge=1)
    sample_rate: Float | None = Field(None, gt=0, le=1)
    min_separation: Int | None = Field(None, ge=1)
    max_participations: Int | None = Field(None, ge=1)
    availability: AvailabilityConfig | None = None

    @model_serializer(mode="wrap")
    def _omit_unset_schema_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # fields added after runs were stored are left out when unset: run ids stay stable
        data = handler(self)
        if isinstance(data, dict):
            for key in ("min_separation", "max_participations", "availability"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _schema_settings(self) -> SamplingConfig:
        schema = self.kind in ("min_separation", "cyclic_poisson", "availability")
        if schema and self.min_separation is None:
            raise ValueError(f"`sampling.kind: {self.kind}` needs `min_separation` (b, the fewest rounds between "
                             "two participations of a client)")
        if not schema and (self.min_separation is not None or self.max_participations is not None):
            raise ValueError(f"`min_separation` and `max_participations` belong to a participation schema "
                             f"(kind min_separation, cyclic_poisson or availability), not to kind {self.kind!r}")
        if self.kind == "cyclic_poisson" and self.max_participations is not None:
            raise ValueError("`max_participations` is not part of the cyclic_poisson schema (each client is "
                             "sampled at most once every `min_separation` rounds)")
        if self.availability is not None and self.kind != "availability":
            raise ValueError(f"`availability` belongs to `kind: availability`, not {self.kind!r}")
        return self


class AlgorithmConfig(_Strict):
    name: str = "fedavg"
    options: dict[str, Any] = Field(default_factory=dict)


class PrivacyConfig(_Strict):
    """Run-level privacy settings (the algorithm's own noise settings live in its options).

    Attributes:
        delta: δ of every certified (ε, δ); also the δ a paper's formula is evaluated at. A δ of
            at least 1/n (n privacy units: clients, or records for record-level algorithms) is
            accepted with a loud notice when the run is built (``rounds.build.delta_notices``).
        target_epsilon: stop before the round that would take the certified ε above this.
        strict: refuse to run a round whose certified ε against the observer the paper's claim is about
            (the algorithm's ``claim_observer``; both when None) would exceed the paper's claimed ε.
        secure_aggregation: the server sees only the modular sum of integer uploads carrying
            distributed Skellam noise (DP-FedAvg's integer pipeline, in simulation and on Flower
            through SecAgg+; an algorithm or runtime that cannot provide it refuses the run).
        participation: "visible" — the server knows whom it sampled; "hidden" — every client
            joins each round's secure sum and a secret coin of probability q decides whether its
            update is in it, so the server's view is the public's (needs secure aggregation and
            Poisson sampling; N uploads per round instead of qN).
        colluding_clients: how many clients of each secure sum may collude with the server (it
            then subtracts their noise shares): the server's certificate counts only the honest
            clients' noise.
        pld_every: compute the tight (PLD) certificate every this many rounds (RDP every round).
        noise_generator: what draws every noise, sampling coin and shuffle: "seeded" — torch
            generators derived from ``seed`` (reproducible: anyone who knows the seed can recompute
            the noise); "csprng" — a fresh ChaCha20 stream per (round, client, purpose) under a
            256-bit key from ``os.urandom`` (:class:`dpfl.rng.CsprngGenerator`; the run's noise is not
            reproducible, its data batching and model initialization stay seeded). The run's
            privacy statement names it (``final["privacy"]["noise_generator"]``).
        gaussian_noise: how a real-valued Gaussian release is drawn: "float" — x + σ·Z in floating
            point (its low-order bits depend on x: Mironov 2012); "lattice" — scaled to γ⁻¹ℤ, rounded
            and noised with Skellam noise in exact integers (:mod:`dpfl.privacy.mechanisms.lattice`),
            priced as the Skellam release it is, where the algorithm has that form (DP-FedAvg without
            secure aggregation, UDP, udp-lei and NbAFL's uplinks; the others keep "float" and the run
            says so). Unset: "lattice" in a deployment (Flower, ``dpfl federate`` without
            ``--reproducible``), "float" in simulation (bit-reproducible with seeded generators). The
            privacy statement names the one used (``final["privacy"]["gaussian_noise"]``) when set.
    """

    delta: Float = Field(1e-5, gt=0, lt=1)
    target_epsilon: Float | None = Field(None, gt=0)
    strict: Bool = False
    secure_aggregation: Bool = False
    participation: Literal["visible", "hidden"] = "visible"
    colluding_clients: Int = Field(0, ge=0)
    pld_every: Int = Field(0, ge=0)
    noise_generator: Literal["seeded", "csprng"] = "seeded"
    gaussian_noise: Literal["float", "lattice"] | None = None

    @model_serializer(mode="wrap")
    def _omit_defaults_of_later_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # fields added after runs were stored are left out at their defaults: run ids stay stable
        data = handler(self)
        if isinstance(data, dict):
            if self.participation == "visible":
                data.pop("participation", None)
            if self.colluding_clients == 0:
                data.pop("colluding_clients", None)
            if self.noise_generator == "seeded":
                data.pop("noise_generator", None)
            if self.gaussian_noise is None:
                data.pop("gaussian_noise", None)
        return data

    @model_validator(mode="after")
    def _secure_settings(self) -> PrivacyConfig:
        if not self.secure_aggregation and self.participation == "hidden":
            raise ValueError("`participation: hidden` needs `secure_aggregation: true` (the server must see "
                             "only the sum, or it sees who sent an update)")
        if not self.secure_aggregation and self.colluding_clients:
            raise ValueError("`colluding_clients` only means something with `secure_aggregation: true` "
                             "(without it the server sees every upload anyway)")
        return self


def deployment_config(config: RunConfig) -> RunConfig:
    """``config`` as a deployment runs it: ``privacy.gaussian_noise`` unset becomes "lattice" (the
    floating-point-safe releases, :mod:`dpfl.privacy.mechanisms.lattice`); a set value is kept."""
    if config.privacy.gaussian_noise is not None:
        return config
    return config.model_copy(update={"privacy": config.privacy.model_copy(update={"gaussian_noise": "lattice"})})


DEVICE_TYPES = ("cpu", "cuda", "mps")
"""The torch device types a run may train on (``device: cpu | cuda | cuda:N | mps``)."""

_DEVICE_FORM = re.compile(r"(?:cpu|cuda|mps)(?::(?:0|[1-9][0-9]*))?")  # the names torch.device reads as these


class RunConfig(_Strict):
    """A whole run. Every field has a default so a config file names only what it changes.

    ``device`` is where the engine trains (the model, the data, the batches, the stacked client
    parameters): ``cpu``, ``cuda``, ``cuda:N`` or ``mps``. It is part of the run id like every
    field: on a GPU the engines draw DP-SGD's and DP-FedAvg's noise from generators on the GPU,
    whose streams are not the CPU's, so a GPU run is another run (``docs/architecture.md``,
    "Devices").
    """

    name: str = "run"
    seed: Int = Field(0, ge=0, lt=2**63)
    rounds: Int = Field(20, ge=1, le=MAX_ROUNDS)
    data: DataConfig = Field(default_factory=DataConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    local: LocalConfig = Field(default_factory=LocalConfig)
    engine: Literal["vectorized", "sequential", "ray"] = "vectorized"
    device: str = "cpu"
    threads: Int = Field(2, ge=1, le=1024)
    eval_every: Int = Field(1, ge=1)
    checkpoint_every: Int = Field(5, ge=1)

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        # the name's form only: whether this machine has the device is checked when a run is built
        # (rounds.build.check_device), so that a GPU run's config still reads, plans and accounts
        # on a machine without one. The form is torch.device's, read without importing torch (a
        # config is validated before torch loads: a typo is reported at once)
        if _DEVICE_FORM.fullmatch(v) is None:
            raise ValueError(f"must be 'cpu', 'cuda', 'cuda:N' (GPU N) or 'mps'. Found {v!r}")
        return v


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown key `{loc}`")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"`{loc}`: {msg} (got {e.get('input')!r})")
    return "; ".join(parts)


def parse_config(raw: dict[str, Any]) -> RunConfig:
    """Validate a config dictionary; errors name every offending key in one line."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a run config must be a mapping of keys to values. Found {type(raw).__name__}.")
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(f"invalid config: {_describe(err)}") from None


def builtin_configs() -> dict[str, Path]:
    """Configs shipped with dpfl, by name (``dpfl run default``)."""
    folder = Path(__file__).parent / "configs"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def load_raw(source: str | Path) -> dict[str, Any]:
    """Read a YAML config from a path or a built-in name."""
    path = Path(source)
    if not path.exists():
        builtin = builtin_configs()
        if str(source) in builtin:
            path = builtin[str(source)]
        else:
            raise ConfigError(
                f"config {str(source)!r} is neither a file nor a built-in config; built-in: {sorted(builtin)}"
            )
    if path.is_dir():
        raise ConfigError(f"config {str(source)!r} is a directory, not a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"config {str(source)!r} cannot be read: {err}") from None
    raw = load_yaml(text, str(path))
    if raw is None:
        raise ConfigError(
            f"{path}: the config file is empty; name at least one key (e.g. `rounds: 20`), "
            "or run the built-in `default`"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a mapping at the top level. Found {type(raw).__name__}.")
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML 1.2 forbids it;
    PyYAML would silently keep the last value)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            try:
                if key in first_line:
                    raise ConfigError(
                        f"{self.name}, line {line}: key `{key}` is given twice in one mapping "
                        f"(first on line {first_line[key]}); keep one"
                    )
                first_line[key] = line
            except TypeError:  # an unhashable key: PyYAML reports it below
                continue
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text safely, refusing duplicate keys; errors name ``source`` and the line."""
    loader = _UniqueKeyLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{source}{where}: not valid YAML ({what})") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides; values are parsed as YAML (``3``, ``0.1``, ``null``, ``[1,2]``)."""
    out = json.loads(json.dumps(raw))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value. Found {item!r}.")
        key, value = item.split("=", 1)
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: `{part}` is not a section")
            node = nxt
        try:
            node[parts[-1]] = yaml.safe_load(value)
        except yaml.YAMLError:
            node[parts[-1]] = value
    return out


def load_config(source: str | Path, overrides: list[str] | None = None) -> RunConfig:
    return parse_config(apply_overrides(load_raw(source), overrides or []))


def run_id(config: RunConfig) -> str:
    """Stable id of a run: a hash of the validated config (which includes the seed).

    The data directory is left out when the files are verified against the pinned checksums:
    the same verified data in another folder is the same run (``--data-dir`` must not split a
    sweep's stored runs). Unverified data is identified by its folder.
    """
    dumped = config.model_dump(mode="json")
    if config.data.verify:
        dumped["data"].pop("dir", None)
    canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
