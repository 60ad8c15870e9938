"""``dpfl reproduce`` reads the data where ``dpfl run`` would: ``--data-dir``, else
``$DPFL_DATA_DIR``, else the recipes' own ``./data``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpfl import cli


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    got: dict[str, Any] = {}

    def fake_reproduce(recipe: Any, scale: str, store: Any, out: Path, **kw: Any) -> Path:
        got.update(kw)
        path = tmp_path / "report.md"
        path.write_text("report")
        return path

    monkeypatch.setattr("dpfl.experiments.recipes.base.reproduce", fake_reproduce)
    monkeypatch.delenv("DPFL_DATA_DIR", raising=False)
    return got


def _run(tmp_path: Path, *extra: str) -> int:
    return cli.main(["reproduce", "000/fig4", "--scale", "smoke", "--from-records", "--out", str(tmp_path), *extra])


def test_without_either_the_recipes_own_folder_is_used(seen: dict[str, Any], tmp_path: Path) -> None:
    assert _run(tmp_path) == 0
    assert seen["data_dir"] is None


def test_the_environment_variable_is_the_default(seen: dict[str, Any], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPFL_DATA_DIR", str(tmp_path / "shared-data"))
    assert _run(tmp_path) == 0
    assert seen["data_dir"] == str(tmp_path / "shared-data")


def test_the_flag_wins_over_the_environment(seen: dict[str, Any], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPFL_DATA_DIR", str(tmp_path / "shared-data"))
    assert _run(tmp_path, "--data-dir", str(tmp_path / "mine")) == 0
    assert seen["data_dir"] == str(tmp_path / "mine")
