"""`dpfl --help` imports nothing heavy, and library use is quiet: dp-accounting's absl warnings
do not reach a user's terminal, while the user's own logging choices are kept."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[3] / "src")
HEAVY = ("torch", "dp_accounting", "absl", "rich", "flwr", "ray", "matplotlib")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def _cli_modules(*argv: str) -> list[str]:
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['dpfl', *{list(argv)!r}]\n"
        "try:\n"
        "    runpy.run_module('dpfl', run_name='__main__', alter_sys=True)\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    res = _python(code)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("LOADED")]
    assert line, res.stderr
    return ast.literal_eval(line[-1].removeprefix("LOADED "))


def test_help_imports_no_torch_nor_other_heavy_packages() -> None:
    assert _cli_modules("--help") == []
    assert _cli_modules("data", "--help") == []
    assert _cli_modules("export", "--help") == []


def test_each_command_is_registered_by_the_module_the_cli_names_for_it() -> None:
    """A command line that names a command registers that command's module only (cli._COMMANDS):
    the table must list every command, in the order of ``dpfl --help``."""
    from dpfl.cli import _COMMANDS, build_parser

    def names(parser: Any) -> list[str]:
        return list(parser._subparsers._group_actions[0].choices)

    assert names(build_parser()) == list(_COMMANDS)
    for name in _COMMANDS:
        assert name in names(build_parser(name))


def _stored_run(path: Path) -> str:
    """A store with one finished run whose result holds a privacy summary (what `dpfl runs` and
    `dpfl report` read)."""
    from dpfl.privacy.accounting.certify import Certificate
    from dpfl.rounds.result import PrivacySummary
    from dpfl.store import RunStore

    certs = {obs: Certificate(2.0, 1e-5, "rdp", obs, "client", "add_remove", epsilon_rdp=2.0)
             for obs in ("server", "public")}
    summary = PrivacySummary(certs, 1.5, "(ε, δ)-DP", True, 1e-5)
    store = RunStore(path)
    store.start("run000000001", {"name": "light", "algorithm": {"name": "dp-fedavg"}}, {"torch": "-"})
    store.log_round("run000000001", 0, {"train_loss": 1.0})
    store.finish("run000000001", "finished", {"rounds": 1, "test_accuracy": 0.5, "test_loss": 1.0,
                                              "privacy": summary.to_dict()})
    return "run000000001"


def test_options_imports_no_torch() -> None:
    """`dpfl options` reads pydantic models: no torch, no accountant."""
    assert _cli_modules("options") == []
    assert _cli_modules("options", "dp-fedavg", "--markdown") == []


def test_runs_and_report_import_no_torch(tmp_path: Path) -> None:
    """Listing and reporting stored runs reads a SQLite file: no torch, no accountant."""
    run_id = _stored_run(tmp_path / "s.sqlite")
    assert _cli_modules("runs", "--store", str(tmp_path / "s.sqlite")) == ["rich"]
    assert _cli_modules("runs", "--store", str(tmp_path / "s.sqlite"), "--json") == []
    assert _cli_modules("report", run_id, "--store", str(tmp_path / "s.sqlite")) == []


def test_account_imports_no_training_machinery() -> None:
    """A dry run needs torch (the cohorts are drawn with the run's torch generators) and the
    accountant, never Flower, Ray or matplotlib."""
    loaded = _cli_modules("account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.04",
                          "--rounds", "10", "--clients", "100", "--delta", "1e-5")
    assert "dp_accounting" in loaded  # the probe sees what a dry run loads
    assert not {"flwr", "ray", "matplotlib"} & set(loaded)


def test_data_command_names_the_data_dir_variable_of_dpfl_data() -> None:
    from dpfl.commands.data import DATA_DIR_ENV
    from dpfl.data.layout import DATA_DIR_ENV as REAL

    assert DATA_DIR_ENV == REAL


def test_import_dpfl_is_light() -> None:
    res = _python(f"import sys, dpfl; print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert res.stdout.strip() == "[]", res.stderr


_FLOOD = (
    "import dp_accounting\n"
    "from dp_accounting.rdp import rdp_privacy_accountant as rdp\n"
    "acc = rdp.RdpAccountant(orders=[1.01, 1.05, 1.09])\n"
    "acc.compose(dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(0.3)), 10)\n"
    "acc.get_epsilon(1e-5)\n"
)


def test_accountant_warnings_are_quiet_after_import_dpfl() -> None:
    """The limiting case first: without dpfl the same computation does print absl warnings."""
    loud = _python(_FLOOD)
    assert loud.stderr.count("failed to converge") == 3
    quiet = _python("import dpfl\n" + _FLOOD)
    assert quiet.stderr == "" and quiet.returncode == 0
    # absl imported before dpfl: quieted as well
    before = _python("import absl.logging\nimport dpfl\n" + _FLOOD)
    assert before.stderr == ""


def test_user_choices_are_kept() -> None:
    """A level the program gave the absl logger stays; the root logger's level is not touched."""
    code = (
        "import logging\n"
        "import absl.logging\n"
        "logging.getLogger('absl').setLevel(logging.WARNING)\n"
        "logging.root.setLevel(logging.INFO)\n"
        "import dpfl\n" + _FLOOD +
        "print(logging.getLogger('absl').level, logging.root.level)\n"
    )
    res = _python(code)
    assert res.stderr.count("failed to converge") == 3
    assert res.stdout.split() == [str(30), str(20)]


def test_a_find_spec_probe_does_not_disarm_the_quieting() -> None:
    res = _python("import importlib.util, dpfl\nimportlib.util.find_spec('absl.logging')\n" + _FLOOD +
                  "import sys, dpfl as d\nprint(sum(isinstance(f, d._AbslLoggingFinder) for f in sys.meta_path))\n")
    assert res.stderr == "" and res.stdout.strip() == "0"  # quiet, and the finder is gone once used
