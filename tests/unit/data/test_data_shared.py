"""The real data sets in ../shared/data (skipped with a reason where absent).

Each data set is loaded once per module (MNIST ≈ 1.5 s, Census-Income ≈ 5 s on the 2-core
machine); the checks are on the loaded tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpfl.data import (
    FederatedDataset,
    fetch,
    load_dataset,
    partition_k_classes,
    partition_size_groups,
)
from dpfl.data.checksums import ChecksumRegistry, verify_file
from dpfl.data.layout import locate

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(scope="module")
def loaded() -> dict[str, FederatedDataset]:
    """Data set name → data set, filled lazily (each loaded once per module)."""
    return {}


def _load(kit: Any, loaded: dict[str, FederatedDataset], name: str, folder: str) -> FederatedDataset:
    kit.shared_folder(folder)
    if name not in loaded:
        loaded[name] = load_dataset(name, kit.shared_data)
    return loaded[name]


def _check_images(ds: FederatedDataset, n_train: int, n_test: int) -> None:
    assert ds.x_train.shape == (n_train, 1, 28, 28) and ds.x_test.shape == (n_test, 1, 28, 28)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 10 and ds.groups_train is None
    assert float(ds.x_train.mean()) == pytest.approx(0.0, abs=1e-4)
    assert float(ds.x_train.std()) == pytest.approx(1.0, abs=1e-4)
    assert int(ds.y_train.min()) == 0 and int(ds.y_train.max()) == 9


def test_pins_match_the_shared_copies(kit: Any) -> None:
    registry = ChecksumRegistry.default()
    checked = 0
    for name in ("mnist", "fashion-mnist", "adult", "census-income"):
        pins = registry.dataset(name)
        folder = kit.shared_data / pins.folder
        if not folder.is_dir():
            continue
        for pin in pins.files:
            path = locate(folder, pin)
            assert path is not None, f"{pin.relpath} absent from {folder}"
            assert verify_file(path, pin).ok
            checked += 1
    if not checked:
        kit.shared_folder("mnist")  # skips, or fails under CI


def test_mnist(kit: Any, loaded: dict[str, FederatedDataset]) -> None:
    ds = _load(kit, loaded, "mnist", "mnist")
    _check_images(ds, 60000, 10000)
    counts = torch.bincount(ds.y_train, minlength=10).tolist()
    assert sum(counts) == 60000 and min(counts) == 5421 and max(counts) == 6742
    assert ds.normalization is not None
    assert ds.normalization[0][0] == pytest.approx(0.1307, abs=1e-4)  # the familiar MNIST statistics
    assert ds.normalization[1][0] == pytest.approx(0.3081, abs=1e-4)


def test_fashion_mnist_is_exactly_balanced(kit: Any, loaded: dict[str, FederatedDataset]) -> None:
    ds = _load(kit, loaded, "fashion-mnist", "fashion-mnist")
    _check_images(ds, 60000, 10000)
    assert torch.bincount(ds.y_train, minlength=10).tolist() == [6000] * 10
    assert torch.bincount(ds.y_test, minlength=10).tolist() == [1000] * 10


def _check_tabular(ds: FederatedDataset, n_train: int, n_test: int, positives: tuple[int, int]) -> None:
    assert ds.x_train.shape[0] == n_train and ds.x_test.shape[0] == n_test
    assert ds.input_shape == (ds.x_train.shape[1],) and ds.num_classes == 2
    assert ds.feature_names is not None and len(ds.feature_names) == ds.x_train.shape[1]
    assert torch.isfinite(ds.x_train).all() and torch.isfinite(ds.x_test).all()  # no NaN anywhere
    assert (ds.x_train.std(dim=0) > 0).all()  # no constant feature
    assert (int(ds.y_train.sum()), int(ds.y_test.sum())) == positives
    assert set(ds.y_train.unique().tolist()) == {0, 1}


def test_adult(kit: Any, loaded: dict[str, FederatedDataset]) -> None:
    ds = _load(kit, loaded, "adult", "adult")
    _check_tabular(ds, 32561, 16281, (7841, 3846))
    assert ds.feature_names is not None and "fnlwgt" not in ds.feature_names
    signed = load_dataset("adult", kit.shared_data, labels="signed")
    assert set(signed.y_train.unique().tolist()) == {-1, 1}
    assert torch.equal(signed.y_train, ds.y_train * 2 - 1)


def test_census_income(kit: Any, loaded: dict[str, FederatedDataset]) -> None:
    ds = _load(kit, loaded, "census-income", "census-income-kdd")
    _check_tabular(ds, 199523, 99762, (12382, 6186))
    assert ds.feature_names is not None
    assert not any(n.startswith("instance weight") for n in ds.feature_names)
    numeric = [n for n in ds.feature_names if "=" not in n]
    assert len(numeric) == 7


def test_papers_partitions_on_real_mnist_labels(kit: Any, loaded: dict[str, FederatedDataset]) -> None:
    y = _load(kit, loaded, "mnist", "mnist").y_train.numpy()
    parts = partition_k_classes(y, num_clients=50, classes_per_client=4, samples_per_client=800, seed=0)
    for p in parts:
        labels, counts = np.unique(y[p], return_counts=True)
        assert len(labels) == 4 and (counts == 200).all()
    sizes = [len(p) for p in partition_size_groups(len(y), num_clients=50, seed=0)]
    assert sorted(set(sizes)) == [400, 600, 800, 1000, 1200]


def test_fetch_from_the_shared_directory(tmp_path: Path, kit: Any) -> None:
    kit.shared_folder("mnist")
    result = fetch("mnist", tmp_path, local_dirs=[kit.shared_data], sources=[])
    assert len(result.files) == 4 and all(f.verified for f in result.files)
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == sorted(
        ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz"]
    )
