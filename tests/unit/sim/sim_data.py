"""Random client data shared by the engine tests (not a test module)."""

from __future__ import annotations

import torch

from dpfl.sim.base import ClientData


def random_client_data(sizes: list[int], shape: tuple[int, ...], classes: int, seed: int = 1) -> ClientData:
    """Uniform inputs of ``shape``, random labels in 0..classes-1, split into clients of ``sizes``
    by a random permutation; everything from one generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    total = sum(sizes)
    x = torch.rand(total, *shape, generator=gen)
    y = torch.randint(0, classes, (total,), generator=gen)
    perm = torch.randperm(total, generator=gen)
    idx, start = [], 0
    for s in sizes:
        idx.append(perm[start : start + s])
        start += s
    return ClientData(x, y, idx)
