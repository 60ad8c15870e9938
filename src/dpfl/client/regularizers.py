"""Terms added to a client's local objective, on parameters with a leading client dimension.

Each term maps (client parameters {name: [K, ...]}, round-start global parameters {name: [...]})
to a per-client value [K]. Used by both engines (the sequential one with K = 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def proximal(mu: float, params: Mapping[str, torch.Tensor], anchor: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(μ/2)‖w − w^{t−1}‖², NbAFL's local objective (003 Alg. 1, line "local training")."""
    total = None
    for name, p in params.items():
        d = (p - anchor[name]).flatten(1).pow(2).sum(1)
        total = d if total is None else total + d
    assert total is not None
    return 0.5 * mu * total


def l2_penalty(kappa: float, params: Mapping[str, torch.Tensor], names: Sequence[str]) -> torch.Tensor:
    """(κ/2)‖w‖² over the named parameters (000 eq. 32, the SVM's regularizer)."""
    total = None
    for name in names:
        d = params[name].flatten(1).pow(2).sum(1)
        total = d if total is None else total + d
    assert total is not None
    return 0.5 * kappa * total
