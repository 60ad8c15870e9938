"""Quantile-based adaptive clipping (Andrew et al. 2021), as an option of DP-FedAvg.

Each round the clip norm C_t follows a target quantile γ of the cohort's update norms. Every
sampled client reports the bit b_i = 1[‖Δ_i‖ ≤ C_t], centered to b_i − 1/2 so that adding or
removing one client moves the sum by at most 1/2 (sensitivity 1/2, add/remove). The sum is
noised with N(0, σ_b²), normalized by the *expected* cohort size m = pN (a public constant, so
the normalization is post-processing) and shifted back: b̃ = clamp((Σ(b_i − ½) + N(0, σ_b²))/m + ½,
0, 1). The clip norm moves geometrically: C_{t+1} = C_t · exp(−η_C (b̃ − γ)).

Privacy: the round releases two Gaussian queries about the same sampled cohort — the clipped
update sum (noise multiplier z_Δ) and the centered count (multiplier 2σ_b). A Gaussian
mechanism with multiplier z_Δ composed with one with multiplier 2σ_b is *exactly* a Gaussian
mechanism with multiplier (z_Δ^{-2} + (2σ_b)^{-2})^{-1/2} (their privacy loss distributions
compose to that of the combined Gaussian). Andrew et al. (Theorem 1) therefore let the user
choose the total z and σ_b and solve for z_Δ = (z^{-2} − (2σ_b)^{-2})^{-1/2}, which needs
z < 2σ_b. The pair is then charged as one Poisson-sampled Gaussian with multiplier z: recording
the two as separately amplified releases would wrongly treat them as if they used independent
samples (it under-counts: the same client is in both or in neither). Against the server (no
amplification) the two per-client releases are recorded separately; they compose exactly.

Peers (checked in their documentation/source, not assumed): Flower's
``DifferentialPrivacyServerSideAdaptiveClipping`` / ``...ClientSideAdaptiveClipping`` and
TensorFlow Federated's ``DifferentiallyPrivateFactory.gaussian_adaptive`` (TF Privacy's
``QuantileAdaptiveClipSumQuery``) implement this client-level algorithm with the same defaults
(γ = 0.5, η_C = 0.2, σ_b = m/20, geometric update) and the same noise split; Opacus offers the
same rule at the *sample* level for DP-SGD (``AdaClipDPOptimizer``, record-level clipping of
per-sample gradients), not for federated client updates. Accounting differs: TF Privacy's query
returns the round's event as the composition of the sum's and the count's events; Flower's
wrappers compute no ε at all; Opacus counts unclipped samples as 0/1 (sensitivity 1) while
splitting the noise with the 2σ_b of a ½-sensitivity count (as read in ``adaclipoptimizer.py``).
dpfl centers the bits (sensitivity ½, as TF Privacy) and records the pair in the ledger as
described above.

Nothing here imports from dpfl except :mod:`dpfl.errors`.

References:
    G. Andrew, O. Thakkar, H. B. McMahan, S. Ramaswamy, "Differentially Private Learning with
    Adaptive Clipping", NeurIPS 2021 (arXiv:1905.03871), Algorithm 1 and Theorem 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dpfl.errors import ConfigError

COUNT_SENSITIVITY = 0.5
"""L2 sensitivity of the centered count Σ(b_i − ½) under add/remove one client."""


@dataclass(frozen=True)
class QuantileClipRule:
    """The geometric clip-norm update C ← C·exp(−η_C (b̃ − γ)).

    Attributes:
        target_unclipped_quantile: γ in [0, 1].
        learning_rate: η_C ≥ 0.
        expected_cohort: m = pN, the normalizer of the noised count (public).
    """

    target_unclipped_quantile: float
    learning_rate: float
    expected_cohort: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.target_unclipped_quantile <= 1.0:
            raise ConfigError(f"`target_unclipped_quantile` must be in [0, 1]. Found {self.target_unclipped_quantile}.")
        if not self.learning_rate >= 0:
            raise ConfigError(f"`clip_learning_rate` must be >= 0. Found {self.learning_rate}.")
        if not self.expected_cohort > 0:
            raise ConfigError(f"the expected cohort size must be > 0. Found {self.expected_cohort}.")

    @staticmethod
    def centered_bits(norms: torch.Tensor, clip_norm: float) -> torch.Tensor:
        """b_i − ½ with b_i = 1[‖Δ_i‖ ≤ C] ([K], values ±½)."""
        return (norms <= clip_norm).to(torch.float64) - 0.5

    def unclipped_fraction(self, noised_centered_sum: float) -> float:
        """b̃ = clamp(noised sum / m + ½, 0, 1)."""
        return min(1.0, max(0.0, noised_centered_sum / self.expected_cohort + 0.5))

    def next_clip(self, clip_norm: float, unclipped_fraction: float) -> float:
        """C·exp(−η_C (b̃ − γ))."""
        return float(clip_norm * math.exp(-self.learning_rate * (unclipped_fraction - self.target_unclipped_quantile)))
