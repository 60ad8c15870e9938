"""Result records: what a report needs of each of its runs, committed beside the report.

Every report ``reports/<key>/<scale>/report.md`` has a ``records.jsonl`` next to it: one JSON
line per run of the report, in the recipe's order, holding the run's cell (label and plot
coordinates), the hash of its config, its seed, the config itself (without the data folder), its
per-round metrics, its final metrics and privacy summary, both ε per observer (the paper's
claimed ε and the certified one, with method and basis), and its wall seconds (first to last
write of the run). No model weights: the file is a few hundred bytes per round; what a report
measures on the saved models goes in ``measured.json`` beside it
(:meth:`dpfl.experiments.recipes.base.ReportContext.measured`).

``dpfl reproduce KEY --from-records`` writes the report from these lines alone (no run store,
no training): :class:`RecordStore` answers the few store queries a recipe's report makes.
A sweep run in pieces (``--max-runs N``) adds the records of the runs it made, so the next piece
may run on another machine from the committed file.

A record belongs to a recipe's run when their config hashes match (:func:`config_hash`: the
validated config without the data folder, so a record written before a config field was added
still matches as long as the field's default is what the run used).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from dpfl.config import RunConfig
from dpfl.errors import ConfigError
from dpfl.store import RunRecord

RECORDS_FILE = "records.jsonl"
#: fields of a run's final result left out of its record: the path of its saved model (weights
#: are not committed, and the path names a folder of the machine that ran it)
_LOCAL_FIELDS = ("model_path",)


def config_hash(config: RunConfig) -> str:
    """The hash a record is matched by: the validated config without ``data.dir``.

    Equal to :func:`dpfl.config.run_id` for verified data (the data folder is never part of a
    run's identity then); for unverified data the folder is left out here too, so a record
    matches the same run made from a copy of the files elsewhere.
    """
    dumped = config.model_dump(mode="json")
    dumped["data"].pop("dir", None)
    canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def epsilon_summary(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """Both ε of a run per observer, as a reader checks them: the paper's claimed ε (and whether
    it is comparable), and per observer the certified ε with its δ, method and basis.
    None for a run without a privacy summary (non-private, or failed before its first round)."""
    priv = (result or {}).get("privacy")
    if not priv:
        return None
    observers = ((priv.get("certified") or {}).get("observers")) or {}
    return {
        "claimed": priv.get("claimed_epsilon"),
        "claim_comparable": priv.get("claim_comparable"),
        "delta": priv.get("delta"),
        "certified": {
            name: {"epsilon": cert.get("epsilon"), "method": cert.get("method"), "basis": cert.get("basis")}
            for name, cert in sorted(observers.items())
        },
    }


def make_record(label: str, coords: dict[str, Any], config: RunConfig, rec: RunRecord,
                rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The record of one ended run (finished or failed) of a recipe's cell."""
    stored = json.loads(json.dumps(rec.config))  # a deep copy
    stored.get("data", {}).pop("dir", None)
    final = None if rec.result is None else {k: v for k, v in rec.result.items() if k not in _LOCAL_FIELDS}
    return {
        "label": label,
        "cell": coords,
        "config_hash": config_hash(config),
        "run_id": rec.run_id,
        "seed": config.seed,
        "status": rec.status,
        "name": rec.name,
        "algorithm": rec.algorithm,
        "dataset": rec.dataset,
        "model": rec.model,
        "wall_seconds": max(float(rec.updated_at) - float(rec.created_at), 0.0),
        "epsilon": epsilon_summary(rec.result),
        "final": final,
        "rounds": rows,
        "config": stored,
    }


def dumps(record: dict[str, Any]) -> str:
    """One line of ``records.jsonl`` (keys in a fixed order, no trailing spaces)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=True)


def write_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Write ``records`` (already in the recipe's order) as ``path``, replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(dumps(r) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of ``path`` (an empty list when the file does not exist).

    Raises:
        ConfigError: a line is not a JSON object with the fields of a record (the line is named).
    """
    if not path.is_file():
        return []
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{number} is not a JSON line ({err.msg}); restore the file from git") from None
        missing = [k for k in ("label", "config_hash", "run_id", "status", "rounds", "config")
                   if not isinstance(record, dict) or k not in record]
        if missing:
            raise ConfigError(f"{path}:{number} is not a run record: missing {missing}")
        out.append(record)
    return out


def current_hash(record: dict[str, Any]) -> str:
    """The record's config hash under today's config schema (fields added since it was written
    take their defaults); its stored ``config_hash`` when the config no longer validates."""
    try:
        config = RunConfig.model_validate(record["config"])
    except Exception:  # noqa: BLE001 - a config today's schema refuses matches no run of a recipe
        return str(record["config_hash"])
    return config_hash(config)


def to_run_record(record: dict[str, Any]) -> RunRecord:
    """The run-store view of a record, as recipes' reports read it."""
    return RunRecord(
        run_id=str(record["run_id"]), name=str(record.get("name", record["label"])),
        algorithm=str(record.get("algorithm", "?")), dataset=str(record.get("dataset", "?")),
        model=str(record.get("model", "?")), config=record["config"], env={}, status=str(record["status"]),
        created_at=0.0, updated_at=float(record.get("wall_seconds", 0.0)), result=record.get("final"),
    )


class RecordStore:
    """A read-only run store answered from a ``records.jsonl``: what a report reads (``find``,
    ``rounds``, ``list``) without the SQLite store the runs were made in."""

    def __init__(self, path: Path, records: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        self.records = read_records(path) if records is None else records
        self._by_id = {str(r["run_id"]): r for r in self.records}

    def exists(self) -> bool:
        return bool(self.records)

    def find(self, run_id: str) -> RunRecord | None:
        record = self._by_id.get(run_id)
        return None if record is None else to_run_record(record)

    def get(self, run_id: str) -> RunRecord:
        rec = self.find(run_id)
        if rec is None:
            raise ConfigError(f"run {run_id!r} is not in {self.path}")
        return rec

    def rounds(self, run_id: str) -> list[dict[str, Any]]:
        record = self._by_id.get(run_id)
        return [] if record is None else list(record["rounds"])

    def list(self) -> list[RunRecord]:
        return [to_run_record(r) for r in self.records]


class RunSource(Protocol):
    """What a recipe's report reads of its runs: a :class:`~dpfl.store.RunStore`, a
    :class:`RecordStore`, or both (:class:`CombinedSource`)."""

    path: Path

    def find(self, run_id: str) -> RunRecord | None: ...

    def rounds(self, run_id: str) -> list[dict[str, Any]]: ...

    def list(self) -> list[RunRecord]: ...


class CombinedSource:
    """A run store completed by a report's records: runs the store holds are read from it, the
    others (made on another machine, or in a store since lost) from the records."""

    def __init__(self, store: RunSource, records: RecordStore) -> None:
        self.store, self.records = store, records
        self.path = store.path

    def find(self, run_id: str) -> RunRecord | None:
        rec = self.store.find(run_id)
        return rec if rec is not None else self.records.find(run_id)

    def rounds(self, run_id: str) -> list[dict[str, Any]]:
        if self.store.find(run_id) is not None:
            return self.store.rounds(run_id)
        return self.records.rounds(run_id)

    def list(self) -> list[RunRecord]:
        held = self.store.list()
        ids = {r.run_id for r in held}
        return [*held, *(r for r in self.records.list() if r.run_id not in ids)]
