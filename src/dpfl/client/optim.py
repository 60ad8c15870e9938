"""Local optimizers for a cohort: SGD (with momentum and weight decay) and Adam, on stacked
parameters.

Both engines step with the same code: the vectorized engine on parameters with a leading client
dimension [K, ...], the sequential engine on one client's parameters. Every optimizer state (a
momentum buffer, Adam's two moments and its step count) is per client, because each row of a
stacked tensor is one client's. A client whose local steps have run out (``active`` false) keeps
its parameters *and* its state: a zero gradient is not a no-op for momentum or Adam.

Clients are stateless across rounds: the state is created at the start of every round's local
training (zero buffers, step 0) and dropped at its end. Nothing of it is uploaded, so it carries
no privacy cost; but an optimizer changes the local step, and with it any sensitivity argument
that assumes a plain gradient step (see ``Algorithm.local_optimizers``).

The update rules are those of ``torch.optim.SGD`` (dampening 0, no Nesterov) and
``torch.optim.Adam`` (L2 weight decay added to the gradient, no AMSGrad), written out on
tensors so that a cohort steps in a handful of batched calls:

* SGD: g ← ∇ + λw; b ← μb + g (b₀ = 0, so b₁ = g); w ← w − η·(μ > 0 ? b : g).
* Adam: g ← ∇ + λw; m ← m + (1 − β₁)(g − m); v ← β₂v + (1 − β₂)g²;
  w ← w − (η / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε).

Plain SGD (no momentum, no weight decay) is not run through this module: the engines keep their
in-place step (bit for bit what they computed before optimizers existed).

This module imports only torch and :mod:`dpfl.errors`.

References:
    Kingma & Ba 2015 (Adam, Algorithm 1); PyTorch's documented update rules of
    ``torch.optim.SGD`` and ``torch.optim.Adam``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from dpfl.errors import ConfigError

OPTIMIZER_KINDS: tuple[str, ...] = (
    "sgd",
    "sgd+momentum",
    "sgd+weight_decay",
    "sgd+momentum+weight_decay",
    "adam",
)
"""What :attr:`Sgd.kind` / :attr:`Adam.kind` can be: ``"sgd"`` is plain SGD only."""


def _finite(name: str, value: object, *, low: float, low_open: bool = False, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"`{name}` must be a finite number. Found {value!r}.")
    v = float(value)
    bad_low = v <= low if low_open else v < low
    bad_high = high is not None and v >= high
    if bad_low or bad_high:
        lo = f"> {low:g}" if low_open else f">= {low:g}"
        hi = f" and < {high:g}" if high is not None else ""
        raise ConfigError(f"`{name}` must be {lo}{hi}. Found {value!r}.")
    return v


@dataclass(frozen=True)
class Sgd:
    """SGD as ``torch.optim.SGD(lr, momentum, weight_decay)`` (dampening 0, no Nesterov).

    Attributes:
        momentum: μ in [0, 1); 0 = no momentum buffer.
        weight_decay: λ >= 0, added as λw to the gradient (an L2 term (λ/2)‖w‖² in the objective).
    """

    momentum: float = 0.0
    weight_decay: float = 0.0
    name: ClassVar[Literal["sgd"]] = "sgd"

    def __post_init__(self) -> None:
        _finite("local.optimizer.momentum", self.momentum, low=0.0, high=1.0)
        _finite("local.optimizer.weight_decay", self.weight_decay, low=0.0)

    @property
    def plain(self) -> bool:
        """Plain SGD: w ← w − η∇ (no momentum, no weight decay)."""
        return self.momentum == 0 and self.weight_decay == 0

    @property
    def kind(self) -> str:
        """One of :data:`OPTIMIZER_KINDS` (what an algorithm's ``local_optimizers`` lists)."""
        parts = ["sgd"]
        if self.momentum:
            parts.append("momentum")
        if self.weight_decay:
            parts.append("weight_decay")
        return "+".join(parts)

    def describe(self) -> str:
        return f"sgd (momentum {self.momentum:g}, weight_decay {self.weight_decay:g})"


@dataclass(frozen=True)
class Adam:
    """Adam as ``torch.optim.Adam(lr, betas, eps, weight_decay)`` (L2 decay, no AMSGrad).

    Attributes:
        betas: (β₁, β₂), each in [0, 1).
        eps: ε > 0 added to the denominator.
        weight_decay: λ >= 0, added as λw to the gradient (not decoupled as in AdamW).
    """

    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    name: ClassVar[Literal["adam"]] = "adam"

    def __post_init__(self) -> None:
        if not isinstance(self.betas, tuple | list) or len(self.betas) != 2:
            raise ConfigError(f"`local.optimizer.betas` must be two numbers [beta1, beta2]. Found {self.betas!r}.")
        b1 = _finite("local.optimizer.betas[0]", self.betas[0], low=0.0, high=1.0)
        b2 = _finite("local.optimizer.betas[1]", self.betas[1], low=0.0, high=1.0)
        object.__setattr__(self, "betas", (b1, b2))
        _finite("local.optimizer.eps", self.eps, low=0.0, low_open=True)
        _finite("local.optimizer.weight_decay", self.weight_decay, low=0.0)

    plain: ClassVar[bool] = False
    kind: ClassVar[str] = "adam"

    def describe(self) -> str:
        return (f"adam (betas [{self.betas[0]:g}, {self.betas[1]:g}], eps {self.eps:g}, "
                f"weight_decay {self.weight_decay:g})")


LocalOptimizer = Sgd | Adam
"""The local optimizer of :class:`dpfl.client.local.LocalTraining`."""


def optimizer_from_config(cfg: Any) -> LocalOptimizer:
    """The optimizer a validated ``local.optimizer`` config block describes (duck-typed: any
    object with ``name`` and the optimizer's fields)."""
    if cfg is None:
        return Sgd()
    name = getattr(cfg, "name", None)
    if name == "sgd":
        return Sgd(momentum=float(cfg.momentum), weight_decay=float(cfg.weight_decay))
    if name == "adam":
        return Adam(betas=(float(cfg.betas[0]), float(cfg.betas[1])), eps=float(cfg.eps),
                    weight_decay=float(cfg.weight_decay))
    raise ConfigError(f"`local.optimizer.name` must be one of ['adam', 'sgd']. Found {name!r}.")


class OptimizerState:
    """One round's optimizer state for a list of parameter tensors, stepped in place.

    Args:
        optimizer: the optimizer's settings.
        params: the tensors being trained (leaf tensors updated in place), each [K, ...] in the
            vectorized engine or one client's tensor in the sequential engine.
        lr: η.
    """

    def __init__(self, optimizer: LocalOptimizer, params: Sequence[torch.Tensor], lr: float) -> None:
        self.optimizer = optimizer
        self.params = list(params)
        self.lr = float(lr)
        self.step_count = 0
        zeros = [torch.zeros_like(p, memory_format=torch.preserve_format).detach() for p in self.params]
        if isinstance(optimizer, Adam):
            self.exp_avg = zeros
            self.exp_avg_sq = [torch.zeros_like(z) for z in zeros]
        else:
            self.momentum_buffer = zeros if optimizer.momentum else []

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor], active: torch.Tensor | None = None) -> None:
        """Apply one step with ``grads`` (same shapes as the parameters).

        Args:
            grads: ∂loss/∂param for every parameter.
            active: [K] booleans, the clients taking this step (leading dimension of every
                parameter); None = every row (or an unstacked single client). Inactive rows keep
                their parameters and state. Adam's bias correction counts calls to ``step``, so a
                row must be active on a prefix of the calls — as in the engines, where a client's
                steps come first and padding after.
        """
        self.step_count += 1
        opt = self.optimizer
        for i, (p, g) in enumerate(zip(self.params, grads, strict=True)):
            keep = None if active is None else active.view(-1, *([1] * (p.dim() - 1)))
            if opt.weight_decay:
                g = g.add(p, alpha=opt.weight_decay)
            if isinstance(opt, Adam):
                b1, b2 = opt.betas
                m, v = self.exp_avg[i], self.exp_avg_sq[i]
                m_new = m.lerp(g, 1 - b1)
                v_new = v.mul(b2).addcmul_(g, g, value=1 - b2)
                bc1 = 1 - b1**self.step_count
                bc2_sqrt = math.sqrt(1 - b2**self.step_count)
                denom = (v_new.sqrt() / bc2_sqrt).add_(opt.eps)
                p_new = p.addcdiv(m_new, denom, value=-self.lr / bc1)
                _assign(m, m_new, keep)
                _assign(v, v_new, keep)
                _assign(p, p_new, keep)
            else:
                if opt.momentum:
                    buf = self.momentum_buffer[i]
                    buf_new = buf.mul(opt.momentum).add_(g)
                    _assign(buf, buf_new, keep)
                    g = buf_new
                _assign(p, p.add(g, alpha=-self.lr), keep)


def _assign(target: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None) -> None:
    """target ← value on the rows where ``keep`` is true (all rows when ``keep`` is None)."""
    if keep is None:
        target.copy_(value)
    else:
        target.copy_(torch.where(keep, value, target))
