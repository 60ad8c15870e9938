"""Sampled Gaussian releases: a client's local DP-SGD steps (Poisson-subsampled Gaussians per record)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting as dpa
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer


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

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> SampledGaussianRelease:
        if client_ids is None:
            raise ConfigError("a sampled Gaussian release names its clients; found `client_ids: null`.")
        return cls(data["observer"], float(data["noise_multiplier"]), float(data["sample_rate"]), int(data["count"]),
                   client_ids)

    def check_ledger(self, relation: str, sampling_kind: str) -> None:
        if relation != "add_remove":
            raise PrivacyPreconditionError(
                f"a Poisson-sampled (DP-SGD) release is priced under add/remove-one; this ledger's "
                f"relation is {relation!r}. Build the ledger with relation 'add_remove'."
            )

    def __post_init__(self) -> None:
        checked_observer(self.observer)
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
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))

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
