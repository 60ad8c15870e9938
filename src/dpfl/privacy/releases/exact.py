"""Exact releases: a function of the named clients' data published without noise (ε = ∞ for them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting as dpa
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer


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

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> ExactRelease:
        if client_ids is None:
            raise ConfigError("an exact release names its clients; found `client_ids: null`.")
        return cls(data["observer"], client_ids)

    def __post_init__(self) -> None:
        checked_observer(self.observer)
        if self.client_ids is None:
            raise ConfigError("an exact release names the clients whose data it publishes; found None.")
        if self.amplifiable:
            raise ConfigError("an exact release cannot be amplified by sampling (it names its clients).")
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))

    def event(self) -> dpe.DpEvent:
        return dpa.NonPrivateDpEvent()

    def to_dict(self) -> dict[str, Any]:
        return {
            "observer": self.observer,
            "kind": self.kind,
            "client_ids": list(self.client_ids or ()),
            "amplifiable": False,
        }
