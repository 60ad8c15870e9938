"""DP-FedAvg (004 Algorithm 1), with BLUR and LUS (004 Algorithm 2) and adaptive clipping.

Each round every client joins independently with probability p (the sampler); each sampled
client runs Q local SGD steps (``local.steps``), clips its update Δ to L2 norm S, and — in the
``local`` variant of 004 Alg. 1 (LocalUpdate line 8) — adds N(0, S²σ²/|P_t| I) before
uploading; the server sums the uploads, divides by the **expected** cohort size m = pN (the
fixed-denominator estimator of McMahan et al. 2018; m = K for fixed-size sampling) and takes a
server step w ← w + η_g · Σ Δ̃ / m. In the ``central`` variant the server adds the same total
noise once, N(0, (Sσ)² I), to the sum: the broadcast model is identically distributed, but the
server sees clean uploads. 004 Alg. 1 line 7 divides by the realized |P_t|; that estimator's
denominator changes when a client is added, so the Gaussian sum query the certificate prices
would not be what is released — dpfl uses the fixed denominator, whose release *is* that query
(the sum's noise is Sσ whatever |P_t| is: the clients split it over the realized cohort, and
the server tops up what did not arrive). An empty round (|P_t| = 0, possible under Poisson
sampling) still releases w ← w + η_g · N(0, (Sσ)² I) / m, drawn by the server: the same
mechanism with an empty sum, never an un-noised repeat of the model.

Options on top of plain DP-FedAvg (``dp-fedavg-blur-lus`` sets the paper's defaults λ = 0.4,
c = 0.7):

* ``blur_lambda`` λ > 0 — BLUR (004 eq. 5, 7): the local objective gains
  (λ/2)·max(0, ‖w − w^t‖² − S²) (:mod:`dpfl.client.blur`).
* ``lus_sparsity`` c > 0 — LUS (004 eq. 11–15): per layer keep the (1 − c)·d_j entries of Δ with
  the largest |∂f/∂w · Δw| (gradient at the final local weights), zero the rest, *then* clip and
  noise (:mod:`dpfl.client.lus`, which states precisely why the sensitivity stays S).
* ``adaptive_clip`` — quantile-based clipping of Andrew et al. 2021
  (:mod:`dpfl.server.adaptive_clip`): S_t follows a target quantile of the update norms through
  a noised count; ``noise_multiplier`` is then the *total* multiplier of the round, split between
  the update and the count so that the pair is exactly one Gaussian release of that multiplier.
* ``target_epsilon`` instead of ``noise_multiplier`` — σ is calibrated so that the paper's own
  claim (moments accountant, Poisson sampling, δ of the run) after ``rounds`` rounds equals it
  (:func:`dpfl.privacy.accounting.claimed.dpfedavg_noise_multiplier`).

Floating-point-safe releases (``privacy.gaussian_noise: lattice``, a deployment's default): without
secure aggregation the sum's Gaussian is replaced by its lattice form
(:class:`dpfl.privacy.mechanisms.lattice.LatticeGaussian`): each client's clipped update is scaled
by γ and conditionally rounded (KLS21 Thm 23, stream (t, k, "rounding")), the integers are summed
exactly and carry Skellam noise Sk(μ), μ = (zΔ2)² (AKL21 Thm 3.5): added once by the server in the
central variant (stream (t, SERVER, "server_noise")), split into the clients' shares Sk(μ/|P_t|)
in the local variant (topped up by the server for uploads that did not arrive). Uploads travel as
integers (float-typed, exact below 2^24: γ is chosen for it); the broadcast is the integer sum
/ γ / m. The ledger records the Skellam releases (:class:`LatticeCalibration`), not the Gaussian's.
Not with adaptive clipping (its count query has no integer form here), fixed-size sampling or a
participation schema (a Skellam release is amplified only by Poisson sampling): those runs keep
the floating-point Gaussian and say so.

Privacy: the sensitivity of the sum of clipped updates to adding or removing one client is S,
so the broadcast mean carries noise multiplier σ (public observer, amplified by the secret
Poisson sample). Against the server, the local variant protects each upload only with
multiplier σ/sqrt(|P_t|), and the central variant not at all — unless secure aggregation hides
the uploads. The paper's claim is the moments accountant for the public view
(:func:`dpfl.privacy.accounting.claimed.dpfedavg_claimed_epsilon`).

References:
    004_32e0c8f847edac12.txt, Algorithms 1–2, eq. 5, 7, 11–15 and Theorem 1; Andrew et al. 2021.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import AdaptiveClipOptions as AdaptiveClipOptions  # re-exported
from dpfl.algorithms.options import DpFedAvgOptions, SecureSumOptions, parse_options
from dpfl.algorithms.private import Calibration, CanaryHooks, PrivateAlgorithm, RoundPlan
from dpfl.client.blur import BlurTerm
from dpfl.client.context import LocalProblem, LocalResult, RoundInfo
from dpfl.client.lus import sparsify_updates
from dpfl.errors import ConfigError
from dpfl.privacy.accounting.broadcast import broadcast_mode
from dpfl.privacy.accounting.claimed import dpfedavg_claimed_epsilon, dpfedavg_noise_multiplier
from dpfl.privacy.calibration import (
    combined_noise_multiplier,
    dpfedavg_client_noise_std,
    skellam_share_variance,
    skellam_sum_variance,
    skellam_unsubtracted_variance,
    update_noise_multiplier,
)
from dpfl.privacy.mechanisms import (
    add_gaussian_noise,
    add_gaussian_noise_per_client,
    clip_by_l2_norm,
)
from dpfl.privacy.mechanisms.draw import rand, randn
from dpfl.privacy.mechanisms.integer import (
    MAX_POISSON_RATE,
    MAX_SKELLAM_VARIANCE,
    IntegerPipeline,
    skellam_noise,
    skellam_noise_rows,
)
from dpfl.privacy.mechanisms.lattice import LatticeGaussian, conditional_lattice_scale
from dpfl.privacy.releases import Release, SkellamRelease, federated_round_releases
from dpfl.rng import SERVER
from dpfl.server.adaptive_clip import COUNT_SENSITIVITY, QuantileClipRule


def _expected_cohort(sampler: Any, num_clients: int) -> float:
    desc = sampler.describe()
    if desc.get("kind") == "poisson":
        return float(desc["sample_rate"]) * num_clients
    if "num_sampled" in desc:
        return float(desc["num_sampled"])
    return float(num_clients)


@dataclass(frozen=True)
class DpFedAvgCalibration(Calibration):
    """What DP-FedAvg fixes before the run (:func:`dpfedavg_calibration`).

    Attributes:
        noise_multiplier: z, the round's total multiplier (004 Alg. 1's σ; with adaptive clipping
            the joint multiplier of update and count).
        update_multiplier: z_Δ = (z⁻² − (2σ_b)⁻²)^−½, the update's share (z without adaptive clipping).
        count_noise_std: σ_b of the count query (0 without adaptive clipping or without noise).
        denominator: m = qN, the fixed denominator (expected cohort size).
        sample_rate: q, the client sampling rate.
        secure_sum: the integer pipeline and Skellam noise under secure aggregation, else None.
        lattice: the floating-point-safe form of the sum's Gaussian (``privacy.gaussian_noise:
            lattice``), else None.
    """

    noise_multiplier: float
    update_multiplier: float
    count_noise_std: float
    denominator: float
    sample_rate: float
    secure_sum: SecureSumCalibration | None = None
    lattice: LatticeCalibration | None = None


@dataclass(frozen=True)
class LatticeCalibration(Calibration):
    """The lattice form of the sum's Gaussian (:func:`lattice_calibration`): the numbers of a
    :class:`~dpfl.privacy.mechanisms.lattice.LatticeGaussian` for one client's clipped update.

    Attributes:
        scale: γ (:func:`~dpfl.privacy.mechanisms.lattice.conditional_lattice_scale`).
        beta: β of conditional rounding.
        l2_sensitivity: Δ2 of one client's rounded vector (KLS21 Thm 23's bound on γS).
        l1_sensitivity: Δ1 = min(Δ2², √d·Δ2).
        variance: μ = (zΔ2)², the Skellam variance per coordinate of the sum (integer units).
        rounding_inflation: Δ2/(γS), the factor by which the noise std exceeds S·z.
    """

    scale: float
    beta: float
    l2_sensitivity: float
    l1_sensitivity: float
    variance: float
    rounding_inflation: float

    def mechanism(self, dim: int, clip_norm: float, noise_multiplier: float) -> LatticeGaussian:
        """The lattice release these numbers describe."""
        return LatticeGaussian(dim=dim, clip_norm=clip_norm, noise_multiplier=noise_multiplier, scale=self.scale,
                               beta=self.beta)


def lattice_calibration(*, dim: int, clip_norm: float, noise_multiplier: float, local: bool) -> LatticeCalibration:
    """γ (the largest power of two with γS <= 2^16 whose variance is certified, and, in the local
    variant, whose noised uploads stay exact as float32), Δ2, Δ1 and μ = (zΔ2)² — the multiplier z
    against the *rounded* sensitivity, so the noise is never below the Gaussian's (its std is
    S·z·Δ2/(γS) >= S·z): a pure function of the options and the model's size."""
    scale = conditional_lattice_scale(clip_norm, dim, noise_multiplier, share_float32=local)
    mech = LatticeGaussian(dim=dim, clip_norm=clip_norm, noise_multiplier=noise_multiplier, scale=scale)
    return LatticeCalibration(scale, mech.beta, mech.l2_sensitivity, mech.l1_sensitivity, mech.variance,
                              mech.rounding_inflation)


@dataclass(frozen=True)
class SecureSumCalibration(Calibration):
    """What secure aggregation with distributed Skellam noise fixes before the run
    (:func:`secure_sum_calibration`).

    Attributes:
        bits, scale, rotation, beta: the integer pipeline (:class:`IntegerPipeline`).
        l2_sensitivity: Δ2 of one client's integer vector (conditional rounding's bound on γS).
        l1_sensitivity: Δ1 = min(Δ2², √d'·Δ2).
        variance: μ = (z·Δ2)², the Skellam variance per coordinate of the secure sum (every
            round, every cohort: shares plus what the server tops up).
        hidden: hidden participation (every client adds a share of μ/N and a secret coin decides
            whether its update is in the sum), else visible (each of the |P_t| sampled clients adds μ/|P_t|).
        colluding: c, clients of each secure sum that may collude with the server.
        max_contributors: the most vectors a secure sum can contain (N hidden, the largest cohort visible).
        wrap_log_probability: log of the bound on a modular wrap-around in one round.
        rounding_inflation: Δ2/(γS).
    """

    bits: int
    scale: float
    rotation: bool
    beta: float
    l2_sensitivity: float
    l1_sensitivity: float
    variance: float
    hidden: bool
    colluding: int
    max_contributors: int
    wrap_log_probability: float
    rounding_inflation: float

    def pipeline(self, dim: int, clip_norm: float) -> IntegerPipeline:
        """The integer pipeline these numbers describe."""
        return IntegerPipeline(dim, self.bits, self.scale, clip_norm, self.rotation, self.beta)


#: A secure-sum configuration whose wrap-around bound per round exceeds this is refused.
MAX_WRAP_PROBABILITY = 1e-6


def secure_sum_calibration(options: SecureSumOptions, *, dim: int, clip_norm: float, noise_multiplier: float,
                           num_clients: int, max_cohort: int, hidden: bool, colluding: int) -> SecureSumCalibration:
    """The integer pipeline's numbers: γ (given, or the largest power of two with γS <= 2^16 whose
    wrap-around bound is below 1e-9), Δ2, Δ1 and μ = (zΔ2)², so that the secure sum's noise has
    the multiplier z against the *rounded* sensitivity: a pure function of the options and public facts.

    Raises:
        ConfigError: the wrap-around bound above :data:`MAX_WRAP_PROBABILITY` (more bits or a
            smaller scale needed).
    """
    contributors = num_clients if hidden else max_cohort

    def numbers(scale: float) -> tuple[IntegerPipeline, float, float]:
        pipe = IntegerPipeline(dim, options.bits, scale, clip_norm, options.rotation, options.beta)
        mu = skellam_sum_variance(noise_multiplier, pipe.l2_sensitivity)
        return pipe, mu, pipe.wrap_log_probability(contributors, mu)

    if options.scale is not None:
        pipe, mu, wrap = numbers(float(options.scale))
    else:
        # the largest power of two γS <= 2^16 whose wrap bound is below 1e-9 and whose variance is
        # drawn in one Poisson pair per coordinate (μ/2 <= 2^40)
        k = 16
        pipe, mu, wrap = numbers(2.0 ** k / clip_norm)
        while (wrap > math.log(1e-9) or mu / 2 > MAX_POISSON_RATE) and k > 0:
            k -= 1
            pipe, mu, wrap = numbers(2.0 ** k / clip_norm)
    if mu > MAX_SKELLAM_VARIANCE:
        raise ConfigError(
            f"secure_sum: the noise variance μ = (zΔ2)² = {mu:.4g} (z = {noise_multiplier:g}, Δ2 = "
            f"{pipe.l2_sensitivity:.4g}) is beyond what is drawn exactly ({MAX_SKELLAM_VARIANCE:.4g}): lower "
            "`secure_sum.scale`.")
    if wrap > math.log(MAX_WRAP_PROBABILITY):
        raise ConfigError(
            f"secure_sum: with bits = {options.bits} and scale γ = {pipe.scale:g}, the sum of up to {contributors} "
            f"vectors (Δ2 = {pipe.l2_sensitivity:.4g} each) plus its noise may wrap around 2^{options.bits} with "
            f"probability up to {math.exp(wrap):.3g} per round (> {MAX_WRAP_PROBABILITY:g}): raise `secure_sum.bits` "
            "or lower `secure_sum.scale`.")
    return SecureSumCalibration(options.bits, pipe.scale, options.rotation, options.beta, pipe.l2_sensitivity,
                                pipe.l1_sensitivity, mu, hidden, int(colluding), contributors, wrap,
                                pipe.rounding_inflation)


def dpfedavg_calibration(options: DpFedAvgOptions, sampler: Any, num_clients: int, delta: float,
                         rounds: int | None) -> DpFedAvgCalibration:
    """z (given, or calibrated so that 004's own claim after ``rounds`` rounds is
    ``target_epsilon``), its split between update and count (Andrew et al. 2021, Thm 1) and the
    fixed denominator: a pure function of the options and the public facts.

    Raises:
        ConfigError: ``target_epsilon`` without ``rounds``; a split that cannot exist.
    """
    desc = sampler.describe()
    q = desc.get("sample_rate")
    if q is None:
        q = desc.get("num_sampled", num_clients) / num_clients
    m = _expected_cohort(sampler, num_clients)
    if options.noise_multiplier is not None:
        z = float(options.noise_multiplier)
    else:
        if rounds is None:
            raise ConfigError("`target_epsilon` needs the number of rounds to calibrate σ.")
        assert options.target_epsilon is not None
        z = dpfedavg_noise_multiplier(options.target_epsilon, float(q), rounds, delta)
    count_std, z_update = 0.0, z
    ac = options.adaptive_clip
    if ac is not None and z > 0:
        count_std = float(ac.count_noise_std if ac.count_noise_std is not None else m / 20.0)
        z_update = update_noise_multiplier(z, count_std)
    return DpFedAvgCalibration(z, z_update, count_std, float(m), float(q))


@dataclass(frozen=True)
class NoisePlan(RoundPlan):
    """Every noise number of one DP-FedAvg round, from one calibration (its round plan).

    The clients add ``client_std`` each (local variant) and the server adds ``server_std`` to the
    sum (central variant) or tops the sum up to ``sum_std`` when fewer than ``cohort`` uploads
    arrive; the count query of adaptive clipping likewise. :meth:`releases` states exactly these
    numbers to the ledger, so what is added and what is certified cannot drift apart.

    Attributes:
        round_idx: the round. clip_norm: S_t. cohort: |P_t|. denominator: m = qN (the fixed denominator).
        central: the server adds all the noise. sum_std: S_t·z_Δ, the noise the sum carries.
        client_std: S_t·z_Δ/sqrt(|P_t|) per client (local variant), else 0.
        count_std: σ_b of the count query (0 without adaptive clipping or without noise).
        count_client_std: σ_b/sqrt(|P_t|) per client (local variant), else 0.
        amplified: the cohort is a secret sample of interchangeable clients (the broadcast may be
            amplified by it: every client adds the same share, and the fixed denominator makes
            the numbers every cohort's).
        count_query: adaptive clipping: the clients also send their (noised) clipped bit.
        secure: secure aggregation with distributed Skellam noise (its calibration), else None:
            the clients upload integer residues and every noise number above is 0.
        num_clients: N (the shares of hidden participation).
        lattice: the lattice form of the sum's noise (``privacy.gaussian_noise: lattice``), else
            None: the clients upload rounded integers (plus their Skellam shares in the local
            variant) and every Gaussian number above is 0.
    """

    round_idx: int
    clip_norm: float
    cohort: int
    denominator: float
    central: bool
    sum_std: float
    client_std: float
    count_std: float
    count_client_std: float
    amplified: bool
    count_query: bool = False
    secure: SecureSumCalibration | None = None
    num_clients: int = 0
    lattice: LatticeCalibration | None = None

    @property
    def shares(self) -> int:
        """How many clients add a noise share to the secure sum: N (hidden) or |P_t| (visible); to
        the lattice sum: |P_t| in the local variant, none in the central one."""
        if self.lattice is not None:
            return 0 if self.central else self.cohort
        if self.secure is None:
            return 0
        return self.num_clients if self.secure.hidden else self.cohort

    @property
    def share_variance(self) -> float:
        """μ/shares: each client's Skellam share (0 without an integer sum or without shares)."""
        if self.lattice is not None:
            return skellam_share_variance(self.lattice.variance, self.shares) if self.shares else 0.0
        return skellam_share_variance(self.secure.variance, self.shares) if self.secure is not None else 0.0

    def lattice_releases(self, ids: list[int]) -> list[Release]:
        """The lattice form's releases: each upload — the rounded update, clean in the central
        variant (ε = ∞ against the server, as the Gaussian's), plus its share Sk(μ/|P_t|) in the
        local variant — and the broadcast, the integer sum with Sk(μ) (:meth:`public_release`)."""
        lat = self.lattice
        assert lat is not None
        out: list[Release] = []
        if ids and self.central:  # the rounded update without noise (ε = ∞), its norm at most Δ2
            out.append(SkellamRelease("server", 0.0, lat.l2_sensitivity, lat.l1_sensitivity, tuple(ids),
                                      lattice=True))
        elif ids:
            out.append(SkellamRelease("server", self.share_variance, lat.l2_sensitivity, lat.l1_sensitivity,
                                      tuple(ids), lattice=True))
        return [*out, self.public_release()]

    def server_variance(self, shares_in_sum: int) -> float:
        """The Skellam variance the server cannot subtract from a sum of ``shares_in_sum`` client
        shares: those of the honest clients, i.e. all but c colluding ones."""
        return (skellam_unsubtracted_variance(self.share_variance, shares_in_sum, self.secure.colluding)
                if self.secure else 0.0)

    def secure_releases(self, arrived_ids: list[int]) -> list[Release]:
        """Under secure aggregation: what the server sees (the modular sum) and the public release.

        Visible participation: the server knows the cohort, so each arrived client is charged the
        sum's Skellam with the shares that reached the sum (the survivors': a top-up the server
        adds itself does not protect against it), unamplified. Hidden participation: every client
        sends a masked vector and the sum is a secret Poisson sample: one shared release,
        amplified like the public's. Both count only honest clients' shares (c collude).
        """
        assert self.secure is not None
        sec = self.secure
        out: list[Release] = []
        if sec.hidden:
            shares = self.num_clients - (self.cohort - len(arrived_ids))
            if shares > 0:  # a sum nobody's vector reached (a halted protocol) tells the server nothing
                out.append(SkellamRelease("server", self.server_variance(shares), sec.l2_sensitivity,
                                          sec.l1_sensitivity, None, amplifiable=True))
        elif arrived_ids:
            out.append(SkellamRelease("server", self.server_variance(len(arrived_ids)), sec.l2_sensitivity,
                                      sec.l1_sensitivity, tuple(arrived_ids)))
        return [*out, self.public_release()]

    @property
    def server_std(self) -> float:
        """Noise the server adds to the update sum in every round (central variant)."""
        return self.sum_std if self.central else 0.0

    @property
    def count_server_std(self) -> float:
        """Noise the server adds to the count in every round (central variant)."""
        return self.count_std if self.central else 0.0

    def topup_std(self, arrived: int) -> float:
        """What the server adds to the sum when ``arrived`` of the cohort's uploads arrived (local)."""
        if self.central or arrived >= self.cohort and arrived:
            return 0.0
        return math.sqrt(max(0.0, self.sum_std**2 - arrived * self.client_std**2))

    def count_topup_std(self, arrived: int) -> float:
        """The same top-up for the count query."""
        if self.central or self.count_std == 0 or arrived >= self.cohort and arrived:
            return 0.0
        return math.sqrt(max(0.0, self.count_std**2 - arrived * self.count_client_std**2))

    def public_release(self) -> Release:
        """The broadcast of this round, the same for every cohort — the empty one included: the
        round's mechanism is PoissonSampled(q, Gaussian(z)) whatever the secret sample turns out
        to be, so no outcome of the sample may declare a cheaper event than the noise it draws.

        Without adaptive clipping: the sum's Gaussian, std S_t·z_Δ against S_t, over m. With it:
        the update and the count are two Gaussian queries about the same cohort, jointly one
        Gaussian of multiplier z = (z_Δ⁻² + (2σ_b)⁻²)^−½ (Andrew et al. 2021, Thm 1) — the total
        multiplier the user set — amplified once by the sample. An empty round draws both noises
        (the update top-up and the count top-up), so it is charged the same joint z.
        """
        m = self.denominator
        if self.lattice is not None:
            # the broadcast is a fixed decoding of the integer sum, whose noise is Sk(μ) in every
            # round (the server's, or the shares plus its top-up): amplified by the sample
            return SkellamRelease("public", self.lattice.variance, self.lattice.l2_sensitivity,
                                  self.lattice.l1_sensitivity, None, amplifiable=self.amplified, lattice=True)
        if self.secure is not None:
            # the broadcast is a fixed decoding of the modular sum, whose noise is Sk(μ) in every
            # round (shares plus the server's top-up): the Skellam mechanism, amplified by the sample
            return SkellamRelease("public", self.secure.variance, self.secure.l2_sensitivity,
                                  self.secure.l1_sensitivity, None, amplifiable=self.amplified)
        if self.count_std == 0:
            return Release.gaussian("public", self.sum_std / m, self.clip_norm / m, None, amplifiable=self.amplified)
        z = combined_noise_multiplier(self.sum_std / self.clip_norm, self.count_std / COUNT_SENSITIVITY)
        return Release.gaussian("public", z if math.isfinite(z) else 0.0, 1.0 if math.isfinite(z) else 0.0, None,
                                amplifiable=self.amplified)

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """The releases of this round's rows ``ids``: each upload (server; none in an empty
        round), and :meth:`public_release`, which does not depend on ``ids`` (nor on the sample
        counts: the fixed denominator weighs every client 1/m)."""
        del num_samples
        if self.lattice is not None:
            return self.lattice_releases([int(c) for c in ids])
        if self.secure is not None:
            return self.secure_releases([int(c) for c in ids])
        k, m = len(ids), self.denominator
        out: list[Release] = []
        if k:
            # the sum carries S·z_Δ: the clients' shares, or the server's (central variant)
            top = self.sum_std if self.client_std == 0 else 0.0
            out += federated_round_releases(
                ids, self.client_std, self.clip_norm, [1.0 / m] * k, server_noise_std=top / m,
                ideal_secure_sum=ideal_secure_sum, amplifiable=self.amplified)
            if self.count_std > 0:
                top_c = self.count_std if self.count_client_std == 0 else 0.0
                out += federated_round_releases(
                    ids, self.count_client_std, COUNT_SENSITIVITY, [1.0] * k, server_noise_std=top_c,
                    ideal_secure_sum=ideal_secure_sum, amplifiable=self.amplified)
        # The server sees the per-client releases (no amplification: they compose exactly).
        return [r for r in out if r.observer == "server"] + [self.public_release()]

    def declared(self, client: int) -> dict[str, float]:
        """Each client's noise shares (the same for every client of the cohort)."""
        del client
        if self.secure is not None or self.lattice is not None:
            return {"noise_variance": self.share_variance}
        declared = {"noise_std": self.client_std}
        if self.count_query:
            declared["count_noise_std"] = self.count_client_std
        return declared


class DpFedAvg(PrivateAlgorithm[NoisePlan]):
    """See the module docstring."""

    name = "dp-fedavg"
    relation = "add_remove"
    claim_observer = "public"  # 004 Thm 1 is about the broadcast models
    implements_secure_aggregation = True
    privacy_unit = "client"

    def __init__(
        self,
        options: DpFedAvgOptions,
        sampler: Any,
        num_clients: int,
        delta: float,
        *,
        rounds: int | None = None,
        secure_aggregation: bool = False,
        participation: str = "visible",
        colluding_clients: int = 0,
        num_params: int | None = None,
        gaussian_noise: str | None = None,
    ) -> None:
        self.options = options
        self.sampler = sampler
        self.num_clients = num_clients
        self.delta = delta
        self._num_params = num_params
        calibration = dpfedavg_calibration(options, sampler, num_clients, delta, rounds)
        if secure_aggregation:
            calibration = dataclasses.replace(calibration, secure_sum=self._secure_calibration(
                calibration, participation, colluding_clients))
        self.gaussian_release = "float"
        self.lattice_refusal: str | None = None
        if secure_aggregation:
            self.gaussian_release = "lattice"  # the secure sum is integers plus Skellam noise already
        elif gaussian_noise == "lattice":
            self.lattice_refusal = self._lattice_refusal(calibration)
            if self.lattice_refusal is None:
                assert self._num_params is not None
                calibration = dataclasses.replace(calibration, lattice=lattice_calibration(
                    dim=self._num_params, clip_norm=float(options.clip_norm),
                    noise_multiplier=calibration.noise_multiplier, local=options.variant == "local"))
                self.gaussian_release = "lattice"
        self._calibration = calibration
        self.noise_multiplier = self._calibration.noise_multiplier
        self.update_multiplier = self._calibration.update_multiplier
        self.count_noise_std = self._calibration.count_noise_std
        # m: the fixed denominator of the cohort sum (expected cohort size, public)
        self.denominator = self._calibration.denominator
        self.clip_norm = float(options.clip_norm)  # S_t: changes only with adaptive clipping
        self._layer_sizes: list[int] | None = None
        self._rule: QuantileClipRule | None = None
        ac = options.adaptive_clip
        if ac is not None:
            self._rule = QuantileClipRule(ac.target_unclipped_quantile, ac.learning_rate, self.denominator)

    def calibration(self) -> DpFedAvgCalibration:
        """z, its update/count split and the fixed denominator (:func:`dpfedavg_calibration`)."""
        return self._calibration

    def _lattice_refusal(self, calibration: DpFedAvgCalibration) -> str | None:
        """Why this configuration keeps the floating-point Gaussian under ``gaussian_noise: lattice``
        (None: it has the lattice form)."""
        kind = self.sampler.describe().get("kind")
        if self.options.adaptive_clip is not None:
            return "adaptive clipping (its count query has no integer form yet)"
        if kind not in ("poisson", "all"):
            return f"`sampling.kind: {kind}` (a Skellam release is amplified only by Poisson sampling)"
        if calibration.noise_multiplier <= 0:
            return "no noise (`noise_multiplier: 0`)"
        if self._num_params is None:
            return "a model of unknown size"
        return None

    def _secure_calibration(self, calibration: DpFedAvgCalibration, participation: str,
                            colluding: int) -> SecureSumCalibration:
        """Secure aggregation's numbers, after checking that this configuration can have them."""
        o = self.options
        kind = self.sampler.describe().get("kind")
        problems = []
        if o.variant != "local":
            problems.append("`variant: central` (the server would add the noise it is to be protected from)")
        if o.adaptive_clip is not None:
            problems.append("`adaptive_clip` (its count query has no integer channel yet)")
        if kind not in ("poisson", "all"):
            problems.append(f"`sampling.kind: {kind}` (the Skellam sum is amplified only by Poisson sampling)")
        if self._num_params is None:
            problems.append("a model of unknown size")
        if problems:
            raise ConfigError("dp-fedavg with `privacy.secure_aggregation: true` does not support "
                              + "; ".join(problems) + ".")
        hidden = participation == "hidden"
        if hidden and kind != "poisson":
            raise ConfigError("`privacy.participation: hidden` needs `sampling.kind: poisson` (each client's secret "
                              f"coin of probability q). Found {kind!r}.")
        assert self._num_params is not None
        return secure_sum_calibration(
            o.secure_sum, dim=self._num_params, clip_norm=float(o.clip_norm),
            noise_multiplier=calibration.noise_multiplier, num_clients=self.num_clients,
            max_cohort=self.num_clients, hidden=hidden, colluding=colluding)

    def pipeline(self, plan: NoisePlan) -> IntegerPipeline:
        """The integer pipeline of a secure-aggregation round (its Δ2 is the calibration's: the
        clip norm is fixed, adaptive clipping being refused under secure aggregation)."""
        assert plan.secure is not None and self._num_params is not None
        if plan.clip_norm != float(self.options.clip_norm):
            raise ConfigError(f"secure aggregation calibrated Δ2 for S = {self.options.clip_norm}, the round clips "
                              f"to {plan.clip_norm}.")
        return plan.secure.pipeline(self._num_params, plan.clip_norm)

    # ------------------------------------------------------------------ set-up

    def _sample_rate(self) -> float:
        desc = self.sampler.describe()
        q = desc.get("sample_rate")
        if q is None:
            q = desc.get("num_sampled", self.num_clients) / self.num_clients
        return float(q)

    def configure_local(self, problem: LocalProblem) -> LocalProblem:
        """BLUR adds its objective term; LUS asks the engine for ∇f at the final local weights."""
        o = self.options
        self._layer_sizes = problem.layout.sizes()
        local = problem.local
        terms = problem.extra_terms
        if o.blur_lambda > 0:
            terms = (*terms, BlurTerm(o.blur_lambda, lambda: self.clip_norm))
        if o.lus_sparsity > 0:
            local = dataclasses.replace(local, final_gradient=True)
        return dataclasses.replace(problem, local=local, extra_terms=terms)

    # ------------------------------------------------------------------ noise: one calibration

    def plan(self, info: RoundInfo) -> NoisePlan:
        """Every noise number of round ``info.round_idx`` with |P_t| = ``info.cohort``, from S_t
        at the start of the round and the calibrated multipliers: the only place they are
        computed (the clients add, the server tops up, and the ledger is told, all from this
        plan; the loop fixes it before :meth:`aggregate` moves S_t on)."""
        return self.plan_for_cohort(info.round_idx, info.cohort)

    def plan_for_cohort(self, round_idx: int, cohort: int) -> NoisePlan:
        """:meth:`plan` of round ``round_idx`` for a cohort of ``cohort`` clients at the current S_t."""
        local = self.options.variant == "local"
        z = self.update_multiplier
        secure = self._calibration.secure_sum
        lattice = self._calibration.lattice
        integer = secure is not None or lattice is not None
        client_std = (dpfedavg_client_noise_std(self.clip_norm, z, cohort)
                      if local and z > 0 and cohort and not integer else 0.0)
        count_client = (self.count_noise_std / math.sqrt(cohort)
                        if local and self._rule is not None and self.count_noise_std > 0 and cohort else 0.0)
        return NoisePlan(
            round_idx=int(round_idx), clip_norm=self.clip_norm, cohort=int(cohort), denominator=self.denominator,
            central=not local,
            sum_std=self.clip_norm * z if not integer else 0.0, client_std=client_std,
            count_std=self.count_noise_std if self._rule is not None else 0.0, count_client_std=count_client,
            amplified=broadcast_mode(self.sampler.describe(), self.relation, self.privacy_unit, True) != "shared",
            count_query=self._rule is not None, secure=secure, num_clients=self.num_clients, lattice=lattice,
        )

    def releases_for_arrivals(self, info: RoundInfo, arrived: torch.Tensor, num_samples: torch.Tensor,
                              ideal_secure_sum: bool) -> list[Release]:
        """After dropouts: :meth:`aggregate` tops the noise of the broadcast up to the plan, so
        the public release is the planned one; the server saw only the uploads that arrived (or,
        with secure aggregation, their sum *without* the top-up it adds itself)."""
        plan = self.round_plan(info)
        actual = plan.releases(arrived.tolist(), num_samples, ideal_secure_sum)
        return [r for r in actual if r.observer == "server"] + [plan.public_release()]

    # ------------------------------------------------------------------ the round

    splits_rounds = True
    releases_empty_rounds = True
    sums_uploads = True  # the sum of the rows, their norms, declared stds and counts: streamable

    def client_step_bytes(self, num_params: int) -> int:
        """A row's temporaries: the clipped update (float32) and either its noise (Gaussian) or the
        integer pipeline's float64 copy, uniforms and int64 result over d' (secure aggregation);
        with LUS its final gradient, mask and sparsified copy."""
        o = self.options
        sec = self._calibration.secure_sum
        per_row = 4 * num_params
        if sec is not None:
            padded = sec.pipeline(num_params, float(o.clip_norm)).padded_dim
            per_row += 8 * num_params + 16 * padded
        elif self._calibration.lattice is not None:
            per_row += 40 * num_params  # float64 copy, uniforms, int64 result and noise, float64 upload
        else:
            per_row += 4 * num_params
        if o.lus_sparsity > 0:
            per_row += 12 * num_params
        return per_row

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """004 Alg. 1 LocalUpdate: Δ = w_k − w (LUS-sparsified), clipped to S_t; in the local
        variant plus N(0, S_t²σ²/|P_t| I) from the client's own stream; with adaptive clipping
        also the client's (noised, in the local variant) centered bit b_k − ½."""
        o = self.options
        plan = self.round_plan(info)
        clip = plan.clip_norm
        updates = local.params.sub_(global_params.to(local.params.device))
        rows = int(info.clients.numel())
        declared: dict[str, torch.Tensor] = {}
        diagnostics: dict[str, torch.Tensor] = {}  # simulation-only metrics, never sent
        if o.lus_sparsity > 0:
            if local.final_grads is None or self._layer_sizes is None:
                raise ConfigError("LUS needs the final-weights gradient: build DP-FedAvg through the runner "
                                  "(configure_local sets `local.final_gradient`).")
            diagnostics["dense_update_norm"] = updates.norm(dim=1).detach().to(torch.float64).cpu()
            updates = sparsify_updates(updates, local.final_grads.to(updates.device), self._layer_sizes, o.lus_sparsity)
        clipped, norms = clip_by_l2_norm(updates, clip)
        client_std = plan.client_std
        dev = clipped.device
        gens = [info.seeds.noise_generator(info.round_idx, int(c), "noise", device=dev) for c in info.clients.tolist()]
        if plan.lattice is not None:
            diagnostics["update_norm"] = norms.detach().to(torch.float64).cpu()
            ints = self._lattice_upload(clipped, plan, info)
            declared["noise_variance"] = torch.full((rows,), plan.share_variance, dtype=torch.float64)
            # integers in a float dtype (a deployment's uploads are float vectors): exact below 2^53
            # here, below 2^24 as float32 on the wire (lattice_calibration's γ keeps them there)
            return Uploads(info.clients, ints.to(torch.float64), local.num_samples, local.train_loss, declared,
                           diagnostics=diagnostics)
        if plan.secure is not None:
            diagnostics["update_norm"] = norms.detach().to(torch.float64).cpu()
            coins = self._coins(plan, info) if info.hidden_participation else None
            residues = self._secure_upload(clipped, plan, info, coins)
            declared["noise_variance"] = torch.full((rows,), plan.share_variance, dtype=torch.float64)
            return Uploads(info.clients, residues, local.num_samples, local.train_loss, declared,
                           diagnostics=diagnostics)
        if client_std > 0:
            clipped = add_gaussian_noise_per_client(clipped, client_std, gens)
        declared["noise_std"] = torch.full((rows,), client_std, dtype=torch.float64)
        diagnostics["update_norm"] = norms.detach().to(torch.float64).cpu()
        if self._rule is not None:
            # the count noise is drawn after the update noise from the same per-client streams
            counts = QuantileClipRule.centered_bits(norms.detach().cpu(), clip).to(torch.float64)
            client_cs = plan.count_client_std
            if client_cs > 0:
                z = torch.stack([randn((), g, dtype=torch.float64).cpu() for g in gens])
                counts = counts + client_cs * z
            declared["count"] = counts
            declared["count_noise_std"] = torch.full((rows,), client_cs, dtype=torch.float64)
        return Uploads(info.clients, clipped, local.num_samples, local.train_loss, declared, diagnostics=diagnostics)

    def _coins(self, plan: NoisePlan, info: RoundInfo) -> torch.Tensor:
        """Hidden participation on real clients (``info.hidden_participation``): each row's secret coin, 1 with
        probability q (Poisson sampling done by the client itself, stream (t, k, "coin"): the OS
        CSPRNG in a deployment), 0 otherwise. A row whose coin is 0 encodes its update like the
        others (the same rounding work), then uploads zeros plus its noise share: its message has
        the size, the masking and — it trained and rounded like the others — the timing of a
        sampled client's, so the server cannot tell them apart."""
        if plan.secure is None or not plan.secure.hidden:
            raise ConfigError("a round of the clients' own coins needs secure aggregation with "
                              "`privacy.participation: hidden`.")
        q = self._sample_rate()
        coins = [float(rand((), info.seeds.noise_generator(info.round_idx, int(c), "coin"), dtype=torch.float64)) < q
                 for c in info.clients.tolist()]
        return torch.tensor(coins, dtype=torch.float64)

    def _rotation_signs(self, pipe: IntegerPipeline, info: RoundInfo) -> torch.Tensor | None:
        """The round's rotation signs: public, a fixed function of the round number (SHA-256 of
        "dpfl-rotation" and t seeds the generator), so every client and the server compute the same
        signs whatever randomness source draws the noise (the OS CSPRNG in a deployment). They need
        no secrecy: the wrap-around bound does not rely on them, and the sensitivity is enforced
        after the rotation."""
        if not pipe.rotation:
            return None
        digest = hashlib.sha256(b"dpfl-rotation" + int(info.round_idx).to_bytes(8, "little")).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
        return pipe.rotation_signs(gen)

    def _secure_upload(self, clipped: torch.Tensor, plan: NoisePlan, info: RoundInfo,
                       coins: torch.Tensor | None = None) -> torch.Tensor:
        """Secure aggregation, client side (:mod:`dpfl.privacy.mechanisms.integer`): the clipped update
        scaled, rotated, conditionally rounded (stream (t, k, "rounding")), plus the client's Skellam
        share Sk(μ/shares) (stream (t, k, "noise")), as residues modulo 2^b [rows, d']. In simulation
        with ``info.summed_shares`` the server step draws the rows' shares as one sum instead, and
        the rows stay integers (their modular sum is the same)."""
        pipe = self.pipeline(plan)
        signs = self._rotation_signs(pipe, info)
        rounding = [info.seeds.noise_generator(info.round_idx, int(c), "rounding") for c in info.clients.tolist()]
        ints = pipe.encode(clipped.detach().cpu(), rounding, signs)
        if coins is not None:
            # the clients' own coins: the update is encoded whatever the coin (the same rounding
            # work and redraws), then kept or zeroed — a zero vector is within Δ2 too
            ints = ints * coins.to(torch.int64).unsqueeze(1)
        share = plan.share_variance
        if ints.shape[0] and not info.summed_shares:  # integer arithmetic on the CPU, whatever device trained
            gens = [info.seeds.noise_generator(info.round_idx, int(c), "noise") for c in info.clients.tolist()]
            ints = ints + skellam_noise_rows(pipe.padded_dim, share, gens)
        # summed shares (simulation): the rows are never uploads anyone sees, and the modular sum
        # of the integers is the sum of their residues: reduced once, in the sum
        return ints if info.summed_shares else pipe.to_residues(ints)

    def _lattice_upload(self, clipped: torch.Tensor, plan: NoisePlan, info: RoundInfo) -> torch.Tensor:
        """The lattice form, client side: the clipped update scaled by γ and conditionally rounded
        (KLS21 Thm 23; stream (t, k, "rounding")), plus in the local variant the client's Skellam
        share Sk(μ/|P_t|) (stream (t, k, "noise")): int64 [rows, d]."""
        lat = plan.lattice
        assert lat is not None and self._num_params is not None
        mech = lat.mechanism(self._num_params, plan.clip_norm, self.update_multiplier)
        if plan.clip_norm != float(self.options.clip_norm):
            raise ConfigError(f"the lattice form was calibrated for S = {self.options.clip_norm}, the round clips "
                              f"to {plan.clip_norm}.")
        ids = [int(c) for c in info.clients.tolist()]
        rounding = [info.seeds.noise_generator(info.round_idx, c, "rounding") for c in ids]
        ints = mech.pipeline.encode(clipped.detach().cpu(), rounding)
        share = plan.share_variance
        if share > 0 and ints.shape[0]:
            gens = [info.seeds.noise_generator(info.round_idx, c, "noise") for c in ids]
            ints = ints + skellam_noise_rows(self._num_params, share, gens)
        return ints

    def _aggregate_lattice(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo,
                           plan: NoisePlan) -> RoundOutput:
        """The lattice form, server side: the exact integer sum of the uploads that arrived, plus
        Sk(μ) (central variant, stream (t, SERVER, "server_noise")) or the top-up Sk(μ − K'·μ/|P_t|)
        for the shares that did not arrive (local variant, stream (t, SERVER, "topup")); decoded
        as sum/γ, over m.

        Raises:
            ConfigError: uploads that are not integers (not lattice uploads).
        """
        lat = plan.lattice
        assert lat is not None and self._num_params is not None
        arrived = uploads.num_rows
        if arrived:  # summed in float64: exact for integers below 2^53 (each row's are below 2^24)
            summed = (uploads.params_sum if uploads.params_sum is not None else uploads.params.to(torch.float64).sum(0))
            summed = summed.to(torch.float64).cpu()
            total = torch.round(summed)
            if not bool(torch.equal(total, summed)):
                raise ConfigError("dp-fedavg: the uploads of a lattice round must be integers (lattice units); "
                                  "some are not — every client must run with the same `privacy.gaussian_noise`.")
            total_int = total.to(torch.int64)
        else:
            total_int = torch.zeros(self._num_params, dtype=torch.int64)
        if plan.central:
            noise_var = lat.variance
            stream = "server_noise"
        else:
            noise_var = max(0.0, lat.variance - arrived * plan.share_variance)
            stream = "topup"
        if noise_var > 0:
            gen = info.seeds.noise_generator(info.round_idx, SERVER, stream)
            total_int = total_int + skellam_noise((self._num_params,), noise_var, gen)
        mean = total_int.to(torch.float64) / lat.scale / plan.denominator
        new_global = global_params + self.options.server_lr * mean.to(global_params.dtype).to(global_params.device)
        metrics: dict[str, Any] = {"clip_norm": plan.clip_norm, "noise_multiplier": self.noise_multiplier,
                                   "client_noise_variance": plan.share_variance,
                                   "lattice_rounding_inflation": lat.rounding_inflation}
        return RoundOutput(new_global, _arrival_metrics(metrics, plan, uploads, topped_up=not plan.central))

    def _aggregate_secure(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo,
                          plan: NoisePlan) -> RoundOutput:
        """Secure aggregation, server side: the modular sum of the residues that arrived; the shares
        of clients whose vectors are not in it (hidden participation: the clients outside the secret
        sample, drawn in simulation as one Skellam of their summed variance, stream (t, SERVER,
        "absent_shares")); in simulation with ``info.summed_shares`` the arrived rows' shares too, as
        one Skellam of their summed variance (stream (t, SERVER, "share_sum")); the server's top-up
        to μ for sampled clients that did not arrive (or the
        whole μ in an empty visible round; stream (t, SERVER, "topup")); decoded, over m."""
        sec = plan.secure
        assert sec is not None
        pipe = self.pipeline(plan)
        arrived = uploads.num_rows
        if uploads.secure_sum is not None:  # real clients: the protocol delivered the modular sum
            if tuple(uploads.secure_sum.shape) != (pipe.padded_dim,):
                raise ConfigError(f"dp-fedavg: a secure sum of shape {tuple(uploads.secure_sum.shape)}, expected "
                                  f"({pipe.padded_dim},)")
            total = pipe.to_residues(uploads.secure_sum.to(torch.int64).cpu())
        elif arrived:
            total = pipe.modular_sum(uploads.summed_params().to(torch.int64).cpu())
        else:
            total = torch.zeros(pipe.padded_dim, dtype=torch.int64)
        share = plan.share_variance
        absent = (self.num_clients - plan.cohort) * share if sec.hidden else 0.0
        if absent > 0:
            gen = info.seeds.noise_generator(info.round_idx, SERVER, "absent_shares")
            total = total + skellam_noise((pipe.padded_dim,), absent, gen)
        if info.summed_shares and uploads.secure_sum is None and arrived:
            # simulation: the arrived rows' shares, one Skellam of their summed variance (RoundInfo)
            gen = info.seeds.noise_generator(info.round_idx, SERVER, "share_sum")
            total = total + skellam_noise((pipe.padded_dim,), arrived * share, gen)
        topup = max(0.0, sec.variance - arrived * share - absent)
        if topup > 0:
            gen = info.seeds.noise_generator(info.round_idx, SERVER, "topup")
            total = total + skellam_noise((pipe.padded_dim,), topup, gen)
        decoded = pipe.decode(pipe.to_residues(total), self._rotation_signs(pipe, info))
        mean = (decoded / plan.denominator).to(global_params.dtype).to(global_params.device)
        new_global = global_params + self.options.server_lr * mean
        metrics: dict[str, Any] = {"clip_norm": plan.clip_norm, "noise_multiplier": self.noise_multiplier,
                                   "client_noise_variance": share,
                                   "secure_sum_wrap_bound": math.exp(sec.wrap_log_probability)}
        return RoundOutput(new_global, _arrival_metrics(metrics, plan, uploads, topped_up=True))

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """004 Alg. 1 lines 7–9 with a fixed denominator: the sum of the uploads that arrived
        over m = pN, server noise in the central variant, server step; adaptive clipping updates
        S_t from the noised count.

        If fewer clients arrive than the noise was split over (K' < K = |P_t|, or an empty
        round), the server tops the sum up with N(0, (K − K')·σ_c² I) from its own stream (all
        of S_t·z_Δ when K = 0), so that the broadcast carries exactly the planned noise (and
        likewise for the count): the recorded guarantee stays true, never silently weaker.
        """
        o = self.options
        plan = self.round_plan(info)
        if plan.lattice is not None:
            return self._aggregate_lattice(global_params, uploads, info, plan)
        if plan.secure is not None:
            return self._aggregate_secure(global_params, uploads, info, plan)
        k = plan.cohort
        arrived = uploads.num_rows
        clip = plan.clip_norm
        rows_sum = uploads.summed_params() if arrived else torch.zeros_like(global_params)
        dev = rows_sum.device
        client_std = plan.client_std
        missing = k - arrived
        if missing < 0:
            raise ConfigError(f"dp-fedavg: {arrived} uploads for a cohort of {k}")
        total = rows_sum
        topup_std = plan.topup_std(arrived)
        if topup_std > 0:
            topup = info.seeds.noise_generator(info.round_idx, SERVER, "topup", device=dev)
            total = add_gaussian_noise(total.unsqueeze(0), topup_std, topup)[0]
        server_gen = info.seeds.noise_generator(info.round_idx, SERVER, "server_noise", device=dev)
        if plan.server_std > 0:
            total = add_gaussian_noise(total.unsqueeze(0), plan.server_std, server_gen)[0]
        mean = total / plan.denominator
        new_global = global_params + o.server_lr * mean.to(global_params.device)
        norms = uploads.diagnostics.get("update_norm")  # simulation only: a client never sends its norm
        metrics: dict[str, Any] = {"clip_norm": clip} if arrived else {"clip_norm": clip, "arrived": 0}
        if "dense_update_norm" in uploads.diagnostics:
            metrics["dense_update_norm_mean"] = float(uploads.diagnostics["dense_update_norm"].mean())
        if self._rule is not None:
            total_count = float(uploads.declared["count"].sum()) if arrived else 0.0
            top_cs = plan.count_topup_std(arrived)
            if top_cs > 0:
                topup_c = info.seeds.noise_generator(info.round_idx, SERVER, "topup_count")
                total_count += float(randn((), topup_c, dtype=torch.float64)) * top_cs
            if plan.count_server_std > 0:
                total_count += float(randn((), server_gen, dtype=torch.float64, device=dev)) * plan.count_server_std
            frac = self._rule.unclipped_fraction(total_count)
            self.clip_norm = self._rule.next_clip(clip, frac)
            metrics["unclipped_fraction_noised"] = frac
        if norms is not None:
            metrics.update({
                "update_norm_mean": float(norms.mean()),
                "update_norms": [round(float(x), 6) for x in norms.tolist()],
                "clipped_fraction": float((norms > clip).float().mean()),
            })
        metrics.update({
            "client_noise_std": client_std,
            "noise_multiplier": self.noise_multiplier,
        })
        if missing:
            metrics["topped_up_clients"] = missing
        return RoundOutput(new_global, metrics)

    def certified_noise_multiplier(self, target_epsilon: float, rounds: int,
                                   method: Literal["rdp", "pld", "best"] = "best") -> float:
        """The smallest total multiplier z whose broadcast — this algorithm's own public release
        (:meth:`NoisePlan.public_release`), under its own sampler, ``rounds`` times — the
        accountant certifies at ``target_epsilon`` (the public's ex-ante guarantee; δ of the run).
        ``dpfl account dp-fedavg --epsilon`` then dry-runs the config with that z; a target-ε stop
        asks for ``method="rdp"``: RDP at the integer orders 2..64 only (fast; the ε it certifies is
        at least the fractional orders' one, so the z it returns is enough for the gate's RDP check)."""
        from dpfl.privacy.accounting.calibrate import calibrate_noise_multiplier
        from dpfl.privacy.accounting.events import compose

        if self._calibration.secure_sum is not None:
            raise ConfigError("the certified inverse (noise multiplier for a target epsilon) is not available under "
                              "secure aggregation yet; set `noise_multiplier` and read `dpfl account CONFIG`.")

        lat = self._calibration.lattice

        def event(z: float) -> Any:
            scaled = dataclasses.replace(self.plan_for_cohort(0, 0), sum_std=self.clip_norm * z, count_std=0.0)
            if lat is not None:
                # the lattice form's own release at z (its γ, Δ2 and μ = (zΔ2)²), not the Gaussian's
                assert self._num_params is not None
                scaled = dataclasses.replace(scaled, sum_std=0.0, lattice=lattice_calibration(
                    dim=self._num_params, clip_norm=self.clip_norm, noise_multiplier=z,
                    local=self.options.variant == "local"))
            one = self.sampler.wrap_event(scaled.public_release().event(), self.num_clients)
            return compose([one] * int(rounds))

        if method == "rdp":
            return calibrate_noise_multiplier(event, target_epsilon, self.delta, relation=self.relation, method="rdp",
                                              rdp_orders=tuple(float(a) for a in range(2, 65)))
        return calibrate_noise_multiplier(event, target_epsilon, self.delta, relation=self.relation, method=method)

    # ------------------------------------------------------------------ claims and state

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        if rounds_done == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return float("inf")
        return dpfedavg_claimed_epsilon(self.noise_multiplier, self._sample_rate(), rounds_done, self.delta)

    def claim_at_integer_orders(self, rounds_done: int) -> float | None:
        if rounds_done == 0 or self.noise_multiplier == 0:
            return self.claimed_epsilon(rounds_done)
        return dpfedavg_claimed_epsilon(self.noise_multiplier, self._sample_rate(), rounds_done, self.delta,
                                        integer_orders=True)

    def canaries(self) -> CanaryHooks:
        """Audit canaries: each a row of norm C around the global model; the real clients' noise
        stays calibrated to the real cohort, the rows are real + canaries."""
        if self._calibration.lattice is not None:
            raise ConfigError("audit: DP-FedAvg with `privacy.gaussian_noise: lattice` is not supported (canary rows "
                              "are not lattice uploads); audit the floating-point twin (`gaussian_noise: float`).")
        if self.options.adaptive_clip is not None or self.options.lus_sparsity > 0:
            raise ConfigError("audit: DP-FedAvg with `adaptive_clip` or `lus_sparsity` is not supported (canaries "
                              "would move the clip norm; LUS needs gradients canaries do not have). Turn them off.")

        def silence(plan: NoisePlan) -> NoisePlan:
            if plan.secure is not None:  # audits refuse secure aggregation before a plan exists
                raise ConfigError("audit: a secure-aggregation round has no Gaussian noise to remove.")
            return dataclasses.replace(plan, sum_std=0.0, client_std=0.0, count_std=0.0, count_client_std=0.0)

        return CanaryHooks(
            rows=lambda g, d: g.unsqueeze(0) + self.clip_norm * d,
            num_samples=lambda sizes: int(sizes.median()),
            extend=lambda plan, real_k, joined, num_canaries: dataclasses.replace(plan, cohort=real_k + joined),
            silence=silence,
        )

    def claim_notion(self) -> str:
        return (f"004 (moments accountant, Thm 1): (ε, δ={self.delta:g})-DP per client, add/remove, "
                "for the broadcast models under Poisson sampling")

    def not_covered(self) -> list[str]:
        sec = self._calibration.secure_sum
        if sec is None:
            return []
        out = [f"secure aggregation: the server's figure assumes an honest-but-curious server that sees only the "
               f"modular sum, with at most {sec.colluding} client{'s' if sec.colluding != 1 else ''} of each sum "
               "colluding with it; the run's stored metrics (cohort sizes, un-noised update norms, who took part) "
               "are the experimenter's view, not the server's"]
        if sec.hidden:
            out.append("hidden participation: the neighbouring runs differ in whether one client's update is in "
                       "the sum; that every client sends a masked upload each round is public")
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clip_norm" in state:
            self.clip_norm = float(state["clip_norm"])


def _build(options: dict[str, Any], sampler: Any, ctx: Any, defaults: dict[str, Any] | None = None) -> DpFedAvg:

    merged = {**(defaults or {}), **options}
    name = "dp-fedavg-blur-lus" if defaults else "dp-fedavg"
    privacy = ctx.privacy
    return DpFedAvg(parse_options(DpFedAvgOptions, merged, name), sampler, ctx.num_clients, privacy.delta,
                    rounds=ctx.config.rounds, secure_aggregation=privacy.secure_aggregation,
                    participation=privacy.participation, colluding_clients=privacy.colluding_clients,
                    num_params=ctx.num_params, gaussian_noise=getattr(privacy, "gaussian_noise", None))


def _build_blur_lus(options: dict[str, Any], sampler: Any, ctx: Any) -> DpFedAvg:
    return _build(options, sampler, ctx, {"blur_lambda": 0.4, "lus_sparsity": 0.7})


ALGORITHMS = {"dp-fedavg": _build, "dp-fedavg-blur-lus": _build_blur_lus}


def _arrival_metrics(metrics: dict[str, Any], plan: NoisePlan, uploads: Uploads, *, topped_up: bool) -> dict[str, Any]:
    """``metrics`` with what the arrivals say: none arrived, how many sampled clients the server
    topped up for (``topped_up``: the clients carry shares of the noise), and the update norms."""
    arrived = uploads.num_rows
    if not arrived:
        metrics["arrived"] = 0
    if topped_up and plan.cohort - arrived:
        metrics["topped_up_clients"] = plan.cohort - arrived
    norms = uploads.diagnostics.get("update_norm")
    if norms is not None and arrived:
        metrics.update({"update_norm_mean": float(norms.mean()),
                        "clipped_fraction": float((norms > plan.clip_norm).float().mean())})
    return metrics
