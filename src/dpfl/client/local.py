"""Local training settings and the order in which a client visits its samples.

Both engines call :func:`batch_plan` with the same generator, so they train on the same batches
in the same order. This module imports only torch, :mod:`dpfl.errors` and :mod:`dpfl.client.optim`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from dpfl.client.optim import Adam, LocalOptimizer, Sgd, optimizer_from_config
from dpfl.errors import ConfigError

__all__ = ["Adam", "LocalOptimizer", "LocalTraining", "Sgd", "batch_plan", "check_local_optimizer"]


@dataclass(frozen=True)
class LocalTraining:
    """How a client trains in one round.

    Attributes:
        lr: local learning rate (> 0).
        epochs: passes over the client's data (ignored when ``steps`` is set).
        batch_size: samples per step; ``None`` means full-batch gradient descent (000 Alg. 1).
        steps: exact number of local steps (004's Q); batches continue across reshuffled epochs.
        prox_mu: NbAFL's proximal coefficient μ (003 Alg. 1): adds (μ/2)‖w − w^{t−1}‖².
        per_sample_clip: clip every per-sample gradient of the data loss to this L2 norm before
            averaging (000 Alg. 1; DP-SGD). Gradients of data-independent terms (regularizers)
            are added unclipped: they carry no sample's information.
        final_gradient: also return the gradient of the client's full-data loss at its final
            local weights (004's LUS, eq. 11–15, scores updates by it).
        optimizer: the local optimizer (:mod:`dpfl.client.optim`): plain SGD by default, or SGD
            with momentum / weight decay, or Adam. Its state (momentum buffer, Adam's moments and
            step count) is per client and reset at the start of every round: clients are
            stateless across rounds, and the state never leaves the client.
    """

    lr: float
    epochs: int = 1
    batch_size: int | None = 64
    steps: int | None = None
    prox_mu: float = 0.0
    per_sample_clip: float | None = None
    final_gradient: bool = False
    optimizer: LocalOptimizer = Sgd()

    @classmethod
    def from_config(cls, cfg: Any) -> LocalTraining:
        """The local training a validated ``local:`` config section (``dpfl.config.LocalConfig``)
        describes: lr, epochs, batch size, steps and the optimizer block."""
        return cls(
            lr=cfg.lr,
            epochs=cfg.epochs,
            batch_size=cfg.batch_size,
            steps=cfg.steps,
            optimizer=optimizer_from_config(getattr(cfg, "optimizer", None)),
        )

    def __post_init__(self) -> None:
        if not (isinstance(self.lr, int | float) and self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"`local.lr` must be a positive number. Found {self.lr!r}.")
        if self.epochs < 1:
            raise ConfigError(f"`local.epochs` must be >= 1. Found {self.epochs}.")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"`local.batch_size` must be >= 1 or null (full batch). Found {self.batch_size}.")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"`local.steps` must be >= 1 or null. Found {self.steps}.")
        if self.per_sample_clip is not None and not self.per_sample_clip > 0:
            raise ConfigError(f"`local.per_sample_clip` must be > 0 or null. Found {self.per_sample_clip}.")
        if self.prox_mu < 0:
            raise ConfigError(f"`local.prox_mu` must be >= 0. Found {self.prox_mu}.")
        if not isinstance(self.optimizer, Sgd | Adam):
            raise ConfigError(
                f"`local.optimizer` must be a dpfl.client.optim.Sgd or Adam. Found {self.optimizer!r}."
            )


def check_local_optimizer(algorithm: object, local: LocalTraining) -> None:
    """Refuse a local optimizer the algorithm's privacy analysis does not cover.

    Reads the algorithm's ``local_optimizers`` (the allowed :data:`dpfl.client.optim.OPTIMIZER_KINDS`,
    None = any) and ``local_optimizer_reason`` class attributes.

    Raises:
        ConfigError: naming the algorithm, the optimizer found, what is allowed and why.
    """
    allowed = getattr(algorithm, "local_optimizers", None)
    if allowed is None or local.optimizer.kind in allowed:
        return
    name = getattr(algorithm, "name", type(algorithm).__name__)
    reason = getattr(algorithm, "local_optimizer_reason", "") or "its privacy analysis assumes it"
    raise ConfigError(
        f"{name}: `local.optimizer` must be {' or '.join(sorted(allowed))} ('sgd' is plain SGD: no "
        f"momentum, no weight decay). Found {local.optimizer.describe()}. Why: {reason}."
    )


def batch_plan(num_samples: int, local: LocalTraining, generator: torch.Generator) -> torch.Tensor:
    """Positions (into the client's own samples) visited at each local step.

    Returns:
        LongTensor [S, B]: row s holds the positions of step s; ``-1`` pads a short last batch.
        Each epoch is a fresh permutation drawn from ``generator``; full batch uses no randomness.
    """
    n = int(num_samples)
    if n < 1:
        raise ConfigError(f"a client must hold at least one sample. Found {n}.")
    b = n if local.batch_size is None else min(local.batch_size, n)
    per_epoch = math.ceil(n / b)
    n_steps = local.steps if local.steps is not None else local.epochs * per_epoch
    n_epochs = math.ceil(n_steps / per_epoch)
    rows = []
    for _ in range(n_epochs):
        perm = torch.arange(n) if local.batch_size is None else torch.randperm(n, generator=generator)
        pad = per_epoch * b - n
        if pad:
            perm = torch.cat([perm, torch.full((pad,), -1, dtype=torch.long)])
        rows.append(perm.view(per_epoch, b))
    return torch.cat(rows)[:n_steps]
