"""UDP's local step (000 Alg. 1): per-sample-clipped full-batch gradient descent, 50 clients × 800.

    ./dev bench udp_step [--clients 50] [--samples 800] [--loop-clients 5]

One local step of every client: the per-sample gradient of each of its samples clipped to C,
averaged, one SGD step (MLP 784-256-10 on real MNIST). Measured in the same run:
  * vectorized engine (ghost norms: no per-sample gradient materialized),
  * sequential engine (per client, per-sample gradients by vmap(grad)),
  * a per-sample Python loop (one backward per sample, clip, accumulate) — the baseline; it is
    timed on ``--loop-clients`` clients and scaled to the cohort (its cost is linear in clients).
Medians over >= 5 repetitions after a warm-up, 2 torch threads; all three give the same step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import _data_dir  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--samples", type=int, default=800)
    p.add_argument("--loop-clients", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    torch.set_num_threads(2)

    from dpfl.client.context import ClientData, LocalProblem
    from dpfl.client.local import LocalTraining
    from dpfl.data import load_dataset
    from dpfl.models import build_model, per_sample_loss
    from dpfl.rng import SeedSequence
    from dpfl.sim.sequential import SequentialEngine
    from dpfl.sim.vectorized import VectorizedEngine

    ds = load_dataset("mnist", _data_dir(args.data_dir, "mnist"))
    k, n, clip, lr = args.clients, args.samples, 1.0, 0.5
    perm = torch.randperm(ds.x_train.shape[0], generator=torch.Generator().manual_seed(0))[: k * n]
    data = ClientData(ds.x_train, ds.y_train, list(perm.view(k, n)))
    seeds = SeedSequence(0)
    model = build_model("mlp", tuple(ds.input_shape), 10, generator=seeds.generator(0, -1, "init"))
    problem = LocalProblem(model, LocalTraining(lr=lr, batch_size=None, per_sample_clip=clip))
    init = problem.layout.flatten(model)
    clients = list(range(k))

    def timed(fn, reps):  # type: ignore[no-untyped-def]
        fn()
        out, times = None, []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), out

    vec_engine = VectorizedEngine(problem, data, seeds)
    seq_engine = SequentialEngine(problem, data, seeds)
    t_vec, vec = timed(lambda: vec_engine.train(init, clients, 0).params, args.reps)
    t_seq, seq = timed(lambda: seq_engine.train(init, clients, 0).params, max(2, args.reps // 2))

    def loop() -> torch.Tensor:
        rows = []
        for c in clients[: args.loop_clients]:
            params = {name: v.clone().requires_grad_(True) for name, v in problem.layout.views(init).items()}
            total = {name: torch.zeros_like(v) for name, v in params.items()}
            for i in data.client_indices[c].tolist():
                out = torch.func.functional_call(model, params, (data.x[i : i + 1],))
                loss = per_sample_loss("cross_entropy", out, data.y[i : i + 1]).sum()
                grads = torch.autograd.grad(loss, list(params.values()))
                norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
                factor = min(1.0, clip / max(float(norm), 1e-30))
                for (name, _), g in zip(params.items(), grads, strict=True):
                    total[name] += factor * g
            rows.append(torch.cat([(params[nm] - lr * total[nm] / n).detach().reshape(-1)
                                   for nm in problem.layout.names]))
        return torch.stack(rows)

    t_loop_part, looped = timed(loop, 1)
    t_loop = t_loop_part * k / args.loop_clients
    m = args.loop_clients
    diff = max(float((vec - seq).abs().max()), float((vec[:m] - looped).abs().max()))
    print(f"UDP local step, {k} clients × {n} samples, MLP 784-256-10, per-sample clip C = {clip}")
    print(f"  vectorized (ghost norms)     {t_vec:.3f} s")
    print(f"  sequential (vmap per client) {t_seq:.3f} s   ratio {t_seq / t_vec:.1f}×")
    print(f"  per-sample Python loop       {t_loop:.1f} s (timed on {m} clients, scaled ×{k / m:g})"
          f"   ratio {t_loop / t_vec:.0f}×")
    print(f"  max |difference| between the three local models: {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
