"""The vectorized ledger certifies, per client and per observer, what composing that client's own
receipts directly gives — rebuilt here from the releases as generated, not from the ledger.

Random rounds mix every release kind DP-FedAvg and the other algorithms record: Gaussian uploads
naming their clients, amplified Gaussian broadcasts, Skellam sums (named, or hidden from the
server in a secret Poisson sample and amplified), two-point (pure ε-DP) reports, DP-SGD steps
(Poisson-subsampled Gaussians per record) and, rarely, a release without noise. Each client's
reference receipts are: every release naming it, and every amplified broadcast wrapped in
``PoissonSampledDpEvent(q, ·)`` (charged to every client). The reference prices them with
dp-accounting's RDP accountant composing the events directly (the Skellam curve, which
dp-accounting lacks, from :func:`skellam_rdp_vector` of each release, summed), dp-accounting's
``compute_epsilon``, the PLD of the composed events and the pure sum Σ ε when every receipt is
randomized response (else no pure bound). The ledger must agree for every client, for the
worst client, after a ``to_dict``/JSON/``from_dict`` round trip, after resuming mid-run, and with
the dense count matrix dropped (receipts grouped from the log).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS, pld_epsilon
from dpfl.privacy.accounting.events import compose, neighboring_relation
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import (
    ExactRelease,
    GaussianRelease,
    Release,
    SampledGaussianRelease,
    SkellamRelease,
    TwoPointRelease,
)
from dpfl.privacy.releases.skellam import SkellamDpEvent, is_skellam, skellam_rdp_vector
from dpfl.privacy.releases.skellam_gdp import certified_unit_eta

DELTA = 1e-5
Q = 0.3
ORDERS = np.asarray(DEFAULT_RDP_ORDERS)


def _random_round(rng: random.Random, n: int, relation: str,
                  profile: dict[str, bool]) -> tuple[list[int], list[Release]]:
    """One round: add/remove (Poisson q) mixes Gaussians, Skellam sums and DP-SGD steps;
    replace-one (every client) mixes Gaussians and two-point reports (randomized response is
    priced under replace-one only, Skellam and DP-SGD steps under add/remove only)."""
    add_remove = relation == "add_remove"
    parts = sorted(c for c in range(n) if rng.random() < (0.6 if add_remove else 1.0))
    rel: list[Release] = []

    def some() -> list[int]:
        return sorted(rng.sample(parts, rng.randint(1, len(parts))))

    if profile["public_gaussian"] and rng.random() < 0.7:
        rel.append(Release.gaussian("public", rng.choice([1.5, 2.0, 3.0]), 1.0, None, amplifiable=add_remove))
    if add_remove and profile["public_skellam"] and rng.random() < 0.5:
        rel.append(SkellamRelease("public", rng.choice([400.0, 900.0]), 10.0, 30.0, None, amplifiable=True))
    if add_remove and profile["hidden_server"] and rng.random() < 0.5:
        rel.append(SkellamRelease("server", rng.choice([300.0, 700.0]), 10.0, 30.0, None, amplifiable=True))
    if not add_remove and profile["hidden_server"] and rng.random() < 0.3:
        rel.append(Release.gaussian("server", 4.0, 1.0, None))  # a broadcast the server sees too
    if parts:
        if rng.random() < 0.5:
            rel.append(Release.gaussian("server", rng.choice([0.8, 1.2, 2.0]), rng.choice([1.0, 2.0]), some()))
        if add_remove and rng.random() < 0.4:
            rel.append(SkellamRelease("server", rng.choice([250.0, 500.0]), 10.0, 30.0, some()))
        if add_remove and rng.random() < 0.3:
            rel.append(SampledGaussianRelease("server", rng.choice([1.0, 1.5]), 0.1, rng.choice([2, 5]), some()))
        if not add_remove and rng.random() < 0.7:
            rel.append(Release.two_point("server", rng.choice([0.25, 0.5, 1.0]), rng.choice([1, 3]), some()))
        if not add_remove and rng.random() < 0.3:
            rel.append(Release.two_point("public", 0.5, 2, some()))
        if profile["exact"] and rng.random() < 0.1:
            rel.append(Release.exact(rng.choice(["server", "public"]), [rng.choice(parts)]))
    rng.shuffle(rel)
    return parts, rel


def _rounds(seed: int, n: int, count: int) -> tuple[str, list[tuple[list[int], list[Release]]]]:
    rng = random.Random(seed)
    relation = "add_remove" if seed % 2 == 0 else "replace_one"
    profile = {k: rng.random() < 0.5 for k in ("public_gaussian", "public_skellam", "hidden_server", "exact")}
    return relation, [_random_round(rng, n, relation, profile) for _ in range(count)]


def _sampling(relation: str) -> dict[str, Any]:
    return {"kind": "poisson", "sample_rate": Q} if relation == "add_remove" else {"kind": "all"}


def _ledger(n: int, relation: str) -> PrivacyLedger:
    return PrivacyLedger(num_clients=n, sampler=_sampling(relation), delta=DELTA, relation=relation,
                         privacy_unit="client", pld_every=0, pld_discretization=1e-2)


def _record(ledger: PrivacyLedger, rounds: list[tuple[list[int], list[Release]]], start: int = 0) -> None:
    for t, (parts, rel) in enumerate(rounds, start=start):
        ledger.record_round(t, rel, sampling=ledger.sampling, participants=parts, certify_round=False)


def _reference_receipts(rounds: list[tuple[list[int], list[Release]]], n: int,
                        relation: str) -> dict[str, list[list[Any]]]:
    """Per observer, per client: the events charged, in order (a broadcast to every client:
    amplified by the Poisson sample under add/remove, as is under "all" sampling)."""
    out: dict[str, list[list[Any]]] = {obs: [[] for _ in range(n)] for obs in ("server", "public")}
    for _, rel in rounds:
        for r in rel:
            event = r.event()
            if r.client_ids is not None:
                for c in r.client_ids:
                    out[r.observer][c].append(event)
            else:
                shared = dpa.PoissonSampledDpEvent(Q, event) if relation == "add_remove" else event
                for c in range(n):
                    out[r.observer][c].append(shared)
    return out


def _reference_rdp(events: list[Any], relation: str) -> np.ndarray:
    curve = np.zeros(len(ORDERS))
    rest = []
    for e in events:
        if isinstance(e, dpa.NonPrivateDpEvent):
            return np.full(len(ORDERS), np.inf)
        if is_skellam(e):
            curve = curve + skellam_rdp_vector(e, relation, DEFAULT_RDP_ORDERS)
        else:
            rest.append(e)
    if rest:
        acc = rdp_acc.RdpAccountant(list(DEFAULT_RDP_ORDERS), neighboring_relation(relation))
        for e in rest:  # one at a time, in the order received: the direct composition
            acc.compose(e)
        curve = curve + np.asarray(acc._rdp)
    return curve


def _dominating(event: Any) -> Any:
    """A Skellam receipt (bare, Poisson-sampled, self-composed) as the Gaussian one whose PLD
    dominates it: noise multiplier 1/(η̄·Δ2), η̄ the certified unit-shift GDP parameter."""
    if isinstance(event, dpa.SelfComposedDpEvent):
        return dpa.SelfComposedDpEvent(_dominating(event.event), event.count)
    if isinstance(event, dpa.PoissonSampledDpEvent):
        return dpa.PoissonSampledDpEvent(event.sampling_probability, _dominating(event.event))
    if isinstance(event, SkellamDpEvent):
        cert = certified_unit_eta(event.variance)
        assert cert is not None
        return dpa.GaussianDpEvent(1.0 / (cert.eta * event.l2_sensitivity))
    return event


def _reference_eps(events: list[Any], relation: str, with_pld: bool) -> tuple[float, float | None, float]:
    """(RDP ε, pure ε or None, tightest ε) of one client's receipts."""
    if not events:
        return 0.0, 0.0, 0.0
    curve = _reference_rdp(events, relation)
    eps_rdp = float(rdp_acc.compute_epsilon(ORDERS, curve, DELTA)[0]) if np.any(curve) else 0.0
    pure: float | None = 0.0
    for e in events:
        leaf = e.event if isinstance(e, dpa.SelfComposedDpEvent) else e
        if not isinstance(leaf, dpa.RandomizedResponseDpEvent):
            pure = None
            break
        eps_leaf = math.log((1 - leaf.noise_parameter / 2) / (leaf.noise_parameter / 2))
        pure += eps_leaf * (e.count if isinstance(e, dpa.SelfComposedDpEvent) else 1)
    best = min(eps_rdp, pure) if pure is not None else eps_rdp
    if with_pld and (relation == "add_remove" or not any(is_skellam(e) for e in events)):
        # a Skellam receipt by its dominating Gaussian pair (docs/proofs/skellam-gdp.md), mapped here
        eps_pld, _ = pld_epsilon(compose([_dominating(e) for e in events]), DELTA, relation, 1e-2)
        if eps_pld is not None:
            best = min(best, eps_pld)
    return eps_rdp, pure, best


def _close(a: float, b: float, rel: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def _check(ledger: PrivacyLedger, ref: dict[str, list[list[Any]]], with_pld: bool) -> None:
    n, relation = ledger.num_clients, ledger.relation
    for obs in ("server", "public"):
        rdp_table = ledger.client_epsilons(obs, "rdp")  # type: ignore[arg-type]
        worst_rdp_or_pure = 0.0
        worst_best = 0.0
        for c in range(n):
            eps_rdp, pure, best = _reference_eps(ref[obs][c], relation, with_pld)
            cert = ledger.certify(obs, c, "rdp")  # type: ignore[arg-type]
            assert _close(cert.epsilon_rdp, eps_rdp, 1e-9), (obs, c, cert.epsilon_rdp, eps_rdp)
            if c in rdp_table:
                assert _close(rdp_table[c], eps_rdp, 1e-9), (obs, c)
            if not ref[obs][c]:  # no receipts: ε = 0, no pure figure
                assert cert.epsilon == 0.0 and cert.epsilon_pure is None, (obs, c)
            elif pure is None:
                assert cert.epsilon_pure is None, (obs, c, cert.epsilon_pure)
            else:
                assert cert.epsilon_pure is not None and _close(cert.epsilon_pure, pure, 1e-9), (obs, c)
            want = min(eps_rdp, pure) if pure is not None else eps_rdp
            assert _close(cert.epsilon, want, 1e-9), (obs, c, cert.epsilon, want)
            worst_rdp_or_pure = max(worst_rdp_or_pure, want)
            if with_pld:
                got = ledger.certify(obs, c, "best").epsilon  # type: ignore[arg-type]
                # the PLD may compose in another order: equal up to its discretization's rounding
                assert _close(got, best, 1e-6), (obs, c, got, best)
                worst_best = max(worst_best, best)
        if with_pld:
            assert _close(ledger.certify(obs, None, "best").epsilon, worst_best, 1e-6), obs  # type: ignore[arg-type]
        got = ledger.certify(obs, None, "rdp").epsilon  # type: ignore[arg-type]
        assert got >= worst_rdp_or_pure or _close(got, worst_rdp_or_pure, 1e-9), (obs, got, worst_rdp_or_pure)


@pytest.mark.parametrize("seed", range(16))
def test_every_client_and_observer_is_its_own_direct_recomposition(seed: int) -> None:
    n = 5
    relation, rounds = _rounds(seed, n, 10)
    ledger = _ledger(n, relation)
    _record(ledger, rounds)
    _check(ledger, _reference_receipts(rounds, n, relation), with_pld=seed < 6)


# seeds 100 and 102 draw the longest rounds (20 s and 14 s on 2 cores) and run under -m slow; seeds 101 and
# 103-105 take the same paths (JSON restore, mid-run resume, dense matrix dropped) in the default suite, ~1 s each
@pytest.mark.parametrize("seed", [pytest.param(100, marks=pytest.mark.slow), 101,
                                  pytest.param(102, marks=pytest.mark.slow), 103, 104, 105])
def test_restored_and_resumed_ledgers_certify_the_same(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 5
    relation, rounds = _rounds(seed, n, 12)
    ref = _reference_receipts(rounds, n, relation)
    # restored after the whole run, through JSON
    whole = _ledger(n, relation)
    _record(whole, rounds)
    _check(PrivacyLedger.from_dict(json.loads(json.dumps(whole.to_dict()))), ref, with_pld=False)
    # resumed mid-run from a stored ledger, the rest recorded on the restored one
    half = _ledger(n, relation)
    _record(half, rounds[:5])
    resumed = PrivacyLedger.from_dict(json.loads(json.dumps(half.to_dict())))
    _record(resumed, rounds[5:], start=5)
    _check(resumed, ref, with_pld=False)
    # the receipts grouped from the log alone, the dense count matrix dropped mid-run
    from dpfl.privacy.accounting import receipts as ledger_mod

    monkeypatch.setattr(ledger_mod, "_DENSE_MAX_CELLS", 40)
    logged = _ledger(n, relation)
    _record(logged, rounds)
    assert logged._state["server"].dense is None or logged._state["public"].dense is None
    _check(logged, ref, with_pld=False)


@pytest.mark.parametrize("seed", range(200, 206))
def test_checking_a_round_agrees_with_the_reference_after_it(seed: int) -> None:
    """``would_exceed`` (RDP) before the round answers whether the reference worst RDP ε after
    it exceeds the target, just below and just above that value; nothing is recorded."""
    n = 5
    relation, rounds = _rounds(seed, n, 9)
    ledger = _ledger(n, relation)
    _record(ledger, rounds[:8])
    parts, nxt = rounds[8]
    ref = _reference_receipts(rounds, n, relation)
    checked = 0
    for obs in ("server", "public"):
        after = max(_reference_eps(ref[obs][c], relation, False)[0] for c in range(n))
        if not (math.isfinite(after) and after > 0):
            continue
        assert ledger.would_exceed(nxt, after * (1 - 1e-7), participants=parts, observer=obs)  # type: ignore[arg-type]
        assert not ledger.would_exceed(nxt, after * (1 + 1e-7), participants=parts, observer=obs)  # type: ignore[arg-type]
        checked += 1
    assert ledger.rounds_recorded == 8
    assert checked


def test_the_random_rounds_cover_every_kind_and_both_pure_cases() -> None:
    kinds: Counter[str] = Counter()
    pure_only = mixed = 0
    for seed in range(16):
        relation, rounds = _rounds(seed, 5, 10)
        for _, rel in rounds:
            for r in rel:
                hidden = isinstance(r, SkellamRelease) and r.client_ids is None and r.observer == "server"
                kinds[type(r).__name__ + ("-hidden" if hidden else "")] += 1
        ref = _reference_receipts(rounds, 5, relation)
        for c in range(5):
            evs = ref["server"][c]
            has_rr = any(isinstance(e.event if isinstance(e, dpa.SelfComposedDpEvent) else e,
                                    dpa.RandomizedResponseDpEvent) for e in evs)
            if has_rr and _reference_eps(evs, relation, False)[1] is not None:
                pure_only += 1
            elif has_rr:
                mixed += 1
    for name in (GaussianRelease, SkellamRelease, TwoPointRelease, SampledGaussianRelease, ExactRelease):
        assert kinds[name.__name__] > 0, name
    assert kinds["SkellamRelease-hidden"] > 0
    assert pure_only > 0 and mixed > 0, (pure_only, mixed)
