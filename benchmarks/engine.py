"""Engine benchmark: seconds per round of the sequential and vectorized engines, side by side.

    ./dev bench engine [--rounds 6] [--workloads W W2 FI FD C] [--repeat 3] [--data-dir DIR]

Workloads (foundation issue; C: issue #28):
  W   100 clients × 600 MNIST training samples, MLP 784-256-10, 1 local epoch, batch 64, lr 0.05,
      each client's update clipped to 1.0 plus Gaussian noise (std 0.01), FedAvg. Compute-bound.
      When the performance probe is there (``../shared/perf-probe``, ``--probe DIR``), its plain
      loop (``impl_torch.py A``) and hand-batched implementation (``impl_torch.py Bopt``) of the same
      workload run in the same pass, interleaved with the vectorized engine ``--repeat`` times, and
      the benchmark prints the ratios dpfl / Bopt and dpfl / A of each repetition (medians of the
      measured rounds) and of the fastest rounds of all repetitions (the least loaded).
  W2  1,000 clients × 50 samples of the UCI Census-Income (KDD) features, logistic regression,
      1 local epoch, batch 10. Overhead-bound.
  FI  Fashion-MNIST (all 60,000 training samples) split IID over 200 clients, 50 sampled per round,
      MLP 784-128-10, 1 local epoch, batch 32, lr 0.05, FedAvg.
  FD  the same with a Dirichlet(α = 0.1) label split (seed 0): client sizes from a few samples to
      thousands, so the cohort's steps are unbalanced. FI and FD run in the same pass; the
      benchmark prints the ratio of their speed-ups.
  C   W with the CNN of the reproductions (001's ``cnn2``, variant reddi: conv 3×3 32 → conv 3×3 64
      → max-pool → linear 128 → linear 10; 1.2 M parameters): 100 clients × 600 MNIST samples, 1
      epoch, batch 64, clip + noise. The vectorized engine only (``--cnn-sequential`` adds the
      sequential one), ``--cnn-rounds`` rounds (default 3: ~70 GFLOP per sample-epoch makes a
      round tens of seconds). Memory per client: the engine's ``client_bytes`` estimate (what
      its blocks are sized by) and the measured peak (peak RSS − RSS before the first round) / K.

Every figure is measured in this run: each engine (and each probe implementation) runs in its own
child process (so peak memory is its own), with 2 torch threads; a round's time is the median over
the measured rounds after one warm-up round. The FLOP-bound time is FLOPs / (float32 matmul
GFLOP/s measured now on 2 threads, before and after the workloads; the bound uses the faster).
W also prints its matrix products alone (:func:`mlp_matmul_floor`): the same batched products
the engine's kernel makes, timed without anything else, so the gap between the engine and the
FLOP bound splits into the products' own shapes (a weight gradient's inner dimension is the batch
width, 64) and the engine's overhead.
FLOPs per round: W, W2, FI, FD 6 × parameters × samples; C 3 × the forward FLOPs of the
convolutions and linear layers × samples (forward, weight gradient, input gradient: the same
rule). "Exact" counts what a step has to compute: no input gradient for the first layer.
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

import numpy as np
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
    if name in ("W", "C"):
        ds = load_dataset("mnist", _data_dir(data_dir, "mnist"))
        clients, per, local = 100, 600, LocalTraining(lr=0.05, epochs=1, batch_size=64)
        model_name = "mlp" if name == "W" else "cnn2"
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


def _rss_bytes() -> int:
    """Resident set size now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def model_flops(module: torch.nn.Module, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """(forward FLOPs of one sample's convolutions and linear layers, those of the first of them):
    2 × multiply-adds, measured with hooks on one forward pass."""
    flops: list[int] = []

    def hook(m: torch.nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        if isinstance(m, torch.nn.Linear):
            flops.append(2 * out.numel() * m.in_features)
        elif isinstance(m, torch.nn.Conv2d):
            kh, kw = m.kernel_size
            flops.append(2 * out.numel() * (m.in_channels // m.groups) * kh * kw)

    handles = [m.register_forward_hook(hook) for m in module.modules()
               if isinstance(m, torch.nn.Linear | torch.nn.Conv2d)]
    try:
        with torch.no_grad():
            module(torch.zeros(1, *input_shape))
    finally:
        for h in handles:
            h.remove()
    return sum(flops), (flops[0] if flops else 0)


def worker(workload: str, engine_name: str, rounds: int, data_dir: str | None) -> None:
    from dpfl.client.context import RoundInfo
    from dpfl.sim.sequential import SequentialEngine
    from dpfl.sim.vectorized import VectorizedEngine

    torch.set_num_threads(2)
    seeds, data, problem, algo, samples = _workload(workload, data_dir)
    engine = {"vectorized": VectorizedEngine, "sequential": SequentialEngine}[engine_name](problem, data, seeds)
    params = problem.layout.flatten(problem.module)
    fwd, first = model_flops(problem.module, tuple(data.x.shape[1:]))
    memory: dict[str, int] = {}
    times, cohort_samples, longest_alone, client_steps, max_steps = [], [], [], [], []
    rss0 = _rss_bytes()
    for t in range(rounds):
        t0 = time.perf_counter()
        clients = algo.sample(t, data.num_clients, seeds)
        sizes = data.sizes(clients.tolist())
        cohort_samples += sizes.tolist()
        start = params
        local = engine.train(params, clients.tolist(), t)
        params = algo.server_step(params, local, RoundInfo(t, data.num_clients, clients, seeds)).global_params
        times.append(time.perf_counter() - t0)
        if isinstance(engine, VectorizedEngine) and workload in ("FI", "FD"):
            counts = [int(p.shape[0]) for p in engine._client_plans(clients.tolist(), t)]
            client_steps.append(sum(counts))
            max_steps.append(max(counts))
        if workload == "FD":
            # the critical path: the cohort's largest client trained alone by this engine (timed
            # apart from the round): no engine that runs a client's steps in order beats it
            t0 = time.perf_counter()
            engine.train(start, [int(clients[int(np.argmax(sizes))])], t)
            longest_alone.append(time.perf_counter() - t0)
        if t == 0 and isinstance(engine, VectorizedEngine):
            plans = engine._client_plans(clients.tolist(), t)
            steps, width = max(p.shape[0] for p in plans), max(p.shape[1] for p in plans)
            fuse = engine._fusable(engine._terms(problem.layout.views(params)))[1]
            memory = {"client_bytes": engine.client_bytes(steps, width, fuse), "clients": len(plans),
                      "block": engine.block_size(len(plans), steps, width, fuse)}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "times": times,
        "params": problem.layout.numel,
        "samples": samples,
        "maxrss_mb": peak / 2**20,
        "rss_before_mb": rss0 / 2**20,
        "memory": memory,
        "forward_flops": fwd,
        "first_layer_flops": first,
        "final_norm": float(params.norm()),
        "cohort_samples": cohort_samples,
        "longest_alone": longest_alone,
        "client_steps": client_steps,
        "max_steps": max_steps,
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


def mlp_matmul_floor(clients: int, batches: list[int], dims: tuple[int, ...], reps: int = 7) -> float:
    """Seconds one round of an MLP's matrix products alone takes, made as the vectorized engine's
    kernel makes them (``sim/vectorized.py``, ``sim/kernel.py``): clients in chunks of the engine's
    size, each chunk taking all its steps on one of 2 threads with one intra-op thread; weights
    stacked [c, out, in]; per step the forward ``bmm(x, Wᵀ)``, the input gradient ``bmm(g, W)`` for
    every layer but the first, and the SGD step fused into ``W.baddbmm_(gᵀ, x)``. Only those
    products, over the real batch widths ``batches`` (no padding, copies, bias, activation, loss,
    clip or noise); buffers preallocated per chunk; the median of ``reps`` rounds after one
    warm-up. What the engine's round costs beyond this is its overhead; what this costs beyond
    the FLOP bound is the products' shapes (a weight gradient's inner dimension is the batch)."""
    from dpfl.sim.vectorized import _l2_cache_bytes, _run_threaded

    threads = 2
    torch.set_num_threads(threads)
    layers = list(zip(dims[:-1], dims[1:], strict=True))
    client_bytes = 4 * sum(i * o + o for i, o in layers)
    chunk = max(1, min(4 * _l2_cache_bytes() // client_bytes, -(-clients // (2 * threads))))
    chunks = [(lo, min(lo + chunk, clients)) for lo in range(0, clients, chunk)]
    gen = torch.Generator().manual_seed(0)
    bufs = {lo: ([torch.randn(hi - lo, o, i, generator=gen) * 1e-3 for i, o in layers],
                 {b: [torch.randn(hi - lo, b, d, generator=gen) for d in dims] for b in set(batches)},
                 {b: [torch.empty(hi - lo, b, d) for d in dims] for b in set(batches)}) for lo, hi in chunks}

    def run(lo: int, hi: int) -> None:
        w, acts_of, outs_of = bufs[lo]
        for b in batches:
            acts, outs = acts_of[b], outs_of[b]
            for li in range(len(layers)):
                torch.bmm(acts[li], w[li].transpose(1, 2), out=outs[li + 1])  # forward
            for li in reversed(range(len(layers))):
                if li:
                    torch.bmm(acts[li + 1], w[li], out=outs[li])  # input gradient
                w[li].baddbmm_(acts[li + 1].transpose(1, 2), acts[li], alpha=-1e-9)  # fused SGD step

    times = []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        _run_threaded(chunks, run, threads)
        if rep:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _run_worker(workload: str, engine: str, rounds: int, data_dir: str) -> dict | None:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", workload, engine, "--rounds", str(rounds)]
        + (["--data-dir", data_dir] if data_dir else []),
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_probe(probe: Path, impl: str) -> dict | None:
    """One run of the performance probe's ``impl_torch.py IMPL --threads 2``: its ``RESULT`` line."""
    out = subprocess.run([sys.executable, "impl_torch.py", impl, "--threads", "2"], cwd=probe,
                         capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        print(f"probe {impl} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1][len("RESULT "):])


def _median(times: list[float]) -> float:
    return statistics.median(times[1:] if len(times) > 1 else times)


def _times(times: list[float]) -> str:
    return ", ".join(f"{x:.3f}" for x in times)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6, help="rounds per engine, the first is a warm-up (>= 6)")
    p.add_argument("--workloads", nargs="+", default=["W", "W2", "FI", "FD", "C"], choices=["W", "W2", "FI", "FD", "C"])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--repeat", type=int, default=3,
                   help="W: runs of the vectorized engine and of each probe implementation, interleaved (default 3)")
    p.add_argument("--probe", default=str(ROOT.parent / "shared" / "perf-probe"),
                   help="the performance probe's directory (impl_torch.py); W compares against it when present")
    p.add_argument("--cnn-rounds", type=int, default=3, help="rounds of workload C, the first is a warm-up (default 3)")
    p.add_argument("--cnn-sequential", action="store_true", help="C: run the sequential engine too (slow)")
    p.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "ENGINE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    data_dir = args.data_dir or ""
    if args.worker:
        worker(args.worker[0], args.worker[1], args.rounds, data_dir)
        return 0
    gflops = matmul_gflops()
    print(f"float32 matmul on 2 threads: {gflops:.1f} GFLOP/s (2048×2048, median of 8)")
    probe = Path(args.probe)
    has_probe = (probe / "impl_torch.py").is_file()
    speedups: dict[str, float] = {}
    reports: list[tuple[str, dict[str, dict], dict[str, list[dict]]]] = []
    for wl in args.workloads:
        engines = ["sequential", "vectorized"] if wl != "C" or args.cnn_sequential else ["vectorized"]
        rounds = args.cnn_rounds if wl == "C" else args.rounds
        res: dict[str, dict] = {}
        for eng in engines:
            r = _run_worker(wl, eng, rounds, data_dir)
            if r is None:
                return 1
            res[eng] = r
        probes: dict[str, list[dict]] = {}
        if wl == "W" and has_probe:
            # interleaved: vectorized, Bopt, A, then again; the first vectorized run is the one above
            runs = {"vectorized": [res["vectorized"]], "Bopt": [], "A": []}
            for rep in range(max(args.repeat, 1)):
                if rep:
                    r = _run_worker(wl, "vectorized", rounds, data_dir)
                    if r is None:
                        return 1
                    runs["vectorized"].append(r)
                for impl in ("Bopt", "A"):
                    pr = _run_probe(probe, impl)
                    if pr is None:
                        return 1
                    runs[impl].append(pr)
            probes = runs
        reports.append((wl, res, probes))
    gflops_after = matmul_gflops()
    rate = max(gflops, gflops_after)
    # W's round of matrix products alone (100 clients x 600 samples, batch 64, MLP 784-256-10)
    w_floor = mlp_matmul_floor(100, [64] * (600 // 64) + ([600 % 64] if 600 % 64 else []), (784, 256, 10)) \
        if "W" in args.workloads else None
    print(f"float32 matmul on 2 threads after the workloads: {gflops_after:.1f} GFLOP/s; the FLOP bounds use "
          f"{rate:.1f}")
    for wl, res, probes in reports:
        r0 = next(iter(res.values()))
        if wl == "C":
            flops = 3 * r0["forward_flops"] * r0["samples"]
            rule = "3 × forward conv/linear FLOPs × N"
        else:
            flops = 6 * r0["params"] * r0["samples"]
            rule = "6·P·N"
        exact = (3 * r0["forward_flops"] - r0["first_layer_flops"]) * r0["samples"]
        bound = flops / (rate * 1e9)
        print(f"\nworkload {wl}: {r0['samples']} samples, {r0['params']} parameters, {flops / 1e9:.1f} GFLOP per "
              f"round ({rule}; exact matmul/conv FLOPs {exact / 1e9:.1f}), FLOP-bound time {bound:.3f} s")
        med = {}
        for eng, r in res.items():
            measured = r["times"][1:]
            med[eng] = statistics.median(measured)
            print(f"  {eng:<11} {med[eng]:.3f} s/round (median of {len(measured)}; all: {_times(measured)})  "
                  f"{bound / med[eng]:.0%} of FLOP bound  peak RSS {r['maxrss_mb']:.0f} MB")
        if wl == "W" and w_floor is not None:
            print(f"  its matrix products alone, made as the engine's kernel makes them (chunks of clients on 2 "
                  f"threads, the SGD step fused into the weight gradient; real batch widths): {w_floor:.3f} "
                  f"s/round = {bound / w_floor:.0%} of the FLOP bound; dpfl vectorized {med['vectorized']:.3f} s = "
                  f"{w_floor / med['vectorized']:.0%} of that (the rest: biases, activations, loss, copies, clip, "
                  "noise, data)")
        vec = res["vectorized"]
        if vec.get("memory"):
            m = vec["memory"]
            measured_per = (vec["maxrss_mb"] - vec["rss_before_mb"]) * 2**20 / max(m["clients"], 1)
            print(f"  memory per client: client_bytes estimate {_mib(m['client_bytes'])} (blocks of {m['block']} of "
                  f"{m['clients']} clients); measured (peak RSS − RSS before training) / {m['clients']} = "
                  f"{_mib(measured_per)}")
        if probes:
            names = {"vectorized": "dpfl vectorized", "Bopt": "probe Bopt (hand-batched)", "A": "probe A (plain loop)"}
            meds: dict[str, list[float]] = {}
            fastest: dict[str, float] = {}
            for impl, runs in probes.items():
                rounds_of = [run["times"] if impl == "vectorized" else run["round_times"] for run in runs]
                meds[impl] = [_median(t) for t in rounds_of]
                fastest[impl] = min(min(t[1:] if len(t) > 1 else t) for t in rounds_of)
                print(f"  {names[impl]:<27} " + "  ".join(f"run {i + 1}: {m:.3f} s/round ({bound / m:.0%})"
                                                        for i, m in enumerate(meds[impl]))
                      + f"  fastest round {fastest[impl]:.3f} s ({bound / fastest[impl]:.0%})")
            for other in ("Bopt", "A"):
                ratios = [a / b for a, b in zip(meds["vectorized"], meds[other], strict=False)]
                print(f"  dpfl / {other:<4} " + "  ".join(f"run {i + 1}: {q:.2f}" for i, q in enumerate(ratios))
                      + f"   median {statistics.median(ratios):.2f}; fastest rounds "
                      f"{fastest['vectorized'] / fastest[other]:.2f}")
            print("  (same pass, consecutive processes; on a shared machine the load moves within a run, and "
                  "the fastest rounds are the least loaded ones)")
        if "sequential" in med:
            speedups[wl] = med["sequential"] / med["vectorized"]
            if wl == "FD":
                sizes = r0.get("cohort_samples", [])
                if sizes:
                    print(f"  cohort sizes (samples per sampled client, all rounds): min {min(sizes)}, median "
                          f"{statistics.median(sizes):.0f}, max {max(sizes)}")
                fi = next((r for w, r, _ in reports if w == "FI"), None)
                fd_steps = res["vectorized"].get("client_steps", [])
                if fi is not None and fi["vectorized"].get("client_steps") and fd_steps:
                    fi_times, fi_steps = fi["vectorized"]["times"][1:], fi["vectorized"]["client_steps"][1:]
                    per_step = statistics.median(t / n for t, n in zip(fi_times, fi_steps, strict=True))
                    at_fi = statistics.median(per_step * n for n in fd_steps[1:])
                    print(f"  at FI's cost per client-step ({per_step * 1e3:.2f} ms, vectorized), FD's "
                          f"{statistics.median(fd_steps[1:]):.0f} client-steps per round would take {at_fi:.3f} s; "
                          f"measured {med['vectorized']:.3f} s ({med['vectorized'] / at_fi:.2f}×): the rest is the "
                          f"rounds' long tails, {statistics.median(res['vectorized']['max_steps'][1:]):.0f} steps "
                          f"deep against FI's {statistics.median(fi['vectorized']['max_steps'][1:]):.0f}, most of "
                          "them with few clients active")
                alone = {eng: statistics.median(r["longest_alone"][1:]) for eng, r in res.items()
                         if len(r.get("longest_alone", [])) > 1}
                if alone:
                    floor = min(alone.values())
                    print("  critical path: each round's largest client trained alone, "
                          + ", ".join(f"{eng} {v:.3f} s/round" for eng, v in alone.items())
                          + f"; the faster, {floor:.3f} s, is a floor for any engine that runs a client's steps in "
                          f"order: vectorized FD is {med['vectorized'] / floor:.2f}× it, sequential FD / floor "
                          f"= {med['sequential'] / floor:.1f}× is the most any such engine can gain here")
            print(f"  speed-up vectorized / sequential: {speedups[wl]:.2f}×  "
                  f"(final-model norms {res['sequential']['final_norm']:.5f} vs {res['vectorized']['final_norm']:.5f})")
        if wl == "W" and not probes:
            print(f"  performance probe: not found at {probe} — no dpfl / probe ratios in this run")
    try:
        import flwr  # noqa: F401

        print("\nFlower: installed, but the Flower comparison runs in benchmarks/flower.py")
    except ImportError:
        print("\nFlower: not installed (pip install 'dpfl[flower]') — no Flower figure in this run")
    if "FI" in speedups and "FD" in speedups:
        print(f"\nunbalanced clients: speed-up on Dirichlet α = 0.1 / speed-up on IID = "
              f"{speedups['FD']:.2f}× / {speedups['FI']:.2f}× = {speedups['FD'] / speedups['FI']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
