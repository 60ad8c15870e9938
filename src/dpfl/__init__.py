"""dpfl: differentially private federated learning with two epsilons per run.

The Python API (``dpfl.train``, ``dpfl.account``, ``dpfl.FederatedData``, results) loads torch
and the accountant on first use, so ``import dpfl`` and ``dpfl --help`` stay fast.
"""

from typing import Any

from dpfl.errors import ConfigError, DataFormatError, DpflError, PrivacyPreconditionError

__version__ = "0.1.0"

_LAZY = {
    "FederatedData": "dpfl.api",
    "TrainResult": "dpfl.api",
    "train": "dpfl.api",
    "account": "dpfl.api",
    "PrivacySummary": "dpfl.rounds.result",
    "RunResult": "dpfl.rounds.result",
    "DryRunResult": "dpfl.rounds.result",
    "RunStore": "dpfl.store",
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
