"""The privacy ledger's per-round RDP certificate against dp-accounting composing the same events.

    ./dev bench ledger_certify [--rounds 1000] [--clients 20]

Workload (the former wall-clock test of ``tests/unit/privacy/accounting/test_accounting_ledger.py``):
``--clients`` clients all take part in every round with aggregation weight 1/N, sensitivity 1
and a noise std that follows Lei's decay, 40 − 0.01·(t mod 50); after every recorded round the
run certifies its headline ε by RDP, ``ledger.certify(method="rdp")`` (both observers, worst
client), as the round gate does.

Baseline, measured in the same run: dp-accounting's ``RdpAccountant`` on the ledger's RDP orders,
one per observer, composing each round's Gaussian events (noise std / sensitivity of each
release) directly and converting to ε at the same δ — the least work any per-round RDP
certificate of this history needs. Every client's history is the same here, so one accountant
per observer is the whole baseline; the ledger has to find that out (worst client). Both ε must
agree; the ratio is ledger / baseline per certificate (median, 95th percentile and worst over the
rounds). A single worst call of tens of ms is usually a pause of Python's cyclic garbage collector
(a full collection walks every live object of the process), not the ledger's work: compare the
median and the 95th percentile.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--clients", type=int, default=20)
    args = p.parse_args()

    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import GaussianRelease, federated_round_releases
    from dpfl.sampling import AllClients

    n, delta = args.clients, 1e-5
    clients = range(n)
    ledger = PrivacyLedger(num_clients=n, sampler=AllClients(), delta=delta, relation="add_remove",
                           privacy_unit="client", pld_every=0)
    direct = {obs: rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
              for obs in ("server", "public")}
    t_ledger, t_direct = [], []
    eps_ledger = eps_direct = math.nan
    for t in range(args.rounds):
        rel = federated_round_releases(clients, 40.0 - 0.01 * (t % 50), 1.0, [1.0 / n] * n)
        ledger.record_round(t, rel, sampling={"kind": "all"}, participants=clients)
        t0 = time.perf_counter()
        eps_ledger = ledger.certify(method="rdp").epsilon
        t_ledger.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        for r in rel:
            assert isinstance(r, GaussianRelease)
            direct[r.observer].compose(dpa.GaussianDpEvent(r.noise_std / r.sensitivity))
        eps_direct = max(acc.get_epsilon(delta) for acc in direct.values())
        t_direct.append(time.perf_counter() - t0)

    def stats(times: list[float]) -> tuple[float, float, float]:
        return statistics.median(times), statistics.quantiles(times, n=20)[-1], max(times)

    led, dire = stats(t_ledger), stats(t_direct)
    print(f"RDP certificate after every round: {args.rounds} rounds, {n} clients, all taking part, δ = {delta:g}")
    for name, (med, p95, worst), times in (("ledger.certify(method='rdp')", led, t_ledger),
                                           ("dp-accounting RdpAccountant, direct", dire, t_direct)):
        print(f"  {name:36s} median {med * 1e3:7.3f} ms   p95 {p95 * 1e3:7.3f} ms   worst {worst * 1e3:7.2f} ms"
              f"   total {sum(times):.2f} s")
    print(f"  ratio ledger / direct: median {led[0] / dire[0]:.2f}×, p95 {led[1] / dire[1]:.2f}×, "
          f"total {sum(t_ledger) / sum(t_direct):.2f}×")
    print(f"  final ε: ledger {eps_ledger:.6g}, direct {eps_direct:.6g}")
    if not math.isclose(eps_ledger, eps_direct, rel_tol=1e-9):
        print("  the two ε disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
