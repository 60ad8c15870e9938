"""The run store: one SQLite file holding every run's config, environment, per-round metrics,
notices and final result. Plots and reports read only from here.

Writes are small transactions, so a run killed at any moment leaves every completed round's row
intact; WAL mode lets ``dpfl runs`` read while a run writes.

A run has one writer at a time: the writer holds the run's **lease** (:meth:`RunStore.lease`, a
row of table ``leases``: pid, host, process start time, taken and refreshed times), refreshes it
every :data:`LEASE_REFRESH_SECONDS` and deletes it when it ends. A second writer is refused while
the lease is live; a lease is stale, and taken over, when its process is gone (same host: its pid
is dead or now belongs to another process) or when it was not refreshed for
:data:`LEASE_STALE_SECONDS` (the only test possible for a writer on another host).
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpfl.errors import ConfigError

# written out as "runs/dpfl.sqlite" in the defaults of RunStore, dpfl.train and dpfl.export_model, so
# that the API reference shows the path (tests/integration/test_docs_site.py holds them together)
DEFAULT_STORE = Path("runs") / "dpfl.sqlite"
LEASE_REFRESH_SECONDS = 30.0
"""How often a writer refreshes its run's lease."""
LEASE_STALE_SECONDS = 600.0
"""A lease not refreshed for this long is stale whatever its host (20 missed refreshes)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    dataset TEXT NOT NULL,
    model TEXT NOT NULL,
    config_json TEXT NOT NULL,
    env_json TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    result_json TEXT
);
CREATE TABLE IF NOT EXISTS rounds (
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    metrics_json TEXT NOT NULL,
    PRIMARY KEY (run_id, round)
);
CREATE TABLE IF NOT EXISTS leases (
    run_id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    process_start TEXT,
    taken_at REAL NOT NULL,
    refreshed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS notices (
    run_id TEXT NOT NULL,
    round INTEGER,
    kind TEXT NOT NULL,
    message TEXT NOT NULL,
    UNIQUE (run_id, kind, message)
);
"""


@dataclass(frozen=True)
class RunRecord:
    """One stored run. ``problem`` says what could not be read when a stored field is corrupt
    (the record then carries empty values for it); ``None`` for a sound row."""

    run_id: str
    name: str
    algorithm: str
    dataset: str
    model: str
    config: dict[str, Any]
    env: dict[str, Any]
    status: str
    created_at: float
    updated_at: float
    result: dict[str, Any] | None
    problem: str | None = None


class RunStore:
    """SQLite-backed store of runs.

    Nothing is created until the first write: reading a store that does not exist finds no runs
    (``find``, ``list``) or raises a :class:`ConfigError` naming the path (``get``); the first
    ``start`` creates the file and its folder.

    Args:
        path: the SQLite file (``dpfl run --store``; default ``runs/dpfl.sqlite``, the store
            ``dpfl runs`` reads).

    Raises:
        ConfigError: the path is a directory, lies under a regular file, or cannot be opened or
            written (permissions, not an SQLite file); the message names the path.
    """

    def __init__(self, path: str | Path = "runs/dpfl.sqlite") -> None:
        self.path = Path(path)
        self._schema_ready = False
        if self.path.is_dir():
            raise ConfigError(
                f"run store {self.path} is a directory; give a file path such as {self.path / 'dpfl.sqlite'}"
            )
        blocker = _file_among_parents(self.path)
        if blocker is not None:
            raise ConfigError(
                f"run store {self.path} cannot be created: {blocker} is a regular file, not a folder"
            )
        if self.exists():  # an existing file must be an SQLite database: say so now, not mid-run
            with self._connect() as db:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()

    def exists(self) -> bool:
        """Whether the store file exists (a store is created by its first write)."""
        return self.path.is_file()

    @contextmanager
    def _connect(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        if write and not self.path.exists():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise ConfigError(
                    f"run store {self.path} cannot be created: {err.strerror or err} "
                    f"({err.filename or self.path.parent})"
                ) from None
        try:
            if not write and not (os.access(self.path.parent, os.W_OK) and os.access(self.path, os.W_OK)):
                # a read-only store (file or folder): SQLite cannot create the WAL index beside
                # it, so open it as an immutable snapshot, which needs no other file
                uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro&immutable=1"
                db = sqlite3.connect(uri, uri=True, timeout=30)
            else:
                db = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as err:
            raise ConfigError(f"run store {self.path} cannot be opened: {err}") from None
        try:
            if write:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                if not self._schema_ready:
                    db.executescript(_SCHEMA)
                    self._schema_ready = True
            with db:
                yield db
        except sqlite3.DatabaseError as err:
            raise ConfigError(f"run store {self.path} {_explain(err, write)}") from None
        finally:
            db.close()

    def start(self, run_id: str, config: dict[str, Any], env: dict[str, Any]) -> None:
        """Register a run (or mark an existing one as running again).

        Args:
            run_id: the run's id (``dpfl.config.run_id`` of its config).
            config: the run's validated config as JSON (``RunConfig.model_dump(mode="json")``).
            env: the environment it runs in (versions, platform, commit), stored with it.
        """
        now = time.time()
        with self._connect(write=True) as db:
            db.execute(
                """INSERT INTO runs (run_id, name, algorithm, dataset, model, config_json, env_json,
                                     status, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?)
                   ON CONFLICT(run_id) DO UPDATE SET status='running', updated_at=excluded.updated_at,
                                                    env_json=excluded.env_json""",
                (
                    run_id,
                    config.get("name", "run"),
                    config.get("algorithm", {}).get("name", "?"),
                    config.get("data", {}).get("name", "?"),
                    config.get("model", {}).get("name", "?"),
                    json.dumps(config, sort_keys=True),
                    json.dumps(env, sort_keys=True),
                    now,
                    now,
                ),
            )

    def lease(self, run_id: str) -> RunLease:
        """Take the write lease of run ``run_id`` (use as a context manager; it is released on
        exit and refreshed meanwhile by a background thread).

        Args:
            run_id: the run to write.

        Raises:
            ConfigError: a live process holds it: "run ID is being written by pid P on host H
                since T; wait or stop it".
        """
        token = secrets.token_hex(8)
        host, pid, started = socket.gethostname(), os.getpid(), _process_start(os.getpid())
        with self._connect(write=True) as db:
            db.execute("BEGIN IMMEDIATE")  # read and take in one write transaction: no two winners
            row = db.execute("SELECT pid, host, process_start, taken_at, refreshed_at FROM leases WHERE run_id=?",
                             (run_id,)).fetchone()
            if row is not None and _lease_live(*row, now=time.time()):
                since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(row[3]))
                raise ConfigError(f"run {run_id} is being written by pid {row[0]} on host {row[1]} since {since} "
                                  f"(store {self.path}); wait or stop it")
            now = time.time()
            db.execute("INSERT OR REPLACE INTO leases "
                       "(run_id, token, pid, host, process_start, taken_at, refreshed_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", (run_id, token, pid, host, started, now, now))
        return RunLease(self, run_id, token)

    def lease_holder(self, run_id: str) -> dict[str, Any] | None:
        """The lease row of run ``run_id`` (``pid``, ``host``, ``taken_at``, ``refreshed_at``,
        ``live``), or ``None`` when nobody holds it.

        Args:
            run_id: the run's id.
        """
        if not self.exists():
            return None
        with self._connect() as db:
            try:
                row = db.execute("SELECT pid, host, process_start, taken_at, refreshed_at FROM leases WHERE run_id=?",
                                 (run_id,)).fetchone()
            except sqlite3.OperationalError:  # a store written before leases existed
                return None
        if row is None:
            return None
        return {"pid": row[0], "host": row[1], "taken_at": row[3], "refreshed_at": row[4],
                "live": _lease_live(*row, now=time.time())}

    def _refresh_lease(self, run_id: str, token: str) -> bool:
        """Refresh a held lease; ``False`` if it is no longer ours (taken over as stale)."""
        with self._connect(write=True) as db:
            cur = db.execute("UPDATE leases SET refreshed_at=? WHERE run_id=? AND token=?",
                             (time.time(), run_id, token))
            return cur.rowcount == 1

    def _release_lease(self, run_id: str, token: str) -> None:
        with self._connect(write=True) as db:
            db.execute("DELETE FROM leases WHERE run_id=? AND token=?", (run_id, token))

    def log_round(self, run_id: str, round_idx: int, metrics: dict[str, Any]) -> None:
        with self._connect(write=True) as db:
            db.execute(
                "INSERT OR REPLACE INTO rounds (run_id, round, metrics_json) VALUES (?, ?, ?)",
                (run_id, int(round_idx), json.dumps(metrics)),
            )
            db.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (time.time(), run_id))

    def drop_rounds_after(self, run_id: str, round_idx: int) -> None:
        """Forget rounds after ``round_idx`` (a resumed run redoes them from its checkpoint).

        Args:
            run_id: the run's id.
            round_idx: the last round kept (0-based, as stored).
        """
        with self._connect(write=True) as db:
            db.execute("DELETE FROM rounds WHERE run_id=? AND round>?", (run_id, int(round_idx)))

    def add_notice(self, run_id: str, round_idx: int | None, kind: str, message: str) -> None:
        with self._connect(write=True) as db:
            db.execute(
                "INSERT OR IGNORE INTO notices (run_id, round, kind, message) VALUES (?, ?, ?, ?)",
                (run_id, round_idx, kind, message),
            )

    def finish(self, run_id: str, status: str, result: dict[str, Any] | None) -> None:
        with self._connect(write=True) as db:
            db.execute(
                "UPDATE runs SET status=?, result_json=?, updated_at=? WHERE run_id=?",
                (status, json.dumps(result) if result is not None else None, time.time(), run_id),
            )

    def get(self, run_id: str) -> RunRecord:
        """A run by its exact id, else by a unique id prefix (a run's full id is never ambiguous,
        even when it is a prefix of another run's — a simulation and its Flower twin
        ``<id>-flower``).

        Args:
            run_id: a run id or a unique prefix of one.

        Raises:
            ConfigError: no store, no such run, an ambiguous prefix, or a stored field of the
                run that is not valid JSON (naming the run and the field).
        """
        if not self.exists():
            raise ConfigError(f"no run store at {self.path} (`dpfl run` creates it; see --store)")
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs WHERE run_id LIKE ?", (run_id + "%",)).fetchall()
        if not rows:
            raise ConfigError(f"no run with id {run_id!r} in {self.path} (see `dpfl runs`)")
        exact = [r for r in rows if r[0] == run_id]
        if exact:
            rows = exact
        elif len(rows) > 1:
            raise ConfigError(f"run id prefix {run_id!r} is ambiguous: {[r[0] for r in rows]}")
        record = self._record(rows[0])
        if record.problem is not None:
            raise ConfigError(f"run {record.run_id} in {self.path}: {record.problem}")
        return record

    def find(self, run_id: str) -> RunRecord | None:
        """A run by its exact id (``problem`` set if a stored field is corrupt), or ``None``
        (also when the store does not exist yet).

        Args:
            run_id: the run's full id.
        """
        if not self.exists():
            return None
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return self._record(row) if row else None

    def list(self) -> list[RunRecord]:
        """Every run, oldest first; a run with a corrupt field is listed with ``problem`` set."""
        if not self.exists():
            return []
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY created_at").fetchall()
        return [self._record(r) for r in rows]

    def rounds(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """Per-round metrics of a run, in round order.

        Args:
            run_id: the run's full id.

        Raises:
            ConfigError: a round's stored metrics are not valid JSON (naming run and round).
        """
        if not self.exists():
            return []
        with self._connect() as db:
            rows = db.execute(
                "SELECT round, metrics_json FROM rounds WHERE run_id=? ORDER BY round", (run_id,)
            ).fetchall()
        out = []
        for r, m in rows:
            try:
                out.append({"round": r, **json.loads(m)})
            except (TypeError, ValueError) as err:
                raise ConfigError(
                    f"run {run_id} in {self.path}: the stored metrics of round {r + 1} are not valid JSON ({err})"
                ) from None
        return out

    def notices(self, run_id: str) -> builtins.list[dict[str, Any]]:
        if not self.exists():
            return []
        with self._connect() as db:
            rows = db.execute(
                "SELECT round, kind, message FROM notices WHERE run_id=? ORDER BY rowid", (run_id,)
            ).fetchall()
        return [{"round": r, "kind": k, "message": m} for r, k, m in rows]

    @staticmethod
    def _record(row: tuple[Any, ...]) -> RunRecord:
        problems = []
        decoded: dict[str, Any] = {}
        for field, text in (("config", row[5]), ("env", row[6]), ("result", row[10])):
            if field == "result" and not text:
                decoded[field] = None
                continue
            try:
                value = json.loads(text)
            except (TypeError, ValueError) as err:
                problems.append(f"the stored {field} is not valid JSON ({err})")
                value = None
            if field != "result" and not isinstance(value, dict):
                if value is not None:
                    problems.append(f"the stored {field} is not a JSON object")
                value = {}
            elif field == "result" and value is not None and not isinstance(value, dict):
                problems.append("the stored result is not a JSON object")
                value = None
            decoded[field] = value
        return RunRecord(
            run_id=row[0],
            name=row[1],
            algorithm=row[2],
            dataset=row[3],
            model=row[4],
            config=decoded["config"],
            env=decoded["env"],
            status=row[7],
            created_at=row[8],
            updated_at=row[9],
            result=decoded["result"],
            problem="; ".join(problems) or None,
        )


class RunLease:
    """A run's write lease (:meth:`RunStore.lease`): refreshed every
    :data:`LEASE_REFRESH_SECONDS` by a daemon thread until :meth:`release`."""

    def __init__(self, store: RunStore, run_id: str, token: str) -> None:
        self.store, self.run_id, self.token = store, run_id, token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, name=f"dpfl-lease-{run_id}", daemon=True)
        self._thread.start()

    def _refresh(self) -> None:
        while not self._stop.wait(LEASE_REFRESH_SECONDS):
            try:
                if not self.store._refresh_lease(self.run_id, self.token):
                    return
            except Exception:  # a busy or vanished store: the next refresh tries again  # noqa: BLE001
                continue

    def release(self) -> None:
        """Stop refreshing and delete the lease (only if it is still this writer's)."""
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.store._release_lease(self.run_id, self.token)
        except ConfigError:  # the store became unwritable: the lease goes stale with this process
            pass

    def __enter__(self) -> RunLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state first), or ``None`` (no such process, or no /proc)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (/proc; ``None`` elsewhere):
    tells the process from a later one that reuses its pid."""
    fields = _proc_stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _lease_live(pid: int, host: str, process_start: str | None, taken_at: float, refreshed_at: float, *,
                now: float) -> bool:
    """Whether a lease row still belongs to a live writer (see the module docstring)."""
    if now - refreshed_at > LEASE_STALE_SECONDS:
        return False
    if host != socket.gethostname():
        return True  # another machine's process: only the refresh time tells
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    fields = _proc_stat(pid)
    if fields is None:  # no /proc (not Linux: the pid exists), or it ended just now
        return not Path("/proc/self").is_dir()
    if fields[0] == "Z":  # a zombie has ended
        return False
    return process_start is None or len(fields) <= 19 or fields[19] == process_start


def _file_among_parents(path: Path) -> Path | None:
    """The first existing ancestor of ``path`` that is not a directory, if any."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _explain(err: sqlite3.DatabaseError, write: bool) -> str:
    text = str(err)
    if "readonly" in text or "read-only" in text:
        return f"is read-only ({text}); use a writable --store"
    if "unable to open" in text:
        return f"cannot be opened ({text}); check that its folder is {'writable' if write else 'readable'}"
    if "no such table" in text:
        return f"is not a dpfl run store ({text})"
    return f"is not a readable SQLite file: {text}"
