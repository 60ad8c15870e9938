"""The deployed round time of DP-FedAvg with secure aggregation (SecAgg+) against without.

    .venv/bin/python benchmarks/secagg.py [--nodes 4 8] [--rounds 4] [--data-dir DIR]

Workload: the main job's model (MLP 784-64-10, 50,890 parameters), DP-FedAvg local variant with
noise multiplier 1.5 and clip 1.0, every client each round (sampling ``all``), 60 MNIST samples
per client, 1 local epoch, batch 20. Each configuration runs on a fresh ``LocalFederation`` of
N SuperNodes on 127.0.0.1 (Flower's deployment engine, warm workers):

  plain    ``privacy.secure_aggregation: false`` — one train message per client, float uploads
  secagg   ``privacy.secure_aggregation: true``, ``secure_sum.bits: 31`` — a SecAgg+ run per round
           (4 stages: setup, share keys, collect masked vectors, unmask; ChaCha20 masks;
           N <= 15 so every client shares with all: threshold floor(N/2) + 1)
  hidden   the same with ``participation: hidden`` and Poisson q = 0.5: every node joins every
           round's sum and trains, each sampled by its own coin (``--modes`` picks a subset)

A round's time is the runner's own per-round ``seconds`` (training, protocol, aggregation,
ledger), median over the rounds after the first. The secure round costs three more message
round trips than the plain one, each at least one SuperNode poll away (Flower's SuperNodes ask the
SuperLink for work every few seconds), plus mask expansion and unmasking of 50,890-vectors.
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

MODES = ("plain", "secagg", "hidden")


def _config(tmp: Path, data_dir: str, nodes: int, rounds: int, mode: str) -> Path:
    secure = mode != "plain"
    privacy: dict = {"delta": 1e-5, "secure_aggregation": secure}
    options: dict = {"noise_multiplier": 1.5, "clip_norm": 1.0}
    sampling: dict = {"kind": "all"}
    if secure:
        options["secure_sum"] = {"bits": 31}
    if mode == "hidden":  # every node in every sum, each sampled by its own coin
        privacy["participation"] = "hidden"
        sampling = {"kind": "poisson", "sample_rate": 0.5}
    cfg = {
        "name": f"bench-secagg-{nodes}-{mode}", "seed": 0, "rounds": rounds,
        "data": {"name": "mnist", "dir": data_dir},
        "partition": {"kind": "iid", "num_clients": nodes, "samples_per_client": 60},
        "model": {"name": "mlp", "options": {"hidden": 64}},
        "algorithm": {"name": "dp-fedavg", "options": options},
        "sampling": sampling,
        "privacy": privacy,
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 20},
        "engine": "sequential", "threads": 1, "eval_every": rounds, "checkpoint_every": 1000,
    }
    path = tmp / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _deployed(path: Path, store: Path, nodes: int, data_dir: str, workdir: Path) -> tuple[float, list[float]]:
    from dpfl.runtime.flower.local import LocalFederation
    from dpfl.store import RunStore

    with LocalFederation(nodes, data_dir=data_dir, workdir=workdir) as fed:
        res = fed.run(path, store=store, round_timeout=1800, connect_timeout=600, timeout=3600)
    if res["status"] != "finished":
        raise RuntimeError(f"{path.name}: {res['status']}\n{res['log'][-2000:]}")
    secs = [float(r["seconds"]) for r in RunStore(store).rounds(res["run_id"])]
    return statistics.median(secs[1:] if len(secs) > 1 else secs), secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = ap.parse_args()
    if "plain" not in args.modes:
        ap.error("--modes must include plain (the baseline of the ratios)")
    data_dir = str(Path(_data_dir(args.data_dir, "mnist")).resolve())
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dpfl-bench-secagg-") as t:
        tmp = Path(t)
        for n in args.nodes:
            got: dict[str, float] = {}
            for label in [m for m in MODES if m in args.modes]:
                path = _config(tmp, data_dir, n, args.rounds, label)
                med, secs = _deployed(path, tmp / f"{label}-{n}.sqlite", n, data_dir, tmp / f"fed-{label}-{n}")
                got[label] = med
                print(f"{n} SuperNodes, {label:6s}: median {med:.2f} s/round  (rounds {[round(x, 2) for x in secs]})",
                      flush=True)
            rows.append((n, got))
    print()
    others = [m for m in MODES if m in args.modes and m != "plain"]
    print("| SuperNodes | plain s/round | " + " | ".join(f"{m} s/round | {m} / plain" for m in others) + " |")
    print("|---|---|" + "---|---|" * len(others))
    for n, got in rows:
        print(f"| {n} | {got['plain']:.2f} | "
              + " | ".join(f"{got[m]:.2f} | {got[m] / got['plain']:.2f}×" for m in others) + " |")
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
