"""How to install dpfl on another machine (it is not on the package index), and that path works:
a wheel built from the source holds every module, the package data and the `dpfl` command. The
real-machines example gives several SuperNodes on one host distinct ports, with flags Flower has.
Both are in the documentation's Flower guide (docs/how-to/flower.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "how-to" / "flower.md").read_text(encoding="utf-8")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _section(title: str) -> str:
    return GUIDE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_docs_say_how_to_install_dpfl_elsewhere() -> None:
    install = _section("Install dpfl on another machine")
    assert "not on the package index" in install
    assert "pip install -e '.[flower]'" in install  # from a clone
    assert "pip wheel . --no-deps" in install and "python -m build" in install  # a built wheel
    assert re.search(r"pip install 'dpfl\[flower\] @ git\+https://", install)  # a git URL
    # no instruction, in the README or the documentation, installs dpfl by name from the index
    for path in DOCS:
        by_name = re.search(r"pip install '?dpfl\[[a-z,]+\]'?(?! @)", path.read_text(encoding="utf-8"))
        assert by_name is None, f"{path.name}: {by_name.group(0)!r}: the package index has no dpfl"


def test_a_built_wheel_holds_the_modules_the_package_data_and_the_command(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    src = tmp_path / "src"  # a copy: building leaves build/ and egg-info behind
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("dpfl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "src" / "dpfl"
    modules = {p.relative_to(package.parent).as_posix() for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    assert modules <= names, sorted(modules - names)[:5]
    data = {"dpfl/py.typed", "dpfl/data/checksums.json", "dpfl/runtime/flower/app/pyproject.toml",
            *(p.relative_to(package.parent).as_posix() for p in (package / "configs").glob("*.yaml"))}
    assert "dpfl/configs/default.yaml" in data and data <= names, sorted(data - names)
    (entry,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "dpfl = dpfl.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_several_supernodes_on_one_host_get_distinct_ports_with_flags_flower_has() -> None:
    machines = _section("On real machines")
    block = machines.split("```bash", 1)[1].split("```", 1)[0]
    nodes = [ln for ln in block.splitlines() if ln.startswith("flower-supernode")]
    ports = [re.search(r"--port (\d+)", ln) for ln in nodes]
    assert len(nodes) >= 2 and all(ports), nodes
    assert len({m.group(1) for m in ports if m}) == len(nodes), "each SuperNode of one host needs its own port"
    assert "same host" in machines or "one host" in machines
    tool = shutil.which("flower-supernode") or shutil.which("flower-supernode", path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip("Flower is not installed")
    help_text = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=120).stdout
    for ln in nodes:
        for flag in re.findall(r"(--[a-z-]+)", ln):
            assert re.search(rf"\[{flag}[\] ]", help_text), f"flower-supernode has no {flag}"
