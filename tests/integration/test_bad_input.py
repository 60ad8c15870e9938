"""Every bad input gets one clear error: a table of bad configs, CLI arguments, data files and stores.

Each case runs ``dpfl.cli.main`` in-process and must end with exit status 2 (unless the table says
otherwise), exactly one line on stderr that starts with ``dpfl`` and names the offending value (the
case's ``needle``), no traceback, and a store left as it was: the rows of a store holding one
finished run are compared before and after, and a store path that did not exist must still not
exist. A config rejected after its run was registered must leave that run ``failed`` with the
reason, never ``running``.

Run as a script, the table prints how each case ends — ``clear``, ``traceback``, ``silent``
(accepted), ``unclear`` (exit 2 but not one line naming the value) or ``endless`` — so it can be
measured against any checkout of dpfl:

    PYTHONPATH=path/to/src python tests/integration/test_bad_input.py   # BAD_INPUT_TIMEOUT=60 (s)
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import signal
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "data"

# -------------------------------------------------------------------------------------------------
# The files a case works on
# -------------------------------------------------------------------------------------------------

ADULT_ROWS = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, "
    "40, United-States, <=50K",
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, "
    "0, 0, 13, United-States, >50K",
    "38, Private, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, White, Male, 0, 0, 40, "
    "United-States, <=50K",
    "53, Private, 234721, 11th, 7, Married-civ-spouse, Handlers-cleaners, Husband, Black, Male, 0, 0, 40, "
    "United-States, <=50K",
    "28, Private, 338409, Bachelors, 13, Married-civ-spouse, Prof-specialty, Wife, Black, Female, 0, 0, 40, "
    "Cuba, <=50K",
    "37, Private, 284582, Masters, 14, Married-civ-spouse, Exec-managerial, Wife, White, Female, 0, 0, 40, "
    "United-States, >50K",
    "49, Private, 160187, 9th, 5, Married-spouse-absent, Other-service, Not-in-family, Black, Female, 0, 0, "
    "16, Jamaica, <=50K",
    "52, Self-emp-not-inc, 209642, HS-grad, 9, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, "
    "0, 45, United-States, >50K",
]
ADULT_TEST = [
    "|1x3 Cross validator",
    "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, "
    "United-States, <=50K.",
    "44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, "
    "7688, 0, 40, United-States, >50K.",
]


@dataclass
class Workspace:
    """A temporary folder with a store holding one finished run, the MNIST-format fixture and a
    tiny Adult folder."""

    root: Path
    store: Path
    data: Path
    adult: Path

    def config(self, **over: Any) -> dict[str, Any]:
        """A valid tiny config (3 rounds of FedAvg on the fixture), with top-level overrides."""
        cfg: dict[str, Any] = {
            "name": "tiny", "seed": 1, "rounds": 2,
            "data": {"name": "mnist", "dir": str(self.data), "verify": False},
            "partition": {"kind": "iid", "num_clients": 10, "samples_per_client": 20},
            "model": {"name": "mlp", "options": {"hidden": 8}},
            "local": {"lr": 0.1, "epochs": 1, "batch_size": 10},
        }
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(cfg.get(key), dict):
                cfg[key] = {**cfg[key], **value}
            else:
                cfg[key] = value
        return cfg

    def write(self, text_or_cfg: str | dict[str, Any], name: str = "cfg.yaml") -> str:
        path = self.root / name
        path.write_text(text_or_cfg if isinstance(text_or_cfg, str) else yaml.safe_dump(text_or_cfg))
        return str(path)

    def run(self, cfg: str | dict[str, Any], *extra: str) -> list[str]:
        """``dpfl run`` of a config (a dict or YAML text) against the workspace store."""
        return ["run", self.write(cfg), "--store", str(self.store), *extra]

    def adult_config(self, bad_line: int | None = None, old: str = "", new: str = "",
                     test_file: bool = False) -> dict[str, Any]:
        """A config reading a tiny Adult folder, with one value of one line replaced."""
        folder = self.root / "adult-data" / "adult"
        folder.mkdir(parents=True, exist_ok=True)
        train, test = list(ADULT_ROWS), list(ADULT_TEST)
        rows = test if test_file else train
        if bad_line is not None:
            assert old in rows[bad_line - 1], (old, rows[bad_line - 1])
            rows[bad_line - 1] = rows[bad_line - 1].replace(old, new, 1)
        (folder / "adult.data").write_text("\n".join(train) + "\n")
        (folder / "adult.test").write_text("\n".join(test) + "\n")
        return self.config(data={"name": "adult", "dir": str(folder.parent), "verify": False},
                           partition={"kind": "iid", "num_clients": 2, "samples_per_client": 4},
                           model={"name": "logistic", "options": {}})

    def mnist_copy(self, edit: Callable[[dict[str, bytes]], None]) -> str:
        """A copy of the fixture with its decompressed files edited; returns the data dir."""
        out = self.root / "mnist-edited"
        (out / "mnist").mkdir(parents=True, exist_ok=True)
        files = {p.name.removesuffix(".gz"): gzip.decompress(p.read_bytes())
                 for p in (self.data / "mnist").glob("*.gz")}
        edit(files)
        for name, content in files.items():
            (out / "mnist" / f"{name}.gz").write_bytes(gzip.compress(content, mtime=0))
        return str(out)


def snapshot(store: Path) -> dict[str, list[tuple[Any, ...]]] | None:
    """Every row of every table of an SQLite store (``None`` if there is no file)."""
    if not store.is_file():
        return None
    db = sqlite3.connect(store)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        db.close()


# -------------------------------------------------------------------------------------------------
# The table
# -------------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One bad input.

    Attributes:
        name: the case id.
        argv: builds the command line from the workspace (may write files).
        needle: text the error line must contain (the offending key or value).
        code: the exit status expected.
        patch: a context manager factory run around the command (e.g. simulating a read-only folder).
        no_path: a workspace-relative path that must not exist afterwards.
        owner: non-empty when the fix belongs to other work (the case is then an expected failure).
        timeout: seconds after which the case counts as ``endless``.
        stderr_lines: lines stderr may hold (a run that fails mid-way prints its progress first).
    """

    name: str
    argv: Callable[[Workspace], list[str]]
    needle: str
    code: int = 2
    patch: Callable[[Workspace], contextlib.AbstractContextManager[Any]] | None = None
    no_path: str | None = None
    owner: str = ""
    timeout: float = 60.0
    stderr_lines: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def _cfg(name: str, needle: str, **over: Any) -> Case:
    return Case(name, lambda w: w.run(w.config(**over)), needle)


def _text(name: str, needle: str, text: str) -> Case:
    return Case(name, lambda w: w.run(text.replace("DATA", str(w.data))), needle)


def _idx_truncate(files: dict[str, bytes]) -> None:
    files["train-images-idx3-ubyte"] = files["train-images-idx3-ubyte"][:5000]


def _idx_magic(files: dict[str, bytes]) -> None:
    files["t10k-labels-idx1-ubyte"] = b"\x00\x00\x09\x01" + files["t10k-labels-idx1-ubyte"][4:]


def _idx_count(files: dict[str, bytes]) -> None:
    files["train-labels-idx1-ubyte"] = files["train-labels-idx1-ubyte"][:-10]


def _idx_label(files: dict[str, bytes]) -> None:
    labels = bytearray(files["train-labels-idx1-ubyte"])
    labels[20] = 77
    files["train-labels-idx1-ubyte"] = bytes(labels)


@contextlib.contextmanager
def _no_plots_folder(w: Workspace) -> Iterator[None]:
    """A store folder where ``plots/`` cannot be created (as a read-only folder does for a
    non-root user; the tests may run as root, where permissions do not stop anything)."""
    real = Path.mkdir

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.name == "plots":
            raise PermissionError(13, "Permission denied", str(self))
        real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "mkdir", mkdir)
        yield


@contextlib.contextmanager
def _read_only_store(w: Workspace) -> Iterator[None]:
    """SQLite refusing writes, as for a read-only store file or folder."""
    real = sqlite3.connect

    class _ReadOnly:
        def __init__(self, db: sqlite3.Connection) -> None:
            self._db = db

        def execute(self, sql: str, *args: Any) -> Any:
            head = sql.lstrip().split()[0].upper()
            if head in ("INSERT", "UPDATE", "DELETE", "CREATE") or "journal_mode" in sql:
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return self._db.execute(sql, *args)

        def executescript(self, sql: str) -> Any:
            raise sqlite3.OperationalError("attempt to write a readonly database")

        def __getattr__(self, name: str) -> Any:
            return getattr(self._db, name)

        def __enter__(self) -> Any:
            self._db.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            return self._db.__exit__(*exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sqlite3, "connect", lambda *a, **k: _ReadOnly(real(*a, **k)))
        yield


def _corrupt_result(w: Workspace) -> None:
    db = sqlite3.connect(w.store)
    with db:
        db.execute("UPDATE runs SET result_json='{\"test_accuracy\": 0.9' WHERE rowid=1")
    db.close()


ACCOUNT = "accounting work: `dpfl account` (commands/account.py, privacy/)"

CASES: list[Case] = [
    # --- configs: types and ranges ---
    _cfg("rounds-zero", "`rounds`", rounds=0),
    _cfg("rounds-negative", "`rounds`", rounds=-3),
    _cfg("rounds-bool", "`rounds`", rounds=True),
    _cfg("rounds-string", "`rounds`", rounds="ten"),
    _cfg("rounds-fraction", "`rounds`", rounds=2.5),
    _cfg("rounds-absurd", "`rounds`", rounds=1_000_000_000),
    _cfg("seed-negative", "`seed`", seed=-1),
    _cfg("seed-too-big", "`seed`", seed=2**70),
    _cfg("seed-bool", "`seed`", seed=False),
    _cfg("threads-zero", "`threads`", threads=0),
    _cfg("eval-every-zero", "`eval_every`", eval_every=0),
    _cfg("checkpoint-every-bool", "`checkpoint_every`", checkpoint_every=True),
    _cfg("lr-negative", "`local.lr`", local={"lr": -0.1}),
    _cfg("lr-zero", "`local.lr`", local={"lr": 0}),
    _cfg("lr-overflow", "`local.lr`", local={"lr": 1e308}),
    _cfg("lr-inf", "`local.lr`", local={"lr": float("inf")}),
    _cfg("lr-nan", "`local.lr`", local={"lr": float("nan")}),
    _cfg("lr-bool", "`local.lr`", local={"lr": True}),
    _cfg("epochs-zero", "`local.epochs`", local={"epochs": 0}),
    _cfg("batch-size-zero", "`local.batch_size`", local={"batch_size": 0}),
    _cfg("num-clients-zero", "`partition.num_clients`", partition={"num_clients": 0}),
    _cfg("partition-kind", "`partition.kind`", partition={"kind": "random"}),
    _cfg("partition-sizes-length", "`partition.sizes` has 2 entries", partition={"sizes": [5, 5]}),
    _cfg("partition-sizes-bool", "`partition.sizes.0`", partition={"sizes": [True] * 10}),
    _cfg("dirichlet-no-alpha", "`partition.alpha`", partition={"kind": "dirichlet"}),
    _cfg("dirichlet-alpha-negative", "`partition.alpha`", partition={"kind": "dirichlet", "alpha": -1}),
    _cfg("classes-missing", "`partition.classes_per_client`", partition={"kind": "classes"}),
    _cfg("natural-on-mnist", "no natural client ids", partition={"kind": "natural"}),
    _cfg("sampling-kind", "`sampling.kind`", sampling={"kind": "sometimes"}),
    _cfg("fixed-without-count", "`sampling.clients_per_round`", sampling={"kind": "fixed"}),
    _cfg("fixed-too-many", "exceeds the number of clients (10)", sampling={"kind": "fixed", "clients_per_round": 11}),
    _cfg("poisson-rate-above-one", "`sampling.sample_rate`", sampling={"kind": "poisson", "sample_rate": 1.5}),
    _cfg("poisson-without-rate", "`sampling.sample_rate`", sampling={"kind": "poisson"}),
    _cfg("delta-zero", "`privacy.delta`", privacy={"delta": 0}),
    _cfg("delta-one", "`privacy.delta`", privacy={"delta": 1}),
    _cfg("target-epsilon-negative", "`privacy.target_epsilon`", privacy={"target_epsilon": -1}),
    _cfg("strict-number", "`privacy.strict`", privacy={"strict": 1}),
    _cfg("verify-word", "`data.verify`", data={"verify": "maybe"}),
    _cfg("engine-name", "`engine`", engine="warp"),
    _cfg("device-banana", "banana", device="banana"),
    _cfg("device-cuda-without-gpu", "'cuda'", device="cuda"),
    # --- configs: names and options ---
    _cfg("unknown-top-key", "unknown key `lcoal`", lcoal={"lr": 0.1}),
    _cfg("unknown-nested-key", "unknown key `local.epoch`", local={"epoch": 2}),
    _cfg("data-name", "'mnits'", data={"name": "mnits"}),
    _cfg("model-name", "'mlpp'", model={"name": "mlpp"}),
    _cfg("model-option", "hiden", model={"name": "mlp", "options": {"hiden": 3}}),
    _cfg("algorithm-name", "'fedsgd'", algorithm={"name": "fedsgd"}),
    _cfg("algorithm-option", "bogus", algorithm={"name": "fedavg", "options": {"bogus": 1}}),
    _cfg("dp-fedavg-negative-noise", "noise_multiplier",
         algorithm={"name": "dp-fedavg", "options": {"noise_multiplier": -1.0, "clip_norm": 1.0}},
         sampling={"kind": "poisson", "sample_rate": 0.5}),
    _cfg("nbafl-negative-epsilon", "epsilon", algorithm={"name": "nbafl", "options": {"epsilon": -5.0}}),
    _cfg("udp-epsilon-string", "epsilon", algorithm={"name": "udp", "options": {"epsilon": "lots"}}),
    # --- config files ---
    _text("duplicate-key", "`rounds` is given twice", "rounds: 2\nrounds: 5\ndata: {dir: DATA, verify: false}\n"),
    _text("duplicate-nested-key", "`lr` is given twice",
          "rounds: 2\ndata: {dir: DATA, verify: false}\nlocal:\n  lr: 0.1\n  lr: 0.2\n"),
    _text("empty-file", "empty", ""),
    _text("comments-only-file", "empty", "# rounds: 3\n"),
    _text("top-level-list", "mapping", "- rounds: 2\n"),
    _text("invalid-yaml", "not valid YAML", "rounds: [2\n"),
    _text("tab-indented-yaml", "not valid YAML", "local:\n\tlr: 0.1\n"),
    Case("config-missing", lambda w: ["run", str(w.root / "nope.yaml"), "--store", str(w.store)], "nope.yaml"),
    Case("config-is-a-directory", lambda w: ["run", str(w.root), "--store", str(w.store)], "directory"),
    Case("set-without-equals", lambda w: w.run(w.config(), "--set", "rounds"), "--set expects key=value"),
    Case("set-into-a-value", lambda w: w.run(w.config(), "--set", "rounds.x=1"), "`rounds` is not a section"),
    Case("set-bool-rounds", lambda w: w.run(w.config(), "--set", "rounds=true"), "`rounds`"),
    # --- data files ---
    Case("data-folder-missing", lambda w: w.run(w.config(data={"dir": str(w.root / "nowhere")})),
         "dpfl data fetch mnist"),
    Case("fixture-fails-checksum", lambda w: w.run(w.config(data={"verify": True})), "train-images-idx3-ubyte"),
    Case("idx-truncated", lambda w: w.run(w.config(data={"dir": w.mnist_copy(_idx_truncate)})),
         "train-images-idx3-ubyte"),
    Case("idx-bad-magic", lambda w: w.run(w.config(data={"dir": w.mnist_copy(_idx_magic)})), "t10k-labels-idx1-ubyte"),
    Case("idx-count-mismatch", lambda w: w.run(w.config(data={"dir": w.mnist_copy(_idx_count)})),
         "train-labels-idx1-ubyte"),
    Case("idx-label-out-of-range", lambda w: w.run(w.config(data={"dir": w.mnist_copy(_idx_label)})), "77"),
    Case("adult-age-nan", lambda w: w.run(w.adult_config(2, "50,", "nan,")),
         "adult.data, line 2: numeric column 'age' holds 'nan'"),
    Case("adult-age-inf", lambda w: w.run(w.adult_config(3, "38,", "inf,")),
         "adult.data, line 3: numeric column 'age' holds 'inf'"),
    Case("adult-gain-overflow", lambda w: w.run(w.adult_config(1, " 2174,", " 1e308,")),
         "adult.data, line 1: numeric column 'capital-gain' holds '1e308'"),
    Case("adult-test-age-inf", lambda w: w.run(w.adult_config(2, "25,", "-inf,", test_file=True)),
         "adult.test, line 2: numeric column 'age' holds '-inf'"),
    Case("adult-age-word", lambda w: w.run(w.adult_config(4, "53,", "old,")), "'old'"),
    Case("adult-short-row", lambda w: w.run(w.adult_config(5, ", Cuba, <=50K", ", <=50K")),
         "line 5: 14 comma-separated fields"),
    Case("adult-unknown-label", lambda w: w.run(w.adult_config(6, ">50K", "rich")), "unknown label 'rich'"),
    # --- command-line arguments ---
    Case("unknown-command", lambda w: ["fly"], "'fly'"),
    Case("run-without-config", lambda w: ["run"], "config"),
    Case("runs-unknown-flag", lambda w: ["runs", "--bogus", "--store", str(w.store)], "--bogus"),
    Case("report-without-id", lambda w: ["report", "--store", str(w.store)], "run_id"),
    Case("report-unknown-run", lambda w: ["report", "zzz", "--store", str(w.store)], "'zzz'"),
    Case("plot-unknown-run", lambda w: ["plot", "zzz", "--store", str(w.store)], "'zzz'"),
    Case("reproduce-unknown-key", lambda w: ["reproduce", "999/fig1", "--store", str(w.store)], "999/fig1"),
    Case("reproduce-bad-scale", lambda w: ["reproduce", "000/fig5", "--scale", "huge"], "'huge'"),
    Case("data-fetch-unknown-set", lambda w: ["data", "fetch", "nosuchset", "--dir", str(w.root / "d")], "nosuchset",
         no_path="d"),
    Case("run-audit-not-a-number", lambda w: w.run(w.config(), "--audit", "many"), "'many'"),
    Case("account-unknown-algorithm", lambda w: ["account", "nosuch"], "'nosuch'"),
    Case("account-rounds-not-a-number", lambda w: ["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate",
                                                   "0.1", "--rounds", "ten", "--clients", "10", "--delta", "1e-5"],
         "'ten'"),
    Case("account-negative-noise", lambda w: ["account", "dp-fedavg", "--noise-multiplier", "-1", "--sample-rate",
                                              "0.1", "--rounds", "10", "--clients", "10", "--delta", "1e-5"], "-1"),
    Case("account-sampled-above-clients", lambda w: ["account", "udp", "--epsilon", "8", "--delta", "1e-3",
                                                     "--clients", "50", "--sampled", "60", "--rounds", "10",
                                                     "--lr", "0.05", "--clip", "1", "--samples-per-client", "800"],
         "(60)"),
    Case("account-absurd-rounds", lambda w: ["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate",
                                             "0.1", "--rounds", "1000000000", "--clients", "10", "--delta", "1e-5"],
         "1000000000", timeout=5.0),
    Case("bound-unknown-algorithm", lambda w: ["bound", "nosuch"], "'nosuch'"),
    Case("bound-plot-missing-folder", lambda w: ["bound", "udp", "--epsilon", "4", "--delta", "1e-3", "--clients", "50",
                                                 "--lr", "0.05", "--smoothness", "1", "--pl", "0.1", "--sensitivity",
                                                 "0.01", "--gap", "1", "--plot", str(w.root / "no" / "such" / "b.png")],
         "no/such"),
    Case("bound-from-unknown-run", lambda w: ["bound", "udp", "--epsilon", "4", "--from-run", "zzz",
                                              "--store", str(w.store)], "'zzz'"),
    # --- stores ---
    Case("runs-store-is-a-directory", lambda w: ["runs", "--store", str(w.root)], "is a directory"),
    Case("run-store-is-a-directory", lambda w: ["run", w.write(w.config()), "--store", str(w.root)], "is a directory"),
    Case("runs-store-under-a-file", lambda w: ["runs", "--store", str(w.store / "x.sqlite")], "is a regular file"),
    Case("run-store-under-a-file", lambda w: ["run", w.write(w.config()), "--store", str(w.store / "x.sqlite")],
         "is a regular file"),
    Case("runs-store-missing", lambda w: ["runs", "--store", str(w.root / "new" / "dir" / "x.sqlite")],
         "new/dir/x.sqlite", no_path="new"),
    Case("report-store-missing", lambda w: ["report", "abc", "--store", str(w.root / "new" / "x.sqlite")],
         "new/x.sqlite", no_path="new"),
    Case("runs-store-not-sqlite", lambda w: ["runs", "--store", w.write("not a database\n" * 300, "s.txt")], "s.txt"),
    Case("run-bad-config-new-store", lambda w: ["run", w.write(w.config(rounds=0)), "--store",
                                                str(w.root / "fresh" / "s.sqlite")], "`rounds`", no_path="fresh"),
    Case("run-read-only-store", lambda w: w.run(w.config(seed=7)), "read-only", patch=_read_only_store),
    Case("rerun-finished-plots-not-writable", lambda w: w.run(w.config(rounds=1)), "plots", code=0,
         patch=_no_plots_folder),
    Case("report-result-not-json",
         lambda w: (_corrupt_result(w), ["report", w.extra_run_id, "--store", str(w.store)])[1],
         "not valid JSON"),
    Case("runs-result-not-json", lambda w: (_corrupt_result(w), ["runs", "--store", str(w.store)])[1],
         "not valid JSON", code=0),
    # --- rejected after registration: the run must end `failed`, not `running` ---
    Case("strict-refuses-a-round", lambda w: w.run(w.config(
        rounds=6, partition={"num_clients": 50, "samples_per_client": 20}, model={"name": "logistic", "options": {}},
        algorithm={"name": "udp", "options": {"epsilon": 4.0, "clip_norm": 1.0}}, local={"batch_size": None},
        sampling={"kind": "fixed", "clients_per_round": 10}, privacy={"delta": 1e-3, "strict": True})),
        "privacy.strict", stderr_lines=99),
]

CORRUPTING = {"report-result-not-json", "runs-result-not-json"}


# -------------------------------------------------------------------------------------------------
# Running a case
# -------------------------------------------------------------------------------------------------

class _Endless(Exception):
    pass


@dataclass
class Outcome:
    code: int | None
    stderr: str
    stdout: str
    traceback: str | None = None
    endless: bool = False


def run_case(case: Case, w: Workspace) -> Outcome:
    """Run one case in-process with a time limit."""
    from dpfl.cli import main

    out, err = io.StringIO(), io.StringIO()

    def _alarm(*_: Any) -> None:
        raise _Endless

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, case.timeout)
    try:
        argv = case.argv(w)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                (case.patch(w) if case.patch else contextlib.nullcontext()):
            code = main(argv)
        return Outcome(code, err.getvalue(), out.getvalue())
    except _Endless:
        return Outcome(None, err.getvalue(), out.getvalue(), endless=True)
    except SystemExit as stop:
        return Outcome(stop.code if isinstance(stop.code, int) else 2, err.getvalue(), out.getvalue())
    except BaseException as exc:  # a traceback the user would see
        return Outcome(None, err.getvalue(), out.getvalue(), traceback=f"{type(exc).__name__}: {exc}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dpfl")]


def verdict(case: Case, outcome: Outcome) -> str:
    """``clear``, ``traceback``, ``silent``, ``endless`` or ``unclear`` (see the module docstring)."""
    if outcome.endless:
        return "endless"
    if outcome.traceback is not None or "Traceback" in outcome.stderr:
        return "traceback"
    lines = outcome.stderr.splitlines()
    errors = _error_lines(outcome.stderr)
    one_line = len(errors) == 1 and case.needle in errors[0] and len(lines) <= case.stderr_lines
    if outcome.code == case.code and one_line:
        return "clear"
    if outcome.code == 0 and not errors:
        return "silent"
    return "unclear"


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory: pytest.TempPathFactory, mnist_fixture: Path) -> tuple[Path, str]:
    """A store holding one finished 1-round run of the tiny config (copied into every case)."""
    root = tmp_path_factory.mktemp("bad-input-base")
    w = Workspace(root, root / "runs" / "dpfl.sqlite", mnist_fixture, root / "adult")
    from dpfl.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(w.run(w.config(rounds=1))) == 0
    db = sqlite3.connect(w.store)
    (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
    db.close()
    return w.store, run_id


def make_workspace(tmp: Path, base: tuple[Path, str], data: Path) -> Workspace:
    store = tmp / "runs" / "dpfl.sqlite"
    store.parent.mkdir(parents=True)
    shutil.copy(base[0], store)
    w = Workspace(tmp, store, data, tmp / "adult")
    w.extra_run_id = base[1]  # type: ignore[attr-defined]
    return w


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=False, reason=f"belongs to the {c.owner}")] if c.owner
                  else []) for c in CASES],
)
def test_bad_input(case: Case, tmp_path: Path, finished_store: tuple[Path, str], mnist_fixture: Path) -> None:
    w = make_workspace(tmp_path, finished_store, mnist_fixture)
    before = snapshot(w.store)
    outcome = run_case(case, w)
    assert verdict(case, outcome) == "clear", (outcome.code, outcome.traceback, outcome.stderr[-2000:])
    if case.no_path is not None:
        assert not (w.root / case.no_path).exists(), f"{case.no_path} was created"
    after = snapshot(w.store)
    assert after is not None and before is not None
    if case.name in CORRUPTING:
        return
    runs_before = {r[0]: r for r in before["runs"]}
    for row in after["runs"]:
        if row[0] in runs_before:
            assert row == runs_before[row[0]], "a stored run changed"
        else:  # registered, then rejected: stored as failed with the reason
            assert row[7] == "failed" and case.needle in (row[10] or ""), row
    if all(r[0] in runs_before for r in after["runs"]):
        assert after == before, "the store changed"


def test_a_corrupt_run_is_flagged_and_the_others_listed(tmp_path: Path, finished_store: tuple[Path, str],
                                                        mnist_fixture: Path) -> None:
    w = make_workspace(tmp_path, finished_store, mnist_fixture)
    from dpfl.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(w.run(w.config(seed=5, rounds=1))) == 0
    _corrupt_result(w)
    outcome = run_case(Case("runs", lambda w: ["runs", "--store", str(w.store)], "", code=0), w)
    assert outcome.code == 0
    other = [r for r in snapshot(w.store)["runs"] if r[0] != finished_store[1]]  # type: ignore[index]
    assert other and other[0][0] in outcome.stdout and finished_store[1] in outcome.stdout
    assert "unreadable" in outcome.stdout
    (line,) = _error_lines(outcome.stderr)
    assert finished_store[1] in line and "not valid JSON" in line


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 60 and len({c.name for c in CASES}) == len(CASES)


# -------------------------------------------------------------------------------------------------
# As a script: how each case ends on the dpfl found on PYTHONPATH
# -------------------------------------------------------------------------------------------------

def _main() -> int:
    import tempfile

    from dpfl.cli import main

    counts: dict[str, int] = {}
    cap = float(os.environ.get("BAD_INPUT_TIMEOUT", "60"))  # seconds before a case counts as endless
    with tempfile.TemporaryDirectory() as tmp:
        base_root = Path(tmp) / "base"
        base_root.mkdir()
        base = Workspace(base_root, base_root / "runs" / "dpfl.sqlite", FIXTURE, base_root / "adult")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(base.run(base.config(rounds=1))) == 0
        db = sqlite3.connect(base.store)
        (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
        db.close()
        for i, case in enumerate(CASES):
            case_root = Path(tmp) / f"case{i}"
            case_root.mkdir()
            w = make_workspace(case_root, (base.store, run_id), FIXTURE)
            before = snapshot(w.store)
            outcome = run_case(Case(**{**case.__dict__, "timeout": min(case.timeout, cap)}), w)
            result = verdict(case, outcome)
            left = [r for r in (snapshot(w.store) or {}).get("runs", []) if r[7] == "running"]
            changed = case.name not in CORRUPTING and snapshot(w.store) != before
            created = case.no_path is not None and (w.root / case.no_path).exists()
            notes = [n for n, on in (("left running", left), ("store changed", changed), ("created", created)) if on]
            counts[result] = counts.get(result, 0) + 1
            detail = outcome.traceback or (_error_lines(outcome.stderr) or [""])[0]
            print(f"{result:<9} {case.name:<34} {'; '.join(notes):<16} {detail[:110]}", flush=True)
            os.chdir(ROOT)
    print(f"tried {len(CASES)}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
