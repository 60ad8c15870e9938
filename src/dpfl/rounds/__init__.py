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
"""

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

__all__ = [
    "ENGINES", "Experiment", "Plan", "build_plan", "build_experiment", "check_device", "check_names", "dpfl_commit",
    "environment",
    "evaluate", "params_digest", "partition_clients", "Cohort", "Collected", "DryCohort", "InProcessCohort",
    "UploadCohort", "PrivacyGate", "MAX_CONSECUTIVE_EMPTY_ROUNDS", "run_rounds", "DryRunResult", "PrivacySummary",
    "RunResult", "NoticeFn", "ProgressFn", "checkpoint_path", "dry_run", "run_experiment", "run_on",
]
