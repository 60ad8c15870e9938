"""Per-sample losses, selected by a model's ``loss_kind`` or given as a function.

No reduction and no regularizer here: the engines average (or clip per sample first) and add a
model's ``l2_penalty`` themselves. Both losses accept any number of leading dimensions (cohort,
batch, ...) and are ``torch.func.vmap``/``grad`` friendly (no data-dependent Python branches).

A user's loss is a :data:`LossFn` ``(outputs, targets) -> per-sample losses`` passed where a
``loss_kind`` goes (``LocalProblem(loss_kind=fn)``). It must follow the same rules: one loss per
sample (no reduction over the batch, or per-sample clipping bounds nothing), any leading
dimensions (the vectorized engine calls it on ``[K, B, C]`` outputs and ``[K, B]`` targets), and
only torch operations without data-dependent Python branches (it runs under ``torch.func.vmap``
and ``grad``). Its output shape is checked on every call.

This module imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.models.base`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.models.base import LOSS_KINDS

LossFn = Callable[[Tensor, Tensor], Tensor]
"""A per-sample loss: (outputs [..., C], targets [...]) -> losses [...] (no reduction)."""


def cross_entropy_per_sample(logits: Tensor, targets: Tensor) -> Tensor:
    """``−log softmax(logits)[target]`` for every sample.

    Args:
        logits: ``[..., C]``.
        targets: class indices ``[...]`` (integer dtype), same leading shape as ``logits``.

    Returns:
        Losses of shape ``[...]``.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"cross entropy needs logits [..., C] and targets [...] with the same leading shape. "
            f"Found logits {tuple(logits.shape)} and targets {tuple(targets.shape)}."
        )
    log_probs = torch.log_softmax(logits, dim=-1)
    return -log_probs.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def hinge_per_sample(scores: Tensor, targets: Tensor) -> Tensor:
    """Hinge loss ``max(0, 1 − y·s)`` with ``y = 2·target − 1 ∈ {−1, +1}``.

    This is the data term of the linear SVM of 000 (``000_3304bf6f36c753f8.txt``, eq. 32) read as
    the standard hinge loss; see :func:`dpfl.models.linear.build_svm` for why. The ``(κ/2)‖w‖²``
    term of eq. 32 is added by the engine from the model's ``l2_penalty``.

    Args:
        scores: ``[...]`` or ``[..., 1]``.
        targets: class indices in ``{0, 1}``, shape ``[...]``. Values are not checked (a check
            would need a data-dependent branch, which ``vmap`` forbids).

    Returns:
        Losses of shape ``[...]``.
    """
    if scores.shape != targets.shape and scores.shape != (*targets.shape, 1):
        raise ValueError(
            f"hinge loss needs scores [...] or [..., 1] and targets [...]. "
            f"Found scores {tuple(scores.shape)} and targets {tuple(targets.shape)}."
        )
    if scores.shape != targets.shape:
        scores = scores.squeeze(-1)
    signs = 2.0 * targets.to(scores.dtype) - 1.0
    return torch.clamp(1.0 - signs * scores, min=0.0)


def per_sample_loss(loss_kind: str | LossFn, outputs: Tensor, targets: Tensor) -> Tensor:
    """Per-sample loss of ``outputs`` against ``targets`` (no reduction).

    Args:
        loss_kind: ``"cross_entropy"`` (outputs are logits ``[..., C]``) or ``"hinge"`` (outputs
            are scores ``[...]`` or ``[..., 1]``, targets in ``{0, 1}``); a model's ``loss_kind``;
            or a :data:`LossFn` (see the module docstring).
        outputs: model outputs, with any leading dimensions (e.g. ``[K, B, C]``).
        targets: class indices with the outputs' leading shape (e.g. ``[K, B]``).

    Returns:
        One loss per sample, shape ``targets.shape``.

    Raises:
        ConfigError: unknown ``loss_kind``, or a loss function whose output is not one loss per
            sample.

    >>> per_sample_loss("hinge", torch.tensor([0.5, 0.5]), torch.tensor([1, 0])).tolist()
    [0.5, 1.5]
    """
    if loss_kind == "cross_entropy":
        return cross_entropy_per_sample(outputs, targets)
    if loss_kind == "hinge":
        return hinge_per_sample(outputs, targets)
    if callable(loss_kind):
        losses = loss_kind(outputs, targets)
        if not isinstance(losses, Tensor) or losses.shape != targets.shape:
            found = tuple(losses.shape) if isinstance(losses, Tensor) else type(losses).__name__
            raise ConfigError(
                f"loss function {_name(loss_kind)} must return one loss per sample, shape "
                f"{tuple(targets.shape)} (the targets' shape; no reduction). Found {found}."
            )
        return losses
    raise ConfigError(f"`loss_kind` must be one of {list(LOSS_KINDS)}. Found {loss_kind!r}.")


def check_loss(loss_kind: object) -> None:
    """Raise ConfigError unless ``loss_kind`` is a built-in kind or a callable :data:`LossFn`."""
    if isinstance(loss_kind, str):
        if loss_kind not in LOSS_KINDS:
            raise ConfigError(f"`loss_kind` must be one of {list(LOSS_KINDS)} or a function. Found {loss_kind!r}.")
    elif not callable(loss_kind):
        raise ConfigError(
            f"`loss_kind` must be one of {list(LOSS_KINDS)} or a function (outputs, targets) -> "
            f"per-sample losses. Found {type(loss_kind).__name__}."
        )


def _name(fn: object) -> str:
    return repr(getattr(fn, "__qualname__", None) or type(fn).__name__)
