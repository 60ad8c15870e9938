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
