"""Shared fixtures: the tiny MNIST-format fixture (in the repository) and the offline data folder
(../shared/data) for the tests that need the real data sets.

Tests that only need the MNIST *format* use ``mnist_fixture`` (1,000 + 200 synthetic images written
by ``tests/fixtures/make_mnist_fixture.py``; configs set ``data.verify: false``). Tests that need the
real data use ``shared_data``: it skips when the folder is missing on a developer's machine, and
fails under CI (``CI=true``), where the folder is provided beside the clone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DPFL_SHARED_DATA", ROOT.parent / "shared" / "data"))
MNIST_FIXTURE = ROOT / "tests" / "fixtures" / "data"


def require_shared_data(folder: str) -> Path:
    """``SHARED_DATA/folder``: skipped when missing, a failure when missing under CI."""
    path = SHARED_DATA / folder
    if not path.is_dir():
        message = f"offline data folder {path} not present (set DPFL_SHARED_DATA)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{message}; CI must provide it", pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The offline data folder holding the real data sets (at least MNIST)."""
    require_shared_data("mnist")
    return SHARED_DATA


@pytest.fixture(scope="session")
def mnist_fixture() -> Path:
    """A data directory holding ``mnist/`` in the standard IDX format (not the real MNIST: read it
    with ``data.verify: false``)."""
    if not (MNIST_FIXTURE / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.fail(f"{MNIST_FIXTURE} is missing: run tests/fixtures/make_mnist_fixture.py", pytrace=False)
    return MNIST_FIXTURE
