"""`dpfl.theory` holds pure calculators: it imports only dpfl.errors, dpfl.privacy, the standard
library and numpy — never the store, a CLI module or argparse (the `bound` command's I/O lives in
`dpfl.commands.bound_*`)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import dpfl.theory

THEORY_DIR = Path(dpfl.theory.__file__).parent
ALLOWED_DPFL = ("dpfl.errors", "dpfl.privacy")
FORBIDDEN_STDLIB = {"argparse", "sys", "json"}  # I/O belongs to the command


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _bad(name: str) -> bool:
    top = name.split(".")[0]
    if top == "dpfl":
        return not any(name == ok or name.startswith(ok + ".") for ok in ALLOWED_DPFL)
    if top in FORBIDDEN_STDLIB:
        return True
    return top not in sys.stdlib_module_names and top not in {"numpy", "__future__"}


def test_theory_imports_only_errors_privacy_stdlib_and_numpy() -> None:
    files = sorted(THEORY_DIR.glob("*.py"))
    assert len(files) >= 3, files  # __init__, udp, nbafl: the scan sees the package
    bad = {f.name: [n for n in _imports(f) if _bad(n)] for f in files}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_the_check_flags_a_store_import() -> None:
    assert _bad("dpfl.store") and _bad("argparse") and _bad("matplotlib.pyplot")
    assert not _bad("dpfl.privacy.calibration") and not _bad("math") and not _bad("numpy")
