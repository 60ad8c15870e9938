"""The release types' common base: one frozen value per release, and their registry.

A release is what one observer saw in one round (:class:`Release`): which clients it is about and
the numbers of the noise actually added. Each mechanism family is one module of this package
(:mod:`.gaussian`, :mod:`.exact`, :mod:`.two_point`, :mod:`.sampled_gaussian`, :mod:`.skellam`)
holding its frozen release type, how it serializes (``kind`` and ``to_dict``/``from_fields``),
its ``dp_accounting`` event, and what the ledger must check before accepting it
(:meth:`Release.check_ledger`). A subclass that sets ``kind`` is registered under it by
``__init_subclass__``: :meth:`Release.from_dict` reads every registered kind and the ledger
composes releases it does not know by name. An event dp-accounting cannot price is registered by
its module with :func:`dpfl.privacy.accounting.registry.register_event`.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, cast

from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError

__all__ = ["OBSERVERS", "Observer", "Release", "checked_ids", "checked_observer", "release_kinds"]

Observer = Literal["server", "public"]
OBSERVERS: tuple[Observer, ...] = ("server", "public")

_KINDS: dict[str, type[Release]] = {}


def release_kinds() -> tuple[str, ...]:
    """The registered ``kind`` tags, in registration order."""
    return tuple(_KINDS)


def _construct(kind: str, *args: Any) -> Release:
    """A release of the registered ``kind`` (the family's module registers it on import)."""
    return cast(Release, cast(Any, _KINDS[kind])(*args))


def checked_observer(observer: str) -> None:
    if observer not in OBSERVERS:
        raise ConfigError(f"`observer` must be one of {list(OBSERVERS)}. Found {observer!r}.")


def checked_ids(client_ids: Iterable[int] | None) -> tuple[int, ...] | None:
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
            clients at a client-level unit, whose numbers are every cohort's (:mod:`dpfl.privacy.accounting.broadcast`):
            the ledger amplifies a broadcast by the sample only when this is true, and refuses
            any other broadcast under client sampling (record it per participant instead).
        kind: the tag of the stored JSON form (``to_dict``/``from_dict``); setting it in a
            subclass registers the subclass.

    Construct them with :meth:`gaussian`, :meth:`two_point` and :meth:`exact` (or the types
    directly), and restore stored ones with :meth:`from_dict`, which also reads the dicts of
    the former single ``Release`` class (checkpoints and stored ledgers).
    """

    kind: ClassVar[str]
    observer: Observer
    client_ids: tuple[int, ...] | None
    amplifiable: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if isinstance(kind, str):
            known = _KINDS.get(kind)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise ConfigError(f"release kind {kind!r} is already registered by {known.__name__}.")
            _KINDS[kind] = cls

    @abc.abstractmethod
    def event(self) -> dpe.DpEvent:
        """The unsampled event of this release for one privacy unit."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (with its ``kind`` tag)."""

    @classmethod
    @abc.abstractmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> Release:
        """The release stored as ``data`` (:meth:`to_dict`'s form; ids and flag already read)."""

    def check_ledger(self, relation: str, sampling_kind: str) -> None:
        """Refuse a ledger that cannot price this release (its ``relation`` and its sampler's
        ``kind``), with :class:`dpfl.errors.PrivacyPreconditionError`; the default accepts any."""
        return None

    def samples_named_clients(self) -> bool:
        """Whether this release is about a secret Poisson sample *of* the named clients (its event
        carries the sampling), so that every named client is charged whether it was sampled or
        not (amplified banded MF under cyclic Poisson: the round's whole group). False unless a
        mechanism makes it so; the ledger then accepts named clients outside the participants."""
        return False

    def upload_norm_limit(self, num_params: int) -> float | None:
        """For a server release about the named clients' uploads: the largest L2 norm such an
        upload can have (``math.inf``: a randomized report, no limit), or None when the release
        says nothing about the upload's norm (the default)."""
        return None

    def hidden_from_server(self) -> bool:
        """Whether the server sees this broadcast (``client_ids=None``) only inside a secret
        Poisson sample (hidden participation), so that it is amplified against the server as it
        is against the public. False unless a mechanism makes it so (the Skellam sum)."""
        return False

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
    ) -> Release:
        """A Gaussian release (noise std and enforced sensitivity): a ``GaussianRelease``."""
        ids = None if client_ids is None else tuple(map(int, client_ids))
        return _construct("gaussian", observer, float(noise_std), float(sensitivity), ids, amplifiable)

    @staticmethod
    def exact(observer: Observer, client_ids: Iterable[int]) -> Release:
        """A function of the clients' data released without noise (certified ε = ∞ for them): an
        ``ExactRelease``."""
        return _construct("exact", observer, tuple(map(int, client_ids)))

    @staticmethod
    def two_point(
        observer: Observer, epsilon: float, num_coordinates: int, client_ids: Iterable[int] | None = None
    ) -> Release:
        """A release of two-point reports (001 eq. 2): ε per coordinate, d coordinates: a
        ``TwoPointRelease``."""
        ids = None if client_ids is None else tuple(map(int, client_ids))
        return _construct("two_point", observer, float(epsilon), int(num_coordinates), ids)

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Release:
        """Inverse of :meth:`to_dict`, for every registered release type.

        Also reads the dicts the former single ``Release`` class wrote (every field present,
        ``kind`` "gaussian" or "two_point"; an exact release was a Gaussian with zero noise and
        sensitivity 1 and loads as that Gaussian — the same non-private event).
        """
        kind = data.get("kind", "gaussian")
        cls = _KINDS.get(kind)
        if cls is None:
            raise ConfigError(f"`kind` must be one of {list(_KINDS)}. Found {kind!r}.")
        ids = data.get("client_ids")
        client_ids = None if ids is None else tuple(int(c) for c in ids)
        return cls.from_fields(data, client_ids, bool(data.get("amplifiable", False)))

