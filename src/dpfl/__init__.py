"""dpfl: differentially private federated learning with two epsilons per run.

The Python API (``dpfl.train``, ``dpfl.account``, ``dpfl.FederatedData``, ``dpfl.export_model``,
results) loads torch and the accountant on first use. Importing dpfl imports nothing heavy (no
torch, no dp-accounting). It does one thing on the side:
when absl's logging is first imported (dp-accounting logs through it), its ``absl`` logger is set
to ERROR, so the accountant's expected per-order warnings ("failed to converge ... Excluding this
order") do not flood a library user's terminal. Nothing else is changed: the root logger is not
touched, a level the program already gave the ``absl`` logger is kept, and a program running
under ``absl.app`` (absl's handler on the root logger) keeps absl's own verbosity flags. Call
``logging.getLogger("absl").setLevel(logging.WARNING)`` to see the warnings again. absl itself
calls ``logging.basicConfig()`` on its first message if the root logger has no handler; configure
logging before running dpfl (or pass ``force=True``) to keep your own format.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dpfl.errors import ConfigError, DataFormatError, DpflError, PrivacyPreconditionError

if TYPE_CHECKING:  # the names of _LAZY, as type checkers and the API reference (griffe) read them
    from dpfl.api import FederatedData as FederatedData
    from dpfl.api import TrainResult as TrainResult
    from dpfl.api import account as account
    from dpfl.api import train as train
    from dpfl.export import export_model as export_model
    from dpfl.rounds.observers import CsvMetrics as CsvMetrics
    from dpfl.rounds.observers import TensorBoardMetrics as TensorBoardMetrics
    from dpfl.rounds.result import DryRunResult as DryRunResult
    from dpfl.rounds.result import PrivacySummary as PrivacySummary
    from dpfl.rounds.result import RunResult as RunResult
    from dpfl.store import RunStore as RunStore

__version__ = "0.1.0"

_LAZY = {
    "FederatedData": "dpfl.api",
    "TrainResult": "dpfl.api",
    "train": "dpfl.api",
    "account": "dpfl.api",
    "export_model": "dpfl.export",
    "PrivacySummary": "dpfl.rounds.result",
    "RunResult": "dpfl.rounds.result",
    "DryRunResult": "dpfl.rounds.result",
    "RunStore": "dpfl.store",
    "CsvMetrics": "dpfl.rounds.observers",
    "TensorBoardMetrics": "dpfl.rounds.observers",
}

__all__ = [
    "ConfigError",
    "DataFormatError",
    "DpflError",
    "PrivacyPreconditionError",
    "__version__",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpfl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _quiet_absl(absl_logging: ModuleType) -> None:
    """Set the ``absl`` logger to ERROR unless the program chose its level or runs under absl.app."""
    import logging

    if getattr(absl_logging, "_absl_handler", None) in logging.root.handlers:
        return  # absl.app's handler: its --verbosity flags decide
    logger = logging.getLogger("absl")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.ERROR)


class _QuietOnLoad:
    """Loader wrapper: runs absl.logging's own loader, then :func:`_quiet_absl`, then removes
    the finder (its work is done)."""

    def __init__(self, inner: Any, finder: _AbslLoggingFinder) -> None:
        self.inner = inner
        self.finder = finder

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.inner  # the module keeps its real loader (source, reload)
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        _quiet_absl(module)
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)


class _AbslLoggingFinder:
    """A meta path finder that wraps the loader of ``absl.logging`` until that module is loaded
    (no import cost: nothing happens unless and until absl is imported)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "absl.logging":
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietOnLoad(spec.loader, self)
                return spec
        return None


if "absl.logging" in sys.modules:
    _quiet_absl(sys.modules["absl.logging"])
elif not any(isinstance(f, _AbslLoggingFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AbslLoggingFinder())
