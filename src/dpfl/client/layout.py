"""Flat parameter layout: a model's parameters as one contiguous vector, a cohort as a [K, P] matrix.

Privacy transforms (clipping, noise, randomizers) work on the flat [K, P] matrix; training works
on per-parameter views into the same storage, so moving between the two costs nothing.
This module imports only torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of a model's parameters inside a flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    numel: int

    @classmethod
    def of(cls, module: nn.Module) -> ParamLayout:
        names, shapes, offsets = [], [], []
        offset = 0
        for name, p in module.named_parameters():
            names.append(name)
            shapes.append(tuple(p.shape))
            offsets.append(offset)
            offset += p.numel()
        return cls(tuple(names), tuple(shapes), tuple(offsets), offset)

    def sizes(self) -> list[int]:
        return [math.prod(s) for s in self.shapes]

    def flatten(self, module: nn.Module) -> torch.Tensor:
        """The module's parameters as one flat float32 vector [P] (a copy)."""
        params = dict(module.named_parameters())
        return torch.cat([params[n].detach().reshape(-1) for n in self.names]).clone()

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of a flat vector [P] or a cohort matrix [K, P] shaped like the parameters.

        The views share storage with ``flat``: writing into them writes into ``flat``.
        """
        lead = tuple(flat.shape[:-1])
        out = {}
        for name, shape, off, size in zip(self.names, self.shapes, self.offsets, self.sizes(), strict=True):
            out[name] = flat[..., off : off + size].view(*lead, *shape)
        return out

    def load_into(self, module: nn.Module, flat: torch.Tensor) -> None:
        """Copy a flat vector [P] into the module's parameters."""
        views = self.views(flat)
        with torch.no_grad():
            for name, p in module.named_parameters():
                p.copy_(views[name])
