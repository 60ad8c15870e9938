"""The in-memory data set type and the registry of named data sets.

:func:`load_dataset` reads a data set from ``DIR/<folder>/`` (see :mod:`dpfl.data.layout`),
checks every pinned file against its checksum, and returns a :class:`FederatedDataset`:

- images as float32 [N, C, H, W], scaled to [0, 1] and then normalized per channel with the
  *training* mean and standard deviation (the test split uses the same statistics);
- tabular data as float32 [N, d] (see :mod:`dpfl.data.tabular`);
- labels as int64 class indices (or {−1, +1} for binary data sets on request).

Nothing is cached on disk. This module imports nothing from dpfl outside :mod:`dpfl.data` and
:mod:`dpfl.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import numpy as np
import torch

from dpfl.data import cifar, leaf
from dpfl.data.checksums import ChecksumRegistry, DatasetPins, read_verified
from dpfl.data.idx import parse_idx
from dpfl.data.layout import fetch_hint, require_file, resolve_folder
from dpfl.data.tabular import TabularEncoder, signed_labels
from dpfl.data.uci import ADULT_SCHEMA, CENSUS_INCOME_SCHEMA, UciSchema, read_uci_csv
from dpfl.errors import ConfigError, DataFormatError

LabelEncoding = Literal["index", "signed"]


@dataclass(frozen=True, eq=False)
class FederatedDataset:
    """A data set held in memory, with the natural client of each training sample when known.

    Compared by identity (tensors have no single truth value).

    Attributes:
        name: the registry name (``"mnist"``...).
        x_train: float32 [N, *input_shape].
        y_train: int64 [N] class indices (or {−1, +1}, see :func:`load_dataset`).
        x_test: float32 [M, *input_shape].
        y_test: int64 [M].
        num_classes: number of classes.
        input_shape: per-sample shape, e.g. ``(1, 28, 28)`` or ``(d,)``.
        groups_train: int64 [N] natural client id of each training sample (FEMNIST writer), else ``None``.
        groups_test: int64 [M] natural client id of each test sample, else ``None``.
        group_names: the original id of each natural client (``groups_*`` index into it), else ``None``.
        feature_names: names of the tabular features, else ``None``.
        normalization: images only: per-channel ``(mean, std)`` on the [0, 1] scale, from the training split.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None
    group_names: tuple[str, ...] | None = None
    feature_names: tuple[str, ...] | None = None
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    def __post_init__(self) -> None:
        for split, x, y, g in (
            ("train", self.x_train, self.y_train, self.groups_train),
            ("test", self.x_test, self.y_test, self.groups_test),
        ):
            if x.dtype != torch.float32 or y.dtype != torch.int64:
                raise DataFormatError(
                    f"{self.name}: x_{split} must be float32 and y_{split} int64; "
                    f"found {x.dtype} and {y.dtype}"
                )
            if tuple(x.shape[1:]) != self.input_shape or x.shape[0] != y.shape[0]:
                raise DataFormatError(
                    f"{self.name}: x_{split} has shape {list(x.shape)} and y_{split} "
                    f"{list(y.shape)}; expected [N, {', '.join(map(str, self.input_shape))}] and [N]"
                )
            if g is not None and g.shape != (x.shape[0],):
                raise DataFormatError(
                    f"{self.name}: groups_{split} has shape {list(g.shape)}, expected [{x.shape[0]}]"
                )

    @property
    def num_train(self) -> int:
        """Number of training samples."""
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        """Number of test samples."""
        return int(self.x_test.shape[0])


@dataclass(frozen=True)
class DatasetInfo:
    """A registry entry.

    Attributes:
        name: the registry name.
        description: one line for ``dpfl data list``.
        num_classes: number of classes.
        input_shape: per-sample shape (``None`` for tabular data, whose width depends on the data).
        loader: reads the data set from its folder.
    """

    name: str
    description: str
    num_classes: int
    input_shape: tuple[int, ...] | None
    loader: Callable[[_LoadContext], FederatedDataset]


@dataclass(frozen=True)
class _LoadContext:
    name: str
    root: Path
    folder: Path
    pins: DatasetPins
    verify: bool

    def read(self, relpath: str) -> tuple[Path, bytes]:
        """Locate, read, decompress and (when verifying) check one pinned file."""
        pin = self.pins.file(relpath)
        path = require_file(self.folder, pin, name=self.name, root=self.root)
        return path, read_verified(path, pin if self.verify else None)


# --------------------------------------------------------------------------------------------
# Image helpers
# --------------------------------------------------------------------------------------------


def _normalize_images(
    train_u8: np.ndarray, test_u8: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[float, ...], tuple[float, ...]]]:
    """uint8 [N, C, H, W] → float32 normalized with the training per-channel mean/std.

    ``(x/255 − m)/s`` equals ``(x − 255m)/(255s)``, so the statistics are taken exactly on the
    raw scale (from a histogram of the 256 byte values) and the division by 255 is folded in.
    """
    means, stds = [], []
    levels = np.arange(256, dtype=np.float64)
    for c in range(train_u8.shape[1]):
        counts = np.bincount(train_u8[:, c].ravel(), minlength=256).astype(np.float64)
        total = counts.sum()
        mean = float(counts @ levels / total) if total else 0.0
        var = float(counts @ (levels - mean) ** 2 / total) if total else 1.0
        means.append(mean)
        stds.append(var**0.5 if var > 0 else 1.0)
    shape = (1, -1, 1, 1)
    mean_t = torch.tensor(means, dtype=torch.float32).view(shape)
    std_t = torch.tensor(stds, dtype=torch.float32).view(shape)
    tensors = []
    for u8 in (train_u8, test_u8):
        x = torch.from_numpy(u8.astype(np.float32))
        tensors.append(x.sub_(mean_t).div_(std_t))
    stats = (tuple(m / 255.0 for m in means), tuple(s / 255.0 for s in stds))
    return tensors[0], tensors[1], stats


def _labels(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------

_IDX_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


def _read_idx_pair(ctx: _LoadContext, images_rel: str, labels_rel: str) -> tuple[np.ndarray, np.ndarray]:
    images_path, images_data = ctx.read(images_rel)
    labels_path, labels_data = ctx.read(labels_rel)
    images = parse_idx(images_data, source=str(images_path))
    labels = parse_idx(labels_data, source=str(labels_path))
    if images.dtype != np.uint8 or images.ndim != 3:
        raise DataFormatError(
            f"{images_path}: expected uint8 images [N, H, W]; found {images.dtype} {list(images.shape)}"
        )
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataFormatError(
            f"{labels_path}: expected uint8 labels [N]; found {labels.dtype} {list(labels.shape)}"
        )
    if images.shape[0] != labels.shape[0]:
        raise DataFormatError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
            f"{labels.shape[0]} labels"
        )
    if labels.size and labels.max() >= 10:
        raise DataFormatError(f"{labels_path}: labels must lie in 0..9; found {labels.max()}")
    return images[:, None, :, :], labels


def _load_idx_dataset(ctx: _LoadContext) -> FederatedDataset:
    train_x, train_y = _read_idx_pair(ctx, _IDX_FILES["train_images"], _IDX_FILES["train_labels"])
    test_x, test_y = _read_idx_pair(ctx, _IDX_FILES["test_images"], _IDX_FILES["test_labels"])
    if train_x.shape[1:] != test_x.shape[1:]:
        raise DataFormatError(
            f"{ctx.folder}: train images are {list(train_x.shape[1:])} but test images "
            f"{list(test_x.shape[1:])}"
        )
    x_train, x_test, stats = _normalize_images(train_x, test_x)
    return FederatedDataset(
        name=ctx.name,
        x_train=x_train,
        y_train=_labels(train_y),
        x_test=x_test,
        y_test=_labels(test_y),
        num_classes=10,
        input_shape=tuple(int(v) for v in train_x.shape[1:]),
        normalization=stats,
    )


def _load_cifar10(ctx: _LoadContext) -> FederatedDataset:
    def batch(name: str) -> tuple[np.ndarray, np.ndarray]:
        path, data = ctx.read(f"cifar-10-batches-py/{name}")
        return cifar.parse_cifar_batch(data, source=str(path))

    train = [batch(name) for name in cifar.TRAIN_BATCHES]
    test_x, test_y = batch(cifar.TEST_BATCH)
    train_x = np.concatenate([x for x, _ in train])
    train_y = np.concatenate([y for _, y in train])
    x_train, x_test, stats = _normalize_images(train_x, test_x)
    return FederatedDataset(
        name=ctx.name,
        x_train=x_train,
        y_train=_labels(train_y),
        x_test=x_test,
        y_test=_labels(test_y),
        num_classes=cifar.NUM_CLASSES,
        input_shape=cifar.IMAGE_SHAPE,
        normalization=stats,
    )


def _load_femnist(ctx: _LoadContext) -> FederatedDataset:
    splits = {}
    for split in ("train", "test"):
        files = sorted((ctx.folder / split).glob("*.json"))
        if not files:
            raise DataFormatError(
                f"data set 'femnist': no LEAF JSON files in {ctx.folder / split}; FEMNIST is "
                f"produced with LEAF, {fetch_hint(ctx.name, ctx.root)} to see how"
            )
        splits[split] = files
    train = leaf.read_leaf_split(splits["train"])
    test = leaf.read_leaf_split(splits["test"], writer_names=train.writer_names)
    # LEAF pixels are already in [0, 1]; normalize with the training statistics.
    mean = float(train.x.mean(dtype=np.float64)) if train.x.size else 0.0
    std = float(train.x.std(dtype=np.float64)) if train.x.size else 1.0
    std = std if std > 0 else 1.0
    x_train = torch.from_numpy((train.x - np.float32(mean)) / np.float32(std))
    x_test = torch.from_numpy((test.x - np.float32(mean)) / np.float32(std))
    return FederatedDataset(
        name=ctx.name,
        x_train=x_train.to(torch.float32),
        y_train=_labels(train.y),
        x_test=x_test.to(torch.float32),
        y_test=_labels(test.y),
        num_classes=leaf.FEMNIST_NUM_CLASSES,
        input_shape=leaf.FEMNIST_IMAGE_SHAPE,
        groups_train=train.writers,
        groups_test=test.writers,
        group_names=test.writer_names,
        normalization=((mean,), (std,)),
    )


def _tabular_loader(schema: UciSchema, train_rel: str, test_rel: str) -> Callable[[_LoadContext], FederatedDataset]:
    def load(ctx: _LoadContext) -> FederatedDataset:
        train_path, train_data = ctx.read(train_rel)
        test_path, test_data = ctx.read(test_rel)
        train = read_uci_csv(train_path, schema, content=train_data)
        test = read_uci_csv(test_path, schema, content=test_data)
        encoder = TabularEncoder.fit(train, schema)
        x_train = encoder.transform(train)
        x_test = encoder.transform(test)
        return FederatedDataset(
            name=ctx.name,
            x_train=torch.from_numpy(x_train),
            y_train=_labels(train.labels),
            x_test=torch.from_numpy(x_test),
            y_test=_labels(test.labels),
            num_classes=2,
            input_shape=(encoder.num_features,),
            feature_names=encoder.feature_names,
        )

    return load


_REGISTRY: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo("mnist", "MNIST handwritten digits, 60k/10k 28×28 grey", 10, (1, 28, 28), _load_idx_dataset),
        DatasetInfo(
            "fashion-mnist", "Fashion-MNIST (Zalando), 60k/10k 28×28 grey", 10, (1, 28, 28), _load_idx_dataset
        ),
        DatasetInfo("cifar10", "CIFAR-10, 50k/10k 32×32 RGB (python pickle batches)", 10, (3, 32, 32), _load_cifar10),
        DatasetInfo(
            "femnist", "FEMNIST (LEAF), 28×28 grey, 62 classes, split by writer", 62, (1, 28, 28), _load_femnist
        ),
        DatasetInfo(
            "adult",
            "UCI Adult income (>50K), 32,561/16,281 rows",
            2,
            None,
            _tabular_loader(ADULT_SCHEMA, "adult.data", "adult.test"),
        ),
        DatasetInfo(
            "census-income",
            "UCI Census-Income (KDD) 1994-95 income (>50K), 199,523/99,762 rows; "
            "offline stand-in for the IPUMS-US task of paper 000",
            2,
            None,
            _tabular_loader(
                CENSUS_INCOME_SCHEMA,
                "census_income_1994_1995_train.csv.gz",
                "census_income_1994_1995_test.csv.gz",
            ),
        ),
    )
}

DATASETS: Mapping[str, DatasetInfo] = MappingProxyType(_REGISTRY)
"""The known data sets by name; iterating yields the names."""


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry of ``name``.

    Raises:
        ConfigError: unknown name (the message lists the valid names).
    """
    try:
        return DATASETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown data set {name!r}; valid names: {', '.join(DATASETS)}"
        ) from None


def load_dataset(
    name: str,
    data_dir: str | Path,
    *,
    verify: bool = True,
    checksums: ChecksumRegistry | None = None,
    labels: LabelEncoding = "index",
) -> FederatedDataset:
    """Load data set ``name`` from data directory ``data_dir``.

    Args:
        name: one of :data:`DATASETS`.
        data_dir: the data directory (holding ``<folder>/``), or the data set's folder itself.
        verify: check every pinned file against its checksum before use.
        checksums: the pins to verify against (default: the package's ``checksums.json``).
        labels: ``"index"`` for class indices, ``"signed"`` for {−1, +1} (binary data sets only,
            e.g. the SVM of 000 eq. (32)).

    Raises:
        ConfigError: unknown name, or signed labels asked for a non-binary data set.
        DataFormatError: a file is missing, corrupt, fails its checksum or is malformed; the
            message names the file and says how to fetch the data set.
    """
    info = dataset_info(name)
    if labels not in ("index", "signed"):
        raise ConfigError(f"`labels` must be 'index' or 'signed'. Found {labels!r}.")
    if labels == "signed" and info.num_classes != 2:
        raise ConfigError(
            f"`labels='signed'` needs a binary data set; {name!r} has {info.num_classes} classes"
        )
    registry = checksums if checksums is not None else ChecksumRegistry.default()
    pins = registry.dataset(name)
    root = Path(data_dir)
    ctx = _LoadContext(name=name, root=root, folder=resolve_folder(root, pins), pins=pins, verify=verify)
    try:
        dataset = info.loader(ctx)
    except DataFormatError as exc:
        message = str(exc)
        if "dpfl data fetch" in message:
            raise
        raise DataFormatError(
            f"{message}. To replace it with a verified copy, {fetch_hint(name, root)}"
        ) from exc
    if labels == "signed":
        dataset = _with_signed_labels(dataset)
    return dataset


def _with_signed_labels(dataset: FederatedDataset) -> FederatedDataset:
    return replace(
        dataset,
        y_train=torch.from_numpy(signed_labels(dataset.y_train.numpy())),
        y_test=torch.from_numpy(signed_labels(dataset.y_test.numpy())),
    )
