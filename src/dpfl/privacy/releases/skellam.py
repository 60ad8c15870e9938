"""The Skellam mechanism: the distributed discrete noise of secure aggregation — its release, its
event and its RDP, in one module (the example of a mechanism dpfl prices itself).

Under secure aggregation the clients upload integer vectors modulo 2^b and the server learns only
their sum. Each client adds a share of symmetric Skellam noise Sk(μ_k) = Poisson(μ_k/2) −
Poisson(μ_k/2) per coordinate (variance μ_k); sums of independent Skellams are Skellam, so the
sum carries exactly Sk(Σ_k μ_k): a *central* mechanism of variance μ = Σ_k μ_k on an
integer-valued query, priced here in Rényi DP.

* **Unsampled** — Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private
  Federated Learning", NeurIPS 2021, Theorem 3.5 (multi-dimensional Skellam; μ is the variance
  per coordinate): for integer α > 1 and an integer query with L2 sensitivity Δ2 and L1
  sensitivity Δ1,

      ε(α) ≤ α Δ2² / (2μ) + min( ((2α − 1) Δ2² + 6 Δ1) / (4μ²),  3 Δ1 / (2μ) ).

  Sources print the second term with (2α − 1) or with 2α; (2α − 1) is the smaller, so it was
  checked numerically before use: ``tests/unit/privacy/test_skellam_accounting.py`` computes the
  exact Rényi divergence between Sk(μ) and its integer shifts (scipy's Bessel functions) in both
  directions and finds it below this bound at every case tried. RDP is non-decreasing in α, so a
  fractional order α is priced at ⌈α⌉ (valid).
* **Poisson-sampled** (a secret sample: hidden participation, or the public's view of the
  broadcast) — the binomial expansion of Mironov, Talwar, Zhang 2019 (§3.3) with the Skellam
  bound plugged in for each D_k, *without* the factor 3 of Zhu & Wang's general bound for any
  mechanism ("Poisson Subsampled Rényi Differential Privacy", ICML 2019, Theorem 5 as the texts
  citing the PMLR version number it; :func:`subsampled_rdp` below, kept for reference and tests):

      ε'(α) ≤ 1/(α−1) log[ (1−q)^{α−1}(αq − q + 1) + Σ_{k=2}^{α} C(α,k) q^k (1−q)^{α−k} e^{(k−1) ε(k)} ],

  taken as the minimum with the unsampled ε(α), at integer α ≥ 2
  (:func:`dpfl.privacy.accounting.subsampled_rdp.binomial_subsampled_rdp_curve`). It is valid
  because the sum's noise is symmetric about 0, has the same law in both neighbours and full
  support on the lattice: a reflection swaps the two neighbours' laws, so the other direction of
  the divergence is never the larger (``docs/proofs/skellam-subsampling.md``, Theorem 1 and
  Lemma 2; checked by brute force on the integer lattice in
  ``tests/unit/privacy/test_subsampled_rdp.py``). On the main job (z = 1.5, q = 0.2, T = 100)
  it certifies 8.4676 where the general bound gave 11.2113.
* **PLD, through Gaussian domination** — the unit-shift pair (Z, Z+1) of Z ~ Sk(μ) is η₁-GDP
  (Dong, Roth, Su 2019, arXiv 1905.02383) with a certified η₁ slightly above 1/√μ
  (:func:`dpfl.privacy.releases.skellam_gdp.certified_unit_eta`); group privacy and the product
  of independent coordinates make any integer shift of L2 norm at most Δ2 (η₁Δ2)-GDP, so the
  Gaussian pair of noise multiplier 1/(η₁Δ2) dominates the Skellam pair, and its Poisson-sampled
  form dominates the sampled sum (Zhu, Dong, Wang 2022, arXiv 2106.08567).
  :func:`skellam_pld_dominating` hands that Gaussian event to dp-accounting's PLD accountant
  (``docs/proofs/skellam-gdp.md``). The certificate is the smaller of the RDP and PLD figures;
  where η₁ is not certified for a μ, the PLD is not given and RDP stands.

**Neighbouring relation**: add/remove of one client's update, its noise share present in both
neighbours ("zero-out": the client's coin, or its absence from the cohort, decides only whether
its update is in the sum; the sum's noise law is Sk(μ) either way — every client's share under
hidden participation, the server's top-up to μ under visible participation). A client absent
from the population altogether would change the noise law too; that relation is not the one
certified, and the certificate says so. A lattice release of one client's own vector
(:mod:`dpfl.privacy.mechanisms.lattice`, UDP's and NbAFL's uploads) is also priced under
**replace-one**: unsampled, the Skellam mechanism's divergences depend only on the shift between
the two neighbours' integer queries, which its (Δ2, Δ1) bound under that relation — so an
unsampled Skellam event is accepted under replace-one (a release naming its clients, never
amplified); a Poisson-sampled one, and an amplifiable release, only under add/remove.

:class:`SkellamRelease` is what an observer of the sum saw (serialized under ``kind: skellam``);
its :class:`SkellamDpEvent` is a ``dp_accounting`` event (attrs, frozen, hashable) so that the
ledger composes it like any other. dp-accounting itself has no Skellam accountant, so this module
registers :func:`skellam_rdp_vector` and :func:`skellam_pld_dominating` with
:mod:`dpfl.privacy.accounting.registry`, which is what :mod:`dpfl.privacy.accounting.certify` asks
for the event. The integer pipeline that produces the query (scale, rotation, conditional rounding,
modular sum) is :mod:`dpfl.privacy.mechanisms.integer`; its sensitivity bounds are stated there.

This module imports nothing from dpfl except :mod:`dpfl.errors`, the accounting registry, the
release base and :mod:`.skellam_gdp`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import attr
import dp_accounting as dpa
import numpy as np
from dp_accounting import dp_event as dpe
from scipy.special import gammaln, logsumexp

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.registry import EventAccounting, register_event
from dpfl.privacy.accounting.subsampled_rdp import binomial_subsampled_rdp_curve
from dpfl.privacy.releases.base import Observer, Release, checked_ids, checked_observer
from dpfl.privacy.releases.skellam_gdp import certified_unit_eta

__all__ = [
    "LatticeDpEvent",
    "SkellamDpEvent",
    "SkellamRelease",
    "is_skellam",
    "skellam_rdp",
    "skellam_pld_dominating",
    "skellam_rdp_vector",
    "skellam_tail_log_probability",
    "subsampled_rdp",
]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SkellamDpEvent(dpe.DpEvent):
    """The Skellam mechanism on an integer query: Sk(variance) noise per coordinate.

    Attributes:
        variance: μ, the variance per coordinate of the noise in the released sum (0: no noise,
            ε = ∞).
        l2_sensitivity: Δ2, the L2 norm of the largest change of the integer query when one unit
            is added or removed (> 0).
        l1_sensitivity: Δ1, its L1 norm (>= Δ2; for an integer vector Δ1 <= Δ2²).
    """

    variance: float
    l2_sensitivity: float
    l1_sensitivity: float

    def __attrs_post_init__(self) -> None:
        for name in ("variance", "l2_sensitivity", "l1_sensitivity"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"Skellam `{name}` must be a finite number >= 0. Found {v!r}.")
        if self.l2_sensitivity <= 0:
            raise ConfigError(f"Skellam `l2_sensitivity` must be > 0. Found {self.l2_sensitivity!r}.")
        if self.l1_sensitivity < self.l2_sensitivity * (1 - 1e-12):
            raise ConfigError(f"Skellam `l1_sensitivity` ({self.l1_sensitivity}) cannot be below the L2 "
                              f"sensitivity ({self.l2_sensitivity}).")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class LatticeDpEvent(SkellamDpEvent):
    """The Skellam mechanism of one lattice release (:mod:`dpfl.privacy.mechanisms.lattice`): priced
    exactly as :class:`SkellamDpEvent` (the same RDP and PLD routes), registered apart so that its
    certificate states its own neighbouring relation (a client's rounded vector, not a secure sum)."""


def is_skellam(event: dpe.DpEvent) -> bool:
    """A Skellam event, possibly inside a sampling wrapper."""
    while isinstance(event, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent,
                             dpa.SampledWithReplacementDpEvent)):
        event = event.event
    return isinstance(event, SkellamDpEvent)


def skellam_rdp(alpha: int, event: SkellamDpEvent) -> float:
    """ε(α) of the unsampled Skellam mechanism at integer α >= 2 (AKL21 Thm 3.5; module docstring)."""
    if alpha < 2 or int(alpha) != alpha:
        raise ConfigError(f"the Skellam RDP bound needs an integer order >= 2. Found {alpha!r}.")
    mu, d2, d1 = event.variance, event.l2_sensitivity, event.l1_sensitivity
    if mu == 0:
        return math.inf
    a = float(alpha)
    second = min(((2 * a - 1) * d2 * d2 + 6 * d1) / (4 * mu * mu), 3 * d1 / (2 * mu))
    return a * d2 * d2 / (2 * mu) + second


def _log_binom(n: int, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)  # type: ignore[no-any-return]


def subsampled_rdp(alpha: int, q: float, base: Sequence[float]) -> float:
    """Zhu & Wang 2019's general bound (Theorem 5 of the PMLR version, with the factor 3): RDP at
    integer ``alpha`` of Poisson(q)-subsampling *any* mechanism whose RDP at orders 2, 3, …, alpha
    is ``base`` (``base[l-2]`` = ε(l)), min with the unsampled ε(α). The Skellam sum is priced by
    the tighter :func:`dpfl.privacy.accounting.subsampled_rdp.binomial_subsampled_rdp_curve`; this
    stays as the reference it is compared with.

    >>> round(subsampled_rdp(2, 1.0, [0.5]), 6)
    0.5
    """
    if alpha < 2 or int(alpha) != alpha:
        raise ConfigError(f"the subsampled RDP bound needs an integer order >= 2. Found {alpha!r}.")
    if not 0 < q <= 1:
        raise ConfigError(f"the sampling probability must be in (0, 1]. Found {q!r}.")
    eps = np.asarray(base[: alpha - 1], dtype=float)
    if eps.shape[0] < alpha - 1:
        raise ConfigError(f"need the base RDP at orders 2..{alpha}; got {eps.shape[0]} values.")
    unsampled = float(eps[alpha - 2])
    if q == 1.0 or not np.all(np.isfinite(eps)):
        return unsampled if q == 1.0 else math.inf  # an infinite base term keeps the bound infinite
    log1q = math.log1p(-q)
    terms = [(alpha - 1) * log1q + math.log(alpha * q - q + 1),
             float(_log_binom(alpha, np.array(2.0))) + 2 * math.log(q) + (alpha - 2) * log1q + float(eps[0])]
    if alpha >= 3:
        ell = np.arange(3, alpha + 1, dtype=float)
        terms += list(math.log(3.0) + _log_binom(alpha, ell) + ell * math.log(q) + (alpha - ell) * log1q
                      + (ell - 1) * eps[1:alpha - 1])
    bound = float(logsumexp(terms)) / (alpha - 1)
    return min(bound, unsampled)


def _integer_orders(orders: Sequence[float]) -> list[int]:
    """⌈α⌉ of every order (at least 2): RDP is non-decreasing in α, so ε(α) <= ε(⌈α⌉)."""
    return [max(2, int(math.ceil(o - 1e-12))) for o in orders]


def skellam_rdp_vector(event: dpe.DpEvent, relation: str, orders: Sequence[float]) -> np.ndarray:
    """RDP curve at ``orders`` of a Skellam event or a Poisson-sampled one (module docstring).

    Raises:
        PrivacyPreconditionError: a relation other than add/remove, or a sampling scheme other
            than Poisson around the Skellam event.
    """
    if relation != "add_remove" and not (relation == "replace_one" and isinstance(event, SkellamDpEvent)):
        raise PrivacyPreconditionError(
            f"the Skellam mechanism is priced under add/remove one client (unsampled also under replace-one); this "
            f"ledger's relation is {relation!r} for {event}.")
    q = 1.0
    inner = event
    if isinstance(inner, dpa.PoissonSampledDpEvent):
        q, inner = float(inner.sampling_probability), inner.event
    if not isinstance(inner, SkellamDpEvent):
        raise PrivacyPreconditionError(
            f"a Skellam release can only be Poisson-sampled (the secret coin of hidden participation); found {event}.")
    ints = _integer_orders(orders)
    top = max(ints)
    if inner.variance == 0:
        return np.full(len(ints), np.inf)
    base = [skellam_rdp(a, inner) for a in range(2, top + 1)]
    if q >= 1.0:
        return np.array([base[a - 2] for a in ints])
    if q == 0.0:
        return np.zeros(len(ints))
    return binomial_subsampled_rdp_curve(q, base, ints)


def skellam_tail_log_probability(variance: float, t: float) -> float:
    """log of a Chernoff bound on P(|X| >= t) for X ~ Sk(variance) (two-sided).

    The moment generating function of Sk(μ) is exp(μ(cosh λ − 1)); at λ = asinh(t/μ) the bound is
    P(X >= t) <= exp(μ(sqrt(1 + (t/μ)²) − 1) − t·asinh(t/μ)), doubled for both tails.

    >>> skellam_tail_log_probability(1.0, 0.0)
    0.0
    """
    if t <= 0:
        return 0.0
    if variance <= 0:
        return -math.inf
    r = t / variance
    # μ(sqrt(1 + r²) − 1) written as μr²/(sqrt(1 + r²) + 1): no cancellation when r is small
    return min(0.0, math.log(2.0) + variance * r * r / (math.sqrt(1.0 + r * r) + 1.0) - t * math.asinh(r))


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
        lattice: a floating-point-safe Gaussian release (:mod:`dpfl.privacy.mechanisms.lattice`)
            rather than a secure sum: the same pricing, its own relation note (:class:`LatticeDpEvent`).
        scale: (lattice) integer units per unit of the uploaded values — γ when an upload travels
            as integer/γ, 1 when the integers travel as they are — for :meth:`upload_norm_limit`.
    """

    kind: ClassVar[str] = "skellam"
    observer: Observer
    variance: float
    l2_sensitivity: float
    l1_sensitivity: float
    client_ids: tuple[int, ...] | None = None
    amplifiable: bool = False
    lattice: bool = False
    scale: float = 1.0

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], client_ids: tuple[int, ...] | None,
                    amplifiable: bool) -> SkellamRelease:
        return cls(data["observer"], float(data["variance"]), float(data["l2_sensitivity"]),
                   float(data["l1_sensitivity"]), client_ids, amplifiable, bool(data.get("lattice", False)),
                   float(data.get("scale", 1.0)))

    def check_ledger(self, relation: str, sampling_kind: str) -> None:
        named = self.client_ids is not None and not self.amplifiable
        if relation != "add_remove" and not (relation == "replace_one" and named):
            raise PrivacyPreconditionError(
                f"a Skellam release is priced under add/remove one client (a release naming its clients, "
                f"unamplified, also under replace-one); this ledger's relation is {relation!r}.")
        if self.amplifiable and self.client_ids is None and sampling_kind not in ("poisson", "all"):
            raise PrivacyPreconditionError(
                "a Skellam release hidden in a secret sample is amplified only by Poisson sampling (each "
                f"client's own coin); this run samples {sampling_kind!r}.")

    def hidden_from_server(self) -> bool:
        """An amplifiable sum is hidden participation: the server too sees it only inside the secret
        Poisson sample of every client's own coin."""
        return self.amplifiable

    def __post_init__(self) -> None:
        checked_observer(self.observer)
        object.__setattr__(self, "client_ids", checked_ids(self.client_ids))
        self.event()  # validates the numbers

    def event(self) -> dpe.DpEvent:
        if self.variance == 0:
            return dpa.NonPrivateDpEvent()
        cls = LatticeDpEvent if self.lattice else SkellamDpEvent
        return cls(float(self.variance), float(self.l2_sensitivity), float(self.l1_sensitivity))

    def to_dict(self) -> dict[str, Any]:
        out = {
            "observer": self.observer,
            "kind": self.kind,
            "variance": self.variance,
            "l2_sensitivity": self.l2_sensitivity,
            "l1_sensitivity": self.l1_sensitivity,
            "client_ids": None if self.client_ids is None else list(self.client_ids),
            "amplifiable": self.amplifiable,
        }
        if self.lattice:  # absent for a secure sum: stored ledgers stay as they were
            out["lattice"] = True
            out["scale"] = self.scale
        return out

    def upload_norm_limit(self, num_params: int) -> float | None:
        """(A lattice upload) the largest L2 norm it can have, in the uploaded values' units: its
        rounded vector's bound Δ2 plus what the noise can add, in the Gaussian form of
        :func:`dpfl.privacy.calibration.gaussian.upload_norm_limit` with the noise std √μ taken 10%
        larger — a check against forged uploads, not part of the certificate (the standardized
        Skellam is within O(1/√μ) of the normal). None for a secure sum (the server sees residues)."""
        if not self.lattice or self.observer != "server":
            return None
        from dpfl.privacy.calibration.gaussian import upload_norm_limit

        return upload_norm_limit(self.l2_sensitivity / self.scale, 1.1 * math.sqrt(self.variance) / self.scale,
                                 num_params)


def skellam_pld_dominating(event: dpe.DpEvent, relation: str) -> tuple[dpe.DpEvent | None, str]:
    """The Gaussian event whose PLD dominates a Skellam event (bare or Poisson-sampled), or None.

    The unit-shift pair of Sk(μ) is η-GDP with the certified η of
    :func:`dpfl.privacy.releases.skellam_gdp.certified_unit_eta`; an integer shift of L2 norm at
    most Δ2 is then (η·Δ2)-GDP, so the pair is dominated by the Gaussian pair of noise multiplier
    1/(η·Δ2), and a Poisson-sampled Skellam sum by the Poisson-sampled Gaussian pair, in both
    directions (``docs/proofs/skellam-gdp.md``). Under add/remove (zero-out), and unsampled also under
    replace-one, as the RDP route.
    """
    if relation != "add_remove" and not (relation == "replace_one" and isinstance(event, SkellamDpEvent)):
        return None, (f"PLD: the Skellam mechanism is priced under add/remove one client (unsampled also under "
                      f"replace-one); this ledger's relation is {relation!r}.")
    q: float | None = None
    inner = event
    if isinstance(inner, dpa.PoissonSampledDpEvent):
        q, inner = float(inner.sampling_probability), inner.event
    if not isinstance(inner, SkellamDpEvent):
        return None, f"PLD: a Skellam release can only be Poisson-sampled; found {event}."
    cert = certified_unit_eta(inner.variance)
    if cert is None:
        return None, (f"PLD: no certified Gaussian domination for a Skellam variance of {inner.variance:.6g} "
                      "(outside the range docs/proofs/skellam-gdp.md certifies); certified by RDP.")
    gaussian = dpa.GaussianDpEvent(1.0 / (cert.eta * inner.l2_sensitivity))
    dominating: dpe.DpEvent = gaussian if q is None else dpa.PoissonSampledDpEvent(q, gaussian)
    # one note for every Skellam sum of a ledger (variances differ from round to round); the factor
    # η₁·√μ of each is certified_unit_eta(μ).ratio
    return dominating, ("PLD: Skellam sums priced as the Gaussian pairs that dominate them: multiplier 1/(η₁Δ2), η₁ "
                        "the certified unit-shift GDP parameter of each sum's variance (docs/proofs/skellam-gdp.md)")


_RDP_NOTE = ("RDP: Skellam releases priced by Agarwal, Kairouz, Liu 2021 (Thm 3.5), Poisson-sampled ones by "
             "the binomial expansion without the general bound's factor 3 (docs/proofs/skellam-subsampling.md)")
_PLD_NOTE = "PLD: not available for the Skellam mechanism (dp-accounting has no Skellam PLD); certified by RDP."

register_event(SkellamDpEvent, EventAccounting(
    rdp=skellam_rdp_vector,
    rdp_note=("RDP: Skellam releases priced by Agarwal, Kairouz, Liu 2021 (Thm 3.5), Poisson-sampled ones by "
              "the binomial expansion without the general bound's factor 3 (docs/proofs/skellam-subsampling.md)"),
    relation_note=("secure sum (Skellam): neighbours differ in one client's update, its noise share present in "
                   "both (zero-out)"),
    pld_note="PLD: not available for the Skellam mechanism (dp-accounting has no Skellam PLD); certified by RDP.",
    pld_dominating=skellam_pld_dominating,
))

register_event(LatticeDpEvent, EventAccounting(
    rdp=skellam_rdp_vector,
    rdp_note=_RDP_NOTE,
    relation_note=("lattice release (Skellam): neighbours' rounded integer vectors differ by at most the release's "
                   "(Δ2, Δ1), the noise law the same in both"),
    pld_note=_PLD_NOTE,
    pld_dominating=skellam_pld_dominating,
))
