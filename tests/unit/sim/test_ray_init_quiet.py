"""The Ray engine starts Ray without Ray's FutureWarning about GPU visibility (printed on every
run before), and lets any other warning of ``ray.init`` through. Ray itself is replaced by a
stand-in that warns as Ray 2.55's ``ray.init`` does, so the test needs no Ray."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch

from dpfl.client.local import LocalTraining
from dpfl.rng import SeedSequence
from dpfl.sim.base import ClientData, LocalProblem
from dpfl.sim.ray_engine import RayEngine

RAY_TIP = ("Tip: In future versions of Ray, Ray will no longer override accelerator visible devices env var if "
           "num_gpus=0 or num_gpus=None (default). To enable this behavior and turn off this error message, set "
           "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0")


class _Started(Exception):
    """Raised by the stand-in once Ray is initialized: the rest of the engine is not under test."""


def _fake_ray(other: str | None) -> types.ModuleType:
    ray = types.ModuleType("ray")

    def init(**kwargs: object) -> None:
        warnings.warn(RAY_TIP, FutureWarning, stacklevel=2)
        if other is not None:
            warnings.warn(other, FutureWarning, stacklevel=2)

    def available_resources() -> dict[str, float]:
        raise _Started

    ray.is_initialized = lambda: False  # type: ignore[attr-defined]
    ray.init = init  # type: ignore[attr-defined]
    ray.available_resources = available_resources  # type: ignore[attr-defined]
    return ray


def _engine() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    data = ClientData(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long), [torch.arange(2), torch.arange(2, 4)])
    RayEngine(LocalProblem(model, LocalTraining(lr=0.1)), data, SeedSequence(0), num_cpus=1)


def test_ray_init_gpu_tip_is_silenced_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setitem(sys.modules, "ray", _fake_ray(None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(_Started):
            _engine()
    monkeypatch.setitem(sys.modules, "ray", _fake_ray("another deprecation"))
    with pytest.warns(FutureWarning, match="another deprecation") as record, pytest.raises(_Started):
        _engine()
    assert not any("accelerator" in str(w.message) for w in record)
