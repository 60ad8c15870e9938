"""Run metadata → ``dp_accounting`` events: the receipts every privacy statement is derived from.

One convention everywhere in dpfl: a Gaussian release is described by the noise std actually
added and the L2 *sensitivity actually enforced under the stated neighbouring relation* — the
largest distance between the released vector on two neighbouring inputs (a code-enforced bound
such as a clip, never a paper's unproven value). The event then carries the *noise multiplier*
``noise_std / sensitivity``, i.e. the ratio of the noise to the shift between neighbours.

``dp_accounting`` reads that multiplier as a shift ratio under every relation in its RDP
accountant, and under add/remove in its PLD accountant; its PLD accountant under replace-one
instead reads it relative to a *norm bound* and doubles the shift. :mod:`.certify` therefore
presents events to the PLD accountant in its own units (see ``certify._pld_view``); callers of
this module never need to care.

Sampling wrappers come from the sampler's description (``{"kind": "all" | "fixed_size" |
"poisson", ...}``), so the accountant wraps exactly what the engine did:

* full participation → no wrapper;
* Poisson (rate q < 1) → ``PoissonSampledDpEvent`` (certified under add/remove);
* fixed-size without replacement (K of N, K < N) → ``SampledWithoutReplacementDpEvent``
  (certified by RDP under replace-one only; dp_accounting's PLD does not support it).

001's two-point randomizer is pure ε-LDP per coordinate; its worst pair of inputs (the two range
ends) gives exactly binary randomized response, so one report is a
``RandomizedResponseDpEvent(noise_parameter=2/(1+e^ε), num_buckets=2)`` under replace-one, and a
release of d coordinates over T rounds composes d·T of them.

Equal events are grouped with ``SelfComposedDpEvent`` (composition is commutative for every
accountant used here), which keeps RDP and PLD composition fast for long runs with changing noise.

This module imports nothing from dpfl except :mod:`dpfl.errors`.

References:
    dp_accounting ``dp_event.py``; 000 eq. 2 and 002 eq. 4.7 (aggregate sensitivity = max weight
    × per-client sensitivity); 001 eq. 2 (two-point randomizer); Wang, Balle, Kasiviswanathan
    2019 (sampling without replacement, replace-one); Mironov, Talwar, Zhang 2019 (Poisson).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import dp_accounting as dpa
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError, PrivacyPreconditionError

__all__ = [
    "SCHEMA_KINDS",
    "MechanismKind",
    "PrivacyUnit",
    "Relation",
    "SamplerLike",
    "aggregate_noise_std",
    "aggregate_sensitivity",
    "amplification_support",
    "compose",
    "drop_sampling",
    "fixed_size_sampled_event",
    "gaussian_event",
    "gaussian_rounds_event",
    "neighboring_relation",
    "noise_multiplier",
    "poisson_sampled_event",
    "pure_epsilon",
    "sampled_event",
    "two_point_event",
    "two_point_noise_parameter",
    "validate_delta",
    "validate_relation",
    "validate_sampling",
    "validate_unit",
]

Relation = Literal["add_remove", "replace_one"]
PrivacyUnit = Literal["client", "record"]
MechanismKind = Literal["gaussian", "two_point"]

RELATIONS: tuple[str, ...] = ("add_remove", "replace_one")
UNITS: tuple[str, ...] = ("client", "record")
SAMPLING_KINDS: tuple[str, ...] = ("all", "fixed_size", "poisson", "min_separation", "cyclic_poisson", "availability")
# participation schemas (dpfl.sampling.schemas): the ledger enforces them round by round; none of
# them amplifies a broadcast about the whole population
SCHEMA_KINDS: tuple[str, ...] = ("min_separation", "cyclic_poisson", "availability")


@runtime_checkable
class SamplerLike(Protocol):
    """What the accountant needs from a client sampler (see :mod:`dpfl.sampling.clients`)."""

    def wrap_event(self, event: dpe.DpEvent, num_clients: int) -> dpe.DpEvent:
        """The event of one round of this sampling applied to ``event``."""
        ...

    def describe(self) -> dict[str, Any]:
        """A JSON-serializable description, e.g. ``{"kind": "poisson", "sample_rate": 0.04}``."""
        ...


# --------------------------------------------------------------------------- validation


def validate_relation(relation: str) -> Relation:
    """Return ``relation`` if it is a known neighbouring relation, else raise ConfigError."""
    if relation not in RELATIONS:
        raise ConfigError(f"`relation` must be one of {list(RELATIONS)}. Found {relation!r}.")
    return relation  # type: ignore[return-value]


def validate_unit(unit: str) -> PrivacyUnit:
    """Return ``unit`` if it is a known privacy unit, else raise ConfigError."""
    if unit not in UNITS:
        raise ConfigError(f"`privacy_unit` must be one of {list(UNITS)}. Found {unit!r}.")
    return unit  # type: ignore[return-value]


def validate_delta(delta: float, name: str = "delta") -> float:
    """Return ``delta`` as a float if it lies in (0, 1), else raise ConfigError naming it."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < float(delta) < 1.0:
        raise ConfigError(f"`{name}` must be in (0, 1). Found {delta!r}.")
    return float(delta)


def neighboring_relation(relation: str) -> dpa.NeighboringRelation:
    """The dp_accounting enum for ``relation`` ("add_remove" or "replace_one")."""
    validate_relation(relation)
    if relation == "add_remove":
        return dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    return dpa.NeighboringRelation.REPLACE_ONE


def validate_sampling(descriptor: Mapping[str, Any], num_clients: int | None = None) -> dict[str, Any]:
    """Check a sampler description and return a normalized copy.

    Args:
        descriptor: ``{"kind": "all"}``, ``{"kind": "fixed_size", "num_sampled": K}`` or
            ``{"kind": "poisson", "sample_rate": q}``.
        num_clients: when given, also check ``K <= num_clients``.

    Raises:
        ConfigError: unknown kind or out-of-range parameter, naming the value.
    """
    if not isinstance(descriptor, Mapping) or "kind" not in descriptor:
        raise ConfigError(f"a sampling description must be a mapping with a `kind`. Found {descriptor!r}.")
    kind = descriptor["kind"]
    if kind == "all":
        return {"kind": "all"}
    if kind == "fixed_size":
        k = descriptor.get("num_sampled")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"`num_sampled` must be a positive integer. Found {k!r}.")
        if num_clients is not None and k > num_clients:
            raise ConfigError(
                f"`num_sampled` ({k}) must not exceed `num_clients` ({num_clients})."
            )
        return {"kind": "fixed_size", "num_sampled": int(k)}
    if kind == "poisson":
        q = descriptor.get("sample_rate")
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 < float(q) <= 1.0:
            raise ConfigError(f"`sample_rate` must be in (0, 1]. Found {q!r}.")
        return {"kind": "poisson", "sample_rate": float(q)}
    if kind in SCHEMA_KINDS:
        return _validate_schema(descriptor)
    raise ConfigError(f"unknown sampling kind {kind!r}; valid: {list(SAMPLING_KINDS)}.")


def _int_field(d: Mapping[str, Any], name: str, *, optional: bool = False, low: int = 1) -> int | None:
    v = d.get(name)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ConfigError(f"`{name}` must be an integer >= {low}{' or None' if optional else ''}. Found {v!r}.")
    return int(v)


def _float_field(d: Mapping[str, Any], name: str, low: float, high: float, *, open_low: bool = True) -> float:
    v = d.get(name)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and float(v) <= high and (
        float(v) > low if open_low else float(v) >= low)
    if not ok:
        raise ConfigError(f"`{name}` must be in {'(' if open_low else '['}{low:g}, {high:g}]. Found {v!r}.")
    return float(v)  # type: ignore[arg-type]


def _validate_schema(d: Mapping[str, Any]) -> dict[str, Any]:
    """The participation schemas of :mod:`dpfl.sampling.schemas`, normalized."""
    kind = d["kind"]
    if kind == "min_separation":
        order = d.get("order", "cyclic")
        if order != "cyclic":
            raise ConfigError(f"`order` of a min_separation schema must be 'cyclic'. Found {order!r}.")
        return {"kind": kind, "min_separation": _int_field(d, "min_separation"),
                "max_participations": _int_field(d, "max_participations", optional=True), "order": "cyclic"}
    if kind == "cyclic_poisson":
        return {"kind": kind, "groups": _int_field(d, "groups"),
                "sample_rate": _float_field(d, "sample_rate", 0.0, 1.0)}
    return {"kind": kind, "min_separation": _int_field(d, "min_separation"),
            "max_participations": _int_field(d, "max_participations", optional=True),
            "period": _int_field(d, "period"), "window": _float_field(d, "window", 0.0, 1.0),
            "checkin_rate": _float_field(d, "checkin_rate", 0.0, 1.0),
            "peak": _float_field(d, "peak", 0.0, 1.0, open_low=False),
            "spread": _float_field(d, "spread", 0.0, 1e6, open_low=False),
            "max_cohort": _int_field(d, "max_cohort", optional=True), "seed": _int_field(d, "seed", low=0)}


# --------------------------------------------------------------------------- Gaussian releases


def noise_multiplier(noise_std: float, sensitivity: float) -> float:
    """``noise_std / sensitivity`` (inf when nothing about the unit is released).

    Args:
        noise_std: std of the Gaussian noise actually added (>= 0).
        sensitivity: L2 sensitivity actually enforced under the stated relation (>= 0).

    References:
        dp_accounting ``GaussianDpEvent`` (noise multiplier = noise std / sensitivity).
    """
    for name, value in (("noise_std", noise_std), ("sensitivity", sensitivity)):
        if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
            raise ConfigError(f"`{name}` must be a non-negative number. Found {value!r}.")
    if sensitivity == 0:
        return math.inf
    if math.isinf(noise_std) and math.isinf(sensitivity):
        raise ConfigError("an infinite noise std against an infinite sensitivity has no noise multiplier (inf/inf); "
                          "bound the sensitivity with a finite clip.")
    return float(noise_std) / float(sensitivity)


def gaussian_event(noise_std: float, sensitivity: float) -> dpe.DpEvent:
    """The event of one Gaussian release.

    ``NoOpDpEvent`` when the sensitivity is 0 (the output does not depend on the unit),
    ``NonPrivateDpEvent`` when a non-zero sensitivity meets zero noise.

    >>> gaussian_event(2.0, 0.5)
    GaussianDpEvent(noise_multiplier=4.0)

    References:
        dp_accounting ``dp_event.GaussianDpEvent``.
    """
    z = noise_multiplier(noise_std, sensitivity)
    if math.isinf(z):
        return dpa.NoOpDpEvent()
    if z == 0:
        return dpa.NonPrivateDpEvent()
    return dpa.GaussianDpEvent(z)


def gaussian_rounds_event(noise_multipliers: Iterable[float]) -> dpe.DpEvent:
    """Composition of one Gaussian release per round with per-round multipliers (CRD, decay).

    Each round is its own ``GaussianDpEvent``; equal ones are grouped.

    References:
        000 Thm 4 (eq. 25, noise recomputed after T changes); composition of what happened.
    """
    events: list[dpe.DpEvent] = []
    for z in noise_multipliers:
        if not isinstance(z, (int, float)) or math.isnan(z) or z < 0:
            raise ConfigError(f"a noise multiplier must be a non-negative number. Found {z!r}.")
        if math.isinf(z):
            events.append(dpa.NoOpDpEvent())
        elif z == 0:
            events.append(dpa.NonPrivateDpEvent())
        else:
            events.append(dpa.GaussianDpEvent(float(z)))
    return compose(events)


def compose(events: Iterable[dpe.DpEvent]) -> dpe.DpEvent:
    """Compose events, grouping equal ones into ``SelfComposedDpEvent`` (order is irrelevant).

    Returns ``NoOpDpEvent`` for an empty input and the event itself for a single one.
    """
    counts: Counter[dpe.DpEvent] = Counter()
    order: list[dpe.DpEvent] = []
    for event in events:
        for leaf, count in _flatten(event, 1):
            if isinstance(leaf, dpa.NoOpDpEvent):
                continue
            if leaf not in counts:
                order.append(leaf)
            counts[leaf] += count
    parts = [e if counts[e] == 1 else dpa.SelfComposedDpEvent(e, counts[e]) for e in order]
    if not parts:
        return dpa.NoOpDpEvent()
    if len(parts) == 1:
        return parts[0]
    return dpa.ComposedDpEvent(parts)


def _flatten(event: dpe.DpEvent, count: int) -> list[tuple[dpe.DpEvent, int]]:
    """(leaf event, count) pairs of a composition; sampled events are leaves."""
    if isinstance(event, dpa.SelfComposedDpEvent):
        return _flatten(event.event, count * event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        out: list[tuple[dpe.DpEvent, int]] = []
        for e in event.events:
            out.extend(_flatten(e, count))
        return out
    return [(event, count)]


def leaves(event: dpe.DpEvent) -> list[tuple[dpe.DpEvent, int]]:
    """The grouped (leaf, count) pairs of ``event``; a public helper for certify and the ledger."""
    counts: Counter[dpe.DpEvent] = Counter()
    for leaf, c in _flatten(event, 1):
        counts[leaf] += c
    return list(counts.items())


# --------------------------------------------------------------------------- aggregates


def aggregate_noise_std(
    client_noise_stds: Sequence[float],
    weights: Sequence[float],
    server_noise_std: float = 0.0,
) -> float:
    """Total noise std in a weighted aggregate ``Σ_k w_k (x_k + n_k) + n_s``.

    Independent client noises scale with their weights: sqrt(Σ_k w_k² σ_k² + σ_s²). Pass the
    clients that actually *arrived*: if fewer clients arrive than the noise was split over, this
    is the weaker noise that is really in the aggregate.

    >>> round(aggregate_noise_std([1.0] * 4, [0.25] * 4), 6)
    0.5

    References:
        003 eq. 31–33 (σ_U/sqrt(N) for p_i = 1/N); 002 eq. 4.14.
    """
    if len(client_noise_stds) != len(weights):
        raise ConfigError(
            f"`client_noise_stds` and `weights` must have the same length. Found "
            f"{len(client_noise_stds)} and {len(weights)}."
        )
    for value in (*client_noise_stds, *weights, server_noise_std):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"noise stds and weights must be finite and >= 0. Found {value!r}.")
    total = sum((w * s) ** 2 for w, s in zip(weights, client_noise_stds, strict=True))
    return math.sqrt(total + server_noise_std**2)


def aggregate_sensitivity(client_sensitivities: Sequence[float] | float, weights: Sequence[float]) -> float:
    """Sensitivity of a weighted aggregate to one unit: ``max_k w_k Δ_k``.

    References:
        000 eq. 2 (w = Σ p_i w̃_i); 002 eq. 4.7 (C · max_i p_i); 003 eq. 9.
    """
    if isinstance(client_sensitivities, (int, float)):
        sens = [float(client_sensitivities)] * len(weights)
    else:
        sens = [float(s) for s in client_sensitivities]
    if len(sens) != len(weights):
        raise ConfigError(
            f"`client_sensitivities` and `weights` must have the same length. Found {len(sens)} "
            f"and {len(weights)}."
        )
    if not weights:
        return 0.0
    for value in (*sens, *weights):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"sensitivities and weights must be finite and >= 0. Found {value!r}.")
    return max(w * s for w, s in zip(weights, sens, strict=True))


# --------------------------------------------------------------------------- sampling


def poisson_sampled_event(event: dpe.DpEvent, sample_rate: float) -> dpe.DpEvent:
    """``PoissonSampledDpEvent`` (no wrapper for rate 1 or a no-op event)."""
    validate_sampling({"kind": "poisson", "sample_rate": sample_rate})
    if sample_rate == 1.0 or isinstance(event, dpa.NoOpDpEvent):
        return event
    return dpa.PoissonSampledDpEvent(float(sample_rate), event)


def fixed_size_sampled_event(event: dpe.DpEvent, num_sampled: int, num_clients: int) -> dpe.DpEvent:
    """``SampledWithoutReplacementDpEvent`` (no wrapper when every client is sampled)."""
    validate_sampling({"kind": "fixed_size", "num_sampled": num_sampled}, num_clients)
    if num_sampled == num_clients or isinstance(event, dpa.NoOpDpEvent):
        return event
    return dpa.SampledWithoutReplacementDpEvent(int(num_clients), int(num_sampled), event)


def sampled_event(event: dpe.DpEvent, descriptor: Mapping[str, Any], num_clients: int) -> dpe.DpEvent:
    """Wrap ``event`` in the sampling a sampler description names (one implementation for all)."""
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ConfigError(f"`num_clients` must be a positive integer. Found {num_clients!r}.")
    d = validate_sampling(descriptor, num_clients)
    if d["kind"] == "all":
        return event
    if d["kind"] in SCHEMA_KINDS:
        raise PrivacyPreconditionError(
            f"a {d['kind']} participation schema does not amplify a release about the whole population: "
            "record it per participant (or, under cyclic Poisson, about the round's group).")
    if d["kind"] == "fixed_size":
        return fixed_size_sampled_event(event, d["num_sampled"], num_clients)
    return poisson_sampled_event(event, d["sample_rate"])


def drop_sampling(event: dpe.DpEvent) -> dpe.DpEvent:
    """The same composition with every sampling wrapper removed.

    Always a valid upper bound: conditioned on the sample, neighbouring inputs differ by at most
    the unsampled release, and the hockey-stick divergence is jointly convex. Used where an
    accountant does not support a sampling scheme under the stated relation, and for the server,
    which knows whom it sampled.
    """
    if isinstance(event, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent,
                          dpa.SampledWithReplacementDpEvent)):
        return drop_sampling(event.event)
    if isinstance(event, dpa.SelfComposedDpEvent):
        return dpa.SelfComposedDpEvent(drop_sampling(event.event), event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        return dpa.ComposedDpEvent([drop_sampling(e) for e in event.events])
    return event


def amplification_support(event: dpe.DpEvent, relation: str) -> dict[str, bool]:
    """Whether RDP and PLD (in dp_accounting) can certify ``event``'s sampling under ``relation``.

    Poisson: both, add/remove only. Without replacement: RDP only, replace-one only.
    """
    validate_relation(relation)
    rdp_ok = pld_ok = True
    for leaf, _ in leaves(event):
        if isinstance(leaf, dpa.PoissonSampledDpEvent):
            rdp_ok &= relation == "add_remove"
            pld_ok &= relation == "add_remove"
        elif isinstance(leaf, dpa.SampledWithoutReplacementDpEvent):
            rdp_ok &= relation == "replace_one"
            pld_ok = False
        elif isinstance(leaf, dpa.SampledWithReplacementDpEvent):
            rdp_ok = pld_ok = False
    return {"rdp": rdp_ok, "pld": pld_ok}


# --------------------------------------------------------------------------- two-point (001)


def two_point_noise_parameter(epsilon: float) -> float:
    """Randomized-response noise parameter p = 2/(1+e^ε) of the two-point randomizer's worst pair.

    With probability 1 − p/2 = e^ε/(1+e^ε) the report keeps the side of its input; the ratio of
    the two output probabilities is exactly e^ε (001 Thm 1).

    >>> round(two_point_noise_parameter(math.log(3.0)), 6)
    0.5
    """
    if not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon <= 0:
        raise ConfigError(f"`epsilon` (per coordinate) must be a finite number > 0. Found {epsilon!r}.")
    return 2.0 / (1.0 + math.exp(epsilon))


def two_point_event(epsilon: float, num_coordinates: int, rounds: int = 1) -> dpe.DpEvent:
    """Event of a client's two-point reports: d coordinates per release, over ``rounds`` rounds.

    Each coordinate is an independent ε-LDP report (pure DP, replace-one), so the release of d
    coordinates for T rounds is the composition of d·T randomized-response events; its pure bound
    is d·T·ε (001 §4.2), and RDP/PLD composition can be tighter at a δ > 0.

    References:
        001 eq. 2 and Thm 1; dp_accounting ``RandomizedResponseDpEvent``.
    """
    for name, value in (("num_coordinates", num_coordinates), ("rounds", rounds)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    rr = dpa.RandomizedResponseDpEvent(noise_parameter=two_point_noise_parameter(epsilon), num_buckets=2)
    count = num_coordinates * rounds
    return rr if count == 1 else dpa.SelfComposedDpEvent(rr, count)


def pure_epsilon(event: dpe.DpEvent) -> float | None:
    """Pure-DP (δ = 0) bound by basic composition when every leaf is pure, else ``None``.

    Randomized response with k buckets and noise p is ln((1 − p + p/k)/(p/k))-DP.
    """
    total = 0.0
    for leaf, count in leaves(event):
        if isinstance(leaf, dpa.NoOpDpEvent):
            continue
        if isinstance(leaf, dpa.RandomizedResponseDpEvent):
            p, k = leaf.noise_parameter, leaf.num_buckets
            if k == 1:
                continue
            if p == 0:
                return math.inf
            total += count * math.log((1 - p + p / k) / (p / k))
        else:
            return None
    return total
