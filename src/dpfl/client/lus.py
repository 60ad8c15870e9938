"""LUS: local update sparsification of 004 (eq. 11–15), vectorized over the cohort.

For each layer j (each named parameter tensor of the model) a client keeps the s_j entries of
its update Δw_j with the largest utility cost T(Δw; w) = |∂f_i(w)/∂w · Δw| (eq. 11; the gradient
is of the client's mean data loss at its *final* local weights w) and zeroes the rest (eq. 14–15).
Sparsity c = 1 − s/d is set per layer: s_j = max(1, round((1 − c)·d_j)), so every layer keeps at
least one entry; c = 0 keeps everything.

The cohort is handled at once: one ``topk`` per layer on the [K, d_j] score matrix and one
``scatter_`` into the mask — no Python loop over clients. Ties are broken by ``topk`` (exactly
s_j entries are kept per layer).

Privacy — precisely: the mask depends on the client's private data (its gradient and its update),
so it is part of the private computation. It is applied on the client *before* clipping and
noise (004 Alg. 2, lines 7–10): the released vector is clip_S(M ⊙ Δ) + N(0, σ_c² I) with the
noise drawn on all d coordinates, including the zeroed ones. Clipping is the last
data-dependent step and bounds ‖clip_S(v)‖ ≤ S for *any* vector v, however it was computed, so
adding or removing one client changes the sum of clipped updates by at most S: the sensitivity
stays S and the certified ε of plain DP-FedAvg applies unchanged. What would break it: sending
only the kept entries (sparse communication) or their positions in the clear — the positions
would then be a release with no noise. dpfl never does that: uploads are dense.

This module imports only torch and :mod:`dpfl.errors`.

References:
    004_32e0c8f847edac12.txt, eq. 11 (T), eq. 14 (mask), eq. 15, Algorithm 2 lines 6–9.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dpfl.errors import ConfigError


def kept_per_layer(layer_sizes: Sequence[int], sparsity: float) -> list[int]:
    """s_j = max(1, round((1 − c)·d_j)) for every layer.

    >>> kept_per_layer([10, 3, 1], 0.7)
    [3, 1, 1]
    """
    if not 0.0 <= sparsity < 1.0:
        raise ConfigError(f"`lus_sparsity` must be in [0, 1). Found {sparsity}.")
    return [max(1, min(int(d), round((1.0 - sparsity) * int(d)))) for d in layer_sizes]


def lus_mask(
    updates: torch.Tensor,
    grads: torch.Tensor,
    layer_sizes: Sequence[int],
    sparsity: float,
) -> torch.Tensor:
    """0/1 mask [K, P] keeping, per client and layer, the entries with the largest |g·Δ|.

    Args:
        updates: Δ [K, P], the local updates (final local weights − round-start model).
        grads: ∂f_i/∂w at the final local weights [K, P].
        layer_sizes: d_j of each layer, in the flat layout's order (they sum to P).
        sparsity: c in [0, 1).

    Returns:
        mask [K, P] (same dtype as ``updates``).
    """
    if updates.shape != grads.shape or updates.dim() != 2:
        raise ConfigError(
            f"updates and gradients must both be [K, P]. Found {list(updates.shape)} and {list(grads.shape)}."
        )
    if sum(int(d) for d in layer_sizes) != updates.shape[1]:
        raise ConfigError(f"layer sizes sum to {sum(layer_sizes)} but updates have {updates.shape[1]} entries.")
    keep = kept_per_layer(layer_sizes, sparsity)
    scores = (grads * updates).abs()
    mask = torch.zeros_like(updates)
    offset = 0
    for d, s in zip(layer_sizes, keep, strict=True):
        sl = slice(offset, offset + int(d))
        offset += int(d)
        if s >= d:
            mask[:, sl] = 1.0
            continue
        idx = torch.topk(scores[:, sl], s, dim=1, sorted=False).indices
        mask[:, sl].scatter_(1, idx, 1.0)
    return mask


def sparsify_updates(
    updates: torch.Tensor,
    grads: torch.Tensor,
    layer_sizes: Sequence[int],
    sparsity: float,
) -> torch.Tensor:
    """M ⊙ Δ (004 eq. 15) for the whole cohort; see :func:`lus_mask`."""
    if sparsity == 0.0:
        return updates
    return updates * lus_mask(updates, grads, layer_sizes, sparsity)
