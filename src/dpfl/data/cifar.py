"""The CIFAR-10 "python version" pickle batches (``cifar-10-batches-py/``).

Each batch (``data_batch_1`` … ``data_batch_5``, ``test_batch``) is a pickled dict with
``b"data"``: uint8 array [N, 3072] (1024 red, then green, then blue values of a 32×32 image, rows
in order) and ``b"labels"``: N ints in 0..9 (https://www.cs.toronto.edu/~kriz/cifar.html).

Pickle can run code, so batches are read with an unpickler that only admits the few globals a
numpy array needs; anything else is a :class:`~dpfl.errors.DataFormatError`.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpfl.errors import DataFormatError

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
IMAGE_SHAPE = (3, 32, 32)
NUM_CLASSES = 10

_ALLOWED_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, numbers, bytes and numpy arrays; refuses any other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")


def parse_cifar_batch(data: bytes, *, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode the bytes of one CIFAR-10 python batch.

    Args:
        data: the pickled batch.
        source: what to call it in error messages (usually the file path).

    Returns:
        ``(images, labels)``: uint8 [N, 3, 32, 32] and int64 [N].

    Raises:
        DataFormatError: not a pickle, a disallowed global, missing keys, wrong shapes or labels.
    """
    try:
        batch = _ArrayOnlyUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as exc:  # pickle raises many types on corrupt input
        raise DataFormatError(
            f"{source}: not a CIFAR-10 python batch (unpickling failed: {exc})"
        ) from exc
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise DataFormatError(
            f"{source}: a CIFAR-10 batch must be a dict with keys b'data' and b'labels'; found {keys}"
        )
    images = np.asarray(batch[b"data"])
    try:
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DataFormatError(f"{source}: b'labels' is not a list of integers ({exc})") from exc
    width = int(np.prod(IMAGE_SHAPE))
    if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != width:
        raise DataFormatError(
            f"{source}: b'data' must be uint8 [N, {width}]; found {images.dtype} {list(images.shape)}"
        )
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise DataFormatError(
            f"{source}: {images.shape[0]} images but b'labels' has shape {list(labels.shape)}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DataFormatError(
            f"{source}: labels must lie in 0..{NUM_CLASSES - 1}; found {labels.min()}..{labels.max()}"
        )
    return images.reshape(-1, *IMAGE_SHAPE), labels


def read_cifar_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 python batch file; see :func:`parse_cifar_batch`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataFormatError(f"{path}: cannot read the file: {exc}") from exc
    return parse_cifar_batch(data, source=str(path))


def encode_cifar_batch(images: np.ndarray, labels: Sequence[int] | np.ndarray) -> bytes:
    """Pickle ``images`` (uint8 [N, 3, 32, 32] or [N, 3072]) and ``labels`` as a CIFAR-10 batch."""
    flat = np.ascontiguousarray(images, dtype=np.uint8).reshape(len(images), -1)
    batch = {b"batch_label": b"dpfl", b"data": flat, b"labels": [int(v) for v in labels]}
    return pickle.dumps(batch, protocol=2)
