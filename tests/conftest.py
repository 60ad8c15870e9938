"""Shared fixtures: the offline data folder (../shared/data) when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DPFL_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "mnist").exists():
        pytest.skip(f"offline data folder {SHARED_DATA} not present (set DPFL_SHARED_DATA)")
    return SHARED_DATA
