"""Two-point releases: 001's per-coordinate ε-LDP reports (randomized response per coordinate)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import two_point_event
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer


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

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> TwoPointRelease:
        if data.get("epsilon") is None:
            raise ConfigError("a two-point release needs its per-coordinate `epsilon`.")
        return cls(data["observer"], float(data["epsilon"]), int(data.get("num_coordinates", 1)), client_ids,
                   amplifiable)

    def __post_init__(self) -> None:
        checked_observer(self.observer)
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))
        self.event()  # validates the numbers

    def upload_norm_limit(self, num_params: int) -> float | None:
        """A randomized report's norm is not the clipped upload's: no limit."""
        return math.inf

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
