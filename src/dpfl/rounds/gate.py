"""The privacy gate of the round loop: the ledger, the budget, and when a run must stop.

Before a round trains, the gate asks the algorithm for the releases the round will make (after
the cohort is drawn), and stops the run before a round that would take the certified ε above
``privacy.target_epsilon`` or any client's RDP above a Rényi filter's ex-ante budget; in strict
mode it refuses a round whose certified ε would exceed the paper's claim. After the round it
records what was really released. The same gate serves runs, deployments and dry runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.client.context import RoundInfo
from dpfl.config import PrivacyConfig
from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import Certificate
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.notices import collect_range_warnings
from dpfl.privacy.releases import GaussianRelease, Release
from dpfl.rounds.noise import noise_multiplier
from dpfl.rounds.result import PrivacySummary

EmitFn = Callable[[str, str, "int | None"], None]
"""emit(kind, message, round index or None): a notice for the run's record."""

ORDER_GRID_TOLERANCE = 1e-6
"""How far (relative) a certificate may lie above the claim's formula at integer RDP orders and
still count as the order grid's gap, not an excess: the Skellam sum's RDP bound exceeds the
Gaussian's by terms of order 1/μ (Agarwal, Kairouz, Liu 2021, Thm 3.5), at most 1e-10 relative
over the main job's 100 rounds (measured with ``dpfl account default --per-round``); a coarse
integer encoding (small γ) that costs more than this is a real excess and noted as one."""

MAX_CLIENTS_PER_CLIENT_TABLE = 5000
"""Per-client ε tables are stored for runs of at most this many clients."""


def claim_value(claimed: float | dict[int, float] | None) -> float | None:
    """A claim as one number: the largest personalized budget, or the claim itself."""
    if isinstance(claimed, dict):
        return max(claimed.values()) if claimed else None
    return claimed


def server_charges(planned: list[Release], clients: list[int]) -> list[Release]:
    """The server-observer releases of ``clients``' uploads as planned for their round: what the
    server saw of an upload it received but did not aggregate (rejected, late)."""
    want = set(clients)
    out = []
    for rel in planned:
        ids = sorted(want if rel.client_ids is None else want.intersection(rel.client_ids))
        if ids:
            out.append(rel.for_clients(ids))
    return out


def with_uplink_sensitivity(releases: list[Release], sensitivity: float) -> list[Release]:
    """A what-if for dry runs: ``releases`` with every Gaussian release the server observes about
    named clients (each upload, and any other Gaussian report a client sends) stated at the L2
    sensitivity ``sensitivity`` instead of the one the code enforces; noise stds, the public's
    releases and every other release kind unchanged. E.g. 003's uplink at the paper's
    Δs_U = 2C/m (eq. 5–6) instead of the enforced 2C: what the server would be certified had
    that sensitivity held. Never used by a run (the enforced sensitivity is the contract)."""
    return [dataclasses.replace(r, sensitivity=float(sensitivity))
            if isinstance(r, GaussianRelease) and r.observer == "server" and r.client_ids is not None else r
            for r in releases]


@dataclass(frozen=True)
class GateDecision:
    """What the gate decided before a round (nothing trained yet)."""

    releases: list[Release]
    claimed_after: float | dict[int, float] | None
    stop_reason: str | None
    stop_kind: str | None = None


class PrivacyGate:
    """The ledger of a private run and the checks made before and after each round.

    Args:
        algorithm: the private algorithm (its releases, claim, sampler, relation and unit).
        num_clients: the population size.
        client_sizes: ``client_sizes(ids)`` → samples of those clients (public).
        privacy: the run's privacy settings.
        seeds: the run's seeds (an adaptive algorithm's ex-ante plan may use them; the privacy
            statement names the generator that draws their noise, ``noise_generator``).
        planned_rounds: the rounds the run plans (what a target-ε stop says would fit them).
    """

    def __init__(self, algorithm: PrivateAlgorithm, num_clients: int, client_sizes: Callable[[list[int]], Any],
                 privacy: PrivacyConfig, seeds: Any, *, planned_rounds: int | None = None) -> None:
        self.algorithm = algorithm
        self.planned_rounds = planned_rounds
        self.num_clients = int(num_clients)
        self.client_sizes = client_sizes
        self.privacy = privacy
        self.ledger = PrivacyLedger(num_clients=self.num_clients, sampler=algorithm.sampler, delta=privacy.delta,
                                    relation=algorithm.relation, privacy_unit=algorithm.privacy_unit,
                                    pld_every=privacy.pld_every)
        self.budget = self._budget(seeds)
        source = getattr(seeds, "noise_source", None)
        self.noise_generator: str | None = source() if callable(source) else None
        self.exceeded_noted = False
        self.order_grid_noted = False

    def _budget(self, seeds: Any) -> PrivacyLedger | None:
        """The ex-ante budget of an algorithm whose noise or length is chosen from data (its
        Rényi filter, :meth:`PrivateAlgorithm.privacy_filter_plan`), else None."""
        algo = self.algorithm
        plan = algo.privacy_filter_plan(self.num_clients, seeds)
        if plan is None:
            return None
        # the plan names its participants itself (it does not depend on the cohorts drawn)
        budget = PrivacyLedger(num_clients=self.num_clients, sampler={"kind": "all"}, delta=self.privacy.delta,
                               relation=algo.relation, privacy_unit=algo.privacy_unit, pld_every=0)
        for i, (planned, parts) in enumerate(plan):
            budget.record_round(i, self.stated(planned), sampling={"kind": "all"}, participants=parts,
                                certify_round=False)
        return budget

    def stated(self, releases: list[Release]) -> list[Release]:
        """The releases the gate checks and records, from the algorithm's: the same ones (a
        what-if gate of a dry run, :class:`WhatIfUplinkGate`, restates them)."""
        return releases

    def restore(self, ledger_state: dict[str, Any]) -> None:
        """Continue from a checkpointed ledger."""
        self.ledger = PrivacyLedger.from_dict(ledger_state, sampler=self.algorithm.sampler)

    # ---------------------------------------------------------------- before the round

    def before_round(self, info: RoundInfo, emit: EmitFn) -> GateDecision:
        """The round's releases and claim, and whether the run must stop before it."""
        algo, t = self.algorithm, info.round_idx
        clients = info.clients.tolist()
        with collect_range_warnings() as range_notices:
            releases = self.stated(algo.releases(info, self.client_sizes(clients), self.privacy.secure_aggregation))
            claimed_after = algo.claimed_epsilon(t + 1)
        for w in range_notices:
            emit("formula-range", str(w), t)
        target = self.privacy.target_epsilon
        if target is not None and self.ledger.would_exceed(releases, target, participants=clients):
            reason = (f"stopped before round {t + 1}: it would take the certified epsilon above "
                      f"privacy.target_epsilon = {target:g}{self._target_cost(t, target, releases, clients)}")
            return GateDecision(releases, claimed_after, reason, "target-epsilon")
        if self.budget is not None and not self.ledger.within_budget(self.budget, releases, participants=clients):
            reason = (f"stopped before round {t + 1}: it would take a client's RDP above the "
                      "budget fixed before the run at some order (Renyi filter)")
            return GateDecision(releases, claimed_after, reason, "privacy-filter")
        # once noted (and not strict) the comparison with the claim has nothing left to decide
        check_claim = algo.claim_comparable and (self.privacy.strict or not self.exceeded_noted)
        claim = claim_value(claimed_after) if check_claim else None
        observer = algo.claim_observer
        # like with like: the certificate against the observer the claim is about; a relative
        # 1e-9 keeps a claim that *is* an RDP bound of the same events (004) from "exceeding"
        # itself by float rounding
        if claim is not None and self.ledger.would_exceed(releases, claim * (1 + 1e-9), participants=clients,
                                                          observer=observer):
            against = f"against the {observer}" if observer else "(worst observer)"
            grid = self._order_grid_gap(t, releases, clients)
            if grid is not None and (self.privacy.strict or not self.order_grid_noted) and not (
                    self.ledger.would_exceed(releases, claim * (1 + 1e-9), participants=clients,
                                             observer=observer, method="best")):
                # the RDP route is above the claim by its order grid only, and the certificate (its
                # PLD: the Skellam sum's Gaussian domination) is below the claim: nothing to note or
                # refuse (one PLD at the first such round; every such round under privacy.strict)
                self.order_grid_noted = True
                return GateDecision(releases, claimed_after, None)
            if grid is not None:
                msg = (f"round {t + 1}: the certified epsilon {against} is above the paper's claimed epsilon "
                       f"{claim:.4g} by the RDP order grid only: the claim's own formula at integer orders gives "
                       f"{grid:.4g}, and the certificate is within {ORDER_GRID_TOLERANCE:g} (relative) of it "
                       "(the secure sum's Skellam noise is proven at integer orders only; the same noise is not "
                       "weaker, its accounting is coarser: docs/concepts/secure-aggregation.md)")
                kind, noted = "claim-order-grid", self.order_grid_noted
            else:
                msg = (f"round {t + 1}: the certified epsilon {against} exceeds the paper's claimed epsilon "
                       f"{claim:.4g} ({algo.claim_notion()})")
                kind, noted = "claim-exceeded", self.exceeded_noted
            if self.privacy.strict:
                raise PrivacyPreconditionError(msg + "; refusing to run it (privacy.strict).")
            if not noted:
                emit(kind, msg + "; continuing (set privacy.strict to refuse).", t)
                if kind == "claim-exceeded":
                    self.exceeded_noted = True
                else:
                    self.order_grid_noted = True
        return GateDecision(releases, claimed_after, None)

    def _target_cost(self, t: int, target: float, releases: list[Release], clients: list[int]) -> str:
        """What a target-ε stop before round ``t`` says it would have cost: each observer the round
        would take above the target (its certified ε now and after the round: RDP, worst client, as
        the gate compares), the noise multiplier, the rounds that fit and what would fit them all.
        Computed once, when the run stops."""
        trial = self.ledger.trial_epsilons(releases, participants=clients)
        over = [(obs, now, after) for obs, (now, after) in trial.items() if after > target]
        shown = "; ".join(f"against the {obs}: {_num(now)} now, {_num(after)} after round {t + 1}"
                          for obs, now, after in over)
        z = noise_multiplier(self.algorithm)
        planned = self.planned_rounds
        at = "" if z is None else f" at noise multiplier {z:.4g}"
        fit = f"{t} of the {planned} planned rounds fit{at}" if planned else f"{t} rounds fit{at}"
        fix = "raise the noise (algorithm.options.noise_multiplier), sample clients less often, run fewer rounds"
        inverse = getattr(self.algorithm, "certified_noise_multiplier", None)
        if inverse is not None and planned and "public" in [o for o, _, _ in over]:
            try:  # the algorithm's certified inverse: the public's ex-ante ε of its own broadcast
                z_fit = float(inverse(target, planned, method="rdp"))
                fix = (f"noise multiplier {z_fit:.4g} would keep the public's certified epsilon within {target:g} for "
                       f"all {planned} rounds (algorithm.options.noise_multiplier)"
                       + ("; against the server (it sees each upload) privacy.secure_aggregation gives it only the sum"
                          if len(over) > 1 else ""))
            except ConfigError:
                pass
        return f" ({shown}; RDP, worst client); {fit}: {fix}, or raise privacy.target_epsilon"

    def _order_grid_gap(self, t: int, releases: list[Release], clients: list[int]) -> float | None:
        """The claim's formula at integer RDP orders after round ``t`` when the certificate lies
        within :data:`ORDER_GRID_TOLERANCE` of it (the excess over the claim is the order grid's,
        :meth:`PrivateAlgorithm.claim_at_integer_orders`), else None (a real excess)."""
        grid = claim_value(self.algorithm.claim_at_integer_orders(t + 1))
        if grid is None or self.ledger.would_exceed(releases, grid * (1 + ORDER_GRID_TOLERANCE), participants=clients,
                                                    observer=self.algorithm.claim_observer):
            return None
        return grid

    # ---------------------------------------------------------------- after the round

    def arrivals(self, info: RoundInfo, arrived: Any, num_samples: Any) -> list[Release]:
        """What a round released when only ``arrived`` of the cohort reached the server (nothing
        when nobody arrived, unless the algorithm releases its noise in empty rounds)."""
        if arrived.numel() == 0 and not self.algorithm.releases_empty_rounds:
            return []
        return self.stated(self.algorithm.releases_for_arrivals(info, arrived, num_samples,
                                                                self.privacy.secure_aggregation))

    def arrivals_exceed(self, releases: list[Release], arrived: list[int], t: int) -> tuple[str, str] | None:
        """Why the aggregate of a round's arrivals must not be broadcast, and the notice kind
        (None: it may be): the releases of the arrivals would exceed the Rényi filter's budget or
        the target ε, which the gate checked only for the planned cohort."""
        if not arrived:
            return None
        if self.budget is not None and not self.ledger.within_budget(self.budget, releases, participants=arrived):
            return (f"stopped in round {t + 1}: with {len(arrived)} arrivals its broadcast would take a client's RDP "
                    "above the budget fixed before the run (Renyi filter); the aggregate was not broadcast",
                    "privacy-filter")
        target = self.privacy.target_epsilon
        if target is not None and self.ledger.would_exceed(releases, target, participants=arrived):
            return (f"stopped in round {t + 1}: with {len(arrived)} arrivals its broadcast would take the certified "
                    f"epsilon above privacy.target_epsilon = {target:g}; the aggregate was not broadcast",
                    "target-epsilon")
        return None

    def record(self, t: int, releases: list[Release], participants: list[int],
               claimed: float | dict[int, float] | None, *, certify_round: bool = True) -> dict[str, Any]:
        """Record a round's releases in the ledger; returns the ledger's entry. Under a Rényi
        filter the entry's ε composes what happened, which is not the guarantee (the filter's
        budget is): the entry says so (``spent``), and :func:`entry_metrics` labels it so."""
        entry = self.ledger.record_round(t, releases, sampling=self.algorithm.sampler.describe(),
                                         participants=participants, claimed_epsilon=claimed,
                                         certify_round=certify_round)
        if self.budget is not None:
            entry["spent"] = True
        return entry

    # ---------------------------------------------------------------- the summary

    def summary(self) -> PrivacySummary:
        """The privacy part of a run's result: claimed ε, certified ε per observer, and (adaptive
        algorithms) what was spent next to the ex-ante guarantee."""
        ledger, budget, algo = self.ledger, self.budget, self.algorithm

        def certs(led: PrivacyLedger, method: Any) -> dict[str, Certificate]:
            return {obs: led.certify(obs, None, method) for obs in ("server", "public")}

        certified = certs(ledger, "best") if ledger.rounds_recorded else None
        spent = basis = None
        if budget is not None:
            # adaptively chosen noise: the guarantee is the budget the filter enforced (RDP only: the
            # filter holds order by order); what happened is shown as spent, not as a guarantee
            spent, certified = certified, certs(budget, "rdp")
        if spent is not None:
            basis = ("ex-ante budget of a Renyi filter (Feldman & Zrnic 2021): the run's noise and length were "
                     "chosen from data; 'spent' composes the releases that happened and is not a guarantee")
        per_client = per_client_spent = None
        if ledger.rounds_recorded and ledger.num_clients <= MAX_CLIENTS_PER_CLIENT_TABLE:
            guarantee = budget if budget is not None else ledger
            per_client = {obs: dict(guarantee.client_epsilons(obs, "rdp")) for obs in ("server", "public")}
            if budget is not None:
                per_client_spent = {obs: dict(ledger.client_epsilons(obs, "rdp")) for obs in ("server", "public")}
        return PrivacySummary(
            certified=certified,
            claimed_epsilon=ledger.claimed_epsilon,
            claim_notion=algo.claim_notion(),
            claim_comparable=algo.claim_comparable,
            delta=self.privacy.delta,
            not_covered=tuple(algo.not_covered()),
            spent=spent,
            certified_basis=basis,
            client_epsilons_rdp=per_client,
            client_epsilons_rdp_spent=per_client_spent,
            extra=self._noise_statement(),
        )


    def _noise_statement(self) -> dict[str, Any]:
        """The privacy statement's noise entries: the generator (``noise_generator``) and, where
        ``privacy.gaussian_noise`` is set (every deployment), how the Gaussian releases were drawn
        (``gaussian_noise``: "lattice" or "float", the algorithm's answer)."""
        out: dict[str, Any] = {} if self.noise_generator is None else {"noise_generator": self.noise_generator}
        if getattr(self.privacy, "gaussian_noise", None) is not None:
            out["gaussian_noise"] = getattr(self.algorithm, "gaussian_release", "float")
        return out


class WhatIfUplinkGate(PrivacyGate):
    """The gate of a dry run that prices a what-if uplink sensitivity
    (:func:`dpfl.rounds.dry_run`'s ``what_if_uplink_sensitivity``): every release the algorithm
    states passes through :func:`with_uplink_sensitivity` before it is checked and recorded (the
    ex-ante budget of a Rényi filter too); sampling, cohorts, noise and the public's releases stay
    the algorithm's.

    Raises:
        ConfigError: ``uplink_sensitivity`` is not a finite number > 0.
    """

    def __init__(self, algorithm: PrivateAlgorithm, num_clients: int, client_sizes: Callable[[list[int]], Any],
                 privacy: PrivacyConfig, seeds: Any, *, uplink_sensitivity: float,
                 planned_rounds: int | None = None) -> None:
        value = float(uplink_sensitivity)
        if not (math.isfinite(value) and value > 0):
            raise ConfigError("`what_if_uplink_sensitivity` must be a finite number > 0. "
                              f"Found {uplink_sensitivity!r}.")
        self.uplink_sensitivity = value  # before the base class builds the budget through stated()
        super().__init__(algorithm, num_clients, client_sizes, privacy, seeds, planned_rounds=planned_rounds)

    def stated(self, releases: list[Release]) -> list[Release]:
        return with_uplink_sensitivity(releases, self.uplink_sensitivity)


def _num(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:.4g}"


def entry_metrics(metrics: dict[str, Any], entry: dict[str, Any], claimed: Any) -> None:
    """The per-round privacy metrics of a ledger entry."""
    metrics["epsilon_claimed"] = claim_value(claimed)
    rdp = entry["certified_rdp"]
    # under a Rényi filter the ledger composes what happened: "spent", never the guarantee's name
    kind = "spent" if entry.get("spent") else "certified"
    metrics[f"epsilon_{kind}_rdp"] = {k: float(v) for k, v in rdp.items()}
    metrics[f"epsilon_{kind}"] = max(float(v) for v in rdp.values())
    if "certified" in entry:  # the ledger's periodic tightest certificates: spent ones under a filter
        metrics["certified" if kind == "certified" else "spent_certificates"] = entry["certified"]
