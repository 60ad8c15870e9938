"""Engine benchmark: seconds per round of the sequential and vectorized engines, side by side.

    ./dev bench engine [--rounds 6] [--workloads W W2 FI FD] [--data-dir DIR]

Workloads (foundation issue):
  W   100 clients × 600 MNIST training samples, MLP 784-256-10, 1 local epoch, batch 64, lr 0.05,
      each client's update clipped to 1.0 plus Gaussian noise (std 0.01), FedAvg. Compute-bound.
  W2  1,000 clients × 50 samples of the UCI Census-Income (KDD) features, logistic regression,
      1 local epoch, batch 10. Overhead-bound.
  FI  Fashion-MNIST (all 60,000 training samples) split IID over 200 clients, 50 sampled per round,
      MLP 784-128-10, 1 local epoch, batch 32, lr 0.05, FedAvg.
  FD  the same with a Dirichlet(α = 0.1) label split (seed 0): client sizes from a few samples to
      thousands, so the cohort's steps are unbalanced. FI and FD run in the same pass; the
      benchmark prints the ratio of their speed-ups.

Every figure is measured in this run: each engine runs in its own child process (so peak memory
is its own), with 2 torch threads; a round's time is the median over the measured rounds after
one warm-up round. The FLOP-bound time is (6 × parameters × samples) / (float32 matmul GFLOP/s
measured now on 2 threads).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _data_dir(arg: str | None, folder: str = "mnist") -> str:
    """The first data directory holding ``folder``: --data-dir, $DPFL_DATA_DIR, ./data, ../shared/data."""
    if arg:
        return arg
    for cand in (os.environ.get("DPFL_DATA_DIR"), str(ROOT / "data"), str(ROOT.parent / "shared" / "data")):
        if cand and (Path(cand) / folder).exists():
            return cand
    return str(ROOT / "data")


def _workload(name: str, data_dir: str | None):  # type: ignore[no-untyped-def]
    from dpfl.algorithms.fedavg import FedAvg
    from dpfl.client.context import ClientData, LocalProblem
    from dpfl.client.local import LocalTraining
    from dpfl.client.transforms import ClipUpdate, GaussianNoise
    from dpfl.data import load_dataset
    from dpfl.models import build_model
    from dpfl.rng import SeedSequence
    from dpfl.sampling import AllClients

    seeds = SeedSequence(0)
    if name in ("FI", "FD"):
        import numpy as np

        from dpfl.data.partition import partition_dirichlet, partition_iid
        from dpfl.sampling import FixedSizeSampler

        ds = load_dataset("fashion-mnist", _data_dir(data_dir, "fashion-mnist"))
        n = ds.x_train.shape[0]
        if name == "FI":
            parts = partition_iid(n, num_clients=200, seed=0)
        else:
            parts = partition_dirichlet(np.asarray(ds.y_train), num_clients=200, alpha=0.1, seed=0,
                                        min_samples_per_client=1)
        data = ClientData(ds.x_train, ds.y_train, [torch.as_tensor(p, dtype=torch.long) for p in parts])
        model = build_model("mlp", tuple(ds.input_shape), ds.num_classes, generator=seeds.generator(0, -1, "init"),
                            hidden=128)
        problem = LocalProblem(model, LocalTraining(lr=0.05, epochs=1, batch_size=32), loss_kind=model.loss_kind)
        return seeds, data, problem, FedAvg(FixedSizeSampler(50), []), n * 50 // 200
    if name == "W":
        ds = load_dataset("mnist", _data_dir(data_dir, "mnist"))
        clients, per, model_name, local = 100, 600, "mlp", LocalTraining(lr=0.05, epochs=1, batch_size=64)
        transforms = [ClipUpdate(1.0), GaussianNoise(0.01)]
    else:
        ds = load_dataset("census-income", _data_dir(data_dir, "census-income-kdd"))
        clients, per, model_name, local = 1000, 50, "logistic", LocalTraining(lr=0.05, epochs=1, batch_size=10)
        transforms = []
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(ds.x_train.shape[0], generator=gen)[: clients * per]
    data = ClientData(ds.x_train, ds.y_train, list(perm.view(clients, per)))
    model = build_model(model_name, tuple(ds.input_shape), ds.num_classes, generator=seeds.generator(0, -1, "init"))
    problem = LocalProblem(model, local, loss_kind=model.loss_kind)
    algo = FedAvg(AllClients(), transforms)
    return seeds, data, problem, algo, clients * per


def worker(workload: str, engine_name: str, rounds: int, data_dir: str | None) -> None:
    from dpfl.client.context import RoundInfo
    from dpfl.sim.sequential import SequentialEngine
    from dpfl.sim.vectorized import VectorizedEngine

    torch.set_num_threads(2)
    seeds, data, problem, algo, samples = _workload(workload, data_dir)
    engine = {"vectorized": VectorizedEngine, "sequential": SequentialEngine}[engine_name](problem, data, seeds)
    params = problem.layout.flatten(problem.module)
    times, cohort_samples = [], []
    for t in range(rounds):
        t0 = time.perf_counter()
        clients = algo.sample(t, data.num_clients, seeds)
        cohort_samples += data.sizes(clients.tolist()).tolist()
        local = engine.train(params, clients.tolist(), t)
        params = algo.server_step(params, local, RoundInfo(t, data.num_clients, clients, seeds)).global_params
        times.append(time.perf_counter() - t0)
    print(json.dumps({
        "times": times,
        "params": problem.layout.numel,
        "samples": samples,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "final_norm": float(params.norm()),
        "cohort_samples": cohort_samples,
    }))


def matmul_gflops(n: int = 2048, reps: int = 8) -> float:
    torch.set_num_threads(2)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6, help="rounds per engine, the first is a warm-up (>= 6)")
    p.add_argument("--workloads", nargs="+", default=["W", "W2", "FI", "FD"], choices=["W", "W2", "FI", "FD"])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "ENGINE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    data_dir = args.data_dir or ""
    if args.worker:
        worker(args.worker[0], args.worker[1], args.rounds, data_dir)
        return 0
    gflops = matmul_gflops()
    print(f"float32 matmul on 2 threads: {gflops:.1f} GFLOP/s (2048×2048, median of 8)")
    speedups = {}
    for wl in args.workloads:
        res = {}
        for eng in ("sequential", "vectorized"):
            out = subprocess.run(
                [sys.executable, __file__, "--worker", wl, eng, "--rounds", str(args.rounds)] + (["--data-dir", data_dir] if data_dir else []),
                capture_output=True, text=True, check=False,
            )
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                return 1
            res[eng] = json.loads(out.stdout.strip().splitlines()[-1])
        r0 = res["sequential"]
        flops = 6 * r0["params"] * r0["samples"]
        bound = flops / (gflops * 1e9)
        print(f"\nworkload {wl}: {r0['samples']} samples, {r0['params']} parameters, "
              f"{flops / 1e9:.1f} GFLOP per round (6·P·N), FLOP-bound time {bound:.3f} s")
        med = {}
        for eng, r in res.items():
            measured = r["times"][1:]
            med[eng] = statistics.median(measured)
            print(f"  {eng:<11} {med[eng]:.3f} s/round (median of {len(measured)}; all: "
                  f"{', '.join(f'{x:.3f}' for x in measured)})  {bound / med[eng]:.0%} of FLOP bound  "
                  f"peak RSS {r['maxrss_mb']:.0f} MB")
        speedups[wl] = med["sequential"] / med["vectorized"]
        if wl == "FD":
            sizes = r0.get("cohort_samples", [])
            if sizes:
                print(f"  cohort sizes (samples per sampled client, all rounds): min {min(sizes)}, median "
                      f"{statistics.median(sizes):.0f}, max {max(sizes)}")
        print(f"  speed-up vectorized / sequential: {med['sequential'] / med['vectorized']:.2f}×  "
              f"(final-model norms {res['sequential']['final_norm']:.5f} vs {res['vectorized']['final_norm']:.5f})")
        try:
            import flwr  # noqa: F401

            print("  Flower: installed, but the Flower comparison runs in benchmarks/flower.py")
        except ImportError:
            print("  Flower: not installed (pip install 'dpfl[flower]') — no Flower figure in this run")
    if "FI" in speedups and "FD" in speedups:
        print(f"\nunbalanced clients: speed-up on Dirichlet α = 0.1 / speed-up on IID = "
              f"{speedups['FD']:.2f}× / {speedups['FI']:.2f}× = {speedups['FD'] / speedups['FI']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
