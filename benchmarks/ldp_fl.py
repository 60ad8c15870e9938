"""LDP-FL round benchmark (001): randomize + shuffle + aggregate-by-id, vectorized vs per-client loop.

    .venv/bin/python benchmarks/ldp_fl.py [--clients 100] [--repeats 1]

Workload: one LDP-FL round after local training for 100 clients of the 2-layer CNN (``cnn2``,
variant "reddi", 1,199,882 weights on MNIST's 1×28×28 input): 120 M weights randomized per
round. The local models are the initial model plus a small client-specific perturbation (the
benchmark times the privacy/communication part of the round, not training), fixed range
(c, r) = (0, 0.075) as 001 uses on MNIST, ε = 1.

* **vectorized** — the library path, :meth:`dpfl.algorithms.ldp_fl.LdpFl.server_step`: one
  vectorized two-point call per client over its 1.2 M weights, the shuffler's per-id counts over
  the stacked cohort (:meth:`dpfl.server.shuffle.Shuffler.shuffle_two_point`), mean by id.
* **loop** — a straightforward implementation of 001 Algorithms 2–3 and Algorithm 1 line 8: for
  each client, randomize its weights and split them into (id, value) tuples; the shuffler
  concatenates every client's tuples and permutes them uniformly at random; the server sums the
  values and counts the tuples of each id (``index_add_`` / ``bincount``) and divides.

Both use the same per-client generators, so both compute the same aggregate (checked: max
absolute difference printed). Both are measured in this run, in this process, with 2 torch
threads; times are the median over ``--repeats`` rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _setup(clients: int):  # type: ignore[no-untyped-def]
    from dpfl.algorithms.ldp_fl import LdpFl, LdpFlOptions
    from dpfl.client.context import LocalResult, RoundInfo
    from dpfl.client.layout import ParamLayout
    from dpfl.models import build_model
    from dpfl.rng import SERVER, SeedSequence
    from dpfl.sampling import AllClients

    seeds = SeedSequence(0)
    model = build_model("cnn2", (1, 28, 28), 10, generator=seeds.generator(0, SERVER, "init"))
    layout = ParamLayout.of(model)
    w0 = layout.flatten(model)
    g = torch.Generator().manual_seed(1)
    local = w0 + 0.01 * torch.randn(clients, w0.numel(), generator=g)
    algo = LdpFl(LdpFlOptions(epsilon=1.0, range="fixed", center=0.0, radius=0.075), AllClients(),
                 w0.numel(), 1e-5, layout)
    info = RoundInfo(0, clients, torch.arange(clients), seeds)
    return algo, w0, local, info, LocalResult


def vectorized_round(algo, w0, local, info, local_result):  # type: ignore[no-untyped-def]
    k = local.shape[0]
    res = local_result(local.clone(), torch.zeros(k), torch.ones(k, dtype=torch.long))
    return algo.server_step(w0, res, info).global_params


def loop_round(algo, w0, local, info):  # type: ignore[no-untyped-def]
    from dpfl.privacy.mechanisms import two_point_randomize
    from dpfl.server.shuffle import split

    eps, c, r = algo.options.epsilon, algo.options.center, algo.options.radius
    tuples_ids, tuples_values = [], []
    for k, cid in enumerate(info.clients.tolist()):
        gen = info.seeds.generator(info.round_idx, int(cid), "randomizer")
        reports, _ = two_point_randomize(local[k : k + 1], c, r, eps, gen)
        t = split(reports[0])
        tuples_ids.append(t.ids)
        tuples_values.append(t.values)
    ids = torch.cat(tuples_ids)
    values = torch.cat(tuples_values)
    del tuples_ids, tuples_values
    perm = torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(7))
    ids, values = ids[perm], values[perm]
    p = w0.numel()
    sums = torch.zeros(p, dtype=torch.float64).index_add_(0, ids, values.to(torch.float64))
    counts = torch.bincount(ids, minlength=p)
    return (sums / counts).to(torch.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(2)
    from dpfl.sim.vectorized import tune_allocator

    tune_allocator()
    algo, w0, local, info, local_result = _setup(args.clients)
    k, p = local.shape
    print(f"LDP-FL round: {k} clients x {p:,} weights (cnn2) = {k * p / 1e6:.1f} M randomized weights")
    vec_times, loop_times = [], []
    vec = loop = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        vec = vectorized_round(algo, w0, local, info, local_result)
        vec_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        loop = loop_round(algo, w0, local, info)
        loop_times.append(time.perf_counter() - t0)
    assert vec is not None and loop is not None
    diff = float((vec - loop).abs().max())
    tv, tl = statistics.median(vec_times), statistics.median(loop_times)
    print(f"vectorized (randomize + shuffle to per-id counts + mean by id): {tv:8.2f} s")
    print(f"per-client loop (randomize + split + permute tuples + index_add): {tl:8.2f} s")
    print(f"speed-up (loop / vectorized): {tl / tv:.2f}x   max |difference| of the aggregates: {diff:.3g}")
    return 0 if diff <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
