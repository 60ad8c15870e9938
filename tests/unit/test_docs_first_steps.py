"""A newcomer's first steps: the README's and Get started's examples store their runs where
`dpfl runs` looks (the default store), and Get started says how to install dpfl into an
environment of one's own (torch's CPU build first) and that a dry run of a config reads its data."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
START = (ROOT / "docs" / "get-started.md").read_text(encoding="utf-8")


def test_the_first_examples_use_the_store_dpfl_runs_reads() -> None:
    # before: store="runs/example.sqlite" / "runs/readme.sqlite", so `dpfl runs` answered "no run store"
    for name, text in (("README.md", README), ("docs/get-started.md", START)):
        other = re.findall(r"store=\"(runs/(?!dpfl\.sqlite)[^\"]+)\"", text)
        assert not other, f"{name} stores runs in {other}: `dpfl runs` reads runs/dpfl.sqlite"


def test_get_started_installs_into_an_environment_of_ones_own() -> None:
    section = START.split("### Into an environment of your own", 1)[1].split("\n## ", 1)[0]
    torch_first = section.index("pip install torch==2.13.0")
    assert torch_first < section.index("pip install -e /path/to/dpfl") < section.index("pip install dist/dpfl")
    assert "OWNER" not in section
    assert "reads its data" in START  # a config's dry run reads the data set; the shortcuts do not
