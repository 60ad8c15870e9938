"""BLUR: the bounded-local-update regularizer of 004 (eq. 5, 7).

A client of DP-FedAvg with BLUR minimizes h_i(w) = f_i(w) + (λ/2)·R_t(w) with
R_t(w) = max(0, ‖w − w^t‖² − S²): no penalty while the local update stays inside the clip ball
of radius S, a quadratic pull back toward the round-start model w^t outside it. The term reads
no data, so it is a :data:`dpfl.client.context.ObjectiveTerm` that both engines add to the local
objective (the vectorized engine on the whole cohort at once, [K, ...] parameters → [K]).

Privacy: the term uses only public values (w^t is the broadcast model, S the clip norm in force
this round — with adaptive clipping, a value derived from earlier noised releases), so it changes
what the client computes but not the sensitivity of what it releases: the update is still clipped
to S afterwards (004 §5.1: "the privacy guarantee of our method is equal to that of DP-FedAvg").

This module imports only torch and :mod:`dpfl.errors`.

References:
    004_32e0c8f847edac12.txt, eq. 5 (R_t), eq. 7 (the local step on h_i), Lemma 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from dpfl.errors import ConfigError


def blur_penalty(
    lam: float,
    bound: float,
    params: Mapping[str, torch.Tensor],
    anchor: Mapping[str, torch.Tensor],
) -> torch.Tensor:
    """(λ/2)·max(0, ‖w − w^t‖² − S²) per client.

    Args:
        lam: λ ≥ 0, the regularization factor.
        bound: S > 0, the radius inside which the update is free (the clip norm).
        params: client parameters ``{name: [K, ...]}``.
        anchor: round-start global parameters ``{name: [...]}`` (w^t).

    Returns:
        [K] penalties.

    >>> w = {"a": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
    >>> blur_penalty(2.0, 1.0, w, {"a": torch.zeros(2)}).tolist()
    [24.0, 0.0]
    """
    sq = None
    for name, p in params.items():
        d = (p - anchor[name]).flatten(1).pow(2).sum(1)
        sq = d if sq is None else sq + d
    if sq is None:
        raise ConfigError("blur_penalty needs at least one parameter; found none.")
    return 0.5 * lam * torch.clamp(sq - bound * bound, min=0.0)


@dataclass(frozen=True)
class BlurTerm:
    """The BLUR objective term with λ fixed and S read each step from ``bound``.

    ``bound`` is a callable so that the term follows the clip norm in force this round (adaptive
    clipping changes S between rounds; a fixed S is ``lambda: S``).
    """

    lam: float
    bound: Callable[[], float]

    def __post_init__(self) -> None:
        if not self.lam >= 0:
            raise ConfigError(f"`blur_lambda` must be >= 0. Found {self.lam}.")

    def __call__(self, params: Mapping[str, torch.Tensor], anchor: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return blur_penalty(self.lam, float(self.bound()), params, anchor)
