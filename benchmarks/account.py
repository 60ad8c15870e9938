"""`dpfl account` at T rounds x N clients against dp-accounting composing the same events directly.

    ./dev bench account [--rounds 1000] [--clients 1000] [--sample-rate 0.1] [--noise-multiplier 1]
                        [--delta 1e-5] [--repeats 3]

Workload: ``dpfl account dp-fedavg --clients N --rounds T --sample-rate q --noise-multiplier z
--delta δ`` (004 DP-FedAvg, local variant: Poisson cohorts, each upload carries z/sqrt(|P_t|) of the
noise, the broadcast the whole z).

Timed, each ``--repeats`` times (minimum and median printed):

1. the command as a user runs it: a fresh process (``python -m dpfl account ... --json``), wall
   clock; and a fresh process that only imports what the command imports (torch, dp-accounting,
   dpfl), the floor of any fresh process;
2. the command in a warm process (the shortcut's own code: arguments, config, plan, T rounds
   through the privacy gate and the ledger, certificates, JSON), with dpfl's caches of RDP curves
   cleared before each repeat;
3. dp-accounting composing the same events directly, in the same process: for the public
   (``RdpAccountant`` on dpfl's RDP orders and ``PLDAccountant`` on dpfl's grid of
   ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), T)``) and for the server
   (every client's Gaussians z/sqrt(|P_t|) of the rounds it took part in — the cohorts the command
   draws from its seed — grouped per distinct event, one ``RdpAccountant`` per client, and the
   closed-form PLD, the analytic Gaussian, of the worst): the certificates the command prints.

Every ε is checked equal between the two; the ratio is dpfl / dp-accounting (warm process, and
fresh process).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any

IMPORTS = ("import torch, dp_accounting, rich.console, rich.table; "
           "import dpfl.cli, dpfl.commands.dry_run, dpfl.config, dpfl.rounds")


def _argv(a: argparse.Namespace) -> list[str]:
    return ["account", "dp-fedavg", "--clients", str(a.clients), "--rounds", str(a.rounds), "--sample-rate",
            str(a.sample_rate), "--noise-multiplier", str(a.noise_multiplier), "--delta", str(a.delta), "--json"]


def _clear_caches() -> None:
    """dpfl's process-wide caches of event curves (each repeat starts cold, as a fresh process does)."""
    from dpfl.privacy.accounting import certify, claimed

    certify._RDP_CACHE.clear()
    claimed._dpfedavg_round_rdp.cache_clear()
    terms = getattr(certify, "_conversion_terms", None)  # absent before the vectorized conversion
    if terms is not None:
        terms.cache_clear()


def _dpfl_warm(a: argparse.Namespace) -> dict[str, Any]:
    from dpfl.commands.account import register

    parser = argparse.ArgumentParser(prog="dpfl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(_argv(a))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert args.func(args) == 0
    return dict(json.loads(buf.getvalue()))


def _dpfl_parts(a: argparse.Namespace) -> dict[str, float]:
    """One more warm run, timed by part (wrappers around the algorithm's, the gate's and the
    ledger's entry points; the wrappers add a little time of their own)."""
    from dpfl.algorithms.base import Algorithm
    from dpfl.algorithms.dp_fedavg import DpFedAvg
    from dpfl.algorithms.private import PrivateAlgorithm
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.rounds.gate import PrivacyGate

    spent: dict[str, float] = {}
    hooks = [(Algorithm, "sample", "algorithm: cohort sampling"),
             (PrivateAlgorithm, "releases", "algorithm: the round's releases"),
             (DpFedAvg, "claimed_epsilon", "algorithm: the paper's claimed epsilon, every round"),
             (PrivacyLedger, "would_exceed", "ledger: the check before each round"),
             (PrivacyLedger, "record_round", "ledger: recording each round"),
             (PrivacyGate, "summary", "ledger: the certificates (RDP and PLD, per client)")]
    saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in hooks]

    def timed(f: Any, label: str) -> Any:
        def g(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
        return g

    for cls, name, label in hooks:
        setattr(cls, name, timed(cls.__dict__[name], label))
    try:
        _clear_caches()
        t0 = time.perf_counter()
        _dpfl_warm(a)
        total = time.perf_counter() - t0
    finally:
        for cls, name, f in saved:
            setattr(cls, name, f)
    spent["everything else (loop, config, plan, JSON)"] = total - sum(spent.values())
    return spent


def _direct(a: argparse.Namespace, seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """dp-accounting on the same events: (ε per certificate, seconds per part)."""
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant as pld
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    from dpfl.privacy.accounting.certify import DEFAULT_PLD_DISCRETIZATION, DEFAULT_RDP_ORDERS
    from dpfl.rng import SERVER, SeedSequence
    from dpfl.sampling.clients import PoissonSampler

    add_remove = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    secs: dict[str, float] = {}
    eps: dict[str, float] = {}
    public = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(a.sample_rate, dpa.GaussianDpEvent(a.noise_multiplier)),
                                     a.rounds)
    t0 = time.perf_counter()
    eps["public_rdp"] = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), add_remove).compose(public).get_epsilon(a.delta)
    secs["public RDP"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    acc = pld.PLDAccountant(add_remove, value_discretization_interval=DEFAULT_PLD_DISCRETIZATION)
    eps["public_pld"] = acc.compose(public).get_epsilon(a.delta)
    secs["public PLD"] = time.perf_counter() - t0

    # the cohorts the command draws (its sampler, its seed): each client's uploads z/sqrt(|P_t|)
    t0 = time.perf_counter()
    seeds, sampler = SeedSequence(seed), PoissonSampler(a.sample_rate)
    history: dict[int, Counter[int]] = {}
    for t in range(a.rounds):
        cohort = sampler.sample(a.clients, seeds.generator(t, SERVER, "sample")).tolist()
        for c in cohort:
            history.setdefault(int(c), Counter())[len(cohort)] += 1
    secs["server cohorts (sampling)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    worst_rdp, worst_precision = -math.inf, 0.0
    for counts in history.values():
        events = [dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(a.noise_multiplier / math.sqrt(k)), n)
                  for k, n in counts.items()]
        e = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), add_remove).compose(
            dpa.ComposedDpEvent(events)).get_epsilon(a.delta)
        worst_rdp = max(worst_rdp, e)
        worst_precision = max(worst_precision, sum(n * k / a.noise_multiplier**2 for k, n in counts.items()))
    secs["server RDP, every client"] = time.perf_counter() - t0
    eps["server_rdp"] = worst_rdp
    t0 = time.perf_counter()
    # Gaussians compose to a Gaussian of 1/z² = Σ 1/z_i² (Dong, Roth, Su 2019): the exact PLD
    eps["server_pld"] = float(dpa.get_epsilon_gaussian(1.0 / math.sqrt(worst_precision), a.delta))
    secs["server PLD, worst client"] = time.perf_counter() - t0
    return eps, secs


def _stats(times: list[float]) -> str:
    return f"{min(times):6.3f} s / {statistics.median(times):6.3f} s"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--sample-rate", type=float, default=0.1)
    p.add_argument("--noise-multiplier", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()

    fresh, floor = [], []
    fresh_out: dict[str, Any] = {}
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "dpfl", *_argv(a)], capture_output=True, text=True, check=True)
        fresh.append(time.perf_counter() - t0)
        fresh_out = json.loads(run.stdout)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", IMPORTS], check=True)
        floor.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    exec(IMPORTS)  # noqa: S102 - the same imports, in this process, before anything is timed
    imports_here = time.perf_counter() - t0
    warm, direct = [], []
    warm_out: dict[str, Any] = {}
    eps: dict[str, float] = {}
    parts: list[dict[str, float]] = []
    for _ in range(a.repeats):
        _clear_caches()
        t0 = time.perf_counter()
        warm_out = _dpfl_warm(a)
        warm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        eps, secs = _direct(a, int(warm_out["config"]["seed"]))
        direct.append(time.perf_counter() - t0)
        parts.append(secs)

    obs = warm_out["observers"]
    got = {"public_rdp": obs["public"]["epsilon_rdp"], "public_pld": obs["public"]["epsilon_pld"],
           "server_rdp": obs["server"]["epsilon_rdp"], "server_pld": obs["server"]["epsilon_pld"]}
    same = all(math.isclose(float(got[k]), eps[k], rel_tol=1e-9) for k in eps)
    same_fresh = all(fresh_out["observers"][o] == warm_out["observers"][o] for o in ("server", "public"))

    print(f"dpfl account dp-fedavg: T = {a.rounds} rounds x N = {a.clients} clients, q = {a.sample_rate:g}, "
          f"z = {a.noise_multiplier:g}, delta = {a.delta:g}  ({a.repeats} repeats: min / median)")
    print(f"  fresh process, as a user runs it            {_stats(fresh)}")
    print(f"    a fresh process importing only torch, dp-accounting, dpfl  {_stats(floor)}")
    print(f"  warm process, caches cleared (the command) {_stats(warm)}   (imports here took {imports_here:.2f} s)")
    for key, value in _dpfl_parts(a).items():
        print(f"    {key:52s} {value:6.3f} s")
    print(f"  dp-accounting, the same events directly    {_stats(direct)}")
    med = {key: statistics.median(s[key] for s in parts) for key in parts[0]}
    for key, value in med.items():
        print(f"    {key:52s} {value:6.3f} s")
    public = [s["public RDP"] + s["public PLD"] for s in parts]
    print(f"  ratio dpfl / dp-accounting, all certificates: warm process {min(warm) / min(direct):.2f}x, "
          f"fresh process {min(fresh) / min(direct):.2f}x")
    print(f"  ratio dpfl / dp-accounting, the public's event self-composed (RDP + PLD, {min(public):.3f} s): "
          f"warm process {min(warm) / min(public):.2f}x, fresh process {min(fresh) / min(public):.2f}x")
    print(f"  epsilon (dpfl = dp-accounting to 1e-9: {'yes' if same else 'NO'}; fresh = warm: "
          f"{'yes' if same_fresh else 'NO'}): " + ", ".join(f"{k} {float(got[k]):.6g}" for k in got))
    return 0 if same and same_fresh else 1


if __name__ == "__main__":
    sys.exit(main())
