"""load_dataset on tiny files in each format, checksum injection, and the registry's errors."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpfl.data import DATASETS, FederatedDataset, load_dataset
from dpfl.data.checksums import ChecksumRegistry
from dpfl.data.cifar import encode_cifar_batch
from dpfl.data.idx import encode_idx, write_idx
from dpfl.data.leaf import encode_leaf_json
from dpfl.errors import ConfigError, DataFormatError

IDX_NAMES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def _tiny_idx_folder(folder: Path, *, raw: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        IDX_NAMES[0]: rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
        IDX_NAMES[1]: np.array([0, 1, 2, 3, 4, 9], dtype=np.uint8),
        IDX_NAMES[2]: rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
        IDX_NAMES[3]: np.array([5, 6], dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        write_idx(folder / (name.removesuffix(".gz") if raw else name), array)
    return arrays


def _idx_registry(kit: Any, arrays: dict[str, np.ndarray]) -> ChecksumRegistry:
    files = {name: kit.pin_of(encode_idx(a), gzip_pin=True) for name, a in arrays.items()}
    return kit.registry({"mnist": {"folder": "mnist", "files": files}})


def test_registry_names() -> None:
    assert list(DATASETS) == ["mnist", "fashion-mnist", "cifar10", "femnist", "adult", "census-income"]


def test_unknown_name_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown data set 'mnits'; valid names: mnist, fashion-mnist, cifar10"):
        load_dataset("mnits", tmp_path)


@pytest.mark.parametrize("raw", [False, True])
def test_tiny_mnist_with_injected_checksums(tmp_path: Path, kit: Any, raw: bool) -> None:
    arrays = _tiny_idx_folder(tmp_path / "mnist", raw=raw)
    ds = load_dataset("mnist", tmp_path, checksums=_idx_registry(kit, arrays))
    assert isinstance(ds, FederatedDataset)
    assert ds.x_train.shape == (6, 1, 28, 28) and ds.x_train.dtype == torch.float32
    assert ds.y_train.dtype == torch.int64 and ds.y_train.tolist() == [0, 1, 2, 3, 4, 9]
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 10 and ds.groups_train is None
    # Scaled to [0, 1], then normalized with the *training* statistics (also applied to test).
    train01 = arrays[IDX_NAMES[0]] / 255.0
    mean, std = train01.mean(), train01.std()
    assert ds.normalization is not None
    assert ds.normalization[0][0] == pytest.approx(mean) and ds.normalization[1][0] == pytest.approx(std)
    np.testing.assert_allclose(ds.x_train.numpy()[:, 0], (train01 - mean) / std, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ds.x_test.numpy()[:, 0], (arrays[IDX_NAMES[2]] / 255.0 - mean) / std,
                               rtol=1e-5, atol=1e-5)


def test_dataset_folder_itself_is_accepted(tmp_path: Path, kit: Any) -> None:
    arrays = _tiny_idx_folder(tmp_path / "mnist")
    ds = load_dataset("mnist", tmp_path / "mnist", checksums=_idx_registry(kit, arrays))
    assert ds.num_train == 6 and ds.num_test == 2


def test_checksum_mismatch_names_file_and_fetch_command(tmp_path: Path, kit: Any) -> None:
    arrays = _tiny_idx_folder(tmp_path / "mnist")
    registry = _idx_registry(kit, arrays)
    write_idx(tmp_path / "mnist" / IDX_NAMES[1], np.array([0, 1, 2, 3, 4, 8], dtype=np.uint8))
    with pytest.raises(DataFormatError) as info:
        load_dataset("mnist", tmp_path, checksums=registry)
    message = str(info.value)
    assert "train-labels-idx1-ubyte.gz: checksum mismatch" in message
    assert f"dpfl data fetch mnist --dir {tmp_path}" in message
    # verify=False skips the pins (the content is still a valid IDX file).
    assert load_dataset("mnist", tmp_path, checksums=registry, verify=False).y_train[-1] == 8


def test_missing_file_says_where_it_looked_and_how_to_fetch(tmp_path: Path, kit: Any) -> None:
    arrays = _tiny_idx_folder(tmp_path / "mnist")
    (tmp_path / "mnist" / IDX_NAMES[2]).unlink()
    with pytest.raises(DataFormatError, match=r"t10k-images-idx3-ubyte.gz is missing .*dpfl data fetch mnist --dir"):
        load_dataset("mnist", tmp_path, checksums=_idx_registry(kit, arrays))


def test_images_and_labels_disagree(tmp_path: Path, kit: Any) -> None:
    arrays = _tiny_idx_folder(tmp_path / "mnist")
    write_idx(tmp_path / "mnist" / IDX_NAMES[1], np.array([0, 1], dtype=np.uint8))
    with pytest.raises(DataFormatError, match="holds 6 images but .* holds 2 labels"):
        load_dataset("mnist", tmp_path, checksums=_idx_registry(kit, arrays), verify=False)


def test_tiny_cifar10_batches(tmp_path: Path, kit: Any) -> None:
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    files = {}
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        data = encode_cifar_batch(rng.integers(0, 256, (3, 3, 32, 32), dtype=np.uint8), [i, i, 9])
        (folder / name).write_bytes(data)
        files[f"cifar-10-batches-py/{name}"] = {"content": {"md5": hashlib.md5(data).hexdigest()}}
    registry = kit.registry({"cifar10": {"folder": "cifar10", "files": files}})
    ds = load_dataset("cifar10", tmp_path, checksums=registry)
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.y_train.tolist() == [0, 0, 9, 1, 1, 9, 2, 2, 9, 3, 3, 9, 4, 4, 9]
    per_channel = ds.x_train.permute(1, 0, 2, 3).reshape(3, -1)
    np.testing.assert_allclose(per_channel.mean(dim=1).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(per_channel.std(dim=1, unbiased=False).numpy(), 1.0, atol=1e-5)
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(DataFormatError, match=r"test_batch: checksum mismatch: .*dpfl data fetch cifar10"):
        load_dataset("cifar10", tmp_path, checksums=registry)
    with pytest.raises(DataFormatError, match="test_batch: not a CIFAR-10 python batch"):
        load_dataset("cifar10", tmp_path, checksums=registry, verify=False)


def test_tiny_femnist_keeps_writers(tmp_path: Path) -> None:
    for split in ("train", "test"):
        (tmp_path / "femnist" / split).mkdir(parents=True)

    def user(n: int, label: int, value: float) -> tuple[np.ndarray, np.ndarray]:
        return np.full((n, 784), value), np.full(n, label)

    (tmp_path / "femnist/train/part_0.json").write_text(
        encode_leaf_json({"w1": user(2, 3, 0.2), "w2": user(1, 40, 0.9)}))
    (tmp_path / "femnist/train/part_1.json").write_text(encode_leaf_json({"w3": user(3, 61, 0.5)}))
    (tmp_path / "femnist/test/part_0.json").write_text(
        encode_leaf_json({"w3": user(1, 61, 0.5), "w1": user(1, 3, 0.2)}))
    ds = load_dataset("femnist", tmp_path)
    assert ds.num_classes == 62 and ds.input_shape == (1, 28, 28)
    assert ds.groups_train is not None and ds.groups_test is not None and ds.group_names is not None
    assert ds.groups_train.tolist() == [0, 0, 1, 2, 2, 2]
    assert [ds.group_names[g] for g in ds.groups_test] == ["w3", "w1"]
    assert ds.y_train.tolist() == [3, 3, 40, 61, 61, 61]
    assert float(ds.x_train.mean()) == pytest.approx(0.0, abs=1e-5)


def test_femnist_without_files_explains_leaf(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"no LEAF JSON files in .*train.*dpfl data fetch femnist"):
        load_dataset("femnist", tmp_path)


def test_signed_labels_only_for_binary_data_sets(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a binary data set; 'mnist' has 10 classes"):
        load_dataset("mnist", tmp_path, labels="signed")
