"""Gaussian releases: a vector with Gaussian noise of a given std against an enforced L2 sensitivity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dp_accounting import dp_event as dpe

from dpfl.privacy.accounting.events import gaussian_event, noise_multiplier
from dpfl.privacy.calibration.gaussian import upload_norm_limit
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer


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

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> GaussianRelease:
        return cls(data["observer"], float(data.get("noise_std", 0.0)), float(data.get("sensitivity", 0.0)),
                   client_ids, amplifiable)

    def __post_init__(self) -> None:
        checked_observer(self.observer)
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))
        self.event()  # validates the numbers

    @property
    def noise_multiplier(self) -> float:
        """noise std / sensitivity (inf when nothing about the unit is released)."""
        return noise_multiplier(self.noise_std, self.sensitivity)

    def upload_norm_limit(self, num_params: int) -> float | None:
        """The enforced sensitivity plus what the noise can add
        (:func:`dpfl.privacy.calibration.gaussian.upload_norm_limit`)."""
        return upload_norm_limit(self.sensitivity, self.noise_std, num_params)

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
