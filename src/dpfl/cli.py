"""The ``dpfl`` command line: run | runs | plot | report | export | data | account | options | reproduce | bound |
audit | federate.

Errors a user causes (:class:`dpfl.errors.DpflError`, a usage error, a file that cannot be read
or written) print one line on stderr and exit with status 2.

Registering a command imports nothing heavy (no torch, numpy, rich or dp-accounting): a command
imports what it needs inside the function that runs it, so ``dpfl --help`` stays fast
(tests/unit/commands/test_cli_light.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

# command -> the module that registers it, in the order ``dpfl --help`` lists them. A command line
# that names a command builds a parser with that module only (``dpfl runs`` does not import what
# ``dpfl bound`` needs); ``dpfl --help`` and a command line without one register them all.
_COMMANDS = {
    "run": "dpfl.commands.run",
    "runs": "dpfl.commands.runs",
    "plot": "dpfl.commands.runs",
    "data": "dpfl.commands.data",
    "account": "dpfl.commands.account",
    "options": "dpfl.commands.options",
    "reproduce": "dpfl.commands.reproduce",
    "bound": "dpfl.commands.bound",
    "report": "dpfl.commands.report",
    "export": "dpfl.commands.export",
    "audit": "dpfl.commands.audit",
    "federate": "dpfl.commands.federate",
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (the usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``dpfl`` parser with every command, or with ``command`` only where it names one (what
    :func:`main` builds for a command line that names it: the other commands' modules stay unimported)."""
    import dpfl

    parser = _Parser(prog="dpfl", description="Differentially private federated learning.")
    parser.add_argument("--version", action="version", version=f"dpfl {dpfl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [_COMMANDS[command]] if command in _COMMANDS else list(dict.fromkeys(_COMMANDS.values()))
    for name in modules:
        module = importlib.import_module(name)  # a module that fails to import is an error
        module.register(sub)
    return parser


# commands whose positional ``config`` and ``--set`` are one run config, read as they are: the CLI
# reads it before the command imports torch, so a typo is reported in well under a second
_CONFIG_FIRST = ("run",)


def _config_first(args: argparse.Namespace) -> None:
    """Validate the run config of a command of :data:`_CONFIG_FIRST` (pydantic only, no torch).

    Raises:
        ConfigError: the config cannot be read or is invalid (the command would raise the same).
    """
    if getattr(args, "command", None) in _CONFIG_FIRST and isinstance(getattr(args, "config", None), str):
        from dpfl.config import load_config

        load_config(args.config, list(getattr(args, "set", None) or []))


def main(argv: list[str] | None = None) -> int:
    from dpfl.errors import DpflError

    # dp-accounting's absl warnings are set to ERROR when absl is imported (see dpfl/__init__.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    if len(argv) > 1 and argv[0] == "account" and not argv[1].startswith("-"):
        # `dpfl account CONFIG` is `dpfl account config CONFIG` (a dry run of that config)
        account = parser._subparsers._group_actions[0].choices["account"]  # type: ignore[union-attr,index]
        names = account._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        if argv[1] not in names:
            argv.insert(1, "config")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed
        return stop.code if isinstance(stop.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _config_first(args)
        return int(args.func(args) or 0)
    except DpflError as err:
        print(f"dpfl: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file or folder the user named cannot be read or written
        where = f" ({err.filename})" if err.filename else ""
        print(f"dpfl: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpfl: interrupted; run the same command again to resume from the last checkpoint", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
