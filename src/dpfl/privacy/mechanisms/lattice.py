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

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and its siblings
``integer`` (and, when a release record is asked for, :mod:`dpfl.privacy.releases.skellam`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.integer import (
    MAX_SKELLAM_VARIANCE,
    IntegerPipeline,
    conditional_rounding_bound,
    skellam_noise,
)
from dpfl.rng import NoiseGenerator

if TYPE_CHECKING:
    from dpfl.privacy.releases.base import Observer
    from dpfl.privacy.releases.skellam import SkellamRelease

__all__ = ["LatticeGaussian"]

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

        return SkellamRelease(observer, self.variance, self.l2_sensitivity, self.l1_sensitivity, client_ids)
