"""A user's loss as PyTorch users write it, checked once when a run is built.

A per-sample loss is usually written for one batch: ``(outputs [B, C], targets [B]) -> [B]``, e.g.
``lambda out, y: F.cross_entropy(out, y, reduction="none")``. The vectorized engine calls the loss
on a whole cohort at once (``[K, B, C]`` outputs, ``[K, B]`` targets), and per-sample clipping
calls it on one sample at a time under ``torch.func.vmap``. :func:`adapt_loss` probes the user's
function once, on the model's outputs for a few training samples, and returns what the engines
call:

* the function itself when it already gives, on a stacked ``[K, B, C]`` batch, the losses it
  gives on each ``[B, C]`` slice (it handles leading dimensions itself);
* else :class:`FlattenedLoss`, which calls it on ``[K·B, C]`` and reshapes the ``[K·B]`` result
  to ``[K, B]`` — a per-sample loss does not care which client a sample belongs to.

What cannot be a per-sample loss is refused at build time, in one line saying what shape was
expected and what came back: a scalar (``reduction="mean"``), any other shape, a value that is
not a tensor, a loss that fails on the model's outputs, one whose value for a sample changes
with the rest of the batch, and one that does not depend differentiably on the outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from dpfl.errors import ConfigError

LossFn = Callable[[Tensor, Tensor], Tensor]

_RTOL, _ATOL = 1e-4, 1e-5  # float32 losses of the same samples computed in another batch layout


def loss_name(fn: Any) -> str:
    """The name a loss is called by in messages (``module.qualname``, or its class for objects)."""
    qual = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{getattr(fn, '__module__', None) or type(fn).__module__}.{qual}"


class FlattenedLoss:
    """A ``[B, C] -> [B]`` loss applied to any leading dimensions: outputs ``[*lead, *rest]`` and
    targets ``[*lead]`` become ``[N, *rest]`` and ``[N]`` (N = prod(lead)), the ``[N]`` losses
    are reshaped to ``lead``. Plain reshapes: works inside ``torch.func.vmap`` and ``grad``."""

    def __init__(self, fn: LossFn) -> None:
        self.fn = fn
        self.__qualname__ = loss_name(fn)  # messages name the user's function, not this wrapper

    def __call__(self, outputs: Tensor, targets: Tensor) -> Tensor:
        lead = targets.shape
        flat_out = outputs.reshape(-1, *outputs.shape[len(lead):])
        losses = self.fn(flat_out, targets.reshape(-1))
        if not isinstance(losses, Tensor) or losses.shape != (flat_out.shape[0],):
            return losses  # per_sample_loss names the function and the shape it returned
        return losses.reshape(lead)

    def __repr__(self) -> str:
        return f"FlattenedLoss({self.__qualname__})"


def _shape(value: Any) -> str:
    if not isinstance(value, Tensor):
        return f"a {type(value).__name__}, not a tensor"
    if value.dim() == 0:
        return "a scalar (shape ()): a reduced loss; pass reduction='none'"
    return f"shape {tuple(value.shape)}"


def _call(fn: LossFn, outputs: Tensor, targets: Tensor) -> Any:
    try:
        return fn(outputs, targets)
    except Exception as err:  # noqa: BLE001 - any failure of user code: said with the shapes
        return err


def adapt_loss(fn: LossFn, outputs: Tensor, targets: Tensor) -> LossFn:
    """The callable the engines use for the user's per-sample loss ``fn`` (see the module docstring).

    Args:
        fn: the user's loss ``(outputs, targets) -> one loss per sample``.
        outputs: the model's outputs for a few training samples, ``[B, ...]`` (B ≥ 1).
        targets: those samples' labels ``[B]``.

    Raises:
        ConfigError: one line naming the loss, the shapes it was given, the shape expected and
            what it returned.
    """
    if not callable(fn):
        raise ConfigError("`loss` must be a function (outputs, targets) -> per-sample losses. "
                          f"Found {type(fn).__name__}.")
    name = loss_name(fn)
    out = outputs.detach().clone().requires_grad_(outputs.is_floating_point())
    y = targets.detach()
    b = int(y.shape[0])
    given = f"outputs {tuple(out.shape)} and targets {tuple(y.shape)}"
    expect = f"one loss per sample, shape ({b},)"
    got = _call(fn, out, y)
    if isinstance(got, Exception):
        raise ConfigError(f"loss {name} fails on {given} (a batch of {b} of this model's outputs): "
                          f"{type(got).__name__}: {str(got).splitlines()[0] if str(got) else ''}")
    if not isinstance(got, Tensor) or tuple(got.shape) != (b,):
        raise ConfigError(f"loss {name} must return {expect} for {given}; it returned {_shape(got)}.")
    if out.requires_grad and not got.requires_grad:
        raise ConfigError(f"loss {name} does not depend differentiably on the outputs (no gradient flows "
                          f"from its result to {given}): nothing would train.")
    with torch.no_grad():
        ref = got.detach()
        if not torch.isfinite(ref).all():
            raise ConfigError(f"loss {name} returns non-finite values {ref.tolist()} for {given} of the "
                              "initial model.")
        if b > 1:
            alone = [_call(fn, out[i : i + 1].detach(), y[i : i + 1]) for i in range(b)]
            if any(isinstance(a, Exception) or not isinstance(a, Tensor) or tuple(a.shape) != (1,) for a in alone):
                bad = next(a for a in alone if isinstance(a, Exception) or not isinstance(a, Tensor)
                           or tuple(a.shape) != (1,))
                what = f"{type(bad).__name__}: {bad}" if isinstance(bad, Exception) else _shape(bad)
                raise ConfigError(f"loss {name} must return shape (1,) for a batch of one sample "
                                  f"(outputs {tuple(out[:1].shape)}); it returned {what}.")
            single = torch.cat([a.detach().reshape(1) for a in alone])
            if not torch.allclose(single, ref, rtol=_RTOL, atol=_ATOL):
                i = int((single - ref).abs().argmax())
                raise ConfigError(f"loss {name} is not per-sample: sample {i}'s loss is {float(ref[i]):.6g} in a "
                                  f"batch of {b} but {float(single[i]):.6g} alone (it must not depend on the rest "
                                  "of the batch, or per-sample clipping and averaging bound nothing).")
        # two clients of B samples: the second holds the same samples in another order
        perm = torch.roll(torch.arange(b), 1) if b > 1 else torch.arange(b)
        stacked_out = torch.stack([out.detach(), out.detach()[perm]])
        stacked_y = torch.stack([y, y[perm]])
        want = torch.stack([ref, ref[perm]])
        native = _call(fn, stacked_out, stacked_y)
    chosen: LossFn
    if (isinstance(native, Tensor) and tuple(native.shape) == tuple(want.shape)
            and torch.allclose(native.detach(), want, rtol=_RTOL, atol=_ATOL)):
        chosen = fn
    else:
        chosen = FlattenedLoss(fn)
        with torch.no_grad():
            flat = _call(chosen, stacked_out, stacked_y)
        if not isinstance(flat, Tensor) or tuple(flat.shape) != tuple(want.shape) or \
                not torch.allclose(flat, want, rtol=_RTOL, atol=_ATOL):
            what = f"{type(flat).__name__}: {flat}" if isinstance(flat, Exception) else _shape(flat)
            raise ConfigError(f"loss {name} gives other losses for the same samples in a batch of {2 * b} "
                              f"(outputs {(2 * b, *tuple(out.shape[1:]))}): {what}.")
    return chosen


def check_loss_per_sample_grads(fn: LossFn | str, outputs: Tensor, targets: Tensor) -> None:
    """The loss's gradient one sample at a time under ``torch.func.vmap``, as per-sample clipping
    takes it (a built-in loss kind passes).

    Raises:
        ConfigError: the loss fails there, with the reason and what to change.
    """
    from torch.func import grad, vmap

    if isinstance(fn, str):
        return
    call: LossFn = fn
    name = loss_name(getattr(fn, "fn", fn))
    outputs, targets = outputs.detach(), targets.detach()

    def one(o: Tensor, t: Tensor) -> Tensor:
        return call(o.unsqueeze(0), t.unsqueeze(0)).sum()

    try:
        vmap(grad(one))(outputs, targets)
    except Exception as err:  # noqa: BLE001 - said with the reason
        raise ConfigError(f"loss {name} cannot run under torch.func.vmap(grad(...)), which per-sample clipping "
                          f"needs: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''} "
                          "(use torch operations only, no Python branches on tensor values, no .item()).") from None
