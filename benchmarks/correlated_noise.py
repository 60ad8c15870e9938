"""Correlated noise per round against a real round, and its memory against the stated formula.

    ./dev bench correlated_noise [--data-dir DIR] [--rounds 8] [--noise-rounds 200] [--threads 2]

(a) **Cost.** One round of each strategy's noise stream (``next``: tree, banded with 5 bands, BLT
    with d = 4 and 5 buffers, and the identity, i.e. ``torch.randn``) for the parameters of the
    dp-ftrl main config's model (MLP 784-64-10: 50,890) and of an MLP 784-256-10 (203,530), median
    over ``--noise-rounds`` rounds, interleaved so every stream sees the same load; next to the
    time of a real round of ``dpfl run dp-ftrl-mnist`` (1,000 MNIST clients, 200 per round,
    independent noise, no evaluation), measured in the same pass from ``--rounds`` rounds. The
    issue's target: BLT with d <= 5 at most 10% of a round.
(b) **Memory.** For each stream, the most bytes of tensors it held between two rounds (every
    tensor attribute) against the stated formula ``memory_vectors × |θ| × 4`` (float32), and
    the growth of the process's peak RSS while streaming them (the stream must not grow).

Needs MNIST in ``--data-dir`` (default ``$DPFL_DATA_DIR``, else ``data``); skips (a)'s round without it.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from dpfl.privacy.mechanisms.correlated import (
    BandedToeplitzStrategy,
    IdentityStrategy,
    NoiseStream,
    TreeStrategy,
)
from dpfl.privacy.mechanisms.correlated.blt import initial_blts
from dpfl.privacy.mechanisms.correlated.workload import toeplitz_sqrt

SIZES = {"MLP 784-64-10": 50_890, "MLP 784-256-10": 203_530}


def _held_bytes(stream: NoiseStream) -> int:
    """Bytes of every tensor the stream object holds (attributes, lists and dicts of tensors)."""
    seen: set[int] = set()

    def walk(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            if id(value) in seen:
                return 0
            seen.add(id(value))
            return value.numel() * value.element_size()
        if isinstance(value, (list, tuple)):
            return sum(walk(v) for v in value)
        if isinstance(value, dict):
            return sum(walk(v) for v in value.values())
        return 0

    return walk(vars(stream))


def _streams(n: int, num_params: int) -> dict[str, NoiseStream]:
    import numpy as np

    return {
        "identity (torch.randn)": IdentityStrategy(n).noise_stream(num_params),
        "tree, restart every 5": TreeStrategy(n, restart_every=5).noise_stream(num_params),
        "tree, one tree": TreeStrategy(n).noise_stream(num_params),
        "banded, 5 bands": BandedToeplitzStrategy(n, toeplitz_sqrt(np.ones(5), 5)).noise_stream(num_params),
        "BLT, d = 4": initial_blts(n, 4)[0].noise_stream(num_params),
        "BLT, d = 5": initial_blts(n, 5)[0].noise_stream(num_params),
    }


def _noise_cost(num_params: int, rounds: int) -> tuple[dict[str, float], dict[str, tuple[int, int]]]:
    n = rounds + 20
    streams = _streams(n, num_params)
    gen = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {k: [] for k in streams}
    most: dict[str, int] = {k: 0 for k in streams}
    for t in range(n):
        for name, s in streams.items():  # interleaved: the same load for every stream
            t0 = time.perf_counter()
            s.next(t, gen)
            if t >= 20:
                times[name].append(1000 * (time.perf_counter() - t0))
            most[name] = max(most[name], _held_bytes(s))  # the state between rounds, at its largest
    held = {name: (most[name], s.memory_vectors * num_params * 4) for name, s in streams.items()}
    return {k: statistics.median(v) for k, v in times.items()}, held


def _round_ms(data_dir: Path, rounds: int, threads: int) -> float | None:
    if not (data_dir / "mnist").is_dir():
        return None
    from dpfl.config import load_raw, parse_config
    from dpfl.rounds import run_experiment
    from dpfl.store import RunStore

    raw = load_raw("dp-ftrl-mnist")
    raw.update(rounds=rounds, eval_every=10_000, checkpoint_every=10_000, threads=threads)
    raw["data"] = {**raw["data"], "dir": str(data_dir)}
    raw["algorithm"]["options"] = {**raw["algorithm"]["options"], "mechanism": "independent"}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = run_experiment(parse_config(raw), RunStore(Path(tmp) / "s.sqlite"))
        wall = time.perf_counter() - t0
    per_round = [float(h["seconds"]) for h in result.history if "seconds" in h]
    if per_round:
        return 1000 * statistics.median(per_round)
    return 1000 * wall / rounds  # includes the build: an upper bound on a round


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=Path(os.environ.get("DPFL_DATA_DIR", "data")))
    p.add_argument("--rounds", type=int, default=8, help="rounds of the real run timed")
    p.add_argument("--noise-rounds", type=int, default=200, help="rounds of each noise stream timed")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    # the streams first: OpenMP threads left spinning by a training round would inflate their times
    measured = {}
    for label, num in SIZES.items():
        peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        med, held = _noise_cost(num, args.noise_rounds)
        measured[label] = (med, held, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak0)
    round_ms = _round_ms(args.data_dir, args.rounds, args.threads)
    if round_ms is None:
        print(f"(no MNIST under {args.data_dir}: the real round is not measured)")
    else:
        print(f"a real round of dp-ftrl-mnist (200 clients, independent noise): {round_ms:.1f} ms (median)")
    for label, num in SIZES.items():
        med, held, grew = measured[label]
        base = med["identity (torch.randn)"]
        print(f"\n{label}: |θ| = {num:,}, median of {args.noise_rounds} rounds, {args.threads} thread(s)")
        print(f"  {'stream':24} {'ms/round':>9} {'× randn':>8} {'% of a round':>13} {'held MiB':>9} "
              f"{'formula MiB':>12}")
        for name, ms in med.items():
            share = f"{100 * ms / round_ms:12.2f}%" if round_ms and num == 50_890 else f"{'—':>13}"
            have, formula = held[name]
            print(f"  {name:24} {ms:9.3f} {ms / base:8.2f} {share} {have / 2**20:9.2f} {formula / 2**20:12.2f}")
        print(f"  peak RSS grew by {grew / 1024:.1f} MiB while streaming (the streams' state plus one round's draws)")
    print("\nheld: the most a stream held between rounds; formula: memory_vectors × |θ| × 4 bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
