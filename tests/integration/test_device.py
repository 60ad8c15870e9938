"""``device``: cpu, cuda, cuda:N or mps, in a config, on ``dpfl run --set`` and in ``dpfl.train``.

* a device name is checked when the config is parsed (``gpu`` is no device) and the device when
  the run is built, before any data is read (``cuda`` on a machine without CUDA, ``cuda:7`` on a
  machine with one GPU, ``mps`` off a Mac): one line naming it;
* the run id hashes ``device`` like every field (a GPU draws other noise streams than the CPU), so
  the ids of existing runs — all on the CPU, the default — are what they were;
* the path a GPU run takes runs here on a fake accelerator (``fake_accelerator``): ``cuda``
  resolves to a stand-in device on which every operation checks CUDA's device rules, so a tensor
  left on the CPU, or a draw from a CPU generator into an accelerator tensor, fails the run. Every
  private algorithm, both engines, the Python API, the CLI and a resumed run train there and end
  with the CPU run's parameters bit for bit (the stand-in computes on the CPU and draws the CPU's
  streams), and what a run returns is on the CPU.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_accelerator import FAKE, DeviceMismatch, FakeAccelerator, OnAccelerator, install
from test_account_equals_run import CASES, _config
from torch import nn

import dpfl
from dpfl.algorithms.base import Uploads
from dpfl.cli import main
from dpfl.config import load_config, parse_config, run_id
from dpfl.errors import ConfigError
from dpfl.rounds import build, build_experiment, run_experiment
from dpfl.rounds.cohort import InProcessCohort
from dpfl.sim.checkpoint import load_checkpoint
from dpfl.sim.vectorized import VectorizedEngine
from dpfl.store import RunStore

logging.getLogger("absl").setLevel(logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# run ids computed by dpfl before `dpfl.train(device=...)` existed (main at fac68e7), in another process
DEFAULT_ID = "ce2ad9050580"  # the built-in `default` config
FEDAVG_MNIST_ID = "aae47addc1da"  # the built-in `fedavg-mnist` config
DEFAULT_ON_CUDA_ID = "013d3e213394"  # `default` with `--set device=cuda`


# -------------------------------------------------------------------------------------------------
# Names, availability, run ids
# -------------------------------------------------------------------------------------------------

def test_the_run_ids_of_existing_configs_are_unchanged() -> None:
    assert run_id(load_config("default")) == DEFAULT_ID
    assert run_id(load_config("fedavg-mnist")) == FEDAVG_MNIST_ID
    assert run_id(load_config("default", ["device=cpu"])) == DEFAULT_ID  # the default, named
    assert run_id(load_config("default", ["device=cuda"])) == DEFAULT_ON_CUDA_ID  # another run, as before


@pytest.mark.parametrize("name", ["gpu", "GPU", "meta", "xla", "cuda:x", "cuda:-1", "", "cpu cuda"])
def test_a_malformed_device_name_is_refused_when_the_config_is_parsed(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"device": name})
    message = str(err.value)
    assert "`device`" in message and repr(name) in message and "'cuda:N'" in message and "\n" not in message


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "cuda:3", "mps"])
def test_a_device_name_parses_on_any_machine(name: str) -> None:
    # whether this machine has it is the build's question: a GPU run's config still reads and accounts
    assert parse_config({"device": name}).device == name


def _no_accelerators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def _one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.mark.parametrize(("name", "machine", "needle"), [
    ("cuda", _no_accelerators, "asks for a CUDA GPU but this machine has none"),
    ("cuda:0", _no_accelerators, "asks for a CUDA GPU but this machine has none"),
    ("mps", _no_accelerators, "Apple's MPS backend, which this machine does not have"),
    ("cuda:7", _one_gpu, "asks for GPU 7 but this machine has 1 (0..0)"),
])
def test_an_absent_device_is_one_line_naming_it_before_any_data_is_read(
        name: str, machine: Any, needle: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    machine(monkeypatch)
    missing = tmp_path / "no-data-here"  # reading the data would fail with another message
    cfg = parse_config({"device": name, "data": {"dir": str(missing)}})
    with pytest.raises(ConfigError, match="`device`") as err:
        build_experiment(cfg)
    assert repr(name) in str(err.value) and needle in str(err.value)
    store = tmp_path / "s.sqlite"
    assert main(["run", "default", "--set", f"device={name}", "--set", f"data.dir={missing}",
                 "--store", str(store)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and repr(name) in lines[0] and needle in lines[0], lines


def test_the_ray_engine_refuses_a_gpu_before_reading_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _one_gpu(monkeypatch)
    cfg = parse_config({"device": "cuda", "engine": "ray", "data": {"dir": str(tmp_path / "none")}})
    with pytest.raises(ConfigError, match="engine 'ray' trains on CPU actors; `device` must be 'cpu'"):
        build_experiment(cfg)


class SmallCNN(nn.Module):
    """A convolution, a GroupNorm and a linear head (the cohort's grouped-convolution path)."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.conv(x)))
        return self.head(nn.functional.avg_pool2d(h, 2).flatten(1))


def _api_data() -> dpfl.FederatedData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(240, 1, 8, 8, generator=g)
    y = (x.reshape(240, -1) @ torch.randn(64, 4, generator=g)).argmax(1)
    return dpfl.FederatedData.from_tensors(x[:200], y[:200], x[200:], y[200:],
                                           partition={"kind": "iid", "num_clients": 6})


API = {"options": {"noise_multiplier": 1.0, "clip_norm": 1.0}, "rounds": 2,
       "sampling": {"kind": "poisson", "sample_rate": 0.5}, "local": {"lr": 0.1, "batch_size": 16}, "notice": None}


def test_train_refuses_an_absent_device_before_anything_is_built(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_accelerators(monkeypatch)
    torch.manual_seed(0)
    store = tmp_path / "s.sqlite"
    for name in ("cuda", torch.device("cuda", 1), "mps"):
        with pytest.raises(ConfigError, match="`device`") as err:
            dpfl.train(SmallCNN(), _api_data(), "dp-fedavg", store=store, device=name, **API)  # type: ignore[arg-type]
        assert repr(str(name)) in str(err.value)
    for bad in ("gpu", 0, None):
        with pytest.raises(ConfigError, match="`device`"):
            dpfl.train(SmallCNN(), _api_data(), "dp-fedavg", store=store, device=bad, **API)  # type: ignore[arg-type]
    assert not store.exists()  # refused before the run was registered


def test_account_takes_trains_arguments_and_plans_a_gpu_run_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_accelerators(monkeypatch)
    torch.manual_seed(0)
    model, data = SmallCNN(), _api_data()
    kwargs = {k: v for k, v in API.items() if k != "notice"}
    on_cpu = dpfl.account(model, data, "dp-fedavg", **kwargs)
    on_gpu = dpfl.account(model, data, "dp-fedavg", device="cuda", **kwargs)  # type: ignore[arg-type]
    assert on_cpu.privacy is not None and on_gpu.privacy is not None
    assert on_gpu.privacy.to_dict() == on_cpu.privacy.to_dict()
    with pytest.raises(ConfigError, match="`device`"):
        dpfl.account(model, data, "dp-fedavg", device="gpu", **kwargs)  # type: ignore[arg-type]


def test_train_takes_a_device_and_the_default_is_the_cpu(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, data = SmallCNN(), _api_data()
    plain = dpfl.train(model, data, "dp-fedavg", store=None, **API)
    named = dpfl.train(model, data, "dp-fedavg", store=None, device="cpu", **API)
    as_torch = dpfl.train(model, data, "dp-fedavg", store=None, device=torch.device("cpu"), **API)
    assert plain.run_id == named.run_id == as_torch.run_id
    assert plain.final["params_sha256"] == named.final["params_sha256"] == as_torch.final["params_sha256"]


# -------------------------------------------------------------------------------------------------
# The fake accelerator: the harness itself
# -------------------------------------------------------------------------------------------------

def test_the_fake_accelerator_fails_a_tensor_on_the_wrong_device() -> None:
    """The checks a GPU makes, made here: without them the tests below could not fail."""
    with FakeAccelerator() as mode:
        x = torch.ones(3, 2).to(FAKE)
        assert isinstance(x, OnAccelerator) and x.device == FAKE
        with pytest.raises(DeviceMismatch, match="same device"):
            _ = x + torch.ones(3, 2)  # a CPU operand
        with pytest.raises(DeviceMismatch, match="same device"):
            _ = torch.ones(2, 2) @ x.T
        with pytest.raises(DeviceMismatch, match="generator"):
            torch.randn(3, generator=torch.Generator().manual_seed(0), device=FAKE)
        with pytest.raises(DeviceMismatch, match="generator"):
            torch.randn(3, 2, generator=torch.Generator().manual_seed(0), out=torch.empty(3, 2, device=FAKE))
        with pytest.raises(DeviceMismatch, match="indices"):
            _ = torch.ones(3)[torch.tensor([0, 1]).to(FAKE)]
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()
        # what CUDA allows: 0-dim CPU operands, CPU index tensors, copies and transfers
        assert float((x * torch.tensor(2.0)).sum()) == 12.0
        assert x[torch.tensor([0, 2])].shape == (2, 2)
        host = x.cpu()
        assert type(host) is torch.Tensor and host.device.type == "cpu" and x.tolist() == host.tolist()
        torch.zeros(3, 2).copy_(x)
        assert mode.ops["acc"] > 0


# -------------------------------------------------------------------------------------------------
# Training on the fake accelerator
# -------------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _autograd_path_on_the_cpu_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU reference runs take the path a GPU takes: the vectorized engine's chunked plain-SGD
    kernel runs on the CPU only, and its numbers equal the autograd path's up to float order, not
    bit for bit (that equality is `tests/unit/sim/test_sgd_kernel.py`'s); here every run of the
    vectorized engine trains through autograd, so a GPU run must give the CPU run's bits."""
    monkeypatch.setattr(VectorizedEngine, "_kernel_for", lambda self, terms, device: None)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeAccelerator:
    """This machine has one CUDA GPU, and ``cuda`` resolves to :data:`FAKE` (the mode is
    returned; a test enters it around what a GPU would run)."""
    _one_gpu(monkeypatch)
    real = build.check_device
    monkeypatch.setattr(build, "check_device", lambda name: FAKE if real(name).type == "cuda" else real(name))
    mode = FakeAccelerator()
    install(monkeypatch, mode)
    return mode


@pytest.fixture
def engine_outputs(monkeypatch: pytest.MonkeyPatch) -> list[torch.device]:
    """The devices of every cohort's global parameters and trained local parameters."""
    seen: list[torch.device] = []
    real = InProcessCohort.collect

    real_blocks = VectorizedEngine.train_blocks

    def collect(self: InProcessCohort, params: torch.Tensor, info: Any, emit: Any) -> Any:
        out = real(self, params, info, emit)
        seen.append(params.device)
        if not isinstance(out.payload, Uploads):  # a streamed round's blocks are seen by train_blocks
            seen.append(out.payload.params.device)
        return out

    def train_blocks(self: VectorizedEngine, *args: Any, **kwargs: Any) -> Any:
        for ids, local in real_blocks(self, *args, **kwargs):
            seen.append(local.params.device)
            yield ids, local

    monkeypatch.setattr(InProcessCohort, "collect", collect)
    monkeypatch.setattr(VectorizedEngine, "train_blocks", train_blocks)
    return seen


def _assert_on_the_host(path: str) -> None:
    saved = load_checkpoint(path)
    params = saved["global_params"]
    assert type(params) is torch.Tensor and params.device.type == "cpu"


EXTRA_CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "fedavg-cnn-adam": ("fedavg", {}, {"model": {"name": "cnn-mnist-small"}, "local": {
        "lr": 0.01, "batch_size": 10, "optimizer": {"name": "adam"}}}),
    "nbafl-prox": ("nbafl", {"epsilon": 2.0, "clip_norm": 10.0, "downlink_noise": "none", "prox_mu": 0.1}, {}),
    "fedavg-momentum": ("fedavg", {}, {"local": {"lr": 0.1, "batch_size": 10, "optimizer": {"momentum": 0.9,
                                                                                          "weight_decay": 1e-4}}}),
}
ALL_CASES = {**CASES, **EXTRA_CASES}


# every case on the vectorized engine; on the sequential one, the cases that reach its own paths:
# DP-SGD's noise, per-sample clipping (UDP), the proximal term (NbAFL), the final gradient (LUS), Adam
SEQUENTIAL = ("dp-fedavg", "dp-fedavg-blur-lus", "dp-sgd-fedavg", "udp", "nbafl-prox", "fedavg-cnn-adam")


@pytest.mark.parametrize(("case", "engine"),
                         [(c, "vectorized") for c in ALL_CASES] + [(c, "sequential") for c in SEQUENTIAL])
def test_every_algorithm_trains_on_the_accelerator_to_the_cpu_result(
        case: str, engine: str, fake_cuda: FakeAccelerator, engine_outputs: list[torch.device],
        mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _config(*ALL_CASES[case], mnist_fixture).model_copy(update={"engine": engine})
    on_cpu = run_experiment(cfg, RunStore(tmp_path / "cpu.sqlite"))
    engine_outputs.clear()
    gpu_cfg = cfg.model_copy(update={"device": "cuda"})
    with fake_cuda:
        exp = build_experiment(gpu_cfg)
        placed = [exp.data.x, exp.data.y, exp.init_params, exp.x_test, exp.y_test, *exp.problem.module.parameters()]
        assert all(t.device == FAKE for t in placed)
        on_gpu = run_experiment(gpu_cfg, RunStore(tmp_path / "gpu.sqlite"), experiment=exp)
    assert on_gpu.status == on_cpu.status == "finished", on_gpu.final
    assert engine_outputs and set(engine_outputs) == {FAKE}
    assert on_gpu.run_id != on_cpu.run_id  # another device, another run
    assert on_gpu.final["params_sha256"] == on_cpu.final["params_sha256"]
    assert on_gpu.final.get("privacy") == on_cpu.final.get("privacy")  # the ledger is the CPU's business
    _assert_on_the_host(on_gpu.final["model_path"])


def test_train_on_the_accelerator_returns_the_cpu_runs_model_on_the_cpu(
        fake_cuda: FakeAccelerator, engine_outputs: list[torch.device], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, data = SmallCNN(), _api_data()
    on_cpu = dpfl.train(model, data, "dp-fedavg", store=tmp_path / "s.sqlite", **API)
    engine_outputs.clear()
    with fake_cuda:
        on_gpu = dpfl.train(model, data, "dp-fedavg", store=tmp_path / "s.sqlite", device="cuda", **API)
    assert on_gpu.status == "finished" and engine_outputs and set(engine_outputs) == {FAKE}
    assert on_gpu.run_id != on_cpu.run_id
    assert on_gpu.final["params_sha256"] == on_cpu.final["params_sha256"]
    for (name, p), (_, q) in zip(on_gpu.model.named_parameters(), on_cpu.model.named_parameters(), strict=True):
        assert type(p.data) is torch.Tensor and p.device.type == "cpu", name  # the user's model's device
        assert torch.equal(p, q), name


def test_dpfl_run_set_device_cuda_trains_there_and_exports_cpu_weights(
        fake_cuda: FakeAccelerator, engine_outputs: list[torch.device], mnist_fixture: Path, tmp_path: Path) -> None:
    from dpfl.export import exported_state_dict

    store = tmp_path / "s.sqlite"
    common = ["--set", f"data.dir={mnist_fixture}", "--set", "data.verify=false", "--set", "rounds=2",
              "--set", "partition.num_clients=5", "--set", "sampling.kind=all", "--store", str(store)]
    assert main(["run", "fedavg-mnist", *common]) == 0
    engine_outputs.clear()
    with fake_cuda:
        assert main(["run", "fedavg-mnist", "--set", "device=cuda", *common]) == 0
    assert engine_outputs and set(engine_outputs) == {FAKE}
    runs = RunStore(store).list()
    assert {r.config["device"] for r in runs} == {"cpu", "cuda"}
    finals = {r.config["device"]: r.result or {} for r in runs}
    assert finals["cuda"]["params_sha256"] == finals["cpu"]["params_sha256"]
    gpu_run = next(r.run_id for r in runs if r.config["device"] == "cuda")
    _, state, _ = exported_state_dict(gpu_run, store)
    assert state and all(type(t) is torch.Tensor and t.device.type == "cpu" for t in state.values())


def test_a_run_resumed_on_the_accelerator_ends_as_the_uninterrupted_cpu_run(
        fake_cuda: FakeAccelerator, mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _config(*CASES["pmidp-fl-adaptive"], mnist_fixture).model_copy(update={"checkpoint_every": 1})
    on_cpu = run_experiment(cfg, RunStore(tmp_path / "cpu.sqlite"))
    gpu_cfg = cfg.model_copy(update={"device": "cuda"})
    store = RunStore(tmp_path / "gpu.sqlite")

    def crash(done: int, total: int, metrics: dict[str, Any], elapsed: float) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with fake_cuda:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(gpu_cfg, store, progress=crash)
        resumed = run_experiment(gpu_cfg, store)
    assert resumed.status == "finished" and resumed.final["params_sha256"] == on_cpu.final["params_sha256"]
    assert resumed.final["privacy"] == on_cpu.final["privacy"]
