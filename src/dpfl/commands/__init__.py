"""dpfl.commands: one module per command of the ``dpfl`` command line (see :mod:`dpfl.cli`)."""

from __future__ import annotations


def preload(*modules: str) -> None:
    """Import ``modules`` with the cyclic garbage collector off, then take everything loaded so far
    out of its generations (:func:`gc.freeze`).

    Importing torch, scipy and pydantic creates about a million objects that live as long as the
    process, and each full collection walks them all again: in a fresh ``dpfl account`` process four
    such collections took 0.2-0.3 s of 2 s. A command that imports them before its work calls this
    first; the objects it creates afterwards are collected as usual.
    """
    import gc
    import importlib

    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
