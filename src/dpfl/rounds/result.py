"""Typed results of a run and of a dry run: :class:`RunResult` and :class:`PrivacySummary`.

A run's privacy statement is one frozen :class:`PrivacySummary`: per observer the certified
:class:`~dpfl.privacy.accounting.certificate.Certificate` (ε, method, δ, unit, relation), the paper's
claimed ε in the paper's notion, what the certificate does not cover, and — for algorithms under
a Rényi filter — what was spent next to the guarantee. The store keeps it as JSON through
:meth:`PrivacySummary.to_dict` / :meth:`PrivacySummary.from_dict` (an infinite ε is the string
``"inf"``, written and read by the one pair :func:`json_epsilon` / :func:`epsilon_from_json` of
``privacy/accounting/certificate.py``, which the certificates, the ledger and this module all use),
so readers of stored runs never walk nested dictionaries: :meth:`PrivacySummary.of` reads a final
record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpfl.privacy.accounting.certificate import Certificate, epsilon_from_json, json_epsilon

OBSERVERS = ("server", "public")


def _claim_from_json(x: Any) -> float | dict[int, float] | None:
    if isinstance(x, dict):
        return {int(k): float(epsilon_from_json(v) or 0.0) for k, v in x.items()}
    return epsilon_from_json(x)


def _claim_to_json(x: float | dict[int, float] | None) -> Any:
    if isinstance(x, dict):
        return {str(k): json_epsilon(v) for k, v in x.items()}
    return json_epsilon(x)


def _certs_from_json(d: dict[str, Any] | None) -> dict[str, Certificate] | None:
    if not d:
        return None
    return {obs: Certificate.from_dict(c) for obs, c in d["observers"].items()}


def _certs_to_json(certs: dict[str, Certificate] | None) -> dict[str, Any] | None:
    if certs is None:
        return None
    head = max(certs.values(), key=lambda c: c.epsilon)
    return {"headline": head.to_dict(), "observers": {obs: c.to_dict() for obs, c in certs.items()}}


#: Above this certified ε a run's summary says in words what the number means.
WEAK_EPSILON = 10.0
#: Above this, it says "no meaningful protection".
NO_PROTECTION_EPSILON = 100.0


@dataclass(frozen=True)
class PrivacySummary:
    """What a run (or a dry run) certifies and what its paper claims.

    Attributes:
        certified: observer ("server", "public") → the certificate of the guarantee (None when
            no round was recorded). Under a Rényi filter this is the ex-ante budget.
        claimed_epsilon: the paper's own ε after the rounds run (a dict per client for
            personalized budgets), in the paper's notion ``claim_notion``.
        claim_notion: one line: the notion, unit and δ of the claim.
        claim_comparable: whether the claim is an (ε, δ)-DP ε comparable with the certified one.
        delta: δ of every certificate.
        not_covered: data-dependent choices the certificate does not account for.
        spent: under a Rényi filter, the composition of what happened (not a guarantee).
        certified_basis: why the guarantee is not the composition of what happened, if it is not.
        client_epsilons_rdp: observer → client id → RDP ε of the guarantee (runs of ≤ 5,000
            clients).
        client_epsilons_rdp_spent: the same for ``spent``.
        extra: further entries of the stored form, kept as they are (``"audit"``: the canary
            audit's entry, read by :attr:`audit`).
    """

    certified: dict[str, Certificate] | None
    claimed_epsilon: float | dict[int, float] | None
    claim_notion: str
    claim_comparable: bool
    delta: float
    not_covered: tuple[str, ...] = ()
    spent: dict[str, Certificate] | None = None
    certified_basis: str | None = None
    client_epsilons_rdp: dict[str, dict[int, float]] | None = None
    client_epsilons_rdp_spent: dict[str, dict[int, float]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, final: Mapping[str, Any] | None) -> PrivacySummary | None:
        """The summary a stored final record holds (its ``"privacy"`` entry).

        None when there is no final record (a run that has not ended) or no summary in it (a
        non-private algorithm, a run that failed before its first round).

        Args:
            final: a run's final record (``RunRecord.result``, ``TrainResult.final``), or None.
        """
        data = None if final is None else final.get("privacy")
        return cls.from_dict(data) if data else None

    @property
    def audit(self) -> dict[str, Any] | None:
        """The canary audit's entry (:mod:`dpfl.audit.canary`), if the run was audited."""
        audit = self.extra.get("audit")
        return audit if audit else None

    def certificate(self, observer: str) -> Certificate | None:
        """The certificate against ``observer`` (None when nothing was recorded for it).

        Args:
            observer: ``"server"`` or ``"public"``.
        """
        return None if not self.certified else self.certified.get(observer)

    @property
    def headline(self) -> Certificate | None:
        """The worst observer's certificate (None when nothing was recorded)."""
        if not self.certified:
            return None
        return max(self.certified.values(), key=lambda c: c.epsilon)

    def epsilon(self, observer: str | None = None) -> float | None:
        """Certified ε against an observer.

        Args:
            observer: ``"server"`` or ``"public"``, in any case; None: the worst of them (the
                headline).

        Raises:
            ConfigError: ``observer`` is not one the certificates name (the message lists them).
        """
        valid = tuple(self.certified) if self.certified else ("server", "public")
        if observer is not None:
            found = {o.lower(): o for o in valid}.get(observer.lower()) if isinstance(observer, str) else None
            if found is None:
                from dpfl.errors import ConfigError

                raise ConfigError(f"`observer` must be one of {', '.join(map(repr, valid))} (or None: the worst of "
                                  f"them). Found {observer!r}.")
            observer = found
        if not self.certified:
            return None
        cert = self.headline if observer is None else self.certified[observer]
        return None if cert is None else cert.epsilon

    def readings(self) -> list[str]:
        """One plain line per observer whose certified ε is too large to read as a number: what it
        means and what changes it (ε above :data:`WEAK_EPSILON`; "no meaningful protection" above
        :data:`NO_PROTECTION_EPSILON`)."""
        out: list[str] = []
        for observer, cert in (self.certified or {}).items():
            eps = cert.epsilon
            if not eps > WEAK_EPSILON:
                continue
            shown = "∞" if math.isinf(eps) else f"{eps:,.4g}"
            if eps > NO_PROTECTION_EPSILON:
                what = (f"ε = {shown} against the {observer}: no meaningful protection — the {observer} can tell "
                        "almost surely whether a client's data was used")
            else:
                what = (f"ε = {shown} against the {observer}: weak protection — the {observer}'s odds on whether a "
                        f"client's data was used can move by up to a factor e^{eps:.3g}")
            # priced as a secure sum (a lattice release is priced as a Skellam release too, but of each upload)
            secure = (any("Skellam" in note for note in cert.notes)
                      and not any("lattice release" in note for note in cert.notes))
            hidden = any("hidden participation" in note for note in cert.notes)
            if observer == "server" and not secure:
                fix = ("it sees each upload with only that client's share of the noise: secure aggregation "
                       "(`privacy.secure_aggregation: true`, DP-FedAvg) gives it only the sum; or add noise per "
                       "upload, run fewer rounds or sample clients less often")
            elif observer == "server" and not hidden:
                fix = ("it sees the secure sum but knows who took part: hidden participation "
                       "(`privacy.participation: hidden`) gives it the public's view; or add noise, run fewer "
                       "rounds or sample clients less often")
            else:
                fix = "add noise, run fewer rounds or sample clients less often"
            out.append(f"{what}; {fix}.")
        return out

    @property
    def claimed_max(self) -> float | None:
        """The claim as one number: the largest personalized budget, or the claim itself."""
        c = self.claimed_epsilon
        if isinstance(c, dict):
            return max(c.values()) if c else None
        return c

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (the shape ``final["privacy"]`` has always had)."""
        out: dict[str, Any] = {
            "claimed_epsilon": _claim_to_json(self.claimed_epsilon),
            "claim_notion": self.claim_notion,
            "certified": _certs_to_json(self.certified),
            "delta": self.delta,
            "not_covered": list(self.not_covered),
            "claim_comparable": self.claim_comparable,
        }
        if self.spent is not None:
            out["spent"] = _certs_to_json(self.spent)
        if self.certified_basis is not None:
            out["certified_basis"] = self.certified_basis
        for key, table in (("client_epsilons_rdp", self.client_epsilons_rdp),
                           ("client_epsilons_rdp_spent", self.client_epsilons_rdp_spent)):
            if table is not None:
                out[key] = {obs: {str(c): json_epsilon(e) for c, e in per.items()} for obs, per in table.items()}
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacySummary:
        """Read a stored ``final["privacy"]``.

        Args:
            data: the stored form, as :meth:`to_dict` writes it.
        """
        known = {"claimed_epsilon", "claim_notion", "certified", "delta", "not_covered", "claim_comparable",
                 "spent", "certified_basis", "client_epsilons_rdp", "client_epsilons_rdp_spent"}

        def table(x: Any) -> dict[str, dict[int, float]] | None:
            if x is None:
                return None
            return {obs: {int(c): float(epsilon_from_json(e) or 0.0) for c, e in per.items()} for obs, per in x.items()}

        certified = _certs_from_json(data.get("certified"))
        delta = data.get("delta")
        if delta is None:  # older records: the certificates carry it
            delta = next(iter(certified.values())).delta if certified else float("nan")
        return cls(
            certified=certified,
            claimed_epsilon=_claim_from_json(data.get("claimed_epsilon")),
            claim_notion=str(data.get("claim_notion", "")),
            claim_comparable=bool(data.get("claim_comparable", True)),
            delta=float(delta),
            not_covered=tuple(data.get("not_covered", ())),
            spent=_certs_from_json(data.get("spent")),
            certified_basis=data.get("certified_basis"),
            client_epsilons_rdp=table(data.get("client_epsilons_rdp")),
            client_epsilons_rdp_spent=table(data.get("client_epsilons_rdp_spent")),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def lines(self) -> list[str]:
        """Both epsilons per observer, one line each (what the CLI prints)."""
        out = []
        claim = self.claimed_max
        claim_text = "—" if claim is None else f"{claim:.4g}"
        out.append(f"claimed epsilon: {claim_text} ({self.claim_notion})")
        for kind, certs in (("certified", self.certified), ("spent", self.spent)):
            for obs in OBSERVERS:
                c = (certs or {}).get(obs)
                if c is None:
                    continue
                what = (f"{c.method}, per {c.privacy_unit}, {c.relation}" if kind == "certified"
                        else "what happened, not a guarantee")
                out.append(f"{kind} epsilon vs {obs}: {c.epsilon:.4g} at delta={c.delta:g} ({what}; {c.basis_text})")
        return out


@dataclass(frozen=True)
class RunResult:
    """What a run returns: its id and status, its rounds, final metrics and privacy summary.

    Attributes:
        run_id: the run's id (a hash of its validated config, plus a runtime tag).
        status: "finished", "stopped" (a budget or an early end), "failed" or "interrupted".
        rounds_done: rounds completed.
        final: the stored final record (metrics, ``params_sha256``, ``model_path``, ...; its
            ``"privacy"`` entry is :attr:`privacy` as JSON).
        history: per-round metrics as stored.
        stored: a result read back from the store (a finished or stopped run of the same id),
            not trained by this call: ``"<status> <UTC time> in <store>"``; None when trained now.
    """

    run_id: str
    status: str
    rounds_done: int
    final: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    stored: str | None = None

    @property
    def stored_notice(self) -> str | None:
        """One line saying the result is a stored one and how to train again (None if trained now)."""
        if self.stored is None:
            return None
        return (f"stored result of run {self.run_id} ({self.stored}), not trained again; restart=True "
                "(`dpfl run --restart`) trains it anew")

    @property
    def privacy(self) -> PrivacySummary | None:
        """The run's privacy summary (None for a non-private algorithm)."""
        return PrivacySummary.of(self.final)

    @property
    def test_accuracy(self) -> float | None:
        acc = self.final.get("test_accuracy")
        return None if acc is None else float(acc)


@dataclass(frozen=True)
class DryRunResult:
    """What ``dpfl account CONFIG`` computes: the rounds a run would make and its privacy.

    Attributes:
        rounds: rounds the run would complete (fewer than planned when a budget stops it).
        stop_reason: why it would stop early, if it would.
        privacy: the summary (None for a non-private algorithm).
        per_round: per round, the certified ε (RDP) per observer after it, if asked for.
    """

    rounds: int
    stop_reason: str | None
    privacy: PrivacySummary | None
    per_round: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "stop_reason": self.stop_reason,
                "privacy": None if self.privacy is None else self.privacy.to_dict(),
                **({"per_round": list(self.per_round)} if self.per_round else {})}
