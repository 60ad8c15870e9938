"""The integer pipeline of secure aggregation: scale, rotate, round, add a Skellam share, wrap mod 2^b.

A client's clipped update x (‖x‖₂ <= S, floats) becomes the integer vector a secure aggregation
protocol can sum (Agarwal, Kairouz, Liu 2021 §4, "The Skellam Mechanism for Differentially
Private Federated Learning"; Kairouz, Liu, Steinke 2021 §4, "The Distributed Discrete Gaussian
Mechanism for Federated Learning with Secure Aggregation"):

1. **scale** by γ (integer units per unit of the update): ‖γx‖₂ <= γS;
2. **rotate** (optional) by a randomized Hadamard transform H·D/√d' (random signs D from a
   public per-round seed, the vector zero-padded to d' = 2^⌈log₂ d⌉): an orthonormal map, so the
   L2 norm is unchanged while every coordinate becomes about ‖x‖/√d' — rounding and the modulus
   then cost little on spiky updates;
3. **conditional randomized rounding** — each coordinate rounded down or up with the probability
   that makes it unbiased, the whole vector redrawn until ‖x̃‖₂ <= Δ2, where
   Δ2 = sqrt((γS)² + d'/4 + sqrt(2 ln(1/β))·(γS + √d'/2)) (KLS21, Theorem 23: a draw passes with
   probability >= 1 − β). The bound is *enforced* by the rejection, so the sensitivity of the
   integer query is Δ2 whatever the acceptance rate; for an integer vector ‖x̃‖₁ <= min(Δ2², √d'·Δ2)
   (each nonzero coordinate has |x̃_i| <= x̃_i²), the L1 sensitivity Δ1;
4. a **Skellam share** Sk(μ_k) = Poisson(μ_k/2) − Poisson(μ_k/2) per coordinate from the client's
   own stream (:func:`skellam_noise`): the sum of the shares is Sk(Σ μ_k), the mechanism
   :mod:`dpfl.privacy.releases.skellam` prices;
5. **modulo 2^b** (residues in [0, 2^b)): what the client uploads and the protocol sums.

The server decodes the modular sum (:meth:`IntegerPipeline.decode`): centred residue in
[−2^{b−1}, 2^{b−1}), inverse rotation, divided by γ. The decoded value is the true sum unless a
coordinate of the true integer sum left [−2^{b−1}, 2^{b−1}) (a *wrap*):
:meth:`IntegerPipeline.wrap_log_probability` bounds the probability of that per round — the
signal of n contributors is at most n·Δ2 in every coordinate, and the Skellam tail is bounded by
its Chernoff bound (:func:`dpfl.privacy.releases.skellam.skellam_tail_log_probability`), union
over the d' coordinates.

Every draw (rounding uniforms, Poisson draws) goes through :mod:`dpfl.privacy.mechanisms.draw`: a
generator is a torch generator (the numbers dpfl always drew) or a ChaCha20
:class:`~dpfl.rng.CsprngGenerator`. The rotation's signs are public and stay on torch.

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng`, its siblings
``rows`` and ``draw`` and the Skellam tail bound of :mod:`dpfl.privacy.releases.skellam`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms import draw
from dpfl.privacy.mechanisms.rows import for_rows
from dpfl.rng import NoiseGenerator

__all__ = [
    "IntegerPipeline",
    "conditional_rounding_bound",
    "hadamard",
    "skellam_noise",
    "skellam_noise_rows",
    "MAX_SKELLAM_VARIANCE",
]

#: Conditional rounding redraws a vector at most this many times (each draw passes with
#: probability >= 1 − β; at β = e^-0.5 the chance of this many failures is below 10^-2000).
MAX_ROUNDING_TRIES = 10_000


def conditional_rounding_bound(l2: float, dim: int, beta: float) -> float:
    """Δ2: the L2 bound conditional rounding enforces on a vector of norm <= ``l2`` (KLS21 Thm 23).

    >>> round(conditional_rounding_bound(0.0, 4, math.exp(-0.5)), 6)
    1.732051
    """
    if not 0 < beta < 1:
        raise ConfigError(f"`beta` (conditional rounding) must be in (0, 1). Found {beta!r}.")
    return math.sqrt(l2 * l2 + dim / 4.0 + math.sqrt(2.0 * math.log(1.0 / beta)) * (l2 + math.sqrt(dim) / 2.0))


def hadamard(x: Tensor) -> Tensor:
    """Orthonormal fast Walsh–Hadamard transform along the last dimension (a power of two).

    H/√n is symmetric and orthonormal, so it is its own inverse.
    """
    n = x.shape[-1]
    if n & (n - 1):
        raise ConfigError(f"the Hadamard transform needs a power-of-two length. Found {n}.")
    lead = x.shape[:-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    return (y.reshape(*lead, n) / math.sqrt(n)).to(x.dtype)


#: Largest Poisson rate drawn at once: torch.poisson (CPU, float64) is accurate up to about 2^46
#: and degrades beyond (a variance off by 3–13% from 2^48, draws on a lattice from 2^53, zeros
#: from 2^66); larger variances are drawn as sums of parts (Skellam is infinitely divisible).
MAX_POISSON_RATE = 2.0 ** 40
#: At most this many parts: a larger variance is refused (:data:`MAX_SKELLAM_VARIANCE`).
MAX_SKELLAM_PARTS = 64
MAX_SKELLAM_VARIANCE = 2 * MAX_POISSON_RATE * MAX_SKELLAM_PARTS


def skellam_noise(shape: Sequence[int], variance: float, generator: NoiseGenerator) -> Tensor:
    """Sk(variance) per entry: Poisson(variance/2) − Poisson(variance/2), int64, from ``generator``;
    a variance above 2·:data:`MAX_POISSON_RATE` is drawn as the sum of J equal parts Sk(variance/J)
    (exact: sums of independent Skellams are Skellam).

    Raises:
        ConfigError: a negative, non-finite or too large (> :data:`MAX_SKELLAM_VARIANCE`) variance.
    """
    if variance < 0 or not math.isfinite(variance):
        raise ConfigError(f"the Skellam variance must be finite and >= 0. Found {variance!r}.")
    if variance > MAX_SKELLAM_VARIANCE:
        raise ConfigError(f"a Skellam variance of {variance:.4g} is beyond what is drawn exactly here "
                          f"({MAX_SKELLAM_VARIANCE:.4g}): lower `secure_sum.scale`.")
    if variance == 0:
        return torch.zeros(tuple(shape), dtype=torch.int64, device=generator.device)
    parts = max(1, math.ceil(variance / 2.0 / MAX_POISSON_RATE))
    rate = torch.full(tuple(shape), variance / 2.0 / parts, dtype=torch.float64, device=generator.device)
    out = torch.zeros(tuple(shape), dtype=torch.int64, device=generator.device)
    for _ in range(parts):
        a = draw.poisson(rate, generator)
        b = draw.poisson(rate, generator)
        out += (a - b).to(torch.int64)
    return out




def skellam_noise_rows(dim: int, variance: float, generators: Sequence[NoiseGenerator]) -> Tensor:
    """[K, dim] int64: row k is exactly ``skellam_noise((dim,), variance, generators[k])``, rows drawn
    in parallel threads (a Skellam draw costs two Poisson draws, ~10× a Gaussian's)."""
    out = torch.empty((len(generators), dim), dtype=torch.int64)

    def row(i: int) -> None:
        out[i] = skellam_noise((dim,), variance, generators[i]).cpu()

    for_rows(len(generators), row, dim * 2 * max(1, int(variance > 0)) * 16)
    return out


@dataclass(frozen=True)
class IntegerPipeline:
    """The numbers of one integer encoding (module docstring), fixed before the run.

    Attributes:
        dim: d, the length of the float vector.
        bits: b, the modulus 2^b of the secure sum (2..62).
        scale: γ, integer units per unit of the update.
        clip_norm: S, the L2 bound of the float vector.
        rotation: apply the randomized Hadamard transform (d' = next power of two).
        beta: β of conditional rounding.
    """

    dim: int
    bits: int
    scale: float
    clip_norm: float
    rotation: bool = False
    beta: float = math.exp(-0.5)

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ConfigError(f"`dim` must be a positive integer. Found {self.dim!r}.")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 62:
            raise ConfigError(f"`bits` (the secure sum's modulus 2^bits) must be an integer in [2, 62]. "
                              f"Found {self.bits!r}.")
        for name in ("scale", "clip_norm"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"`{name}` must be a finite number > 0. Found {v!r}.")
        if self.scale * self.clip_norm < 1:
            raise ConfigError(f"`scale` γ = {self.scale:g} maps the clip norm S = {self.clip_norm:g} below one integer "
                              "unit (γS < 1): every update would round to almost nothing; raise the scale.")
        conditional_rounding_bound(0.0, 1, self.beta)  # validates beta

    @property
    def padded_dim(self) -> int:
        """d': the uploaded length (d, or the next power of two with rotation)."""
        return 1 << (self.dim - 1).bit_length() if self.rotation else self.dim

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    @property
    def l2_sensitivity(self) -> float:
        """Δ2 in integer units (enforced by conditional rounding)."""
        return conditional_rounding_bound(self.scale * self.clip_norm, self.padded_dim, self.beta)

    @property
    def l1_sensitivity(self) -> float:
        """Δ1 = min(Δ2², √d'·Δ2): the L1 bound of an integer vector of L2 norm <= Δ2."""
        d2 = self.l2_sensitivity
        return min(d2 * d2, math.sqrt(self.padded_dim) * d2)

    @property
    def rounding_inflation(self) -> float:
        """Δ2 / (γS): how much rounding enlarges the sensitivity (and so the noise)."""
        return self.l2_sensitivity / (self.scale * self.clip_norm)

    # ------------------------------------------------------------------ client side

    def rotation_signs(self, generator: torch.Generator) -> Tensor:
        """The random signs D of the round's rotation (float64 ±1), from a public generator."""
        bits = torch.randint(0, 2, (self.padded_dim,), generator=generator, device=generator.device)
        return (bits * 2 - 1).to(torch.float64)

    def encode(self, x: Tensor, generators: Sequence[NoiseGenerator], signs: Tensor | None = None) -> Tensor:
        """Rows of ``x`` [K, d] (each of L2 norm <= S) → integer vectors [K, d'] of norm <= Δ2.

        Row k's rounding draws come only from ``generators[k]`` (its client's stream), so a row
        is the same whether it is encoded alone (on a client) or stacked (in simulation).

        Raises:
            ConfigError: a row's norm exceeds S; rotation without ``signs``; rounding that keeps
                failing (a bug: the bound holds with probability >= 1 − β per draw).
        """
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ConfigError(f"encode expects [K, {self.dim}] rows. Found {tuple(x.shape)}.")
        if len(generators) != x.shape[0]:
            raise ConfigError(f"one generator per row: {len(generators)} for {x.shape[0]} rows.")
        y = x.to(torch.float64)
        norms = y.norm(dim=1, keepdim=True)
        if bool((norms > self.clip_norm * (1 + 1e-3)).any()):
            raise ConfigError(f"a row of norm {float(norms.max()):.6g} exceeds the clip norm {self.clip_norm}: "
                              "clip before encoding.")
        # a float32 clip can leave a norm a few ulps above S: project back exactly (in float64)
        factor = torch.clamp(self.clip_norm / norms.clamp_min(1e-300), max=1.0) * self.scale
        y = y.mul_(factor) if y is not x else y * factor
        if self.rotation:
            if signs is None:
                raise ConfigError("rotation needs the round's signs (rotation_signs).")
            y = torch.nn.functional.pad(y, (0, self.padded_dim - self.dim))
            y = hadamard(y * signs.to(y.device))
        bound_sq = self.l2_sensitivity ** 2
        # randomized rounding as floor(y + u), u ~ U[0, 1): floor(y) + 1 with probability frac(y),
        # else floor(y) — unbiased, two passes. Row k's uniforms come from generators[k]; the
        # first draw of every row at once, rows in parallel.
        u = torch.empty((x.shape[0], self.padded_dim), dtype=torch.float64)

        def first(k: int) -> None:
            draw.rand_(u[k], generators[k])

        for_rows(x.shape[0], first, self.padded_dim * 8)
        rounded = u.to(y.device).add_(y).floor_()
        ok = torch.einsum("ij,ij->i", rounded, rounded) <= bound_sq
        out = rounded.to(torch.int64)
        for k in torch.nonzero(~ok).flatten().tolist():  # redraw the rows above Δ2, each from its stream
            g = generators[k]
            for _ in range(MAX_ROUNDING_TRIES - 1):
                uniforms = draw.rand(self.padded_dim, g, dtype=torch.float64).to(y.device)
                row = uniforms.add_(y[k]).floor_()
                if float((row * row).sum()) <= bound_sq:
                    out[k] = row.to(torch.int64)
                    break
            else:
                raise ConfigError(f"conditional rounding failed {MAX_ROUNDING_TRIES} times for row {k}: "
                                  f"the bound Δ2 = {self.l2_sensitivity:.6g} does not hold for this input.")
        return out

    def to_residues(self, v: Tensor) -> Tensor:
        """Integers → residues in [0, 2^b): the low b bits of the two's complement int64, which is
        v mod 2^b for every sign (a power-of-two modulus; 4× faster than ``torch.remainder``)."""
        if v.dtype != torch.int64:
            return torch.remainder(v, self.modulus)
        return torch.bitwise_and(v, self.modulus - 1)

    def modular_sum(self, residues: Tensor) -> Tensor:
        """The secure sum: Σ rows mod 2^b (int64; exact: b <= 62 and int64 sums wrap consistently
        modulo 2^64, a multiple of 2^b)."""
        if residues.dtype != torch.int64:
            raise ConfigError(f"residues must be int64. Found {residues.dtype}.")
        if residues.ndim == 1:
            return self.to_residues(residues)
        return self.to_residues(residues.sum(0))

    # ------------------------------------------------------------------ server side

    def decode(self, residue_sum: Tensor, signs: Tensor | None = None) -> Tensor:
        """The decoded sum [d] (float64, in the update's units) of a modular sum [d']."""
        if residue_sum.shape != (self.padded_dim,):
            raise ConfigError(f"decode expects a [{self.padded_dim}] sum. Found {tuple(residue_sum.shape)}.")
        r = self.to_residues(residue_sum.to(torch.int64))
        half = self.modulus // 2
        centred = torch.where(r >= half, r - self.modulus, r).to(torch.float64)
        if self.rotation:
            if signs is None:
                raise ConfigError("rotation needs the round's signs (rotation_signs).")
            centred = hadamard(centred) * signs.to(centred.device)
            centred = centred[: self.dim]
        return centred / self.scale

    def wrap_log_probability(self, contributors: int, variance: float) -> float:
        """log of a bound on P(some coordinate of the true sum leaves [−2^{b−1}, 2^{b−1})) in a
        round with at most ``contributors`` vectors and noise Sk(``variance``) (module docstring)."""
        from dpfl.privacy.releases.skellam import skellam_tail_log_probability

        t = self.modulus / 2 - 1 - contributors * self.l2_sensitivity
        if t <= 0:
            return 0.0
        return min(0.0, math.log(self.padded_dim) + skellam_tail_log_probability(variance, t))
