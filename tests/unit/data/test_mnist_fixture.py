"""The committed MNIST-format fixture is what its script writes, and reads as MNIST."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import torch

from dpfl.data import load_dataset

SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "make_mnist_fixture.py"


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_mnist_fixture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_are_the_scripts_output(mnist_fixture: Path) -> None:
    for name, content in _script().fixture_files().items():
        committed = gzip.decompress((mnist_fixture / "mnist" / f"{name}.gz").read_bytes())
        assert committed == content, name


def test_fixture_reads_as_mnist_with_balanced_labels(mnist_fixture: Path) -> None:
    data = load_dataset("mnist", mnist_fixture, verify=False)
    assert tuple(data.x_train.shape) == (1000, 1, 28, 28) and tuple(data.x_test.shape) == (200, 1, 28, 28)
    assert data.y_train.bincount().tolist() == [100] * 10
    assert data.y_test.bincount().tolist() == [20] * 10
    # every class differs from every other on average (the drawings are distinct)
    means = torch.stack([data.x_train[data.y_train == k].mean(0).flatten() for k in range(10)])
    gaps = torch.cdist(means, means) + torch.eye(10) * 1e9
    assert float(gaps.min()) > 1.0
