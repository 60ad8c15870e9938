"""The worst client of an observer: the search behind a ledger's headline certificate.

Certification groups the clients by release multiset (:mod:`.receipts`) and prices each distinct
multiset once; the worst client is found from the RDP curves first (a client whose curve
dominates every other's is the worst), and the tightest (PLD) figures are computed only for
histories whose RDP-or-pure bound can still be the worst.

This module imports nothing from dpfl except its siblings in ``dpfl.privacy.accounting``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpfl.privacy.accounting.certify import Certificate
from dpfl.privacy.accounting.composition import _tightest
from dpfl.privacy.accounting.ledger_view import LedgerView

__all__ = ["client_epsilons", "rdp_bounds", "worst_certificate", "worst_rdp"]


def worst_rdp(ledger: LedgerView, shared: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> tuple[float, int | None]:
    """(worst RDP ε over clients whose own curves are ``rows`` on top of ``shared``, its client)."""
    if rows.shape[0] == 0:
        return ledger._eps(shared), None
    top = rows.max(axis=0)
    dominant = np.flatnonzero(np.all(rows == top, axis=1))
    if dominant.size:
        return ledger._eps(top + shared), int(ids[int(dominant[0])])
    uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
    eps = ledger._eps_rows(uniq + shared)
    k = int(np.argmax(eps))
    who = int(ids[int(np.flatnonzero(inverse.reshape(-1) == k)[0])])
    return float(eps[k]), who


def rdp_bounds(ledger: LedgerView, observer: str, who: Sequence[int | None]) -> list[float]:
    """``ledger._certificate(observer, cid, "rdp").epsilon`` for every ``cid`` of ``who`` (the
    smaller of the RDP and pure bounds), the RDP ε of all of them in one conversion."""
    st = ledger._state[observer]
    curves = np.tile(st.shared_rdp, (len(who), 1))
    rows = [st.row_of(cid) for cid in who]
    for i, row in enumerate(rows):
        if row is not None:
            curves[i] = st.shared_rdp + st.rows[row]
    eps_rdp = ledger._eps_rows(curves)
    out: list[float] = []
    for i, cid in enumerate(who):
        if rows[i] is None and not st.shared_counts:  # no receipts at all
            out.append(0.0)
            continue
        out.append(_tightest(None, float(eps_rdp[i]), ledger._pure(observer, cid, rows[i]))[0])
    return out


def client_epsilons(ledger: LedgerView, observer: str, method: str = "rdp") -> dict[int, float]:
    """:meth:`PrivacyLedger.client_epsilons <dpfl.privacy.accounting.ledger.PrivacyLedger.client_epsilons>`."""
    st = ledger._state[observer]
    if st.n == 0:
        return {}
    uniq, inverse = np.unique(st.rows[: st.n], axis=0, return_inverse=True)
    rdp = ledger._eps_rows(uniq + st.shared_rdp)[inverse.reshape(-1)]
    ids = st.ids.tolist()
    if method == "rdp":
        return {cid: float(e) for cid, e in zip(ids, rdp, strict=True)}
    # the tightest per client (what certify(observer, cid) gives): its own RDP curve, the PLD
    # of its multiset (cached per multiset) and its pure bound
    out: dict[int, float] = {}
    for r, cid in enumerate(ids):
        eps_pld = ledger._pld_for(st.to_counts(cid))[0]
        out[cid] = _tightest(eps_pld, float(rdp[r]), ledger._pure(observer, cid, r))[0]
    return out


def worst_certificate(ledger: LedgerView, observer: str, method: str) -> Certificate:
    """The certificate of ``observer``'s worst client (``certify(observer, None, method)``)."""
    st = ledger._state[observer]
    if st.n == 0:
        return ledger._certificate(observer, None, method)
    who: list[int | None]
    if method == "rdp":
        eps_rdp, worst_cid = ledger._worst_rdp(observer)
        cert = ledger._certificate(observer, worst_cid, method)
        if cert.epsilon >= eps_rdp:
            # the worst RDP client's certificate is its RDP bound: every other client's
            # certificate (at most its own RDP ε) is at most that
            return cert
        # a pure bound lowered it: another client's RDP-or-pure figure may be the larger
        who = [int(st.ids[r]) for r in st.histories().representatives]
        if st.n < ledger.num_clients and st.shared_counts:
            who.append(None)
        rdp_or_pure = rdp_bounds(ledger, observer, who)
        i = max(range(len(who)), key=lambda j: (rdp_or_pure[j], -j))
        return ledger._certificate(observer, who[i], method)
    # tightest per distinct history (release multiset; its first client, in the order
    # clients were first charged); the worst of those
    who = [int(st.ids[r]) for r in st.histories().representatives]
    if st.n < ledger.num_clients and st.shared_counts:
        who.append(None)
    # A history's tightest ε never exceeds its RDP-or-pure ε (the tightest is the minimum over
    # PLD, RDP and pure composition), so histories are priced in decreasing order of that
    # bound and the search stops once the bound is below the worst tightest ε found: the same
    # maximum, with one PLD per history that can still be the worst instead of one per history.
    bounds = list(zip(rdp_bounds(ledger, observer, who), range(len(who)), strict=True))
    found: tuple[float, int, Certificate] | None = None
    for bound, i in sorted(bounds, key=lambda b: (-b[0], b[1])):
        if found is not None and bound < found[0]:
            break
        cert = ledger._certificate(observer, who[i], method)
        # ties go to the earlier history, as the exhaustive maximum did
        if found is None or cert.epsilon > found[0] or (cert.epsilon == found[0] and i < found[1]):
            found = (cert.epsilon, i, cert)
    assert found is not None
    return found[2]
