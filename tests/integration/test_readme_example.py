"""The README's "Python API" example runs as written (extracted from README.md, not copied)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API section holds exactly one python example"
    return blocks[0]


def test_the_readme_example_is_short() -> None:
    assert len(_example().strip().splitlines()) <= 30


def test_the_readme_example_runs_and_prints_both_epsilons(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_example(), encoding="utf-8")
    (tmp_path / "runs").mkdir()
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for name in ("dp-fedavg", "udp"):
        block = out.split(f"{name}: test accuracy", 1)[1]
        assert "claimed epsilon:" in block
        assert "certified epsilon vs server:" in block and "certified epsilon vs public:" in block
        # the exported model loads with torch alone (weights_only, torch.load's default)
        state = torch.load(tmp_path / "runs" / f"{name}.pt")
        assert set(state) == {"conv.weight", "conv.bias", "norm.weight", "norm.bias", "head.weight", "head.bias"}
    # library use is quiet: no third-party warning floods on stderr
    assert "WARNING:absl" not in done.stderr, done.stderr[-2000:]
