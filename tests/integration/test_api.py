"""The Python API on a model and data dpfl has never seen: train, account, resume, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import dpfl
from dpfl.errors import ConfigError


class ResidualCNN(nn.Module):
    """A small residual CNN defined here (not in dpfl's model zoo)."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 6, 3, padding=1)
        self.norm = nn.GroupNorm(3, 6)
        self.conv = nn.Conv2d(6, 6, 3, padding=1)
        self.head = nn.Linear(6 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.stem(x)))
        h = h + torch.relu(self.conv(h))  # the residual connection
        h = nn.functional.avg_pool2d(h, 2)
        return self.head(h.flatten(1))


def _data(n_train: int = 400, n_test: int = 100, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_train + n_test, 1, 8, 8, generator=g)
    w = torch.randn(64, 4, generator=g)
    y = (x.reshape(x.shape[0], -1) @ w).argmax(1)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


DP = {"noise_multiplier": 0.8, "clip_norm": 1.0}
POISSON = {"kind": "poisson", "sample_rate": 0.5}
LOCAL = {"lr": 0.1, "epochs": 1, "batch_size": 16}


def test_a_residual_cnn_trains_privately_and_its_certificate_equals_account(tmp_path: Path) -> None:
    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 10})
    torch.manual_seed(1)
    model = ResidualCNN()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    kwargs = {"options": DP, "rounds": 4, "sampling": POISSON, "local": LOCAL}
    res = dpfl.train(model, data, "dp-fedavg", store=tmp_path / "s.sqlite", notice=None, **kwargs)
    assert res.status == "finished" and res.rounds == 4 and len(res.history) == 4
    # the user's model is untouched; the result's is trained and is the same class
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert isinstance(res.model, ResidualCNN)
    assert any(not torch.equal(before[n], p) for n, p in res.model.named_parameters())
    # the returned model is the stored final model: its test accuracy is the run's
    x_test, y_test = data.x_test, data.y_test
    with torch.no_grad():
        acc = float((res.model(x_test).argmax(1) == y_test).float().mean())
    assert acc == pytest.approx(res.test_accuracy, abs=1e-6)
    plan = dpfl.account(model, data, "dp-fedavg", **kwargs)
    assert plan.rounds == 4 and plan.privacy is not None and res.privacy is not None
    for obs in ("server", "public"):
        a, b = res.certified_epsilon(obs), plan.privacy.epsilon(obs)
        assert a is not None and b is not None and math.isfinite(a)
        assert a == pytest.approx(b, rel=1e-9)
    assert res.claimed_epsilon == pytest.approx(plan.privacy.claimed_max, rel=1e-9)


def test_the_same_call_returns_the_stored_run_and_other_data_is_another_run(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    torch.manual_seed(2)
    model = ResidualCNN()
    first = dpfl.train(model, data, "fedavg", rounds=2, local=LOCAL, store=store, notice=None)
    again = dpfl.train(model, data, "fedavg", rounds=2, local=LOCAL, store=store, notice=None)
    assert again.run_id == first.run_id and again.final["params_sha256"] == first.final["params_sha256"]
    for (_, p), (_, q) in zip(first.model.named_parameters(), again.model.named_parameters(), strict=True):
        assert torch.equal(p, q)
    other = dpfl.FederatedData.from_tensors(*_data(seed=5), partition={"kind": "iid", "num_clients": 5})
    third = dpfl.train(model, other, "fedavg", rounds=2, local=LOCAL, store=store, notice=None)
    assert third.run_id != first.run_id


def test_explicit_client_indices_are_the_partition(tmp_path: Path) -> None:
    x, y, xt, yt = _data(n_train=60)
    clients = {0: range(0, 10), 1: range(10, 40), 2: range(40, 60)}
    data = dpfl.FederatedData.from_tensors(x, y, xt, yt, clients=clients)
    plan = dpfl.account(ResidualCNN(), data, "nbafl", options={"epsilon": 2.0, "clip_norm": 10.0}, rounds=2,
                        local=LOCAL)
    assert plan.privacy is not None and plan.privacy.certified is not None
    assert data.num_clients == 3
    assert sorted(plan.privacy.client_epsilons_rdp["server"]) == [0, 1, 2]


@pytest.mark.parametrize(("clients", "message"), [
    ({0: [0, 1, 2], 1: [2, 3]}, "held by 2 clients"),
    ({0: [0, 1], 1: [2, 3]}, "held by no client"),
    ({0: [0, 1], 2: [2, 3]}, "ids must be 0..1"),
    ({0: [0, 99]}, "outside the"),
])
def test_a_partition_that_loses_or_duplicates_samples_is_refused(clients: dict, message: str) -> None:
    x, y, xt, yt = _data(n_train=5)
    with pytest.raises(ConfigError, match=message):
        dpfl.FederatedData.from_tensors(x, y, xt, yt, clients=clients)


def test_a_model_whose_output_does_not_match_the_classes_is_refused(tmp_path: Path) -> None:
    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    with pytest.raises(ConfigError, match=r"returns outputs of shape \(2, 3\).*4 classes"):
        dpfl.train(ResidualCNN(classes=3), data, "fedavg", rounds=1, store=tmp_path / "s.sqlite", notice=None)


def test_batchnorm_is_refused_with_groupnorm_suggested(tmp_path: Path) -> None:
    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 4))
    with pytest.raises(ConfigError, match="GroupNorm"):
        dpfl.train(model, data, "dp-fedavg", options=DP, rounds=1, store=tmp_path / "s.sqlite", notice=None)


def test_bad_settings_get_the_cli_errors(tmp_path: Path) -> None:
    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    with pytest.raises(ConfigError, match="unknown algorithm 'dp-fedvag'"):
        dpfl.account(ResidualCNN(), data, "dp-fedvag")
    with pytest.raises(ConfigError, match="delta"):
        dpfl.account(ResidualCNN(), data, "dp-fedavg", options=DP, privacy={"delta": 2.0})
    with pytest.raises(ConfigError, match="clients_per_round"):
        dpfl.account(ResidualCNN(), data, "dp-fedavg", options=DP, sampling={"kind": "fixed", "clients_per_round": 9})
    with pytest.raises(ConfigError, match="noise_multplier"):
        dpfl.account(ResidualCNN(), data, "dp-fedavg", options={"noise_multplier": 1.0, "clip_norm": 1.0})
    # UDP's sensitivity assumes plain full-batch gradient steps: Adam is refused, naming both
    with pytest.raises(ConfigError, match=r"udp.*adam|adam.*udp"):
        dpfl.account(ResidualCNN(), data, "udp", options={"epsilon": 8.0, "clip_norm": 1.0},
                     local={"lr": 0.1, "batch_size": None, "optimizer": {"name": "adam"}})


def test_a_users_model_and_data_by_reference_in_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`model.name: "module:function"` and `data.name: "module:function"` run through `dpfl run`."""
    import yaml

    from dpfl.cli import main
    from dpfl.store import RunStore

    (tmp_path / "userpkg_ref.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "from dpfl.data import FederatedDataset\n"
        "def make_net(input_shape, num_classes, width=8):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.Tanh(), nn.Linear(width, num_classes))\n"
        "def load(directory):\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    x = torch.randn(300, 1, 8, 8, generator=g)\n"
        "    y = (x.flatten(1) @ torch.randn(64, 3, generator=g)).argmax(1)\n"
        "    return FederatedDataset(name='user', x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:],\n"
        "                            num_classes=3, input_shape=(1, 8, 8))\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = {"name": "by-reference", "rounds": 2,
           "data": {"name": "userpkg_ref:load", "dir": str(tmp_path), "verify": False},
           "partition": {"kind": "iid", "num_clients": 6},
           "model": {"name": "userpkg_ref:make_net", "options": {"width": 5}},
           "algorithm": {"name": "dp-fedavg", "options": DP}, "sampling": POISSON, "local": LOCAL}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    store = tmp_path / "s.sqlite"
    assert main(["run", str(path), "--store", str(store)]) == 0
    (rec,) = RunStore(store).list()
    assert rec.status == "finished" and rec.result["privacy"]["certified"] is not None
    assert main(["account", str(path), "--json"]) == 0
    # a bad reference is one clear error naming it
    cfg["model"] = {"name": "userpkg_ref:no_such_net"}
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert main(["run", str(path), "--store", str(store)]) == 2


def test_an_api_run_exports_from_the_cli_and_loads_into_the_users_model(tmp_path: Path) -> None:
    from dpfl.cli import main

    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    torch.manual_seed(4)
    res = dpfl.train(ResidualCNN(), data, "dp-fedavg", options=DP, rounds=2, sampling=POISSON, local=LOCAL,
                     store=tmp_path / "s.sqlite", notice=None)
    out = tmp_path / "model.pt"
    assert main(["export", res.run_id, "--store", str(tmp_path / "s.sqlite"), "--out", str(out)]) == 0
    fresh = ResidualCNN()
    fresh.load_state_dict(torch.load(out))  # torch alone, weights_only by default
    with torch.no_grad():
        assert torch.equal(fresh(data.x_test), res.model(data.x_test))


def test_a_user_loss_trains_and_is_part_of_the_run(tmp_path: Path) -> None:
    def smoothed(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1),
                                           reduction="none", label_smoothing=0.1).reshape(targets.shape)

    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    torch.manual_seed(6)
    model = ResidualCNN()
    kw = {"rounds": 2, "local": LOCAL, "store": tmp_path / "s.sqlite", "notice": None}
    plain = dpfl.train(model, data, "fedavg", **kw)
    custom = dpfl.train(model, data, "fedavg", loss=smoothed, **kw)
    assert custom.run_id != plain.run_id and custom.final["params_sha256"] != plain.final["params_sha256"]
    # the stored test loss is the user's loss of the final model
    with torch.no_grad():
        expected = float(smoothed(custom.model(data.x_test), data.y_test).mean())
    assert custom.final["test_loss"] == pytest.approx(expected, rel=1e-5)


def test_a_stored_result_says_it_is_one_and_store_none_stores_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    torch.manual_seed(3)
    model = ResidualCNN()
    said: list[str] = []
    first = dpfl.train(model, data, "fedavg", rounds=2, local=LOCAL, notice=said.append)  # the default store
    assert not any("stored result" in m for m in said)
    again = dpfl.train(model, data, "fedavg", rounds=2, local=LOCAL, notice=said.append)
    assert again.final["params_sha256"] == first.final["params_sha256"]
    assert any(m.startswith(f"stored result of run {first.run_id}") and "restart=True" in m for m in said)
    # store=None: no store at all — trained (not the stored result), nothing written here
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    said.clear()
    fresh = dpfl.train(model, data, "fedavg", rounds=2, local=LOCAL, store=None, notice=said.append)
    assert fresh.status == "finished" and len(fresh.history) == 2
    assert not any("stored result" in m for m in said) and "model_path" not in fresh.final
    assert fresh.final["params_sha256"] == first.final["params_sha256"]  # the same run, trained again
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    for (_, p), (_, q) in zip(first.model.named_parameters(), fresh.model.named_parameters(), strict=True):
        assert torch.equal(p, q)


def test_editing_forward_or_the_loss_is_another_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run id covers the model's and the loss's code: an edited ``forward`` (same weights, same
    repr, same class name) or an edited loss trains again instead of returning the stored run."""
    import importlib
    import sys

    pkg = tmp_path / "usermod"
    pkg.mkdir()
    src = ("import torch\nfrom torch import nn\n\n"
           "class Net(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(64, 4)\n\n"
           "    def forward(self, x):\n        return self.fc(x.flatten(1)){}\n")
    (pkg / "netdef.py").write_text(src.format(""))
    monkeypatch.syspath_prepend(str(pkg))
    import netdef  # type: ignore[import-not-found]

    data = dpfl.FederatedData.from_tensors(*_data(), partition={"kind": "iid", "num_clients": 5})
    store = tmp_path / "s.sqlite"
    torch.manual_seed(4)
    model = netdef.Net()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    said: list[str] = []
    first = dpfl.train(model, data, "fedavg", rounds=1, local=LOCAL, store=store, notice=said.append)
    (pkg / "netdef.py").write_text(src.format(" * 2.0"))  # the same weights, repr and name
    importlib.reload(netdef)
    edited = netdef.Net()
    edited.load_state_dict(weights)
    again = dpfl.train(edited, data, "fedavg", rounds=1, local=LOCAL, store=store, notice=said.append)
    assert again.run_id != first.run_id and not any("stored result" in m for m in said)
    sys.modules.pop("netdef", None)

    # a loss with the same qualified name but other code is another run
    def ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1),
                                           reduction="none").reshape(y.shape)

    first_loss = dpfl.train(model, data, "fedavg", rounds=1, local=LOCAL, store=store, notice=None, loss=ce)

    def ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: F811 - the edited loss, same name
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none",
                                           label_smoothing=0.1).reshape(y.shape)

    second_loss = dpfl.train(model, data, "fedavg", rounds=1, local=LOCAL, store=store, notice=None, loss=ce)
    assert first_loss.run_id != second_loss.run_id
    # code without a source file (exec) is hashed by its compiled code, which also changes
    from dpfl.api import _code_digest

    one: dict = {}
    two: dict = {}
    exec("def f(x):\n    return x + 1\n", one)  # noqa: S102 - the point of the test
    exec("def f(x):\n    return x + 2\n", two)  # noqa: S102
    assert _code_digest(one["f"]) != _code_digest(two["f"])
