"""Correlated-noise optimizers: seconds and loss/RMSE at (n 2,000, b 100) and (n 2,052, b 342), next to baselines.

    ./dev bench correlated_optimize [--repeats 3] [--settings 2000:100 2052:342]

Workload: the prefix-sum workload over n rounds under (k, b)-min-separation participation with
k = ⌈n/b⌉ (20 and 6 participations), one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``).

Timed, ``--repeats`` times (minimum and median printed): every entry of ``OPTIMIZERS`` (today
``optimize_banded_toeplitz`` with b bands, memory b − 1 vectors, and ``optimize_blt`` with 4
buffers: the issue's target is at most 60 s each at n = 2,000 on two cores).
Then, for each optimized strategy and each baseline of ``BASELINES`` measured in the same pass —
the banded optimizer's start (the Toeplitz square root of the prefix matrix truncated to b bands),
the identity (independent noise, DP-SGD without amplification), DP-FTRL's tree with Honaker's
estimator (one tree of n leaves, and restarted every b rounds: one participation per tree) — the
loss sensitivity² × ‖A·W‖_F² (the papers' objective), the RMSE √(loss/n) (2306.08153's figure),
the ratio to the start's loss, and whether the sensitivity is exact or an upper bound. When
``tests/reference/jax_privacy_mf.json`` exists, jax-privacy's own optimized banded strategy is
printed with the same figures (from that file).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dpfl.privacy.mechanisms.correlated.banded import BandedToeplitzStrategy, optimize_banded_toeplitz  # noqa: E402
from dpfl.privacy.mechanisms.correlated.base import Strategy  # noqa: E402
from dpfl.privacy.mechanisms.correlated.blt import optimize_blt  # noqa: E402
from dpfl.privacy.mechanisms.correlated.identity import IdentityStrategy  # noqa: E402
from dpfl.privacy.mechanisms.correlated.tree import TreeStrategy  # noqa: E402
from dpfl.privacy.mechanisms.correlated.workload import toeplitz_sqrt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "reference" / "jax_privacy_mf.json"

# (name, optimizer(n, min_separation b, max_participations k) -> Strategy): timed.
def _banded(n: int, b: int, k: int) -> Strategy:
    return optimize_banded_toeplitz(n, b, min_separation=b, max_participations=k)


def _blt(n: int, b: int, k: int) -> Strategy:
    return optimize_blt(n, min_separation=b, max_participations=k, num_buffers=4)


OPTIMIZERS: list[tuple[str, Callable[[int, int, int], Strategy]]] = [
    ("banded Toeplitz, b bands", _banded),
    ("BLT, 4 buffers", _blt),
]

# (name, baseline(n, b) -> Strategy): not optimized, measured in the same pass.
BASELINES: list[tuple[str, Callable[[int, int], Strategy]]] = [
    ("start: sqrt of prefix, b bands", lambda n, b: BandedToeplitzStrategy(n, toeplitz_sqrt(np.ones(b), b))),
    ("identity (independent noise)", lambda n, b: IdentityStrategy(n)),
    ("tree, Honaker, one tree", lambda n, b: TreeStrategy(n)),
    ("tree, Honaker, restart every b", lambda n, b: TreeStrategy(n, b)),
]


def _figures(strategy: Strategy, n: int, b: int, k: int) -> tuple[float, float, bool, float]:
    """(loss, RMSE, sensitivity exact?, seconds to compute them)."""
    t0 = time.perf_counter()
    sens = strategy.max_sensitivity(b, k)
    error = strategy.workload_error()
    exact = bool(getattr(strategy, "max_sensitivity_is_exact", lambda *_: True)(b, k))
    loss = sens * sens * error
    return loss, math.sqrt(loss / n), exact, time.perf_counter() - t0


def _row(name: str, loss: float, rmse: float, start: float, exact: bool, note: str = "") -> str:
    return (f"    {name:36s} loss {loss:14.6e}  RMSE {rmse:10.4f}  loss/start {loss / start:7.4f}"
            f"  {'exact' if exact else 'upper bound':11s} {note}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--settings", nargs="+", default=["2000:100", "2052:342"], help="n:b pairs (k = ceil(n/b))")
    args = p.parse_args()
    torch.set_num_threads(1)
    reference = json.loads(REFERENCE.read_text()) if REFERENCE.is_file() else None
    print(f"one thread (torch {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}); "
          f"{args.repeats} repeats; prefix workload")
    for setting in args.settings:
        n, b = (int(x) for x in setting.split(":"))
        k = -(-n // b)
        print(f"\nn = {n}, min separation b = {b}, k = {k} participations")
        start_loss = _figures(BASELINES[0][1](n, b), n, b, k)[0]
        for name, optimizer in OPTIMIZERS:
            times, strategy = [], None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                strategy = optimizer(n, b, k)
                times.append(time.perf_counter() - t0)
            assert strategy is not None
            loss, rmse, exact, _ = _figures(strategy, n, b, k)
            print(f"  {name}: optimized in min {min(times):.3f} s, median {statistics.median(times):.3f} s")
            print(_row(name, loss, rmse, start_loss, exact, f"(memory {strategy.memory_vectors} vectors)"))
        for name, make in BASELINES:
            strategy = make(n, b)
            loss, rmse, exact, seconds = _figures(strategy, n, b, k)
            print(_row(name, loss, rmse, start_loss, exact,
                       f"(memory {strategy.memory_vectors} vectors; sensitivity+error {seconds:.2f} s)"))
        if reference is not None:
            for entry in reference.get("settings", []):
                if entry.get("n") == n and entry.get("min_sep") == b:
                    ref = entry["optimized_banded_toeplitz"]
                    coef = np.asarray(ref["coef"], dtype=np.float64)
                    ours = _figures(BandedToeplitzStrategy(n, coef), n, b, k)
                    jp_loss = ref["minsep_sensitivity_squared"] * ref["total_squared_error_unit_noise"]
                    print(_row("jax-privacy's optimum (its figures)", jp_loss, ref["rmse_min_sep"], start_loss, True,
                               f"({ref.get('wall_time_s', float('nan')):.1f} s in jax; dpfl on its coef: "
                               f"RMSE {ours[1]:.4f})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
