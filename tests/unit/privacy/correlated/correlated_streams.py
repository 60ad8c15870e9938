"""What the correlated-noise tests share: the vectors a noise stream holds between rounds."""

from __future__ import annotations

import torch


def held_vectors(stream: object, num_params: int) -> int:
    """Vectors of ``num_params`` entries the stream holds: every tensor among its attributes (and inside
    dicts/lists/tuples) whose last dimension is ``num_params`` (small tensors, e.g. coefficients, excluded)."""
    total = 0
    todo = list(vars(stream).values())
    while todo:
        item = todo.pop()
        if isinstance(item, torch.Tensor):
            if item.dim() and item.shape[-1] == num_params:
                total += item.numel() // num_params
            else:
                assert item.numel() < num_params  # anything else must be small
        elif isinstance(item, dict):
            todo += list(item.values())
        elif isinstance(item, (list, tuple)):
            todo += list(item)
    return total
