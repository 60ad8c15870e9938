"""Transports for tests of secure aggregation: what a deployment does, in process."""

from __future__ import annotations

import dataclasses
from typing import Any


class OwnCoinsTransport:
    """A deployment's transport in process: every client trains and runs its client step with
    ``hidden_participation`` (its secret coin decides whether its update enters), the server receives the
    modular sum only; ``drop(t)`` names clients whose masked vector never arrives."""

    tag = "hidden"
    secure_sum = True
    hidden_participation = True

    def __init__(self, config: Any, drop: Any = None) -> None:
        from dpfl.rounds import build_experiment

        self.exp = build_experiment(config)
        self.drop = drop or (lambda t: [])
        self.rows: list[tuple[int, Any, Any]] = []  # (round, clients, residues) as uploaded

    def __call__(self, params: Any, info: Any, algo: Any, emit: Any) -> Any:
        import torch

        # the server did not sample
        assert info.hidden_participation and info.clients.tolist() == list(range(info.num_clients))
        local = self.exp.engine.train(params, info.clients.tolist(), info.round_idx)
        ups = algo.client_step(params, local, info)
        keep = torch.tensor([c not in self.drop(info.round_idx) for c in info.clients.tolist()])
        ups = ups.select(keep)
        self.rows.append((info.round_idx, ups.clients.clone(), ups.params.clone()))
        total = algo.pipeline(algo.round_plan(info)).modular_sum(ups.params)
        return dataclasses.replace(ups, params=ups.params[:0].to(torch.float32), secure_sum=total)

    def outstanding(self) -> list[tuple[int, int]]:
        return []

    def unused_uploads(self, *, final: bool = False, emit: Any) -> list[tuple[int, int]]:
        return []
