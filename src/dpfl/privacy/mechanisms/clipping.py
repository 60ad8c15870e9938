"""Whole-vector L2 clipping of a stacked cohort: the step that bounds sensitivity.

Input is a float tensor ``[K, ...]`` (K clients, the rest is one client's flattened or shaped
parameters or update). Each client's vector is scaled by min(1, C/‖x_k‖₂), so its norm becomes
at most C (up to floating-point rounding, relative 1e-7 in float32) and vectors already inside
the ball are returned bit-for-bit unchanged. Clipping is deterministic and causes no DP event by
itself; it is what makes a later noise step's sensitivity true (:func:`clipped_sensitivity`).

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from dpfl.errors import ConfigError, PrivacyPreconditionError

__all__ = ["clip_by_l2_norm", "clipped_sensitivity", "per_client_l2_norms"]


def per_client_l2_norms(x: Tensor) -> Tensor:
    """The L2 norm of each client's vector: ``[K, ...] -> [K]``."""
    if x.dim() < 1:
        raise ConfigError(
            f"`x` must have a leading client dimension [K, ...]. Found shape {tuple(x.shape)}."
        )
    return torch.linalg.vector_norm(x.reshape(x.shape[0], -1), ord=2, dim=1)


def _per_client(name: str, value: float | Tensor, x: Tensor, *, allow_inf: bool) -> Tensor:
    """A scalar or ``[K]`` parameter as a ``[K, 1, ..., 1]`` tensor broadcastable against x."""
    k = x.shape[0]
    if isinstance(value, Tensor):
        tensor = value.to(device=x.device, dtype=x.dtype)
        if tensor.dim() == 0:
            tensor = tensor.expand(k)
        if tuple(tensor.shape) != (k,):
            raise ConfigError(
                f"`{name}` must be a scalar or have shape [K] = [{k}]. Found shape {tuple(value.shape)}."
            )
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"`{name}` must be a float or a tensor. Found {value!r}.")
        tensor = torch.full((k,), float(value), device=x.device, dtype=x.dtype)
    ok = tensor > 0
    if not allow_inf:
        ok &= torch.isfinite(tensor)
    if not bool(ok.all()):
        bad = tensor[~ok][:5].tolist()
        rule = "> 0" if allow_inf else "finite and > 0"
        raise ConfigError(f"`{name}` must be {rule}. Found {bad}.")
    return tensor.reshape((k,) + (1,) * (x.dim() - 1))


def clip_by_l2_norm(x: Tensor, clip_norm: float | Tensor) -> tuple[Tensor, Tensor]:
    """Clip each client's vector to L2 norm at most C: x_k · min(1, C/‖x_k‖₂).

    Safe at ‖x_k‖ = 0 (factor 1) and for C = ``inf`` (no clipping, the FedAvg limit).

    Args:
        x: a floating tensor ``[K, ...]``.
        clip_norm: C > 0, a float or a tensor of shape ``[K]`` (one clip norm per client, as in
            002's adaptive clipping).

    Returns:
        ``(clipped, norms)``: the clipped tensor (a new tensor, same shape and dtype) and the
        pre-clip norms ``[K]``.

    Raises:
        ConfigError: a clip norm is not > 0.
        PrivacyPreconditionError: a client's vector has a non-finite norm (NaN or inf): no
            clip can bound it.

    References:
        000_3304bf6f36c753f8.txt, Algorithm 1 line 8; 002_2503fd7671e29121.txt, eq. 4.6;
        003_c42e3eb46a620b42.txt, Algorithm 1 line 8; 004_32e0c8f847edac12.txt, Algorithm 1
        LocalUpdate line 7.

    >>> clipped, norms = clip_by_l2_norm(torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]]), 1.0)
    >>> clipped.tolist(), norms.tolist()
    ([[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645], [0.0, 0.0]], [5.0, 0.5, 0.0])
    """
    if not x.is_floating_point():
        raise ConfigError(f"`x` must be a floating-point tensor. Found dtype {x.dtype}.")
    norms = per_client_l2_norms(x)
    finite = torch.isfinite(norms)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten()[:5].tolist()
        raise PrivacyPreconditionError(
            f"clients {bad} have a non-finite L2 norm (NaN or inf in their vector): clipping "
            "cannot bound their sensitivity."
        )
    clip = _per_client("clip_norm", clip_norm, x, allow_inf=True)
    norms_b = norms.reshape(clip.shape)
    # where(‖x‖ > C, C/‖x‖, 1): exactly 1 inside the ball, no division by zero at ‖x‖ = 0.
    factor = torch.where(norms_b > clip, clip / norms_b.clamp_min(torch.finfo(x.dtype).tiny), 1.0)
    return x * factor, norms


def clipped_sensitivity(
    clip_norm: float, neighbouring: Literal["replace_one", "add_remove"] = "replace_one"
) -> float:
    """The L2 sensitivity that clipping to C enforces on one client's vector.

    Replacing one vector of norm <= C by another moves it by at most 2C; adding or removing
    one client's clipped vector from a sum moves the sum by at most C.

    Args:
        clip_norm: C > 0.
        neighbouring: ``"replace_one"`` (2C) or ``"add_remove"`` (C).

    Returns:
        the sensitivity.

    References:
        003_c42e3eb46a620b42.txt, eq. 5 (the paper's 2C/m is not enforced by this clip; 2C is);
        002_2503fd7671e29121.txt, eq. 4.6; 004_32e0c8f847edac12.txt, Algorithm 1.
    """
    if (
        isinstance(clip_norm, bool)
        or not isinstance(clip_norm, (int, float))
        or not (math.isfinite(clip_norm) and clip_norm > 0)
    ):
        raise ConfigError(f"`clip_norm` must be finite and > 0. Found {clip_norm!r}.")
    if neighbouring == "replace_one":
        return 2.0 * float(clip_norm)
    if neighbouring == "add_remove":
        return float(clip_norm)
    raise ConfigError(
        f"`neighbouring` must be one of ['add_remove', 'replace_one']. Found {neighbouring!r}."
    )
