"""Certified (ε, δ): what a rigorous accountant proves for the releases actually made.

:func:`certify` evaluates one composed event with every accountant that supports it and reports
the tightest *valid* bound, saying which one it is:

* **RDP** — ``dp_accounting``'s ``RdpAccountant`` (Gaussian, Poisson under add/remove, sampling
  without replacement under replace-one, randomized response under replace-one).
* **PLD** — ``dp_accounting``'s ``PLDAccountant`` (Gaussian, Poisson under add/remove, randomized
  response). It does not support sampling without replacement: such events are evaluated by PLD
  *without* the amplification (a valid, usually looser bound) and the certificate says so. For a
  composition of unsampled Gaussians the PLD is itself Gaussian with μ = sqrt(Σ 1/z_i²), so its ε
  is computed in closed form (:class:`GaussianCompositionAccountant`, exact, any size) instead of
  on a grid that would grow with μ².
* **pure** — basic composition of pure-DP reports (the two-point randomizer), valid at δ = 0.

Where an accountant does not support a sampling scheme under the stated relation (Poisson under
replace-one, fixed-size under add/remove), the event is certified without the amplification and a
note says so — never an error, never a silently wrong number.

:func:`dpfl.privacy.accounting.calibrate.calibrate_noise_multiplier` is the inverse (noise
multiplier for a target ε).

An event dp-accounting does not price (the Skellam sum) is priced by what its mechanism's module
registered (:mod:`.registry`): its RDP curve, and for the PLD a dp-accounting event proven to
dominate it (or the note saying why there is none for its parameters).

The result type, :class:`~dpfl.privacy.accounting.certificate.Certificate`, and the JSON form of an
ε live in :mod:`.certificate` (no accountant, no torch: what reads stored runs imports that) and
are re-exported here.

This module imports nothing from dpfl except :mod:`dpfl.errors` and its siblings ``certificate``,
``events``, ``gaussian_composition``, ``sampled_gaussian`` and ``registry``.

References:
    dp_accounting ``rdp/rdp_privacy_accountant.py``, ``pld/pld_privacy_accountant.py``,
    ``mechanism_calibration.py``, ``gaussian_mechanism.py``; Balle & Wang 2018 (analytic
    Gaussian); Dong, Roth, Su 2019 (composition of Gaussians is Gaussian, μ = sqrt(Σ μ_i²)).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import dp_accounting as dpa
import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting import privacy_accountant as dpa_pa
from dp_accounting.pld import pld_privacy_accountant as pld_acc
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certificate import (
    BASIS_TEXT,
    Basis,
    Certificate,
    Method,
    epsilon_from_json,
    json_epsilon,
)
from dpfl.privacy.accounting.events import (
    amplification_support,
    compose,
    drop_sampling,
    leaves,
    neighboring_relation,
    pure_epsilon,
    validate_delta,
    validate_relation,
    validate_unit,
)
from dpfl.privacy.accounting.gaussian_composition import GaussianCompositionAccountant
from dpfl.privacy.accounting.registry import accounting_of
from dpfl.privacy.accounting.sampled_gaussian import gaussian_rdp, sampled_gaussian_rdp

__all__ = [
    "DEFAULT_PLD_DISCRETIZATION",
    "DEFAULT_RDP_ORDERS",
    "BASIS_TEXT",
    "Basis",
    "Certificate",
    "epsilon_from_json",
    "json_epsilon",
    "Method",
    "certify",
    "epsilon_from_rdp",
    "epsilons_from_rdp",
    "pld_epsilon",
    "rdp_epsilon",
    "rdp_vector",
]

#: Grid step of the privacy-loss discretization. dp_accounting's PLD is *pessimistic*: a coarser
#: grid only over-estimates ε (by ~0.01–0.03 at 1e-3 for typical runs), it never under-estimates.
DEFAULT_PLD_DISCRETIZATION = 1e-3
#: dp_accounting's default RDP orders (1.1 … 1024).
#: dp_accounting's default orders start at 1.1; very large ε (tiny noise multipliers, e.g. 001's
#: per-weight budgets) are optimal at orders closer to 1, where that grid is 5–8% loose: orders
#: 1.01–1.09 are added in front.
DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(round(1 + i / 100, 2) for i in range(1, 10)) + tuple(
    rdp_acc.DEFAULT_RDP_ORDERS)
#: Above this many randomized-response compositions a discretized PLD is not attempted (its
#: support grows with the count); RDP and pure composition are reported instead.
MAX_PLD_RANDOMIZED_RESPONSE = 2_000
#: Above this many compositions of sampled events the PLD is not attempted either.
MAX_PLD_SAMPLED_COMPOSITIONS = 1_000_000


def _is_unsampled_gaussian(event: dpe.DpEvent) -> bool:
    return all(
        isinstance(leaf, (dpa.GaussianDpEvent, dpa.NoOpDpEvent, dpa.NonPrivateDpEvent))
        for leaf, _ in leaves(event)
    )


# --------------------------------------------------------------------------- views per method


def _rdp_view(event: dpe.DpEvent, relation: str) -> tuple[dpe.DpEvent, list[str]]:
    notes: list[str] = []
    if amplification_support(event, relation)["rdp"]:
        return event, notes
    notes.append(
        f"RDP: sampling amplification is not certified under {relation} for this sampling "
        "scheme; certified without it (valid upper bound)."
    )
    return drop_sampling(event), notes


def _pld_units(event: dpe.DpEvent, relation: str) -> dpe.DpEvent:
    """Rescale unsampled Gaussian multipliers for dp_accounting's PLD under replace-one.

    dp_accounting's PLD treats a replace-one Gaussian multiplier as relative to a norm bound
    (shift = 2/multiplier); dpfl's multipliers are relative to the shift itself, so they double.
    """
    if relation != "replace_one":
        return event
    if isinstance(event, dpa.GaussianDpEvent):
        return dpa.GaussianDpEvent(2.0 * event.noise_multiplier)
    if isinstance(event, dpa.SelfComposedDpEvent):
        return dpa.SelfComposedDpEvent(_pld_units(event.event, relation), event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        return dpa.ComposedDpEvent([_pld_units(e, relation) for e in event.events])
    return event


def _pld_view(event: dpe.DpEvent, relation: str) -> tuple[dpe.DpEvent, list[str]]:
    notes: list[str] = []
    if not amplification_support(event, relation)["pld"]:
        stripped = drop_sampling(event)
        if stripped != event:
            notes.append(
                "PLD: dp_accounting's PLD does not support this sampling scheme under "
                f"{relation} (sampling without replacement is RDP-only); PLD is certified "
                "without the amplification (valid upper bound)."
            )
        event = stripped
    return event, notes


def _pld_accountant_for(
    event: dpe.DpEvent, relation: str, discretization: float
) -> tuple[Callable[[], dpa_pa.PrivacyAccountant], Callable[[dpe.DpEvent], dpe.DpEvent]]:
    """(fresh accountant factory, event transform) for the PLD family on an already-viewed event."""
    if _is_unsampled_gaussian(event):
        return (lambda: GaussianCompositionAccountant()), (lambda e: e)
    rel = neighboring_relation(relation)
    return (
        lambda: pld_acc.PLDAccountant(rel, value_discretization_interval=discretization),
        lambda e: _pld_units(e, relation),
    )


# --------------------------------------------------------------------------- evaluation


_RDP_CACHE: dict[tuple[dpe.DpEvent, str, tuple[float, ...]], np.ndarray] = {}
_RDP_CACHE_MAX = 4096


def _non_private(leaf: dpe.DpEvent) -> bool:
    """A release without noise, possibly inside a sampling wrapper."""
    while isinstance(leaf, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent,
                            dpa.SampledWithReplacementDpEvent)):
        leaf = leaf.event
    return isinstance(leaf, dpa.NonPrivateDpEvent)


def rdp_vector(event: dpe.DpEvent, relation: str, orders: Sequence[float] = DEFAULT_RDP_ORDERS) -> np.ndarray:
    """RDP curve of ``event`` (after dropping unsupported amplification) at ``orders``; cached.

    Raises:
        PrivacyPreconditionError: the RDP accountant cannot handle the event under ``relation``.
    """
    validate_relation(relation)
    view, _ = _rdp_view(event, relation)
    key = (view, relation, tuple(orders))
    try:
        cached = _RDP_CACHE.get(key)
    except TypeError:  # unhashable (ComposedDpEvent holds a list)
        cached, key = None, None  # type: ignore[assignment]
    if cached is not None:
        return cached.copy()
    if any(_non_private(leaf) for leaf, _ in leaves(view)):
        # a release without noise, sampled or not (a sample does not make it private: the
        # sampled unit is exposed with the sampling probability): ε = ∞ at every order. The RDP
        # accountant refuses a *sampled* non-private event, which would fail a z = 0 run.
        return np.full(len(tuple(orders)), np.inf)
    parts = leaves(view)
    vec = np.zeros(len(tuple(orders)))
    rest = []
    for leaf, count in parts:
        registered = accounting_of(leaf)
        if registered is not None:  # a mechanism dp-accounting does not have (.registry)
            vec = vec + count * registered.rdp(leaf, relation, orders)
            continue
        closed = _closed_form_rdp(leaf, relation, orders)
        if closed is None:
            rest.append((leaf, count))
        else:
            vec = vec + count * closed
    if rest:
        others = compose(leaf if c == 1 else dpa.SelfComposedDpEvent(leaf, c) for leaf, c in rest)
        acc = rdp_acc.RdpAccountant(list(orders), neighboring_relation(relation))
        if not acc.supports(others):
            raise PrivacyPreconditionError(
                f"the RDP accountant does not support {others} under {relation}."
            )
        acc.compose(others)
        vec = vec + acc.rdp
    if key is not None:
        if len(_RDP_CACHE) >= _RDP_CACHE_MAX:
            _RDP_CACHE.clear()
        _RDP_CACHE[key] = vec.copy()
    return vec


def _closed_form_rdp(leaf: dpe.DpEvent, relation: str, orders: Sequence[float]) -> np.ndarray | None:
    """The RDP curve of a Gaussian, or of a Poisson-sampled Gaussian under add/remove, by
    :mod:`.sampled_gaussian` (dp-accounting's formulas vectorized over the orders, tested equal to
    its accountant); None for every other leaf (the accountant composes those)."""
    if isinstance(leaf, dpa.GaussianDpEvent):
        return gaussian_rdp(leaf.noise_multiplier, orders)
    if (isinstance(leaf, dpa.PoissonSampledDpEvent) and isinstance(leaf.event, dpa.GaussianDpEvent)
            and relation == "add_remove"):
        return sampled_gaussian_rdp(leaf.sampling_probability, leaf.event.noise_multiplier, orders)
    return None


def epsilon_from_rdp(orders: Sequence[float], rdp: np.ndarray, delta: float) -> float:
    """ε at δ from an RDP curve: dp_accounting's ``compute_epsilon``, bit for bit (see
    :func:`epsilons_from_rdp`)."""
    orders_t = orders if type(orders) is tuple else tuple(float(a) for a in orders)
    r = np.asarray(rdp, dtype=np.float64)
    if r.ndim == 1 and r.shape[0] == len(orders_t) and not isinstance(delta, bool) and 0.0 < delta < 1.0:
        lowest, first, second, pad = _conversion_terms(orders_t, float(delta))
        if r.shape[0] and r.min() >= lowest:  # NaN fails this too
            bound = ((r + first) - second) + pad
            best = float(bound[bound.argmin()])
            return best if best > 0 else 0.0
    return float(epsilons_from_rdp(orders_t, r.reshape(1, -1), delta)[0])


@functools.lru_cache(maxsize=64)
def _conversion_terms(orders: tuple[float, ...], delta: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """What dp_accounting's ``compute_epsilon`` computes per order α, once: log1p(−1/α) and
    log(δα)/(α − 1) with :mod:`math` (0 where α <= 1.01, where its bound does not apply: there
    the pad is ∞, elsewhere 0 — adding 0.0 changes no bound), and the smallest RDP value left to
    it (an order whose RDP is below about δ² takes its KL branch, ε = 0: 4δ² is a safe margin)."""
    if min(orders) < 1:
        raise ValueError(f"Renyi divergence order must be at least 1. Found {min(orders)}.")
    first = np.array([math.log1p(-1 / a) if a > 1.01 else 0.0 for a in orders])
    second = np.array([math.log(delta * a) / (a - 1) if a > 1.01 else 0.0 for a in orders])
    pad = np.array([0.0 if a > 1.01 else math.inf for a in orders])
    return 4.0 * delta**2, first, second, pad


def epsilons_from_rdp(orders: Sequence[float], rdp: np.ndarray, delta: float) -> np.ndarray:
    """ε at δ of every row of ``rdp`` ([rows, orders]): dp_accounting's ``compute_epsilon``
    (the minimum over the orders of the bound of Canonne, Kamath, Steinke 2020, Prop. 12 /
    Asoodeh et al. 2020, eq. 20) for all rows at once, bit for bit the same numbers: the
    per-order terms are computed with :mod:`math` once (:func:`_conversion_terms`), and each
    row's ``(r + log1p(−1/α)) − log(δα)/(α − 1)`` with the same IEEE operations in the same
    order; the first minimum is taken, and a negative minimum is 0. A row with an entry below
    4δ² (the KL branch, a negative value), and any order below 1 or δ outside (0, 1), go through
    dp_accounting's own function; an all-zero row is ε = 0 (nothing was released). A NaN (a
    curve whose computation failed, e.g. σ so small that σ² underflows) is ∞ at its order: that
    order is excluded, as dp-accounting excludes a series that did not converge (its own
    ``compute_epsilon`` would pick the NaN and return ε = 0)."""
    orders_t = orders if type(orders) is tuple else tuple(float(a) for a in orders)
    r = np.asarray(rdp, dtype=np.float64)
    if np.isnan(r).any():
        r = np.where(np.isnan(r), np.inf, r)
    if r.ndim != 2 or r.shape[1] != len(orders_t):
        raise ConfigError(f"an RDP matrix needs one column per order ({len(orders_t)}). Found shape {r.shape}.")
    out = np.zeros(r.shape[0])
    nonzero = np.any(r != 0, axis=1)
    fast = np.zeros(r.shape[0], dtype=bool)
    if r.shape[0] and not isinstance(delta, bool) and 0.0 < delta < 1.0 and min(orders_t) >= 1:
        lowest, first, second, pad = _conversion_terms(orders_t, float(delta))
        fast = r.min(axis=1) >= lowest  # NaN fails this too
        if np.any(fast):
            bound = ((r[fast] + first) - second) + pad
            best = bound[np.arange(bound.shape[0]), bound.argmin(axis=1)]
            out[fast] = np.where(best > 0, best, 0.0)
    for k in np.flatnonzero(nonzero & ~fast):
        out[k] = float(rdp_acc.compute_epsilon(np.asarray(orders_t), r[k], delta)[0])
    return out


def rdp_epsilon(
    event: dpe.DpEvent, delta: float, relation: str, orders: Sequence[float] = DEFAULT_RDP_ORDERS
) -> tuple[float | None, list[str]]:
    """(ε by RDP or None when unsupported, notes)."""
    view, notes = _rdp_view(event, relation)
    registered = [r for r in (accounting_of(leaf) for leaf, _ in leaves(view)) if r is not None]
    if registered:
        try:
            vec = rdp_vector(event, relation, orders)
        except PrivacyPreconditionError as exc:
            notes.append(f"RDP: {exc}")
            return None, notes
        notes += list(dict.fromkeys(r.rdp_note for r in registered))
        return epsilon_from_rdp(orders, vec, delta), notes
    acc = rdp_acc.RdpAccountant(list(orders), neighboring_relation(relation))
    if not acc.supports(view):
        notes.append(f"RDP: not supported for this release under {relation}.")
        return None, notes
    return float(acc.compose(view).get_epsilon(delta)), notes


def pld_epsilon(
    event: dpe.DpEvent,
    delta: float,
    relation: str,
    discretization: float = DEFAULT_PLD_DISCRETIZATION,
) -> tuple[float | None, list[str]]:
    """(ε by PLD or None when unsupported/skipped, notes); see the module docstring."""
    if isinstance(discretization, bool) or not isinstance(discretization, (int, float)) or not (
            math.isfinite(discretization) and discretization > 0):
        raise ConfigError(f"the PLD discretization (`--pld-discretization`) must be a finite number > 0. "
                          f"Found {discretization!r}.")
    if any(accounting_of(leaf) is not None for leaf, _ in leaves(event)):
        dominated, dom_notes = _pld_dominating(event, relation)
        if dominated is None:
            return None, dom_notes
        eps, notes = pld_epsilon(dominated, delta, relation, discretization)
        return eps, dom_notes + notes
    view, notes = _pld_view(event, relation)
    sampled_count = sum(c for leaf, c in leaves(view)
                        if isinstance(leaf, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent)))
    if sampled_count > MAX_PLD_SAMPLED_COMPOSITIONS:
        notes.append(
            f"PLD: skipped for {sampled_count:,} sampled compositions (a discretized PLD is attempted "
            f"up to {MAX_PLD_SAMPLED_COMPOSITIONS:,}: beyond, its self-composition takes minutes); RDP "
            "(closed-form in the count) and pure composition are reported.")
        return None, notes
    rr_count = sum(c for leaf, c in leaves(view) if isinstance(leaf, dpa.RandomizedResponseDpEvent))
    if rr_count > MAX_PLD_RANDOMIZED_RESPONSE:
        notes.append(
            f"PLD: skipped for {rr_count} randomized-response compositions (a discretized PLD "
            f"is attempted up to {MAX_PLD_RANDOMIZED_RESPONSE}); RDP and pure composition are "
            "reported."
        )
        return None, notes
    if rr_count:
        return _randomized_response_pld_epsilon(view, delta, relation, discretization, notes)
    make_acc, transform = _pld_accountant_for(view, relation, discretization)
    acc = make_acc()
    pld_event = transform(view)
    if not acc.supports(pld_event):
        notes.append(f"PLD: not supported for this release under {relation}.")
        return None, notes
    if isinstance(acc, GaussianCompositionAccountant):
        notes.append("PLD: unsampled Gaussian composition evaluated in closed form (exact).")
    return float(acc.compose(pld_event).get_epsilon(delta)), notes


def _pld_dominating(event: dpe.DpEvent, relation: str) -> tuple[dpe.DpEvent | None, list[str]]:
    """``event`` with every leaf of a registered mechanism replaced by the dp-accounting event its
    module proved to dominate it (:mod:`.registry`), and the notes naming the proofs; ``None``
    (and the notes saying why) where one leaf has no proven domination.

    Composition is sound leaf by leaf: a tensor product of dominating pairs dominates the
    (adaptive) composition of the mechanisms (Zhu, Dong, Wang 2022, arXiv 2106.08567, Thm 10).
    """
    notes: list[str] = []

    def walk(e: dpe.DpEvent) -> dpe.DpEvent | None:
        if isinstance(e, dpa.ComposedDpEvent):
            parts = [walk(x) for x in e.events]
            return None if any(p is None for p in parts) else dpa.ComposedDpEvent(parts)  # type: ignore[arg-type]
        if isinstance(e, dpa.SelfComposedDpEvent):
            inner = walk(e.event)
            return None if inner is None else dpa.SelfComposedDpEvent(inner, e.count)
        acc = accounting_of(e)
        if acc is None:
            return e
        if acc.pld_dominating is None:
            notes.append(acc.pld_note)
            return None
        dominating, note = acc.pld_dominating(e, relation)
        notes.append(note)
        return dominating

    out = walk(event)
    return out, list(dict.fromkeys(notes))


def _randomized_response_pld_epsilon(
    view: dpe.DpEvent, delta: float, relation: str, discretization: float, notes: list[str]
) -> tuple[float | None, list[str]]:
    """PLD of compositions of randomized-response events, built leaf by leaf.

    dp-accounting 0.6.0's ``PLDAccountant`` composes a ``RandomizedResponseDpEvent`` inside a
    ``SelfComposedDpEvent`` only once, ignoring the count (it would certify d two-point reports
    as one). The PLD is therefore built here from
    ``privacy_loss_distribution.from_randomized_response(...).self_compose(count)`` per leaf;
    a view mixing randomized response with other mechanisms is left to RDP and pure composition.
    """
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    parts = leaves(view)
    if not all(isinstance(leaf, dpa.RandomizedResponseDpEvent) for leaf, _ in parts):
        notes.append("PLD: randomized response mixed with other mechanisms is not composed by PLD here; "
                     "RDP and pure composition are reported.")
        return None, notes
    rel = (dpa.NeighboringRelation.REPLACE_ONE if relation == "replace_one"
           else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    total = None
    for leaf, count in parts:
        assert isinstance(leaf, dpa.RandomizedResponseDpEvent)
        one = pld_mod.from_randomized_response(
            noise_parameter=leaf.noise_parameter, num_buckets=leaf.num_buckets,
            value_discretization_interval=discretization, neighboring_relation=rel,
        )
        composed = one.self_compose(int(count))
        total = composed if total is None else total.compose(composed)
    assert total is not None
    notes.append("PLD: randomized-response compositions built per leaf (dp-accounting's PLDAccountant "
                 "ignores their count).")
    return float(total.get_epsilon_for_delta(delta)), notes


def _best(
    values: dict[str, float | None],
) -> tuple[float, Method]:
    best_eps, best_method = math.inf, "rdp"
    for method in ("pld", "rdp", "pure"):
        v = values.get(method)
        if v is not None and v < best_eps:
            best_eps, best_method = v, method
    return best_eps, best_method  # type: ignore[return-value]


def certify(
    event: dpe.DpEvent,
    delta: float,
    *,
    relation: str,
    privacy_unit: str,
    observer: str = "public",
    pld: bool = True,
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
    rdp_orders: Sequence[float] = DEFAULT_RDP_ORDERS,
    notes: Sequence[str] = (),
) -> Certificate:
    """Certify one composed event at ``delta`` with every method that applies; report the tightest.

    Args:
        event: the composed receipts (see :mod:`.events`).
        delta: target δ in (0, 1).
        relation: "add_remove" or "replace_one" — the relation the sensitivities were computed
            under.
        privacy_unit: "client" or "record".
        observer: name of the observer the event describes.
        pld: also run the PLD family (set False for a fast RDP-only answer).
        pld_discretization: grid step of the discretized PLD.
        rdp_orders: RDP orders.
        notes: extra notes to carry into the certificate.

    Returns:
        A :class:`Certificate`; ``epsilon`` is the minimum of the valid bounds and ``method`` says
        which.

    >>> c = certify(dpa.GaussianDpEvent(1.0), 1e-5, relation="add_remove", privacy_unit="record")
    >>> c.method, round(c.epsilon, 3)
    ('pld', 4.377)

    References:
        dp_accounting RDP and PLD accountants; see the module docstring.
    """
    validate_delta(delta)
    rel = validate_relation(relation)
    unit = validate_unit(privacy_unit)
    all_notes = list(notes)
    eps_rdp, n1 = rdp_epsilon(event, delta, rel, rdp_orders)
    all_notes += n1
    eps_pld: float | None = None
    if pld:
        eps_pld, n2 = pld_epsilon(event, delta, rel, pld_discretization)
        all_notes += n2
    eps_pure = pure_epsilon(event)
    eps, method = _best({"rdp": eps_rdp, "pld": eps_pld, "pure": eps_pure})
    return Certificate(
        epsilon=eps,
        delta=float(delta),
        method=method,
        observer=observer,
        privacy_unit=unit,
        relation=rel,
        epsilon_rdp=eps_rdp,
        epsilon_pld=eps_pld,
        epsilon_pure=eps_pure,
        notes=tuple(dict.fromkeys(all_notes)),
    )
