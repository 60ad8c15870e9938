"""Cohort forward pass: one model evaluated for K clients at once, each with its own parameters.

Parameters are stacked along a leading client dimension ([K, ...]) and inputs are [K, B, ...].
Common layers get batched-over-clients kernels that run as one large matrix operation:
``nn.Linear`` → ``torch.baddbmm``; ``nn.Conv2d`` → a grouped convolution over K·C channels;
``nn.GroupNorm`` → a normalization over K·B samples with per-client affine parameters;
parameter-free layers (activations, pooling, flatten, dropout in eval) → applied to the merged
[K·B, ...] batch. Any other module falls back to ``torch.func.vmap(functional_call)`` over the
client dimension, so every model that works with ``functional_call`` works here.

This module imports only torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

_ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LeakyReLU, nn.ELU, nn.Identity, nn.Softplus)
_MERGE_BATCH = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.MaxPool1d, nn.AvgPool1d)


def _sub(params: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    if not prefix:
        return params
    n = len(prefix) + 1
    return {k[n:]: v for k, v in params.items() if k.startswith(prefix + ".")}


def _merge(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    k, b = x.shape[:2]
    y = fn(x.reshape(k * b, *x.shape[2:]))
    return y.reshape(k, b, *y.shape[1:])


class _FusedSGDLinear(torch.autograd.Function):
    """Cohort linear layer whose backward pass *is* the SGD step of its own parameters.

    Forward: y = x Wᵀ + b for each client. Backward: the input gradient g W is computed with the
    pre-step weights, then W ← W − lr·gᵀx and b ← b − lr·Σ_batch g are applied in place with one
    ``baddbmm_`` — the weight gradient is never materialized, which halves the memory traffic of
    the largest tensors and lets the matmul run at full speed. ``token`` is a scalar that requires
    grad so the backward runs even for the first layer, whose input needs no gradient.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, lr, token):  # type: ignore[no-untyped-def]
        # The weights are views of one cohort matrix that shares a version counter: the in-place
        # step of one layer would trip autograd's check on another's saved weights, so they are
        # kept on ctx (each layer reads its own weights before updating them).
        ctx.save_for_backward(x)
        ctx.weight = weight
        ctx.bias = bias
        ctx.lr = lr
        if bias is not None:
            return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
        return torch.bmm(x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[no-untyped-def]
        (x,) = ctx.saved_tensors
        weight = ctx.weight
        grad_x = torch.bmm(grad_out, weight) if ctx.needs_input_grad[0] else None
        with torch.no_grad():
            weight.baddbmm_(grad_out.transpose(1, 2), x, alpha=-ctx.lr)
            if ctx.bias is not None:
                ctx.bias.sub_(grad_out.sum(1), alpha=ctx.lr)
        return grad_x, None, None, None, torch.zeros((), dtype=grad_out.dtype)


def _linear(
    m: nn.Linear,
    p: dict[str, torch.Tensor],
    x: torch.Tensor,
    fused: tuple[float, torch.Tensor] | None = None,
    capture: tuple[str, list[tuple[str, torch.Tensor, torch.Tensor]]] | None = None,
) -> torch.Tensor:
    weight = p["weight"]  # [K, out, in]
    shape = x.shape
    x3 = x.reshape(shape[0], -1, shape[-1])  # [K, B*, in]
    if capture is not None:
        prefix, records = capture
        w, b = weight.detach(), p["bias"].detach() if "bias" in p else None
        z = torch.bmm(x3, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), x3, w.transpose(1, 2))
        if not z.requires_grad:
            z.requires_grad_(True)
        records.append((prefix, x3.detach(), z))
        return z.reshape(*shape[:-1], weight.shape[1])
    if fused is not None:
        lr, token = fused
        y = _FusedSGDLinear.apply(x3, weight, p.get("bias"), lr, token)
        return y.reshape(*shape[:-1], weight.shape[1])
    if "bias" in p:
        y = torch.baddbmm(p["bias"].unsqueeze(1), x3, weight.transpose(1, 2))
    else:
        y = torch.bmm(x3, weight.transpose(1, 2))
    return y.reshape(*shape[:-1], weight.shape[1])


def _conv2d(m: nn.Conv2d, p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Zero-padded numeric-padding convolutions only (the caller sends others to the fallback)."""
    weight = p["weight"]  # [K, O, C/g, kh, kw]
    k, b, c, h, w = x.shape
    xk = x.transpose(0, 1).reshape(b, k * c, h, w)
    wk = weight.reshape(k * weight.shape[1], *weight.shape[2:])
    bias = p["bias"].reshape(-1) if "bias" in p else None
    y = F.conv2d(xk, wk, bias, m.stride, m.padding, m.dilation, m.groups * k)
    return y.reshape(b, k, weight.shape[1], *y.shape[2:]).transpose(0, 1)


def _group_norm(m: nn.GroupNorm, p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    k, b = x.shape[:2]
    y = F.group_norm(x.reshape(k * b, *x.shape[2:]), m.num_groups, None, None, m.eps)
    y = y.reshape(x.shape)
    if m.affine:
        extra = (1,) * (x.dim() - 3)
        y = y * p["weight"].view(k, 1, -1, *extra) + p["bias"].view(k, 1, -1, *extra)
    return y


class CohortForward:
    """Evaluates ``module`` for a cohort: ``forward(params [K, ...], x [K, B, ...]) -> [K, B, ...]``.

    Args:
        module: a model built from standard layers; its own parameters are not used.
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self._fused: tuple[float, torch.Tensor] | None = None
        self._capture: list[tuple[str, torch.Tensor, torch.Tensor]] | None = None

    def __call__(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        fused_sgd: tuple[float, torch.Tensor] | None = None,
        capture: list[tuple[str, torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Cohort forward.

        With ``fused_sgd=(lr, token)``, every ``nn.Linear`` takes its SGD step inside the
        backward pass (see :class:`_FusedSGDLinear`); its parameters then must not be
        differentiated by the caller. With ``capture=[]``, every ``nn.Linear`` appends
        (parameter prefix, input [K, B, in], output [K, B, out]) to the list, its output being
        differentiable while its parameters are treated as constants (per-sample norms,
        :mod:`dpfl.sim.per_sample`).
        """
        self._fused = fused_sgd
        self._capture = capture
        try:
            return self._run(self.module, "", params, x)
        finally:
            self._fused = None
            self._capture = None

    def fusable_params(self) -> set[str]:
        """Names of the parameters that ``fused_sgd`` updates in place (those of ``nn.Linear``
        layers reached through ``nn.Sequential`` containers)."""
        names: set[str] = set()

        def walk(m: nn.Module, prefix: str) -> None:
            if isinstance(m, nn.Sequential):
                for n, c in m.named_children():
                    walk(c, f"{prefix}.{n}" if prefix else n)
            elif isinstance(m, nn.Linear):
                names.update(f"{prefix}.{n}" if prefix else n for n, _ in m.named_parameters())

        walk(self.module, "")
        return names

    def _run(self, m: nn.Module, prefix: str, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        p = _sub(params, prefix)
        if isinstance(m, nn.Sequential):
            for name, child in m.named_children():
                x = self._run(child, f"{prefix}.{name}" if prefix else name, params, x)
            return x
        if isinstance(m, nn.Linear):
            cap = (prefix, self._capture) if self._capture is not None else None
            return _linear(m, p, x, self._fused, cap)
        if isinstance(m, nn.Conv2d) and m.padding_mode == "zeros" and not isinstance(m.padding, str):
            return _conv2d(m, p, x)
        if isinstance(m, nn.GroupNorm):
            return _group_norm(m, p, x)
        if isinstance(m, nn.Flatten):
            start = m.start_dim + 1 if m.start_dim >= 0 else m.start_dim
            end = m.end_dim + 1 if m.end_dim >= 0 else m.end_dim
            return x.flatten(start, end)
        if isinstance(m, _ELEMENTWISE) or (isinstance(m, nn.Dropout) and not m.training):
            return m(x)
        if isinstance(m, _MERGE_BATCH):
            return _merge(x, m)
        return self._fallback(m, p, x)

    @staticmethod
    def _fallback(m: nn.Module, p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        buffers = dict(m.named_buffers())

        def one(pk: dict[str, torch.Tensor], xk: torch.Tensor) -> torch.Tensor:
            return functional_call(m, ({**pk, **buffers}), (xk,))

        return vmap(one)(p, x)


# --------------------------------------------------------------------------- plain-SGD kernel

_POOL_2D = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)
_Op = tuple[str, Any, str]
"""A step of :class:`SGDKernel`: (kind, the layer or None, its parameters' name prefix)."""


class SGDKernel:
    """Plain-SGD local steps of a few clients at once, the backward pass written out layer by
    layer, each layer's parameters stepped in place as soon as its gradient is known.

    For ``nn.Sequential`` models (nested Sequentials included) made of ``nn.Linear``, ``nn.Conv2d``
    (numeric zero padding), ``nn.ReLU``, ``nn.Flatten`` and the parameter-free layers
    :class:`CohortForward` merges or applies elementwise (pooling, other activations, dropout in
    eval mode); :meth:`build` returns None for any other model.

    A step of clients ``[c, ...]`` (rows of stacked parameters, each a contiguous ``[c, ...]``
    tensor, updated in place) on a batch ``[c, B, ...]``: the forward pass keeps what each layer's
    backward needs; the caller's ``loss_grad`` gives each client's loss and the gradient at the
    output; the backward pass then visits the layers in reverse, computing the gradient at a
    layer's input with the layer's pre-step weights and stepping the weights right after:

    * ``nn.Linear``: W ← W − η gᵀx and b ← b − η Σ_batch g as one ``baddbmm_`` per layer — the
      weight gradient is never materialized (as :class:`_FusedSGDLinear`);
    * ``nn.Conv2d``: the grouped convolution of :class:`CohortForward` (groups × c) and its
      ``convolution_backward``, then W ← W − η ∇W. Between convolutions the activations stay in
      that grouped layout ``[B, c·C, H, W]``, channels last (on the 2-core reference machine,
      cnn2's second convolution: forward 2.3×, backward 1.1–1.6× faster than channels first,
      its max-pooling 14×); 2-D pooling and activations apply to it as they are (they act per
      channel), anything else gets the ``[c, B, C, H, W]`` layout back. A ReLU followed by
      max-pooling runs after it, on the pooled tensor (the same values and gradients);
    * ``nn.ReLU``: the gradient zeroed where the output is not positive (autograd's
      ``threshold_backward``); other parameter-free layers: autograd on that layer alone.

    These are the kernels autograd runs for the same forward pass, so a step gives the numbers of
    the autograd path up to the float order of the kernels. No autograd graph spans the model and
    nothing is shared between calls: calls on disjoint rows may run in parallel threads.
    """

    def __init__(self, ops: list[_Op]) -> None:
        self.ops = ops
        # the gradient at a layer's input is needed only if some parameter lies before it
        self.first_param_op = next(i for i, op in enumerate(ops) if op[0] in ("linear", "conv"))

    @classmethod
    def build(cls, module: nn.Module) -> SGDKernel | None:
        layers: list[_Op] = []

        def walk(m: nn.Module, prefix: str) -> bool:
            if isinstance(m, nn.Sequential):
                return all(walk(c, f"{prefix}.{n}" if prefix else n) for n, c in m.named_children())
            if isinstance(m, nn.Linear):
                layers.append(("linear", m, prefix))
                return True
            if isinstance(m, nn.Conv2d) and m.padding_mode == "zeros" and not isinstance(m.padding, str):
                layers.append(("conv", m, prefix))
                return True
            if any(True for _ in m.parameters()) or any(True for _ in m.buffers()):
                return False
            if isinstance(m, nn.ReLU):
                layers.append(("relu", m, prefix))
            elif isinstance(m, nn.Flatten):
                layers.append(("flatten", m, prefix))
            elif isinstance(m, nn.Identity) or (isinstance(m, nn.Dropout) and not m.training):
                pass
            elif isinstance(m, _ELEMENTWISE):
                layers.append(("layer", m, prefix))
            elif isinstance(m, _MERGE_BATCH) and not getattr(m, "return_indices", False):
                layers.append(("merge", m, prefix))
            else:
                return False
            return True

        if not walk(module, "") or not any(kind in ("linear", "conv") for kind, _, _ in layers):
            return None
        # ReLU then max-pooling = max-pooling then ReLU, exactly, and so are the gradients (the
        # window's first maximum gets the gradient when it is positive, nothing gets it when it is
        # not): the ReLU runs on the pooled, smaller tensor
        for i in range(len(layers) - 1):
            if layers[i][0] == "relu" and layers[i + 1][0] == "merge" and isinstance(layers[i + 1][1], nn.MaxPool2d):
                layers[i], layers[i + 1] = layers[i + 1], layers[i]
        ops: list[_Op] = []
        grouped = False
        for kind, m, prefix in layers:
            if kind == "conv" and not grouped:
                ops.append(("to_grouped", None, ""))
                grouped = True
            elif grouped and kind == "merge" and isinstance(m, _POOL_2D):
                kind = "layer"  # per channel: applies to the grouped layout as it is
            elif grouped and kind not in ("conv", "relu", "layer"):
                ops.append(("to_cohort", None, ""))
                grouped = False
            ops.append((kind, m, prefix))
        if grouped:
            ops.append(("to_cohort", None, ""))
        return cls(ops)

    def step(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        loss_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
        lr: float,
    ) -> torch.Tensor:
        """One SGD step of the clients of ``params`` ({name: [c, ...]}, stepped in place) on the
        batch ``x`` [c, B, ...]; ``loss_grad(outputs)`` returns (loss [c], ∂Σloss/∂outputs).
        Returns the loss [c]."""
        k = x.shape[0]
        saved: list[Any] = []
        h = x
        with torch.no_grad():
            for kind, m, prefix in self.ops:
                if kind == "linear":
                    saved.append(h)
                    h = _linear(m, _sub(params, prefix), h)
                elif kind == "conv":
                    saved.append(h)
                    h = _grouped_conv2d(m, _sub(params, prefix), h, k)
                elif kind == "relu":
                    h = torch.relu(h)
                    saved.append(h)
                elif kind == "to_grouped":  # [c, B, C, H, W] -> [B, c·C, H, W], channels last
                    saved.append(h.shape)
                    h = _channels_last(h.transpose(0, 1).reshape(h.shape[1], -1, *h.shape[3:]))
                elif kind == "to_cohort":  # [B, c·C, H, W] -> [c, B, C, H, W]
                    saved.append(None)
                    h = h.reshape(h.shape[0], k, -1, *h.shape[2:]).transpose(0, 1)
                elif kind == "flatten":
                    saved.append(h.shape)
                    start = m.start_dim + 1 if m.start_dim >= 0 else m.start_dim
                    end = m.end_dim + 1 if m.end_dim >= 0 else m.end_dim
                    h = h.flatten(start, end)
                else:  # "layer" (elementwise, or pooling the grouped layout) or "merge": autograd on it alone
                    with torch.enable_grad():
                        inp = h.detach().requires_grad_(True)
                        out = _merge(inp, m) if kind == "merge" else m(inp)
                    saved.append((inp, out))
                    h = out.detach()
        loss, g = loss_grad(h)
        with torch.no_grad():
            for i in range(len(self.ops) - 1, self.first_param_op - 1, -1):
                kind, m, prefix = self.ops[i]
                s = saved[i]
                need_input = i > self.first_param_op
                if kind in ("linear", "conv"):
                    p = _sub(params, prefix)
                    if kind == "linear":
                        grad_in = _linear_sgd(p, s, g, lr, need_input)
                    else:
                        grad_in = _grouped_conv2d_sgd(m, p, s, g, lr, k, need_input)
                    if grad_in is None:  # the first layer with parameters: done
                        break
                    g = grad_in
                elif kind == "relu":
                    g = torch.ops.aten.threshold_backward(g, s, 0)
                elif kind == "to_grouped":
                    g = g.reshape(g.shape[0], k, -1, *g.shape[2:]).transpose(0, 1)
                elif kind == "to_cohort":
                    g = _channels_last(g.transpose(0, 1).reshape(g.shape[1], -1, *g.shape[3:]))
                elif kind == "flatten":
                    g = g.reshape(s)
                else:
                    inp, out = s
                    (g,) = torch.autograd.grad(out, [inp], g)
        return loss


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` [B, C, H, W] with channels-last strides — explicitly, also where a dimension of size 1
    makes the format ambiguous (``contiguous(memory_format=...)`` keeps such a tensor as it is, and
    a convolution then runs channels first)."""
    b, c, h, w = t.shape
    if t.stride() == (h * w * c, 1, w * c, c):
        return t
    return torch.empty(t.shape, dtype=t.dtype, device=t.device, memory_format=torch.channels_last).copy_(t)


def _linear_sgd(p: dict[str, torch.Tensor], x: torch.Tensor, g: torch.Tensor, lr: float,
                need_input: bool) -> torch.Tensor | None:
    """The input gradient of a cohort ``nn.Linear`` (pre-step weights) and its SGD step in place."""
    weight = p["weight"]
    x3 = x.reshape(x.shape[0], -1, x.shape[-1])
    g3 = g.reshape(g.shape[0], -1, g.shape[-1])
    grad_x = torch.bmm(g3, weight).reshape(x.shape) if need_input else None
    weight.baddbmm_(g3.transpose(1, 2), x3, alpha=-lr)
    if "bias" in p:
        p["bias"].sub_(g3.sum(1), alpha=lr)
    return grad_x


def _grouped_conv2d(m: nn.Conv2d, p: dict[str, torch.Tensor], x: torch.Tensor, k: int) -> torch.Tensor:
    """``nn.Conv2d`` of k clients on the grouped layout ``[B, k·C, H, W]``."""
    weight = p["weight"]  # [k, O, C/g, kh, kw]
    bias = p["bias"].reshape(-1) if "bias" in p else None
    return F.conv2d(x, weight.reshape(-1, *weight.shape[2:]), bias, m.stride, m.padding, m.dilation, m.groups * k)


def _grouped_conv2d_sgd(m: nn.Conv2d, p: dict[str, torch.Tensor], x: torch.Tensor, g: torch.Tensor, lr: float,
                        k: int, need_input: bool) -> torch.Tensor | None:
    """The input gradient of :func:`_grouped_conv2d` (pre-step weights) and its SGD step in place."""
    weight = p["weight"]
    wk = weight.reshape(-1, *weight.shape[2:])
    has_bias = "bias" in p
    grad_x, grad_w, grad_b = torch.ops.aten.convolution_backward(
        g, x, wk, [wk.shape[0]] if has_bias else None, list(m.stride), list(m.padding), list(m.dilation),
        False, [0, 0], m.groups * k, [need_input, True, has_bias],
    )
    weight.sub_(grad_w.reshape(weight.shape), alpha=lr)
    if has_bias:
        p["bias"].sub_(grad_b.reshape(p["bias"].shape), alpha=lr)
    return grad_x if need_input else None
