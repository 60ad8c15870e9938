"""The Flower release the docs say dpfl is tested with is the one installed with it."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTED_WITH = re.compile(r"tested\s+with\s+(?:flwr\s+|Flower\s+)?(\d+\.\d+)", re.IGNORECASE)


def test_the_documented_flower_version_is_the_installed_one() -> None:
    try:
        installed = version("flwr")
    except PackageNotFoundError:
        pytest.skip("Flower is not installed")
    major_minor = ".".join(installed.split(".")[:2])
    claims = []
    for path in (ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").rglob("*.md"))):
        claims += [(path.name, m.group(1)) for m in TESTED_WITH.finditer(path.read_text(encoding="utf-8"))]
    assert claims, "no 'tested with <Flower version>' found in the README, pyproject.toml or docs/"
    assert all(v == major_minor for _, v in claims), f"installed flwr {installed}; the docs say {claims}"
