"""DP-SGD inside the engines (``LocalTraining.dp_sgd``): Poisson batches, per-sample clipping, the
fixed denominator q|D_k| and the per-step noise.

The ladder: the exact limiting case first (z = 0, a clip never reached, q = 1 is plain full-batch
gradient descent), then agreement of the two engines on the same seeds. The moments of what is
added (noise std, Poisson batch sizes) are in ``tests/statistical/test_dp_sgd_noise.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from sim_data import random_client_data

from dpfl.client.local import (
    DpSgd,
    LocalTraining,
    dp_sgd_noise_std,
    dp_sgd_steps,
    poisson_batch_plan,
)
from dpfl.errors import ConfigError
from dpfl.models import build_model
from dpfl.rng import SeedSequence
from dpfl.sim.base import ClientData, LocalProblem
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine

SIZES = [7, 13, 64, 30, 1, 45]


def _data(sizes: list[int], shape: tuple[int, ...] = (1, 28, 28), classes: int = 10) -> ClientData:
    return random_client_data(sizes, shape, classes, seed=1)


def _problem(name: str, local: LocalTraining, shape=(1, 28, 28), classes=10, **opts) -> LocalProblem:
    model = build_model(name, shape, classes, generator=torch.Generator().manual_seed(3), **opts)
    return LocalProblem(model, local, loss_kind=model.loss_kind, l2_penalty=model.l2_penalty,
                        penalized_params=model.penalized_params)


def _dp(lr: float = 0.1, z: float = 1.0, clip: float = 1.0, q: float | None = None, **kw) -> LocalTraining:
    batch = kw.pop("batch_size", None if q is not None else 8)
    return LocalTraining(lr=lr, batch_size=batch, per_sample_clip=clip, dp_sgd=DpSgd(z, q), **kw)


def _train(engine_cls, problem: LocalProblem, data: ClientData, rounds: int = 1, seed: int = 11) -> torch.Tensor:
    """Local training of every client from the same start, ``rounds`` times (model: the mean)."""
    seeds = SeedSequence(seed)
    engine = engine_cls(problem, data, seeds)
    params = problem.layout.flatten(problem.module)
    out = None
    for t in range(rounds):
        out = engine.train(params, list(range(data.num_clients)), t).params
        params = out.mean(0)
    assert out is not None
    return out


# ---------------------------------------------------------------- settings


def test_settings_are_checked_and_name_the_value() -> None:
    with pytest.raises(ConfigError, match="per_sample_clip"):
        LocalTraining(lr=0.1, batch_size=8, dp_sgd=DpSgd(1.0))
    with pytest.raises(ConfigError, match="batch_size"):
        LocalTraining(lr=0.1, batch_size=None, per_sample_clip=1.0, dp_sgd=DpSgd(1.0))
    with pytest.raises(ConfigError, match=r"record_sample_rate.*1\.5"):
        DpSgd(1.0, 1.5)
    with pytest.raises(ConfigError, match="noise_multiplier.*-1"):
        DpSgd(-1.0)


def test_rate_steps_and_noise_std_by_hand() -> None:
    derived = _dp(batch_size=10, epochs=2)  # q_k = 10/45, ⌈45/10⌉ = 5 batches an epoch
    assert dp_sgd_steps(45, derived) == 10
    assert dp_sgd_noise_std(45, derived) == pytest.approx(1.0 * 1.0 / 10)  # zC/(q n) = zC/B
    assert dp_sgd_steps(5, derived) == 2 and dp_sgd_noise_std(5, derived) == pytest.approx(1.0 / 5)  # q = 1
    fixed = _dp(q=0.2, z=0.5, clip=2.0)
    assert dp_sgd_steps(45, fixed) == 5  # 1/q, exactly
    assert dp_sgd_noise_std(45, fixed) == pytest.approx(0.5 * 2.0 / (0.2 * 45))
    assert dp_sgd_steps(45, dataclasses.replace(fixed, steps=3)) == 3


# ---------------------------------------------------------------- 1: the limiting case


@pytest.mark.parametrize("engine_cls", [VectorizedEngine, SequentialEngine])
@pytest.mark.parametrize("model", ["logistic", "cnn-000"])
def test_no_noise_a_clip_never_reached_and_q_1_is_full_batch_gradient_descent(engine_cls, model: str) -> None:
    """z = 0, C = 1e6, q = 1: every record in every step, sum / |D_k| = the mean gradient."""
    opts = {} if model == "logistic" else {"channels": 3}
    data = _data(SIZES)
    dp = _problem(model, _dp(lr=0.2, z=0.0, clip=1e6, q=1.0, epochs=3), **opts)
    gd = _problem(model, LocalTraining(lr=0.2, epochs=3, batch_size=None), **opts)
    a = _train(engine_cls, dp, data, rounds=2)
    b = _train(engine_cls, gd, data, rounds=2)
    # float32: per-sample gradients summed then divided vs. the mean loss's gradient (6 steps)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=5e-5)


# ---------------------------------------------------------------- 2: the engines agree


@pytest.mark.parametrize("model", ["mlp", "cnn-000"])
def test_vectorized_and_sequential_engines_draw_the_same_batches_and_noise(model: str) -> None:
    """Unequal clients (one of a single record), q_k = 8/|D_k| or 1, several steps, 2 rounds:
    the ghost-norm path (mlp) and the materialized per-sample path (cnn-000) against the
    sequential reference, float32 tolerance."""
    opts = {"hidden": 32} if model == "mlp" else {"channels": 3}
    data = _data(SIZES)
    problem = _problem(model, _dp(lr=0.1, z=0.8, clip=0.5, epochs=2), **opts)
    a = _train(VectorizedEngine, problem, data, rounds=2)
    b = _train(SequentialEngine, problem, data, rounds=2)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # and the noise is really there: another seed moves the model
    c = _train(VectorizedEngine, problem, data, rounds=2, seed=12)
    assert float((a - c).abs().max()) > 1e-3


def test_a_fixed_rate_with_empty_batches_still_steps_with_noise_only() -> None:
    """q = 0.01 on a client of 7 records: most batches are empty; the engines agree and the
    model moves (noise-only steps)."""
    data = _data([7, 3])
    problem = _problem("logistic", _dp(q=0.01, z=1.0, clip=1.0, steps=5))
    plan = poisson_batch_plan(7, problem.local, SeedSequence(11).generator(0, 0, "batch"))
    assert int((plan >= 0).sum()) < 5 * 7  # not every record every step
    a = _train(VectorizedEngine, problem, data)
    b = _train(SequentialEngine, problem, data)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    start = problem.layout.flatten(problem.module)
    assert bool(((a - start).abs().sum(1) > 0).all())
