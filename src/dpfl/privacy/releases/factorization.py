"""Matrix-factorization noise (banded MF, BLT, and the identity baseline): one participation's
share of a Gaussian mechanism whose noise is correlated across rounds.

The mechanism releases C·x + z, z ~ N(0, σ²C_clip² I) per coordinate, x the rounds' clipped sums
(:mod:`dpfl.privacy.mechanisms.correlated`; banded: Choquette-Choo, Ganesh, McKenna, McMahan,
Rush, Thakurta, Xu, "(Amplified) Banded Matrix Factorization: A unified approach to private
training", NeurIPS 2023, arXiv 2306.08153; BLT: Dvijotham, McMahan, Pillutla, Steinke, Thakurta,
arXiv 2404.16706). A client that takes part in rounds s₁ < … < s_j moves it by Σ_i C[:, s_i]·g_i
with ‖g_i‖ <= C_clip: an L2 sensitivity of at most C_clip·sqrt(Σ_{i,i'} |G_{s_i s_i'}|), G = CᵀC
(Denisov, McMahan, Rush, Smith, Thakurta 2022, Thm 2.1, for adaptively chosen x: the release is as
private as the non-adaptive Gaussian mechanism with that sensitivity). The Gaussian mechanism's
RDP and PLD compose by adding squared sensitivities, so the run's mechanism is exactly the
composition of one Gaussian per participation whose *squared* sensitivity is the participation's
increment G_tt + 2·Σ_{s<t} |G_st| (:meth:`~dpfl.privacy.mechanisms.correlated.base.Strategy.sensitivity_increment`):
:class:`FactorizationRelease` is that Gaussian, priced by dp-accounting (RDP and PLD).

**Amplified banded MF** (Choquette-Choo et al. 2023, §4): under cyclic Poisson sampling (b fixed
groups, round t Poisson-samples group t mod b at rate q) and a b-banded C, the columns of one
group's rounds are orthogonal, and the mechanism is, for each client, a composition of
Poisson-sampled Gaussians, one per round of its group, with sensitivity ‖C[:, t]‖·C_clip: a
release with ``sample_rate`` q < 1 names the whole group and is charged to every member, sampled
or not (:meth:`samples_named_clients`).

**Relation**: add/remove of one client's updates with the participation schedule fixed (zero-out):
the schedule of the other clients never depends on the client's data.

This module imports nothing from dpfl except :mod:`dpfl.errors`, the accounting events and the
release base.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting as dpa
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.events import gaussian_event, noise_multiplier
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer

__all__ = ["FactorizationRelease"]

STRATEGIES = ("identity", "banded", "blt")


@dataclass(frozen=True)
class FactorizationRelease(Release):
    """One participation (per named client) in a matrix-factorization mechanism.

    Attributes:
        strategy: "identity" (independent noise each round), "banded" or "blt".
        noise_std: σ·C_clip, the std of z per coordinate.
        sensitivity: C_clip·sqrt(increment): this participation's share of the client's L2
            sensitivity (see the module docstring).
        sample_rate: q < 1 under cyclic Poisson (the named clients are the round's group, each
            in the sum with probability q); 1 otherwise (the named clients took part).
    """

    kind: ClassVar[str] = "matrix_factorization"
    observer: Observer
    strategy: str
    noise_std: float
    sensitivity: float
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False
    sample_rate: float = 1.0

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> FactorizationRelease:
        return cls(data["observer"], str(data["strategy"]), float(data["noise_std"]), float(data["sensitivity"]),
                   client_ids, False, float(data.get("sample_rate", 1.0)))

    def __post_init__(self) -> None:
        checked_observer(self.observer)
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"`strategy` must be one of {list(STRATEGIES)}. Found {self.strategy!r}.")
        if self.client_ids is None:
            raise ConfigError("a matrix-factorization release names its clients (the participants, or the "
                              "round's group under cyclic Poisson).")
        if self.amplifiable:
            raise ConfigError("a matrix-factorization release is never a broadcast amplified by the population's "
                              "sample (cyclic Poisson names the group and carries its own sampling).")
        q = self.sample_rate
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 < float(q) <= 1.0:
            raise ConfigError(f"`sample_rate` must be in (0, 1]. Found {q!r}.")
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))
        self.event()  # validates the numbers

    @property
    def noise_multiplier(self) -> float:
        """noise std / sensitivity (inf when the participation adds nothing)."""
        return noise_multiplier(self.noise_std, self.sensitivity)

    def event(self) -> dpe.DpEvent:
        g = gaussian_event(self.noise_std, self.sensitivity)
        if self.sample_rate < 1.0 and not isinstance(g, dpa.NoOpDpEvent):
            return dpa.PoissonSampledDpEvent(float(self.sample_rate), g)
        return g

    def samples_named_clients(self) -> bool:
        return self.sample_rate < 1.0

    def check_ledger(self, relation: str, sampling_kind: str) -> None:
        if relation != "add_remove":
            raise PrivacyPreconditionError(f"a matrix-factorization release is priced under add/remove with a fixed "
                                           f"schedule (zero-out); this ledger is {relation}.")
        if self.sample_rate < 1.0 and sampling_kind != "cyclic_poisson":
            raise PrivacyPreconditionError(
                f"an amplified matrix-factorization release (sample rate {self.sample_rate:g}) needs the "
                f"cyclic_poisson schema; this ledger's sampling is {sampling_kind!r}.")
        if self.sample_rate == 1.0 and sampling_kind not in ("min_separation", "availability", "cyclic_poisson",
                                                             "all"):
            raise PrivacyPreconditionError(
                f"a matrix-factorization release is priced per participant under a participation schema; this "
                f"ledger's sampling {sampling_kind!r} would have the broadcast amplified instead.")

    def to_dict(self) -> dict[str, Any]:
        return {"observer": self.observer, "kind": self.kind, "strategy": self.strategy,
                "noise_std": self.noise_std, "sensitivity": self.sensitivity,
                "client_ids": list(self.client_ids or ()), "amplifiable": False,
                "sample_rate": self.sample_rate}
