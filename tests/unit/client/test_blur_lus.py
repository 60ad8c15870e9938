"""BLUR (004 eq. 5) and LUS (004 eq. 11–15): exact values, a per-client reference, engines agree."""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.client.blur import BlurTerm, blur_penalty
from dpfl.client.context import ClientData, LocalProblem
from dpfl.client.local import LocalTraining
from dpfl.client.lus import kept_per_layer, lus_mask, sparsify_updates
from dpfl.errors import ConfigError
from dpfl.models import build_model
from dpfl.privacy.mechanisms import clip_by_l2_norm
from dpfl.rng import SeedSequence
from dpfl.sim.sequential import SequentialEngine
from dpfl.sim.vectorized import VectorizedEngine


def test_blur_is_zero_inside_the_ball_and_quadratic_outside() -> None:
    anchor = {"a": torch.tensor([1.0, 1.0]), "b": torch.tensor([0.0])}
    params = {"a": torch.tensor([[1.3, 1.4], [4.0, 5.0]]), "b": torch.tensor([[0.0], [0.0]])}
    got = blur_penalty(0.4, 1.0, params, anchor)
    # client 0: ‖Δ‖² = 0.25 < 1 → 0; client 1: ‖Δ‖² = 9 + 16 = 25 → 0.2·(25 − 1) = 4.8
    assert got.tolist() == pytest.approx([0.0, 4.8], abs=1e-6)


def test_blur_gradient_is_lambda_times_update_outside_the_ball() -> None:
    anchor = {"a": torch.zeros(3)}
    w = torch.tensor([[2.0, -1.0, 2.0]], requires_grad=True)  # ‖Δ‖ = 3 > S = 1
    (g,) = torch.autograd.grad(BlurTerm(0.5, lambda: 1.0)({"a": w}, anchor).sum(), [w])
    assert torch.allclose(g, 0.5 * w.detach())
    with pytest.raises(ConfigError, match="blur_lambda"):
        BlurTerm(-1.0, lambda: 1.0)


def _reference_mask(upd: torch.Tensor, grad: torch.Tensor, sizes: list[int], c: float) -> torch.Tensor:
    """Per client, per layer: sort |g·Δ| and keep the top s_j (the plain definition, a loop)."""
    out = torch.zeros_like(upd)
    for k in range(upd.shape[0]):
        off = 0
        for d in sizes:
            s = max(1, round((1 - c) * d))
            scores = (grad[k, off : off + d] * upd[k, off : off + d]).abs()
            order = sorted(range(d), key=lambda i: -float(scores[i]))
            for i in order[:s]:
                out[k, off + i] = 1.0
            off += d
    return out


@pytest.mark.parametrize("c", [0.1, 0.5, 0.7, 0.9])
def test_lus_mask_matches_per_client_reference(c: float) -> None:
    gen = torch.Generator().manual_seed(3)
    sizes = [20, 7, 13, 1]
    upd = torch.randn(5, sum(sizes), generator=gen)
    grad = torch.randn(5, sum(sizes), generator=gen)  # continuous: no ties
    mask = lus_mask(upd, grad, sizes, c)
    assert torch.equal(mask, _reference_mask(upd, grad, sizes, c))
    # exactly s_j kept per client and layer
    off = 0
    for d, s in zip(sizes, kept_per_layer(sizes, c), strict=True):
        assert mask[:, off : off + d].sum(1).tolist() == [float(s)] * 5
        off += d


def test_lus_reduces_norm_and_identity_at_zero_sparsity() -> None:
    gen = torch.Generator().manual_seed(4)
    upd, grad = torch.randn(4, 30, generator=gen), torch.randn(4, 30, generator=gen)
    assert sparsify_updates(upd, grad, [30], 0.0) is upd
    sparse = sparsify_updates(upd, grad, [10, 20], 0.7)
    assert torch.all(sparse.norm(dim=1) <= upd.norm(dim=1))
    assert int((sparse != 0).sum()) == 4 * (3 + 6)
    with pytest.raises(ConfigError, match="lus_sparsity"):
        kept_per_layer([10], 1.0)


def test_sparsify_then_clip_bounds_every_released_norm() -> None:
    # the sensitivity argument of dpfl.client.lus: whatever the mask, clipping is last
    gen = torch.Generator().manual_seed(5)
    upd = 10 * torch.randn(64, 50, generator=gen)
    grad = torch.randn(64, 50, generator=gen)
    clipped, _ = clip_by_l2_norm(sparsify_updates(upd, grad, [25, 25], 0.5), 0.3)
    assert float(clipped.norm(dim=1).max()) <= 0.3 * (1 + 1e-6)


def _tiny_problem(term: BlurTerm | None) -> tuple[LocalProblem, ClientData]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 1, 4, 4, generator=gen)
    y = torch.randint(0, 3, (60,), generator=gen)
    data = ClientData(x, y, [torch.arange(i * 12, (i + 1) * 12) for i in range(5)])
    model = build_model("mlp", (1, 4, 4), 3, generator=torch.Generator().manual_seed(1), hidden=8)
    local = LocalTraining(lr=0.5, steps=6, batch_size=4, final_gradient=True)
    return LocalProblem(model, local, extra_terms=() if term is None else (term,)), data


def test_engines_agree_with_blur_and_final_gradients() -> None:
    problem, data = _tiny_problem(BlurTerm(0.8, lambda: 0.05))
    seeds = SeedSequence(2)
    g0 = problem.layout.flatten(problem.module)
    vec = VectorizedEngine(problem, data, seeds).train(g0, [0, 2, 4], 0)
    seq = SequentialEngine(problem, data, seeds).train(g0, [0, 2, 4], 0)
    assert torch.allclose(vec.params, seq.params, atol=1e-5)
    assert vec.final_grads is not None and seq.final_grads is not None
    assert torch.allclose(vec.final_grads, seq.final_grads, atol=1e-5)


def test_blur_shrinks_local_updates_toward_the_bound() -> None:
    seeds = SeedSequence(2)
    norms = {}
    for lam in (0.0, 1.5):
        problem, data = _tiny_problem(BlurTerm(lam, lambda: 0.05) if lam else None)
        g0 = problem.layout.flatten(problem.module)
        res = VectorizedEngine(problem, data, seeds).train(g0, list(range(5)), 0)
        norms[lam] = (res.params - g0).norm(dim=1)
    assert torch.all(norms[1.5] < norms[0.0])
    assert math.isfinite(float(norms[1.5].sum()))
