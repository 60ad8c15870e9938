"""The reach of a canary audit: the largest ε it could have shown in its setting, and the verdict.

The one-shot estimate (:mod:`dpfl.audit.estimate`) measures the separation μ between the inserted
canaries' cosines with the final model change θ_T − θ_0 and the unseen canaries' cosines. Noise
is only one of the things that hide a canary: the final model change also holds the training
signal and the other canaries, and a random direction's cosine with it spreads as ≈ 1/sqrt(d)
whatever the mechanism does. So even a mechanism that adds *no* noise at all gives a finite μ,
and an audit whose lower confidence bound cannot exceed the certified ε in that extreme case
cannot detect any violation: "no flag" then says nothing about the code.

**Reach (what `dpfl audit` prints and what the verdict uses).** The same audit — same config,
seed, canaries, unseen directions, bootstrap and confidence — of the *un-noised* mechanism: every
noise number of every round plan is set to 0 (:meth:`dpfl.audit.canary.CanaryAlgorithm` with
``silent=True``), the ledger and sampling unchanged, and the reach is the lower end of that run's
interval: the largest lower bound this statistic, canary count and confidence level produce in
this setting when the noise is gone. A noise bug can only move a run towards the un-noised one,
so a run whose own lower bound is above the certificate needs the reach to be above it too (up to
sampling error). It costs a second training run of the same size (in a temporary store: the
un-noised run is never stored next to real ones, its certificate would be false).

**Verdict.** ``violation``: the empirical lower bound is above the certified ε (the flag);
``consistent``: no violation, and the reach is at least the certified ε (a mechanism with no noise
would have been caught); ``inconclusive``: no violation, and the reach is below the certified ε —
this audit cannot detect violations below ε ≈ reach.

**Why the reach is what it is (a model, used for the advice and the analytic cap).** Let canary j
join p_j rounds and move the final model by a per participation along its unit direction u_j
(every canary of a run has the same a: same clip norm, weight and sample count), and let the rest
of the noise-free model change be a training signal s. With |Δ|² ≈ |s|² + a²·Σ_k p_k² (random
directions in R^d are nearly orthogonal) and r = |s|²/(a²·E[p²]) the signal's energy in units of
one canary's,

    mean_in − mean_out = E[p] / sqrt(E[p²]·(r + m)),
    var_in = Var(p) / (E[p²]·(r + m)) + 1/d,      var_out = 1/d,

so μ = (mean_in − mean_out)/s_pooled with s_pooled² = ((m−1)·var_in + (n−1)·var_out)/(m+n−2)
(the estimator's pooled variance). Its standard error is approximated as for a standardized
mean difference, se² = (var_in/m + var_out/n)/s_pooled² + μ²/(2(m+n)) (the large-sample variance
of a standardized mean difference, Hedges & Olkin 1985, ch. 5, with each group's own variance), and the lower end of
a two-sided interval at confidence c is μ − z·se with z = Φ⁻¹((1+c)/2).

* **The analytic cap** (r = 0: canaries alone, no noise, no training signal) is a function of the
  canary count m, the unseen count n, the dimension d, the participation counts and the
  confidence only: :func:`reach_cap`. With every canary in every round it is μ = sqrt(d/m) before
  the confidence term: the canaries crowd one another, so *more* canaries lower the cap while
  they narrow the interval. It is an upper limit of the reach in the model above (a training
  signal only adds to |Δ|), cheap, and printed next to the measured reach.
* **The advice** fits r from the un-noised run's separation (:func:`signal_ratio`) and predicts
  the reach at other canary counts with the same model (:func:`predicted_reach`): the audit's own
  knob. The setting's knobs follow from the formula: μ grows as sqrt(d) (a larger model), and
  as a canary's weight a grows against the training signal (fewer clients per round: each
  canary is one of qN rows of a round's mean).

Imports nothing from dpfl but :mod:`dpfl.audit.estimate`.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from dpfl.audit.estimate import epsilon_from_mu

__all__ = ["Verdict", "predicted_reach", "reach_advice", "reach_cap", "reach_mu", "signal_ratio", "verdict"]

Verdict = Literal["violation", "consistent", "inconclusive"]


def _moments(participations: Any) -> tuple[float, float, float]:
    p = np.asarray(participations, dtype=float)
    if p.ndim != 1 or p.size < 2:
        raise ValueError(f"`participations` must hold one count per canary (at least 2); found shape {p.shape}.")
    if (p < 0).any():
        raise ValueError(f"`participations` must be counts >= 0; found {p.min()}.")
    mean, sq = float(p.mean()), float((p * p).mean())
    if mean == 0:
        raise ValueError("no canary joined any round: the audit has nothing to measure.")
    return mean, sq, max(0.0, sq - mean * mean)


def reach_mu(num_unseen: int, dim: int, participations: Any, *, confidence: float,
             signal: float = 0.0) -> tuple[float, float]:
    """The expected separation μ of an un-noised audit and the lower end of its interval.

    Args:
        num_unseen: n, the unseen canary directions.
        dim: d, the number of model parameters.
        participations: p_j, the rounds each of the m inserted canaries joined.
        confidence: c, the two-sided level of the interval.
        signal: r = |s|²/(a²·E[p²]), the training signal's energy in units of one canary's
            (0: canaries alone; see the module docstring).

    Returns:
        (μ, μ − z·se) of the module docstring's model.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1). Found {confidence}.")
    if num_unseen < 2:
        raise ValueError(f"`num_unseen` must be at least 2. Found {num_unseen}.")
    if dim < 1:
        raise ValueError(f"`dim` must be positive. Found {dim}.")
    if not signal >= 0:
        raise ValueError(f"`signal` must be >= 0. Found {signal}.")
    mean, sq, var = _moments(participations)
    m, n = len(participations), int(num_unseen)
    diff = mean / math.sqrt(sq * (signal + m))
    var_in = var / (sq * (signal + m)) + 1.0 / dim
    var_out = 1.0 / dim
    pooled = ((m - 1) * var_in + (n - 1) * var_out) / (m + n - 2)
    mu = diff / math.sqrt(pooled)
    se = math.sqrt((var_in / m + var_out / n) / pooled + mu * mu / (2 * (m + n)))
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    return mu, mu - z * se


def reach_cap(num_unseen: int, dim: int, participations: Any, *, delta: float, confidence: float) -> float:
    """The analytic cap: ε at δ of the lower end of μ for canaries alone (no noise, no signal).

    A function of the canary count (``len(participations)``), their participation counts, the
    unseen count, the dimension and the confidence level only (see the module docstring).
    """
    return epsilon_from_mu(reach_mu(num_unseen, dim, participations, confidence=confidence)[1], delta)


def signal_ratio(mean_difference: float, participations: Any) -> float:
    """r fitted from an un-noised audit: mean_in − mean_out = E[p]/sqrt(E[p²]·(r + m)), so
    r = E[p]²/(E[p²]·diff²) − m (0 when the canaries alone explain the separation; inf when the
    canaries are not separated at all)."""
    mean, sq, _ = _moments(participations)
    if not mean_difference > 0:
        return math.inf
    return max(0.0, mean * mean / (sq * mean_difference**2) - len(participations))


def predicted_reach(num_canaries: int, num_unseen: int, dim: int, participations: Any, *, signal: float,
                    delta: float, confidence: float) -> float:
    """The reach the model predicts with ``num_canaries`` canaries joining like ``participations``
    (their counts resampled to the new size by repetition: the same participation law)."""
    p = np.asarray(participations, dtype=float)
    if num_canaries < 2:
        raise ValueError(f"`num_canaries` must be at least 2. Found {num_canaries}.")
    resized = np.resize(p, num_canaries)
    if math.isinf(signal):
        return 0.0
    return epsilon_from_mu(reach_mu(num_unseen, dim, resized, confidence=confidence, signal=signal)[1], delta)


def verdict(empirical_low: float, reach: float, certified: float | None) -> Verdict | None:
    """``violation`` / ``consistent`` / ``inconclusive`` (module docstring); None without a
    certificate to compare with."""
    if certified is None:
        return None
    if empirical_low > certified:
        return "violation"
    return "consistent" if reach >= certified else "inconclusive"


def reach_advice(audit: dict[str, Any]) -> str:
    """What would raise the reach of an audit entry (one line; see the module docstring)."""
    share = audit.get("reach_canary_share")
    best = audit.get("reach_best_canaries")
    cert = audit.get("certified_epsilon_public")
    parts = []
    if best is not None and cert is not None and best["reach"] >= cert and best["canaries"] != audit["canaries"]:
        parts.append(f"{best['canaries']} canaries instead of {audit['canaries']} (predicted reach "
                     f"≈ {best['reach']:.3g})")
    elif best is not None:
        parts.append(f"no canary count reaches the certificate (predicted best ≈ {best['reach']:.3g} with "
                     f"{best['canaries']})")
    where = ("the noise-free model change is mostly training signal" if share is None or share < 0.5
             else "the canaries crowd one another")
    share_text = "" if share is None else f" (canaries: {share:.0%} of it)"
    parts.append(f"{where}{share_text}: a larger model (the separation grows as sqrt(d), d = "
                 f"{audit.get('dimension', 'n/a')}) or fewer clients per round (each canary then weighs more "
                 f"in the final model) raise it")
    return "; ".join(parts) + "."
