"""Secure aggregation's cost: DP-FedAvg round time with the integer pipeline vs continuous noise.

    ./dev bench secure_sum [--rounds 6] [--clients 100] [--hidden 256] [--data-dir DIR]

Workload (W of ``benchmarks/engine.py``): real MNIST, 100 clients × 600 samples, MLP 784-H-10
(H = 256: 203,530 parameters), 1 local epoch of batch 64 at lr 0.1, every client in every round,
clip 1, noise multiplier 1, vectorized engine, 2 torch threads. Three runs of the same config in
this process: ``gaussian`` (each client adds N(0, (zS)²/K) — the continuous baseline),
``secure-visible`` (integer pipeline: scale, conditional rounding, residues mod 2^31, modular sum,
decode; the vectorized engine draws the cohort's Skellam shares as one sum) and ``secure-hidden``
(Poisson sampling with q = 1, so that N = K: every client adds μ/N). A round's
time is the median of the rounds after the first (warm-up), from the run's own progress clock.
Then the two parts of the pipeline are timed alone on the same shapes: conditional rounding of
the K clipped updates and the K Skellam shares drawn one per client (two Poisson draws per
coordinate: what the sequential engine and every real client do; the vectorized engine draws one).

Prints the seconds per round, the ratio of each secure run to the Gaussian one (the target of
the secure-aggregation issue is <= 1.3), and the breakdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _data_dir(arg: str | None) -> str:
    for cand in ([arg] if arg else []) + [str(ROOT / "data"), str(ROOT.parent / "shared" / "data")]:
        if (Path(cand) / "mnist").is_dir():
            return cand
    sys.exit("MNIST not found: pass --data-dir (a folder with mnist/)")


def _round_times(config: object, store_dir: Path) -> list[float]:
    from dpfl.rounds import run_experiment
    from dpfl.store import RunStore

    stamps: list[float] = []

    def progress(done: int, total: int, metrics: dict, elapsed: float) -> None:
        del done, total, metrics
        stamps.append(elapsed)

    run_experiment(config, RunStore(store_dir / "bench.sqlite"), progress=progress, restart=True)  # type: ignore[arg-type]
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6, help="rounds per run, the first is a warm-up (>= 3)")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--hidden", type=int, default=256, help="H of the MLP 784-H-10")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    torch.set_num_threads(2)
    from dpfl.config import parse_config
    from dpfl.privacy.mechanisms.integer import IntegerPipeline, skellam_noise_rows

    data = _data_dir(args.data_dir)
    base = {
        "name": "bench-secure", "seed": 0, "rounds": max(3, args.rounds),
        "data": {"name": "mnist", "dir": data},
        "partition": {"kind": "iid", "num_clients": args.clients, "samples_per_client": 600},
        "model": {"name": "mlp", "options": {"hidden": args.hidden}},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 1.0}},
        "sampling": {"kind": "all"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 64},
        "engine": "vectorized", "eval_every": 1000, "checkpoint_every": 1000,
    }
    every = {"kind": "poisson", "sample_rate": 1.0}  # hidden participation needs the clients' coins
    modes = {
        "gaussian": ({"delta": 1e-5}, base["sampling"]),
        "secure-visible": ({"delta": 1e-5, "secure_aggregation": True}, base["sampling"]),
        "secure-hidden": ({"delta": 1e-5, "secure_aggregation": True, "participation": "hidden"}, every),
    }
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (privacy, sampling) in modes.items():
            times = _round_times(parse_config({**base, "privacy": privacy, "sampling": sampling}), Path(tmp))
            results[name] = statistics.median(times[1:]) if len(times) > 1 else float("nan")
            print(f"{name:<15} {results[name]:.3f} s/round (median of {len(times) - 1} rounds after a warm-up)",
                  flush=True)
    g = results["gaussian"]
    for name, sec in results.items():
        if name != "gaussian":
            print(f"ratio {name} / gaussian: {sec / g:.2f}")
    # the pipeline's parts alone, on the same shapes
    d = 784 * args.hidden + args.hidden + args.hidden * 10 + 10
    k = args.clients
    pipe = IntegerPipeline(dim=d, bits=31, scale=2.0 ** 16, clip_norm=1.0)
    x = torch.randn(k, d, generator=torch.Generator().manual_seed(0))
    x = x / x.norm(dim=1, keepdim=True)
    gens = [torch.Generator().manual_seed(i) for i in range(k)]
    t = time.perf_counter()
    pipe.encode(x, gens)
    t_round = time.perf_counter() - t
    t = time.perf_counter()
    skellam_noise_rows(d, (pipe.l2_sensitivity ** 2) / k, gens)
    t_noise = time.perf_counter() - t
    t = time.perf_counter()
    torch.randn(k, d, generator=gens[0])
    t_gauss = time.perf_counter() - t
    print(f"breakdown for {k} clients × {d:,} parameters: conditional rounding {t_round:.3f} s, Skellam shares "
          f"{t_noise:.3f} s (Gaussian noise of the same shape: {t_gauss:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
