"""FedAvg's `clip_radius` ablation: the mean of local models clipped into 001's fixed range."""

from __future__ import annotations

import pytest
import torch

from dpfl.algorithms.fedavg import FedAvg
from dpfl.algorithms.registry import algorithms
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.errors import ConfigError
from dpfl.rng import SeedSequence
from dpfl.sampling import AllClients


def _round(algo: FedAvg, local: torch.Tensor, global_params: torch.Tensor) -> torch.Tensor:
    k = local.shape[0]
    info = RoundInfo(0, k, torch.arange(k), SeedSequence(0))
    res = LocalResult(local.clone(), torch.zeros(k), torch.full((k,), 7, dtype=torch.long))
    return algo.server_step(global_params, res, info).global_params


def test_clip_radius_gives_the_mean_of_the_clipped_local_models() -> None:
    g = torch.Generator().manual_seed(0)
    local = 0.2 * torch.randn(5, 1000, generator=g)
    global_params = 0.05 * torch.randn(1000, generator=g)
    clipped = _round(FedAvg(AllClients(), clip_range=(0.01, 0.075)), local, global_params)
    expected = local.clamp(0.01 - 0.075, 0.01 + 0.075).mean(dim=0)
    assert torch.allclose(clipped, expected, atol=1e-6)
    assert float(clipped.max()) <= 0.085 + 1e-6 and float(clipped.min()) >= -0.065 - 1e-6
    # without the option: the plain mean (the clip changed something here)
    plain = _round(FedAvg(AllClients()), local, global_params)
    assert torch.allclose(plain, local.mean(dim=0), atol=1e-6)
    assert float((plain - clipped).abs().max()) > 0.1


def test_fedavg_options_are_validated_by_name() -> None:
    build = algorithms()["fedavg"]
    with pytest.raises(ConfigError, match="clip_radius"):
        build({"clip_radius": -1.0}, AllClients(), None)
    with pytest.raises(ConfigError, match="unknown option `radius`"):
        build({"radius": 0.1}, AllClients(), None)
    with pytest.raises(ConfigError, match="clip_center"):
        build({"clip_radius": 0.1, "clip_center": float("nan")}, AllClients(), None)
    assert build({"clip_radius": 0.1}, AllClients(), None).clip_range == (0.0, 0.1)
    assert build({}, AllClients(), None).clip_range is None
