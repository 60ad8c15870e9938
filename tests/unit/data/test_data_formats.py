"""Readers of IDX, CIFAR-10 pickle batches and LEAF JSON on tiny files written here."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from dpfl.data import cifar, leaf
from dpfl.data.idx import encode_idx, parse_idx, read_idx, write_idx
from dpfl.errors import DataFormatError

# ---------------------------------------------------------------------------------------------
# IDX
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"])
def test_idx_round_trip_raw_and_gzip(tmp_path: Path, name: str) -> None:
    images = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5)
    path = tmp_path / name
    write_idx(path, images)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    back = read_idx(path)
    assert back.dtype == np.uint8 and back.shape == (3, 4, 5)
    np.testing.assert_array_equal(back, images)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_multibyte_types_are_big_endian_on_disk(dtype: type) -> None:
    values: np.ndarray = np.array([[1, -2], [3, 4]], dtype=dtype)
    data = encode_idx(values)
    assert data[3] == 2 and data[4:8] == b"\x00\x00\x00\x02"
    np.testing.assert_array_equal(parse_idx(data, source="x"), values)


def test_idx_header_matches_the_mnist_layout() -> None:
    data = encode_idx(np.zeros((2, 28, 28), dtype=np.uint8))
    assert data[:4] == bytes([0, 0, 8, 3])
    assert data[4:16] == (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    assert len(data) == 16 + 2 * 28 * 28


def test_truncated_idx_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t10k-images-idx3-ubyte"
    data = encode_idx(np.zeros((4, 28, 28), dtype=np.uint8))
    path.write_bytes(data[:-100])
    with pytest.raises(DataFormatError, match=r"t10k-images-idx3-ubyte: truncated IDX file.*\(4, 28, 28\)"):
        read_idx(path)


def test_truncated_gzip_stream_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    packed = gzip.compress(encode_idx(np.arange(200, dtype=np.uint8)), mtime=0)
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(DataFormatError, match="train-labels-idx1-ubyte.gz: truncated or corrupt gzip"):
        read_idx(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00", "shorter than the 4-byte magic"),
        (b"\x01\x02\x08\x01" + b"\x00" * 8, "bad magic number 0x01020801"),
        (b"\x00\x00\x07\x01" + b"\x00" * 8, "bad magic number"),  # unknown type code
        (b"\x00\x00\x08\x00", "bad magic number"),  # zero dimensions
        (b"\x00\x00\x08\x03\x00\x00", "truncated IDX file: the header declares 3 dimensions"),
        (encode_idx(np.zeros(3, dtype=np.uint8)) + b"\x00", "trailing bytes"),
    ],
)
def test_malformed_idx(data: bytes, message: str) -> None:
    with pytest.raises(DataFormatError, match=message):
        parse_idx(data, source="labels.idx")


# ---------------------------------------------------------------------------------------------
# CIFAR-10 python batches
# ---------------------------------------------------------------------------------------------


def test_cifar_batch_round_trip_and_channel_layout(tmp_path: Path) -> None:
    images = np.zeros((2, 3, 32, 32), dtype=np.uint8)
    images[0, 0] = 255  # image 0 is pure red: the first 1024 values of its row
    images[1, 2, 0, 1] = 7  # image 1: blue plane, row 0, column 1
    path = tmp_path / "data_batch_1"
    path.write_bytes(cifar.encode_cifar_batch(images, [3, 9]))
    flat = pickle.loads(path.read_bytes(), encoding="bytes")[b"data"]
    assert flat.shape == (2, 3072) and (flat[0, :1024] == 255).all() and flat[1, 2048 + 1] == 7
    x, y = cifar.read_cifar_batch(path)
    assert x.shape == (2, 3, 32, 32) and x.dtype == np.uint8
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, [3, 9])


def test_cifar_batch_in_the_original_py2_encoding() -> None:
    # The official batches were pickled by Python 2: str keys come back as bytes.
    batch = {b"data": np.zeros((1, 3072), dtype=np.uint8), b"labels": [4], b"filenames": [b"x.png"]}
    x, y = cifar.parse_cifar_batch(pickle.dumps(batch, protocol=2), source="b")
    assert x.shape == (1, 3, 32, 32) and y.tolist() == [4]


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("executed",))


def test_cifar_batch_refuses_arbitrary_globals(capsys: pytest.CaptureFixture[str]) -> None:
    payload = pickle.dumps({b"data": _Evil(), b"labels": []})
    with pytest.raises(DataFormatError, match="builtins.print is not allowed"):
        cifar.parse_cifar_batch(payload, source="data_batch_1")
    assert "executed" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({b"labels": [1]}, "keys b'data' and b'labels'"),
        ({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [1]}, "2 images but b'labels'"),
        ({b"data": np.zeros((1, 100), dtype=np.uint8), b"labels": [1]}, r"uint8 \[N, 3072\]"),
        ({b"data": np.zeros((1, 3072), dtype=np.uint8), b"labels": [10]}, "labels must lie in 0..9"),
    ],
)
def test_malformed_cifar_batch(batch: dict[bytes, object], message: str) -> None:
    with pytest.raises(DataFormatError, match=message):
        cifar.parse_cifar_batch(pickle.dumps(batch, protocol=2), source="test_batch")


def test_cifar_batch_that_is_not_a_pickle() -> None:
    with pytest.raises(DataFormatError, match="test_batch: not a CIFAR-10 python batch"):
        cifar.parse_cifar_batch(b"<html>404</html>", source="test_batch")


# ---------------------------------------------------------------------------------------------
# LEAF JSON
# ---------------------------------------------------------------------------------------------


def _user(n: int, label: int, value: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    return np.full((n, 784), value), np.full(n, label)


def test_leaf_split_keeps_the_writer_of_every_sample(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(leaf.encode_leaf_json({"f0001_12": _user(2, 1), "f0002_40": _user(3, 61)}))
    (tmp_path / "b.json").write_text(leaf.encode_leaf_json({"f0003_07": _user(1, 0)}))
    split = leaf.read_leaf_split([tmp_path / "a.json", tmp_path / "b.json"])
    assert split.x.shape == (6, 1, 28, 28) and split.x.dtype == np.float32
    assert split.writer_names == ("f0001_12", "f0002_40", "f0003_07")
    assert split.writers.tolist() == [0, 0, 1, 1, 1, 2]
    assert split.y.tolist() == [1, 1, 61, 61, 61, 0]
    # A later split reuses the known writers' indices and appends new ones.
    (tmp_path / "t.json").write_text(leaf.encode_leaf_json({"f0009_99": _user(1, 5), "f0002_40": _user(1, 2)}))
    test = leaf.read_leaf_split([tmp_path / "t.json"], writer_names=split.writer_names)
    assert test.writers.tolist() == [3, 1]
    assert test.writer_names[:3] == split.writer_names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"users": [', "not valid JSON"),
        ("[1, 2]", "keys 'users', 'num_samples' and 'user_data'"),
        ('{"users": ["u"], "num_samples": [1, 2], "user_data": {}}', "equal length"),
        ('{"users": ["u"], "num_samples": [1], "user_data": {}}', "user 'u' is listed"),
        ('{"users": ["u"], "num_samples": [2], "user_data": {"u": {"x": [[0.0]], "y": [1]}}}', "num_samples says 2"),
        ('{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [[0.0, 1.0]], "y": [1]}}}',
         "2 values, expected 784"),
        ('{"users": ["u"], "num_samples": [2], "user_data": {"u": {"x": [[0.0], [1.0, 2.0]], "y": [1, 2]}}}',
         "equal-length numeric lists"),
    ],
)
def test_malformed_leaf_json_names_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "all_data_0_niid_0_keep_0_train_9.json"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message) as info:
        leaf.read_leaf_split([path])
    assert str(path) in str(info.value)


def test_leaf_labels_out_of_range(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"users": ["u"], "num_samples": [1],
                                "user_data": {"u": {"x": [[0.0] * 784], "y": [62]}}}))
    with pytest.raises(DataFormatError, match=r"labels must lie in 0..61"):
        leaf.read_leaf_split([path])
