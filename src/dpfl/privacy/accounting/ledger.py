"""The privacy ledger: per-round, per-client receipts → certified ε per client and per observer.

A run records every round's releases (:class:`Release`: who sees it, which clients it is about,
the noise std and the sensitivity *actually enforced*, the mechanism kind) together with the
sampling the engine actually performed and the claimed ε so far (computed by the caller with
:mod:`.claimed`). The ledger certifies (ε at the run's δ) per client and per observer:

* **server** — sees every individual upload and knows whom it sampled: no amplification by
  sampling, and client-split noise (e.g. σ/sqrt(K) per client, 004 Alg. 1) protects a client only
  at its own level σ/sqrt(K) (unless a secure aggregation hides the uploads — then the caller
  records the aggregate as the server's release: a :class:`SkellamRelease` of the integer sum).
  Server noise added after aggregation does not protect against the server. Under *hidden
  participation* every client joins the secure sum and only a secret coin decides whether its
  update is in it: the server's release is then a broadcast (``client_ids=None``,
  ``amplifiable``) amplified by the Poisson sample like the public's.
* **public** — sees only the broadcast global models: the aggregate's total noise (client noises
  scaled by the aggregation weights, plus server noise) against the aggregate's sensitivity
  (max weight × per-client sensitivity, 000 eq. 2 / 002 eq. 4.7). If the sample is secret
  (``sample_secret=True``, the default), a broadcast release (``client_ids=None``) is amplified
  by the sampler's own event and charged to every client; otherwise it is charged, unamplified,
  to the clients that took part.

The headline is the worst observer's worst client. Per-client ledgers come for free: each client
has its own receipts, so personalized noise (002's σ_k) gives each client its own ε.

**Never silently weaken.** The aggregate's noise is whatever the caller says is *really* in it:
:func:`federated_round_releases` computes it from the clients that actually arrived, so if fewer
arrive than the noise was split over, the weaker guarantee is what gets recorded.

**Sampling.** The ledger is constructed with the sampler the engine uses (or its ``describe()``);
every round must report the same description or :class:`PrivacyPreconditionError` is raised —
sampling and accounting cannot disagree.

**Cost policy.** The ledger is vectorized over clients: a release about many clients costs a few
array operations, never a Python step per client. Each observer keeps a shared stream (events
and RDP curve) and, per charged client, a row of an RDP matrix to which each release adds its
event's curve (computed once per distinct event, cached) for all its clients at once; the
receipts themselves are a log of (event, clients), so a client's release multiset is a count of
identical releases. Certification groups the clients by multiset on demand (cached until the
next receipt) and composes once per distinct multiset: RDP ε of every distinct curve in one
vectorized conversion (dp-accounting's formula, bit for bit), PLD recomposed from the grouped
events (``SelfComposedDpEvent`` per distinct event) and cached per multiset. Checking a round
before it runs (:meth:`PrivacyLedger.would_exceed`, :meth:`PrivacyLedger.within_budget`) adds
its curves to copies of the rows and answers from the pointwise maximum first (ε is
non-decreasing in every order's RDP). :meth:`PrivacyLedger.record_round` stores an RDP
certificate every round and the tightest (RDP/PLD) one every ``pld_every`` rounds and on demand
(:meth:`PrivacyLedger.certify`). :meth:`PrivacyLedger.would_exceed` uses RDP by default, which
can only stop a run earlier than PLD would, never later.

This module imports nothing from dpfl except :mod:`dpfl.errors` and its siblings in
``dpfl.privacy.accounting``.

References:
    000 eq. 2 and Algorithm 1; 002 eq. 4.7, 4.14, 5.32–5.33; 003 eq. 31–33; 004 Algorithm 1;
    dp_accounting RDP and PLD accountants (see :mod:`.certify`).
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import dp_accounting as dpa
import numpy as np
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import (
    DEFAULT_PLD_DISCRETIZATION,
    DEFAULT_RDP_ORDERS,
    Basis,
    Certificate,
    epsilon_from_json,
    epsilon_from_rdp,
    epsilons_from_rdp,
    json_epsilon,
    pld_epsilon,
    rdp_vector,
)
from dpfl.privacy.accounting.events import (
    SamplerLike,
    aggregate_noise_std,
    amplification_support,
    compose,
    gaussian_event,
    leaves,
    noise_multiplier,
    pure_epsilon,
    sampled_event,
    two_point_event,
    validate_delta,
    validate_relation,
    validate_sampling,
    validate_unit,
)
from dpfl.privacy.accounting.skellam import SkellamDpEvent

__all__ = [
    "OBSERVERS",
    "ExactRelease",
    "GaussianRelease",
    "Observer",
    "PrivacyLedger",
    "Release",
    "SampledGaussianRelease",
    "SkellamRelease",
    "TwoPointRelease",
    "federated_round_releases",
]

Observer = Literal["server", "public"]
OBSERVERS: tuple[Observer, ...] = ("server", "public")
_KINDS = ("gaussian", "two_point", "exact", "sampled_gaussian", "skellam")


# --------------------------------------------------------------------------- releases


def _checked_observer(observer: str) -> None:
    if observer not in OBSERVERS:
        raise ConfigError(f"`observer` must be one of {list(OBSERVERS)}. Found {observer!r}.")


def _checked_ids(client_ids: Iterable[int] | None) -> tuple[int, ...] | None:
    """Sorted distinct ids (``None`` stays ``None``: a broadcast about the whole cohort)."""
    if client_ids is None:
        return None
    ids = tuple(sorted(set(map(int, client_ids))))
    if ids and ids[0] < 0:
        raise ConfigError(f"client ids must be >= 0. Found {ids[:5]}.")
    return ids


class Release(abc.ABC):
    """One release in one round, as one observer sees it: the base of the release types.

    The kinds are types — :class:`GaussianRelease` (noise std and enforced sensitivity),
    :class:`TwoPointRelease` (001's per-coordinate ε-LDP reports), :class:`ExactRelease` (data
    published without noise, ε = ∞) and :class:`SampledGaussianRelease` (a client's DP-SGD
    steps: Poisson-subsampled Gaussians per record) — each a frozen dataclass with:

    Attributes:
        observer: "server" or "public".
        client_ids: the clients this release is about (each client listed gets this receipt);
            ``None`` = a broadcast about the whole cohort (amplified if the sample is secret).
        amplifiable: a broadcast (``client_ids=None``) about a secret sample of interchangeable
            clients at a client-level unit, whose numbers are every cohort's (:mod:`.cohorts`):
            the ledger amplifies a broadcast by the sample only when this is true, and refuses
            any other broadcast under client sampling (record it per participant instead).
        kind: the tag of the stored JSON form only (``to_dict``/``from_dict``); code asks
            ``isinstance``.

    Construct them with :meth:`gaussian`, :meth:`two_point` and :meth:`exact` (or the types
    directly), and restore stored ones with :meth:`from_dict`, which also reads the dicts of
    the former single ``Release`` class (checkpoints and stored ledgers).
    """

    kind: ClassVar[str]
    observer: Observer
    client_ids: tuple[int, ...] | None
    amplifiable: bool

    @abc.abstractmethod
    def event(self) -> dpe.DpEvent:
        """The unsampled event of this release for one privacy unit."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (with its ``kind`` tag)."""

    def for_clients(self, client_ids: Iterable[int]) -> Release:
        """The same release (same numbers, same observer) about ``client_ids`` only: e.g. what the
        server saw of uploads it received but did not aggregate (rejected, late). A release that
        names its clients is charged to each of them and never amplified (``amplifiable`` False)."""
        return dataclasses.replace(self, client_ids=tuple(map(int, client_ids)),  # type: ignore[type-var]
                                   amplifiable=False)

    # ------------------------------------------------------------------ constructors

    @staticmethod
    def gaussian(
        observer: Observer, noise_std: float, sensitivity: float, client_ids: Iterable[int] | None = None,
        *, amplifiable: bool = False,
    ) -> GaussianRelease:
        """A Gaussian release (noise std and enforced sensitivity)."""
        ids = None if client_ids is None else tuple(map(int, client_ids))
        return GaussianRelease(observer, float(noise_std), float(sensitivity), ids, amplifiable)

    @staticmethod
    def exact(observer: Observer, client_ids: Iterable[int]) -> ExactRelease:
        """A function of the clients' data released without noise (certified ε = ∞ for them)."""
        return ExactRelease(observer, tuple(map(int, client_ids)))

    @staticmethod
    def two_point(
        observer: Observer, epsilon: float, num_coordinates: int, client_ids: Iterable[int] | None = None
    ) -> TwoPointRelease:
        """A release of two-point reports (001 eq. 2): ε per coordinate, d coordinates."""
        ids = None if client_ids is None else tuple(map(int, client_ids))
        return TwoPointRelease(observer, float(epsilon), int(num_coordinates), ids)

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Release:
        """Inverse of :meth:`to_dict`, for every release type.

        Also reads the dicts the former single ``Release`` class wrote (every field present,
        ``kind`` "gaussian" or "two_point"; an exact release was a Gaussian with zero noise and
        sensitivity 1 and loads as that Gaussian — the same non-private event).
        """
        kind = data.get("kind", "gaussian")
        ids = data.get("client_ids")
        client_ids = None if ids is None else tuple(int(c) for c in ids)
        amplifiable = bool(data.get("amplifiable", False))
        if kind == "gaussian":
            return GaussianRelease(data["observer"], float(data.get("noise_std", 0.0)),
                                   float(data.get("sensitivity", 0.0)), client_ids, amplifiable)
        if kind == "two_point":
            if data.get("epsilon") is None:
                raise ConfigError("a two-point release needs its per-coordinate `epsilon`.")
            return TwoPointRelease(data["observer"], float(data["epsilon"]), int(data.get("num_coordinates", 1)),
                                   client_ids, amplifiable)
        if kind == "exact":
            if client_ids is None:
                raise ConfigError("an exact release names its clients; found `client_ids: null`.")
            return ExactRelease(data["observer"], client_ids)
        if kind == "sampled_gaussian":
            if client_ids is None:
                raise ConfigError("a sampled Gaussian release names its clients; found `client_ids: null`.")
            return SampledGaussianRelease(data["observer"], float(data["noise_multiplier"]),
                                          float(data["sample_rate"]), int(data["count"]), client_ids)
        if kind == "skellam":
            return SkellamRelease(data["observer"], float(data["variance"]), float(data["l2_sensitivity"]),
                                  float(data["l1_sensitivity"]), client_ids, amplifiable)
        raise ConfigError(f"`kind` must be one of {list(_KINDS)}. Found {kind!r}.")


@dataclass(frozen=True)
class GaussianRelease(Release):
    """A vector released with Gaussian noise.

    Attributes:
        noise_std: Gaussian noise std actually in the released vector.
        sensitivity: L2 sensitivity to one privacy unit actually enforced (under the ledger's
            relation) — e.g. 2C for parameters clipped to C under replace-one. Zero noise against
            a positive sensitivity is the non-private event (ε = ∞, e.g. midp-server's uploads).
    """

    kind: ClassVar[str] = "gaussian"
    observer: Observer
    noise_std: float = 0.0
    sensitivity: float = 0.0
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False

    def __post_init__(self) -> None:
        _checked_observer(self.observer)
        object.__setattr__(self, "client_ids", _checked_ids(self.client_ids))
        self.event()  # validates the numbers

    @property
    def noise_multiplier(self) -> float:
        """noise std / sensitivity (inf when nothing about the unit is released)."""
        return noise_multiplier(self.noise_std, self.sensitivity)

    def event(self) -> dpe.DpEvent:
        return gaussian_event(self.noise_std, self.sensitivity)

    def to_dict(self) -> dict[str, Any]:
        # the former single class's layout, every field present: older readers load it too
        return {
            "observer": self.observer,
            "kind": self.kind,
            "noise_std": self.noise_std,
            "sensitivity": self.sensitivity,
            "client_ids": None if self.client_ids is None else list(self.client_ids),
            "epsilon": None,
            "num_coordinates": 1,
            "amplifiable": self.amplifiable,
        }


@dataclass(frozen=True)
class TwoPointRelease(Release):
    """Two-point reports (001 eq. 2): each of ``num_coordinates`` coordinates ``epsilon``-LDP.

    Attributes:
        epsilon: the per-coordinate ε.
        num_coordinates: coordinates per report (d).
    """

    kind: ClassVar[str] = "two_point"
    observer: Observer
    epsilon: float
    num_coordinates: int = 1
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False

    def __post_init__(self) -> None:
        _checked_observer(self.observer)
        object.__setattr__(self, "client_ids", _checked_ids(self.client_ids))
        self.event()  # validates the numbers

    def event(self) -> dpe.DpEvent:
        return two_point_event(self.epsilon, self.num_coordinates)

    def to_dict(self) -> dict[str, Any]:
        return {
            "observer": self.observer,
            "kind": self.kind,
            "noise_std": 0.0,
            "sensitivity": 0.0,
            "client_ids": None if self.client_ids is None else list(self.client_ids),
            "epsilon": self.epsilon,
            "num_coordinates": self.num_coordinates,
            "amplifiable": self.amplifiable,
        }


@dataclass(frozen=True)
class ExactRelease(Release):
    """A function of the named clients' data published without noise: certified ε = ∞ for them
    against this observer (LDP-FL's ``client-minmax`` ranges, PMIDP-FL's adaptive thresholds).

    Its event is dp-accounting's ``NonPrivateDpEvent``, the same event as a Gaussian release of
    zero noise against a positive sensitivity (how the former single class recorded it).
    """

    kind: ClassVar[str] = "exact"
    observer: Observer
    client_ids: tuple[int, ...]
    amplifiable: bool = False

    def __post_init__(self) -> None:
        _checked_observer(self.observer)
        if self.client_ids is None:
            raise ConfigError("an exact release names the clients whose data it publishes; found None.")
        if self.amplifiable:
            raise ConfigError("an exact release cannot be amplified by sampling (it names its clients).")
        object.__setattr__(self, "client_ids", _checked_ids(self.client_ids))

    def event(self) -> dpe.DpEvent:
        return dpa.NonPrivateDpEvent()

    def to_dict(self) -> dict[str, Any]:
        return {
            "observer": self.observer,
            "kind": self.kind,
            "client_ids": list(self.client_ids or ()),
            "amplifiable": False,
        }


@dataclass(frozen=True)
class SampledGaussianRelease(Release):
    """``count`` Poisson-subsampled Gaussian sum queries about each named client's records: the
    local DP-SGD steps of a round (Abadi et al. 2016, Algorithm 1), one record the unit.

    Each step includes every record of the client independently with probability q, sums the
    per-sample gradients clipped to C and adds N(0, (zC)² I); under add/remove-one-record the
    sum's sensitivity is C, so one step is ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` and
    the round's steps compose (adaptively: each step starts from the previous noisy model)
    ``count`` times. What the client uploads is a function of these noisy steps and the round's
    global model (post-processing), so the event holds for every observer of the upload or of
    an aggregate of it. The ledger's relation must be add/remove (Poisson sampling).

    Attributes:
        noise_multiplier: z = noise std of the step's sum over the clip norm C (0: ε = ∞).
        sample_rate: q in (0, 1] (1: every record in every step, no amplification).
        count: steps composed (>= 1).
        client_ids: the clients whose records the steps are about (a record is one client's).

    References:
        Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Algorithm 1 and §3.1
        (moments accountant); Mironov, Talwar, Zhang 2019 (RDP of the sampled Gaussian);
        dp_accounting ``PoissonSampledDpEvent``.
    """

    kind: ClassVar[str] = "sampled_gaussian"
    observer: Observer
    noise_multiplier: float
    sample_rate: float
    count: int
    client_ids: tuple[int, ...]
    amplifiable: bool = False

    def __post_init__(self) -> None:
        _checked_observer(self.observer)
        z, q, n = self.noise_multiplier, self.sample_rate, self.count
        if isinstance(z, bool) or not isinstance(z, (int, float)) or not (math.isfinite(z) and z >= 0):
            raise ConfigError(f"`noise_multiplier` must be a finite number >= 0. Found {z!r}.")
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 1:
            raise ConfigError(f"`sample_rate` must be in (0, 1]. Found {q!r}.")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"`count` must be an integer >= 1. Found {n!r}.")
        if self.client_ids is None:
            raise ConfigError("a sampled Gaussian release names the clients whose records it is about; found None.")
        if self.amplifiable:
            raise ConfigError("a sampled Gaussian release names its clients and is not amplified by client sampling.")
        object.__setattr__(self, "client_ids", _checked_ids(self.client_ids))

    def event(self) -> dpe.DpEvent:
        """``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), count)``; at q = 1 the
        step is an unsampled Gaussian (no wrapper, as :func:`.events.poisson_sampled_event`), and
        z = 0 is ``NonPrivateDpEvent`` (noise-free gradients: no guarantee)."""
        if self.noise_multiplier == 0:
            return dpa.NonPrivateDpEvent()
        step: dpe.DpEvent = dpa.GaussianDpEvent(float(self.noise_multiplier))
        if self.sample_rate < 1:
            step = dpa.PoissonSampledDpEvent(float(self.sample_rate), step)
        return dpa.SelfComposedDpEvent(step, int(self.count))

    def to_dict(self) -> dict[str, Any]:
        return {
            "observer": self.observer,
            "kind": self.kind,
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "count": self.count,
            "client_ids": list(self.client_ids),
            "amplifiable": False,
        }


@dataclass(frozen=True)
class SkellamRelease(Release):
    """An integer sum released under secure aggregation with Skellam noise (:mod:`.skellam`).

    The observer sees only the modular sum of the integer uploads, which carries Sk(variance)
    per coordinate: the noise shares of the clients whose shares it cannot subtract (not its own,
    not those of clients colluding with it).

    Attributes:
        variance: μ, the noise variance per coordinate in the sum, in integer units (0: ε = ∞).
        l2_sensitivity: Δ2, the enforced L2 bound of one client's integer vector (after scaling,
            rotation and conditional rounding, :mod:`dpfl.privacy.mechanisms.integer`).
        l1_sensitivity: Δ1, its L1 bound.
        client_ids: the clients charged (the observer knows they took part), or ``None``.
        amplifiable: with ``client_ids=None``: the observer does not know who contributed (a
            secret Poisson sample — the public's view, or the server's under hidden participation),
            so the ledger amplifies the release by the sampler's own event.
    """

    kind: ClassVar[str] = "skellam"
    observer: Observer
    variance: float
    l2_sensitivity: float
    l1_sensitivity: float
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False

    def __post_init__(self) -> None:
        _checked_observer(self.observer)
        object.__setattr__(self, "client_ids", _checked_ids(self.client_ids))
        self.event()  # validates the numbers

    def event(self) -> dpe.DpEvent:
        if self.variance == 0:
            return dpa.NonPrivateDpEvent()
        return SkellamDpEvent(float(self.variance), float(self.l2_sensitivity), float(self.l1_sensitivity))

    def to_dict(self) -> dict[str, Any]:
        return {
            "observer": self.observer,
            "kind": self.kind,
            "variance": self.variance,
            "l2_sensitivity": self.l2_sensitivity,
            "l1_sensitivity": self.l1_sensitivity,
            "client_ids": None if self.client_ids is None else list(self.client_ids),
            "amplifiable": self.amplifiable,
        }


def federated_round_releases(
    client_ids: Sequence[int],
    client_noise_stds: Sequence[float] | float,
    client_sensitivities: Sequence[float] | float,
    weights: Sequence[float],
    *,
    server_noise_std: float = 0.0,
    secure_aggregation: bool = False,
    per_client_public: bool = False,
    amplifiable: bool = False,
) -> list[Release]:
    """The releases of one weighted-aggregation round, computed from the clients that *arrived*.

    Server: each client's upload (noise σ_k, sensitivity Δ_k) — or, with ``secure_aggregation``,
    only the aggregate of the client noises (the server knows its own noise, so it never counts).
    Public: the broadcast ``Σ_k w_k x̃_k + n_s`` with noise sqrt(Σ_k w_k² σ_k² + σ_s²) against
    sensitivity max_k w_k Δ_k (one broadcast release), or per client w_k Δ_k with
    ``per_client_public`` (personalized weights/noise; never amplified by sampling).

    Args:
        client_ids: the clients whose uploads entered the aggregate.
        client_noise_stds: σ_k per client (or one value for all).
        client_sensitivities: Δ_k per client (or one value), enforced, under the ledger's relation.
        weights: aggregation weights w_k of the arrived clients.
        server_noise_std: noise the server adds to the aggregate before broadcasting.
        secure_aggregation: the server sees only the sum of the uploads.
        per_client_public: record the public release per client (sensitivity w_k Δ_k).
        amplifiable: the clients are interchangeable and the unit is a client
            (:func:`.cohorts.broadcast_mode` says "amplified"): the broadcast may be amplified by
            the secret sample. Under client sampling a broadcast that is not must be recorded per
            participant (``per_client_public``); the ledger refuses it otherwise.

    Returns:
        the releases, grouped so that clients with equal numbers share one release.

    References:
        000 eq. 2; 002 eq. 4.7, 4.14; 003 eq. 31–33; 004 Algorithm 1 line 8.
    """
    ids = [int(c) for c in client_ids]
    n = len(ids)
    one_std = isinstance(client_noise_stds, (int, float))
    one_sens = isinstance(client_sensitivities, (int, float))
    sig = ([float(client_noise_stds)] * n if isinstance(client_noise_stds, (int, float))
           else [float(s) for s in client_noise_stds])
    sens = ([float(client_sensitivities)] * n if isinstance(client_sensitivities, (int, float))
            else [float(s) for s in client_sensitivities])
    w = [float(x) for x in weights]
    if not (len(sig) == len(sens) == len(w) == n):
        raise ConfigError(
            f"client_ids, noise stds, sensitivities and weights must have equal lengths. Found "
            f"{n}, {len(sig)}, {len(sens)}, {len(w)}."
        )
    releases: list[Release] = []
    if n == 0:
        return releases  # a noise-only broadcast says nothing about any client
    equal_weights = len(set(w)) == 1
    client_part, total = _aggregate_noise_stds(sig, w, float(server_noise_std), one_std and equal_weights)
    # server
    groups: dict[tuple[float, float], list[int]] = {}
    if not secure_aggregation and one_std and one_sens:
        groups[(sig[0], sens[0])] = ids
    elif secure_aggregation:
        for cid, wk, dk in zip(ids, w, sens, strict=True):
            groups.setdefault((client_part, wk * dk), []).append(cid)
    else:
        for cid, sk, dk in zip(ids, sig, sens, strict=True):
            groups.setdefault((sk, dk), []).append(cid)
    releases += [Release.gaussian("server", s, d, c) for (s, d), c in groups.items()]
    # public
    if per_client_public:
        pub: dict[float, list[int]] = {}
        for cid, wk, dk in zip(ids, w, sens, strict=True):
            pub.setdefault(wk * dk, []).append(cid)
        releases += [Release.gaussian("public", total, d, c) for d, c in pub.items()]
    else:
        agg_sens = w[0] * sens[0] if one_sens and equal_weights else max(
            wk * dk for wk, dk in zip(w, sens, strict=True))
        releases.append(Release.gaussian("public", total, agg_sens, None, amplifiable=amplifiable))
    return releases


def _aggregate_noise_stds(sig: list[float], w: list[float], server: float, uniform: bool) -> tuple[float, float]:
    """``aggregate_noise_std(sig, w)`` and ``aggregate_noise_std(sig, w, server)`` — the same
    numbers (the same terms summed by the same ``sum`` in the same order) in one pass; with
    ``uniform`` (one std, equal weights) the identical terms are not recomputed."""
    vals = np.asarray(sig + w + [server])
    if not bool(np.all(np.isfinite(vals) & (vals >= 0))):
        return aggregate_noise_std(sig, w), aggregate_noise_std(sig, w, server)  # raises, naming the value
    terms = itertools.repeat((w[0] * sig[0]) ** 2, len(sig)) if uniform else (
        (wk * sk) ** 2 for wk, sk in zip(w, sig, strict=True))
    total = sum(terms)
    return math.sqrt(total + 0.0**2), math.sqrt(total + server**2)


# --------------------------------------------------------------------------- per-observer state


def _signature(counts: Counter[dpe.DpEvent]) -> frozenset[tuple[dpe.DpEvent, int]]:
    return frozenset(counts.items())


@dataclass(frozen=True)
class _Histories:
    """The charged clients' own receipts, grouped: what certification reads.

    Row r (a client, in the order clients were first charged) holds ``counts[starts[r]:starts[r+1]]``
    receipts of the events ``columns[...]``, in the order the client first received each (the
    insertion order of a per-client ``Counter``, which fixes the order a PLD composes them in).
    ``group[r]`` numbers the row's release multiset (in order of first appearance);
    ``representatives`` is the first row of each multiset.
    """

    starts: np.ndarray
    columns: np.ndarray
    counts: np.ndarray
    group: np.ndarray
    representatives: np.ndarray

    @classmethod
    def of_pairs(cls, prow: np.ndarray, pcol: np.ndarray, counts: np.ndarray, first: np.ndarray,
                 num_rows: int) -> _Histories:
        """From the (row, event) pairs sorted by row then event, their counts and first receipts."""
        starts = np.searchsorted(prow, np.arange(num_rows + 1))
        canonical = np.stack([pcol, counts], axis=1).astype(np.int64)
        seen: dict[bytes, int] = {}
        group = np.empty(num_rows, dtype=np.int64)
        reps: list[int] = []
        for r in range(num_rows):
            g = seen.setdefault(canonical[starts[r]:starts[r + 1]].tobytes(), len(reps))
            if g == len(reps):
                reps.append(r)
            group[r] = g
        order = np.lexsort((first, prow))  # within a row: first receipt first
        return cls(starts, pcol[order], counts[order], group, np.asarray(reps, dtype=np.int64))

    @classmethod
    def of_log(cls, log: Sequence[tuple[int, np.ndarray]], num_rows: int, num_events: int) -> _Histories:
        empty = np.zeros(0, dtype=np.int64)
        if not log:
            return cls.of_pairs(empty, empty, empty, empty, num_rows)
        rows = np.concatenate([idx for _, idx in log])
        cols = np.repeat(np.array([c for c, _ in log], dtype=np.int64), [idx.size for _, idx in log])
        keys, first, counts = np.unique(rows * num_events + cols, return_index=True, return_counts=True)
        prow, pcol = np.divmod(keys, num_events)
        return cls.of_pairs(prow, pcol, counts, first, num_rows)

    def counter(self, row: int, events: Sequence[dpe.DpEvent]) -> Counter[dpe.DpEvent]:
        s, e = int(self.starts[row]), int(self.starts[row + 1])
        return Counter({events[int(c)]: int(k) for c, k in zip(self.columns[s:e], self.counts[s:e], strict=True)})


#: Kinds of an event for pure composition (:func:`_pure_kind`), as bits of a client's flags.
_KIND_BITS = {"pure": 1, "zero": 2, "none": 4}
#: A client's receipts are also kept as a dense [clients, distinct events] count matrix while it
#: has at most this many cells (a few distinct events: most algorithms); beyond, the log alone.
_DENSE_MAX_CELLS = 1 << 22


class _ObserverState:
    """One observer's receipts: the shared (broadcast) stream and every charged client's own.

    Clients get a row when first charged (``pos[client]``, -1 before; ``ids`` in that order).
    ``rows`` holds each row's RDP curve, accumulated release by release (one vector addition per
    release for all its clients). The receipts themselves are a log of (event column, rows) and,
    while there are few distinct events, a dense count matrix with each count's first receipt: a
    client's release multiset is the count of each event, read without per-client Python objects
    and grouped into distinct multisets on demand (:class:`_Histories`, cached until the next
    receipt). ``kinds`` flags which kinds of event (:func:`_pure_kind`) each row has received.
    """

    def __init__(self, n_orders: int, num_clients: int) -> None:
        self.n_orders = n_orders
        self.shared_counts: Counter[dpe.DpEvent] = Counter()
        self.shared_rdp = np.zeros(n_orders)
        self.pos = np.full(num_clients, -1, dtype=np.int64)
        self.id_of = np.zeros(16, dtype=np.int64)
        self.kinds = np.zeros(16, dtype=np.uint8)
        self.n = 0
        self.rows = np.zeros((16, n_orders))
        self.events: list[dpe.DpEvent] = []
        self.event_bits: list[int] = []
        self.column: dict[dpe.DpEvent, int] = {}
        self.log: list[tuple[int, np.ndarray]] = []
        self.dense: tuple[np.ndarray, np.ndarray] | None = (np.zeros((16, 4), dtype=np.int32),
                                                            np.zeros((16, 4), dtype=np.int32))
        self._histories: _Histories | None = None

    @property
    def ids(self) -> np.ndarray:
        """Client ids of the rows, in the order they were first charged."""
        return self.id_of[: self.n]

    def row_of(self, cid: int | None) -> int | None:
        if cid is None or not 0 <= cid < self.pos.shape[0]:
            return None
        r = int(self.pos[cid])
        return r if r >= 0 else None

    def rows_of(self, clients: Sequence[int]) -> np.ndarray:
        """Rows of ``clients`` (distinct), giving new clients rows in the order listed."""
        cids = np.asarray(clients, dtype=np.int64)
        idx = self.pos[cids]
        fresh = idx < 0
        if fresh.any():
            new = cids[fresh]
            m = self.n + new.size
            if m > self.rows.shape[0]:
                cap = max(2 * self.rows.shape[0], m)
                more = cap - self.rows.shape[0]
                self.rows = np.vstack([self.rows, np.zeros((more, self.n_orders))])
                self.id_of = np.concatenate([self.id_of, np.zeros(more, dtype=np.int64)])
                self.kinds = np.concatenate([self.kinds, np.zeros(more, dtype=np.uint8)])
            self.pos[new] = np.arange(self.n, m)
            self.id_of[self.n:m] = new
            self.n = m
            idx = self.pos[cids]
        return idx

    def _dense_fit(self) -> None:
        """Grow the dense matrices to the rows and events in use, or drop them past the budget."""
        if self.dense is None:
            return
        counts, first = self.dense
        rows, cols = self.rows.shape[0], len(self.events)
        if counts.shape[0] >= rows and counts.shape[1] >= cols:
            return
        new_cols = max(counts.shape[1], 2 * counts.shape[1] if cols > counts.shape[1] else 0, cols)
        if rows * new_cols > _DENSE_MAX_CELLS:
            self.dense = None
            return
        grown = np.zeros((rows, new_cols), dtype=np.int32), np.zeros((rows, new_cols), dtype=np.int32)
        for old, big in zip(self.dense, grown, strict=True):
            big[: old.shape[0], : old.shape[1]] = old
        self.dense = grown

    def charge(self, clients: Sequence[int], event: dpe.DpEvent, vec: np.ndarray) -> None:
        """One release about ``clients``: its RDP added to their rows, its event counted and logged."""
        idx = self.rows_of(clients)
        self.rows[idx] += vec
        col = self.column.setdefault(event, len(self.events))
        if col == len(self.events):
            self.events.append(event)
            self.event_bits.append(_KIND_BITS[_pure_kind(event)])
        self.kinds[idx] |= self.event_bits[col]
        self._dense_fit()
        if self.dense is not None:
            counts, first = self.dense
            new = idx[counts[idx, col] == 0]
            first[new, col] = len(self.log)
            counts[idx, col] += 1
        self.log.append((col, idx))
        self._histories = None

    def histories(self) -> _Histories:
        if self._histories is None:
            if self.dense is not None:
                counts, first = self.dense
                prow, pcol = np.nonzero(counts[: self.n, : len(self.events)])
                self._histories = _Histories.of_pairs(prow, pcol, counts[prow, pcol], first[prow, pcol], self.n)
            else:
                self._histories = _Histories.of_log(self.log, self.n, max(len(self.events), 1))
        return self._histories

    def own_counts(self, row: int) -> Counter[dpe.DpEvent]:
        """The receipts of row ``row``, in the order the client first received each event."""
        if self.dense is not None and self._histories is None:
            counts, first = self.dense
            cols = np.flatnonzero(counts[row, : len(self.events)])
            cols = cols[np.argsort(first[row, cols], kind="stable")]
            return Counter({self.events[int(c)]: int(counts[row, c]) for c in cols})
        return self.histories().counter(row, self.events)

    def row_kinds(self, row: int | None) -> set[str]:
        """The kinds of event (:func:`_pure_kind`) in the shared stream and in row ``row``'s."""
        bits = int(self.kinds[row]) if row is not None else 0
        out = {kind for kind, bit in _KIND_BITS.items() if bits & bit}
        return out | {_pure_kind(e) for e in self.shared_counts}

    def to_counts(self, cid: int | None) -> Counter[dpe.DpEvent]:
        """The shared receipts, then client ``cid``'s own (None: the shared ones only)."""
        total: Counter[dpe.DpEvent] = Counter(self.shared_counts)
        row = self.row_of(cid)
        if row is not None:
            total.update(self.own_counts(row))
        return total

    def copy(self) -> _ObserverState:
        out = _ObserverState.__new__(_ObserverState)
        out.__dict__.update(self.__dict__)
        out.shared_counts = Counter(self.shared_counts)
        out.shared_rdp = self.shared_rdp.copy()
        out.pos, out.id_of, out.rows, out.kinds = self.pos.copy(), self.id_of.copy(), self.rows.copy(), self.kinds.copy()
        out.events, out.event_bits, out.column, out.log = (list(self.events), list(self.event_bits), dict(self.column),
                                                           list(self.log))
        out.dense = None if self.dense is None else (self.dense[0].copy(), self.dense[1].copy())
        return out  # _histories: immutable, and the receipts are the same


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


# --------------------------------------------------------------------------- the ledger


class PrivacyLedger:
    """Per-round, per-client privacy receipts and their certified ε (see the module docstring).

    Args:
        num_clients: total number of clients N (the sampler's population).
        sampler: the sampler the engine uses (an object with ``describe()``/``wrap_event``) or
            its description.
        delta: δ of every certificate.
        relation: "add_remove" or "replace_one" — what the recorded sensitivities mean.
        privacy_unit: "client" or "record" — what the enforced sensitivity protects.
        sample_secret: whether the public cannot tell who was sampled (enables amplification of
            broadcast releases).
        pld_every: compute the PLD (tightest) certificate every this many rounds (0: never
            automatically).
        pld_discretization: PLD grid step.
        rdp_orders: RDP orders.

    >>> ledger = PrivacyLedger(num_clients=4, sampler={"kind": "all"}, delta=1e-5,
    ...                        relation="add_remove", privacy_unit="client", pld_every=0)
    >>> _ = ledger.record_round(0, federated_round_releases([0, 1, 2, 3], 4.0, 1.0, [0.25] * 4),
    ...                         sampling={"kind": "all"}, participants=[0, 1, 2, 3])
    >>> ledger.certify(method="rdp").observer
    'server'
    """

    def __init__(
        self,
        *,
        num_clients: int,
        sampler: SamplerLike | Mapping[str, Any],
        delta: float,
        relation: str,
        privacy_unit: str,
        sample_secret: bool = True,
        pld_every: int = 10,
        pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
        rdp_orders: Sequence[float] = DEFAULT_RDP_ORDERS,
    ) -> None:
        if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
            raise ConfigError(f"`num_clients` must be a positive integer. Found {num_clients!r}.")
        self.num_clients = num_clients
        if isinstance(sampler, Mapping):
            self._sampler: SamplerLike | None = None
            descriptor = dict(sampler)
        else:
            self._sampler = sampler
            descriptor = sampler.describe()
        self.sampling = validate_sampling(descriptor, num_clients)
        self.delta = validate_delta(delta)
        self.relation = validate_relation(relation)
        self.privacy_unit = validate_unit(privacy_unit)
        self.sample_secret = bool(sample_secret)
        if isinstance(pld_every, bool) or not isinstance(pld_every, int) or pld_every < 0:
            raise ConfigError(f"`pld_every` must be an integer >= 0. Found {pld_every!r}.")
        self.pld_every = pld_every
        self.pld_discretization = float(pld_discretization)
        self.rdp_orders = tuple(float(o) for o in rdp_orders)
        self._state: dict[str, _ObserverState] = {
            obs: _ObserverState(len(self.rdp_orders), num_clients) for obs in OBSERVERS}
        self._version = 0  # receipts recorded so far (keys the per-client RDP cache)
        self._full_rdp_cache: dict[str, tuple[int, np.ndarray]] = {}
        self._rounds: list[dict[str, Any]] = []
        self._history: list[dict[str, Any]] = []
        # a round under "all" sampling with fewer participants than clients (dropouts)
        self._partial_rounds = False
        self._pld_cache: dict[frozenset[tuple[dpe.DpEvent, int]], float | None] = {}
        self._pld_notes: dict[frozenset[tuple[dpe.DpEvent, int]], list[str]] = {}

    # ------------------------------------------------------------------ recording

    @property
    def rounds_recorded(self) -> int:
        """Number of rounds recorded."""
        return len(self._rounds)

    @property
    def history(self) -> list[dict[str, Any]]:
        """Per-round entries: round, participants, claimed ε, certified ε per observer."""
        return [dict(h) for h in self._history]

    @property
    def claimed_epsilon(self) -> float | dict[int, float] | None:
        """The latest claimed ε passed to :meth:`record_round` (per client if given so)."""
        for record in reversed(self._rounds):
            if record["claimed_epsilon"] is not None:
                return record["claimed_epsilon"]
        return None

    def _check_round(
        self,
        releases: Sequence[Release],
        sampling: Mapping[str, Any] | SamplerLike,
        participants: Iterable[int],
    ) -> tuple[int, ...]:
        described = sampling if isinstance(sampling, Mapping) else sampling.describe()
        reported = validate_sampling(described, self.num_clients)
        if reported != self.sampling:
            raise PrivacyPreconditionError(
                f"sampling mismatch: the ledger was built for the engine's sampler "
                f"{self.sampling}, but this round reports {reported}. Accounting must use the "
                "sampling the engine actually performs."
            )
        parts = tuple(sorted({int(c) for c in participants}))
        if parts and (parts[0] < 0 or parts[-1] >= self.num_clients):
            raise ConfigError(
                f"participant ids must be in [0, {self.num_clients}). Found {parts[0]}..{parts[-1]}."
            )
        if self.sampling["kind"] == "fixed_size" and len(parts) > self.sampling["num_sampled"]:
            raise PrivacyPreconditionError(
                f"{len(parts)} participants in a round, but the sampler draws "
                f"num_sampled = {self.sampling['num_sampled']}."
            )
        members = set(parts)
        for rel in releases:
            if not isinstance(rel, Release):
                raise ConfigError(f"releases must be `Release` objects. Found {type(rel).__name__}.")
            if isinstance(rel, SkellamRelease) and self.relation != "add_remove":
                raise PrivacyPreconditionError(
                    f"a Skellam (secure aggregation) release is priced under add/remove one client; this "
                    f"ledger's relation is {self.relation!r}.")
            if (isinstance(rel, SkellamRelease) and rel.amplifiable and rel.client_ids is None
                    and self.sampling["kind"] not in ("poisson", "all")):
                raise PrivacyPreconditionError(
                    "a Skellam release hidden in a secret sample is amplified only by Poisson sampling (each "
                    f"client's own coin); this run samples {self.sampling['kind']!r}.")
            if isinstance(rel, SampledGaussianRelease) and self.relation != "add_remove":
                raise PrivacyPreconditionError(
                    f"a Poisson-sampled (DP-SGD) release is priced under add/remove-one; this ledger's "
                    f"relation is {self.relation!r}. Build the ledger with relation 'add_remove'."
                )
            if rel.client_ids is not None and not members.issuperset(rel.client_ids):
                extra = sorted(set(rel.client_ids) - members)[:5]
                raise PrivacyPreconditionError(
                    f"a {rel.observer} release names clients {extra} that are not among this "
                    "round's participants."
                )
        return parts

    def _targets(
        self, release: Release, participants: tuple[int, ...]
    ) -> tuple[dpe.DpEvent | None, Sequence[int], dpe.DpEvent]:
        """(event for the shared stream or None, clients charged individually, their event)."""
        event = release.event()
        if release.client_ids is not None:
            return None, release.client_ids, event
        hidden_from_server = release.observer == "server" and release.amplifiable and isinstance(release, SkellamRelease)
        if (release.observer == "public" and self.sample_secret) or hidden_from_server:
            if self.sampling["kind"] != "all" and not (release.amplifiable and self.privacy_unit == "client"):
                raise PrivacyPreconditionError(
                    f"a broadcast cannot be amplified by the secret {self.sampling['kind']} client sample "
                    f"unless the clients are interchangeable and the privacy unit is a client (here: "
                    f"{self.privacy_unit}); record it per participant (dpfl.privacy.accounting.cohorts)."
                )
            if self._sampler is not None:
                return self._sampler.wrap_event(event, self.num_clients), (), event
            return sampled_event(event, self.sampling, self.num_clients), (), event
        # a broadcast whose cohort is known to the observer: charged to those who took part
        return None, participants, event

    def _apply(self, releases: Sequence[Release], participants: tuple[int, ...]) -> None:
        for rel in releases:
            st = self._state[rel.observer]
            shared, clients, event = self._targets(rel, participants)
            if shared is not None and not isinstance(shared, dpa.NoOpDpEvent):
                st.shared_counts[shared] += 1
                st.shared_rdp += rdp_vector(shared, self.relation, self.rdp_orders)
            if clients and not isinstance(event, dpa.NoOpDpEvent):
                st.charge(clients, event, rdp_vector(event, self.relation, self.rdp_orders))
        self._version += 1

    def _note_participation(self, parts: tuple[int, ...]) -> None:
        """Without client sampling, a round with fewer participants than clients (dropouts)
        makes per-participant figures conditional on who arrived."""
        if len(parts) < self.num_clients and self.sampling["kind"] == "all":
            self._partial_rounds = True

    def record_round(
        self,
        round_idx: int,
        releases: Sequence[Release],
        *,
        sampling: Mapping[str, Any] | SamplerLike,
        participants: Iterable[int],
        claimed_epsilon: float | Mapping[int, float] | None = None,
        certify_round: bool = True,
    ) -> dict[str, Any]:
        """Record one round's releases; returns the round's history entry.

        ``certify_round=False`` skips the entry's per-round certificate (a dry run only needs
        the final one; the receipts recorded are the same).

        Args:
            round_idx: the round number.
            releases: what each observer saw (see :func:`federated_round_releases`).
            sampling: the sampler that drew this round's cohort (or its ``describe()``); must
                equal the ledger's.
            participants: the clients whose data entered this round (after dropouts).
            claimed_epsilon: the paper's claimed ε so far (one number, or per client).

        Raises:
            PrivacyPreconditionError: sampling mismatch, a release about a non-participant, or
                more participants than the sampler draws.
        """
        parts = self._check_round(releases, sampling, participants)
        claimed: float | dict[int, float] | None
        if claimed_epsilon is None:
            claimed = None
        elif isinstance(claimed_epsilon, Mapping):
            claimed = {int(k): float(v) for k, v in claimed_epsilon.items()}
        else:
            claimed = float(claimed_epsilon)
        self._apply(releases, parts)
        self._note_participation(parts)
        self._rounds.append(
            {
                "round": int(round_idx),
                "participants": list(parts),
                "releases": [r.to_dict() for r in releases],
                "claimed_epsilon": claimed,
            }
        )
        entry: dict[str, Any] = {
            "round": int(round_idx),
            "num_participants": len(parts),
            "claimed_epsilon": claimed,
        }
        if certify_round:
            entry["certified_rdp"] = {obs: self._worst_rdp(obs)[0] for obs in OBSERVERS}
        if certify_round and self.pld_every and len(self._rounds) % self.pld_every == 0:
            best = {obs: self.certify(obs).to_dict() for obs in OBSERVERS}
            entry["certified"] = best
        self._history.append(entry)
        return dict(entry)

    # ------------------------------------------------------------------ RDP

    def _eps(self, rdp: np.ndarray) -> float:
        if not np.any(rdp):
            return 0.0
        return epsilon_from_rdp(self.rdp_orders, rdp, self.delta)

    def _eps_rows(self, rdp: np.ndarray) -> np.ndarray:
        """:meth:`_eps` of every row of ``rdp`` at once (the same numbers)."""
        return epsilons_from_rdp(self.rdp_orders, rdp, self.delta)

    def _worst_rdp(self, observer: str) -> tuple[float, int | None]:
        """(worst client's RDP ε, that client's id or None when every client is alike)."""
        st = self._state[observer]
        return self._worst(st.shared_rdp, st.rows[: st.n], st.ids)

    def _worst(self, shared: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> tuple[float, int | None]:
        """(worst RDP ε over clients whose own curves are ``rows`` on top of ``shared``, its client)."""
        if rows.shape[0] == 0:
            return self._eps(shared), None
        top = rows.max(axis=0)
        dominant = np.flatnonzero(np.all(rows == top, axis=1))
        if dominant.size:
            return self._eps(top + shared), int(ids[int(dominant[0])])
        uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
        eps = self._eps_rows(uniq + shared)
        k = int(np.argmax(eps))
        who = int(ids[int(np.flatnonzero(inverse.reshape(-1) == k)[0])])
        return float(eps[k]), who

    def _exceeds(self, shared: np.ndarray, rows: np.ndarray, ids: np.ndarray, target: float) -> bool:
        """Whether :meth:`_worst` is above ``target``. ε is non-decreasing in every order's RDP,
        so when the pointwise maximum of the curves is within the target, so is every client."""
        if rows.shape[0]:
            top = rows.max(axis=0) + shared
            if not np.isnan(top).any() and self._eps(top) <= target:
                return False
        return self._worst(shared, rows, ids)[0] > target

    def client_epsilons(self, observer: Observer, method: Literal["rdp", "best"] = "rdp") -> dict[int, float]:
        """Certified ε of every client that has its own receipts, against ``observer``.

        Clients without their own receipts have the shared (broadcast) ε: ``certify(observer,
        client_id=None)`` when nobody has receipts, else see :meth:`certify`.
        """
        self._check_observer(observer)
        st = self._state[observer]
        if st.n == 0:
            return {}
        uniq, inverse = np.unique(st.rows[: st.n], axis=0, return_inverse=True)
        rdp = self._eps_rows(uniq + st.shared_rdp)[inverse.reshape(-1)]
        ids = st.ids.tolist()
        if method == "rdp":
            return {cid: float(e) for cid, e in zip(ids, rdp, strict=True)}
        # the tightest per client (what certify(observer, cid) gives): its own RDP curve, the PLD
        # of its multiset (cached per multiset) and its pure bound
        out: dict[int, float] = {}
        for r, cid in enumerate(ids):
            eps_pld = self._pld_for(st.to_counts(cid))[0]
            out[cid] = _tightest(eps_pld, float(rdp[r]), self._pure(observer, cid, r))[0]
        return out

    # ------------------------------------------------------------------ certificates

    @staticmethod
    def _check_observer(observer: str) -> None:
        if observer not in OBSERVERS:
            raise ConfigError(f"`observer` must be one of {list(OBSERVERS)}. Found {observer!r}.")

    def _pld_for(self, counts: Counter[dpe.DpEvent]) -> tuple[float | None, list[str]]:
        sig = _signature(counts)
        if sig not in self._pld_cache:
            grouped, notes = _quantize_for_pld(counts)
            eps, more = pld_epsilon(
                _events_from_counts(grouped), self.delta, self.relation, self.pld_discretization
            )
            notes += more
            if len(self._pld_cache) > 4096:
                self._pld_cache.clear()
                self._pld_notes.clear()
            self._pld_cache[sig] = eps
            self._pld_notes[sig] = notes
        return self._pld_cache[sig], list(self._pld_notes[sig])


    def _rdp_bounds(self, observer: str, who: Sequence[int | None]) -> list[float]:
        """``self._certificate(observer, cid, "rdp").epsilon`` for every ``cid`` of ``who`` (the
        smaller of the RDP and pure bounds), the RDP ε of all of them in one conversion."""
        st = self._state[observer]
        curves = np.tile(st.shared_rdp, (len(who), 1))
        rows = [st.row_of(cid) for cid in who]
        for i, row in enumerate(rows):
            if row is not None:
                curves[i] = st.shared_rdp + st.rows[row]
        eps_rdp = self._eps_rows(curves)
        out: list[float] = []
        for i, cid in enumerate(who):
            if rows[i] is None and not st.shared_counts:  # no receipts at all
                out.append(0.0)
                continue
            out.append(_tightest(None, float(eps_rdp[i]), self._pure(observer, cid, rows[i]))[0])
        return out

    def _pure(self, observer: str, cid: int | None, row: int | None) -> float | None:
        """The pure-composition bound of ``cid``'s receipts (:func:`.events.pure_epsilon`); the
        receipts are composed only when they may all be pure DP (else the None it returns)."""
        st = self._state[observer]
        kinds = st.row_kinds(row)
        if "none" in kinds and "zero" not in kinds:
            return None
        return pure_epsilon(_events_from_counts(st.to_counts(cid)))

    def _certificate(self, observer: str, cid: int | None, method: str) -> Certificate:
        st = self._state[observer]
        rdp = st.shared_rdp.copy()
        row = st.row_of(cid)
        if row is not None:
            rdp = rdp + st.rows[row]
        eps_rdp = self._eps(rdp)
        has_receipts = row is not None or bool(st.shared_counts)
        notes: list[str] = []
        eps_pld: float | None = None
        if method == "best" and has_receipts:
            eps_pld, notes = self._pld_for(st.to_counts(cid))
        eps_pure = self._pure(observer, cid, row) if has_receipts else 0.0
        eps, best = _tightest(eps_pld, eps_rdp, eps_pure)
        if not has_receipts:
            eps, best = 0.0, "rdp"
        who = "every client" if cid is None else f"client {cid}"
        notes.insert(0, f"{who}; {self.rounds_recorded} rounds recorded")
        sampled = self.sampling["kind"] != "all"
        if observer == "public" and any(_amplified(e, self.relation) for e in st.shared_counts):
            notes.append("broadcast releases amplified by the secret client sample")
        # What the figure is conditional on. Receipts charged per participant name the rounds a
        # client took part in: under client sampling (or when some rounds had fewer participants
        # than clients — arrivals after dropouts) every figure of that observer, a client's who
        # was never drawn included (its 0 holds only for these cohorts), is conditional on the
        # cohorts drawn. Shared receipts alone are events of the secret schedule (amplified, or
        # charged to every client whatever the sample): ex ante. An observer charged nothing at all
        # (every cohort it could have seen was empty: none drawn, or none arrived) holds its 0 only
        # for those cohorts, too.
        per_participant = st.n > 0 or (self.rounds_recorded > 0 and not st.shared_counts)
        basis: Basis = "given-cohorts" if per_participant and (sampled or self._partial_rounds) else "ex-ante"
        if observer == "server" and any(_amplified(e, self.relation) for e in st.shared_counts):
            notes.append("hidden participation: the server sees only the secure sum of every client's masked "
                         "upload, amplified by each client's secret coin")
        elif observer == "server":
            notes.append("the server knows whom it sampled: no sampling amplification")
        return Certificate(
            epsilon=eps,
            delta=self.delta,
            method=best,  # type: ignore[arg-type]
            observer=observer,
            privacy_unit=self.privacy_unit,
            relation=self.relation,
            epsilon_rdp=eps_rdp,
            epsilon_pld=eps_pld,
            epsilon_pure=eps_pure if has_receipts else None,
            notes=tuple(dict.fromkeys(notes)),
            basis=basis,
        )

    def certify(
        self,
        observer: Observer | None = None,
        client_id: int | None = None,
        method: Literal["rdp", "best"] = "best",
    ) -> Certificate:
        """Certified ε at the ledger's δ.

        Args:
            observer: "server", "public", or ``None`` for the headline (worst observer).
            client_id: a client, or ``None`` for the worst client.
            method: "rdp" (fast) or "best" (tightest of RDP, PLD and pure composition).

        Returns:
            the certificate; for ``client_id=None`` it is the worst client's.
        """
        if method not in ("rdp", "best"):
            raise ConfigError(f"`method` must be 'rdp' or 'best'. Found {method!r}.")
        if observer is None:
            certs = [self.certify(obs, client_id, method) for obs in OBSERVERS]
            return max(certs, key=lambda c: c.epsilon)
        self._check_observer(observer)
        if client_id is not None:
            return self._certificate(observer, int(client_id), method)
        st = self._state[observer]
        if st.n == 0:
            return self._certificate(observer, None, method)
        who: list[int | None]
        if method == "rdp":
            eps_rdp, worst_cid = self._worst_rdp(observer)
            cert = self._certificate(observer, worst_cid, method)
            if cert.epsilon >= eps_rdp:
                # the worst RDP client's certificate is its RDP bound: every other client's
                # certificate (at most its own RDP ε) is at most that
                return cert
            # a pure bound lowered it: another client's RDP-or-pure figure may be the larger
            who = [int(st.ids[r]) for r in st.histories().representatives]
            if st.n < self.num_clients and st.shared_counts:
                who.append(None)
            rdp_or_pure = self._rdp_bounds(observer, who)
            i = max(range(len(who)), key=lambda j: (rdp_or_pure[j], -j))
            return self._certificate(observer, who[i], method)
        # tightest per distinct history (release multiset; its first client, in the order
        # clients were first charged); the worst of those
        who = [int(st.ids[r]) for r in st.histories().representatives]
        if st.n < self.num_clients and st.shared_counts:
            who.append(None)
        # A history's tightest ε never exceeds its RDP-or-pure ε (the tightest is the minimum over
        # PLD, RDP and pure composition), so histories are priced in decreasing order of that
        # bound and the search stops once the bound is below the worst tightest ε found: the same
        # maximum, with one PLD per history that can still be the worst instead of one per history.
        bounds = list(zip(self._rdp_bounds(observer, who), range(len(who)), strict=True))
        worst: tuple[float, int, Certificate] | None = None
        for bound, i in sorted(bounds, key=lambda b: (-b[0], b[1])):
            if worst is not None and bound < worst[0]:
                break
            cert = self._certificate(observer, who[i], method)
            # ties go to the earlier history, as the exhaustive maximum did
            if worst is None or cert.epsilon > worst[0] or (cert.epsilon == worst[0] and i < worst[1]):
                worst = (cert.epsilon, i, cert)
        assert worst is not None
        return worst[2]

    def certify_all(self, method: Literal["rdp", "best"] = "best") -> dict[str, Any]:
        """Headline and per-observer certificates as a JSON-serializable dict."""
        per = {obs: self.certify(obs, None, method) for obs in OBSERVERS}
        head = max(per.values(), key=lambda c: c.epsilon)
        return {
            "headline": head.to_dict(),
            "observers": {obs: c.to_dict() for obs, c in per.items()},
        }

    # ------------------------------------------------------------------ target ε

    def would_exceed(
        self,
        next_round_releases: Sequence[Release],
        target_epsilon: float,
        *,
        participants: Iterable[int] | None = None,
        method: Literal["rdp", "best"] = "rdp",
        observer: Observer | None = None,
    ) -> bool:
        """Whether recording these releases would take the headline certified ε above the target
        (``observer``: that observer's certified ε instead of the headline's worst observer).

        Call it after sampling the next cohort and before training it; if it returns True, stop
        (the run ends before the round that would exceed ``target_epsilon``). Nothing is recorded.

        Args:
            next_round_releases: the releases the next round would make.
            target_epsilon: the run's target certified ε.
            participants: the next round's cohort (default: every client named in a release).
            method: "rdp" (default: fast; conservative — may stop earlier than PLD would) or
                "best".
            observer: "server", "public", or None (the worst of them).
        """
        if observer is not None:
            self._check_observer(observer)
        if not isinstance(target_epsilon, (int, float)) or not target_epsilon > 0:
            raise ConfigError(f"`target_epsilon` must be > 0. Found {target_epsilon!r}.")
        if participants is None:
            named: set[int] = set()
            for rel in next_round_releases:
                named.update(rel.client_ids or ())
            participants = sorted(named)
        parts = self._check_round(next_round_releases, self.sampling, participants)
        if method == "best":
            trial = self._clone()
            trial.pld_every = 0
            trial.record_round(-1, next_round_releases, sampling=self.sampling, participants=parts,
                               certify_round=False)
            return bool(trial.certify(observer, None, "best").epsilon > target_epsilon)
        return any(self._exceeds(*self._trial(obs, next_round_releases, parts), target_epsilon)
                   for obs in ((observer,) if observer else OBSERVERS))

    def _clone(self) -> PrivacyLedger:
        """A copy of the receipts, configuration and sampler (what :meth:`from_dict` of
        :meth:`to_dict` rebuilds, without replaying), with its own PLD cache; no history."""
        trial = PrivacyLedger.__new__(PrivacyLedger)
        trial.__dict__.update(self.__dict__)
        trial._state = {obs: st.copy() for obs, st in self._state.items()}
        trial._rounds = list(self._rounds)
        trial._history = []
        trial._pld_cache, trial._pld_notes = {}, {}
        trial._full_rdp_cache = {}
        return trial

    # ------------------------------------------------------------------ Rényi filter

    def _trial(self, observer: str, releases: Sequence[Release],
               parts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shared RDP curve, own RDP curve per charged client, their ids) of ``observer`` after
        ``releases`` (already checked) — the same additions recording them would make, on copies
        (clients charged for the first time are appended in the order they are charged)."""
        st = self._state[observer]
        shared = st.shared_rdp.copy()
        rows, ids = st.rows[: st.n], st.ids
        fresh: dict[int, int] = {}
        copied = False
        for rel in releases:
            if rel.observer != observer:
                continue
            sh, clients, event = self._targets(rel, parts)
            if sh is not None and not isinstance(sh, dpa.NoOpDpEvent):
                shared += rdp_vector(sh, self.relation, self.rdp_orders)
            if clients and not isinstance(event, dpa.NoOpDpEvent):
                vec = rdp_vector(event, self.relation, self.rdp_orders)
                cids = np.asarray(clients, dtype=np.int64)
                idx = st.pos[cids]
                new = [int(c) for c in cids[idx < 0] if int(c) not in fresh]
                if not copied:
                    rows, ids, copied = rows.copy(), ids.copy(), True
                if new:
                    fresh.update((c, rows.shape[0] + j) for j, c in enumerate(new))
                    rows = np.vstack([rows, np.zeros((len(new), st.n_orders))])
                    ids = np.concatenate([ids, np.asarray(new, dtype=np.int64)])
                if fresh:
                    idx = np.asarray([fresh[int(c)] if r < 0 else int(r) for c, r in zip(cids, idx, strict=True)],
                                     dtype=np.int64)
                rows[idx] += vec
        return shared, rows, ids

    def _full_rdp(self, shared: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """[num_clients, orders]: every client's RDP curve (shared stream plus its own row)."""
        full = np.tile(shared, (self.num_clients, 1))
        full[ids] += rows
        return full

    def _recorded_full_rdp(self, observer: str) -> np.ndarray:
        """:meth:`_full_rdp` of what is recorded (cached until the next receipt)."""
        cached = self._full_rdp_cache.get(observer)
        if cached is None or cached[0] != self._version:
            st = self._state[observer]
            cached = (self._version, self._full_rdp(st.shared_rdp, st.rows[: st.n], st.ids))
            self._full_rdp_cache[observer] = cached
        return cached[1]

    def within_budget(self, budget: PrivacyLedger, next_round_releases: Sequence[Release], *,
                      participants: Iterable[int]) -> bool:
        """Whether, after these releases, every client's RDP curve stays at or below its curve in
        ``budget`` at *every* order, for every observer (a Rényi filter).

        A run whose noise is chosen adaptively (from the data) has a valid ex-ante guarantee when
        it halts before any order of its composed RDP would exceed a budget fixed before the run:
        then it is (α, B(α))-RDP at every order α of the budget (Feldman & Zrnic 2021, Theorem 3.1
        with the privacy filter of Definition 3.2, applied order by order), and the budget's ε is
        a guarantee. Nothing is recorded.

        References:
            V. Feldman, T. Zrnic, "Individual Privacy Accounting via a Rényi Filter", NeurIPS 2021.
        """
        if budget.num_clients != self.num_clients or budget.rdp_orders != self.rdp_orders:
            raise ConfigError("a budget ledger must have the run's clients and RDP orders.")
        parts = self._check_round(next_round_releases, self.sampling, participants)
        for obs in OBSERVERS:
            spent = self._full_rdp(*self._trial(obs, next_round_releases, parts))
            allowed = budget._recorded_full_rdp(obs)
            if np.any(spent > allowed * (1 + 1e-9) + 1e-12):
                return False
        return True

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable state (configuration, every round's receipts, history)."""
        return {
            "version": 1,
            "config": {
                "num_clients": self.num_clients,
                "sampling": dict(self.sampling),
                "delta": self.delta,
                "relation": self.relation,
                "privacy_unit": self.privacy_unit,
                "sample_secret": self.sample_secret,
                "pld_every": self.pld_every,
                "pld_discretization": self.pld_discretization,
                "rdp_orders": list(self.rdp_orders),
            },
            "rounds": [_jsonable(r) for r in self._rounds],
            "history": [_jsonable(h) for h in self._history],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], sampler: SamplerLike | None = None) -> PrivacyLedger:
        """Rebuild a ledger from :meth:`to_dict` (replays the receipts; no PLD is recomputed).

        Args:
            data: the stored state.
            sampler: the engine's sampler, checked against the stored description.
        """
        if data.get("version") != 1:
            raise ConfigError(f"unknown ledger format version {data.get('version')!r}.")
        cfg = data["config"]
        if sampler is not None and validate_sampling(sampler.describe()) != validate_sampling(cfg["sampling"]):
            raise PrivacyPreconditionError(
                f"sampling mismatch: the stored ledger used {cfg['sampling']}, the engine declares "
                f"{sampler.describe()}."
            )
        ledger = cls(
            num_clients=int(cfg["num_clients"]),
            sampler=sampler if sampler is not None else cfg["sampling"],
            delta=float(cfg["delta"]),
            relation=cfg["relation"],
            privacy_unit=cfg["privacy_unit"],
            sample_secret=bool(cfg["sample_secret"]),
            pld_every=int(cfg["pld_every"]),
            pld_discretization=float(cfg["pld_discretization"]),
            rdp_orders=[float(o) for o in cfg["rdp_orders"]],
        )
        for r in data["rounds"]:
            releases = [Release.from_dict(x) for x in r["releases"]]
            parts = ledger._check_round(releases, ledger.sampling, r["participants"])
            ledger._apply(releases, parts)
            ledger._note_participation(parts)
            claimed = r["claimed_epsilon"]
            if isinstance(claimed, dict):
                claimed = {int(k): float(v) for k, v in claimed.items()}
            elif claimed is not None:
                claimed = float(claimed)  # "inf" parses too
            ledger._rounds.append(
                {
                    "round": int(r["round"]),
                    "participants": list(parts),
                    "releases": [x.to_dict() for x in releases],
                    "claimed_epsilon": claimed,
                }
            )
        ledger._history = [_from_jsonable(h) for h in data.get("history", [])]
        return ledger


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return json_epsilon(value)
    return value


def _from_jsonable(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    rdp = out.get("certified_rdp")
    if isinstance(rdp, dict):
        out["certified_rdp"] = {k: epsilon_from_json(v) for k, v in rdp.items()}
    claimed = out.get("claimed_epsilon")
    if isinstance(claimed, dict):
        out["claimed_epsilon"] = {int(k): float(v) for k, v in claimed.items()}
    elif claimed is not None:
        out["claimed_epsilon"] = float(claimed)
    return out
