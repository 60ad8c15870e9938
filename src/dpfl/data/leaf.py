"""LEAF JSON (FEMNIST): the writer-partitioned EMNIST of https://leaf.cmu.edu/.

LEAF's preprocessing writes ``data/train/*.json`` and ``data/test/*.json``; each file is
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 floats]], "y": [ints]}}}``
with pixel values in [0, 1] and labels in 0..61. The reader keeps the writer of every sample.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpfl.errors import DataFormatError

FEMNIST_IMAGE_SHAPE = (1, 28, 28)
FEMNIST_NUM_CLASSES = 62


@dataclass(frozen=True)
class LeafSplit:
    """The samples of one LEAF split (train or test).

    Attributes:
        x: float32 [N, *sample_shape].
        y: int64 [N].
        writers: int64 [N], index into ``writer_names`` of each sample's writer.
        writer_names: the writer (user) ids, in first-seen order over the files in name order.
    """

    x: np.ndarray
    y: np.ndarray
    writers: np.ndarray
    writer_names: tuple[str, ...]


def parse_leaf_json(
    data: bytes | str,
    *,
    source: str,
    sample_size: int | None = None,
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Decode one LEAF JSON file into ``[(user, x float32 [n, d], y int64 [n]), ...]``.

    Args:
        data: the file content.
        source: what to call it in error messages (usually the file path).
        sample_size: required number of values per sample (784 for FEMNIST), or ``None``.

    Raises:
        DataFormatError: invalid JSON, missing keys, counts that disagree with ``num_samples``,
            ragged or non-numeric samples.
    """
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{source}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or not all(k in doc for k in ("users", "num_samples", "user_data")):
        found = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise DataFormatError(
            f"{source}: a LEAF file must be an object with keys 'users', 'num_samples' and "
            f"'user_data'; found {found}"
        )
    users, counts, user_data = doc["users"], doc["num_samples"], doc["user_data"]
    if not isinstance(users, list) or not isinstance(counts, list) or len(users) != len(counts):
        raise DataFormatError(
            f"{source}: 'users' and 'num_samples' must be lists of equal length"
        )
    if not isinstance(user_data, dict):
        raise DataFormatError(f"{source}: 'user_data' must be an object keyed by user id")
    out = []
    for user, count in zip(users, counts, strict=True):
        entry = user_data.get(user)
        if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
            raise DataFormatError(
                f"{source}: user {user!r} is listed in 'users' but has no {{'x', 'y'}} in 'user_data'"
            )
        try:
            x = np.asarray(entry["x"], dtype=np.float32)
            y = np.asarray(entry["y"], dtype=np.int64)
        except (TypeError, ValueError) as exc:
            raise DataFormatError(
                f"{source}: user {user!r}: 'x' must be a list of equal-length numeric lists and "
                f"'y' a list of integers ({exc})"
            ) from exc
        if x.size == 0 and y.size == 0:
            x = x.reshape(0, sample_size or 0)
        if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or len(y) != count:
            raise DataFormatError(
                f"{source}: user {user!r}: num_samples says {count}, 'x' has shape {list(x.shape)} "
                f"and 'y' has shape {list(y.shape)}"
            )
        if sample_size is not None and x.shape[1] != sample_size:
            raise DataFormatError(
                f"{source}: user {user!r}: samples have {x.shape[1]} values, expected {sample_size}"
            )
        out.append((str(user), x, y))
    return out


def read_leaf_split(
    files: Sequence[Path],
    *,
    sample_shape: tuple[int, ...] = FEMNIST_IMAGE_SHAPE,
    num_classes: int = FEMNIST_NUM_CLASSES,
    writer_names: Sequence[str] = (),
) -> LeafSplit:
    """Read and concatenate LEAF JSON files (in the order given).

    Args:
        files: the JSON files of one split.
        sample_shape: the shape of one sample; its size is checked against every sample.
        num_classes: labels must lie in ``0..num_classes-1``.
        writer_names: writer ids already known (e.g. from the train split), so that the same
            writer gets the same index in both splits; new writers are appended.

    Raises:
        DataFormatError: no files, or any file malformed (see :func:`parse_leaf_json`).
    """
    if not files:
        raise DataFormatError("no LEAF JSON files given")
    size = int(np.prod(sample_shape))
    index = {name: i for i, name in enumerate(writer_names)}
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    ws: list[np.ndarray] = []
    for path in files:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise DataFormatError(f"{path}: cannot read the file: {exc}") from exc
        for user, x, y in parse_leaf_json(data, source=str(path), sample_size=size):
            if y.size and (y.min() < 0 or y.max() >= num_classes):
                raise DataFormatError(
                    f"{path}: user {user!r}: labels must lie in 0..{num_classes - 1}; "
                    f"found {y.min()}..{y.max()}"
                )
            writer = index.setdefault(user, len(index))
            xs.append(x)
            ys.append(y)
            ws.append(np.full(len(y), writer, dtype=np.int64))
    x_all = np.concatenate(xs) if xs else np.zeros((0, size), dtype=np.float32)
    return LeafSplit(
        x=x_all.reshape(-1, *sample_shape),
        y=np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64),
        writers=np.concatenate(ws) if ws else np.zeros(0, dtype=np.int64),
        writer_names=tuple(index),
    )


def encode_leaf_json(users: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """The LEAF JSON text of ``{user: (x [n, d], y [n])}``."""
    return json.dumps(
        {
            "users": list(users),
            "num_samples": [len(y) for _, y in users.values()],
            "user_data": {
                u: {"x": np.asarray(x, dtype=float).reshape(len(y), -1).tolist(), "y": [int(v) for v in y]}
                for u, (x, y) in users.items()
            },
        }
    )
