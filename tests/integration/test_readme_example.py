"""The README is a landing page whose every claim is checked: its first commands are the two set-up
commands, its Python example runs as written (extracted from README.md, not copied), its links into
the documentation resolve, and its block of what `./dev run` prints is what the main job prints —
a change of the main job's figures fails here until the README shows the new ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _blocks(info: str) -> list[str]:
    return re.findall(rf"^```{info}\n(.*?)^```$", _text(), flags=re.S | re.M)


def test_the_readme_opens_with_the_two_set_up_commands_and_stays_a_landing_page() -> None:
    text = _text()
    first = re.search(r"^```bash\n(.*?)^```$", text, flags=re.S | re.M)
    assert first is not None and text.index("```") == first.start(), "the first code block is the set-up commands"
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["./dev run", "./dev test"]
    assert len(text.splitlines()) <= 130, "the README is a landing page: the rest lives in docs/"


def test_the_readme_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links into the documentation"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


def test_the_readme_python_example_runs_and_prints_both_epsilons(tmp_path: Path) -> None:
    (example,) = _blocks("python")
    assert len(example.strip().splitlines()) <= 20, "the README's example is short; longer ones live in docs/"
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test accuracy" in done.stdout
    assert "claimed epsilon:" in done.stdout
    assert "certified epsilon vs server:" in done.stdout and "certified epsilon vs public:" in done.stdout
    # the saved model is a plain state_dict that torch alone loads (weights_only, torch.load's default)
    assert set(torch.load(tmp_path / "model.pt")) == {"weight", "bias"}
    # library use is quiet: no third-party warning floods on stderr
    assert "WARNING:absl" not in done.stderr, done.stderr[-2000:]


def _normalized(line: str) -> str:
    return re.sub(r" in \d+(\.\d+)? s$", " in N s", line.rstrip())  # the wall time is the machine's


def test_the_readme_shows_what_the_main_job_prints(tmp_path: Path, shared_data: Path) -> None:
    """The README's block of `./dev run`'s output, line by line, against `dpfl run default` on the
    real MNIST ("..." stands for lines left out; the run's time is the only field not compared)."""
    section = _text().split("## What `./dev run` prints", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```text\n(.*?)^```$", section, flags=re.S | re.M)
    shown = [_normalized(line) for line in block.splitlines() if line.strip() != "..."]
    done = subprocess.run([sys.executable, "-m", "dpfl", "run", "default", "--set", f"data.dir={shared_data}",
                           "--store", str(tmp_path / "runs.sqlite")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [_normalized(line) for line in done.stdout.splitlines()]
    at = 0
    for line in shown:
        assert line in printed[at:], (
            f"README.md shows a line the main job does not print (after line {at}); update the README's "
            f"block 'What `./dev run` prints' from `./dev run`:\n  {line}\nthe run printed:\n" + "\n".join(printed))
        at = printed.index(line, at) + 1
