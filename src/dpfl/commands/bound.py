"""`dpfl bound ALGORITHM ...`: the papers' convergence bounds as calculators.

Each sub-subcommand is a module here (``bound_udp`` for 000 Thm 2, ``bound_nbafl`` for 003 Thm 2–3)
exposing ``register(subparsers)``; it holds the command's I/O (arguments, the store, printing, the
plot) around the pure calculators of :mod:`dpfl.theory`.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

from dpfl.errors import ConfigError

_BOUND_COMMANDS = ("dpfl.commands.bound_udp", "dpfl.commands.bound_nbafl")


def _checked_plot(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a bound command so that ``--plot PATH`` is checked before any work and a failed write
    is one error line naming the path."""

    def run(args: argparse.Namespace) -> int:
        plot = getattr(args, "plot", None)
        if plot:
            folder = Path(plot).parent
            if not folder.is_dir():
                raise ConfigError(f"--plot {plot}: folder {folder} does not exist; create it or give another path")
            if Path(plot).is_dir():
                raise ConfigError(f"--plot {plot} is a directory; give a PNG file path")
        try:
            return func(args)
        except OSError as err:
            if not plot:
                raise
            raise ConfigError(f"--plot {plot}: cannot write it ({err.strerror or err})") from None

    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bound", help="evaluate a paper's convergence bound against T (and its best T)")
    sub = p.add_subparsers(dest="bound_algorithm", metavar="ALGORITHM")
    for name in _BOUND_COMMANDS:
        module = importlib.import_module(name)  # a module that fails to import is an error
        module.register(sub)
    for parser in sub.choices.values():
        func = parser.get_default("func")
        if func is not None:
            parser.set_defaults(func=_checked_plot(func))

    def _help(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=_help)
