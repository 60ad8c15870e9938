"""Deployment round time: one config simulated (`dpfl run`) and deployed (`dpfl federate local`), with the breakdown.

    ./dev bench flower [--clients 4] [--rounds 2] [--config default] [--data-dir DIR] [--set KEY=VALUE ...]
                       [--isolation fork,subprocess]
    ./dev bench flower --workload-w [--rounds 4] [--clients 100] [--deployment-clients 6] [--skip-simulation] [--cold]

Default (issue #28 item 4): the built-in ``default`` config with ``partition.num_clients=4`` and
``rounds=2`` (DP-FedAvg with SecAgg+ and hidden participation: every round is four SecAgg+ stages
among all four SuperNodes), run as a user runs it, each command a subprocess timed from start to
exit, simulated once and deployed once per ``--isolation`` (dpfl's forking executor, then Flower's
``flwr-clientapp`` per message: the ratio of the two is printed):

  simulated   ``dpfl run CONFIG --set ...``
  deployed    ``dpfl federate local CONFIG --set ... --isolation I`` with ``DPFL_FLOWER_TIMINGS`` set, so that the
              federation, the ServerApp, every ClientApp process and the warm workers write their
              timestamps (``dpfl.runtime.flower.timing``)

and prints the wall times, Flower's start-up (SuperLink listening, ``flwr run`` → ServerApp
process, the ServerApp's imports and build, every SuperNode answering), the time per round, and
per SuperNode per round where it went: delivery (the server created the message → the ClientApp
process started: Flower's polling and the process spawn), app start (interpreter, Flower's and
dpfl's imports, pulling the message), the warm worker (start and imports, data load and build,
local training, the client step: clip, noise, encode), and upload (the ClientApp's reply → the
ServerApp has it). The target: deployed wall ≤ 3 × simulated wall + Flower's start-up.

``--workload-w``: the earlier comparison of seconds per round — dpfl in process against the
foundation's workload W (100 clients × 600 MNIST samples, MLP 784-256-10, 1 local epoch, batch 64,
lr 0.05; DP-FedAvg with update clip 1.0, noise multiplier 0.1) on Flower's Simulation Engine and,
with a smaller cohort (``--deployment-clients``), on the deployment engine. A round's time is the
runner's own per-round ``seconds``, median over the rounds after the first; ``--cold`` trains in
the per-message ClientApp process (node config ``warm=false``) instead of the warm worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine import _data_dir  # noqa: E402

from dpfl.runtime.flower.timing import TIMINGS_ENV, load  # noqa: E402


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


def _workload_w(args: argparse.Namespace) -> None:
    data_dir = str(Path(_data_dir(args.data_dir, "mnist")).resolve())
    with tempfile.TemporaryDirectory(prefix="dpfl-bench-flower-") as t:
        tmp = Path(t)
        rows = []
        t0 = time.perf_counter()
        if not args.skip_simulation:
            w = _config(tmp, data_dir, args.clients, args.rounds)
            base, base_all = _in_process(w, tmp / "in.sqlite")
            print(f"in-process  W ({args.clients} clients): {base:.3f} s/round  "
                  f"(rounds {[round(x, 2) for x in base_all]})", flush=True)
            sim, sim_all = _flower(w, tmp / "sim.sqlite", args.clients, True, tmp / "sim")
            print(f"flower-sim  W ({args.clients} clients): {sim:.3f} s/round  "
                  f"(rounds {[round(x, 2) for x in sim_all]})", flush=True)
            rows.append(("W", args.clients, "Flower Simulation Engine (Ray)", base, sim))
        if args.deployment_clients:
            small = _config(tmp, data_dir, args.deployment_clients, args.rounds)
            b2, b2_all = _in_process(small, tmp / "in2.sqlite")
            d2, d2_all = _flower(small, tmp / "dep.sqlite", args.deployment_clients, False, tmp / "dep", cold=args.cold)
            how = "cold ClientApp" if args.cold else "warm worker"
            print(f"in-process  W-small ({args.deployment_clients} clients): {b2:.3f} s/round  "
                  f"({[round(x, 2) for x in b2_all]})")
            print(f"flower-dep  W-small ({args.deployment_clients} clients, {how}): {d2:.3f} s/round  "
                  f"({[round(x, 2) for x in d2_all]})")
            rows.append(("W-small", args.deployment_clients, f"Flower deployment engine (processes, {how})", b2, d2))
        print()
        print("| workload | clients | runtime | in-process s/round | runtime s/round | runtime / in-process |")
        print("|---|---|---|---|---|---|")
        for name, k, how, b, f in rows:
            print(f"| {name} | {k} | {how} | {b:.3f} | {f:.3f} | {f / b:.1f}× |")
        print(f"\n(total {time.perf_counter() - t0:.0f} s)")


# --------------------------------------------------------------------------- deployment round time


def _timed(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    """Run a command to its end (output to ``log``); its wall seconds and exit code."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    return time.perf_counter() - t0, code


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _fmt(x: float | None) -> str:
    return "    -" if x is None or x != x else f"{x:5.2f}"


def _breakdown(events: list[dict], store: Path, clients: int) -> None:
    """Print Flower's start-up and where each round's time went (module docstring)."""
    from dpfl.store import RunStore

    one = {e["event"]: e for e in events if e["event"] in ("federation", "serverapp", "flwr-run", "stopped")}
    fed, srv, run = one.get("federation"), one.get("serverapp"), one.get("flwr-run")
    if fed is None or srv is None or run is None:
        print("  (no timings: the deployed run did not finish)")
        return
    t0 = fed["launched"]
    print("  Flower start-up (seconds after the command started the federation):")
    print(f"    SuperLink listening          {fed['superlink'] - t0:6.2f}")
    print(f"    {clients} SuperNodes spawned        {fed['nodes'] - t0:6.2f}")
    print(f"    ServerApp process started    {srv['proc'] - t0:6.2f}   "
          f"(flwr run submitted at {run['submitted'] - t0:.2f})")
    print(f"    ServerApp imports done       {srv['loaded'] - t0:6.2f}")
    print(f"    ServerApp built the run      {srv['built'] - t0:6.2f}   (data, partition, model)")
    print(f"    every SuperNode answered     {srv['connected'] - t0:6.2f}   (one query message each)")
    print(f"    run finished                 {srv['done'] - t0:6.2f}")
    print(f"    result read by the command   {run['result'] - t0:6.2f}")
    if "stopped" in one:
        print(f"    processes stopped            {one['stopped']['t'] - t0:6.2f}")
    record = next(iter(RunStore(store).list()), None)
    if record is not None:
        secs = [float(r["seconds"]) for r in RunStore(store).rounds(record.run_id)]
        print(f"  rounds (the runner's seconds per round): {[round(x, 2) for x in secs]}")
    pulled = {e["reply_to"]: e["t"] for e in events if e["event"] == "pulled"}
    msgs = [e for e in events if e["event"] == "clientapp"]
    print("  per message, mean over the SuperNodes [max] (seconds):")
    print("    round kind            deliver    app start  handler    upload     sent→pulled")
    groups: dict[tuple, list[dict]] = {}
    for m in msgs:
        groups.setdefault((m["round"] if m["round"] is not None else -1, m["kind"]), []).append(m)
    for (t, kind), ms in sorted(groups.items(), key=lambda kv: (kv[0][0], min(m["sent"] for m in kv[1]))):
        cols = [[m["proc"] - m["sent"] for m in ms], [m["start"] - m["proc"] for m in ms],
                [m["end"] - m["start"] for m in ms],
                [pulled[m["id"]] - m["end"] for m in ms if m["id"] in pulled],
                [pulled[m["id"]] - m["sent"] for m in ms if m["id"] in pulled]]
        cells = "  ".join(f"{_fmt(_mean(c))} [{_fmt(max(c) if c else None)}]" for c in cols)
        print(f"    {'-' if t < 0 else t + 1:>5} {kind:<14} {cells}")
    print("  per SuperNode per round, summed over its messages (seconds): delivery = Flower's polling and the")
    print("  ClientApp process spawn; app start = interpreter, imports, message pull; worker = the warm worker's")
    print("  start + imports (first round), data load + build, training, client step (clip, noise, encode)")
    print("    node round msgs  delivery  app start  worker start  data load  train (cpu)    client step  "
          "handler rest  upload")
    per: dict[tuple[int, int], list[dict]] = {}
    for m in msgs:
        if m["round"] is not None and m["node"] != "shuffler":
            per.setdefault((int(m["node"]), int(m["round"])), []).append(m)
    for (node, t), ms in sorted(per.items()):
        work = [m for m in ms if m.get("worker")]
        w = {k: sum(float(m["worker"].get(k, 0.0)) for m in work) for k in ("build", "train", "train_cpu", "step")}
        start = sum(float(m.get("connect") or 0.0) for m in work if m["worker"].get("first"))
        inner = sum(float(m.get("connect") or 0.0)
                    + sum(float(m["worker"].get(k, 0.0)) for k in ("build", "train", "step"))
                    for m in work)
        rest = sum(m["end"] - m["start"] for m in ms) - inner
        up = sum(pulled[m["id"]] - m["end"] for m in ms if m["id"] in pulled)
        print(f"    {node:>4} {t + 1:>5} {len(ms):>4}  {sum(m['proc'] - m['sent'] for m in ms):8.2f}  "
              f"{sum(m['start'] - m['proc'] for m in ms):9.2f}  {start:12.2f}  {w['build']:9.2f}  {w['train']:5.2f} "
              f"({w['train_cpu']:5.2f})  "
              f"{w['step']:11.2f}  {rest:12.2f}  {up:6.2f}")


def _round_time(args: argparse.Namespace) -> None:
    data_dir = str(Path(_data_dir(args.data_dir, "mnist")).resolve())
    sets = [f"partition.num_clients={args.clients}", f"rounds={args.rounds}", *(args.set or [])]
    flags = [x for kv in sets for x in ("--set", kv)]
    dpfl = [sys.executable, "-m", "dpfl"]
    env = {k: v for k, v in os.environ.items() if k != TIMINGS_ENV}
    print(f"config {args.config} with {' '.join(sets)}; data {args.data_dir or 'found by the benchmarks'}", flush=True)
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="dpfl-bench-flower-") as t:
            tmp = Path(t)
            sim, code = _timed([*dpfl, "run", args.config, *flags, "--set", f"data.dir={data_dir}",
                                "--store", str(tmp / "sim.sqlite")], env, tmp / "sim.log")
            if code:
                sys.exit(f"dpfl run failed ({code}):\n{(tmp / 'sim.log').read_text()[-3000:]}")
            walls: dict[str, float] = {}
            for isolation in args.isolation:
                timings = tmp / f"timings-{isolation}.jsonl"
                store = tmp / f"dep-{isolation}.sqlite"
                dep, code = _timed([*dpfl, "federate", "local", args.config, *flags, "--data-dir", data_dir,
                                    "--isolation", isolation, "--store", str(store), "--workdir",
                                    str(tmp / f"fed-{isolation}")],
                                   {**env, TIMINGS_ENV: str(timings)}, tmp / f"dep-{isolation}.log")
                if code:
                    sys.exit(f"dpfl federate local --isolation {isolation} failed ({code}):\n"
                             f"{(tmp / f'dep-{isolation}.log').read_text()[-3000:]}")
                walls[isolation] = dep
                events = load(timings)
                fed = next(e for e in events if e["event"] == "federation")
                srv = next(e for e in events if e["event"] == "serverapp")
                startup = (fed["superlink"] - fed["launched"]) + (srv["connected"] - srv["proc"])
                print(f"\npass {i + 1}, --isolation {isolation}: simulated {sim:.1f} s, deployed {dep:.1f} s  "
                      f"(deployed / simulated {dep / sim:.1f}×; target deployed <= 3 × simulated + Flower's start-up "
                      f"= 3 × {sim:.1f} + {startup:.1f} = {3 * sim + startup:.1f} s: "
                      f"{'met' if dep <= 3 * sim + startup else 'missed'})", flush=True)
                print(f"  Flower's start-up counted here: SuperLink listening + (ServerApp process → every SuperNode "
                      f"answered) = {startup:.1f} s")
                _breakdown(events, store, args.clients)
                sys.stdout.flush()
            if len(walls) == 2:
                a, b = args.isolation
                print(f"\npass {i + 1}: deployed wall {a} / {b} = {walls[a] / walls[b]:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload-w", action="store_true", help="the per-round comparison on workload W instead")
    ap.add_argument("--config", default="default", help="round time: a config file or built-in name")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="round time: another config override")
    ap.add_argument("--repeat", type=int, default=1, help="round time: passes")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (round time: 2; --workload-w: 4)")
    ap.add_argument("--clients", type=int, default=None, help="clients (round time: 4; --workload-w: 100)")
    ap.add_argument("--deployment-clients", type=int, default=6, help="--workload-w: 0 to skip the deployment engine")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--isolation", default="fork,subprocess", type=lambda v: v.split(","),
                    help="round time: deployed once per value, in this order (fork: dpfl's executor; subprocess: "
                         "Flower's flwr-clientapp per message)")
    ap.add_argument("--skip-simulation", action="store_true", help="--workload-w: skip Flower's Simulation Engine")
    ap.add_argument("--cold", action="store_true", help="--workload-w: train in the per-message ClientApp process")
    args = ap.parse_args()
    if args.workload_w:
        args.rounds = 4 if args.rounds is None else args.rounds
        args.clients = 100 if args.clients is None else args.clients
        _workload_w(args)
    else:
        args.rounds = 2 if args.rounds is None else args.rounds
        args.clients = 4 if args.clients is None else args.clients
        _round_time(args)


if __name__ == "__main__":
    main()
