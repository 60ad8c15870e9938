"""Imports flow one way (docs/architecture.md, "Layers"): every ``dpfl`` import in the source,
including imports inside functions, goes to a package its layer may use.

The table is the architecture; a new edge is a design change and goes into the document and
this table in the same commit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dpfl
from dpfl.privacy.accounting import certificate

BASE = {"errors", "rng", "__version__"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "rng": {"errors"},
    "privacy": {"errors", "rng"},
    "config": {"errors"},
    "store": {"errors"},
    "models": {"errors"},
    "data": {"errors", "__version__"},
    "server": {"errors", "privacy"},
    "client": {"privacy", "models"},
    "sampling": {"privacy"},
    "theory": {"privacy"},
    "algorithms": {"privacy", "sampling", "client", "server", "models", "config"},
    "sim": {"client", "models", "privacy"},  # DP-SGD's noise is drawn through privacy/mechanisms/draw.py
    "rounds": {"privacy", "sampling", "client", "server", "models", "config", "data", "store", "algorithms", "sim"},
    "runtime": {"privacy", "sampling", "client", "server", "models", "config", "data", "store", "algorithms", "sim",
                "rounds"},
    "audit": {"privacy", "sampling", "client", "server", "models", "config", "data", "store", "algorithms", "sim",
              "rounds"},
    "progress": set(),
    "plots": {"store"},
    "export": {"models", "config", "store", "sim", "data", "rounds"},
    "api": {"privacy", "sampling", "client", "server", "models", "config", "data", "store", "algorithms", "sim",
            "rounds", "export", "progress"},
}
# the top: may import anything
TOP = {"experiments", "commands", "cli", "__main__", "__init__"}


def _edges() -> dict[str, set[tuple[str, str]]]:
    root = Path(dpfl.__file__).parent
    out: dict[str, set[tuple[str, str]]] = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        pkg = rel.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dpfl":
                names = ([f"dpfl.{a.name}" for a in node.names] if node.module == "dpfl" else [node.module])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "dpfl"]
            for name in names:
                parts = name.split(".")
                if len(parts) > 1 and parts[1] != pkg:
                    out.setdefault(pkg, set()).add((parts[1], str(rel)))
    return out


def test_every_import_goes_down_the_layers() -> None:
    wrong = []
    for pkg, targets in sorted(_edges().items()):
        if pkg in TOP:
            continue
        assert pkg in ALLOWED, f"package {pkg!r} has no place in the layer table: add it (and to docs/architecture.md)"
        for target, where in sorted(targets):
            if target not in ALLOWED[pkg] | BASE:
                wrong.append(f"{where} imports dpfl.{target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_check_sees_imports_inside_functions() -> None:
    # theory's bound command once imported the store inside a function; the walk must see such
    # imports (ast.walk visits function bodies), so a planted one is found
    tree = ast.parse("def f():\n    from dpfl.store import RunStore\n")
    found = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert found == ["dpfl.store"]


#: Privacy statements are made by the algorithms' plans and the ledger: the command line and the
#: paper recipes read certificates from runs and dry runs, never compute them. These modules (and
#: the ``certify`` / ``calibrate_noise_multiplier`` functions) are out of their reach; result types
#: (``Certificate``, ``Basis``: the module ``certificate``, re-exported by ``certify``) and the range
#: notices are not statements and stay importable.
PRIVACY_INTERNALS = ("dpfl.privacy.calibration", "dpfl.privacy.accounting.claimed",
                     "dpfl.privacy.accounting.events", "dpfl.privacy.accounting.ledger",
                     "dpfl.privacy.accounting.broadcast", "dpfl.privacy.accounting.shuffle",
                     "dpfl.privacy.accounting.calibrate")
CERTIFY_TYPES = set(certificate.__all__)


def _privacy_imports(root: Path) -> list[str]:
    """Every import of calibration or accounting internals in the ``*.py`` files under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {a.name for a in node.names}
                module = node.module
                internal = (module.startswith(PRIVACY_INTERNALS)
                            or (module == "dpfl.privacy" and "calibration" in names)
                            or (module == "dpfl.privacy.accounting"
                                and bool(names & {"claimed", "events", "ledger", "cohorts", "shuffle", "certify"}))
                            or (module == "dpfl.privacy.accounting.certify" and bool(names - CERTIFY_TYPES)))
                if internal:
                    found.append(f"{path.name}: from {module} import {sorted(names)}")
            elif isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names if a.name.startswith(PRIVACY_INTERNALS)]
    return found


#: The one module of ``dpfl.experiments`` that computes with the accountants: it states no run's
#: privacy, it checks dpfl's accounting against the figures correlated-noise papers publish (their
#: ε recomputed from their stated σ and participation, reports/published-correlated/), which takes
#: the accountants themselves, as the tests of the accounting do.
CHECKS_THE_ACCOUNTANTS = ("published_correlated.py",)


def test_commands_and_recipes_make_no_privacy_statements_of_their_own() -> None:
    for pkg in ("commands", "experiments"):
        found = [f for f in _privacy_imports(Path(dpfl.__file__).parent / pkg)
                 if not (pkg == "experiments" and f.split(":")[0] in CHECKS_THE_ACCOUNTANTS)]
        assert not found, f"dpfl.{pkg} imports calibration or accounting internals:\n" + "\n".join(found)


def test_the_privacy_rule_sees_planted_imports(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    from dpfl.privacy.calibration import udp_sensitivity\n")
    (tmp_path / "b.py").write_text("from dpfl.privacy.accounting.certify import Certificate, certify\n")
    (tmp_path / "c.py").write_text("from dpfl.privacy.accounting.certify import Certificate\n"
                                   "from dpfl.privacy.accounting.certify import epsilon_from_json\n"
                                   "from dpfl.privacy.accounting.certificate import BASIS_TEXT, Basis\n"
                                   "from dpfl.privacy.notices import collect_range_warnings\n")
    found = _privacy_imports(tmp_path)
    assert [f.split(":")[0] for f in found] == ["a.py", "b.py"]
