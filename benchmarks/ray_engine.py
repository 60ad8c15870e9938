"""Ray engine benchmark: seconds per round on workload W, in-process vectorized vs Ray actors.

    ./dev bench ray_engine [--rounds 8] [--data-dir DIR]

Workload W of the foundation issue, built by ``benchmarks/engine.py`` (imported, not copied):
100 clients × 600 MNIST samples, MLP 784-256-10, 1 local epoch, batch 64, lr 0.05, each update
clipped to 1.0 plus Gaussian noise (std 0.01), FedAvg over all clients.

Three configurations measured in one child process, round by round in rotating order (so load
from other processes on the machine hits all three alike):
  in-process   the vectorized engine in the process itself, 2 torch threads;
  ray ×1       1 Ray actor with 2 threads: the whole cohort, so the gap to in-process is Ray's
               overhead alone (shipping global params and 100 local models per round through the
               object store, task scheduling);
  ray ×2       2 Ray actors with 1 thread each, the cohort cut into two shards of 50.
Both actor sets live in one local Ray instance declared with 4 logical CPUs (the 2 cores host
both sets; only one set trains at a time, with the thread counts above). A round's time is the
median over the rounds after the first (warm-up); "actor compute" is the slowest actor's time
inside ``VectorizedEngine.train``, the rest of a Ray round is overhead. One-time costs (Ray
start, shipping the data, starting the actors) are printed separately. Peak memory: each
process's peak RSS (pages of Ray's shared object store count in every process that touches
them); the driver's includes the in-process engine's.

On a 2-core machine sharding cannot beat the in-process engine, which already keeps both cores
busy with one stacked cohort; Ray pays off only with more cores than one process can use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _engine_bench():  # type: ignore[no-untyped-def]
    """benchmarks/engine.py as a module (workload W is built there)."""
    spec = importlib.util.spec_from_file_location("dpfl_bench_engine", HERE / "engine.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def worker(rounds: int, data_dir: str | None) -> None:
    import ray

    from dpfl.client.context import RoundInfo
    from dpfl.sim.ray_engine import RayEngine
    from dpfl.sim.vectorized import VectorizedEngine

    torch.set_num_threads(2)
    seeds, data, problem, algo, samples = _engine_bench()._workload("W", data_dir)
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    t_ray = time.perf_counter() - t0
    engines, start_s = {}, {}
    engines["in-process"] = VectorizedEngine(problem, data, seeds)
    for n in (1, 2):
        t0 = time.perf_counter()
        engines[f"ray ×{n}"] = RayEngine(problem, data, seeds, num_actors=n, cpus_per_actor=2 // n)
        start_s[f"ray ×{n}"] = time.perf_counter() - t0
    names = list(engines)
    params = {k: problem.layout.flatten(problem.module) for k in names}
    times: dict[str, list[float]] = {k: [] for k in names}
    for t in range(rounds):
        for k in names[t % 3:] + names[: t % 3]:
            t0 = time.perf_counter()
            clients = algo.sample(t, data.num_clients, seeds)
            local = engines[k].train(params[k], clients.tolist(), t)
            info = RoundInfo(t, data.num_clients, clients, seeds)
            params[k] = algo.server_step(params[k], local, info).global_params
            times[k].append(time.perf_counter() - t0)
    out: dict[str, dict] = {}  # type: ignore[type-arg]
    for k in names:
        out[k] = {"times": times[k], "final_norm": float(params[k].norm()),
                  "same_bits_as_in_process": bool(torch.equal(params[k], params["in-process"]))}
        engine = engines[k]
        if isinstance(engine, RayEngine):
            stats = engine.actor_stats()
            out[k].update(engine_start_s=start_s[k], actors=stats,
                          actor_compute=[max(a["train_seconds"][t] for a in stats) for t in range(rounds)])
            engine.close()
    ray.shutdown()
    print(json.dumps({"ray_start_s": t_ray,
                      "driver_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "results": out}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8, help="rounds per configuration, the first is a warm-up (>= 3)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rounds < 3:
        p.error("--rounds must be at least 3 (one warm-up, then a median)")
    try:
        import ray  # noqa: F401
    except ImportError:
        print("Ray is not installed (pip install 'dpfl[ray]'): nothing to measure", file=sys.stderr)
        return 1
    data_dir = _engine_bench()._data_dir(args.data_dir, "mnist")
    if args.worker:
        worker(args.rounds, data_dir)
        return 0
    out = subprocess.run([sys.executable, __file__, "--worker", "--rounds", str(args.rounds), "--data-dir", data_dir],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    res = rep["results"]
    print(f"workload W (100 clients × 600 MNIST, MLP 784-256-10, clip 1.0 + noise 0.01) on {os.cpu_count()} cores; "
          f"median s/round over rounds 2..{args.rounds}, rotating order")
    med = {k: statistics.median(r["times"][1:]) for k, r in res.items()}
    base = med["in-process"]
    for name, r in res.items():
        line = (f"  {name:<10} {med[name]:.3f} s/round  ×{med[name] / base:.2f}  "
                f"(all: {', '.join(f'{x:.3f}' for x in r['times'][1:])})  final norm {r['final_norm']:.5f}"
                f"{'' if name == 'in-process' else ', same bits as in-process: ' + str(r['same_bits_as_in_process'])}")
        print(line)
        if "actors" in r:
            comp = statistics.median(r["actor_compute"][1:])
            rss = " + ".join(f"{a['maxrss_mb']:.0f}" for a in r["actors"])
            print(f"  {'':<10} actor compute {comp:.3f} s, overhead {med[name] - comp:.3f} s per round; "
                  f"{r['actors'][0]['threads']} thread(s) per actor; actors' peak RSS {rss} MB; "
                  f"start (ship data, start actors) {r['engine_start_s']:.1f} s, first round {r['times'][0]:.2f} s")
    print(f"  one-time Ray start {rep['ray_start_s']:.1f} s; driver peak RSS {rep['driver_maxrss_mb']:.0f} MB")
    print(f"overhead ratio Ray / in-process: 1 actor {med['ray ×1'] / base:.2f}, 2 actors {med['ray ×2'] / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
