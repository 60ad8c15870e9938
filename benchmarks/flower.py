"""dpfl in process against the same run on Flower: seconds per round, measured in this run.

    ./dev bench flower [--rounds 4] [--clients 100] [--deployment-clients 6] [--data-dir DIR]
                       [--skip-simulation] [--cold]

Workload: the foundation's W written as a run config — 100 clients × 600 MNIST training samples,
MLP 784-256-10, 1 local epoch, batch 64, lr 0.05; DP-FedAvg (local variant) with update clip 1.0
and noise multiplier 0.1, i.e. per-client noise std 1.0 · 0.1 / sqrt(100) = 0.01 as in W.

Three ways to run it, all with dpfl's algorithm code and privacy ledger:
  in-process   ``dpfl run`` (vectorized engine, 2 torch threads)
  flower-sim   the dpfl ServerApp/ClientApp on Flower's Simulation Engine (a SuperLink in
               simulation mode, 100 virtual SuperNodes on Ray, 1 CPU each → 2 at a time)
  flower-dep   Flower's deployment engine with real SuperNode processes on 127.0.0.1 — one
               process per client, so it runs a smaller cohort (``--deployment-clients``) and is
               compared with in-process on that same smaller config
A round's time is the runner's own per-round ``seconds`` (sampling, training, aggregation,
ledger, evaluation), median over the rounds after the first. On the deployment engine each
SuperNode trains in its warm worker (torch, data and run loaded once); ``--cold`` trains in the
per-message ClientApp process instead (node config ``warm=false``), i.e. re-imports torch and
rebuilds the run every round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine import _data_dir  # noqa: E402


def _config(tmp: Path, data_dir: str, clients: int, rounds: int) -> Path:
    cfg = {
        "name": f"bench-flower-w-{clients}", "seed": 0, "rounds": rounds,
        "data": {"name": "mnist", "dir": data_dir},
        "partition": {"kind": "iid", "num_clients": clients, "samples_per_client": 600},
        "model": {"name": "mlp"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 0.1 * (clients / 100) ** 0.5,
                                                       "clip_norm": 1.0}},
        "sampling": {"kind": "all"},
        "local": {"lr": 0.05, "epochs": 1, "batch_size": 64},
        "engine": "vectorized", "threads": 2, "eval_every": rounds, "checkpoint_every": 1000,
    }
    path = tmp / f"w{clients}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _per_round(store: Path, run_id: str) -> tuple[float, list[float]]:
    from dpfl.store import RunStore

    secs = [float(r["seconds"]) for r in RunStore(store).rounds(run_id)]
    return statistics.median(secs[1:] if len(secs) > 1 else secs), secs


def _in_process(path: Path, store: Path) -> tuple[float, list[float]]:
    from dpfl.config import load_config
    from dpfl.rounds import run_experiment
    from dpfl.store import RunStore

    res = run_experiment(load_config(path), RunStore(store), restart=True)
    return _per_round(store, res.run_id)


def _flower(path: Path, store: Path, clients: int, simulation: bool, workdir: Path,
            cold: bool = False) -> tuple[float, list[float]]:
    from dpfl.runtime.flower.local import LocalFederation

    node_config = {i: {"warm": "false"} for i in range(clients)} if cold and not simulation else None
    with LocalFederation(clients, simulation=simulation, workdir=workdir, node_config=node_config,
                         data_dir=None if simulation else yaml.safe_load(path.read_text())["data"]["dir"]) as fed:
        res = fed.run(path, store=store, round_timeout=3600, connect_timeout=600, timeout=7200)
    return _per_round(store, res["run_id"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--deployment-clients", type=int, default=6, help="0 to skip the deployment-engine comparison")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--skip-simulation", action="store_true", help="skip W on Flower's Simulation Engine")
    ap.add_argument("--cold", action="store_true", help="deployment: train in the per-message ClientApp process")
    args = ap.parse_args()
    data_dir = str(Path(_data_dir(args.data_dir, "mnist")).resolve())
    with tempfile.TemporaryDirectory(prefix="dpfl-bench-flower-") as t:
        tmp = Path(t)
        rows = []
        t0 = time.perf_counter()
        if not args.skip_simulation:
            w = _config(tmp, data_dir, args.clients, args.rounds)
            base, base_all = _in_process(w, tmp / "in.sqlite")
            print(f"in-process  W ({args.clients} clients): {base:.3f} s/round  (rounds {[round(x, 2) for x in base_all]})", flush=True)
            sim, sim_all = _flower(w, tmp / "sim.sqlite", args.clients, True, tmp / "sim")
            print(f"flower-sim  W ({args.clients} clients): {sim:.3f} s/round  (rounds {[round(x, 2) for x in sim_all]})", flush=True)
            rows.append(("W", args.clients, "Flower Simulation Engine (Ray)", base, sim))
        if args.deployment_clients:
            small = _config(tmp, data_dir, args.deployment_clients, args.rounds)
            b2, b2_all = _in_process(small, tmp / "in2.sqlite")
            d2, d2_all = _flower(small, tmp / "dep.sqlite", args.deployment_clients, False, tmp / "dep", cold=args.cold)
            how = "cold ClientApp" if args.cold else "warm worker"
            print(f"in-process  W-small ({args.deployment_clients} clients): {b2:.3f} s/round  ({[round(x, 2) for x in b2_all]})")
            print(f"flower-dep  W-small ({args.deployment_clients} clients, {how}): {d2:.3f} s/round  "
                  f"({[round(x, 2) for x in d2_all]})")
            rows.append(("W-small", args.deployment_clients, f"Flower deployment engine (processes, {how})", b2, d2))
        print()
        print("| workload | clients | runtime | in-process s/round | runtime s/round | runtime / in-process |")
        print("|---|---|---|---|---|---|")
        for name, k, how, b, f in rows:
            print(f"| {name} | {k} | {how} | {b:.3f} | {f:.3f} | {f / b:.1f}× |")
        print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
