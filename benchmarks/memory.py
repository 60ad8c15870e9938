"""Memory benchmark: peak RSS of the main job as the population grows, blocks on and off.

    ./dev bench memory [--clients 1000 10000 30000 60000] [--rounds 6] [--budgets default none]
                       [--data-dir DIR]

The main job is the built-in ``default`` config (DP-FedAvg with secure aggregation on MNIST, MLP
784-64-10, Poisson sampling q = 0.2, so a cohort of about 0.2 × clients), run by ``dpfl run`` with
``partition.num_clients`` and ``rounds`` overridden and one evaluation (the last round). Each
(budget, clients) pair runs in a fresh child process; its peak RSS is the kernel's figure for that
child (``os.wait4``). A budget is the vectorized engine's ``memory_budget``: ``default`` (the
engine's default), ``none`` (the whole cohort as one block), or a number of MiB.

The round is streamed (:class:`dpfl.rounds.cohort.InProcessCohort`): each block of clients is
trained, encoded (clip, scale, conditional rounding) and folded into the running modular sum
before the next block trains, so the peak is the process's fixed share (data, model, evaluation)
plus the budget, whatever the cohort. Target: <= 1.5 GB at 1k, 10k, 30k and 60k clients with the
default budget, and s/round at 1k within 10% of the stacked round's.

s/round is the median of the rounds' ``seconds`` after the first (warm-up) and before the last
(which evaluates); on a shared machine compare runs made back to back, alternating. Runs write to
a temporary store that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _data_dir(arg: str | None) -> str:
    if arg:
        return arg
    for cand in (os.environ.get("DPFL_DATA_DIR"), str(ROOT / "data"), str(ROOT.parent / "shared" / "data")):
        if cand and (Path(cand) / "mnist").exists():
            return cand
    return str(ROOT / "data")


def worker(clients: int, rounds: int, budget: str, data_dir: str, store: str, csv_path: str) -> int:
    import functools

    from dpfl import cli
    from dpfl.rounds import build
    from dpfl.sim.vectorized import VectorizedEngine

    if budget != "default":
        mem = None if budget == "none" else int(float(budget) * 2**20)
        build.ENGINES["vectorized"] = functools.partial(VectorizedEngine, memory_budget=mem)  # type: ignore[assignment]
    return cli.main(["run", "default", "--store", store, "--csv", csv_path,
                     "--set", f"partition.num_clients={clients}", "--set", f"rounds={rounds}",
                     "--set", f"eval_every={rounds}", "--set", f"data.dir={data_dir}",
                     "--set", f"checkpoint_every={rounds}"])


def run_one(clients: int, rounds: int, budget: str, data_dir: str) -> tuple[float, float | None, str]:
    """(peak RSS in MiB, s/round, error) of one child process."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = str(Path(tmp) / "rounds.csv")
        cmd = [sys.executable, __file__, "--worker", str(clients), "--rounds", str(rounds), "--budgets", budget,
               "--data-dir", data_dir, "--store", str(Path(tmp) / "runs.sqlite"), "--csv", csv_path]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak = usage.ru_maxrss / 1024  # KiB on Linux
        if proc.returncode != 0:
            return peak, None, err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
        with open(csv_path, newline="") as f:
            secs = [float(row["seconds"]) for row in csv.DictReader(f)]
        timed = secs[1:-1] if len(secs) > 2 else secs
        return peak, statistics.median(timed), ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[1000, 10000, 30000, 60000])
    p.add_argument("--rounds", type=int, default=6, help="rounds per run (>= 3: warm-up, timed, evaluation)")
    p.add_argument("--budgets", nargs="+", default=["default", "none"],
                   help="engine memory budgets: default, none or MiB (default: default none)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--csv", help=argparse.SUPPRESS)
    args = p.parse_args()
    data_dir = _data_dir(args.data_dir)
    if args.worker:
        return worker(args.worker, args.rounds, args.budgets[0], data_dir, args.store, args.csv)
    if args.rounds < 3:
        p.error(f"--rounds must be >= 3 (warm-up, timed, evaluation). Found {args.rounds}")
    from dpfl.sim.vectorized import DEFAULT_MEMORY_BUDGET

    print(f"main job (default config), {args.rounds} rounds per run, vectorized engine; "
          f"default budget {DEFAULT_MEMORY_BUDGET / 2**20:.0f} MiB")
    print(f"{'clients':>8} {'cohort':>7}  " + "  ".join(f"{b + ' budget':>26}" for b in args.budgets))
    for n in args.clients:
        cells = []
        for b in args.budgets:
            peak, sec, err = run_one(n, args.rounds, b, data_dir)
            cells.append(f"{peak / 1024:6.2f} GB peak, " + (f"{sec:6.3f} s/round" if sec is not None else "FAILED"))
            if err:
                print(f"  ({n} clients, budget {b}: {err})", file=sys.stderr)
        print(f"{n:>8} {round(0.2 * n):>7}  " + "  ".join(f"{c:>26}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
