"""Every stored run is addressable by its full id, even when that id is a prefix of another run's
(a simulation ``<id>`` and its Flower twin ``<id>-flower``); a shorter prefix matching both is
ambiguous and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpfl.errors import ConfigError
from dpfl.store import RunStore


def test_a_full_id_is_never_ambiguous(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.sqlite")
    store.start("58cfc2ac7eaf", {"name": "sim"}, {})
    store.start("58cfc2ac7eaf-flower", {"name": "flower"}, {})
    assert store.get("58cfc2ac7eaf").run_id == "58cfc2ac7eaf"
    assert store.get("58cfc2ac7eaf-flower").run_id == "58cfc2ac7eaf-flower"
    assert store.get("58cfc2ac7eaf-f").run_id == "58cfc2ac7eaf-flower"  # a unique prefix
    with pytest.raises(ConfigError, match="ambiguous"):
        store.get("58cfc2")
    with pytest.raises(ConfigError, match="no run with id"):
        store.get("ffff")
