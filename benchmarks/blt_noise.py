"""BLT correlated noise: optimize_blt's time at (n, b) = (2000, 100) and (2052, 342), and a round's noise cost.

    ./dev bench blt_noise [--rounds 300] [--threads 1] [--params 203530]

(a) ``optimize_blt(n, min_separation=b)`` (default 4 buffers, prefix workload, k = ⌈n/b⌉), timed
    once each (it is deterministic), with its loss max_sensitivity(b, k)² × ‖A C⁻¹‖_F² next to the
    identity factorization's k·n(n+1)/2 (independent noise each round: the baseline), and the
    number of buffers the optimum kept (cancelling pole-zero pairs are dropped).
(b) one round of noise for |θ| = 203,530 float32 entries (MLP 784-256-10: 784·256 + 256 + 256·10
    + 10): a BLT stream's ``next`` with d = 4 and 5 buffers (the fixed starting BLTs of
    ``initial_blts``: the cost depends on d only) against ``torch.randn`` of the same size — the
    baseline, measured in the same pass, interleaved — and against a cheap estimate of a main-job
    round (workload W of ``benchmarks/engine.py``: 100 clients × 600 samples, batch 64): the
    time of one SGD step of the MLP on a synthetic batch of 64 (forward, backward, update) × 1,000
    steps. Medians over ``--rounds`` rounds after a warm-up; ``--threads`` torch threads (default 1).
    The engine's real round (with data, clipping, aggregation) is longer than this estimate, so the
    printed share of the round is an upper bound on the noise's real share.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _median_ms(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=300, help="measured noise rounds per method (after 20 warm-up)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--params", type=int, default=203_530, help="|θ| (default: MLP 784-256-10)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from dpfl.privacy.mechanisms.correlated.blt import blt_loss, initial_blts, max_participations, optimize_blt

    print(f"(a) optimize_blt, 4 buffers, prefix workload, {args.threads} thread(s)")
    for n, b in [(2000, 100), (2052, 342)]:
        k = max_participations(n, b)
        t0 = time.perf_counter()
        s = optimize_blt(n, min_separation=b)
        seconds = time.perf_counter() - t0
        loss = blt_loss(s, min_separation=b)
        identity = k * n * (n + 1) / 2
        print(f"  n={n} b={b} k={k}: {seconds:6.2f} s   loss {loss:.6e}, identity {identity:.6e}, "
              f"ratio {loss / identity:.5f}   buffers kept {s.num_buffers}   "
              f"sensitivity {s.max_sensitivity(b, k):.4f} (identity {k ** 0.5:.4f})")

    num = args.params
    print(f"(b) one round of noise, |θ| = {num:,} float32, median of {args.rounds} rounds")
    streams = {d: initial_blts(2 * args.rounds + 100, d)[0].noise_stream(num) for d in (4, 5)}
    gen = torch.Generator().manual_seed(0)
    rounds = {d: 0 for d in streams}

    def blt_round(d: int) -> None:
        streams[d].next(rounds[d], gen)
        rounds[d] += 1

    def plain() -> None:
        torch.randn(num, generator=gen)

    for _ in range(20):
        plain()
        blt_round(4)
        blt_round(5)
    times: dict[str, list[float]] = {"randn": [], "blt4": [], "blt5": []}
    for _ in range(args.rounds):  # interleaved: the same load for all three
        times["randn"].append(_median_ms(plain, 1))
        times["blt4"].append(_median_ms(lambda: blt_round(4), 1))
        times["blt5"].append(_median_ms(lambda: blt_round(5), 1))
    med = {key: statistics.median(v) for key, v in times.items()}

    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    assert sum(q.numel() for q in model.parameters()) == 203_530
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 784, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    step_ms = _median_ms(step, 200)
    round_ms = 1000 * step_ms  # 100 clients × ⌈600/64⌉ = 10 steps

    print(f"  independent Gaussian (torch.randn)  {med['randn']:7.3f} ms")
    for d in (4, 5):
        ms = med[f"blt{d}"]
        print(f"  BLT stream, d = {d} buffers         {ms:7.3f} ms   ratio {ms / med['randn']:.2f}× randn   "
              f"state {d} × {num:,} floats = {d * num * 4 / 2**20:.1f} MiB")
    print(f"  main-job round estimate: MLP SGD step (batch 64) {step_ms:.3f} ms × 1,000 steps = {round_ms:.0f} ms;"
          f" BLT d=5 noise is {100 * med['blt5'] / round_ms:.3f}% of it (extra over randn "
          f"{100 * (med['blt5'] - med['randn']) / round_ms:.3f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
