"""A run's data is checked when the run is built, not at round 1: NaN or inf in the training or
test inputs, labels outside the classes, clients without samples, and a δ of at least 1/n (n
privacy units: accepted, said loudly)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

import dpfl
from dpfl.cli import main
from dpfl.config import parse_config
from dpfl.data.checks import check_finite_inputs, check_labels, delta_notice
from dpfl.data.registry import FederatedDataset
from dpfl.errors import ConfigError
from dpfl.rounds.build import assemble


def _tensors(n_train: int = 200, n_test: int = 50) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_train + n_test, 1, 4, 4, generator=g)
    y = (x.reshape(x.shape[0], -1) @ torch.randn(16, 4, generator=g)).argmax(1)
    return [x[:n_train], y[:n_train], x[n_train:], y[n_train:]]


def _model(classes: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, classes))


def _train(data: dpfl.FederatedData, said: list[str] | None = None, **kw: object) -> dpfl.TrainResult:
    return dpfl.train(_model(), data, "dp-fedavg", options={"noise_multiplier": 1.0, "clip_norm": 1.0},
                      rounds=1, store=None, engine="vectorized", notice=None if said is None else said.append,
                      **kw)  # type: ignore[arg-type]


def _refused(data: dpfl.FederatedData, needle: str) -> None:
    """``train`` refuses ``data`` with a ConfigError matching ``needle`` before any round."""
    rounds: list[int] = []
    with pytest.raises(ConfigError, match=needle):
        _train(data, progress=lambda done, *_: rounds.append(done))
    assert rounds == []


def test_nan_in_the_training_inputs_is_refused_naming_the_sample() -> None:
    """Before: "clients [2] have a non-finite L2 norm" at round 1."""
    x, y, xs, ys = _tensors()
    x = x.clone()
    x[7, 0, 2, 3] = float("nan")
    x[40, 0, 0, 0] = float("nan")
    data = dpfl.FederatedData.from_tensors(x, y, xs, ys, partition={"kind": "iid", "num_clients": 5})
    _refused(data, r"the training inputs hold NaN at sample 7, feature \[0, 2, 3\] \(2 of 200 samples have NaN or "
                   r"inf\)")


def test_inf_in_the_test_inputs_is_refused_naming_the_sample() -> None:
    """Before: the run "finished" (at chance accuracy, the test set's logits being NaN)."""
    x, y, xs, ys = _tensors()
    xs = xs.clone()
    xs[3, 0, 1, 0] = float("-inf")
    data = dpfl.FederatedData.from_tensors(x, y, xs, ys, partition={"kind": "iid", "num_clients": 5})
    _refused(data, r"the test inputs hold -inf at sample 3, feature \[0, 1, 0\] \(1 of 50 samples")


def test_a_stray_label_is_named_not_blamed_on_the_model() -> None:
    """Labels 0..3 and one 4 in a model of 4 logits: the inferred 5 classes used to make the error
    say the model had the wrong output size."""
    x, y, xs, ys = _tensors()
    y = y.clone()
    y[11] = 4
    data = dpfl.FederatedData.from_tensors(x, y, xs, ys, partition={"kind": "iid", "num_clients": 5})
    _refused(data, r"^label 4 at training sample 11 lies outside 0..3, the classes model 'Sequential@\w+' returns 4 "
                   r"logits for \(1 of 200 training, 0 of 50 test labels are >= 4; with them the data set has 5 "
                   r"classes\): fix those labels, or make the model return 5 logits.$")


def _config(**over: object):  # type: ignore[no-untyped-def]
    raw = {"name": "checks", "seed": 0, "rounds": 1, "data": {"name": "user@x", "dir": "", "verify": False},
           "partition": {"kind": "iid", "num_clients": 4}, "model": {"name": "logistic"},
           "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 1.0}}}
    raw.update(over)
    return parse_config(raw)


def _dataset(y_train: torch.Tensor | None = None, y_test: torch.Tensor | None = None) -> FederatedDataset:
    x, y, xs, ys = _tensors()
    return FederatedDataset("user", x, y if y_train is None else y_train, xs, ys if y_test is None else y_test, 4,
                            (1, 4, 4))


@pytest.mark.parametrize(("where", "value", "needle"), [
    ("train", 9, r"the training labels must lie in 0..3 \(4 classes\). Found label 9 at sample 5 \(1 of 200"),
    ("train", -1, r"the training labels must lie in 0..3 \(4 classes\). Found label -1 at sample 5"),
    ("test", 4, r"the test labels must lie in 0..3 \(4 classes\). Found label 4 at sample 5 \(1 of 50"),
])
def test_labels_outside_the_declared_classes_are_refused_when_built(where: str, value: int, needle: str) -> None:
    """A data set that declares its classes (a YAML `module:function` loader, a built-in) with a
    label outside them: before, nothing looked until the loss indexed with it in round 1."""
    x, y, xs, ys = _tensors()
    labels = (y if where == "train" else ys).clone()
    labels[5] = value
    ds = _dataset(labels if where == "train" else None, labels if where == "test" else None)
    parts = [torch.arange(i * 50, (i + 1) * 50) for i in range(4)]
    with pytest.raises(ConfigError, match=needle):
        assemble(_config(), ds, parts, _model(), train=False)


def test_empty_clients_are_refused_naming_every_one() -> None:
    parts = [torch.arange(0, 100), torch.arange(0), torch.arange(100, 200), torch.arange(0)]
    with pytest.raises(ConfigError, match=r"clients \[1, 3\] hold no samples \(2 of 4 clients\)"):
        assemble(_config(), _dataset(), parts, _model(), train=False)
    x, y, xs, ys = _tensors()
    with pytest.raises(ConfigError, match=r"`clients`: clients \[1, 3\] hold no samples"):
        dpfl.FederatedData.from_tensors(x, y, xs, ys, clients=[range(100), [], range(100, 200), []])


def test_one_pass_checks_find_the_first_bad_value_and_pass_clean_data() -> None:
    x = torch.zeros(10, 3)
    check_finite_inputs(x, "inputs")
    check_finite_inputs(torch.full((4, 2), 3e38), "inputs")  # the sum overflows; every value is finite
    x[6, 2] = float("inf")
    x[8, 0] = float("nan")
    with pytest.raises(ConfigError, match=r"hold inf at sample 6, feature \[2\] \(2 of 10 samples"):
        check_finite_inputs(x, "inputs")
    check_labels(torch.tensor([0, 1, 2]), 3, "labels")
    with pytest.raises(ConfigError, match="integer class indices"):
        check_labels(torch.tensor([0.0, 1.0]), 3, "labels")


def test_delta_at_least_one_over_n_is_accepted_with_a_loud_notice() -> None:
    """δ = 0.2 with 5 clients (client-level DP): before, accepted silently."""
    x, y, xs, ys = _tensors()
    data = dpfl.FederatedData.from_tensors(x, y, xs, ys, partition={"kind": "iid", "num_clients": 5})
    said: list[str] = []
    res = _train(data, said, privacy={"delta": 0.2})
    assert res.status == "finished"
    assert any(m.startswith("δ = 0.2 is at least 1/n = 1/5 (n = 5 clients, the privacy unit)") for m in said), said
    with pytest.warns(UserWarning, match=r"δ = 0.2 is at least 1/n = 1/5"):  # notices going nowhere: a warning
        _train(data, privacy={"delta": 0.2})
    said.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(data, said, privacy={"delta": 0.19})  # below 1/5: nothing to say
    assert not any(m.startswith("δ") for m in said)


def test_record_level_delta_counts_samples() -> None:
    x, y, xs, ys = _tensors()
    data = dpfl.FederatedData.from_tensors(x, y, xs, ys, partition={"kind": "iid", "num_clients": 5})
    kw = {"options": {"noise_multiplier": 1.0, "clip_norm": 1.0}, "rounds": 1}
    with pytest.warns(UserWarning, match=r"1/n = 1/200 \(n = 200 records"):
        dpfl.account(_model(), data, "dp-sgd-fedavg", privacy={"delta": 0.005}, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dpfl.account(_model(), data, "dp-sgd-fedavg", privacy={"delta": 0.004}, **kw)  # 0.004 < 1/200
        dpfl.account(_model(), data, "dp-fedavg", privacy={"delta": 0.1}, **kw)  # client level: 0.1 < 1/5
    assert delta_notice(1.0 / 3400, 3400, "client") is not None  # exactly 1/n warns
    assert delta_notice(1e-5, 60000, "record") is None


def test_dpfl_run_prints_the_delta_notice(mnist_fixture: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {"name": "tiny", "seed": 3, "rounds": 1,
           "data": {"name": "mnist", "dir": str(mnist_fixture), "verify": False},
           "partition": {"kind": "iid", "num_clients": 10, "samples_per_client": 20},
           "model": {"name": "logistic"},
           "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 1.0}},
           "privacy": {"delta": 0.1}, "local": {"lr": 0.1, "batch_size": 10}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path), "--store", str(tmp_path / "s.sqlite")]) == 0
    err = capsys.readouterr().err
    assert "PRIVACY NOTICE: δ = 0.1 is at least 1/n = 1/10 (n = 10 clients, the privacy unit)" in err
