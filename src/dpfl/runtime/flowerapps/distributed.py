"""Distributed DP for any Flower app: dpfl's integer pipeline and a Skellam noise share on the app's
own train reply, summed by Flower's SecAgg+, decoded and averaged on the server.

A legacy Flower app that already runs SecAgg+ (Flower's ``fl-dp-sa`` pattern) swaps Flower's
central noise for dpfl's distributed noise in a few lines::

    app = ClientApp(client_fn=client_fn,
                    mods=[secaggplus_mod, DistributedDpMod(1.0, 0.5, 10)])
    strategy = DistributedDpLegacyStrategy(
        FedAvg(...), clip_norm=1.0, noise_multiplier=0.5, expected_clients=10,
        delta=1e-5, num_rounds=3)
    workflow = DefaultWorkflow(
        fit_workflow=SecAggPlusWorkflow(num_shares=7, reconstruction_threshold=4))

The first mod in the list is the outermost: :class:`DistributedDpMod` runs *inside*
``secaggplus_mod``, which calls it only at the stage "collect masked vectors".

**Client** (:class:`DistributedDpMod`): it reads the model the server sent (the FitIns), calls the
app, takes the update (reply − received, flattened), clips it to S, scales it by γ and rounds it
with conditional randomized rounding (L2 <= Δ2 enforced; :mod:`dpfl.privacy.mechanisms.integer`,
Kairouz, Liu, Steinke 2021, Thm 23), adds a Skellam share Sk(μ/m) (Agarwal, Kairouz, Liu 2021,
§3: sums of independent Skellams are Skellam) with μ = (zΔ2)² (:func:`skellam_sum_variance`) and m
the expected cohort, and reduces mod Q. Each residue r ∈ [0, Q) is sent as the float
x = r·(2c/Q) − c, with c = ``clipping_range`` and Q = ``quantization_range`` of the app's
``SecAggPlusWorkflow`` (read from ``secaggplus_mod``'s state), and ``num_examples`` = ``max_weight``.
``secaggplus_mod`` then multiplies by round(num_examples/max_weight·Q)/Q = 1, quantizes
(clip(x, −c, c) + c)·Q/(2c) = r — exact in float64 when c and Q are powers of two (2c/Q is then a
power of two and r·2c/Q − c needs Q/2 <= 2^53 significant units), and the stochastic rounding of
an integer never moves it — masks it and the server sums mod M (``modulus_range``).

**Server** (:class:`DistributedDpLegacyStrategy`): Flower's ``unmask_stage`` hands the strategy
agg = (T·2c/Q − c − (n − 1)c)·Q/W with T = Σ r_k (mod M) and W = Σ weights = n·Q, i.e.
agg = T·2c/(Q·n) − c, so T = (agg + c)·Q·n/(2c) (rounded; checked to be within
max(1e-6, 8·n·Q·2^-53) of an integer: the float64 roundings of Flower's average and of this
inversion). T mod Q is the modular sum of the residues (M is a multiple of Q). The wrapper decodes
it (centred residues, ÷γ), divides by the fixed denominator m (``expected_clients``, as dpfl's
DP-FedAvg does: 004 Alg. 1 with a fixed denominator), adds it to the current model, gives every
result that model and calls the app's strategy (FedAvg of identical vectors is the vector).

**Certificates.** The server sees only the SecAgg+ sum, which carries the shares of the clients
whose vectors are in it: n·μ/m. With the whole cohort (n = m) that is μ, and the server's
certificate is the public's (the broadcast is a fixed decoding of the same sum). If fewer than m
vectors arrive the sum carries *less* noise (n·μ/m): the server's release records exactly that
variance, and the server tops the sum up with Sk((m − n)·μ/m) from its own ChaCha20 stream (a fresh
``os.urandom`` key) before it broadcasts, so that the public still sees Sk(μ) (the top-up does not protect
against the server, which knows it). Each round is recorded in a :class:`PrivacyLedger` as Skellam
releases (:class:`SkellamRelease`; AKL21 Thm 3.5, add/remove of one client with its noise share present in
both neighbours), unamplified: the server knows the cohort (visible participation). Assumed and
said in the report: no client colludes with the server (a colluding client's share could be
subtracted); the app's fit metrics reach the server in the clear (outside the certificate).

**Hidden participation** (``DistributedDpMod(..., population=N)`` and
``DistributedDpLegacyStrategy(..., participation="hidden", population_size=N)``, the app's strategy
sending every round to all N nodes, e.g. ``FedAvg(fraction_fit=1.0)``): every node adds a share
μ/N to every sum, and a secret coin of probability q = m/N, drawn on the client, decides whether its
update is in it (encoded all the same, then zeroed: the work and the upload do not depend on the
coin). The sum is a secret Poisson sample, so both observers' releases are amplified by it
(``SkellamRelease(..., client_ids=None, amplifiable=True)``, priced by the binomial expansion of
:mod:`dpfl.privacy.releases.skellam`), as dpfl's DP-FedAvg records hidden participation.

Refused (:class:`ConfigError`, naming the value): c or Q not a power of two, Q outside
[2^8, 2^31] (Flower's quantizer casts to int32), M not a multiple of Q or M <= (shares)·Q (the
weight column W = n·Q would wrap), a fractional ``max_weight``, a client reporting other settings
or another γ than the server (a client without the mod reports its own ``num_examples``), a cohort
or a sum of more vectors than the planned shares (m visible, N hidden).

**Masks.** Importing this module installs dpfl's ChaCha20 mask expansion in Flower's SecAgg+
(:mod:`.masks`; Flower 1.42 expands masks with ``np.random.RandomState`` seeded by a 32-bit fold of
the seed). The ClientApp (which imports :class:`DistributedDpMod` from here) and the ServerApp
(:class:`DistributedDpLegacyStrategy`) then mask and unmask alike; ``modulus_range`` must be a power
of two. The noise shares, the top-up and the coins come from ChaCha20 under a fresh 256-bit key from
``os.urandom`` (:class:`dpfl.rng.CsprngGenerator`, numpy's samplers over the keystream); the
released sum is an integer vector, so the low-bit attacks on floating-point noise have nothing to
read. The rounding comes from a torch generator (its randomness is not what the certificate prices:
Δ2 is enforced whatever it draws). How many times the
rounding is redrawn depends slightly on the update: a response-time side channel not modelled.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

import numpy as np
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import validate_delta
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.calibration.dp_fedavg import skellam_share_variance
from dpfl.privacy.mechanisms.integer import IntegerPipeline
from dpfl.privacy.releases import Release, SkellamRelease
from dpfl.rng import CsprngGenerator
from dpfl.runtime.flower import masks
from dpfl.runtime.flowerapps.certified import LegacyWrapper, _fmt, _log

# the ServerApp (the wrapper) and every ClientApp (the mod) import this module: both mask and unmask
# with dpfl's ChaCha20 expansion instead of Flower's 32-bit-seeded MT19937 (:mod:`.masks`)
masks.install()

__all__ = [
    "DistributedDpLegacyStrategy",
    "DistributedDpMod",
    "DistributedDpPlan",
    "SecAggPlusSettings",
    "client_residues",
    "clip_l2",
    "distributed_dp_plan",
    "floats_to_residue_sum",
    "recovery_tolerance",
    "residues_to_floats",
]

METRIC_PREFIX = "dpfl-dd-"
SEEDED_METRIC = f"{METRIC_PREFIX}seeded"
"""1 when the client drew its noise from a seed (tests): the server's report says the figures then
assume the seed is secret."""
"""Prefix of the FitRes metrics the mod adds (its settings, public numbers) and the server strips."""

DEFAULT_BETA = math.exp(-0.5)
MIN_BITS, MAX_BITS = 8, 31
RECOVERY_TOLERANCE = 1e-6


def _power_of_two_exponent(value: float) -> int | None:
    """k with value == 2^k exactly (k may be negative), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    mantissa, exponent = math.frexp(float(value))
    return exponent - 1 if mantissa == 0.5 else None


@dataclass(frozen=True)
class SecAggPlusSettings:
    """The numbers of Flower's ``SecAggPlusWorkflow`` that carry the residues (module docstring).

    Attributes:
        clipping_range: c (a power of two).
        quantization_range: Q = 2^bits (8 <= bits <= 31).
        modulus_range: M, a multiple of Q.
        max_weight: the weight a client reports as ``num_examples`` (an integer value).
    """

    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32
    max_weight: float = 1000.0

    def __post_init__(self) -> None:
        if _power_of_two_exponent(self.clipping_range) is None:
            raise ConfigError(f"SecAgg+ `clipping_range` c must be a power of two for residues to pass Flower's "
                              f"quantizer exactly. Found {self.clipping_range!r}.")
        bits = _power_of_two_exponent(self.quantization_range)
        if bits is None or not isinstance(self.quantization_range, int) or not MIN_BITS <= bits <= MAX_BITS:
            raise ConfigError(f"SecAgg+ `quantization_range` Q must be a power of two 2^b with {MIN_BITS} <= b <= "
                              f"{MAX_BITS} (Flower's quantizer casts to int32). Found {self.quantization_range!r}.")
        m = self.modulus_range
        if (isinstance(m, bool) or not isinstance(m, int) or m <= self.quantization_range
                or _power_of_two_exponent(m) is None):
            raise ConfigError(f"SecAgg+ `modulus_range` M must be a power of two above Q = {self.quantization_range} "
                              f"(the sum is reduced mod Q after mod M; ChaCha20 masks are uniform on a power of two). "
                              f"Found {m!r}.")
        w = self.max_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 1 or float(w) != int(w):
            raise ConfigError(f"SecAgg+ `max_weight` must be an integer value >= 1 (a client reports it as "
                              f"num_examples). Found {w!r}.")

    @property
    def bits(self) -> int:
        return int(self.quantization_range).bit_length() - 1

    @classmethod
    def from_workflow(cls, workflow: Any) -> SecAggPlusSettings:
        """The settings of a ``SecAggPlusWorkflow``."""
        return cls(float(workflow.clipping_range), int(workflow.quantization_range), int(workflow.modulus_range),
                   float(workflow.max_weight))

    @classmethod
    def from_state(cls, state: Any) -> SecAggPlusSettings:
        """The settings ``secaggplus_mod`` stored in the client's state (its ConfigRecord)."""
        try:
            return cls(float(state["clipping_range"]), int(state["target_range"]), int(state["mod_range"]),
                       float(state["max_weight"]))
        except KeyError as err:
            raise ConfigError(f"secaggplus_mod's state lacks {err}: DistributedDpMod runs inside secaggplus_mod "
                              "at its stage 'collect masked vectors'.") from err

    def check_cohort(self, expected_clients: int) -> None:
        """The weight column W = n·Q must stay below M, and the float inversion exact, for m clients."""
        if expected_clients * self.quantization_range >= self.modulus_range:
            raise ConfigError(f"SecAgg+ `modulus_range` M = {self.modulus_range} <= m·Q = {expected_clients}·"
                              f"{self.quantization_range}: the workflow's weight column would wrap; raise M.")
        if recovery_tolerance(expected_clients, self.quantization_range) >= 0.1:
            raise ConfigError(f"{expected_clients} clients with Q = 2^{self.bits}: Flower's float64 average can no "
                              "longer be inverted exactly; lower `quantization_range`.")


def residues_to_floats(residues: np.ndarray, clipping_range: float, quantization_range: int) -> np.ndarray:
    """x = r·(2c/Q) − c (float64): what Flower's quantizer maps back to r exactly (module docstring)."""
    r = np.asarray(residues, dtype=np.int64)
    if r.size and (int(r.min()) < 0 or int(r.max()) >= quantization_range):
        raise ConfigError(f"residues must lie in [0, {quantization_range}).")
    return r.astype(np.float64) * (2.0 * clipping_range / quantization_range) - clipping_range


def recovery_tolerance(n: int, quantization_range: int) -> float:
    """How far from an integer a recovered sum may lie: max(1e-6, 8·n·Q·2^-53) (float64 roundings)."""
    return max(RECOVERY_TOLERANCE, 8.0 * n * quantization_range * 2.0**-53)


def floats_to_residue_sum(aggregate: np.ndarray, n: int, clipping_range: float, quantization_range: int) -> np.ndarray:
    """T mod Q from Flower's dequantized average of n clients: T = (agg + c)·Q·n/(2c) (module docstring).

    Raises:
        ConfigError: a recovered value not within :func:`recovery_tolerance` of an integer (a client
            did not send residues with weight 1, or the settings differ).
    """
    c, q = float(clipping_range), int(quantization_range)
    total = (np.asarray(aggregate, dtype=np.float64) + c) * (q * n / (2.0 * c))
    nearest = np.rint(total)
    off = float(np.max(np.abs(total - nearest))) if total.size else 0.0
    if not off <= recovery_tolerance(n, q):
        raise ConfigError(f"the SecAgg+ sum of {n} clients is not a sum of residues (off an integer by {off:.3g}): "
                          "a client did not run DistributedDpMod or used other SecAgg+ settings.")
    return np.mod(nearest.astype(np.int64), q)


@dataclass(frozen=True)
class DistributedDpPlan:
    """The integer pipeline and noise both sides derive from the same public numbers.

    Attributes:
        pipeline: the integer pipeline (γ, b = log2 Q, S, β; no rotation).
        sum_variance: μ = (zΔ2)², the Skellam variance of a sum with all its shares.
        share_variance: μ/shares, each client's share.
        expected_clients: m, the fixed denominator (visible: the cohort; hidden: qN).
        shares: the clients adding a share each round: m (visible) or N (hidden participation).
        hidden: hidden participation (every node every round, a secret coin of probability q = m/N).
        wrap_log_probability: log of the bound on a wrap around 2^b of a sum of ``shares`` vectors plus Sk(μ).
    """

    pipeline: IntegerPipeline
    sum_variance: float
    share_variance: float
    expected_clients: int
    wrap_log_probability: float
    shares: int = 0
    hidden: bool = False

    @property
    def sample_rate(self) -> float:
        """q: the probability of each client's secret coin (1 with visible participation)."""
        return self.expected_clients / self.shares if self.hidden else 1.0


def distributed_dp_plan(dim: int, *, clip_norm: float, noise_multiplier: float, expected_clients: int, bits: int,
                        scale: float | None = None, beta: float = DEFAULT_BETA,
                        population: int | None = None) -> DistributedDpPlan:
    """γ (given, or dpfl's default: the largest power of two with γS <= 2^16 whose wrap bound for the
    sum's contributors is below 1e-9, :func:`dpfl.algorithms.dp_fedavg.secure_sum_calibration`), Δ2,
    μ = (zΔ2)² (AKL21 §3, :func:`skellam_sum_variance`) and the share μ/m — or, with ``population`` N
    (hidden participation: every node adds a share, a secret coin of probability q = m/N decides
    whether its update is in the sum), μ/N with up to N contributors (:func:`skellam_share_variance`).

    Raises:
        ConfigError: invalid numbers, or a wrap bound above 1e-6 per round.
    """
    from dpfl.algorithms.dp_fedavg import secure_sum_calibration
    from dpfl.algorithms.options import SecureSumOptions

    if isinstance(expected_clients, bool) or not isinstance(expected_clients, int) or expected_clients < 1:
        raise ConfigError(f"`expected_clients` must be a positive integer. Found {expected_clients!r}.")
    if not isinstance(noise_multiplier, (int, float)) or not noise_multiplier > 0 or math.isinf(noise_multiplier):
        raise ConfigError(f"`noise_multiplier` must be a finite number > 0. Found {noise_multiplier!r}.")
    hidden = population is not None
    if hidden and (isinstance(population, bool) or not isinstance(population, int) or population < expected_clients):
        raise ConfigError(f"`population` (hidden participation) must be an integer >= expected_clients = "
                          f"{expected_clients}. Found {population!r}.")
    shares = int(population) if population is not None else expected_clients
    try:
        options = SecureSumOptions(bits=bits, scale=scale, rotation=False, beta=beta)
    except ValueError as err:
        raise ConfigError(f"distributed DP: invalid bits/scale/beta ({bits!r}, {scale!r}, {beta!r}): {err}") from err
    cal = secure_sum_calibration(options, dim=dim, clip_norm=float(clip_norm), noise_multiplier=float(noise_multiplier),
                                 num_clients=shares, max_cohort=expected_clients, hidden=hidden, colluding=0)
    pipe = cal.pipeline(dim, float(clip_norm))
    return DistributedDpPlan(pipe, cal.variance, skellam_share_variance(cal.variance, shares), expected_clients,
                             cal.wrap_log_probability, shares, hidden)


def _generator(seed: int | None, *key: int) -> torch.Generator:
    """A fresh generator: 64 bits of ``os.urandom`` (seed None), else derived from (seed, key) (tests)."""
    gen = torch.Generator()
    if seed is None:
        value = int.from_bytes(os.urandom(8), "little")
    else:
        payload = b"".join(int(k).to_bytes(16, "little", signed=True) for k in (seed, *key))
        value = int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little")
    gen.manual_seed(value)
    return gen


def _rng(seed: int | None, *key: int) -> np.random.Generator:
    """A fresh stream for the noise shares, the top-up and the coins: ChaCha20 under a fresh 256-bit
    key from ``os.urandom`` (seed None: every deployment), else PCG64 derived from (seed, key) (tests).
    Not a torch generator: torch's CPU generator keeps 32 bits of its seed."""
    if seed is None:
        return CsprngGenerator().numpy
    else:
        payload = b"".join(int(k).to_bytes(16, "little", signed=True) for k in (seed, *key))
        value = int.from_bytes(hashlib.blake2b(payload, digest_size=16).digest(), "little")
    return np.random.Generator(np.random.PCG64(value))


def skellam_share(size: int, variance: float, rng: Any) -> np.ndarray:
    """Sk(variance) per entry, int64: Poisson(variance/2) − Poisson(variance/2) (numpy's exact
    Poisson sampler; Agarwal, Kairouz, Liu 2021 §3). ``rng``: a numpy ``Generator`` (PCG64), or a
    ChaCha20 :class:`dpfl.rng.CsprngGenerator`, whose numpy generator then draws."""

    if isinstance(rng, CsprngGenerator):
        rng = rng.numpy
    if not isinstance(rng, np.random.Generator):
        raise ConfigError("a Skellam share draws from a numpy Generator or a CsprngGenerator. "
                          f"Found {type(rng).__name__}.")
    if variance < 0 or not math.isfinite(variance):
        raise ConfigError(f"the Skellam variance must be finite and >= 0. Found {variance!r}.")
    if variance == 0:
        return np.zeros(size, dtype=np.int64)
    return rng.poisson(variance / 2, size).astype(np.int64) - rng.poisson(variance / 2, size).astype(np.int64)


def _key(group: str) -> int:
    return int.from_bytes(hashlib.blake2b(group.encode(), digest_size=8).digest(), "little")


def _flat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    if not arrays:
        return np.zeros(0, dtype=np.float64)
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])


def clip_l2(update: np.ndarray, clip_norm: float) -> np.ndarray:
    """update·min(1, S/‖update‖₂) (float64)."""
    norm = float(np.linalg.norm(update))
    return update * min(1.0, clip_norm / norm) if norm > 0 else update


def client_residues(update: np.ndarray, plan: DistributedDpPlan, rounding: torch.Generator,
                    noise: np.random.Generator, include: bool = True) -> np.ndarray:
    """A client's upload: clip(update) encoded (γ, conditional rounding) plus its Skellam share, mod 2^b.
    ``include=False`` (a secret coin of hidden participation): the update is encoded all the same (the
    same work and draws) and then zeroed — a zero vector is within Δ2 too — the share is added. A
    non-finite update is encoded as zero (the upload and its timing must not depend on it failing)."""
    pipe = plan.pipeline
    update = np.asarray(update, dtype=np.float64)
    if not np.all(np.isfinite(update)):
        update = np.zeros_like(update)
    clipped = torch.from_numpy(clip_l2(update, pipe.clip_norm)).unsqueeze(0)
    ints = pipe.encode(clipped, [rounding])[0] * int(bool(include))
    ints = ints + torch.from_numpy(skellam_share(pipe.padded_dim, plan.share_variance, noise))
    return pipe.to_residues(ints).numpy()


def _plan_metrics(plan: DistributedDpPlan, settings: SecAggPlusSettings) -> dict[str, Any]:
    pipe = plan.pipeline
    return {f"{METRIC_PREFIX}{k}": v for k, v in {
        "dim": pipe.dim, "bits": pipe.bits, "scale": float(pipe.scale), "share-variance": float(plan.share_variance),
        "sample-rate": float(plan.sample_rate),
        "clipping-range": float(settings.clipping_range), "modulus-range": int(settings.modulus_range),
        "max-weight": float(settings.max_weight)}.items()}


class DistributedDpMod:
    """A legacy ClientApp mod: dpfl's integer pipeline and a Skellam share on the app's train reply.

    Place it inside ``secaggplus_mod``: ``ClientApp(client_fn, mods=[secaggplus_mod, DistributedDpMod(...)])``.
    It reports ``num_examples`` = ``max_weight`` whatever the client holds: the server's
    :class:`DistributedDpLegacyStrategy` averages unweighted over the fixed denominator m, replacing
    the app's example weighting.

    Args:
        clip_norm: S, the L2 bound of the update (reply − received model).
        noise_multiplier: z, the noise of the SecAgg+ sum of ``expected_clients`` shares against Δ2.
        expected_clients: m, the cohort size each round (the shares the noise is split over), or with
            ``population`` the expected cohort qN (the fixed denominator).
        population: N, hidden participation: every node takes part in every round's SecAgg+ sum with its
            share μ/N, and a secret coin of probability q = m/N (from the client's own stream) decides
            whether its update is in it; the server must send every round to all N nodes.
        seed: derive the rounding and noise streams from it (tests only: whoever knows the seed — the
            server that ships the ClientApp included — can remove the noise; the client reports it and
            the server's report says so); None (default): ``os.urandom``.
        beta: β of conditional randomized rounding.
        scale: γ (default: dpfl's, :func:`distributed_dp_plan`); the server must use the same.
        send_metrics: pass the app's fit metrics on (default False: they would reach the server in the
            clear, outside the certificate).
    """

    def __init__(self, clip_norm: float, noise_multiplier: float, expected_clients: int, *, seed: int | None = None,
                 beta: float = DEFAULT_BETA, scale: float | None = None, send_metrics: bool = False,
                 population: int | None = None) -> None:
        if not isinstance(clip_norm, (int, float)) or not clip_norm > 0 or math.isinf(clip_norm):
            raise ConfigError(f"`clip_norm` must be a finite number > 0. Found {clip_norm!r}.")
        self.clip_norm = float(clip_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.expected_clients = expected_clients
        self.seed = seed
        self.beta = beta
        self.scale = scale
        self.send_metrics = send_metrics
        self.population = population
        distributed_dp_plan(1, clip_norm=self.clip_norm, noise_multiplier=self.noise_multiplier,
                            expected_clients=expected_clients, bits=MAX_BITS, scale=scale, beta=beta,
                            population=population)  # validates
        self.__name__ = type(self).__name__

    def plan(self, dim: int, bits: int) -> DistributedDpPlan:
        return distributed_dp_plan(dim, clip_norm=self.clip_norm, noise_multiplier=self.noise_multiplier,
                                   expected_clients=self.expected_clients, bits=bits, scale=self.scale,
                                   beta=self.beta, population=self.population)

    def included(self, node: int, group: str, sample_rate: float) -> bool:
        """The secret coin of hidden participation for this node and round (message group): Bernoulli(q)
        from the client's own stream (``os.urandom``; with a seed, reproducible for tests)."""
        return bool(_rng(self.seed, node, _key(group), 2).random() < sample_rate)

    @property
    def shares(self) -> int:
        return int(self.population if self.population is not None else self.expected_clients)

    def __call__(self, msg: Any, ctxt: Any, call_next: Any) -> Any:
        from flwr.app.message_type import MessageType
        from flwr.common import FitRes, ndarrays_to_parameters, parameters_to_ndarrays
        from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE
        from flwr.compat.common import recorddict_compat as compat

        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        if RECORD_KEY_STATE not in ctxt.state.config_records:
            raise ConfigError("DistributedDpMod found no SecAgg+ state: place it inside secaggplus_mod, "
                              "ClientApp(mods=[secaggplus_mod, DistributedDpMod(...)]).")
        settings = SecAggPlusSettings.from_state(ctxt.state.config_records[RECORD_KEY_STATE])
        settings.check_cohort(self.shares)
        received = parameters_to_ndarrays(compat.recorddict_to_fitins(msg.content, keep_input=True).parameters)
        out = call_next(msg, ctxt)
        if out.has_error():
            return out
        fitres = compat.recorddict_to_fitres(out.content, keep_input=True)
        reply = parameters_to_ndarrays(fitres.parameters)
        if [np.shape(a) for a in reply] != [np.shape(a) for a in received]:
            raise ConfigError("DistributedDpMod: the app's reply does not have the shapes of the model it received.")
        update = _flat(reply) - _flat(received)
        plan = self.plan(update.size, settings.bits)
        node, group = int(msg.metadata.dst_node_id), str(msg.metadata.group_id)
        include = self.included(node, group, plan.sample_rate) if plan.hidden else True
        residues = client_residues(update, plan, _generator(self.seed, node, _key(group), 0),
                                   _rng(self.seed, node, _key(group), 1), include)
        floats = residues_to_floats(residues, settings.clipping_range, settings.quantization_range)
        metrics = dict(fitres.metrics) if self.send_metrics else {}
        metrics.update(_plan_metrics(plan, settings))
        metrics[SEEDED_METRIC] = int(self.seed is not None)
        new = FitRes(fitres.status, ndarrays_to_parameters([floats]), int(settings.max_weight), metrics)
        out.content = compat.fitres_to_recorddict(new, keep_input=True)
        return out


# --------------------------------------------------------------------------- server


@dataclass
class _Rounds:
    ledger: PrivacyLedger | None = None
    clients: dict[int, int] = field(default_factory=dict)
    taken_part: dict[int, int] = field(default_factory=dict)
    lines: list[dict[str, Any]] = field(default_factory=list)
    shortfalls: list[str] = field(default_factory=list)
    seeded_rounds: list[int] = field(default_factory=list)
    metric_names: set[str] = field(default_factory=set)


class DistributedDpLegacyStrategy(LegacyWrapper):
    """A legacy Flower strategy around the app's own, for ``SecAggPlusWorkflow`` with :class:`DistributedDpMod`.

    **Weighting.** Distributed mode replaces the app's example weighting (FedAvg by ``num_examples``)
    by an unweighted mean over the fixed denominator: the decoded SecAgg+ sum of the clipped updates
    divided by ``expected_clients`` m, however many vectors arrived (every client reports
    ``num_examples`` = ``max_weight``, so the app's strategy cannot weight them). Logged once at the
    first round.

    Args:
        strategy: the app's strategy (e.g. ``FedAvg``; no Flower DP wrapper: the clients add the noise).
        clip_norm, noise_multiplier, expected_clients: as given to :class:`DistributedDpMod`.
        delta: δ of the certificates.
        num_rounds: log the final certificates after this round.
        secagg: the app's ``SecAggPlusWorkflow`` or :class:`SecAggPlusSettings` (default: Flower's defaults).
        beta, scale: as given to :class:`DistributedDpMod`.
        population_size: the number of nodes (default: those connected at the first round).
        seed: the server's top-up stream (tests); None: ``os.urandom``.
        participation: "visible" (default: the server knows the cohort its strategy samples) or "hidden"
            (the strategy sends every round to all ``population_size`` nodes, e.g. FedAvg with
            ``fraction_fit=1.0``; the clients' ``DistributedDpMod(..., population=N)`` flip their secret
            coins; every release is amplified by the Poisson sample of rate q = m/N, the server's too).
    """

    def __init__(self, strategy: Any, *, clip_norm: float, noise_multiplier: float, expected_clients: int,
                 delta: float, num_rounds: int | None = None, secagg: Any = None, beta: float = DEFAULT_BETA,
                 scale: float | None = None, population_size: int | None = None, seed: int | None = None,
                 participation: str = "visible") -> None:
        super().__init__()
        self.strategy = strategy
        if participation not in ("visible", "hidden"):
            raise ConfigError(f"`participation` must be 'visible' or 'hidden'. Found {participation!r}.")
        if participation == "hidden" and population_size is None:
            raise ConfigError("participation='hidden' needs population_size (N: every node adds a share μ/N).")
        self.hidden = participation == "hidden"
        self.mod = DistributedDpMod(clip_norm, noise_multiplier, expected_clients, beta=beta, scale=scale,
                                    population=population_size if self.hidden else None)
        if secagg is None:
            secagg = SecAggPlusSettings()
        self.settings = secagg if isinstance(secagg, SecAggPlusSettings) else SecAggPlusSettings.from_workflow(secagg)
        self.settings.check_cohort(self.mod.shares)
        self.delta = validate_delta(delta)
        self.num_rounds = num_rounds
        self.population_size = population_size
        self.seed = seed
        self.rounds = _Rounds()
        self._current: Any = None
        self.weighting = (f"dpfl distributed DP: the aggregate is an unweighted mean over the fixed denominator — the "
                          f"SecAgg+ sum of the clipped updates divided by expected_clients = {self.expected_clients}, "
                          f"however many arrive; it replaces the example weighting of {type(strategy).__name__} "
                          f"(num_examples), since every client reports num_examples = max_weight = "
                          f"{self.settings.max_weight:g}")

    def __repr__(self) -> str:
        return f"dpfl distributed DP around {self.strategy!r}"

    @property
    def expected_clients(self) -> int:
        return int(self.mod.expected_clients)

    # ------------------------------------------------------------------ Strategy

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list[Any]:
        self._current = parameters
        pairs = list(self.strategy.configure_fit(server_round, parameters, client_manager))
        self._start(p.node_id for p in client_manager.all().values())
        if self.hidden and len(pairs) != self.mod.shares:
            _log(WARNING, f"dpfl: hidden participation sends every round to all {self.mod.shares} nodes; the "
                          f"strategy configured {len(pairs)} (fraction_fit=1.0): the sum will carry fewer shares")
        if len(pairs) > self.mod.shares:
            fix = "population_size to the number of nodes" if self.hidden else "expected_clients to the cohort size"
            raise ConfigError(f"the strategy sampled {len(pairs)} clients for round {server_round}, more than the "
                              f"{self.mod.shares} shares the noise is split over: set {fix}.")
        return pairs

    def _start(self, nodes: Any) -> None:
        if self.rounds.ledger is not None:
            return
        ids = sorted(int(n) for n in nodes)
        n = self.population_size or len(ids)
        if n < len(ids):
            raise ConfigError(f"`population_size` ({n}) is below the {len(ids)} nodes connected.")
        self.rounds.clients = {node: i for i, node in enumerate(ids)}
        _log(INFO, self.weighting)  # once, at the first round
        sampler = {"kind": "poisson", "sample_rate": self.mod.expected_clients / n} if self.hidden else {"kind": "all"}
        self.rounds.ledger = PrivacyLedger(num_clients=n, sampler=sampler, delta=self.delta, relation="add_remove",
                                           pld_every=0)

    def _client_of(self, node: int) -> int:
        assert self.rounds.ledger is not None
        if node not in self.rounds.clients:
            if len(self.rounds.clients) >= self.rounds.ledger.num_clients:
                raise ConfigError(f"node {node} joined beyond the population of {self.rounds.ledger.num_clients} "
                                  "nodes: pass population_size=")
            self.rounds.clients[node] = len(self.rounds.clients)
        return self.rounds.clients[node]

    def plan(self, dim: int) -> DistributedDpPlan:
        return self.mod.plan(dim, self.settings.bits)

    def releases(self, plan: DistributedDpPlan, ids: Sequence[int]) -> list[Release]:
        """What the server and the public see of a round whose SecAgg+ sum holds ``ids``' vectors:
        the server n·μ/shares (the shares in the sum), the public μ (the sum topped up to all shares).
        Visible participation: charged to ``ids``, unamplified; hidden: every client's coin is secret,
        both releases amplified by the Poisson sample (``client_ids=None``, as dpfl's DP-FedAvg records
        hidden participation)."""
        pipe = plan.pipeline
        d2, d1 = pipe.l2_sensitivity, pipe.l1_sensitivity
        arrived = len(ids) * plan.share_variance
        public = max(plan.sum_variance, arrived)
        who = None if plan.hidden else tuple(ids)
        return [SkellamRelease("server", arrived, d2, d1, who, amplifiable=plan.hidden),
                SkellamRelease("public", public, d2, d1, who, amplifiable=plan.hidden)]

    def _check_results(self, results: list[Any], plan: DistributedDpPlan) -> None:
        want = _plan_metrics(plan, self.settings)
        if len(results) > 1 and len({id(r.parameters) for _, r in results}) > 1:
            raise ConfigError("the results carry different parameters: the app does not run SecAggPlusWorkflow "
                              "(the server would see each upload).")
        for proxy, res in results:
            if int(res.num_examples) != int(self.settings.max_weight):
                raise ConfigError(f"node {proxy.node_id} reported num_examples = {res.num_examples}, not max_weight = "
                                  f"{self.settings.max_weight:g}: it does not run DistributedDpMod.")
            for key, value in want.items():
                got = res.metrics.get(key)
                if got is None or not math.isclose(float(got), float(value), rel_tol=1e-12):
                    raise ConfigError(f"node {proxy.node_id} used {key[len(METRIC_PREFIX):]} = {got!r}, the server "
                                      f"{value!r}: the client's DistributedDpMod and the server's settings differ.")

    def aggregate_fit(self, server_round: int, results: list[Any], failures: list[Any]) -> tuple[Any, Any]:
        from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

        if not results:
            return self.strategy.aggregate_fit(server_round, results, failures)
        if self._current is None:
            raise ConfigError("aggregate_fit before configure_fit: the wrapper needs the model it sent to decode "
                              "the update.")
        current = parameters_to_ndarrays(self._current)
        flat = _flat(current)
        plan = self.plan(flat.size)
        n = len(results)
        nodes = [int(p.node_id) for p, _ in results]
        try:
            self._check_results(results, plan)
            if n > plan.shares:
                raise ConfigError(f"{n} vectors in the SecAgg+ sum of round {server_round}, more than the "
                                  f"{plan.shares} shares planned.")
        except ConfigError:
            # the server has seen the sum already: recorded before the refusal (as far as it is priceable)
            if n <= plan.shares and len({id(r.parameters) for _, r in results}) <= 1:
                self._record(server_round, plan, nodes, released=False)
            raise
        if any(int(res.metrics.get(SEEDED_METRIC, 0)) for _, res in results):
            self.rounds.seeded_rounds.append(server_round)
            _log(WARNING, f"dpfl: round {server_round}: the clients' noise was drawn from a seed (tests only): "
                          "whoever knows it can remove the noise")
        agg = parameters_to_ndarrays(results[0][1].parameters)
        pipe = plan.pipeline
        if len(agg) != 1 or agg[0].shape != (pipe.padded_dim,):
            raise ConfigError(f"the SecAgg+ sum has shapes {[a.shape for a in agg]}, expected [({pipe.padded_dim},)].")
        s = self.settings
        total = torch.from_numpy(floats_to_residue_sum(agg[0], n, s.clipping_range, s.quantization_range))
        missing = plan.shares - n
        if missing > 0:
            # fewer shares than planned: the sum carries n·μ/m (recorded for the server); top it up to μ for
            # the broadcast from the server's own stream (module docstring)
            topup = skellam_share(pipe.padded_dim, missing * plan.share_variance, _rng(self.seed, server_round, -1))
            total = total + torch.from_numpy(topup)
            self.rounds.shortfalls.append(f"round {server_round}: {n} of {plan.shares} vectors arrived; the "
                                          f"SecAgg+ sum carried {n}/{plan.shares} of the noise (priced for "
                                          "the server), the server topped it up for the broadcast")
            _log(WARNING, f"dpfl: {self.rounds.shortfalls[-1]}")
        mean = pipe.decode(pipe.to_residues(total)).numpy() / self.expected_clients
        new_flat = flat + mean
        arrays, at = [], 0
        for a in current:
            arrays.append(new_flat[at:at + a.size].reshape(a.shape).astype(a.dtype))
            at += a.size
        params = ndarrays_to_parameters(arrays)
        for _, res in results:
            self.rounds.metric_names.update(k for k in res.metrics if not k.startswith(METRIC_PREFIX))
            res.parameters = params
            res.metrics = {k: v for k, v in res.metrics.items() if not k.startswith(METRIC_PREFIX)}
        out, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        # the server has seen the sum whether or not the app's strategy releases a model
        self._record(server_round, plan, nodes, released=out is not None)
        if server_round == self.num_rounds:
            for line in self.report():
                _log(INFO, line)
        return out, metrics

    def _record(self, server_round: int, plan: DistributedDpPlan, nodes: list[int], released: bool = True) -> None:
        ledger = self.rounds.ledger
        assert ledger is not None
        ids = [self._client_of(n) for n in nodes]
        releases = [r for r in self.releases(plan, ids) if released or r.observer == "server"]
        ledger.record_round(ledger.rounds_recorded, releases, sampling=ledger.sampling, participants=ids,
                            certify_round=False)
        for cid in ids:
            self.rounds.taken_part[cid] = self.rounds.taken_part.get(cid, 0) + 1
        eps = self.epsilons("rdp")
        mode = f" (hidden participation, q = {plan.sample_rate:.4g})" if plan.hidden else ""
        self.rounds.lines.append({"round": server_round, **eps})
        _log(INFO, f"dpfl round {server_round}: certified ε at δ = {self.delta:g} (RDP, worst client): "
                   f"server {_fmt(eps['server'])}, public {_fmt(eps['public'])} · distributed Skellam noise, "
                   f"{len(nodes)} of {plan.shares} shares in the SecAgg+ sum{mode}")

    def epsilons(self, method: str = "best") -> dict[str, float]:
        ledger = self.rounds.ledger
        if ledger is None or ledger.rounds_recorded == 0:
            return {"server": 0.0, "public": 0.0}
        return {obs: float(ledger.certify(obs, method=method).epsilon)  # type: ignore[arg-type]
                for obs in ("server", "public")}

    def report(self) -> list[str]:
        """The run's certificates as lines for Flower's log (logged after ``num_rounds``)."""
        ledger = self.rounds.ledger
        if ledger is None or ledger.rounds_recorded == 0:
            return ["dpfl: no aggregate was released; nothing to certify"]
        most = max(self.rounds.taken_part.values(), default=0)
        lines = [f"dpfl certificates after {ledger.rounds_recorded} released rounds (distributed DP: Skellam shares "
                 f"in SecAgg+, z = {self.mod.noise_multiplier:g}, S = {self.mod.clip_norm:g}, m = "
                 f"{self.expected_clients}; the most rounds one client took part in: {most}):"]
        for obs in ("server", "public"):
            cert = ledger.certify(obs, method="best")  # type: ignore[arg-type]
            lines.append(f"  {obs:<6} ε = {_fmt(cert.epsilon)} at δ = {cert.delta:g} ({cert.method}; RDP "
                         f"{_fmt(cert.epsilon_rdp)}; {cert.basis_text})")
        lines.append("  relation: add/remove one client's update, its noise share in both neighbours; the server "
                     "sees only the SecAgg+ sum, which carries the noise, so its figure is the public's unless "
                     "vectors were missing; no client colludes with the server")
        if self.hidden:
            lines.append(f"  hidden participation: every node's share in every sum, a secret coin of probability q = "
                         f"{self.expected_clients / ledger.num_clients:.4g} decides whether its update is in it; both "
                         "figures are amplified by that Poisson sample (binomial expansion, docs/proofs/"
                         "skellam-subsampling.md)")
        for note in self.rounds.shortfalls:
            lines.append(f"  shortfall: {note}")
        if self.rounds.metric_names:
            lines.append(f"  not covered: the clients' fit metrics {sorted(self.rounds.metric_names)} reach the "
                         "server in the clear")
        lines.append("  not covered: federated evaluation replies (loss, metrics, num-examples) reach the server in "
                     "the clear; the SecAgg+ protocol is trusted as Flower implements it (semi-honest server, fewer "
                     "colluders than its reconstruction threshold; masks expanded by dpfl's ChaCha20)")
        if self.rounds.seeded_rounds:
            lines.append(f"  REPRODUCIBLE NOISE in rounds {self.rounds.seeded_rounds}: the clients drew it from a seed "
                         "(tests only); these figures assume the seed is secret, and do not hold against anyone who "
                         "knows it — the server that ships the ClientApp included")
        return lines
