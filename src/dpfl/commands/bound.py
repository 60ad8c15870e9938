"""`dpfl bound ALGORITHM ...`: the papers' convergence bounds as calculators.

Each theory module (``dpfl.theory.udp`` for 000 Thm 2, ``dpfl.theory.nbafl`` for 003 Thm 2–3)
exposes ``register(subparsers)`` adding its own sub-subcommand; modules not shipped are skipped.
"""

from __future__ import annotations

import argparse
import importlib

_THEORY_MODULES = ("dpfl.theory.udp", "dpfl.theory.nbafl")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bound", help="evaluate a paper's convergence bound against T (and its best T)")
    sub = p.add_subparsers(dest="bound_algorithm", metavar="ALGORITHM")
    for name in _THEORY_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:
                continue
            raise
        module.register(sub)

    def _help(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=_help)
