"""Fixtures shared by the Flower deployment tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def prompt_superexec() -> Iterator[None]:
    """Every federation of the module that asks for it: Flower's SuperExec (it starts the ServerApp
    and ClientApp processes) polls for work every 0.1 s instead of every second
    (``LocalFederation`` passes the environment on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1")
        yield
