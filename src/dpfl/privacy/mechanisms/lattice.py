"""A floating-point-safe release of real-valued vectors: integers plus Skellam noise, on the lattice γ⁻¹ℤ.

A Gaussian mechanism implemented in floating point (y = x + σ·Z with Z a float sample) does not
release what its proof prices: the set of values y can take, and their low-order bits, depend on
x — Mironov 2012 ("On significance of the least significant bits for differential privacy")
tells two inputs apart from one output with near certainty, whatever σ, and Jin et al. 2022
("Are we there yet? Timing and floating-point attacks on differential privacy systems") extend
the attack to Gaussian samplers. ``tests/statistical/test_low_bit_attack.py`` runs it.

:class:`LatticeGaussian` releases instead, for rows x of L2 norm at most S:

1. **scale** by γ and **conditionally round** to integers (:class:`~.integer.IntegerPipeline`,
   without rotation and without a modulus: KLS21 Thm 23's rejection enforces ‖x̃‖₂ <= Δ2, the
   L2 sensitivity of the integer query; Δ1 = min(Δ2², √d·Δ2) its L1 sensitivity);
2. **add Skellam noise** Sk(μ) per coordinate, μ = (σ·Δ2)² (two Poisson draws,
   :func:`~.integer.skellam_noise`);
3. **release the integers** x̃ + Sk(μ); their value in the input's units is integer/γ
   (:meth:`LatticeGaussian.values`), a fixed function of the integer.

Every draw is an integer, and the released value is x̃ + noise computed exactly in int64: the set
of outputs is ℤ^d (γ⁻¹ℤ^d in the input's units) whatever x, and an integer carries no low-order
bits that depend on x beyond its value. The mechanism is exactly the Skellam mechanism on an
integer query of sensitivities (Δ2, Δ1) — what :class:`dpfl.privacy.releases.skellam.SkellamRelease`
prices (:meth:`LatticeGaussian.release_record`): the certificate is the truth for the numbers
actually released. The draws come from the generators given: ChaCha20
(:class:`dpfl.rng.CsprngGenerator`) where an adversary might model the generator, a torch
generator otherwise.

Why the integer path, not an exact discrete Gaussian sampler (Canonne, Kamath, Steinke 2020):
a sum of independent Skellam variables is Skellam, so one client's release, the sum of many
clients' shares under secure aggregation and a server's top-up are the same mechanism, priced by
one accountant (AKL21 Thm 3.5, and the binomial expansion for a secret Poisson sample,
``docs/proofs/skellam-subsampling.md``) that dpfl already checks numerically; a sum of discrete
Gaussians is not a discrete Gaussian, and a second sampler would need a second proof and a second
accountant. The price is the rounding's inflation Δ2/(γS) (:attr:`LatticeGaussian.rounding_inflation`,
→ 1 as γ grows) and the discreteness factor η₁√μ of the Skellam noise, by which its certified
PLD (the Gaussian pair dominating it, ``docs/proofs/skellam-gdp.md``) exceeds the Gaussian's at the
same variance (→ 1 as μ grows).

Neighbouring relation: add/remove of one row (zero-out: a row of zeros encodes to the zero
vector), as the Skellam release is priced.

:class:`NearestLatticeGaussian` is the same release for a vector that is not norm-bounded but
whose neighbours are (replace-one: UDP's and NbAFL's uploads, ‖x − x'‖₂ <= Δ): nearest rounding
of γx moves each coordinate by at most ½, so two neighbours' rounded vectors differ by at most
Δ2 = γΔ + √d in L2 (and Δ1 = min(Δ2², √d·Δ2) in L1, an integer vector's ‖v‖₁ <= ‖v‖₂²); the
Skellam noise Sk((zΔ2)²) is the multiplier z against that integer sensitivity. The Skellam
mechanism's divergences depend only on the shift between the two neighbours' integer queries
(AKL21 Thm 3.5 is stated for a shift of norms (Δ2, Δ1)), so it is priced the same under
replace-one as long as no sampling is amplified (:mod:`dpfl.privacy.releases.skellam`).

**Granularity γ** (:func:`conditional_lattice_scale`, :func:`nearest_lattice_scale`): the clip
norm (or the sensitivity) spans 2^16 lattice steps (more for a very long vector, so that nearest
rounding's √d stays below 1% of γΔ), lowered by powers of two only where the Skellam variance would
leave the range the PLD route certifies (μ <= 10^14, ``docs/proofs/skellam-gdp.md``) or where a
noised upload would not travel exactly as float32 integers (DP-FedAvg's local shares). With μ of
order 10^9 and more, the certified η₁√μ is 1 + O(1/μ) and the rounding inflation 1 + O(d/(γS)²)
(conditional rounding) or √d/(γΔ) (nearest): the certificate at multiplier z is the Gaussian's
at z to well within 1% (the noise itself is larger by the inflation; ``tests/statistical/
test_lattice_release.py`` measures both).

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and its siblings
``integer`` (and, when a release record is asked for, :mod:`dpfl.privacy.releases.skellam`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.integer import (
    MAX_POISSON_RATE,
    MAX_SKELLAM_VARIANCE,
    IntegerPipeline,
    conditional_rounding_bound,
    skellam_noise,
    skellam_noise_rows,
)
from dpfl.rng import NoiseGenerator

if TYPE_CHECKING:
    from dpfl.privacy.releases.base import Observer
    from dpfl.privacy.releases.skellam import SkellamRelease

__all__ = [
    "LATTICE_STEPS",
    "LatticeGaussian",
    "NearestLatticeGaussian",
    "conditional_lattice_scale",
    "nearest_lattice",
    "nearest_lattice_scale",
    "release_values",
]

#: γ·S (or γ·Δ): how many lattice steps the clip norm (the sensitivity) spans at most, by default.
LATTICE_STEPS = 2.0 ** 16
#: The largest Skellam variance whose Gaussian domination is certified (the PLD route):
#: :data:`dpfl.privacy.releases.skellam_gdp.MAX_VARIANCE` (this module does not import the
#: releases; ``tests/statistical/test_lattice_release.py`` checks that the two agree).
PLD_MAX_VARIANCE = 1e14
#: Integers up to this magnitude travel exactly as float32 (a deployed upload's dtype).
FLOAT32_EXACT = 2.0 ** 24
#: Tail allowance, in noise stds, for an upload's integers to stay within :data:`FLOAT32_EXACT`
#: (P(|Sk(μ)| > 40√μ) < 10^-300 by the Chernoff bound of ``skellam_tail_log_probability``).
_TAIL_STDS = 40.0

#: The integer pipeline's modulus is unused here (nothing is summed modulo 2^b); 62 bits is its
#: largest, so that no check on it can bind.
_UNUSED_BITS = 62


@dataclass(frozen=True)
class LatticeGaussian:
    """Integers plus Skellam noise for rows of L2 norm <= S (module docstring).

    Attributes:
        dim: d, the length of a row.
        clip_norm: S, the L2 bound of a row (a row above it is refused; clip first).
        noise_multiplier: σ > 0: the noise std per coordinate is σ·Δ2 integer units (σ·Δ2/γ in
            the input's units, ≈ σ·S for a large γ).
        scale: γ, integer units per unit of the input (γS >= 1).
        beta: β of conditional rounding.

    >>> m = LatticeGaussian(dim=1, clip_norm=1.0, noise_multiplier=1.0, scale=1024.0)
    >>> round(m.l2_sensitivity, 3), round(m.variance ** 0.5 / m.scale, 4)
    (1024.5, 1.0005)
    """

    dim: int
    clip_norm: float
    noise_multiplier: float
    scale: float
    beta: float = math.exp(-0.5)

    def __post_init__(self) -> None:
        z = self.noise_multiplier
        if isinstance(z, bool) or not isinstance(z, (int, float)) or not math.isfinite(z) or z <= 0:
            raise ConfigError(f"`noise_multiplier` must be a finite number > 0. Found {z!r}.")
        _ = self.pipeline  # validates dim, scale, clip_norm and beta
        if self.variance > MAX_SKELLAM_VARIANCE:
            raise ConfigError(f"a noise variance of {self.variance:.4g} integer units is beyond what is drawn "
                              f"exactly ({MAX_SKELLAM_VARIANCE:.4g}): lower `scale` (γ = {self.scale:g}).")

    @property
    def pipeline(self) -> IntegerPipeline:
        """The scale-and-round half (no rotation; the modulus is unused)."""
        return IntegerPipeline(dim=self.dim, bits=_UNUSED_BITS, scale=float(self.scale),
                               clip_norm=float(self.clip_norm), rotation=False, beta=self.beta)

    @property
    def l2_sensitivity(self) -> float:
        """Δ2 in integer units (enforced by conditional rounding)."""
        return conditional_rounding_bound(self.scale * self.clip_norm, self.dim, self.beta)

    @property
    def l1_sensitivity(self) -> float:
        """Δ1 = min(Δ2², √d·Δ2) in integer units."""
        return self.pipeline.l1_sensitivity

    @property
    def variance(self) -> float:
        """μ = (σ·Δ2)², the Skellam variance per coordinate in integer units."""
        return (self.noise_multiplier * self.l2_sensitivity) ** 2

    @property
    def rounding_inflation(self) -> float:
        """Δ2 / (γS): how much rounding enlarges the sensitivity (and so the noise)."""
        return self.l2_sensitivity / (self.scale * self.clip_norm)

    def release(self, x: Tensor, rounding: Sequence[NoiseGenerator], noise: NoiseGenerator) -> Tensor:
        """The released integers [K, d] (int64) of rows ``x`` [K, d]: x̃_k + Sk(μ).

        Args:
            x: rows of L2 norm <= S.
            rounding: one generator per row, for its rounding draws.
            noise: the generator of the K·d Skellam draws.

        Raises:
            ConfigError: a row above S, a shape other than [K, d], or a generator count other
                than K (:meth:`IntegerPipeline.encode`).
        """
        ints = self.pipeline.encode(x, rounding)
        return ints + skellam_noise(tuple(ints.shape), self.variance, noise).to(ints.device)

    def values(self, released: Tensor) -> Tensor:
        """The released integers in the input's units: integer/γ (float64), a fixed function of
        each integer (so no more than the integer is revealed)."""
        if released.dtype != torch.int64:
            raise ConfigError(f"the released values are int64 integers. Found {released.dtype}.")
        return released.to(torch.float64) / float(self.scale)

    def release_record(self, observer: Observer = "server",
                       client_ids: tuple[int, ...] | None = None) -> SkellamRelease:
        """What an observer of one release saw, for the ledger: the Skellam mechanism of variance
        μ on an integer query of sensitivities (Δ2, Δ1)."""
        from dpfl.privacy.releases.skellam import SkellamRelease

        return SkellamRelease(observer, self.variance, self.l2_sensitivity, self.l1_sensitivity, client_ids,
                              lattice=True)


def _check_multiplier(z: float) -> None:
    if isinstance(z, bool) or not isinstance(z, (int, float)) or not math.isfinite(z) or z <= 0:
        raise ConfigError(f"`noise_multiplier` must be a finite number > 0. Found {z!r}.")


def conditional_lattice_scale(clip_norm: float, dim: int, noise_multiplier: float, *,
                              share_float32: bool = False, beta: float = math.exp(-0.5)) -> float:
    """γ of a :class:`LatticeGaussian` (module docstring, "Granularity"): the largest power of two
    with γS <= :data:`LATTICE_STEPS` whose variance μ = (zΔ2)² is drawn in one Poisson pair per
    coordinate and within the PLD-certified range; with ``share_float32`` (an upload carrying a
    noise share of variance up to μ) also Δ2 + 40√μ <= 2^24, so that the noised integers travel
    exactly as float32.

    Raises:
        ConfigError: no power of two with γS >= 1 qualifies (z too large for the integer path).
    """
    _check_multiplier(noise_multiplier)
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ConfigError(f"the clip norm must be a finite number > 0. Found {clip_norm!r}.")
    k = int(math.log2(LATTICE_STEPS))
    while k >= 0:
        scale = 2.0 ** k / clip_norm
        d2 = conditional_rounding_bound(scale * clip_norm, dim, beta)
        mu = (noise_multiplier * d2) ** 2
        fits = mu / 2 <= MAX_POISSON_RATE and mu <= PLD_MAX_VARIANCE
        if share_float32:
            fits = fits and d2 + _TAIL_STDS * math.sqrt(mu) <= FLOAT32_EXACT
        if fits:
            return scale
        k -= 1
    raise ConfigError(f"no lattice granularity γ with γS >= 1 keeps the Skellam variance (zΔ2)² of noise multiplier "
                      f"{noise_multiplier:g} within the certified range: use `privacy.gaussian_noise: float`.")


def nearest_lattice_scale(sensitivity: float, dim: int, noise_multiplier: float) -> float:
    """γ of a :class:`NearestLatticeGaussian`: γΔ the smallest power of two >= max(2^16, 100√d)
    (nearest rounding's √d at most 1% of γΔ), lowered by powers of two while μ = (z(γΔ + √d))²
    exceeds the PLD-certified range (the rounding's share of the noise then grows; it is priced).

    Raises:
        ConfigError: no power of two γΔ >= 1 qualifies.
    """
    _check_multiplier(noise_multiplier)
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ConfigError(f"the sensitivity must be a finite number > 0. Found {sensitivity!r}.")
    root = math.sqrt(dim)
    k = max(int(math.log2(LATTICE_STEPS)), math.ceil(math.log2(100.0 * root)))
    while k >= 0:
        if (noise_multiplier * (2.0 ** k + root)) ** 2 <= PLD_MAX_VARIANCE:
            return 2.0 ** k / sensitivity
        k -= 1
    raise ConfigError(f"no lattice granularity γ with γΔ >= 1 keeps the Skellam variance of noise multiplier "
                      f"{noise_multiplier:g} within the certified range: use `privacy.gaussian_noise: float`.")


@dataclass(frozen=True)
class NearestLatticeGaussian:
    """Nearest rounding to γ⁻¹ℤ plus Skellam noise, for vectors whose neighbours differ by at most
    Δ in L2 (module docstring): the integers round(γx) + Sk(μ), μ = (zΔ2)², Δ2 = γΔ + √d.

    Attributes:
        dim: d, the length of a row.
        sensitivity: Δ, the L2 bound on the difference of two neighbours' rows (input units).
        noise_multiplier: z > 0: the noise std is z·Δ2 integer units (z·Δ·(1 + √d/(γΔ)) in the
            input's units).
        scale: γ, integer units per unit of the input.

    >>> m = NearestLatticeGaussian(dim=4, sensitivity=1.0, noise_multiplier=1.0, scale=1024.0)
    >>> m.l2_sensitivity, m.l1_sensitivity, round(m.rounding_inflation, 6)
    (1026.0, 2052.0, 1.001953)
    """

    dim: int
    sensitivity: float
    noise_multiplier: float
    scale: float

    def __post_init__(self) -> None:
        _check_multiplier(self.noise_multiplier)
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ConfigError(f"`dim` must be an integer >= 1. Found {self.dim!r}.")
        for name in ("sensitivity", "scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"`{name}` must be a finite number > 0. Found {v!r}.")
        if self.variance > MAX_SKELLAM_VARIANCE:
            raise ConfigError(f"a noise variance of {self.variance:.4g} integer units is beyond what is drawn "
                              f"exactly ({MAX_SKELLAM_VARIANCE:.4g}): lower the scale (γ = {self.scale:g}).")

    @property
    def l2_sensitivity(self) -> float:
        """Δ2 = γΔ + √d: nearest rounding moves each coordinate by at most ½."""
        return self.scale * self.sensitivity + math.sqrt(self.dim)

    @property
    def l1_sensitivity(self) -> float:
        """Δ1 = min(Δ2², √d·Δ2) (‖γ(x − x')‖₁ <= √d·γΔ, plus at most 1 per coordinate)."""
        d2 = self.l2_sensitivity
        return min(d2 * d2, math.sqrt(self.dim) * d2)

    @property
    def variance(self) -> float:
        """μ = (z·Δ2)², the Skellam variance per coordinate in integer units."""
        return (self.noise_multiplier * self.l2_sensitivity) ** 2

    @property
    def noise_std(self) -> float:
        """The noise std in the input's units, z·Δ2/γ."""
        return self.noise_multiplier * self.l2_sensitivity / self.scale

    @property
    def rounding_inflation(self) -> float:
        """Δ2 / (γΔ): how much rounding enlarges the sensitivity (and so the noise)."""
        return self.l2_sensitivity / (self.scale * self.sensitivity)

    def release(self, x: Tensor, noise: Sequence[NoiseGenerator]) -> Tensor:
        """The released integers [K, d] (int64) of rows ``x`` [K, d]: round(γx_k) + Sk(μ), row k's
        noise from ``noise[k]``.

        Raises:
            ConfigError: a shape other than [K, d], a generator count other than K, a non-finite
                entry, or γ|x| beyond what int64 arithmetic holds exactly (2^52).
        """
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ConfigError(f"release expects [K, {self.dim}] rows. Found {tuple(x.shape)}.")
        if len(noise) != x.shape[0]:
            raise ConfigError(f"one generator per row: {len(noise)} for {x.shape[0]} rows.")
        y = x.detach().to("cpu", torch.float64) * float(self.scale)
        if not bool(torch.isfinite(y).all()) or (y.numel() and float(y.abs().max()) > 2.0 ** 52):
            raise ConfigError("a lattice release needs finite rows with γ|x| <= 2^52 (lower the scale).")
        ints = torch.round(y).to(torch.int64)
        if len(noise) > 1 and all(g is noise[0] for g in noise):  # one stream for every row: one draw
            return ints + skellam_noise(tuple(ints.shape), self.variance, noise[0]).cpu()
        return ints + skellam_noise_rows(self.dim, self.variance, noise)

    def values(self, released: Tensor) -> Tensor:
        """The released integers in the input's units: integer/γ (float64), a fixed function of each
        integer."""
        if released.dtype != torch.int64:
            raise ConfigError(f"the released values are int64 integers. Found {released.dtype}.")
        return released.to(torch.float64) / float(self.scale)

    def release_record(self, observer: Observer = "server",
                       client_ids: tuple[int, ...] | None = None) -> SkellamRelease:
        """What an observer of one release saw, for the ledger: the Skellam mechanism of variance
        μ on an integer query of sensitivities (Δ2, Δ1), unamplified (the observer knows whose
        upload it is); the upload travels as integer/γ (``scale`` γ)."""
        from dpfl.privacy.releases.skellam import SkellamRelease

        return SkellamRelease(observer, self.variance, self.l2_sensitivity, self.l1_sensitivity, client_ids,
                              lattice=True, scale=self.scale)


@functools.lru_cache(maxsize=4096)
def nearest_lattice(dim: int, sensitivity: float, noise_std: float) -> NearestLatticeGaussian | None:
    """The lattice form of a Gaussian release of std ``noise_std`` against ``sensitivity`` Δ
    (replace-one): z = σ/Δ and γ of :func:`nearest_lattice_scale`; None when there is no noise."""
    if noise_std == 0:
        return None
    z = float(noise_std) / float(sensitivity)
    return NearestLatticeGaussian(int(dim), float(sensitivity), z, nearest_lattice_scale(float(sensitivity), dim, z))


def release_values(rows: Tensor, mechanisms: Sequence[NearestLatticeGaussian | None],
                   generators: Sequence[NoiseGenerator]) -> Tensor:
    """Row k released by ``mechanisms[k]`` with the noise of ``generators[k]``, in the input's units
    (integer/γ, float64 on the CPU); a row without a mechanism (no noise) is returned as it is."""
    if not (len(mechanisms) == len(generators) == rows.shape[0]):
        raise ConfigError(f"one mechanism and one generator per row: {len(mechanisms)} and {len(generators)} for "
                          f"{rows.shape[0]} rows.")
    out = rows.detach().to("cpu", torch.float64).clone()
    for k, (mech, gen) in enumerate(zip(mechanisms, generators, strict=True)):
        if mech is not None:
            out[k] = mech.values(mech.release(out[k:k + 1], [gen]))[0]
    return out
