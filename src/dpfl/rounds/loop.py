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

from dpfl.algorithms.base import Algorithm, RoundOutput
from dpfl.client.context import RoundInfo
from dpfl.privacy.releases import Release
from dpfl.rng import SeedSequence
from dpfl.rounds.cohort import Cohort
from dpfl.rounds.gate import PrivacyGate, entry_metrics, server_charges
from dpfl.rounds.noise import SWAMPED_RATIO, SWAMPED_ROUNDS, noise_multiplier, noise_to_signal, swamped_notice

MAX_CONSECUTIVE_EMPTY_ROUNDS = 3
"""On real clients, a run stops (status ``failed``) after this many rounds in a row in which no
upload arrived; a run in which every round was empty is ``failed`` too, never ``finished``."""


def _worst_secure_sum(
    cohort: Cohort, gate: PrivacyGate, info: RoundInfo, clients: torch.Tensor
) -> list[Release] | None:
    """Ahead of a secure round on real clients, what the server may see at worst: a completed sum
    of as few vectors as the protocol allows (``cohort.fewest_in_sum``), i.e. the fewest noise
    shares, charged to every client of the cohort (visible participation: any of them may be in
    it) or as the round's shared release (hidden participation). None for other rounds."""
    k = cohort.fewest_in_sum(int(clients.numel()))
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
    loop = _Rounds(algorithm, cohort, gate, recorder, state, rounds=rounds, seeds=seeds, eval_every=eval_every,
                   checkpoint_every=checkpoint_every, charge_ahead=charge_ahead, per_round=per_round)
    for t in range(state.rounds_done, rounds):
        t0 = time.perf_counter()
        round_start_state = cohort.state_dict() if charge_ahead else {}
        reason = algorithm.should_stop(t)
        if reason:
            loop.stop(None, reason, "early-end", t)
            break
        info = loop.round_info(t, num_clients)
        metrics: dict[str, Any] = {"clients": int(info.clients.numel())}
        round_ = _Round(info, metrics, round_start_state)
        if gate is not None:
            decision = gate.before_round(info, recorder.notice)
            round_.releases, round_.claimed_after = decision.releases, decision.claimed_after
            if decision.stop_reason is not None:
                loop.stop("stopped", decision.stop_reason, decision.stop_kind or "stopped", t)
                break
        if info.clients.numel() > 0:
            if not loop.train(round_):
                break
        elif algorithm.releases_empty_rounds:  # an empty cohort: the round's noise is still released
            loop.step(cohort.empty_round(state.params, info), metrics)
        loop.record(round_)
        state.rounds_done = t + 1
        if cohort.trains and not loop.report(t, metrics, t0):
            break
    if cohort.remote and gate is not None:
        loop.charge_unused(final=True)  # late uploads of the last rounds
    return loop.out


@dataclass
class _Round:
    """One round as the loop goes through it: its info, metrics, releases still to record."""

    info: RoundInfo
    metrics: dict[str, Any]
    start_state: dict[str, Any]
    releases: list[Release] | None = None
    claimed_after: Any = None
    participants: torch.Tensor | None = None


class _Rounds:
    """The parts of :func:`run_rounds`: what one round does after its gate, and what it records."""

    def __init__(self, algorithm: Algorithm, cohort: Cohort, gate: PrivacyGate | None, recorder: Recorder,
                 state: LoopState, *, rounds: int, seeds: SeedSequence, eval_every: int, checkpoint_every: int,
                 charge_ahead: bool, per_round: Callable[[int, dict[str, Any]], None] | None) -> None:
        self.algorithm, self.cohort, self.gate, self.recorder, self.state = algorithm, cohort, gate, recorder, state
        self.rounds, self.seeds, self.eval_every, self.checkpoint_every = rounds, seeds, eval_every, checkpoint_every
        self.charge_ahead, self.per_round = charge_ahead, per_round
        self.out = LoopOutcome()
        self.emit = recorder.notice
        self.planned_server: dict[int, list[Release]] = {}  # per round: what an upload shows the server
        self.t_start = time.perf_counter()
        self.swamped_noted = False

    def stop(self, status: str | None, reason: str, kind: str, t: int) -> None:
        self.emit(kind, reason, t)
        if status is not None:
            self.out.status = status
        self.out.stop_reason = reason

    def round_info(self, t: int, num_clients: int) -> RoundInfo:
        """The round's cohort and, for a private algorithm, its plan, fixed once for every part.
        Under hidden participation every client is asked and samples itself."""
        hidden = self.cohort.hidden_participation
        clients = torch.arange(num_clients) if hidden else self.algorithm.sample(t, num_clients, self.seeds)
        info = RoundInfo(t, num_clients, clients, self.seeds, hidden_participation=hidden)
        plan = self.algorithm.plan(info)
        return info if plan is None else info.with_plan(plan)

    def checkpoint(self, done: int, ledger_state: dict[str, Any] | None, algo_state: dict[str, Any]) -> None:
        st = self.state
        self.recorder.checkpoint(LoopState(st.params, done, st.empty_rounds, st.consecutive_empty),
                                 ledger_state, algo_state)

    def step(self, step: RoundOutput, metrics: dict[str, Any]) -> None:
        self.state.params = step.global_params
        metrics.update(step.metrics)

    def train(self, r: _Round) -> bool:
        """Collect the cohort's uploads and aggregate them; False when the run must stop."""
        cohort, gate, info, t = self.cohort, self.gate, r.info, r.info.round_idx
        if cohort.remote and r.releases is not None:
            self.planned_server[t] = [x for x in r.releases if x.observer == "server"]
            if self.charge_ahead and gate is not None:
                self.checkpoint(t, self.ahead(gate, info), r.start_state)
        collected = cohort.collect(self.state.params, info, self.emit)
        r.participants = collected.clients
        if collected.train_loss is not None and collected.num_rows:
            # NaN: the clients kept it (a private algorithm's clients in deployment)
            loss = float(collected.train_loss.mean())
            if math.isfinite(loss):
                r.metrics["train_loss"] = loss
        if cohort.remote:
            r.metrics["arrived"] = collected.num_rows
        if r.releases is not None and gate is not None and collected.num_rows < info.clients.numel():
            r.releases = gate.arrivals(info, collected.clients, collected.num_samples)
            withheld = gate.arrivals_exceed(r.releases, collected.clients.tolist(), t)
            if withheld is not None:
                # fewer arrivals can release more than planned (larger weights): the uploads
                # reached the server and are charged; the aggregate is withheld
                gate.record(t, [x for x in r.releases if x.observer == "server"], collected.clients.tolist(),
                            r.claimed_after)
                self.stop("stopped", withheld[0], withheld[1], t)
                return False
        if cohort.remote and gate is not None and r.releases is not None and self.charge_ahead:
            # charged before the aggregate is used (a redo is charged as the release it is)
            entry = gate.record(t, r.releases, collected.clients.tolist(), r.claimed_after)
            r.releases = None
            r.metrics["charged_unaggregated"] = self.charge_unused()
            self.checkpoint(t, gate.ledger.to_dict(), r.start_state)
            entry_metrics(r.metrics, entry, r.claimed_after)
        if collected.num_rows:
            self.state.consecutive_empty = 0
            self.step(cohort.aggregate(self.state.params, collected, info), r.metrics)
            self.check_noise(t, r.metrics)
        else:
            self.empty(r)
        return True

    def check_noise(self, t: int, metrics: dict[str, Any]) -> None:
        """The round's noise against its signal (simulation: the metrics measure the updates'
        norms), into its metrics; one notice when it swamps the signal in an early round
        (:mod:`dpfl.rounds.noise`)."""
        found = noise_to_signal(self.algorithm, metrics, int(self.state.params.numel()))
        if found is None:
            return
        metrics.update(found)
        if not self.swamped_noted and t < SWAMPED_ROUNDS and found["noise_to_signal"] > SWAMPED_RATIO:
            self.swamped_noted = True
            self.emit("noise-swamps-signal", swamped_notice(t, found, noise_multiplier(self.algorithm)), t)

    def ahead(self, gate: PrivacyGate, info: RoundInfo) -> dict[str, Any]:
        """The ledger's saved form with every upload of this cohort, and every one still
        outstanding, charged: each may reach the server from now on."""
        t, clients = info.round_idx, info.clients
        late = [(t, int(c)) for c in clients.tolist()] + self.cohort.outstanding()
        worst = _worst_secure_sum(self.cohort, gate, info, clients)
        charges = []
        for r in sorted({r for r, _ in late}):
            who = sorted({c for q, c in late if q == r})
            charges.append((r, who, worst if worst is not None and r == t
                            else server_charges(self.planned_server.get(r, []), who)))
        return gate.ledger.charged_ahead(charges)

    def empty(self, r: _Round) -> None:
        """A round in which no upload arrived."""
        state, t, n = self.state, r.info.round_idx, int(r.info.clients.numel())
        state.empty_rounds += 1
        state.consecutive_empty += 1
        r.metrics["empty"] = True
        if self.algorithm.releases_empty_rounds:
            # the round's planned noise, drawn by the server: skipping it would tell the public
            # that the (secret) cohort was not empty — a cheaper-looking event that depends on who
            # was sampled; released, it is the same event as every round
            self.step(self.cohort.empty_round(state.params, r.info), r.metrics)
            self.emit("round-empty", f"round {t + 1}: no upload of the {n} scheduled clients arrived; the "
                      "server released the round's planned noise (as for an empty cohort)", t)
        else:  # nothing to aggregate: nothing is released, the model stays as it was
            self.emit("round-empty", f"round {t + 1}: no upload of the {n} scheduled clients arrived; the "
                      "round is skipped (global model unchanged, nothing released)", t)

    def record(self, r: _Round) -> None:
        """The round's releases into the ledger (unless charged ahead already)."""
        if self.gate is None or r.releases is None:
            return
        t = r.info.round_idx
        participants = r.info.clients if r.participants is None else r.participants
        entry = self.gate.record(t, r.releases, participants.tolist(), r.claimed_after,
                                 certify_round=self.cohort.trains)
        if self.cohort.trains:
            entry_metrics(r.metrics, entry, r.claimed_after)
        if self.per_round is not None:
            self.per_round(t, entry)

    def report(self, t: int, metrics: dict[str, Any], t0: float) -> bool:
        """Evaluate, log, checkpoint and show progress after round ``t``; False when the run fails."""
        state, rounds = self.state, self.rounds
        if (t + 1) % self.eval_every == 0 or t + 1 == rounds:
            self.out.last_eval = self.recorder.evaluate(state.params)
            metrics.update(self.out.last_eval)
        metrics["seconds"] = time.perf_counter() - t0
        # an infinite certified epsilon (an un-noised release) is a true statement, not divergence
        if not all(math.isfinite(v) for k, v in metrics.items()
                   if isinstance(v, float) and not k.startswith("epsilon")):
            metrics["non_finite"] = True
        self.recorder.log_round(t, metrics)
        if state.consecutive_empty >= MAX_CONSECUTIVE_EMPTY_ROUNDS:
            reason = (f"stopped after round {t + 1}: no upload arrived in {state.consecutive_empty} rounds in a "
                      "row (check the round timeout and the SuperNodes' logs)")
            self.stop("failed", reason, "empty-rounds", t)
            return False
        if t + 1 < rounds and (self.charge_ahead or (t + 1) % self.checkpoint_every == 0):
            ledger_state = self.gate.ledger.to_dict() if self.gate is not None else None
            self.checkpoint(t + 1, ledger_state, self.cohort.state_dict())
        self.recorder.progress(t + 1, rounds, metrics, time.perf_counter() - self.t_start)
        return True

    def charge_unused(self, final: bool = False) -> int:
        """Charge the server observer for uploads it received but did not aggregate."""
        seen = self.cohort.unused_uploads(final=final, emit=self.emit)
        if self.gate is None or seen is None:
            return 0
        by_round: dict[int, list[int]] = {}
        for r, c in seen:
            by_round.setdefault(int(r), []).append(int(c))
        charged = 0
        for r, clients_seen in sorted(by_round.items()):
            extra = server_charges(self.planned_server.get(r, []), clients_seen)
            if extra:
                self.gate.record(r, extra, sorted(set(clients_seen)), None)
                charged += len(set(clients_seen))
        return charged
