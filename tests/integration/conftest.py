"""Fixtures shared by the Flower deployment tests and the Flower apps run in Flower's simulation engine."""

from __future__ import annotations

import builtins
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


class FlowerLog(logging.Handler):
    """The lines of Flower's log ("flwr" logger), as the user reads them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def flower_log(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlowerLog]:
    """Flower's log while a test runs an app of ``tests/flower_apps``: the apps importable here and
    in the simulation's workers (PYTHONPATH), MNIST in ``FLOWER_APPS_DATA``."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FLOWER_APPS_DATA", str(shared_data))
    # Ray (under Flower's simulation engine) replaces builtins.print for the rest of the process
    # when it relays a worker's output; later tests that pickle print would see another object
    monkeypatch.setenv("RAY_TQDM_PATCH_PRINT", "0")
    printer = builtins.print
    handler = FlowerLog()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        builtins.print = printer
        logger.removeHandler(handler)
        for name in [m for m in sys.modules if m.startswith("flower_apps")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def prompt_superexec() -> Iterator[None]:
    """Every federation of the module that asks for it: Flower's SuperExec (it starts the ServerApp
    and ClientApp processes) polls for work every 0.1 s instead of every second
    (``LocalFederation`` passes the environment on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1")
        yield
