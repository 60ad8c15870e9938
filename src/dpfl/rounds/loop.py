"""The round loop, once: sample → gate → train → charge → aggregate → record, for every runtime.

::

    for t in rounds:
      algorithm.should_stop(t)                       e.g. CRD lowered T
      clients = algorithm.sample(t, N, seeds)        stream (t, SERVER, "sample"); all N when the
                                                     clients sample themselves (hidden participation)
      info.plan = algorithm.plan(info)               private: the round's frozen plan, read by all
      gate.before_round(info)                        releases + claim; stop before exceeding
                                                     the target ε / the filter's budget; strict mode
      collected = cohort.collect(params, info)       train (or not: a dry run)
      [remote] fewer arrivals → releases_for_arrivals; withheld if over budget; charged ahead
      params = cohort.aggregate(params, collected)
      gate.record(t, releases)                       the ledger
      recorder: evaluate · log_round · checkpoint · progress

Persistence is the :class:`Recorder`'s business (the store and checkpoints of a run, nothing for a
dry run); the loop only says what happened. Nothing here knows which runtime trains the cohort.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from dpfl.algorithms.base import Algorithm
from dpfl.client.context import RoundInfo
from dpfl.privacy.accounting.ledger import Release
from dpfl.rng import SeedSequence
from dpfl.rounds.cohort import Cohort
from dpfl.rounds.gate import PrivacyGate, entry_metrics, server_charges

MAX_CONSECUTIVE_EMPTY_ROUNDS = 3
"""On real clients, a run stops (status ``failed``) after this many rounds in a row in which no
upload arrived; a run in which every round was empty is ``failed`` too, never ``finished``."""


def _worst_secure_sum(cohort: Cohort, gate: PrivacyGate, info: RoundInfo, clients: torch.Tensor) -> list[Release] | None:
    """Ahead of a secure round on real clients, what the server may see at worst: a completed sum
    of as few vectors as the protocol allows (``cohort.fewest_in_sum``), i.e. the fewest noise
    shares, charged to every client of the cohort (visible participation: any of them may be in
    it) or as the round's shared release (the clients' own coins). None for other rounds."""
    fewest = getattr(cohort, "fewest_in_sum", None)
    k = fewest(int(clients.numel())) if fewest is not None else None
    if k is None:
        return None
    ids = clients[:k]
    worst = [r for r in gate.arrivals(info, ids, torch.ones(len(ids), dtype=torch.long)) if r.observer == "server"]
    everyone = [int(c) for c in clients.tolist()]
    return [r if r.client_ids is None else r.for_clients(everyone) for r in worst]


class Recorder(Protocol):
    """What the loop reports to (a run's store and checkpoints; nothing for a dry run)."""

    def notice(self, kind: str, message: str, round_idx: int | None = None) -> None: ...

    def evaluate(self, params: torch.Tensor) -> dict[str, float]: ...

    def log_round(self, round_idx: int, metrics: dict[str, Any]) -> None: ...

    def checkpoint(self, state: LoopState, ledger_state: dict[str, Any] | None, algo_state: dict[str, Any]) -> None:
        ...

    def progress(self, done: int, total: int, metrics: dict[str, Any], seconds: float) -> None: ...


class RoundObserver(Protocol):
    """Sees every recorded round of a stored run, in order, once per call of the run: the rounds
    already in the store first (a resumed run, or a finished one returned from the store), then
    each new round right after the store has it (:class:`Recorder` ``log_round``). The CSV and
    TensorBoard writers of :mod:`dpfl.rounds.observers` are observers."""

    def open(self, run_id: str) -> None: ...

    def log_round(self, round_idx: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass
class LoopState:
    """What the loop carries from round to round (and a checkpoint restores)."""

    params: torch.Tensor
    rounds_done: int = 0
    empty_rounds: int = 0
    consecutive_empty: int = 0


@dataclass
class LoopOutcome:
    """How the loop ended."""

    status: str = "finished"
    stop_reason: str | None = None
    last_eval: dict[str, float] = field(default_factory=dict)


def run_rounds(
    algorithm: Algorithm,
    cohort: Cohort,
    gate: PrivacyGate | None,
    recorder: Recorder,
    state: LoopState,
    *,
    rounds: int,
    num_clients: int,
    seeds: SeedSequence,
    eval_every: int = 1,
    checkpoint_every: int = 5,
    charge_ahead: bool = False,
    per_round: Callable[[int, dict[str, Any]], None] | None = None,
) -> LoopOutcome:
    """Run rounds ``state.rounds_done`` … ``rounds - 1``; ``state`` is updated in place.

    Args:
        algorithm: samples the cohort and (private) states its releases.
        cohort: where the cohort trains (:mod:`dpfl.rounds.cohort`).
        gate: the privacy gate of a private algorithm, else None.
        recorder: where rounds, notices and checkpoints go.
        state: the global model and counters (from a checkpoint when resuming).
        charge_ahead: charge each round in the ledger (and checkpoint the charge) before its
            aggregate is used — real clients, or noise from the OS CSPRNG, whose redo would draw
            fresh noise.
        per_round: called with (round, the ledger entry) after each recorded round (dry runs
            asking for per-round ε).
    """
    out = LoopOutcome()
    emit = recorder.notice
    planned_server: dict[int, list[Release]] = {}  # per round: what an upload shows the server
    t_start = time.perf_counter()

    def checkpoint(done: int, ledger_state: dict[str, Any] | None, algo_state: dict[str, Any]) -> None:
        recorder.checkpoint(LoopState(state.params, done, state.empty_rounds, state.consecutive_empty),
                            ledger_state, algo_state)

    def charge_unused(final: bool = False) -> int:
        """Charge the server observer for uploads it received but did not aggregate."""
        seen = cohort.unused_uploads(final=final, emit=emit)
        if gate is None or seen is None:
            return 0
        by_round: dict[int, list[int]] = {}
        for r, c in seen:
            by_round.setdefault(int(r), []).append(int(c))
        charged = 0
        for r, clients_seen in sorted(by_round.items()):
            extra = server_charges(planned_server.get(r, []), clients_seen)
            if extra:
                gate.record(r, extra, sorted(set(clients_seen)), None)
                charged += len(set(clients_seen))
        return charged

    for t in range(state.rounds_done, rounds):
        t0 = time.perf_counter()
        round_start_state = cohort.state_dict() if charge_ahead else {}
        reason = algorithm.should_stop(t)
        if reason:
            out.stop_reason = reason
            emit("early-end", reason, t)
            break
        own_coins = bool(getattr(cohort, "own_coins", False))
        # hidden participation on real clients: every client is asked, each samples itself
        clients = torch.arange(num_clients) if own_coins else algorithm.sample(t, num_clients, seeds)
        info = RoundInfo(t, num_clients, clients, seeds, own_coins=own_coins)
        planner = getattr(algorithm, "plan", None)
        if planner is not None:  # a private algorithm: its round plan, fixed once for every part
            info = info.with_plan(planner(info))
        metrics: dict[str, Any] = {"clients": int(clients.numel())}
        releases: list[Release] | None = None
        claimed_after = None
        if gate is not None:
            decision = gate.before_round(info, emit)
            releases, claimed_after = decision.releases, decision.claimed_after
            if decision.stop_reason is not None:
                emit(decision.stop_kind or "stopped", decision.stop_reason, t)
                out.status, out.stop_reason = "stopped", decision.stop_reason
                break
        participants = clients
        if clients.numel() > 0:
            if cohort.remote and releases is not None:
                planned_server[t] = [r for r in releases if r.observer == "server"]
                if charge_ahead and gate is not None:
                    # every upload of this cohort, and every one still outstanding, may reach the
                    # server from now on: a checkpoint that charges them all
                    ahead = gate.ledger.to_dict()
                    late = [(t, int(c)) for c in clients.tolist()] + cohort.outstanding()
                    worst = _worst_secure_sum(cohort, gate, info, clients)
                    for r in sorted({r for r, _ in late}):
                        who = sorted({c for q, c in late if q == r})
                        charges = (worst if worst is not None and r == t
                                   else server_charges(planned_server.get(r, []), who))
                        ahead["rounds"].append({"round": r, "participants": who, "claimed_epsilon": None, "releases": [
                            x.to_dict() for x in charges]})
                    checkpoint(t, ahead, round_start_state)
            collected = cohort.collect(state.params, info, emit)
            participants = collected.clients
            if collected.train_loss is not None and collected.num_rows:
                # NaN: the clients kept it (a private algorithm's clients in deployment)
                loss = float(collected.train_loss.mean())
                if math.isfinite(loss):
                    metrics["train_loss"] = loss
            if cohort.remote:
                metrics["arrived"] = collected.num_rows
            if releases is not None and gate is not None and collected.num_rows < clients.numel():
                releases = gate.arrivals(info, collected.clients, collected.num_samples)
                withheld = gate.arrivals_exceed(releases, collected.clients.tolist(), t)
                if withheld is not None:
                    # fewer arrivals can release more than planned (larger weights): the uploads
                    # reached the server and are charged; the aggregate is withheld
                    gate.record(t, [r for r in releases if r.observer == "server"], participants.tolist(),
                                claimed_after)
                    out.status, out.stop_reason = "stopped", withheld[0]
                    emit(withheld[1], withheld[0], t)
                    break
            if cohort.remote and gate is not None and releases is not None and charge_ahead:
                # charged before the aggregate is used (a redo is charged as the release it is)
                entry = gate.record(t, releases, participants.tolist(), claimed_after)
                releases = None
                metrics["charged_unaggregated"] = charge_unused()
                checkpoint(t, gate.ledger.to_dict(), round_start_state)
                entry_metrics(metrics, entry, claimed_after)
            if collected.num_rows:
                state.consecutive_empty = 0
                step = cohort.aggregate(state.params, collected, info)
                state.params = step.global_params
                metrics.update(step.metrics)
            else:
                state.empty_rounds += 1
                state.consecutive_empty += 1
                metrics["empty"] = True
                if algorithm.releases_empty_rounds:
                    # the round's planned noise, drawn by the server: skipping it would tell the
                    # public that the (secret) cohort was not empty — a cheaper-looking event that
                    # depends on who was sampled; released, it is the same event as every round
                    step = cohort.empty_round(state.params, info)
                    state.params = step.global_params
                    metrics.update(step.metrics)
                    emit("round-empty", f"round {t + 1}: no upload of the {int(clients.numel())} scheduled clients "
                         "arrived; the server released the round's planned noise (as for an empty cohort)", t)
                else:  # nothing to aggregate: nothing is released, the model stays as it was
                    emit("round-empty", f"round {t + 1}: no upload of the {int(clients.numel())} scheduled "
                         "clients arrived; the round is skipped (global model unchanged, nothing released)", t)
        elif algorithm.releases_empty_rounds:  # an empty cohort: the round's noise is still released
            step = cohort.empty_round(state.params, info)
            state.params = step.global_params
            metrics.update(step.metrics)
        if gate is not None and releases is not None:
            entry = gate.record(t, releases, participants.tolist(), claimed_after, certify_round=cohort.trains)
            if cohort.trains:
                entry_metrics(metrics, entry, claimed_after)
            if per_round is not None:
                per_round(t, entry)
        state.rounds_done = t + 1
        if not cohort.trains:
            continue
        if (t + 1) % eval_every == 0 or t + 1 == rounds:
            out.last_eval = recorder.evaluate(state.params)
            metrics.update(out.last_eval)
        metrics["seconds"] = time.perf_counter() - t0
        # an infinite certified epsilon (an un-noised release) is a true statement, not divergence
        if not all(math.isfinite(v) for k, v in metrics.items() if isinstance(v, float) and not k.startswith("epsilon")):
            metrics["non_finite"] = True
        recorder.log_round(t, metrics)
        if state.consecutive_empty >= MAX_CONSECUTIVE_EMPTY_ROUNDS:
            out.status = "failed"
            out.stop_reason = (f"stopped after round {t + 1}: no upload arrived in {state.consecutive_empty} rounds "
                               "in a row (check the round timeout and the SuperNodes' logs)")
            emit("empty-rounds", out.stop_reason, t)
            break
        if t + 1 < rounds and (charge_ahead or (t + 1) % checkpoint_every == 0):
            checkpoint(t + 1, gate.ledger.to_dict() if gate is not None else None, cohort.state_dict())
        recorder.progress(t + 1, rounds, metrics, time.perf_counter() - t_start)
    if cohort.remote and gate is not None:
        charge_unused(final=True)  # late uploads of the last rounds
    return out
