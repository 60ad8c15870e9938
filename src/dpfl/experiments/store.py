"""The run store: one SQLite file holding every run's config, environment, per-round metrics,
notices and final result. Plots and reports read only from here.

Writes are small transactions, so a run killed at any moment leaves every completed round's row
intact; WAL mode lets ``dpfl runs`` read while a run writes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpfl.errors import ConfigError

DEFAULT_STORE = Path("runs") / "dpfl.sqlite"

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


class RunStore:
    """SQLite-backed store of runs. ``path`` is created with its folder on first use."""

    def __init__(self, path: str | Path = DEFAULT_STORE) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            with db:
                yield db
        except sqlite3.DatabaseError as err:
            raise ConfigError(f"run store {self.path} is not a readable SQLite file: {err}") from None
        finally:
            db.close()

    def start(self, run_id: str, config: dict[str, Any], env: dict[str, Any]) -> None:
        """Register a run (or mark an existing one as running again)."""
        now = time.time()
        with self._connect() as db:
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

    def log_round(self, run_id: str, round_idx: int, metrics: dict[str, Any]) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO rounds (run_id, round, metrics_json) VALUES (?, ?, ?)",
                (run_id, int(round_idx), json.dumps(metrics)),
            )
            db.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (time.time(), run_id))

    def drop_rounds_after(self, run_id: str, round_idx: int) -> None:
        """Forget rounds after ``round_idx`` (a resumed run redoes them from its checkpoint)."""
        with self._connect() as db:
            db.execute("DELETE FROM rounds WHERE run_id=? AND round>?", (run_id, int(round_idx)))

    def add_notice(self, run_id: str, round_idx: int | None, kind: str, message: str) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO notices (run_id, round, kind, message) VALUES (?, ?, ?, ?)",
                (run_id, round_idx, kind, message),
            )

    def finish(self, run_id: str, status: str, result: dict[str, Any] | None) -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE runs SET status=?, result_json=?, updated_at=? WHERE run_id=?",
                (status, json.dumps(result) if result is not None else None, time.time(), run_id),
            )

    def get(self, run_id: str) -> RunRecord:
        """A run by id or by a unique id prefix."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs WHERE run_id LIKE ?", (run_id + "%",)).fetchall()
        if not rows:
            raise ConfigError(f"no run with id {run_id!r} in {self.path} (see `dpfl runs`)")
        if len(rows) > 1:
            raise ConfigError(f"run id prefix {run_id!r} is ambiguous: {[r[0] for r in rows]}")
        return self._record(rows[0])

    def find(self, run_id: str) -> RunRecord | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return self._record(row) if row else None

    def list(self) -> list[RunRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY created_at").fetchall()
        return [self._record(r) for r in rows]

    def rounds(self, run_id: str) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT round, metrics_json FROM rounds WHERE run_id=? ORDER BY round", (run_id,)
            ).fetchall()
        return [{"round": r, **json.loads(m)} for r, m in rows]

    def notices(self, run_id: str) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT round, kind, message FROM notices WHERE run_id=? ORDER BY rowid", (run_id,)
            ).fetchall()
        return [{"round": r, "kind": k, "message": m} for r, k, m in rows]

    @staticmethod
    def _record(row: tuple[Any, ...]) -> RunRecord:
        return RunRecord(
            run_id=row[0],
            name=row[1],
            algorithm=row[2],
            dataset=row[3],
            model=row[4],
            config=json.loads(row[5]),
            env=json.loads(row[6]),
            status=row[7],
            created_at=row[8],
            updated_at=row[9],
            result=json.loads(row[10]) if row[10] else None,
        )
