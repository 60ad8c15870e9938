"""Local training settings and the order in which a client visits its samples.

Both engines call :func:`batch_plan` with the same generator, so they train on the same batches
in the same order. With DP-SGD (:class:`DpSgd`) they call :func:`poisson_batch_plan` instead:
every step includes each of the client's records independently with probability q (Abadi et al.
2016), and :func:`dp_sgd_steps`, :func:`dp_sgd_sample_rate` and :func:`dp_sgd_noise_std` are the
numbers the engines use *and* the algorithm accounts (one function each, so they cannot differ).
This module imports only torch, :mod:`dpfl.errors` and :mod:`dpfl.client.optim`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from dpfl.client.optim import Adam, LocalOptimizer, Sgd, optimizer_from_config
from dpfl.errors import ConfigError

__all__ = ["Adam", "DpSgd", "LocalOptimizer", "LocalTraining", "Sgd", "batch_plan", "check_local_optimizer",
           "dp_sgd_noise_std", "dp_sgd_sample_rate", "dp_sgd_steps", "poisson_batch_plan"]


@dataclass(frozen=True)
class DpSgd:
    """Per-sample DP-SGD inside a client (Abadi et al. 2016, Algorithm 1), with Poisson batches.

    Each local step includes every record of the client independently with probability q,
    clips each included per-sample gradient to ``LocalTraining.per_sample_clip`` C, sums them,
    adds N(0, (z·C)² I) and divides by the *expected* batch size q·|D_k| (a fixed denominator:
    the step is exactly the sampled Gaussian sum query, whatever the realized batch size, an
    empty batch included). The noise is drawn from the client's stream (round, client, "noise"),
    the batches from (round, client, "batch").

    Attributes:
        noise_multiplier: z >= 0 (noise std of the sum over C).
        sample_rate: q in (0, 1]; ``None`` derives q_k = min(1, B/|D_k|) from
            ``LocalTraining.batch_size`` B (so the expected batch is B).
    """

    noise_multiplier: float
    sample_rate: float | None = None

    def __post_init__(self) -> None:
        z = self.noise_multiplier
        if isinstance(z, bool) or not isinstance(z, int | float) or not (math.isfinite(z) and z >= 0):
            raise ConfigError(f"`noise_multiplier` of DP-SGD must be a finite number >= 0. Found {z!r}.")
        q = self.sample_rate
        if q is not None and (isinstance(q, bool) or not isinstance(q, int | float) or not 0 < q <= 1):
            raise ConfigError(f"`record_sample_rate` of DP-SGD must be in (0, 1] or null. Found {q!r}.")


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
        dp_sgd: per-sample DP-SGD with Poisson batches (:class:`DpSgd`; needs
            ``per_sample_clip``); ``None`` = ordinary batches without noise.
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
    dp_sgd: DpSgd | None = None

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
        if self.dp_sgd is not None:
            if not isinstance(self.dp_sgd, DpSgd):
                raise ConfigError(f"`local.dp_sgd` must be a dpfl.client.local.DpSgd or None. Found {self.dp_sgd!r}.")
            if self.per_sample_clip is None:
                raise ConfigError("DP-SGD needs `per_sample_clip` (the clip norm C of every per-sample gradient). "
                                  "Found None.")
            if self.dp_sgd.sample_rate is None and self.batch_size is None:
                raise ConfigError("DP-SGD without `record_sample_rate` derives q = batch_size/|D_k|: set "
                                  "`local.batch_size`. Found batch_size = None.")
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


# --------------------------------------------------------------------------- DP-SGD


def _dp(local: LocalTraining) -> DpSgd:
    if local.dp_sgd is None:
        raise ConfigError("this local training has no DP-SGD settings (`LocalTraining.dp_sgd` is None).")
    return local.dp_sgd


def dp_sgd_sample_rate(num_samples: int, local: LocalTraining) -> float:
    """q_k: the record sampling rate of a client holding ``num_samples`` records.

    ``DpSgd.sample_rate`` if set, else min(1, B/|D_k|) with B = ``local.batch_size``.

    >>> dp_sgd_sample_rate(40, LocalTraining(lr=0.1, batch_size=10, per_sample_clip=1.0, dp_sgd=DpSgd(1.0)))
    0.25
    """
    dp = _dp(local)
    n = int(num_samples)
    if n < 1:
        raise ConfigError(f"a client must hold at least one sample. Found {n}.")
    if dp.sample_rate is not None:
        return float(dp.sample_rate)
    assert local.batch_size is not None  # checked by LocalTraining
    return min(1.0, local.batch_size / n)


def dp_sgd_steps(num_samples: int, local: LocalTraining) -> int:
    """Local DP-SGD steps of a client in one round: ``local.steps`` if set, else
    ``local.epochs`` × ⌈1/q_k⌉ (an epoch is 1/q steps in expectation; with q = B/|D_k| that is
    ⌈|D_k|/B⌉, the batches of an ordinary epoch).

    >>> dp_sgd_steps(45, LocalTraining(lr=0.1, epochs=2, batch_size=10, per_sample_clip=1.0, dp_sgd=DpSgd(1.0)))
    10
    """
    dp = _dp(local)
    n = int(num_samples)
    if local.steps is not None:
        return int(local.steps)
    if dp.sample_rate is None:
        assert local.batch_size is not None
        return local.epochs * math.ceil(n / min(local.batch_size, n))
    # the tolerance keeps 1/q for q = 1/m (m an integer) at m despite rounding
    return local.epochs * max(1, math.ceil(1.0 / dp.sample_rate - 1e-9))


def dp_sgd_noise_std(num_samples: int, local: LocalTraining) -> float:
    """Per-coordinate std of the noise in one DP-SGD step's gradient: z·C/(q_k·|D_k|) (the sum's
    noise N(0, (zC)²) over the fixed denominator q_k|D_k|; Abadi et al. 2016, Algorithm 1)."""
    from dpfl.privacy.calibration import dp_sgd_step_noise_std

    dp = _dp(local)
    assert local.per_sample_clip is not None
    return dp_sgd_step_noise_std(dp.noise_multiplier, float(local.per_sample_clip),
                                 dp_sgd_sample_rate(num_samples, local), int(num_samples))


def poisson_batch_plan(num_samples: int, local: LocalTraining, generator: torch.Generator) -> torch.Tensor:
    """Positions visited at each DP-SGD step: each record independently with probability q_k.

    One ``torch.rand(|D_k|)`` per step from ``generator``; record i is in step s's batch iff its
    draw is below q_k. Same format as :func:`batch_plan`: LongTensor [S, W] (S =
    :func:`dp_sgd_steps`), row s the positions of step s in increasing order, ``-1`` padding,
    W >= 1 (a row of -1 only is an empty batch: the step still happens, with noise only).
    """
    n = int(num_samples)
    q = dp_sgd_sample_rate(n, local)
    steps = dp_sgd_steps(n, local)
    masks = torch.stack([torch.rand(n, generator=generator) < q for _ in range(steps)])
    counts = masks.sum(1)
    width = max(1, int(counts.max()))
    pos = torch.full((steps, width), -1, dtype=torch.long)
    rows, cols = masks.nonzero(as_tuple=True)
    starts = torch.cumsum(counts, 0) - counts
    pos[rows, torch.arange(rows.numel()) - starts[rows]] = cols
    return pos
