"""`dpfl export`: a tiny run's trained model, written as a state_dict or safetensors file, loads
with torch alone into a freshly built model and gives the logits of the stored parameters."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch.func import functional_call

from dpfl.cli import main
from dpfl.config import parse_config
from dpfl.errors import ConfigError, DataFormatError
from dpfl.export import export_model
from dpfl.models import build_model
from dpfl.sim.checkpoint import load_checkpoint
from dpfl.store import RunStore


def _config(data_dir: Path, **over: object) -> dict:
    cfg = {
        "name": "export-tiny",
        "seed": 5,
        "rounds": 2,
        "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 30},
        "model": {"name": "cnn-000", "options": {"channels": 3}},
        "local": {"lr": 0.05, "batch_size": 10, "optimizer": {"name": "sgd", "momentum": 0.5}},
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def finished_run(mnist_fixture: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    tmp = tmp_path_factory.mktemp("export")
    cfg = _config(mnist_fixture)
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    store = tmp / "runs" / "dpfl.sqlite"
    assert main(["run", str(path), "--store", str(store)]) == 0
    (record,) = RunStore(store).list()
    assert record.status == "finished"
    return store, record.run_id, cfg


def _stored_logits(store: Path, rid: str, x: torch.Tensor) -> torch.Tensor:
    state = load_checkpoint(store.parent / "models" / f"{rid}.pt")
    assert state is not None
    model = build_model("cnn-000", (1, 28, 28), 10, generator=torch.Generator().manual_seed(1), channels=3)
    with torch.no_grad():
        return functional_call(model, state["layout"].views(state["global_params"]), (x,))


def _fresh_model() -> torch.nn.Module:
    """Built with a different seed than the run: only loading can make its logits right."""
    return build_model("cnn-000", (1, 28, 28), 10, generator=torch.Generator().manual_seed(99), channels=3)


def test_state_dict_loads_with_torch_alone_and_gives_the_runs_logits(finished_run, tmp_path: Path) -> None:
    store, rid, _ = finished_run
    out = tmp_path / "model.pt"
    assert main(["export", rid[:8], "--store", str(store), "--format", "state_dict", "--out", str(out)]) == 0
    # a process that imports torch only reads it with torch.load's default weights_only=True
    probe = (
        "import sys, torch; sd = torch.load(sys.argv[1]); "
        "assert type(sd) is dict and all(isinstance(v, torch.Tensor) for v in sd.values()); "
        "assert not any(m == 'dpfl' or m.startswith('dpfl.') for m in sys.modules); "
        "print(sorted((k, list(v.shape)) for k, v in sd.items()))"
    )
    res = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, check=True)
    model = _fresh_model()
    assert res.stdout.strip() == str(sorted((k, list(v.shape)) for k, v in model.state_dict().items()))
    x = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(x)
    model.load_state_dict(torch.load(out))  # strict: exactly the model's keys
    with torch.no_grad():
        got = model(x)
    expected = _stored_logits(store, rid, x)
    assert torch.equal(got, expected)
    assert not torch.allclose(before, expected)  # the fresh model really was different


def _read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A reader written from the format's definition (independent of dpfl's writer)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    body = raw[8 + n :]
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
    out, covered = {}, 0
    for name, spec in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        start, end = spec["data_offsets"]
        assert start == covered  # contiguous, no holes, no overlap
        covered = end
        out[name] = torch.frombuffer(bytearray(body[start:end]), dtype=dtypes[spec["dtype"]]).reshape(spec["shape"])
    assert covered == len(body)
    return out, meta


def test_safetensors_file_holds_the_same_tensors(finished_run, tmp_path: Path) -> None:
    store, rid, cfg = finished_run
    sd_path = export_model(rid, store=store, format="state_dict", out=tmp_path / "a.pt")
    st_path = export_model(rid, store=store, format="safetensors", out=tmp_path / "a.safetensors")
    expected = torch.load(sd_path)
    got, meta = _read_safetensors(st_path)
    assert set(got) == set(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert meta["run_id"] == rid and meta["model"] == "cnn-000" and json.loads(meta["model_options"]) == {"channels": 3}
    assert (8 + struct.unpack("<Q", st_path.read_bytes()[:8])[0]) % 8 == 0  # aligned tensor bytes
    safetensors_torch = pytest.importorskip("safetensors.torch")  # the reference reader, when installed
    loaded = safetensors_torch.load_file(str(st_path))
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)


def test_default_out_is_the_run_id_in_the_current_directory(finished_run, tmp_path: Path, monkeypatch) -> None:
    store, rid, _ = finished_run
    monkeypatch.chdir(tmp_path)
    assert export_model(rid, store=store.resolve(), format="safetensors") == Path(f"{rid}.safetensors")
    assert (tmp_path / f"{rid}.safetensors").is_file()


def test_errors_are_one_line_naming_the_value(finished_run, tmp_path: Path, capsys) -> None:
    store, rid, cfg = finished_run
    assert main(["export", "ffffffffffff", "--store", str(store), "--format", "state_dict"]) == 2
    assert "no run with id 'ffffffffffff'" in capsys.readouterr().err
    assert main(["export", rid, "--store", str(store), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'onnx'" in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="Found 'onnx'"):
        export_model(rid, store=store, format="onnx")


def test_unfinished_run_and_missing_model_file(mnist_fixture: Path, tmp_path: Path, capsys) -> None:
    store_path = tmp_path / "runs" / "dpfl.sqlite"
    store = RunStore(store_path)
    config = parse_config(_config(mnist_fixture))
    store.start("aaaaaaaaaaaa", config.model_dump(mode="json"), {})
    assert main(["export", "aaaaaaaaaaaa", "--store", str(store_path), "--format", "state_dict"]) == 2
    err = capsys.readouterr().err
    assert "run aaaaaaaaaaaa is 'running', not finished" in err and err.count("\n") == 1
    store.finish("aaaaaaaaaaaa", "finished", {})
    assert main(["export", "aaaaaaaaaaaa", "--store", str(store_path), "--format", "state_dict"]) == 2
    err = capsys.readouterr().err
    assert "run aaaaaaaaaaaa: its model file" in err and "is missing" in err and err.count("\n") == 1


def test_model_file_of_another_run_is_refused(finished_run, tmp_path: Path) -> None:
    store, rid, cfg = finished_run
    other = tmp_path / "runs" / "dpfl.sqlite"
    copy = RunStore(other)
    copy.start("bbbbbbbbbbbb", RunStore(store).get(rid).config, {})
    copy.finish("bbbbbbbbbbbb", "finished", {})
    (other.parent / "models").mkdir(parents=True)
    (other.parent / "models" / "bbbbbbbbbbbb.pt").write_bytes((store.parent / "models" / f"{rid}.pt").read_bytes())
    with pytest.raises(DataFormatError, match=f"belongs to run {rid}"):
        export_model("bbbbbbbbbbbb", store=other, format="state_dict", out=tmp_path / "x.pt")
