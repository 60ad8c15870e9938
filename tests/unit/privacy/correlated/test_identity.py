"""IdentityStrategy: independent noise each round (the DP-SGD / DP-FedAvg baseline)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.correlated.base import strategy_from_dict, strategy_kinds
from dpfl.privacy.mechanisms.correlated.identity import IdentityStrategy
from dpfl.privacy.mechanisms.correlated.workload import momentum_workload, prefix_rmse, prefix_workload


def test_matrices_error_and_sensitivity() -> None:
    n = 9
    strategy = IdentityStrategy(n)
    np.testing.assert_array_equal(strategy.encoder_matrix(), np.eye(n))
    np.testing.assert_array_equal(strategy.noise_matrix(), np.eye(n))
    assert strategy.workload_error() == float(np.sum(prefix_workload(n) ** 2)) == n * (n + 1) / 2
    a = momentum_workload(n, 0.5)
    assert strategy.workload_error(a) == pytest.approx(float(np.sum(a**2)), rel=1e-14)
    assert strategy.max_sensitivity(1, 4) == 2.0
    assert strategy.max_sensitivity(4, 100) == math.sqrt(3)  # rounds 0, 4, 8
    assert strategy.max_sensitivity(9, 5) == 1.0
    assert strategy.sensitivity_increment(5, [0, 2]) == 1.0
    assert prefix_rmse(strategy, 3, 3) == pytest.approx(math.sqrt(3 * (n + 1) / 2))


def test_stream_is_fresh_normals_with_no_memory() -> None:
    strategy = IdentityStrategy(6)
    stream = strategy.noise_stream(4, dtype=torch.float64)
    assert stream.memory_vectors == strategy.memory_vectors == 0
    gen = torch.Generator().manual_seed(2)
    got = torch.stack([stream.next(t, gen) for t in range(6)])
    gen = torch.Generator().manual_seed(2)
    want = torch.stack([torch.randn(4, generator=gen, dtype=torch.float64) for _ in range(6)])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not any(isinstance(v, torch.Tensor) for v in vars(stream).values())
    with pytest.raises(ConfigError):
        stream.next(6, gen)


def test_json_and_registry() -> None:
    assert "identity" in strategy_kinds()
    assert strategy_from_dict(IdentityStrategy(5).to_dict()) == IdentityStrategy(5)
    for bad in (0, 1.5, None, True):
        with pytest.raises(ConfigError):
            IdentityStrategy(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        IdentityStrategy(3).noise_stream(0)
