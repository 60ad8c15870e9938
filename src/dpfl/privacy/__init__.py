"""dpfl.privacy: the ledger on its own, the release types it records, and their certificates.

A program outside dpfl's round loop (a Flower strategy, a user's script) builds a
:class:`PrivacyLedger`, feeds it what each observer saw round by round (:mod:`dpfl.privacy.releases`)
and asks it for certificates::

    from dpfl.privacy import GaussianRelease, PrivacyLedger

    ledger = PrivacyLedger(num_clients=100, sampler={"kind": "poisson", "sample_rate": 0.1}, delta=1e-5)
    for _ in range(50):
        ledger.record([GaussianRelease("public", noise_std=1.2, sensitivity=1.0, amplifiable=True)])
    print(ledger.certify("public").epsilon)

The names load on first use (importing this package imports no accountant).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpfl.privacy.accounting.certify import Certificate
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import (
        OBSERVERS,
        ExactRelease,
        GaussianRelease,
        Observer,
        Release,
        SampledGaussianRelease,
        SkellamRelease,
        TwoPointRelease,
        federated_round_releases,
    )

_WHERE = {
    "PrivacyLedger": "dpfl.privacy.accounting.ledger",
    "Certificate": "dpfl.privacy.accounting.certify",
    **{name: "dpfl.privacy.releases" for name in (
        "OBSERVERS", "ExactRelease", "GaussianRelease", "Observer", "Release", "SampledGaussianRelease",
        "SkellamRelease", "TwoPointRelease", "federated_round_releases")},
}

__all__ = [
    "OBSERVERS",
    "Certificate",
    "ExactRelease",
    "GaussianRelease",
    "Observer",
    "PrivacyLedger",
    "Release",
    "SampledGaussianRelease",
    "SkellamRelease",
    "TwoPointRelease",
    "federated_round_releases",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dpfl.privacy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
