"""The privacy ledger: per-round, per-client receipts → certified ε per client and per observer.

A run — or any program: :class:`PrivacyLedger` needs no round loop — records every round's
releases (:mod:`dpfl.privacy.releases`: who sees it, which clients it is about, the noise and the
sensitivity *actually enforced*) together with the sampling actually performed and the claimed ε
so far (computed by the caller with :mod:`.claimed`). The ledger certifies (ε at its δ) per
client and per observer:

* **server** — sees every individual upload and knows whom it sampled: no amplification by
  sampling, and client-split noise (e.g. σ/sqrt(K) per client, 004 Alg. 1) protects a client only
  at its own level σ/sqrt(K) (unless a secure aggregation hides the uploads — then the caller
  records the aggregate as the server's release: a Skellam release of the integer sum). Server
  noise added after aggregation does not protect against the server. Under *hidden
  participation* every client joins the secure sum and only a secret coin decides whether its
  update is in it: the server's release is then a broadcast (``client_ids=None``,
  ``amplifiable``, and :meth:`~dpfl.privacy.releases.Release.hidden_from_server`) amplified by the
  Poisson sample like the public's.
* **public** — sees only the broadcast global models: the aggregate's total noise against the
  aggregate's sensitivity (000 eq. 2 / 002 eq. 4.7). If the sample is secret
  (``sample_secret=True``, the default), a broadcast release (``client_ids=None``) is amplified
  by the sampler's own event and charged to every client; otherwise it is charged, unamplified,
  to the clients that took part.

The headline is the worst observer's worst client. Per-client ledgers come for free: each client
has its own receipts, so personalized noise (002's σ_k) gives each client its own ε.

**Sampling.** The ledger is constructed with the sampler the engine uses (or its ``describe()``);
every round must report the same description or :class:`PrivacyPreconditionError` is raised —
sampling and accounting cannot disagree. :meth:`PrivacyLedger.record` is the short form for a
program that feeds releases itself: the round is numbered and the sampling is the ledger's own.

**Cost policy.** The receipts are vectorized over clients (:mod:`.receipts`): a release about many
clients costs a few array operations. Certification groups the clients by release multiset and
composes once per distinct multiset: RDP ε of every distinct curve in one vectorized conversion
(dp-accounting's formula, bit for bit), PLD recomposed from the grouped events and cached per
multiset (:mod:`.composition`). :meth:`PrivacyLedger.would_exceed` and
:meth:`PrivacyLedger.within_budget` check a round before it runs (:mod:`.trials`).
:meth:`PrivacyLedger.record_round` stores an RDP certificate every round and the tightest
(RDP/PLD) one every ``pld_every`` rounds and on demand (:meth:`PrivacyLedger.certify`).

**Saved form.** :meth:`PrivacyLedger.to_dict` / :meth:`PrivacyLedger.from_dict` (replaying the
receipts), and :meth:`PrivacyLedger.charged_ahead`: the saved form with charges that are not yet
recorded (what a checkpoint holds before a round's uploads may reach the server).

This module imports nothing from dpfl except :mod:`dpfl.errors`, its siblings in
``dpfl.privacy.accounting`` and :mod:`dpfl.privacy.releases`.

References:
    000 eq. 2 and Algorithm 1; 002 eq. 4.7, 4.14, 5.32–5.33; 003 eq. 31–33; 004 Algorithm 1;
    dp_accounting RDP and PLD accountants (see :mod:`.certify`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import dp_accounting as dpa
import numpy as np
from dp_accounting import dp_event as dpe

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting import saved, trials, worst
from dpfl.privacy.accounting.certify import (
    DEFAULT_PLD_DISCRETIZATION,
    DEFAULT_RDP_ORDERS,
    Basis,
    Certificate,
    epsilon_from_rdp,
    epsilons_from_rdp,
    pld_epsilon,
    rdp_vector,
)
from dpfl.privacy.accounting.composition import (
    _amplified,
    _events_from_counts,
    _quantize_for_pld,
    _tightest,
)
from dpfl.privacy.accounting.events import (
    SCHEMA_KINDS,
    SamplerLike,
    leaves,
    pure_epsilon,
    sampled_event,
    validate_delta,
    validate_relation,
    validate_sampling,
    validate_unit,
)
from dpfl.privacy.accounting.receipts import ObserverState
from dpfl.privacy.accounting.registry import accounting_of
from dpfl.privacy.releases import OBSERVERS, Observer, Release

__all__ = ["PrivacyLedger"]


def _signature(counts: Counter[dpe.DpEvent]) -> frozenset[tuple[dpe.DpEvent, int]]:
    return frozenset(counts.items())


class PrivacyLedger:
    """Per-round, per-client privacy receipts and their certified ε (see the module docstring).

    Args:
        num_clients: total number of clients N (the sampler's population).
        sampler: the sampler the engine uses (an object with ``describe()``/``wrap_event``) or
            its description.
        delta: δ of every certificate.
        relation: "add_remove" (default) or "replace_one" — what the recorded sensitivities mean.
        privacy_unit: "client" (default) or "record" — what the enforced sensitivity protects.
        sample_secret: whether the public cannot tell who was sampled (enables amplification of
            broadcast releases).
        pld_every: compute the PLD (tightest) certificate every this many rounds (0: never
            automatically).
        pld_discretization: PLD grid step.
        rdp_orders: RDP orders.

    >>> from dpfl.privacy.releases import federated_round_releases
    >>> ledger = PrivacyLedger(num_clients=4, sampler={"kind": "all"}, delta=1e-5,
    ...                        relation="add_remove", privacy_unit="client", pld_every=0)
    >>> _ = ledger.record_round(0, federated_round_releases([0, 1, 2, 3], 4.0, 1.0, [0.25] * 4),
    ...                         sampling={"kind": "all"}, participants=[0, 1, 2, 3])
    >>> ledger.certify(method="rdp").observer
    'server'
    """

    def __init__(
        self,
        *,
        num_clients: int,
        sampler: SamplerLike | Mapping[str, Any],
        delta: float,
        relation: str = "add_remove",
        privacy_unit: str = "client",
        sample_secret: bool = True,
        pld_every: int = 10,
        pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
        rdp_orders: Sequence[float] = DEFAULT_RDP_ORDERS,
    ) -> None:
        if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
            raise ConfigError(f"`num_clients` must be a positive integer. Found {num_clients!r}.")
        self.num_clients = num_clients
        if isinstance(sampler, Mapping):
            self._sampler: SamplerLike | None = None
            descriptor = dict(sampler)
        else:
            self._sampler = sampler
            descriptor = sampler.describe()
        self.sampling = validate_sampling(descriptor, num_clients)
        self.delta = validate_delta(delta)
        self.relation = validate_relation(relation)
        self.privacy_unit = validate_unit(privacy_unit)
        self.sample_secret = bool(sample_secret)
        if isinstance(pld_every, bool) or not isinstance(pld_every, int) or pld_every < 0:
            raise ConfigError(f"`pld_every` must be an integer >= 0. Found {pld_every!r}.")
        self.pld_every = pld_every
        self.pld_discretization = float(pld_discretization)
        self.rdp_orders = tuple(float(o) for o in rdp_orders)
        self._state: dict[str, ObserverState] = {
            obs: ObserverState(len(self.rdp_orders), num_clients) for obs in OBSERVERS}
        self._version = 0  # receipts recorded so far (keys the per-client RDP cache)
        self._full_rdp_cache: dict[str, tuple[int, np.ndarray]] = {}
        self._rounds: list[dict[str, Any]] = []
        self._history: list[dict[str, Any]] = []
        # a round under "all" sampling with fewer participants than clients (dropouts)
        self._partial_rounds = False
        self._pld_cache: dict[frozenset[tuple[dpe.DpEvent, int]], float | None] = {}
        self._pld_notes: dict[frozenset[tuple[dpe.DpEvent, int]], list[str]] = {}
        # a participation schema's memory: every client's last round and number of rounds
        self._schema_last = np.full(num_clients, -(1 << 40), dtype=np.int64)
        self._schema_count = np.zeros(num_clients, dtype=np.int64)
        self._drawn_observers: set[str] = set()  # charged per participant of a drawn cohort

    # ------------------------------------------------------------------ recording

    @property
    def rounds_recorded(self) -> int:
        """Number of rounds recorded."""
        return len(self._rounds)

    @property
    def history(self) -> list[dict[str, Any]]:
        """Per-round entries: round, participants, claimed ε, certified ε per observer."""
        return [dict(h) for h in self._history]

    @property
    def claimed_epsilon(self) -> float | dict[int, float] | None:
        """The latest claimed ε passed to :meth:`record_round` (per client if given so)."""
        for record in reversed(self._rounds):
            if record["claimed_epsilon"] is not None:
                return record["claimed_epsilon"]
        return None

    def _next_round_index(self) -> int:
        """The round after the latest recorded (a late charge of an earlier round may come last)."""
        return max(int(r["round"]) for r in self._rounds) + 1 if self._rounds else 0

    def _cyclic_group(self, round_idx: int) -> int:
        """How many clients round ``round_idx`` of the cyclic min-separation schema takes."""
        d = self.sampling
        b, k = int(d["min_separation"]), d.get("max_participations")
        if k is not None and round_idx // b >= int(k):
            return 0
        return len(range(round_idx % b, self.num_clients, b))

    def _check_schema(self, round_idx: int, parts: tuple[int, ...], releases: Sequence[Release]) -> None:
        """Refuse a round that breaks the participation schema the ledger was built for
        (:mod:`dpfl.sampling.schemas`), before anything is recorded."""
        d = self.sampling
        ids = np.asarray(parts, dtype=np.int64)
        if d["kind"] == "cyclic_poisson":
            b = int(d["groups"])
            named = set(parts)
            for rel in releases:
                named.update(rel.client_ids or ())
            outside = sorted(c for c in named if c % b != round_idx % b)
            if outside:
                raise PrivacyPreconditionError(
                    f"participation schema broken: round {round_idx} samples group {round_idx % b} of {b} "
                    f"(clients i with i mod {b} = {round_idx % b}), but clients {outside[:5]} are in it.")
            group = set(range(round_idx % b, self.num_clients, b))
            for rel in releases:
                if not rel.samples_named_clients():
                    continue
                q = getattr(rel, "sample_rate", None)
                if q != d["sample_rate"] or set(rel.client_ids or ()) != group:
                    raise PrivacyPreconditionError(
                        f"an amplified release in round {round_idx} must name the whole group {round_idx % b} "
                        f"({len(group)} clients) at the schema's sample rate {d['sample_rate']:g}; it names "
                        f"{len(rel.client_ids or ())} at {q}.")
            return
        b, k = int(d["min_separation"]), d.get("max_participations")
        if d["kind"] == "min_separation":
            off_turn = ids[ids % b != round_idx % b]
            if off_turn.size:
                raise PrivacyPreconditionError(
                    f"participation schema broken: round {round_idx} of the cyclic order takes the clients i with "
                    f"i mod {b} = {round_idx % b}; client {int(off_turn[0])} is not one of them.")
        if ids.size:
            gap = round_idx - self._schema_last[ids]
            close = ids[gap < b]
            if close.size:
                c = int(close[0])
                raise PrivacyPreconditionError(
                    f"participation schema broken: client {c} took part in round {int(self._schema_last[c])} "
                    f"and again in round {round_idx}, {round_idx - int(self._schema_last[c])} rounds apart; "
                    f"the schema allows no fewer than min_separation = {b}. Nothing of round {round_idx} "
                    "was recorded.")
            if k is not None:
                over = ids[self._schema_count[ids] >= int(k)]
                if over.size:
                    raise PrivacyPreconditionError(
                        f"participation schema broken: client {int(over[0])} would take part a "
                        f"{int(self._schema_count[over[0]]) + 1}th time in round {round_idx}; the schema allows "
                        f"max_participations = {k}. Nothing of round {round_idx} was recorded.")

    def _note_schema(self, round_idx: int, parts: tuple[int, ...]) -> None:
        kind = self.sampling["kind"]
        if kind not in SCHEMA_KINDS:
            return
        if kind == "min_separation" and len(parts) < self._cyclic_group(round_idx):
            self._partial_rounds = True  # fewer arrived than the cyclic turn: conditional on who did
        if parts:
            ids = np.asarray(parts, dtype=np.int64)
            self._schema_last[ids] = np.maximum(self._schema_last[ids], round_idx)
            self._schema_count[ids] += 1

    def _check_round(
        self,
        releases: Sequence[Release],
        sampling: Mapping[str, Any] | SamplerLike,
        participants: Iterable[int],
        round_idx: int | None = None,
    ) -> tuple[int, ...]:
        described = sampling if isinstance(sampling, Mapping) else sampling.describe()
        reported = validate_sampling(described, self.num_clients)
        if reported != self.sampling:
            raise PrivacyPreconditionError(
                f"sampling mismatch: the ledger was built for the engine's sampler "
                f"{self.sampling}, but this round reports {reported}. Accounting must use the "
                "sampling the engine actually performs."
            )
        parts = tuple(sorted({int(c) for c in participants}))
        if parts and (parts[0] < 0 or parts[-1] >= self.num_clients):
            raise ConfigError(
                f"participant ids must be in [0, {self.num_clients}). Found {parts[0]}..{parts[-1]}."
            )
        if self.sampling["kind"] == "fixed_size" and len(parts) > self.sampling["num_sampled"]:
            raise PrivacyPreconditionError(
                f"{len(parts)} participants in a round, but the sampler draws "
                f"num_sampled = {self.sampling['num_sampled']}."
            )
        members = set(parts)
        for rel in releases:
            if not isinstance(rel, Release):
                raise ConfigError(f"releases must be `Release` objects. Found {type(rel).__name__}.")
            rel.check_ledger(self.relation, self.sampling["kind"])
            if rel.client_ids is not None and not rel.samples_named_clients() \
                    and not members.issuperset(rel.client_ids):
                extra = sorted(set(rel.client_ids) - members)[:5]
                raise PrivacyPreconditionError(
                    f"a {rel.observer} release names clients {extra} that are not among this "
                    "round's participants."
                )
        if self.sampling["kind"] in SCHEMA_KINDS:
            t = self._next_round_index() if round_idx is None else int(round_idx)
            # a late charge of an earlier round (uploads that arrived after it was recorded): its cohort
            # was checked when that round was planned; only new rounds are checked against the schema
            if t >= self._next_round_index():
                self._check_schema(t, parts, releases)
        return parts

    def _targets(
        self, release: Release, participants: tuple[int, ...]
    ) -> tuple[dpe.DpEvent | None, Sequence[int], dpe.DpEvent]:
        """(event for the shared stream or None, clients charged individually, their event)."""
        event = release.event()
        if release.client_ids is not None:
            return None, release.client_ids, event
        hidden_from_server = release.observer == "server" and release.amplifiable and release.hidden_from_server()
        if (release.observer == "public" and self.sample_secret) or hidden_from_server:
            if self.sampling["kind"] != "all" and not (release.amplifiable and self.privacy_unit == "client"):
                raise PrivacyPreconditionError(
                    f"a broadcast cannot be amplified by the secret {self.sampling['kind']} client sample "
                    f"unless the clients are interchangeable and the privacy unit is a client (here: "
                    f"{self.privacy_unit}); record it per participant (dpfl.privacy.accounting.broadcast)."
                )
            if self._sampler is not None:
                return self._sampler.wrap_event(event, self.num_clients), (), event
            return sampled_event(event, self.sampling, self.num_clients), (), event
        # a broadcast whose cohort is known to the observer: charged to those who took part
        return None, participants, event

    def _apply(self, releases: Sequence[Release], participants: tuple[int, ...]) -> None:
        for rel in releases:
            if rel.client_ids and not rel.samples_named_clients():
                self._drawn_observers.add(rel.observer)
            st = self._state[rel.observer]
            shared, clients, event = self._targets(rel, participants)
            if shared is not None and not isinstance(shared, dpa.NoOpDpEvent):
                st.shared_counts[shared] += 1
                st.shared_rdp += rdp_vector(shared, self.relation, self.rdp_orders)
            if clients and not isinstance(event, dpa.NoOpDpEvent):
                st.charge(clients, event, rdp_vector(event, self.relation, self.rdp_orders))
        self._version += 1

    def _note_participation(self, parts: tuple[int, ...]) -> None:
        """Without client sampling, a round with fewer participants than clients (dropouts)
        makes per-participant figures conditional on who arrived."""
        if len(parts) < self.num_clients and self.sampling["kind"] == "all":
            self._partial_rounds = True

    def record(
        self,
        releases: Sequence[Release],
        *,
        participants: Iterable[int] | None = None,
        claimed_epsilon: float | Mapping[int, float] | None = None,
    ) -> dict[str, Any]:
        """Record the next round's releases under the ledger's own sampling; returns its entry.

        The short form of :meth:`record_round` for a program outside dpfl's round loop (a Flower
        strategy, a script): the round is numbered after the last one recorded, and
        ``participants`` defaults to every client a release names.

        >>> from dpfl.privacy import GaussianRelease, PrivacyLedger
        >>> ledger = PrivacyLedger(num_clients=10, sampler={"kind": "all"}, delta=1e-5, pld_every=0)
        >>> _ = ledger.record([GaussianRelease("public", noise_std=2.0, sensitivity=1.0,
        ...                                    client_ids=range(10))])
        >>> round(ledger.certify("public").epsilon, 3)
        1.993
        """
        if participants is None:
            named: set[int] = set()
            for rel in releases:
                named.update(rel.client_ids or ())
            participants = sorted(named)
        return self.record_round(self.rounds_recorded, releases, sampling=self.sampling,
                                 participants=participants, claimed_epsilon=claimed_epsilon)

    def record_round(
        self,
        round_idx: int,
        releases: Sequence[Release],
        *,
        sampling: Mapping[str, Any] | SamplerLike,
        participants: Iterable[int],
        claimed_epsilon: float | Mapping[int, float] | None = None,
        certify_round: bool = True,
    ) -> dict[str, Any]:
        """Record one round's releases; returns the round's history entry.

        ``certify_round=False`` skips the entry's per-round certificate (a dry run only needs
        the final one; the receipts recorded are the same).

        Args:
            round_idx: the round number.
            releases: what each observer saw (see :func:`federated_round_releases`).
            sampling: the sampler that drew this round's cohort (or its ``describe()``); must
                equal the ledger's.
            participants: the clients whose data entered this round (after dropouts).
            claimed_epsilon: the paper's claimed ε so far (one number, or per client).

        Raises:
            PrivacyPreconditionError: sampling mismatch, a release about a non-participant, or
                more participants than the sampler draws.
        """
        parts = self._check_round(releases, sampling, participants, round_idx)
        claimed: float | dict[int, float] | None
        if claimed_epsilon is None:
            claimed = None
        elif isinstance(claimed_epsilon, Mapping):
            claimed = {int(k): float(v) for k, v in claimed_epsilon.items()}
        else:
            claimed = float(claimed_epsilon)
        self._apply(releases, parts)
        self._note_participation(parts)
        self._note_schema(int(round_idx), parts)
        self._rounds.append(
            {
                "round": int(round_idx),
                "participants": list(parts),
                "releases": [r.to_dict() for r in releases],
                "claimed_epsilon": claimed,
            }
        )
        entry: dict[str, Any] = {
            "round": int(round_idx),
            "num_participants": len(parts),
            "claimed_epsilon": claimed,
        }
        if certify_round:
            entry["certified_rdp"] = {obs: self._worst_rdp(obs)[0] for obs in OBSERVERS}
        if certify_round and self.pld_every and len(self._rounds) % self.pld_every == 0:
            best = {obs: self.certify(obs).to_dict() for obs in OBSERVERS}
            entry["certified"] = best
        self._history.append(entry)
        return dict(entry)

    # ------------------------------------------------------------------ RDP

    def _eps(self, rdp: np.ndarray) -> float:
        if not np.any(rdp):
            return 0.0
        return epsilon_from_rdp(self.rdp_orders, rdp, self.delta)

    def _eps_rows(self, rdp: np.ndarray) -> np.ndarray:
        """:meth:`_eps` of every row of ``rdp`` at once (the same numbers)."""
        return epsilons_from_rdp(self.rdp_orders, rdp, self.delta)

    def _worst_rdp(self, observer: str) -> tuple[float, int | None]:
        """(worst client's RDP ε, that client's id or None when every client is alike)."""
        st = self._state[observer]
        return worst.worst_rdp(self, st.shared_rdp, st.rows[: st.n], st.ids)

    def client_epsilons(self, observer: Observer, method: Literal["rdp", "best"] = "rdp") -> dict[int, float]:
        """Certified ε of every client that has its own receipts, against ``observer``.

        Clients without their own receipts have the shared (broadcast) ε: ``certify(observer,
        client_id=None)`` when nobody has receipts, else see :meth:`certify`.
        """
        self._check_observer(observer)
        return worst.client_epsilons(self, observer, method)

    # ------------------------------------------------------------------ certificates

    @staticmethod
    def _check_observer(observer: str) -> None:
        if observer not in OBSERVERS:
            raise ConfigError(f"`observer` must be one of {list(OBSERVERS)}. Found {observer!r}.")

    def _pld_for(self, counts: Counter[dpe.DpEvent]) -> tuple[float | None, list[str]]:
        sig = _signature(counts)
        if sig not in self._pld_cache:
            grouped, notes = _quantize_for_pld(counts)
            eps, more = pld_epsilon(
                _events_from_counts(grouped), self.delta, self.relation, self.pld_discretization
            )
            notes += more
            if len(self._pld_cache) > 4096:
                self._pld_cache.clear()
                self._pld_notes.clear()
            self._pld_cache[sig] = eps
            self._pld_notes[sig] = notes
        return self._pld_cache[sig], list(self._pld_notes[sig])


    def _pure(self, observer: str, cid: int | None, row: int | None) -> float | None:
        """The pure-composition bound of ``cid``'s receipts (:func:`.events.pure_epsilon`); the
        receipts are composed only when they may all be pure DP (else the None it returns)."""
        st = self._state[observer]
        kinds = st.row_kinds(row)
        if "none" in kinds and "zero" not in kinds:
            return None
        return pure_epsilon(_events_from_counts(st.to_counts(cid)))

    @staticmethod
    def _relation_notes(counts: Counter[dpe.DpEvent]) -> list[str]:
        """The narrower neighbouring relations the registered mechanisms among ``counts`` hold for."""
        found = (accounting_of(leaf) for event in counts for leaf, _ in leaves(event))
        return list(dict.fromkeys(f"relation: {r.relation_note}" for r in found if r is not None and r.relation_note))

    def _certificate(self, observer: str, cid: int | None, method: str) -> Certificate:
        st = self._state[observer]
        rdp = st.shared_rdp.copy()
        row = st.row_of(cid)
        if row is not None:
            rdp = rdp + st.rows[row]
        eps_rdp = self._eps(rdp)
        has_receipts = row is not None or bool(st.shared_counts)
        notes: list[str] = []
        eps_pld: float | None = None
        if method == "best" and has_receipts:
            eps_pld, notes = self._pld_for(st.to_counts(cid))
        eps_pure = self._pure(observer, cid, row) if has_receipts else 0.0
        eps, best = _tightest(eps_pld, eps_rdp, eps_pure)
        if not has_receipts:
            eps, best = 0.0, "rdp"
        who = "every client" if cid is None else f"client {cid}"
        notes.insert(0, f"{who}; {self.rounds_recorded} rounds recorded")
        if has_receipts:
            notes += self._relation_notes(st.to_counts(cid))
        # a cyclic schedule is fixed in advance: per-participant charges at it are ex ante; so are
        # cyclic Poisson's group charges (every member charged, sampled or not)
        kind = self.sampling["kind"]
        sampled = kind not in ("all", "min_separation") and not (
            kind == "cyclic_poisson" and observer not in self._drawn_observers)
        if observer == "public" and any(_amplified(e, self.relation) for e in st.shared_counts):
            notes.append("broadcast releases amplified by the secret client sample")
        # What the figure is conditional on. Receipts charged per participant name the rounds a
        # client took part in: under client sampling (or when some rounds had fewer participants
        # than clients — arrivals after dropouts) every figure of that observer, a client's who
        # was never drawn included (its 0 holds only for these cohorts), is conditional on the
        # cohorts drawn. Shared receipts alone are events of the secret schedule (amplified, or
        # charged to every client whatever the sample): ex ante. An observer charged nothing at all
        # (every cohort it could have seen was empty: none drawn, or none arrived) holds its 0 only
        # for those cohorts, too.
        per_participant = st.n > 0 or (self.rounds_recorded > 0 and not st.shared_counts)
        basis: Basis = "given-cohorts" if per_participant and (sampled or self._partial_rounds) else "ex-ante"
        if observer == "server" and any(_amplified(e, self.relation) for e in st.shared_counts):
            notes.append("hidden participation: the server sees only the secure sum of every client's masked "
                         "upload, amplified by each client's secret coin")
        elif observer == "server":
            notes.append("the server knows whom it sampled: no sampling amplification")
        return Certificate(
            epsilon=eps,
            delta=self.delta,
            method=best,  # type: ignore[arg-type]
            observer=observer,
            privacy_unit=self.privacy_unit,
            relation=self.relation,
            epsilon_rdp=eps_rdp,
            epsilon_pld=eps_pld,
            epsilon_pure=eps_pure if has_receipts else None,
            notes=tuple(dict.fromkeys(notes)),
            basis=basis,
        )

    def certify(
        self,
        observer: Observer | None = None,
        client_id: int | None = None,
        method: Literal["rdp", "best"] = "best",
    ) -> Certificate:
        """Certified ε at the ledger's δ.

        Args:
            observer: "server", "public", or ``None`` for the headline (worst observer).
            client_id: a client, or ``None`` for the worst client.
            method: "rdp" (fast) or "best" (tightest of RDP, PLD and pure composition).

        Returns:
            the certificate; for ``client_id=None`` it is the worst client's.
        """
        if method not in ("rdp", "best"):
            raise ConfigError(f"`method` must be 'rdp' or 'best'. Found {method!r}.")
        if observer is None:
            certs = [self.certify(obs, client_id, method) for obs in OBSERVERS]
            return max(certs, key=lambda c: c.epsilon)
        self._check_observer(observer)
        if client_id is not None:
            return self._certificate(observer, int(client_id), method)
        return worst.worst_certificate(self, observer, method)

    def certify_all(self, method: Literal["rdp", "best"] = "best") -> dict[str, Any]:
        """Headline and per-observer certificates as a JSON-serializable dict."""
        per = {obs: self.certify(obs, None, method) for obs in OBSERVERS}
        head = max(per.values(), key=lambda c: c.epsilon)
        return {
            "headline": head.to_dict(),
            "observers": {obs: c.to_dict() for obs, c in per.items()},
        }

    # ------------------------------------------------------------------ target ε

    def would_exceed(
        self,
        next_round_releases: Sequence[Release],
        target_epsilon: float,
        *,
        participants: Iterable[int] | None = None,
        method: Literal["rdp", "best"] = "rdp",
        observer: Observer | None = None,
    ) -> bool:
        """Whether recording these releases would take the headline certified ε above the target
        (``observer``: that observer's certified ε instead of the headline's worst observer).

        Call it after sampling the next cohort and before training it; if it returns True, stop
        (the run ends before the round that would exceed ``target_epsilon``). Nothing is recorded.

        Args:
            next_round_releases: the releases the next round would make.
            target_epsilon: the run's target certified ε.
            participants: the next round's cohort (default: every client named in a release).
            method: "rdp" (default: fast; conservative — may stop earlier than PLD would) or
                "best".
            observer: "server", "public", or None (the worst of them).
        """
        if observer is not None:
            self._check_observer(observer)
        if not isinstance(target_epsilon, (int, float)) or not target_epsilon > 0:
            raise ConfigError(f"`target_epsilon` must be > 0. Found {target_epsilon!r}.")
        if participants is None:
            named: set[int] = set()
            for rel in next_round_releases:
                named.update(rel.client_ids or ())
            participants = sorted(named)
        parts = self._check_round(next_round_releases, self.sampling, participants)
        if method == "best":
            trial = self._clone()
            trial.pld_every = 0
            trial.record_round(self._next_round_index(), next_round_releases, sampling=self.sampling,
                               participants=parts, certify_round=False)
            return bool(trial.certify(observer, None, "best").epsilon > target_epsilon)
        return any(trials.exceeds(self, *trials.trial_curves(self, obs, next_round_releases, parts), target_epsilon)
                   for obs in ((observer,) if observer else OBSERVERS))


    def trial_epsilons(self, next_round_releases: Sequence[Release], *,
                       participants: Iterable[int]) -> dict[str, tuple[float, float]]:
        """Per observer, (certified ε now, certified ε were these releases recorded): RDP, worst
        client — the figures :meth:`would_exceed` compares with a target (read-only: nothing is
        recorded). What a stop before a round can say it would have cost."""
        parts = self._check_round(next_round_releases, self.sampling, participants)
        out: dict[str, tuple[float, float]] = {}
        for obs in OBSERVERS:
            st = self._state[obs]
            now = worst.worst_rdp(self, st.shared_rdp, st.rows[: st.n], st.ids)[0] if self.rounds_recorded else 0.0
            after = worst.worst_rdp(self, *trials.trial_curves(self, obs, next_round_releases, parts))[0]
            out[obs] = (float(now), float(after))
        return out

    def _clone(self) -> PrivacyLedger:
        """A copy of the receipts, configuration and sampler (what :meth:`from_dict` of
        :meth:`to_dict` rebuilds, without replaying), with its own PLD cache; no history."""
        trial = PrivacyLedger.__new__(PrivacyLedger)
        trial.__dict__.update(self.__dict__)
        trial._state = {obs: st.copy() for obs, st in self._state.items()}
        trial._rounds = list(self._rounds)
        trial._history = []
        trial._pld_cache, trial._pld_notes = {}, {}
        trial._full_rdp_cache = {}
        trial._schema_last, trial._schema_count = self._schema_last.copy(), self._schema_count.copy()
        trial._drawn_observers = set(self._drawn_observers)
        return trial


    # ------------------------------------------------------------------ Rényi filter

    def within_budget(self, budget: PrivacyLedger, next_round_releases: Sequence[Release], *,
                      participants: Iterable[int]) -> bool:
        """Whether, after these releases, every client's RDP curve stays at or below its curve in
        ``budget`` at *every* order, for every observer (a Rényi filter).

        A run whose noise is chosen adaptively (from the data) has a valid ex-ante guarantee when
        it halts before any order of its composed RDP would exceed a budget fixed before the run:
        then it is (α, B(α))-RDP at every order α of the budget (Feldman & Zrnic 2021, Theorem 3.1
        with the privacy filter of Definition 3.2, applied order by order), and the budget's ε is
        a guarantee. Nothing is recorded.

        References:
            V. Feldman, T. Zrnic, "Individual Privacy Accounting via a Rényi Filter", NeurIPS 2021.
        """
        if budget.num_clients != self.num_clients or budget.rdp_orders != self.rdp_orders:
            raise ConfigError("a budget ledger must have the run's clients and RDP orders.")
        parts = self._check_round(next_round_releases, self.sampling, participants)
        for obs in OBSERVERS:
            spent = trials.full_rdp(self, *trials.trial_curves(self, obs, next_round_releases, parts))
            allowed = trials.recorded_full_rdp(budget, obs)
            if np.any(spent > allowed * (1 + 1e-9) + 1e-12):
                return False
        return True

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable state (configuration, every round's receipts, history)."""
        return saved.to_saved(self)

    def charged_ahead(self, charges: Iterable[tuple[int, Sequence[int], Sequence[Release]]]) -> dict[str, Any]:
        """:meth:`to_dict` with ``charges`` appended as recorded rounds, leaving this ledger as it is:
        what a checkpoint holds while uploads that are not recorded yet may reach an observer (a
        run restored from it has paid for them). ``charges``: (round, clients, releases) each."""
        state = self.to_dict()
        for round_idx, clients, releases in charges:
            state["rounds"].append({"round": int(round_idx), "participants": sorted(int(c) for c in clients),
                                    "claimed_epsilon": None, "releases": [r.to_dict() for r in releases]})
        return state

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], sampler: SamplerLike | None = None) -> PrivacyLedger:
        """Rebuild a ledger from :meth:`to_dict` (replays the receipts; no PLD is recomputed).

        Args:
            data: the stored state.
            sampler: the engine's sampler, checked against the stored description.
        """
        return saved.from_saved(cls, data, sampler)
