"""DP-FedAvg+BLUR+LUS round time: vectorized engine vs the sequential reference, same run.

    .venv/bin/python benchmarks/dp_fedavg.py [--rounds 6] [--model mlp|cnn2]

Workload: the 004 reduced-scale stand-in — real MNIST split over a population of 1,000 clients
(Dirichlet 0.5), Poisson client sampling with p = 0.04 (≈ 40 clients per round), Q = 10 local
steps of batch 32 at lr 0.05 with the BLUR term (λ = 0.4, S = 0.3) in the local objective, the
final-weights gradient for LUS (c = 0.7), then LUS, clipping and per-client Gaussian noise
(σ = 1) on the server step. Model: MLP 784-64-10 (default) or the 2-layer CNN (``--model cnn2``,
1.2M parameters, the paper's model: slow on CPU).

A round = ``engine.train`` + ``algorithm.server_step``. Both engines run the *same* rounds (same
cohorts, batches and noise streams) in this process, with 2 torch threads; each round's time is
the median over the measured rounds after one warm-up round. The two engines' models after the
measured rounds are compared (they must agree to float tolerance).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _data_dir(arg: str | None) -> str:
    if arg:
        return arg
    for cand in (ROOT / "data", ROOT.parent / "shared" / "data"):
        if (cand / "mnist").exists():
            return str(cand)
    return str(ROOT / "data")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6, help="rounds per engine, the first is a warm-up (>= 6)")
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn2"])
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    if args.rounds < 6:
        p.error("--rounds must be >= 6 (one warm-up + at least 5 measured)")
    logging.getLogger("absl").setLevel(logging.ERROR)
    from dpfl.client.context import RoundInfo
    from dpfl.config import parse_config
    from dpfl.rounds import ENGINES, build_experiment

    model = {"name": "mlp", "options": {"hidden": 64}} if args.model == "mlp" else {"name": "cnn2", "options": {}}
    raw = {
        "name": "bench-004", "seed": 0, "rounds": 1000, "data": {"name": "mnist", "dir": _data_dir(args.data_dir)},
        "partition": {"kind": "dirichlet", "num_clients": 1000, "alpha": 0.5, "min_size": 10},
        "model": model,
        "algorithm": {"name": "dp-fedavg-blur-lus", "options": {"noise_multiplier": 1.0, "clip_norm": 0.3}},
        "sampling": {"kind": "poisson", "sample_rate": 0.04}, "privacy": {"delta": 1e-3},
        "local": {"lr": 0.05, "steps": 10, "batch_size": 32}, "threads": 2,
    }
    results: dict[str, tuple[list[float], torch.Tensor, list[int]]] = {}
    for engine in ("vectorized", "sequential"):
        exp = build_experiment(parse_config({**raw, "engine": engine}))
        assert type(exp.engine) is ENGINES[engine]
        params = exp.init_params.clone()
        times, cohorts = [], []
        for t in range(args.rounds):
            clients = exp.algorithm.sample(t, exp.data.num_clients, exp.seeds)
            info = RoundInfo(t, exp.data.num_clients, clients, exp.seeds)
            start = time.perf_counter()
            local = exp.engine.train(params, clients.tolist(), t)
            params = exp.algorithm.server_step(params, local, info).global_params
            times.append(time.perf_counter() - start)
            cohorts.append(int(clients.numel()))
        results[engine] = (times[1:], params, cohorts)
        print(f"{engine:>10}: median {statistics.median(times[1:]):.3f} s/round over {len(times) - 1} rounds "
              f"(warm-up {times[0]:.3f} s; cohorts {cohorts}; rounds {[round(x, 3) for x in times[1:]]})")
    vec, seq = statistics.median(results["vectorized"][0]), statistics.median(results["sequential"][0])
    diff = float((results["vectorized"][1] - results["sequential"][1]).abs().max())
    print(f"model {args.model}, population 1000, p = 0.04, torch threads {torch.get_num_threads()}")
    print(f"speed-up vectorized vs sequential: {seq / vec:.2f}x ({seq:.3f} s -> {vec:.3f} s per round)")
    print(f"max |vectorized - sequential| of the global model after {args.rounds} rounds: {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
