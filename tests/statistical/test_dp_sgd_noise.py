"""DP-SGD's randomness as the engines draw it: the noise added to a step has std z·C/(q_k|D_k|),
and Poisson batches have mean size q_k|D_k|.

Tolerances and flake budget (fixed seeds: the tests are deterministic; the budget says how
unlikely a failure of a correct implementation would be under other seeds):

* noise std: 157,000 standardized draws; the relative standard error of a sample std is
  1/sqrt(2·157,000) = 0.18%, the 2% band is 11 SE (two-sided probability < 1e-27); the mean is
  within 4 SE (probability 6.3e-5).
* batch sizes: the mean of 2,000 Binomial(300, 0.05) sizes within 4 SE (probability 6.3e-5).

A wrong scale (the realized batch instead of the expected one, std vs variance, a missing C) is
off by far more than 2%; a 3% error in the engine's noise std fails the std check.
"""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.client.local import DpSgd, LocalTraining, dp_sgd_noise_std, poisson_batch_plan
from dpfl.models import build_model
from dpfl.rng import SeedSequence
from dpfl.sim.base import ClientData, LocalProblem
from dpfl.sim.vectorized import VectorizedEngine


def _data(sizes: list[int]) -> ClientData:
    gen = torch.Generator().manual_seed(1)
    total = sum(sizes)
    x = torch.rand(total, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (total,), generator=gen)
    perm = torch.randperm(total, generator=gen)
    idx, start = [], 0
    for s in sizes:
        idx.append(perm[start : start + s])
        start += s
    return ClientData(x, y, idx)


def _problem(local: LocalTraining) -> LocalProblem:
    model = build_model("logistic", (1, 28, 28), 10, generator=torch.Generator().manual_seed(3))
    return LocalProblem(model, local, loss_kind=model.loss_kind, l2_penalty=model.l2_penalty,
                        penalized_params=model.penalized_params)


def _dp(lr: float = 0.1, z: float = 1.0, clip: float = 1.0, q: float | None = None, **kw) -> LocalTraining:
    batch = kw.pop("batch_size", None if q is not None else 8)
    return LocalTraining(lr=lr, batch_size=batch, per_sample_clip=clip, dp_sgd=DpSgd(z, q), **kw)


def _train(problem: LocalProblem, data: ClientData, seed: int = 11) -> torch.Tensor:
    engine = VectorizedEngine(problem, data, SeedSequence(seed))
    return engine.train(problem.layout.flatten(problem.module), list(range(data.num_clients)), 0).params


def test_the_noise_added_to_a_step_has_std_z_c_over_the_expected_batch() -> None:
    """One step of each of 20 clients (7,850 parameters each: 157,000 coordinates): the step with
    z = 1.3 minus the same step with z = 0 (same Poisson batches: the batch stream does not depend
    on z) is −lr·noise. Each client's noise divided by z·C/(q_k|D_k|) must have std 1 within 2%
    (the standard error of a sample std over 1.57e5 draws is 0.18%: the band is 11 SE) and
    mean 0 within 4 SE."""
    sizes = [13 + 7 * i for i in range(20)]
    data = _data(sizes)
    lr, z, clip = 0.5, 1.3, 0.7
    noisy = _problem(_dp(lr=lr, z=z, clip=clip, steps=1))
    clean = _problem(_dp(lr=lr, z=0.0, clip=clip, steps=1))
    a = _train(noisy, data)
    b = _train(clean, data)
    noise = (b - a).double() / lr  # w_noisy = w_clean − lr·noise
    expected = torch.tensor([z * clip / min(8, n) for n in sizes], dtype=torch.float64)  # q_k|D_k| = min(B, |D_k|)
    expected_by_formula = torch.tensor([dp_sgd_noise_std(n, noisy.local) for n in sizes], dtype=torch.float64)
    torch.testing.assert_close(expected, expected_by_formula, rtol=1e-12, atol=0)
    standardized = (noise / expected.unsqueeze(1)).flatten()
    count = standardized.numel()
    assert count >= 100_000
    assert float(standardized.std()) == pytest.approx(1.0, rel=0.02)
    assert abs(float(standardized.mean())) < 4.0 / math.sqrt(count)


def test_poisson_batch_sizes_have_mean_q_n() -> None:
    """2,000 steps of a client with 300 records at q = 0.05: the mean batch size is q|D_k| = 15
    within 4 standard errors (sqrt(|D_k| q (1−q) / steps)); every record appears at most once a
    step, positions increasing."""
    n, q, steps = 300, 0.05, 2000
    local = _dp(q=q, steps=steps)
    plan = poisson_batch_plan(n, local, torch.Generator().manual_seed(5))
    assert plan.shape[0] == steps
    sizes = (plan >= 0).sum(1).double()
    se = math.sqrt(n * q * (1 - q) / steps)
    assert abs(float(sizes.mean()) - n * q) < 4 * se
    for row in plan[:50]:
        real = row[row >= 0]
        assert bool((real[1:] > real[:-1]).all()) and (real.numel() == 0 or int(real.max()) < n)
