"""Data: readers of the standard public formats, verified fetching, and client partitions.

- Formats, one module each: :mod:`~dpfl.data.idx` (MNIST, Fashion-MNIST),
  :mod:`~dpfl.data.cifar` (CIFAR-10 python batches), :mod:`~dpfl.data.leaf` (FEMNIST JSON),
  :mod:`~dpfl.data.uci` (Adult, Census-Income CSV) with :mod:`~dpfl.data.tabular` (encoding).
- :mod:`~dpfl.data.registry`: :class:`FederatedDataset` and :func:`load_dataset`.
- :mod:`~dpfl.data.checksums` (pins in ``checksums.json``), :mod:`~dpfl.data.layout` (where files
  live), :mod:`~dpfl.data.sources` and :mod:`~dpfl.data.fetch` (getting them),
  :mod:`~dpfl.data.archives` (unpacking registry packages).
- :mod:`~dpfl.data.partition`: IID, size groups, Dirichlet, k classes per client, natural ids.

This package imports nothing from dpfl except :mod:`dpfl.errors` (and ``dpfl.__version__``).
"""

from dpfl.data.checksums import ChecksumRegistry, DatasetPins, Digest, FilePin, verify_file
from dpfl.data.fetch import FetchedFile, FetchResult, extract_package_files, fetch
from dpfl.data.layout import default_data_dir
from dpfl.data.partition import (
    UNBALANCED_GROUP_SIZES_000,
    partition_dirichlet,
    partition_iid,
    partition_k_classes,
    partition_natural,
    partition_size_groups,
)
from dpfl.data.registry import DATASETS, DatasetInfo, FederatedDataset, dataset_info, load_dataset
from dpfl.data.sources import (
    DEFAULT_SOURCES,
    LocalDir,
    RegistryPackage,
    Source,
    UrlArchive,
    UrlFiles,
)
from dpfl.data.tabular import signed_labels

__all__ = [
    "DATASETS",
    "DEFAULT_SOURCES",
    "UNBALANCED_GROUP_SIZES_000",
    "ChecksumRegistry",
    "DatasetInfo",
    "DatasetPins",
    "Digest",
    "FederatedDataset",
    "FetchResult",
    "FetchedFile",
    "FilePin",
    "LocalDir",
    "RegistryPackage",
    "Source",
    "UrlArchive",
    "UrlFiles",
    "dataset_info",
    "default_data_dir",
    "extract_package_files",
    "fetch",
    "load_dataset",
    "partition_dirichlet",
    "partition_iid",
    "partition_k_classes",
    "partition_natural",
    "partition_size_groups",
    "signed_labels",
    "verify_file",
]
