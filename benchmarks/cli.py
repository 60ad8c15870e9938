"""Commands that do not train, as fresh processes: account, runs, report, options, plot/export --help.

    ./dev bench cli [--repeats 7] [--store FILE]

Each command is started as a user starts it (the ``dpfl`` script of this environment, a fresh
process each time) and timed from its start to its exit, wall clock. In the same pass, as
yardsticks: ``python -c pass`` (the interpreter alone) and ``python -c "import torch"`` (what
any command that builds a tensor pays first). The commands run in turn, one of each per repeat,
so that a machine whose speed drifts during the pass slows them all alike; the table prints the
median, min and max of the repeats, each median's ratio to ``import torch``'s, and the target the
issue "The first hour" set on the 2-core development machine.

Workloads:

- ``account``: ``dpfl account dp-fedavg --noise-multiplier 1 --sample-rate 0.04 --rounds 1000
  --clients 1000 --delta 1e-5`` (a dry run of 1000 rounds, RDP and PLD certificates);
- ``runs``, ``report ID``: a store with one finished run of that config (its privacy summary the
  dry run's), made in a temporary folder before anything is timed (``--store`` names another);
- ``options``: every algorithm's options table;
- ``plot --help``, ``export --help``: the parser of a command whose work imports matplotlib or
  torch, without that work.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ACCOUNT = ["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.04", "--rounds", "1000",
           "--clients", "1000", "--delta", "1e-5"]
# seconds, fresh process, 2-core development machine (issue "The first hour", item 3)
TARGETS = {"account": 2.0, "runs": 0.5, "report": 0.5, "options": 0.5}


def _dpfl() -> list[str]:
    script = Path(sys.executable).parent / "dpfl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dpfl"]


def _make_store(folder: Path) -> tuple[Path, str]:
    """A store holding one finished run of the account workload's config, its privacy summary
    from a dry run (what ``dpfl run`` stores, without training)."""
    from dpfl.commands.dry_run import _raw_config
    from dpfl.config import parse_config
    from dpfl.rounds import build_plan, dry_run
    from dpfl.store import RunStore

    raw = _raw_config("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 1.0}, rounds=100, delta=1e-5,
                      clients=1000, samples=60, sampling={"kind": "poisson", "sample_rate": 0.04})
    config = parse_config(raw)
    out = dry_run(config, experiment=build_plan(config, [60] * 1000, 1000))
    assert out.privacy is not None
    store = RunStore(folder / "dpfl.sqlite")
    run_id = "bench0000001"
    store.start(run_id, config.model_dump(mode="json"), {"torch": "-", "dp_accounting": "-"})
    for r in range(config.rounds):
        store.log_round(run_id, r, {"train_loss": 1.0 / (r + 1), "cohort": 40})
    store.finish(run_id, "finished", {"rounds": config.rounds, "test_accuracy": 0.9, "test_loss": 0.3,
                                      "privacy": out.privacy.to_dict()})
    return store.path, run_id


def _time(argv: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr}")
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="runs of each command (the median is printed)")
    p.add_argument("--store", type=Path, help="a store to list and report (default: one made in a temporary "
                                               "folder); its first run is reported")
    a = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if a.store is None:
            store, run_id = _make_store(Path(tmp))
        else:
            from dpfl.store import RunStore

            store = a.store
            runs = RunStore(store).list()
            if not runs:
                sys.exit(f"{store} holds no run")
            run_id = runs[0].run_id
        dpfl = _dpfl()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "account": [*dpfl, *ACCOUNT],
            "runs": [*dpfl, "runs", "--store", str(store)],
            "report": [*dpfl, "report", run_id, "--store", str(store)],
            "options": [*dpfl, "options"],
            "plot --help": [*dpfl, "plot", "--help"],
            "export --help": [*dpfl, "export", "--help"],
        }
        for argv in commands.values():  # warm-up: the files in the page cache, the .pyc written
            _time(argv)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(a.repeats):
            for name, argv in commands.items():
                times[name].append(_time(argv))

    torch_median = statistics.median(times["python -c 'import torch'"])
    print(f"fresh processes, wall seconds over {a.repeats} repeats (run in turn, one of each per repeat)")
    print(f"  {'command':26s} {'median':>7s} {'min':>7s} {'max':>7s} {'/ torch':>8s} {'target':>7s}")
    for name, values in times.items():
        med = statistics.median(values)
        target = f"{TARGETS[name]:.1f}" if name in TARGETS else ""
        print(f"  {name:26s} {med:7.3f} {min(values):7.3f} {max(values):7.3f} {med / torch_median:7.2f}x {target:>7s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
