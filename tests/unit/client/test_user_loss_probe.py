"""A loss as PyTorch users write it (``[B, C] -> [B]``): probed once when the run is built, run
on a whole cohort by both engines with the built-in loss's results, refused in one line when it
is not one loss per sample."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dpfl
from dpfl.client.user_loss import FlattenedLoss, adapt_loss
from dpfl.errors import ConfigError
from dpfl.models.losses import cross_entropy_per_sample


def torch_style(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What a PyTorch user writes: F.cross_entropy on [B, C] (dim 1 is the class dimension)."""
    return F.cross_entropy(out, y, reduction="none")


def _probe(classes: int = 4, batch: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch, classes, generator=g), torch.randint(0, classes, (batch,), generator=g)


def test_a_batch_only_loss_is_flattened_and_a_leading_dims_loss_is_kept() -> None:
    out, y = _probe()
    wrapped = adapt_loss(torch_style, out, y)
    assert isinstance(wrapped, FlattenedLoss)
    kept = adapt_loss(cross_entropy_per_sample, out, y)  # handles [K, B, C] itself
    assert kept is cross_entropy_per_sample
    stacked_out, stacked_y = torch.randn(3, 5, 4), torch.randint(0, 4, (3, 5))
    got = wrapped(stacked_out, stacked_y)
    assert got.shape == (3, 5)
    assert torch.allclose(got, cross_entropy_per_sample(stacked_out, stacked_y), atol=1e-6)


def test_a_loss_right_only_by_shape_on_a_stack_is_flattened() -> None:
    """B == C: F.cross_entropy accepts [K, B, C] with [K, B] targets but reads dim 1 as the
    classes — the right shape, the wrong numbers. The probe compares values, not only shapes."""
    out, y = _probe(classes=4, batch=4)
    assert isinstance(adapt_loss(torch_style, out, y), FlattenedLoss)


@pytest.mark.parametrize(("loss", "needle"), [
    (lambda out, y: F.cross_entropy(out, y),
     r"must return one loss per sample, shape \(4,\) for outputs \(4, 4\) "
     r"and targets \(4,\); it returned a scalar \(shape \(\)\).*reduction='none'"),
    (lambda out, y: F.cross_entropy(out, y, reduction="sum"), r"it returned a scalar"),
    (lambda out, y: torch.log_softmax(out, -1), r"shape \(4,\) .*; it returned shape \(4, 4\)\."),
    (lambda out, y: [1.0] * out.shape[0], r"it returned a list, not a tensor"),
    (lambda out, y: F.nll_loss(out, y.float(), reduction="none"), r"fails on outputs \(4, 4\) and targets \(4,\)"),
    (lambda out, y: torch_style(out, y) - torch_style(out, y).mean(), r"is not per-sample"),
    (lambda out, y: torch_style(out.detach(), y), r"does not depend differentiably on the outputs"),
])
def test_what_is_not_one_loss_per_sample_is_refused_in_one_line(loss, needle: str) -> None:
    out, y = _probe()
    with pytest.raises(ConfigError, match=needle) as err:
        adapt_loss(loss, out, y)
    assert "\n" not in str(err.value) and "<lambda>" in str(err.value)


def _data(n_train: int = 200, n_test: int = 60) -> dpfl.FederatedData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_train + n_test, 1, 6, 6, generator=g)
    y = (x.reshape(x.shape[0], -1) @ torch.randn(36, 3, generator=g)).argmax(1)
    return dpfl.FederatedData.from_tensors(x[:n_train], y[:n_train], x[n_train:], y[n_train:],
                                           partition={"kind": "iid", "num_clients": 5})


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(36, 12), nn.ReLU(), nn.Linear(12, 3))


def _conv() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 36, 3))


# fedavg on the MLP: the fused step of linear stacks; dp-sgd-fedavg: per-sample clipping (ghost
# norms on the MLP, per-sample gradients under vmap(grad) on the conv net) and DP-SGD noise
CASES = [("mlp", "fedavg", {}), ("mlp", "dp-sgd-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5}),
         ("conv", "dp-sgd-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5})]


@pytest.mark.parametrize(("arch", "algorithm", "options"), CASES)
def test_both_engines_train_a_torch_style_loss_as_the_built_in_one(arch: str, algorithm: str, options: dict) -> None:
    """Same seed, same initial model: the [B, C]-style loss gives the built-in cross-entropy's
    final parameters in the vectorized and the sequential engine (before, the vectorized engine
    crashed on it: F.cross_entropy read [K, B, C] as [N, C, d]). Tolerance 1e-6 per parameter:
    the two engines agree to float32 rounding (observed: at most 6e-8 after 2 rounds, the
    vectorized engine against the sequential one; the two losses give the same bits in each)."""
    data = _data()
    torch.manual_seed(1)
    model = _mlp() if arch == "mlp" else _conv()
    kw = {"options": options, "rounds": 2, "local": {"lr": 0.2, "epochs": 1, "batch_size": 10},
          "sampling": {"kind": "poisson", "sample_rate": 0.6}, "store": None, "notice": None}
    finals = {}
    for engine in ("vectorized", "sequential"):
        for name, loss in (("built-in", None), ("torch-style", torch_style)):
            res = dpfl.train(model, data, algorithm, engine=engine, loss=loss, **kw)
            assert res.status == "finished"
            finals[engine, name] = torch.cat([p.detach().reshape(-1) for p in res.model.parameters()])
    init = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    reference = finals["sequential", "built-in"]
    assert (reference - init).abs().max().item() > 1e-2  # it trained
    for key, params in finals.items():
        assert (params - reference).abs().max().item() <= 1e-6, key


def test_a_reduced_loss_is_refused_when_the_run_is_built_before_any_round() -> None:
    data = _data()
    torch.manual_seed(1)
    rounds: list[int] = []
    with pytest.raises(ConfigError, match=r"loss .*<lambda> must return one loss per sample, shape \(4,\) for "
                                          r"outputs \(4, 3\) and targets \(4,\); it returned a scalar"):
        dpfl.train(_mlp(), data, "fedavg", rounds=1, store=None, notice=None, engine="vectorized",
                   progress=lambda done, *_: rounds.append(done), loss=lambda out, y: F.cross_entropy(out, y))
    assert rounds == []


def test_a_loss_that_cannot_run_under_vmap_is_refused_where_per_sample_clipping_needs_it() -> None:
    def branchy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if float(out.max()) > 1e9:  # a Python branch on a tensor's value
            return out.sum(-1)
        return torch_style(out, y)

    data = _data()
    torch.manual_seed(1)
    kw = {"rounds": 1, "store": None, "notice": None, "engine": "vectorized", "loss": branchy}
    assert dpfl.train(_mlp(), data, "fedavg", **kw).status == "finished"  # no per-sample gradients here
    with pytest.raises(ConfigError, match=r"cannot run under torch.func.vmap\(grad\(\.\.\.\)\), which per-sample "
                                          r"clipping needs"):
        dpfl.train(_mlp(), data, "dp-sgd-fedavg", options={"noise_multiplier": 1.0, "clip_norm": 0.5}, **kw)
