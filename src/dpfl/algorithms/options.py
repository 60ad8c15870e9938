"""Every algorithm's options: a strict pydantic model per algorithm, and :func:`parse_options`,
which validates them with errors that name the option, the rule and the value.

A module of its own, importing neither torch nor the accountant: the algorithm modules and the
registry that builds them import it (the registry imports the algorithms, never the reverse), and
``dpfl options`` reads the models without loading an algorithm.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dpfl.errors import ConfigError

__all__ = [
    "AdaptiveClipOptions",
    "DpFedAvgOptions",
    "DpSgdOptions",
    "FedAvgOptions",
    "LdpFlOptions",
    "MidpOptions",
    "NbAflOptions",
    "PmidpOptions",
    "RangeMode",
    "SecureSumOptions",
    "UdpCrdOptions",
    "UdpLeiOptions",
    "UdpOptions",
    "parse_options",
]

#: How LDP-FL's clients agree on the clipping range [c − r, c + r] (:mod:`dpfl.algorithms.ldp_fl`).
RangeMode = Literal["fixed", "global-model", "client-minmax", "private-minmax"]


def _rule_text(msg: str) -> str:
    """A validator's message without the validation library's prefix."""
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg


def _one_noise_setting(noise_multiplier: float | None, target_epsilon: float | None) -> None:
    """Exactly one of the two ways to set the noise (a model-level rule of several option sets)."""
    if (noise_multiplier is None) == (target_epsilon is None):
        found = ("neither" if noise_multiplier is None else
                 f"both (noise_multiplier={noise_multiplier!r}, target_epsilon={target_epsilon!r})")
        raise ValueError("give exactly one of `noise_multiplier` (σ itself) and `target_epsilon` (σ calibrated "
                         f"to the paper's ε). Found {found}.")


def parse_options(model: type[BaseModel], options: dict[str, Any], algorithm: str) -> Any:
    """Validate ``algorithm.options`` with the algorithm's own strict schema."""
    try:
        return model.model_validate(options)
    except ValidationError as err:
        parts = []
        for e in err.errors():
            loc = ".".join(str(x) for x in e["loc"])
            if e["type"] == "extra_forbidden":
                parts.append(f"unknown option `{loc}` (valid: {sorted(model.model_fields)})")
            elif e["type"] == "missing":
                parts.append(f"missing option `{loc}`")
            elif not loc:  # a rule over several options: its message names them, the values and the fix
                parts.append(_rule_text(e["msg"]))
            else:
                parts.append(f"`{loc}`: {_rule_text(e['msg'])} (got {e.get('input')!r})")
        raise ConfigError(f"algorithm {algorithm!r}: " + "; ".join(parts)) from None


# --------------------------------------------------------------------------- fedavg


class FedAvgOptions(BaseModel):
    """Options of ``algorithm: {name: fedavg, options: {...}}`` (all optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_radius: float | None = Field(None, gt=0, description="clip local model weights into "
                                      "[clip_center − r, clip_center + r] before upload (ablation of 001's range)")
    clip_center: float = Field(0.0, description="center c of the clipping range")

    @model_validator(mode="after")
    def _finite(self) -> FedAvgOptions:
        for name in ("clip_radius", "clip_center"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"`{name}` must be finite. Found {value!r}.")
        return self


# --------------------------------------------------------------------------- dp-fedavg, dp-fedavg-blur-lus


class AdaptiveClipOptions(BaseModel):
    """``adaptive_clip: {...}`` (Andrew et al. 2021; defaults as they, Flower and TFF use)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_unclipped_quantile: float = Field(0.5, ge=0, le=1, description="γ")
    learning_rate: float = Field(0.2, ge=0, description="η_C of the geometric update")
    count_noise_std: float | None = Field(
        None, gt=0, description="σ_b on the centered count; default expected cohort / 20")


class SecureSumOptions(BaseModel):
    """``secure_sum: {...}``: the integer pipeline under ``privacy.secure_aggregation``
    (:mod:`dpfl.privacy.mechanisms.integer`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bits: int = Field(31, ge=8, le=62, description="b: the secure sum is modulo 2^b (31: the largest that "
                                                  "Flower 1.42's SecAgg+ carries unchanged)")
    scale: float | None = Field(
        None, gt=0, description="γ, integer units per unit of the update; default: the largest power of two "
                                "with γS <= 2^16 whose wrap-around bound is below 1e-9")
    rotation: bool = Field(False, description="randomized Hadamard rotation before rounding (pads to 2^k)")
    beta: float = Field(math.exp(-0.5), gt=0, lt=1, description="β of conditional randomized rounding")


class DpFedAvgOptions(BaseModel):
    """Options of ``algorithm: {name: dp-fedavg, options: {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float | None = Field(None, ge=0, description="σ of 004 Alg. 1 (total, with adaptive clipping)")
    target_epsilon: float | None = Field(
        None, gt=0, description="calibrate σ so the paper's claimed ε after `rounds` rounds is this")
    clip_norm: float = Field(
        ..., gt=0, description="S, the L2 bound of each client update (initial S with adaptive_clip)")
    server_lr: float = Field(1.0, gt=0, description="η_g")
    variant: Literal["local", "central"] = "local"
    blur_lambda: float = Field(0.0, ge=0, description="λ of BLUR (004 eq. 5); 0 = off")
    lus_sparsity: float = Field(0.0, ge=0, lt=1, description="c of LUS (004 eq. 14); 0 = off")
    adaptive_clip: AdaptiveClipOptions | None = None
    secure_sum: SecureSumOptions = Field(default_factory=SecureSumOptions)

    @model_validator(mode="after")
    def _one_noise_setting(self) -> DpFedAvgOptions:
        _one_noise_setting(self.noise_multiplier, self.target_epsilon)
        return self


# --------------------------------------------------------------------------- dp-ftrl


class DpFtrlOptions(BaseModel):
    """Options of ``algorithm: {name: dp-ftrl, options: {...}}``: correlated noise for a fleet that
    cannot be sampled (:mod:`dpfl.algorithms.dp_ftrl`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mechanism: Literal["blt", "banded", "tree", "independent"] = Field(
        "blt", description="the noise's correlation across rounds: BLT, banded MF, DP-FTRL's tree, or "
                           "independent noise each round (DP-FedAvg without amplification)")
    noise_multiplier: float | None = Field(None, ge=0, description="σ: std of z per coordinate over the clip norm")
    target_epsilon: float | None = Field(
        None, gt=0, description="calibrate σ so that the schema's worst-case ε (the claim) is this")
    clip_norm: float = Field(..., gt=0, allow_inf_nan=False, description="C: the L2 bound of each client update")
    server_lr: float = Field(1.0, gt=0, description="η: the server step on the noisy mean")
    server_momentum: float = Field(0.0, ge=0, lt=1, description="β of heavy-ball momentum on the server "
                                                                "(the workload the strategy is optimized for)")
    cooldown_rounds: int = Field(0, ge=0, description="the last rounds, over which η decays linearly")
    cooldown_final: float = Field(0.1, gt=0, le=1, description="η's factor at the last round of the cooldown")
    bands: int | None = Field(None, ge=1, description="banded MF: the bands (default: sampling.min_separation)")
    buffers: int = Field(4, ge=1, le=8, description="BLT: the number of buffers d (memory d·|θ|)")
    restart_every: int | None = Field(
        None, ge=1, description="tree: rounds per tree (default: sampling.min_separation, one participation per tree)")
    denominator: float | None = Field(
        None, gt=0, description="the public cohort size the noisy sum is divided by (default: the schema's expected "
                                "cohort)")

    @model_validator(mode="after")
    def _one_noise_setting(self) -> DpFtrlOptions:
        _one_noise_setting(self.noise_multiplier, self.target_epsilon)
        return self


# --------------------------------------------------------------------------- dp-sgd-fedavg


class DpSgdOptions(BaseModel):
    """Options of ``algorithm: {name: dp-sgd-fedavg, options: {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float = Field(..., ge=0, description="z: noise std of each step's gradient sum over C")
    clip_norm: float = Field(..., gt=0, description="C, the per-sample gradient clip norm")
    record_sample_rate: float | None = Field(
        None, gt=0, le=1, description="q: each record's probability of being in a step's batch "
                                      "(default: local.batch_size / |D_k|)")

    @field_validator("noise_multiplier", "clip_norm")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"must be finite. Found {v}")
        return v


# --------------------------------------------------------------------------- udp, udp-crd, udp-lei


class UdpOptions(BaseModel):
    """Options of ``algorithm: {name: udp, options: {...}}`` (000 Alg. 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float | list[float] = Field(..., description="ε_i: one value for all clients or one per client")
    delta: float | list[float] | None = Field(None, description="δ_i (default: privacy.delta)")
    clip_norm: float = Field(..., gt=0, description="C, the per-sample gradient clip norm")
    clip_norm_source: Literal["fixed", "median_unclipped_norms"] = Field(
        "fixed", description="how C was chosen; 'median_unclipped_norms' (000 §5.2) looks at data")
    rounds: int | None = Field(None, ge=1, description="T of Thm 1 (default: the run's `rounds`)")

    @field_validator("epsilon")
    @classmethod
    def _positive_eps(cls, v: float | list[float]) -> float | list[float]:
        values = v if isinstance(v, list) else [v]
        if not values or any(not (math.isfinite(x) and x > 0) for x in values):
            raise ValueError(f"every epsilon must be a finite number > 0. Found {v}")
        return v

    @field_validator("delta")
    @classmethod
    def _delta_range(cls, v: float | list[float] | None) -> float | list[float] | None:
        if v is None:
            return v
        values = v if isinstance(v, list) else [v]
        if not values or any(not 0.0 < x < 1.0 for x in values):
            raise ValueError(f"every delta must be in (0, 1). Found {v}")
        return v


class UdpCrdOptions(UdpOptions):
    """Options of ``udp-crd`` (000 Alg. 2): ``rounds`` is the initial T."""

    threshold: float = Field(1e-3, ge=0, description="ζ: discount when the test-loss decrease is below it")
    discount: float = Field(0.9, gt=0, lt=1, description="β: T ← ⌊β(T − t)⌋ + t")
    trigger: Literal["test-loss", "train-loss-rise"] = Field(
        "test-loss",
        description="'test-loss': 000 Alg. 2 as printed (V on the server's test data, decrease < ζ, "
        "T ← ⌊β(T − t)⌋ + t); 'train-loss-rise': a variant, not the paper's — discount when the "
        "participants' averaged training loss rose, T ← ⌈βT⌉ (the losses leave the clients unnoised: "
        "certified ε = ∞)")


class UdpLeiOptions(UdpOptions):
    """Options of ``udp-lei`` (000 §5.4, ref. [29]): ``rounds`` is the T that sets σ^0."""

    noise_decay: float | None = Field(None, gt=0, lt=1, description="k in σ^t = σ^0 (1 − k t); default 1/(2T)")


# --------------------------------------------------------------------------- nbafl


class NbAflOptions(BaseModel):
    """Options of ``algorithm: {name: nbafl, options: {...}}``.

    Attributes:
        epsilon: the paper's global ε (003 §III-A); ``null`` adds no noise at all (the paper's
            non-private baseline with the same clipping and proximal term).
        clip_norm: C, the L2 bound of each client's local parameters (Alg. 1 line 8).
        prox_mu: μ of the proximal term (Alg. 1 line 6).
        exposures: L <= T, the uplink exposures of each client (003 §II-B); default T.
        weights: ``samples`` (p_i = |D_i| / Σ_cohort |D_j|, eq. 1) or ``uniform`` (p_i = 1/K, the
            choice Theorem 1 and Lemma 4 analyse; identical for equal local data sets).
        downlink_noise: ``paper`` (σ_D of Theorem 1 / Lemma 4) or ``none`` (uplink noise only;
            the claimed ε is then what the paper's formulas give for that noise).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float | None = Field(..., gt=0, description="the paper's global epsilon; null = no noise")
    clip_norm: float = Field(..., gt=0, description="C, the parameter clip norm")
    prox_mu: float = Field(0.0, ge=0, description="mu of the proximal term")
    exposures: int | None = Field(None, ge=1, description="L <= T; default T")
    weights: Literal["samples", "uniform"] = "samples"
    downlink_noise: Literal["paper", "none"] = "paper"


# --------------------------------------------------------------------------- midp-server, midp-client, pmidp-fl


class _Budgets(BaseModel):
    """Where the clients' budgets ε_k (nats) come from: exactly one of three sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float | None = Field(None, gt=0, description="one ε-MI-DP budget (nats) for all")
    epsilons: list[float] | None = Field(None, description="ε_k per client (nats), length N")
    epsilon_mean: float | None = Field(None, description="μ_ε of the paper's draw (002 §VI-B)")
    epsilon_std: float | None = Field(None, ge=0, description="σ_ε of the paper's draw")
    epsilon_floor: float = Field(1.0, gt=0, description="smallest drawn ε_k (the paper: 1)")
    clip_norm: float = Field(..., gt=0, description="C of eq. 4.6 (PMIDP: C_{k,1})")
    weighting: Literal["samples", "uniform"] = Field(
        "samples", description="p_k: |D_k|/|D| (002 eq. 3.2) or 1/K")

    @model_validator(mode="after")
    def _one_source(self) -> _Budgets:
        given = [name for name, v in (("epsilon", self.epsilon), ("epsilons", self.epsilons),
                                      ("epsilon_mean", self.epsilon_mean)) if v is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one budget source: `epsilon`, `epsilons`, or `epsilon_mean` with "
                f"`epsilon_std`. Found {given or 'none'}")
        if (self.epsilon_mean is None) != (self.epsilon_std is None):
            raise ValueError("`epsilon_mean` and `epsilon_std` go together")
        if self.epsilons is not None and not all(math.isfinite(e) and e > 0 for e in self.epsilons):
            raise ValueError(f"`epsilons` must all be finite and > 0. Found {self.epsilons[:5]}")
        return self


class MidpOptions(_Budgets):
    """Options of ``midp-server`` / ``midp-client``."""


class PmidpOptions(_Budgets):
    """Options of ``pmidp-fl`` (Algorithm 2)."""

    clip_lr: float = Field(0.0, ge=0, le=1, description="η_c of eq. 5.18 (0: fixed C)")


# --------------------------------------------------------------------------- ldp-fl


class LdpFlOptions(BaseModel):
    """Options of ``algorithm: {name: ldp-fl, options: {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(..., gt=0, description="per-weight ε of 001 eq. 2")
    range: RangeMode = Field("fixed", description="how clients agree on [c − r, c + r]")
    center: float = Field(0.0, description="c of the fixed range")
    radius: float | None = Field(None, gt=0, description="r of the fixed range (required for `fixed`)")
    range_scale: float = Field(1.0, gt=0, description="adaptive ranges: r = scale × (max − min) "
                               "(private-minmax: r = scale × 2^(mean noisy log2 max|w|))")
    min_radius: float | None = Field(None, gt=0, description="adaptive ranges: smallest r of a layer "
                                     "(default 1e-6; private-minmax: 1e-4)")
    max_radius: float | None = Field(None, gt=0, description="private-minmax: largest r of a layer (default 10)")
    range_noise_multiplier: float | None = Field(
        None, gt=0, description="private-minmax (required): noise std of each client's log2 range report "
        "in units of its L2 sensitivity log2(max_radius / min_radius)·sqrt(L)")
