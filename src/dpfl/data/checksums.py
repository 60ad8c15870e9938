"""Pinned checksums of data files, and verification of files against them.

The pins live in ``checksums.json`` beside this module; :meth:`ChecksumRegistry.default` reads
them, and every function that verifies takes a registry argument so that tests (and users with
their own data sets) can inject theirs.

Invariants:

- A gzipped file is pinned by the digest of its *decompressed* content, because the same IDX
  content circulates gzipped with different headers (timestamps, compression levels). A digest of
  a known-good gzipped copy may be listed too; it is a fast path, never a requirement.
- A file counts as verified only when its content digest (and size, when pinned) matches.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from dpfl.errors import ConfigError, DataFormatError

Compression = Literal["gzip"]
HASH_ALGORITHMS = ("sha256", "md5")
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
_DEFAULT_PATH = Path(__file__).with_name("checksums.json")


@dataclass(frozen=True)
class Digest:
    """An expected digest, optionally with the expected size in bytes.

    Attributes:
        algorithm: ``"sha256"`` or ``"md5"`` (md5 only where the data set publishes nothing else).
        hexdigest: lowercase hexadecimal digest.
        size: expected number of bytes, or ``None`` when not pinned.
    """

    algorithm: str
    hexdigest: str
    size: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in HASH_ALGORITHMS:
            raise ConfigError(
                f"checksum algorithm must be one of {list(HASH_ALGORITHMS)}. Found {self.algorithm!r}."
            )
        expected_len = hashlib.new(self.algorithm).digest_size * 2
        digest = self.hexdigest.lower()
        if len(digest) != expected_len or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(
                f"{self.algorithm} digest must be {expected_len} hexadecimal characters. "
                f"Found {self.hexdigest!r}."
            )
        object.__setattr__(self, "hexdigest", digest)


@dataclass(frozen=True)
class FilePin:
    """The pin of one file of a data set.

    Attributes:
        relpath: POSIX path relative to the data set's folder, e.g. ``"train-images-idx3-ubyte.gz"``.
        content: digest of the content; for a gzipped file, of the decompressed bytes.
        compression: ``"gzip"`` when the canonical file is gzipped, else ``None``.
        known_file_sha256: sha256 digests of known-good copies of the file as stored (fast path).
    """

    relpath: str
    content: Digest
    compression: Compression | None = None
    known_file_sha256: frozenset[str] = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        """The file's base name."""
        return self.relpath.rsplit("/", 1)[-1]

    @property
    def raw_relpath(self) -> str | None:
        """The path of the uncompressed variant (``x.gz`` → ``x``), accepted in place of the canonical file."""
        if self.compression == "gzip" and self.relpath.endswith(".gz"):
            return self.relpath[: -len(".gz")]
        return None

    def candidate_relpaths(self) -> tuple[str, ...]:
        """Every accepted relative path, the canonical one first."""
        raw = self.raw_relpath
        return (self.relpath,) if raw is None else (self.relpath, raw)


@dataclass(frozen=True)
class DatasetPins:
    """Every pin of one data set.

    Attributes:
        name: the data set's name in dpfl (``"mnist"``...).
        folder: the folder holding its files under a data directory (``DIR/<folder>/...``).
        files: pinned files.
        archives: pins of archives the files are distributed in, by archive file name.
        unpinned: glob patterns of files that cannot be pinned (user-generated, e.g. LEAF output).
        provenance: where the pinned values come from.
    """

    name: str
    folder: str
    files: tuple[FilePin, ...]
    archives: Mapping[str, Digest] = field(default_factory=dict)
    unpinned: tuple[str, ...] = ()
    provenance: str = ""

    def file(self, relpath: str) -> FilePin:
        """The pin of ``relpath``.

        Raises:
            ConfigError: no such pinned file.
        """
        for pin in self.files:
            if pin.relpath == relpath:
                return pin
        raise ConfigError(
            f"data set {self.name!r} has no pinned file {relpath!r}; pinned: "
            f"{[p.relpath for p in self.files]}"
        )


class ChecksumRegistry:
    """A read-only collection of :class:`DatasetPins`, by data set name.

    Args:
        datasets: the pins of each data set.
    """

    def __init__(self, datasets: Iterable[DatasetPins]) -> None:
        self._datasets = MappingProxyType({d.name: d for d in datasets})

    @classmethod
    def default(cls) -> ChecksumRegistry:
        """The registry pinned in the package's ``checksums.json``."""
        return _default_registry()

    @classmethod
    def from_json(cls, path: str | Path) -> ChecksumRegistry:
        """Read a registry from a JSON file in the format of the package's ``checksums.json``.

        Raises:
            DataFormatError: the file is unreadable or malformed.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataFormatError(f"{path}: cannot read the checksum registry: {exc}") from exc
        try:
            return cls.from_dict(data)
        except (ConfigError, KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(f"{path}: malformed checksum registry: {exc}") from exc

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChecksumRegistry:
        """Build a registry from the parsed JSON structure (``{"datasets": {name: {...}}}``)."""
        datasets = []
        for name, entry in data["datasets"].items():
            files = tuple(_file_pin(relpath, spec) for relpath, spec in entry.get("files", {}).items())
            archives = {
                archive: _digest(spec) for archive, spec in entry.get("archives", {}).items()
            }
            datasets.append(
                DatasetPins(
                    name=name,
                    folder=entry.get("folder", name),
                    files=files,
                    archives=MappingProxyType(archives),
                    unpinned=tuple(entry.get("unpinned", ())),
                    provenance=entry.get("provenance", ""),
                )
            )
        return cls(datasets)

    def names(self) -> tuple[str, ...]:
        """Names of the data sets in the registry, in registry order."""
        return tuple(self._datasets)

    def dataset(self, name: str) -> DatasetPins:
        """The pins of data set ``name``.

        Raises:
            ConfigError: unknown name (the message lists the valid names).
        """
        try:
            return self._datasets[name]
        except KeyError:
            raise ConfigError(
                f"unknown data set {name!r}; valid names: {', '.join(self._datasets)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._datasets


def _digest(spec: Mapping[str, Any]) -> Digest:
    algorithms = [a for a in HASH_ALGORITHMS if a in spec]
    if not algorithms:
        raise ConfigError(f"a pin needs one of {list(HASH_ALGORITHMS)}. Found keys {sorted(spec)}.")
    algorithm = algorithms[0]
    size = spec.get("size")
    return Digest(algorithm, str(spec[algorithm]), None if size is None else int(size))


def _file_pin(relpath: str, spec: Mapping[str, Any]) -> FilePin:
    compression = spec.get("compression")
    if compression not in (None, "gzip"):
        raise ConfigError(f"{relpath}: `compression` must be null or 'gzip'. Found {compression!r}.")
    return FilePin(
        relpath=relpath,
        content=_digest(spec["content"]),
        compression=compression,
        known_file_sha256=frozenset(s.lower() for s in spec.get("known_file_sha256", ())),
    )


@cache
def _default_registry() -> ChecksumRegistry:
    return ChecksumRegistry.from_json(_DEFAULT_PATH)


# --------------------------------------------------------------------------------------------
# Hashing and verification
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """The outcome of checking one file against its pin.

    Attributes:
        path: the file checked.
        ok: whether the content matches the pin.
        expected: the pinned digest.
        actual: the digest found (``None`` when the file could not be read).
        actual_size: the content size found.
        problem: a one-line description of what is wrong, empty when ``ok``.
    """

    path: Path
    ok: bool
    expected: Digest
    actual: str | None
    actual_size: int | None
    problem: str = ""


def is_gzip_file(path: Path) -> bool:
    """Whether ``path`` starts with the gzip magic bytes."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def file_digest(path: Path, algorithm: str = "sha256") -> tuple[str, int]:
    """Digest and size of a file's bytes as stored (no decompression)."""
    h = hashlib.new(algorithm)
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def content_hash(path: Path, algorithm: str) -> tuple[str, int]:
    """Digest and size of a file's content, decompressing it first when it is gzipped.

    Raises:
        DataFormatError: the file is gzipped but truncated or corrupt.
    """
    h = hashlib.new(algorithm)
    size = 0
    try:
        opener = gzip.open if is_gzip_file(path) else open
        with opener(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
                size += len(chunk)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise DataFormatError(f"{path}: truncated or corrupt gzip stream ({exc})") from exc
    return h.hexdigest(), size


def verify_file(path: Path, pin: FilePin) -> Verification:
    """Check ``path`` against ``pin`` (gzip is detected from the file, not its name).

    Never raises for a bad file: the result says what is wrong.
    """
    path = Path(path)
    if pin.known_file_sha256:
        stored, _ = file_digest(path)
        if stored in pin.known_file_sha256:
            return Verification(path, True, pin.content, pin.content.hexdigest, pin.content.size)
    try:
        actual, size = content_hash(path, pin.content.algorithm)
    except DataFormatError as exc:
        return Verification(path, False, pin.content, None, None, str(exc))
    return _compare(path, pin.content, actual, size)


def verify_bytes(content: bytes, pin: FilePin, path: Path) -> Verification:
    """Check already-decompressed ``content`` read from ``path`` against ``pin``."""
    actual = hashlib.new(pin.content.algorithm, content).hexdigest()
    return _compare(path, pin.content, actual, len(content))


def _compare(path: Path, expected: Digest, actual: str, size: int) -> Verification:
    problems = []
    if actual != expected.hexdigest:
        problems.append(f"expected {expected.algorithm} {expected.hexdigest}, actual {actual}")
    if expected.size is not None and size != expected.size:
        problems.append(f"expected {expected.size} bytes of content, found {size}")
    return Verification(path, not problems, expected, actual, size, "; ".join(problems))


def read_content(path: Path) -> bytes:
    """A file's content, decompressed when it is gzipped (detected from its magic bytes).

    Raises:
        DataFormatError: unreadable file, or a truncated/corrupt gzip stream.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataFormatError(f"{path}: cannot read the file: {exc}") from exc
    if data[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(data)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DataFormatError(f"{path}: truncated or corrupt gzip stream ({exc})") from exc
    return data


def read_verified(path: Path, pin: FilePin | None) -> bytes:
    """Read a file's (decompressed) content and check it against ``pin`` when one is given.

    Raises:
        DataFormatError: unreadable or corrupt file, or content that does not match the pin.
    """
    content = read_content(path)
    if pin is not None:
        result = verify_bytes(content, pin, Path(path))
        if not result.ok:
            raise DataFormatError(f"{path}: checksum mismatch: {result.problem}")
    return content
