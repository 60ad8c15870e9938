"""Composition helpers of the ledger: PLD grouping of many sampled releases, the tightest of the
valid bounds, and how an event enters pure composition.

This module imports nothing from dpfl except its siblings in ``dpfl.privacy.accounting``.
"""

from __future__ import annotations

import math
from collections import Counter

import dp_accounting as dpa
from dp_accounting import dp_event as dpe

from dpfl.privacy.accounting.events import amplification_support, compose, leaves

__all__ = ["PLD_GRID_STEP", "PLD_MAX_DISTINCT_SAMPLED"]


#: Above this many distinct *sampled* events, PLD groups noise multipliers on a geometric grid.
PLD_MAX_DISTINCT_SAMPLED = 64
#: Relative step of that grid (multipliers are rounded *down*: less noise, a valid upper bound).
PLD_GRID_STEP = 0.005


def _round_down(z: float) -> float:
    step = math.log1p(PLD_GRID_STEP)
    return math.exp(math.floor(math.log(z) / step + 1e-9) * step)


def _quantize_event(event: dpe.DpEvent) -> dpe.DpEvent:
    if isinstance(event, dpa.GaussianDpEvent) and event.noise_multiplier > 0:
        return dpa.GaussianDpEvent(min(event.noise_multiplier, _round_down(event.noise_multiplier)))
    if isinstance(event, dpa.PoissonSampledDpEvent):
        return dpa.PoissonSampledDpEvent(event.sampling_probability, _quantize_event(event.event))
    if isinstance(event, dpa.SampledWithoutReplacementDpEvent):
        return dpa.SampledWithoutReplacementDpEvent(
            event.source_dataset_size, event.sample_size, _quantize_event(event.event)
        )
    return event


def _quantize_for_pld(counts: Counter[dpe.DpEvent]) -> tuple[Counter[dpe.DpEvent], list[str]]:
    """Group many distinct sampled releases for the discretized PLD (valid upper bound).

    Each sampled release costs one PLD convolution; runs with noise that changes every round
    (decay schedules) would need one per round. Less noise is never more private (the noisier
    release is a post-processing of the less noisy one, also under sampling), so rounding every
    multiplier down to a 0.5% geometric grid gives a valid, slightly pessimistic PLD with few
    distinct events. Unsampled Gaussians are left alone (they are composed exactly in closed form).
    """
    sampled = {
        e for e in counts if isinstance(e, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent))
    }
    if len(sampled) <= PLD_MAX_DISTINCT_SAMPLED:
        return counts, []
    out: Counter[dpe.DpEvent] = Counter()
    for event, c in counts.items():
        out[_quantize_event(event) if event in sampled else event] += c
    return out, [
        f"PLD: {len(sampled)} distinct sampled releases grouped by rounding their noise "
        f"multipliers down to a {PLD_GRID_STEP:.1%} grid (valid upper bound)"
    ]


def _amplified(event: dpe.DpEvent, relation: str) -> bool:
    """Whether a shared receipt is a client-sampled event the accountant amplifies (a sampled
    event whose sampling it cannot price under ``relation`` is certified without it)."""
    if not isinstance(event, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent)):
        return False
    support = amplification_support(event, relation)
    return support["rdp"] or support["pld"]


def _events_from_counts(counts: Counter[dpe.DpEvent]) -> dpe.DpEvent:
    return compose(e if c == 1 else dpa.SelfComposedDpEvent(e, c) for e, c in counts.items())


def _tightest(eps_pld: float | None, eps_rdp: float, eps_pure: float | None) -> tuple[float, str]:
    """The smallest valid bound and its method (PLD first on ties, then RDP, then pure)."""
    eps, best = math.inf, "rdp"
    for name, value in (("pld", eps_pld), ("rdp", eps_rdp), ("pure", eps_pure)):
        if value is not None and value < eps:
            eps, best = value, name
    return eps, best


def _pure_kind(event: dpe.DpEvent) -> str:
    """How an event enters :func:`.events.pure_epsilon`: "pure" (randomized response or nothing),
    "zero" (a randomized response without noise: ε = ∞ when met first), "none" (not pure DP: the
    composition has no pure bound unless a "zero" comes first)."""
    kinds = set()
    for leaf, _ in leaves(event):
        if isinstance(leaf, dpa.NoOpDpEvent):
            continue
        if isinstance(leaf, dpa.RandomizedResponseDpEvent):
            kinds.add("zero" if leaf.noise_parameter == 0 and leaf.num_buckets != 1 else "pure")
        else:
            kinds.add("none")
    for kind in ("zero", "none"):
        if kind in kinds:
            return kind
    return "pure"
