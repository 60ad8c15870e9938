"""The environment stored with a run: dpfl's version always, its git commit only from its own checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import dpfl
from dpfl.rounds import build as runner


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
                               "HOME": str(cwd), "PATH": "/usr/bin:/bin:/usr/local/bin"}).stdout.strip()


def _repo(path: Path, pyproject: str | None) -> str:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    if pyproject is not None:
        (path / "pyproject.toml").write_text(pyproject)
    (path / "README").write_text("x")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "init")
    return _git(path, "rev-parse", "HEAD")


def _placed_at(monkeypatch: pytest.MonkeyPatch, package_root: Path) -> None:
    """Make the runner believe it is the file ``package_root/rounds/build.py``."""
    target = package_root / "rounds" / "build.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("")
    monkeypatch.setattr(runner, "__file__", str(target))


def test_own_checkout_records_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = _repo(tmp_path / "dpfl", '[project]\nname = "dpfl"\n')
    _placed_at(monkeypatch, tmp_path / "dpfl" / "src" / "dpfl")
    assert runner.dpfl_commit() == commit


def test_installed_inside_another_project_records_no_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _repo(tmp_path / "app", '[project]\nname = "app"\n')
    _placed_at(monkeypatch, tmp_path / "app" / ".venv" / "lib" / "python3.11" / "site-packages" / "dpfl")
    assert runner.dpfl_commit() is None


def test_a_src_layout_of_another_project_records_no_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _repo(tmp_path / "app", '[project]\nname = "app"\n')
    _placed_at(monkeypatch, tmp_path / "app" / "src" / "dpfl")
    assert runner.dpfl_commit() is None


def test_an_unversioned_dpfl_source_inside_another_repository_records_no_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _repo(tmp_path / "outer", None)
    vendored = tmp_path / "outer" / "vendor" / "dpfl"
    vendored.mkdir(parents=True)
    (vendored / "pyproject.toml").write_text('[project]\nname = "dpfl"\n')
    _placed_at(monkeypatch, vendored / "src" / "dpfl")
    assert runner.dpfl_commit() is None


def test_the_version_is_always_recorded() -> None:
    env = runner.environment()
    assert env["dpfl"] == dpfl.__version__ and "git_commit" in env
