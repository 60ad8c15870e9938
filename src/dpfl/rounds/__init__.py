"""The round loop, once, for every runtime (see ``docs/architecture.md``).

* :mod:`~dpfl.rounds.build` — a config → an :class:`Experiment` (data, model, algorithm, engine).
* :mod:`~dpfl.rounds.cohort` — where a cohort trains: in process (vectorized, sequential, Ray
  shards; the canary audit's wrapped step), elsewhere (a transport such as Flower), or nowhere
  (a dry run).
* :mod:`~dpfl.rounds.gate` — the privacy gate: releases, ledger, target ε, Rényi filter, strict.
* :mod:`~dpfl.rounds.loop` — the loop itself; persistence goes through a recorder.
* :mod:`~dpfl.rounds.session` — a stored run (register, resume, checkpoint, final record) and a
  dry run (``dpfl account CONFIG``).
* :mod:`~dpfl.rounds.result` — typed results: :class:`RunResult`, :class:`PrivacySummary`.

This layer imports ``algorithms``, ``sim``, ``data``, ``models``, ``privacy``, ``config`` and
``store``; never ``experiments``, ``runtime``, ``audit`` or ``commands`` (they import it).

The names load on first use: importing this package (or :mod:`~dpfl.rounds.result` alone, as
``dpfl runs`` and ``dpfl report`` do) imports neither torch nor an accountant.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpfl.rounds.build import (
        ENGINES,
        Experiment,
        Plan,
        build_experiment,
        build_plan,
        check_device,
        check_names,
        dpfl_commit,
        environment,
        evaluate,
        params_digest,
        partition_clients,
    )
    from dpfl.rounds.cohort import Cohort, Collected, DryCohort, InProcessCohort, UploadCohort
    from dpfl.rounds.gate import PrivacyGate
    from dpfl.rounds.loop import MAX_CONSECUTIVE_EMPTY_ROUNDS, run_rounds
    from dpfl.rounds.result import DryRunResult, PrivacySummary, RunResult
    from dpfl.rounds.session import (
        NoticeFn,
        ProgressFn,
        checkpoint_path,
        dry_run,
        run_experiment,
        run_on,
    )

_WHERE = {
    **{name: "dpfl.rounds.build" for name in (
        "ENGINES", "Experiment", "Plan", "build_experiment", "build_plan", "check_device", "check_names",
        "dpfl_commit", "environment", "evaluate", "params_digest", "partition_clients")},
    **{name: "dpfl.rounds.cohort" for name in (
        "Cohort", "Collected", "DryCohort", "InProcessCohort", "UploadCohort")},
    "PrivacyGate": "dpfl.rounds.gate",
    "MAX_CONSECUTIVE_EMPTY_ROUNDS": "dpfl.rounds.loop",
    "run_rounds": "dpfl.rounds.loop",
    **{name: "dpfl.rounds.result" for name in ("DryRunResult", "PrivacySummary", "RunResult")},
    **{name: "dpfl.rounds.session" for name in (
        "NoticeFn", "ProgressFn", "checkpoint_path", "dry_run", "run_experiment", "run_on")},
}

__all__ = [
    "ENGINES", "Experiment", "Plan", "build_plan", "build_experiment", "check_device", "check_names", "dpfl_commit",
    "environment",
    "evaluate", "params_digest", "partition_clients", "Cohort", "Collected", "DryCohort", "InProcessCohort",
    "UploadCohort", "PrivacyGate", "MAX_CONSECUTIVE_EMPTY_ROUNDS", "run_rounds", "DryRunResult", "PrivacySummary",
    "RunResult", "NoticeFn", "ProgressFn", "checkpoint_path", "dry_run", "run_experiment", "run_on",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dpfl.rounds' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
