"""LDP-FL (001 Algorithms 1–3): two-point randomized local models, split & shuffle, mean by id.

Each round the sampled clients train locally from the global model (the run's ``local:``
section; 001 uses lr 0.03 on MNIST / Fashion-MNIST, 0.015 on CIFAR-10). Then, per client:

1. **DataPerturbation** (001 Algorithm 2, eq. 2): every weight of the trained local *model* (not
   the update) is clipped into its range [c − r, c + r] and replaced by c ± r·(e^ε+1)/(e^ε−1)
   with the probabilities of eq. 2 — one vectorized call per client, generator
   ``(round, client, "randomizer")`` (:func:`dpfl.privacy.mechanisms.two_point_randomize_per_client`).
2. **SplitShuffle** (Algorithm 3): the weights become (id, value) tuples; a shuffler mixes every
   client's tuples and hands the server, per id, the multiset of values
   (:class:`dpfl.server.shuffle.IdMultisets` — no client ids, no order).
3. **CloudUpdate** (Algorithm 1, line 8): the new global model is the mean of each id's multiset
   (:func:`dpfl.server.shuffle.mean_by_id`), i.e. the unbiased estimate of the average local
   model (Lemma 2).

Ranges (option ``range``):

* ``fixed`` — one (c, r) for every weight (001 §5: (0, 0.075) MNIST, (0, 0.015) Fashion-MNIST).
  Data-independent: no privacy cost.
* ``global-model`` — per layer (parameter tensor) c = 0 and r = ``range_scale`` × (max − min)
  of that layer in the *broadcast global model* of the round (001 §5's CIFAR-10 rule, applied to
  the public model). The broadcast model is already public (a post-processing of earlier
  releases), so agreeing on these ranges costs no privacy. dpfl's default adaptive mode.
* ``client-minmax`` — per layer c = 0 and r = ``range_scale`` × (max − min) over the cohort's
  *trained local* models: the paper's encrypted min–max (§3.3 "Adaptive Range Setting"). The
  agreed bounds are a deterministic function of the clients' data, known to every client and
  the server (and, through the ranges, to the public): not DP at all. The ledger records them
  as a non-private release against both observers, so the run's **certified ε is ∞**; the
  paper's claimed ε (which ignores this release) is reported unchanged next to it.
* ``private-minmax`` — dpfl's differentially private substitute for the encrypted min–max
  (:mod:`dpfl.privacy.mechanisms.log_range`). Each cohort client k reports, per layer l of
  ``self.layout`` (L parameter tensors), v_kl = log2(max |w| over the layer's finite weights),
  clipped into [log2 ``min_radius``, log2 ``max_radius``] (defaults 1e-4 and 10; a layer with no
  finite non-zero weight reports log2 ``min_radius``), plus N(0, σ²) from its own stream
  (round, client, "range"), σ = ``range_noise_multiplier`` × Δ with Δ = log2(max_radius /
  min_radius)·sqrt(L) the L2 sensitivity of the clipped L-vector under replace-one (any input
  against any other: local DP). The agreed radius is r_l = ``range_scale`` × 2^(mean_k report_kl)
  clamped to [min_radius, max_radius], c = 0: a DP estimate of a *typical* client's max |w| (a
  geometric mean), not the paper's exact cohort max — weights beyond r_l are clipped, as in
  every mode. Its cost is accounted (see Privacy).

In ``global-model`` and ``client-minmax`` r is raised to max|w| when (max − min) would not cover
the layer around c = 0 (only possible when a layer's weights share a sign) and floored at
``min_radius`` (default 1e-6).

Split at the wire (:class:`dpfl.algorithms.base.Algorithm`): ``client_step`` is step 1 on each
client; ``aggregate`` is steps 2–3 — it averages a shuffler process's :class:`IdMultisets`
(``Uploads.shuffled``) as is, or mixes the arrived rows with the in-process trusted shuffler
first; only :meth:`LdpFl.aggregate_by_id` (the server) touches the result. ``fixed`` and
``global-model`` ranges are computable on each client. ``client-minmax`` and ``private-minmax``
are not splittable: they need every cohort member's trained model (or its range report) at once,
before any client randomizes, and dpfl has no such two-phase exchange between real clients;
taking the ranges of an earlier round instead would be another algorithm. Such a run has
``splits_rounds = False`` (the Flower runner refuses it) and ``client_step`` raises for a partial
cohort; in simulation it runs with the whole cohort stacked.

Privacy. Each weight is ε-LDP (Theorem 1). The ledger records, per round, each participant's
upload as d two-point reports (``Release.two_point``, d = number of weights) against both
observers — the server and the public (which sees only the per-id averages, a post-processing) —
as ``dpfl account ldp-fl`` does without ``--trusted-shuffler``: the certified ε composes d·T
randomized responses (pure bound T·d·ε', RDP tighter at δ > 0). The range agreement adds, per
participant and round, against both observers:

* ``fixed``, ``global-model`` — nothing (data-independent, or a function of the public model);
* ``client-minmax`` — ``Release.exact(observer, ids)``: the ledger's non-private event,
  certified ε = ∞;
* ``private-minmax`` — ``Release.gaussian(observer, σ, Δ)``, the Gaussian mechanism with
  multiplier ``range_noise_multiplier``, composed by RDP with the two-point reports. The public
  sees only a post-processing (the agreed radii, through the broadcast model): recording the
  report against it too is an upper bound.

The per-round metrics ``epsilon_*_unshuffled`` / ``_shuffled`` (:func:`ldp_fl_privacy`) state
the same composition. The paper's claim (ε per weight, for the whole run) ignores the range
agreement and assumes split & shuffle make a client's weights unlinkable; 001's local random
delays do not achieve that, so the claim is reported next to the certificate, never instead.
With a *trusted* shuffler the Feldman–McMillan–Talwar amplification
(:func:`dpfl.privacy.accounting.shuffle.shuffled_two_point_epsilon`) gives a smaller ε per
coordinate where its condition ε ≤ ln(n / (16 ln(2/δ'))) holds; it is reported per round in the
metrics (``epsilon_shuffled_*``) with its assumptions, and as "not applicable" otherwise (at
n = 100 or 200 clients it never applies).

References:
    001_8ad797a147f2b989.txt, eq. 2, Algorithms 1–3, Theorem 1, Lemma 2, §3.3 (the role of the
    ranges and their encrypted min–max agreement, for which private-minmax's Gaussian mechanism
    is dpfl's accounted substitute), §4.2, §5.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from dpfl.algorithms.base import RoundOutput, Uploads
from dpfl.algorithms.options import LdpFlOptions, parse_options
from dpfl.algorithms.private import Calibration, PrivateAlgorithm, RoundPlan
from dpfl.client.context import LocalProblem, LocalResult, RoundInfo
from dpfl.client.layout import ParamLayout
from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import certify
from dpfl.privacy.accounting.claimed import CLAIM_NOTIONS, ldp_fl_claimed_epsilon
from dpfl.privacy.accounting.events import compose, gaussian_rounds_event, two_point_event
from dpfl.privacy.accounting.shuffle import max_local_epsilon, shuffled_two_point_epsilon
from dpfl.privacy.mechanisms import (
    agree_log_ranges,
    log_range_reports,
    log_range_sensitivity,
    two_point_randomize_per_client,
    two_point_realized_epsilon,
    two_point_values,
)
from dpfl.privacy.releases import Release
from dpfl.server.shuffle import IdMultisets, Shuffler, mean_by_id

__all__ = ["LdpFl", "LdpFlOptions", "LdpFlPlan", "LdpFlPrivacy", "ldp_fl_plan", "ldp_fl_privacy"]

#: range modes that need every cohort member's trained model at once (not splittable)
CROSS_CLIENT_MODES = ("client-minmax", "private-minmax")
#: default floor of an adaptive radius: ``private-minmax`` needs a sensible one (its sensitivity
#: grows with log2(max_radius / min_radius)), the other adaptive modes keep their old default
DEFAULT_MIN_RADIUS = {"private-minmax": 1e-4}
DEFAULT_MIN_RADIUS_OTHER = 1e-6
DEFAULT_MAX_RADIUS = 10.0


# --------------------------------------------------------------------------- privacy statements


@dataclass(frozen=True)
class LdpFlPrivacy:
    """Certified ε of one client's LDP-FL uploads, without and with a trusted shuffler.

    Attributes:
        epsilon_per_weight: the paper's ε of eq. 2.
        epsilon_per_weight_realized: ε' <= ε the float64 coin realizes.
        rounds: rounds composed.
        unshuffled: certified ε at δ of ``rounds`` uploads of d two-point reports each (the
            tightest of RDP and pure composition; PLD is skipped at this many reports).
        unshuffled_method: which bound gave it.
        shuffled: ε at δ with a trusted per-id shuffler over ``num_reports`` clients
            (Feldman–McMillan–Talwar, composed over d·rounds releases), or None when the
            theorem's condition fails.
        shuffled_note: the bound's assumptions, or why it does not apply.
        range_noise_multiplier: noise multiplier z of the per-round range report composed in
            (``private-minmax``; 0 = the exact, un-noised bounds of ``client-minmax``, ε = ∞), or
            None when the ranges cost nothing.
    """

    epsilon_per_weight: float
    epsilon_per_weight_realized: float
    rounds: int
    unshuffled: float
    unshuffled_method: str
    shuffled: float | None
    shuffled_note: str
    range_noise_multiplier: float | None = None

    @property
    def with_shuffler(self) -> float:
        """The certified ε with a trusted shuffler: the amplified bound where it applies and is smaller."""
        if self.shuffled is None:
            return self.unshuffled
        return min(self.unshuffled, self.shuffled)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        return {
            "epsilon_per_weight": self.epsilon_per_weight,
            "epsilon_per_weight_realized": self.epsilon_per_weight_realized,
            "rounds": self.rounds,
            "unshuffled": self.unshuffled,
            "unshuffled_method": self.unshuffled_method,
            "shuffled": self.shuffled,
            "with_shuffler": self.with_shuffler,
            "shuffled_note": self.shuffled_note,
            "range_noise_multiplier": self.range_noise_multiplier,
        }


def ldp_fl_privacy(epsilon: float, num_weights: int, rounds: int, num_reports: int, delta: float,
                   range_noise_multiplier: float | None = None) -> LdpFlPrivacy:
    """Certified ε per client for ``rounds`` LDP-FL uploads, without and with a trusted shuffler.

    Without a trusted shuffler the observer links a client's d weights and rounds: the d·T
    two-point reports compose (001 §4.2's "T·d·ε" as the pure bound; RDP at δ can be tighter).
    With one, each (id, round) release is n shuffled ε-LDP reports; Feldman–McMillan–Talwar
    Thm 3.1 gives its (ε, δ') when ε <= ln(n / (16 ln(2/δ'))) — assumptions: a trusted shuffler
    that strips identity, timing and order; shuffling per id over the n reports of that id; one
    report per client per id per round (see :mod:`dpfl.privacy.accounting.shuffle`).

    A per-round range report (``range_noise_multiplier`` z: ``private-minmax``'s Gaussian log2
    range report, :mod:`dpfl.privacy.mechanisms.log_range`; z = 0: ``client-minmax``'s exact
    bounds) is composed into both statements: unshuffled, as T more Gaussian events in the same
    RDP composition (what the run's ledger computes); with the shuffler, which does not hide the
    range reports, by basic composition of the shuffled bound at δ/2 and the Gaussian reports
    at δ/2. z = 0 gives ε = ∞.

    Args:
        epsilon: per-weight ε of eq. 2.
        num_weights: d.
        rounds: T >= 1.
        num_reports: n, reports shuffled together per id (the cohort size).
        delta: δ of both statements.
        range_noise_multiplier: z of the per-round range report, or None (ranges cost nothing).

    Returns:
        the statements.

    References:
        001 eq. 2, Theorem 1, §3.3, §4.2; Feldman, McMillan, Talwar 2021, Thm 3.1.
    """
    weights = two_point_event(epsilon, num_weights, rounds)
    ranges = None if range_noise_multiplier is None else gaussian_rounds_event([range_noise_multiplier] * rounds)
    event = weights if ranges is None else compose([weights, ranges])
    cert = certify(event, delta, relation="replace_one", privacy_unit="client", observer="server", pld=False)
    shuffle_delta = delta if ranges is None else delta / 2.0
    shuffled: float | None
    try:
        sc = shuffled_two_point_epsilon(epsilon, num_reports, num_weights, rounds, shuffle_delta)
        shuffled = sc.epsilon
        note = (f"trusted shuffler per id over n = {num_reports} reports (Feldman-McMillan-Talwar Thm 3.1): "
                f"({sc.epsilon_per_release:.4g}, {sc.delta_per_release:.3g}) per id and round, "
                f"{sc.releases} releases by advanced composition")
        if ranges is not None:
            rc = certify(ranges, delta / 2.0, relation="replace_one", privacy_unit="client", observer="server")
            shuffled += rc.epsilon
            note += (f"; plus the {rounds} unshuffled range reports ({rc.epsilon:.4g} at delta/2, basic "
                     "composition)")
    except PrivacyPreconditionError:
        shuffled = None
        limit = max_local_epsilon(num_reports, shuffle_delta / (2.0 * num_weights * rounds))
        note = (f"shuffle amplification not applicable: Feldman-McMillan-Talwar needs epsilon <= "
                f"ln(n / (16 ln(2/delta'))) = {limit:.3g} for n = {num_reports}; the unshuffled bound stands")
    return LdpFlPrivacy(
        epsilon_per_weight=float(epsilon),
        epsilon_per_weight_realized=two_point_realized_epsilon(epsilon),
        rounds=int(rounds),
        unshuffled=cert.epsilon,
        unshuffled_method=cert.method,
        shuffled=shuffled,
        shuffled_note=note,
        range_noise_multiplier=None if range_noise_multiplier is None else float(range_noise_multiplier),
    )


# --------------------------------------------------------------------------- the algorithm


@dataclass(frozen=True)
class LdpFlCalibration(Calibration):
    """What LDP-FL's options fix: ε per weight (001 eq. 2) and the ε' <= ε the float64 coin
    realizes, d, the range mode and, for ``private-minmax``, the log-range report's z, Δ and σ
    (None before the model's layout is known, and for the other modes)."""

    epsilon_per_weight: float
    epsilon_per_weight_realized: float
    num_coordinates: int
    range: str
    range_noise_multiplier: float | None = None
    range_sensitivity: float | None = None
    range_noise_std: float | None = None


@dataclass(frozen=True)
class LdpFlPlan(RoundPlan):
    """Every privacy number of one LDP-FL round, read by the randomizer, the range agreement and
    the releases alike.

    Attributes:
        round_idx: the round.
        epsilon: ε per weight of the two-point randomizer (001 eq. 2).
        num_coordinates: d, weights per report.
        range_mode: how the range is agreed (``LdpFlOptions.range``).
        range_noise_std: ``private-minmax``: σ = z·Δ of each log2 range report, else None.
        range_sensitivity: ``private-minmax``: Δ = log2(max_radius / min_radius)·sqrt(L), else None.
    """

    round_idx: int
    epsilon: float
    num_coordinates: int
    range_mode: str
    range_noise_std: float | None = None
    range_sensitivity: float | None = None

    def releases(self, ids: list[int], num_samples: torch.Tensor | None = None,
                 ideal_secure_sum: bool = False) -> list[Release]:
        """Per participant, against both observers: d two-point reports; the range agreement's
        release (``client-minmax``: exact, ε = ∞; ``private-minmax``: the Gaussian report σ
        against Δ); nothing for ``fixed`` and ``global-model`` (see the module docstring).
        Local DP: every report is protected on its own, so neither the sample counts nor a
        secure aggregation change them."""
        del num_samples, ideal_secure_sum
        if not ids:
            return []
        # Both observers: d two-point reports per participant. The public sees only per-id means,
        # a post-processing of the reports; without a trusted shuffler the server links them.
        out: list[Release] = [Release.two_point(obs, self.epsilon, self.num_coordinates, ids)
                              for obs in ("server", "public")]
        if self.range_mode == "client-minmax":
            # the exact per-layer bounds of the cohort's trained models, known to the server and
            # every client (and, through the ranges, the public): a deterministic function of the
            # data, released without noise — an exact release (ε = ∞)
            out += [Release.exact(obs, ids) for obs in ("server", "public")]
        elif self.range_mode == "private-minmax":
            # one Gaussian log2 range report per participant (σ against Δ, replace-one = local DP);
            # the public sees only the agreed radii (a post-processing): recording the report
            # against it too is an upper bound
            assert self.range_noise_std is not None and self.range_sensitivity is not None
            out += [Release.gaussian(obs, self.range_noise_std, self.range_sensitivity, ids)
                    for obs in ("server", "public")]
        return out


def ldp_fl_plan(options: LdpFlOptions, num_params: int, round_idx: int,
                range_sensitivity: float | None = None) -> LdpFlPlan:
    """The plan of one LDP-FL round: a pure function of the options (and, for ``private-minmax``,
    of Δ = :func:`dpfl.privacy.mechanisms.log_range_sensitivity` of the layout).

    References:
        001_8ad797a147f2b989.txt, eq. 2 and §3.3.
    """
    if options.range != "private-minmax":
        return LdpFlPlan(round_idx, float(options.epsilon), int(num_params), options.range)
    if range_sensitivity is None or options.range_noise_multiplier is None:
        raise ConfigError("ldp-fl: `range: private-minmax` needs the layout's range sensitivity and "
                          "`range_noise_multiplier` to plan a round.")
    return LdpFlPlan(round_idx, float(options.epsilon), int(num_params), options.range,
                     float(options.range_noise_multiplier) * range_sensitivity, range_sensitivity)


class LdpFl(PrivateAlgorithm[LdpFlPlan]):
    """See the module docstring.

    Args:
        options: validated options.
        sampler: the client sampler.
        num_params: d, weights per model.
        delta: δ of the certified statements.
        layout: the model's parameter layout (needed by the adaptive ranges; the runner provides
            it through :meth:`configure_local`).
    """

    name = "ldp-fl"
    claim_observer = "server"  # 001: the untrusted cloud
    relation = "replace_one"
    privacy_unit = "client"

    def __init__(self, options: LdpFlOptions, sampler: Any, num_params: int, delta: float,
                 layout: ParamLayout | None = None) -> None:
        if options.range == "fixed" and options.radius is None:
            raise ConfigError("ldp-fl: `radius` is required when `range` is 'fixed' (001 §5 uses 0.075 "
                              "for MNIST, 0.015 for Fashion-MNIST).")
        if options.range != "fixed" and options.radius is not None:
            raise ConfigError(f"ldp-fl: `radius` applies to `range: fixed` only; `range` is {options.range!r}.")
        for name in ("max_radius", "range_noise_multiplier"):
            if options.range != "private-minmax" and getattr(options, name) is not None:
                raise ConfigError(f"ldp-fl: `{name}` applies to `range: private-minmax` only; `range` is "
                                  f"{options.range!r}.")
        if options.range == "private-minmax" and options.range_noise_multiplier is None:
            raise ConfigError(
                "ldp-fl: `range: private-minmax` needs `range_noise_multiplier` (z > 0): each client's "
                "per-layer log2 max|w| report gets Gaussian noise of std z * log2(max_radius / min_radius) "
                "* sqrt(L), and its privacy cost is accounted (e.g. 1.0; larger z = noisier ranges, smaller "
                "epsilon).")
        #: the adaptive modes' smallest and (private-minmax) largest radius of a layer
        self.min_radius = float(options.min_radius if options.min_radius is not None
                                else DEFAULT_MIN_RADIUS.get(options.range, DEFAULT_MIN_RADIUS_OTHER))
        self.max_radius = float(options.max_radius if options.max_radius is not None else DEFAULT_MAX_RADIUS)
        if options.range == "private-minmax" and not self.max_radius > self.min_radius:
            raise ConfigError(f"ldp-fl: `max_radius` ({self.max_radius!r}) must be larger than `min_radius` "
                              f"({self.min_radius!r}) for `range: private-minmax`.")
        self.options = options
        self.sampler = sampler
        self.num_params = int(num_params)
        self.delta = float(delta)
        self.layout = layout
        self.shuffler = Shuffler()
        self.aggregate_by_id = mean_by_id  # the server side: sees IdMultisets only
        self._agreed: tuple[int, torch.Tensor, torch.Tensor, list[float]] | None = None
        # client-minmax and private-minmax need a cross-client agreement no real client can run alone
        self.splits_rounds = options.range not in CROSS_CLIENT_MODES  # type: ignore[misc]
        self._privacy_cache: dict[tuple[int, int], LdpFlPrivacy] = {}

    # ------------------------------------------------------------------ wiring

    def configure_local(self, problem: LocalProblem) -> LocalProblem:
        """Keep the parameter layout (per-layer ranges); the local problem is unchanged."""
        if problem.layout.numel != self.num_params:
            raise ConfigError(f"layout has {problem.layout.numel} parameters, expected {self.num_params}.")
        self.layout = problem.layout
        return problem

    # ------------------------------------------------------------------ ranges

    def _layer_bounds(self, stacked: torch.Tensor) -> tuple[list[float], list[float]]:
        """Per layer, min and max of ``stacked`` [..., P] over every leading index."""
        if self.layout is None:
            raise ConfigError(f"ldp-fl: `range: {self.options.range}` needs the model's parameter layout "
                              "(the runner passes it through configure_local).")
        flat = stacked.reshape(-1, stacked.shape[-1])
        lows, highs = [], []
        for off, size in zip(self.layout.offsets, self.layout.sizes(), strict=True):
            part = flat[:, off : off + size]
            lows.append(float(part.amin()))
            highs.append(float(part.amax()))
        return lows, highs

    def ranges(
        self, global_params: torch.Tensor, local_params: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        """(center [P], radius [P]) as float64, and the per-layer radii (one entry for ``fixed``)."""
        o = self.options
        p = self.num_params
        if o.range == "fixed":
            assert o.radius is not None
            c = torch.full((p,), float(o.center), dtype=torch.float64)
            r = torch.full((p,), float(o.radius), dtype=torch.float64)
            return c, r, [float(o.radius)]
        if o.range == "private-minmax":
            raise ConfigError("ldp-fl: `range: private-minmax` ranges come from the cohort's noisy reports "
                              "(LdpFl.private_ranges), not from a model's min and max.")
        source = global_params if o.range == "global-model" else local_params
        lows, highs = self._layer_bounds(source)
        radii = []
        for lo, hi in zip(lows, highs, strict=True):
            rad = o.range_scale * (hi - lo)
            rad = max(rad, abs(lo), abs(hi), self.min_radius)
            radii.append(rad)
        assert self.layout is not None
        sizes = torch.tensor(self.layout.sizes())
        r = torch.repeat_interleave(torch.tensor(radii, dtype=torch.float64), sizes)
        return torch.zeros(p, dtype=torch.float64), r, radii

    def _sizes(self) -> list[int]:
        if self.layout is None:
            raise ConfigError(f"ldp-fl: `range: {self.options.range}` needs the model's parameter layout "
                              "(the runner passes it through configure_local).")
        return self.layout.sizes()

    def range_sensitivity(self) -> float:
        """``private-minmax``: Δ = log2(max_radius / min_radius)·sqrt(L), L = parameter tensors."""
        return log_range_sensitivity(self.min_radius, self.max_radius, len(self._sizes()))

    def range_noise_std(self) -> float:
        """``private-minmax``: σ = range_noise_multiplier × Δ of each client's log2 range report."""
        std = self._plan_at(0).range_noise_std
        assert std is not None
        return std

    def plan(self, info: RoundInfo) -> LdpFlPlan:
        """Every privacy number of round ``info.round_idx`` (:func:`ldp_fl_plan`): the
        randomizer's ε, d, and for ``private-minmax`` the range report's σ and Δ."""
        return self._plan_at(info.round_idx)

    def _plan_at(self, round_idx: int) -> LdpFlPlan:
        sens = self.range_sensitivity() if self.options.range == "private-minmax" else None
        return ldp_fl_plan(self.options, self.num_params, round_idx, sens)

    def calibration(self) -> LdpFlCalibration:
        """What the options fix (:class:`LdpFlCalibration`; the private-minmax report's Δ and σ
        need the model's layout)."""
        cal = LdpFlCalibration(float(self.options.epsilon), two_point_realized_epsilon(self.options.epsilon),
                               int(self.num_params), str(self.options.range))
        if self.options.range == "private-minmax" and self.layout is not None:
            plan = self._plan_at(0)
            cal = dataclasses.replace(cal, range_noise_multiplier=self.options.range_noise_multiplier,
                                      range_sensitivity=plan.range_sensitivity, range_noise_std=plan.range_noise_std)
        return cal

    def private_ranges(
        self, local_params: torch.Tensor, info: RoundInfo
    ) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        """``private-minmax``: (center [P], radius [P], per-layer radii) agreed from the cohort's noisy reports.

        Row k of ``local_params`` is client ``info.clients[k]``'s trained model; its report
        (:func:`dpfl.privacy.mechanisms.log_range_reports`) draws its noise from that client's own
        stream (round, client, "range"). The radii are
        r_l = range_scale × 2^(mean report_l) clamped to [min_radius, max_radius]
        (:func:`dpfl.privacy.mechanisms.agree_log_ranges`); c = 0.
        """
        sizes = self._sizes()
        gens = [info.seeds.noise_generator(info.round_idx, int(c), "range") for c in info.clients.tolist()]
        std = self.round_plan(info).range_noise_std
        assert std is not None
        reports = log_range_reports(local_params, sizes, self.min_radius, self.max_radius, std, gens)
        radii_t = agree_log_ranges(reports, self.options.range_scale, self.min_radius, self.max_radius)
        r = torch.repeat_interleave(radii_t, torch.tensor(sizes, device=radii_t.device))
        return torch.zeros(self.num_params, dtype=torch.float64), r, [float(x) for x in radii_t.tolist()]

    # ------------------------------------------------------------------ the round

    splits_rounds = True
    shuffles_uploads = True  # split & shuffle (001 §3.3): on Flower, reports go sealed to a shuffler node

    def _round_ranges(self, global_params: torch.Tensor, info: RoundInfo,
                      local_params: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        """The round's agreed (center, radius, per-layer radii).

        ``fixed`` and ``global-model`` are computed by anyone holding the broadcast model.
        ``client-minmax`` and ``private-minmax`` need every cohort member's trained model (001's
        encrypted min–max, or the cohort's noisy log2 range reports): computed from the stacked
        cohort when ``local_params`` is the whole cohort, and then kept for this round (the agreed
        bounds are known to every client and the server after the agreement, so the server may
        use them to mix the reports).
        """
        mode = self.options.range
        if mode not in CROSS_CLIENT_MODES:
            return self.ranges(global_params, global_params.unsqueeze(0))
        if local_params is not None:
            if int(info.clients.numel()) != info.cohort:
                what = ("from the min and max over the whole cohort's trained models (001 §3.3, an encrypted "
                        "min-max across clients)" if mode == "client-minmax" else
                        "from the mean of the whole cohort's noisy log2 max|w| reports (dpfl's DP substitute "
                        "for 001 §3.3's encrypted min-max)")
                raise ConfigError(
                    f"ldp-fl: `range: {mode}` agrees on each layer's range {what}; a client that holds "
                    f"{int(info.clients.numel())} of the cohort's {info.cohort} models cannot compute it, and "
                    "dpfl has no agreement protocol between real clients. Use `range: global-model` (public, "
                    "costs no privacy) or `fixed` on real clients.")
            if mode == "client-minmax":
                center, radius, radii = self.ranges(global_params, local_params)
            else:
                center, radius, radii = self.private_ranges(local_params, info)
            self._agreed = (info.round_idx, center, radius, radii)
            return center, radius, radii
        if self._agreed is None or self._agreed[0] != info.round_idx:
            raise ConfigError(f"ldp-fl: no agreed {mode} range for round {info.round_idx + 1} "
                              "(the clients' step of this round did not run here)")
        _, center, radius, radii = self._agreed
        return center, radius, radii

    def client_step(self, global_params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
        """001 Algorithm 2 on each client: its own trained model, clipped into the round's range
        and two-point randomized (eq. 2) with its own generator (round, client, "randomizer").

        Splitting by mode: ``fixed`` and ``global-model`` ranges are computed on the client from
        the options and the broadcast model; ``client-minmax`` and ``private-minmax`` need all
        the cohort's local models (or range reports) at once (a cross-client agreement) and so
        run only where the whole cohort is stacked, i.e. in simulation — such a run has
        ``splits_rounds = False`` and the Flower runner refuses it with a clear error (and this
        method raises one for a partial cohort).
        A weight that local training left non-finite (diverged training, e.g. at ε = 0.1) is
        reported as if it were the range's center c: the randomizer is ε-LDP for *every* input
        in [c − r, c + r], so this costs no privacy, and the run goes on instead of failing.
        How many weights fell outside the range or were non-finite is a simulation-only
        diagnostic (it depends on the data, so a client never sends it)."""
        center, radius, _ = self._round_ranges(global_params, info, local.params)
        eps = self.round_plan(info).epsilon
        device = local.params.device
        center, radius = center.to(device), radius.to(device)
        gens = [info.seeds.noise_generator(info.round_idx, int(c), "randomizer") for c in info.clients.tolist()]
        reports, clipped, non_finite = [], [], []
        for k, gen in enumerate(gens):  # per row, to count each client's own clipped weights
            x = local.params[k : k + 1]
            bad = ~torch.isfinite(x)
            nb = int(bad.sum())
            if nb:
                x = torch.where(bad, center.to(x.dtype).unsqueeze(0), x)
            row, n = two_point_randomize_per_client(x, center, radius, eps, [gen])
            reports.append(row)
            clipped.append(float(n))
            non_finite.append(float(nb))
        params = torch.cat(reports) if reports else local.params[:0].clone()
        return Uploads(info.clients, params, local.num_samples, local.train_loss, {},
                       diagnostics={"clipped": torch.tensor(clipped, dtype=torch.float64),
                                    "non_finite": torch.tensor(non_finite, dtype=torch.float64)})

    def aggregate(self, global_params: torch.Tensor, uploads: Uploads, info: RoundInfo) -> RoundOutput:
        """001 Algorithm 3 then Algorithm 1 line 8: per-id multisets → mean by id.

        If ``uploads.shuffled`` holds an :class:`IdMultisets` (a shuffler process already mixed
        the reports) it is averaged as is; otherwise the rows are mixed here by the algorithm's
        trusted in-process shuffler first. Either way the server side (:meth:`aggregate_by_id`)
        sees only per-id multisets — no client ids, no order. The shuffled-ε metrics use the
        number of reports actually mixed per id (the arrivals)."""
        plan = self.round_plan(info)
        eps = plan.epsilon
        known = self.options.range not in CROSS_CLIENT_MODES or (
            self._agreed is not None and self._agreed[0] == info.round_idx)
        radii: list[float] | None = None
        if uploads.shuffled is not None:
            if not isinstance(uploads.shuffled, IdMultisets):
                raise ConfigError(f"ldp-fl: `uploads.shuffled` must be the shuffler's IdMultisets. Found "
                                  f"{type(uploads.shuffled).__name__}.")
            mixed: IdMultisets = uploads.shuffled
            if known:
                radii = self._round_ranges(global_params, info, None)[2]
        elif uploads.num_rows == 0:
            return RoundOutput(global_params.clone(), {"arrived": 0, "epsilon_per_weight": eps})
        else:
            center, radius, radii = self._round_ranges(global_params, info, None)
            dev, dtype = uploads.params.device, uploads.params.dtype
            low, high = two_point_values(center.to(dev), radius.to(dev), eps)
            assert isinstance(low, torch.Tensor) and isinstance(high, torch.Tensor)
            # trusted shuffler: identified rows in, per-id multisets out
            mixed = self.shuffler.shuffle_two_point(uploads.params, low.to(dtype), high.to(dtype))
        # server side: per-id multisets only
        new_global = self.aggregate_by_id(mixed).to(global_params.device, global_params.dtype)
        k = int(mixed.num_reports().min())
        stmt = self._privacy(info.round_idx + 1, k)
        one = self._privacy(1, k)
        metrics: dict[str, Any] = {
            "epsilon_per_weight": eps,
            "epsilon_per_weight_realized": one.epsilon_per_weight_realized,
        }
        if "clipped" in uploads.diagnostics and uploads.num_rows:  # simulation only
            total = uploads.num_rows * self.num_params
            metrics["clipped_fraction"] = float(uploads.diagnostics["clipped"].sum()) / total if total else 0.0
            nf = float(uploads.diagnostics["non_finite"].sum())
            if nf:
                metrics["non_finite_weights_reported_as_center"] = int(nf)
        if radii is not None:
            metrics["range_radius"] = [round(x, 8) for x in radii]
        if plan.range_noise_std is not None:
            metrics["range_noise_std"] = plan.range_noise_std
            metrics["range_sensitivity"] = plan.range_sensitivity
        metrics.update({
            "epsilon_round_unshuffled": one.unshuffled,
            "epsilon_round_shuffled": one.shuffled,
            "epsilon_total_unshuffled": stmt.unshuffled,
            "epsilon_total_shuffled": stmt.shuffled,
            "shuffle_note": stmt.shuffled_note,
        })
        return RoundOutput(new_global, metrics)

    def _range_noise_multiplier(self) -> float | None:
        """z of the per-round range release: None (free), 0 (client-minmax: exact), or σ/Δ."""
        if self.options.range == "client-minmax":
            return 0.0
        if self.options.range == "private-minmax":
            return float(self.options.range_noise_multiplier)  # type: ignore[arg-type]
        return None

    def _privacy(self, rounds: int, num_reports: int) -> LdpFlPrivacy:
        key = (rounds, num_reports)
        if key not in self._privacy_cache:
            self._privacy_cache[key] = ldp_fl_privacy(self.options.epsilon, self.num_params, rounds,
                                                      max(num_reports, 1), self.delta,
                                                      self._range_noise_multiplier())
        return self._privacy_cache[key]

    # ------------------------------------------------------------------ privacy interface

    def claim(self, rounds_done: int) -> Any:
        """001's claim after ``rounds_done`` rounds (Thm 1, §4.2): the whole statement, shuffled
        and unshuffled (:func:`dpfl.privacy.accounting.claimed.ldp_fl_claimed_epsilon`)."""
        return ldp_fl_claimed_epsilon(self.options.epsilon, self.num_params, rounds_done)

    def claimed_epsilon(self, rounds_done: int) -> float | None:
        if rounds_done == 0:
            return 0.0
        return float(self.claim(rounds_done).total)

    def claim_notion(self) -> str:
        n = CLAIM_NOTIONS["ldp-fl"]
        return f"001 (Thm 1, §4.2): {n.notion}; unit: {n.unit}; observer: {n.observer}"

    def not_covered(self) -> list[str]:
        out = []
        if self.options.range == "client-minmax":
            out.append(
                "range `client-minmax` (001's encrypted min-max): each layer's range is the exact max - min "
                "over the cohort's trained local models, released without noise to the server and every "
                "client (and through the ranges to the public) - a deterministic function of the clients' "
                "data, so the certified epsilon is infinite against both observers (the ledger records it "
                "as a non-private release); the paper's claimed epsilon ignores this release. "
                "`range: private-minmax` agrees on the ranges with Gaussian noise and accounts for it"
            )
        out.append(
            "split & shuffle: the certified epsilon assumes no trusted shuffler (001's local random delays "
            "are not one); the amplified bound with a trusted shuffler is reported separately "
            "(metrics epsilon_*_shuffled) and only where Feldman-McMillan-Talwar applies"
        )
        return out


def _build(options: dict[str, Any], sampler: Any, ctx: Any) -> LdpFl:

    opts = parse_options(LdpFlOptions, options, "ldp-fl")
    if not math.isfinite(opts.epsilon):
        raise ConfigError(f"ldp-fl: `epsilon` must be finite. Found {opts.epsilon!r}.")
    return LdpFl(opts, sampler, ctx.num_params, ctx.privacy.delta)


ALGORITHMS = {"ldp-fl": _build}
