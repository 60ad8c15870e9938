"""Secure noise's cost: ChaCha20 noise streams against the fast generators, per round.

    ./dev bench secure_noise [--reps 20] [--round-trips 6] [--udp-clients 50] [--data-dir DIR]

Three generators draw the same noise, each made fresh per stream as a round makes them:
``seeded`` (torch generators from the run's seed: simulations), ``mt19937-os`` (torch's MT19937,
its state filled from os.urandom: today's deployments) and ``chacha20``
(:class:`dpfl.rng.CsprngGenerator`, a fresh OS key per stream: ``privacy.noise_generator: csprng``
and ``SeedSequence.secure_mode("chacha20")``). Medians over ``--reps`` repetitions, 2 torch threads.

(a) The main job (``dpfl run default``: DP-FedAvg, MLP 784-64-10, 50,890 parameters, secure
    aggregation with hidden participation, 1,000 clients): one client's part of a round —
    conditional rounding of its update (uniforms over d' coordinates) and its Skellam share
    Sk(μ/N) (two Poisson draws per coordinate), plus its coin — and the server's Skellam top-up
    (the whole μ: an empty round, the most it draws); and a central Gaussian of the model's size.
(b) UDP's client step (000 Alg. 1): K clients each add N(0, σ² I) to their P parameters
    (``--udp-clients`` × MLP 784-256-10, 203,530 parameters, as ``benchmarks/udp_step.py``).
(c) With MNIST present: whole rounds of the main job and of a UDP run of (b)'s shape,
    ``privacy.noise_generator`` seeded against csprng (the run's own progress clock; the first
    round is a warm-up).

Prints each figure per generator and its ratio to ``seeded`` measured in the same pass (the
issue's target: a secure round <= 1.3× a fast one).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("seeded", "mt19937-os", "chacha20")


def _data_dir(arg: str | None) -> str | None:
    for cand in ([arg] if arg else []) + [str(ROOT / "data"), str(ROOT.parent / "shared" / "data")]:
        if (Path(cand) / "mnist").is_dir():
            return cand
    return None


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _sequences() -> dict[str, Any]:
    from dpfl.rng import SeedSequence

    return {"seeded": SeedSequence(0), "mt19937-os": SeedSequence.secure_mode(),
            "chacha20": SeedSequence.secure_mode("chacha20")}


def _row(label: str, ms: dict[str, float]) -> None:
    base = ms["seeded"]
    cells = "  ".join(f"{k} {v:8.2f} ms ({v / base:4.2f}×)" for k, v in ms.items())
    print(f"{label:<44} {cells}", flush=True)


def main_job_parts(reps: int) -> None:
    from dpfl.config import load_raw, parse_config
    from dpfl.privacy.mechanisms import add_gaussian_noise, draw
    from dpfl.privacy.mechanisms.integer import skellam_noise
    from dpfl.rng import SERVER
    from dpfl.rounds.build import build_plan

    raw = load_raw("default")
    clients, params = int(raw["partition"]["num_clients"]), 784 * 64 + 64 + 64 * 10 + 10
    plan = build_plan(parse_config(raw), [60] * clients, params)
    sec = plan.algorithm.calibration().secure_sum  # type: ignore[attr-defined]
    pipe = sec.pipeline(params, float(raw["algorithm"]["options"]["clip_norm"]))
    share = sec.variance / clients  # hidden participation: every client adds μ/N
    print(f"(a) main job: d = {params:,} (d' = {pipe.padded_dim:,}), μ = {sec.variance:.4g}, share μ/N = {share:.4g}, "
          f"γ = {pipe.scale:g}")
    x = torch.randn(1, params, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    x = x / x.norm() * 0.9
    seqs = _sequences()

    def client(seeds: Any) -> None:
        rounding = seeds.noise_generator(0, 1, "rounding")
        pipe.encode(x, [rounding])
        skellam_noise((pipe.padded_dim,), share, seeds.noise_generator(0, 1, "noise"))
        draw.rand((), seeds.noise_generator(0, 1, "coin"))

    def rounding_only(seeds: Any) -> None:
        pipe.encode(x, [seeds.noise_generator(0, 1, "rounding")])

    def share_only(seeds: Any) -> None:
        skellam_noise((pipe.padded_dim,), share, seeds.noise_generator(0, 1, "noise"))

    def topup(seeds: Any) -> None:
        skellam_noise((pipe.padded_dim,), sec.variance, seeds.noise_generator(0, SERVER, "topup"))

    def central(seeds: Any) -> None:
        add_gaussian_noise(x, 1.5, seeds.noise_generator(0, SERVER, "server_noise"))

    for label, fn in (("client: rounding + Skellam share + coin", client),
                      ("  of which conditional rounding", rounding_only),
                      ("  of which Skellam share Sk(μ/N)", share_only),
                      ("server: Skellam top-up Sk(μ)", topup),
                      ("central Gaussian, 50,890 float32", central)):
        _row(label, {k: _median_ms(lambda s=s, f=fn: f(s), reps) for k, s in seqs.items()})
    # the Flower deployment's current share: numpy PCG64 from os.urandom (runtime/flowerapps/distributed.py)
    import numpy as np

    from dpfl.runtime.flowerapps.distributed import skellam_share

    pcg = _median_ms(lambda: skellam_share(pipe.padded_dim, share, np.random.Generator(np.random.PCG64())), reps)
    print(f"{'  (Flower today: Skellam share from PCG64)':<44} {pcg:8.2f} ms", flush=True)


def udp_parts(reps: int, k: int) -> None:
    from dpfl.privacy.mechanisms import add_gaussian_noise_per_client

    params = 784 * 256 + 256 + 256 * 10 + 10
    print(f"(b) UDP client step: {k} clients × {params:,} parameters, N(0, σ² I) per client row")
    x = torch.zeros(k, params)
    out = torch.empty_like(x)
    seqs = _sequences()

    def step(seeds: Any) -> None:
        gens = [seeds.noise_generator(0, c, "noise") for c in range(k)]
        add_gaussian_noise_per_client(x, 0.1, gens, out=out)

    _row("per-client Gaussian noise of a round", {name: _median_ms(lambda s=s: step(s), max(3, reps // 4))
                                                  for name, s in seqs.items()})


def round_times(data: str, rounds: int, udp_clients: int) -> None:
    from dpfl.config import load_raw

    raw = load_raw("default")
    raw.update({"rounds": max(2, rounds), "eval_every": 1000, "checkpoint_every": 1000})
    raw["data"] = {**raw["data"], "dir": data}
    print(f"(c) main job rounds ({raw['partition']['num_clients']} clients, hidden participation): "
          f"median s/round of {max(2, rounds) - 1} after a warm-up")
    _rounds(raw)
    udp = {
        "name": "bench-udp", "seed": 0, "rounds": max(2, rounds), "eval_every": 1000, "checkpoint_every": 1000,
        "data": {"name": "mnist", "dir": data},
        "partition": {"kind": "iid", "num_clients": udp_clients, "samples_per_client": 800},
        "model": {"name": "mlp", "options": {"hidden": 256}},
        "algorithm": {"name": "udp", "options": {"epsilon": 5.0, "clip_norm": 1.0}},
        "sampling": {"kind": "all"}, "privacy": {"delta": 1e-5},
        "local": {"lr": 0.5, "epochs": 1, "batch_size": None, "steps": None},
    }
    print(f"    UDP rounds ({udp_clients} clients × 800 samples, MLP 784-256-10, one per-sample-clipped "
          "full-batch step each)")
    _rounds(udp)


def _rounds(raw: dict[str, Any]) -> None:
    from dpfl.config import parse_config
    from dpfl.rounds import run_experiment
    from dpfl.store import RunStore

    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("seeded", "csprng"):
            stamps: list[float] = []

            def progress(done: int, total: int, metrics: dict[str, Any], elapsed: float,
                         stamps: list[float] = stamps) -> None:
                del done, total, metrics
                stamps.append(elapsed)

            cfg = parse_config({**raw, "privacy": {**raw["privacy"], "noise_generator": name}})
            run_experiment(cfg, RunStore(Path(tmp) / "bench.sqlite"), progress=progress, restart=True)
            steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            result[name] = statistics.median(steps) if steps else float("nan")
            print(f"  {name:<8} {result[name]:.3f} s/round", flush=True)
    print(f"  ratio csprng / seeded: {result['csprng'] / result['seeded']:.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--udp-clients", type=int, default=50)
    p.add_argument("--round-trips", type=int, default=6, help="rounds of each run per generator (0: skip)")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    torch.set_num_threads(2)
    main_job_parts(args.reps)
    udp_parts(args.reps, args.udp_clients)
    data = _data_dir(args.data_dir)
    if args.round_trips and data is None:
        print("(c) skipped: MNIST not found (pass --data-dir, a folder with mnist/)")
    elif args.round_trips:
        round_times(data, args.round_trips, args.udp_clients)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
