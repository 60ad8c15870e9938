"""One-shot empirical ε from canary cosines (Andrew et al., arXiv 2302.03098), with a bootstrap CI.

Our reading of the method (the stored copy of the paper we could consult shows its abstract and
introduction only; details beyond those are stated here as *our* choices, not the paper's):

* c canary clients submit independent random unit directions u_j (scaled to the clip norm) in a
  real training run; at the end the statistic of canary j is cos(u_j, θ_T − θ_0), the cosine
  between its direction and the final model change (an observer of the final model only).
* Unseen canaries (directions drawn the same way but never inserted) give the null distribution;
  in dimension d their cosines are ≈ N(0, 1/d) (the paper's asymptotic argument).
* Both sets are modelled as Gaussians with a common (pooled) standard deviation s; the separation
  μ = (mean_in − mean_out)/s is the μ of a Gaussian mechanism (sensitivity μ, noise 1), and the
  estimate is that mechanism's ε at the run's δ: the ε solving the exact Gaussian δ(ε) curve
  (:func:`dpfl.privacy.calibration.analytic_gaussian_delta`, Balle & Wang 2018 Thm 8) at μ.
  *Our choice*: a pooled standard deviation (the paper fits the inserted canaries' own variance
  against N(0, 1/d); a pooled s is the equal-variance Gaussian-mechanism model the issue asks for,
  and is slightly conservative when inserted cosines are over-dispersed, e.g. under sampling).
* Confidence interval (*our choice*, not the paper's recipe): percentile bootstrap over canaries,
  resampling inserted and unseen cosines independently with replacement.

It is an *estimate* (a lower-bound-like audit for the final-model observer), not a certificate:
empirical ε far above the certified ε means the code adds less noise than it declares.

Imports nothing from dpfl but :mod:`dpfl.privacy.calibration`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from dpfl.privacy.calibration import analytic_gaussian_delta

__all__ = ["EpsilonEstimate", "epsilon_from_mu", "estimate_epsilon", "separation_mu"]


def epsilon_from_mu(mu: float, delta: float) -> float:
    """ε at δ of the Gaussian mechanism with sensitivity/noise ratio μ (μ-GDP), by bisection.

    Uses the exact single-release curve δ(ε) of :func:`analytic_gaussian_delta` (noise 1,
    sensitivity μ). μ <= 0 (no separation, or inserted canaries *less* aligned) gives ε = 0.
    """
    if not 0 < delta < 1:
        raise ValueError(f"`delta` must be in (0, 1). Found {delta}.")
    if not math.isfinite(mu):
        return math.inf
    if mu <= 0 or analytic_gaussian_delta(1.0, 0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0
    while analytic_gaussian_delta(1.0, hi, mu) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if analytic_gaussian_delta(1.0, mid, mu) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return hi


def separation_mu(cos_in: np.ndarray, cos_out: np.ndarray) -> float:
    """μ = (mean_in − mean_out) / pooled std (see the module docstring)."""
    a, b = np.asarray(cos_in, float), np.asarray(cos_out, float)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"need at least 2 inserted and 2 unseen canaries; found {a.size} and {b.size}.")
    pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
    diff = float(a.mean() - b.mean())
    if pooled == 0:
        return math.inf if diff > 0 else 0.0
    return diff / pooled


@dataclass(frozen=True)
class EpsilonEstimate:
    """An empirical ε with its bootstrap interval and the statistics it came from."""

    epsilon: float
    epsilon_low: float
    epsilon_high: float
    confidence: float
    delta: float
    mu: float
    mean_inserted: float
    std_inserted: float
    mean_unseen: float
    std_unseen: float
    num_inserted: int
    num_unseen: int
    bootstrap: int

    def to_dict(self) -> dict[str, Any]:
        return {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpsilonEstimate:
        """The inverse of :meth:`to_dict` (non-finite numbers come back from their strings)."""
        names = {f.name: f.type for f in fields(cls)}
        missing = set(names) - set(d)
        if missing:
            raise ValueError(f"an estimate record lacks {sorted(missing)}")
        values: dict[str, Any] = {k: (int(d[k]) if names[k] == "int" else float(d[k])) for k in names}
        return cls(**values)


def estimate_epsilon(
    cos_in: np.ndarray,
    cos_out: np.ndarray,
    delta: float,
    *,
    confidence: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
) -> EpsilonEstimate:
    """Empirical ε at δ from inserted and unseen canary cosines, with a percentile-bootstrap CI.

    Args:
        cos_in: cosines of the inserted canaries with the final model change.
        cos_out: cosines of unseen canaries (never inserted).
        delta: the run's δ.
        confidence: two-sided level of the interval.
        bootstrap: number of bootstrap resamples (0: no interval, low = high = point).
        seed: seed of the bootstrap's own numpy generator (not a privacy-relevant stream).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1). Found {confidence}.")
    a, b = np.asarray(cos_in, float), np.asarray(cos_out, float)
    mu = separation_mu(a, b)
    eps = epsilon_from_mu(mu, delta)
    lo = hi = eps
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        mus = np.array([
            separation_mu(a[rng.integers(0, a.size, a.size)], b[rng.integers(0, b.size, b.size)])
            for _ in range(bootstrap)
        ])
        q_lo, q_hi = np.quantile(mus, [(1 - confidence) / 2, (1 + confidence) / 2])
        lo, hi = epsilon_from_mu(float(q_lo), delta), epsilon_from_mu(float(q_hi), delta)  # ε is monotone in μ
    return EpsilonEstimate(
        epsilon=eps, epsilon_low=lo, epsilon_high=hi, confidence=confidence, delta=delta, mu=mu,
        mean_inserted=float(a.mean()), std_inserted=float(a.std(ddof=1)),
        mean_unseen=float(b.mean()), std_unseen=float(b.std(ddof=1)),
        num_inserted=int(a.size), num_unseen=int(b.size), bootstrap=bootstrap,
    )
