"""Where data files live on disk: ``DIR/<folder>/<standard file names>``.

``DIR`` defaults to ``$DPFL_DATA_DIR`` or ``./data``; ``<folder>`` is the data set's folder from
the checksum registry (``mnist``, ``fashion-mnist``, ``census-income-kdd``...). A gzipped file may
also be present uncompressed under its name without ``.gz``.

This module imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.data.checksums`.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpfl.data.checksums import DatasetPins, FilePin
from dpfl.errors import DataFormatError

DATA_DIR_ENV = "DPFL_DATA_DIR"


def default_data_dir() -> Path:
    """``$DPFL_DATA_DIR`` when set and non-empty, else ``./data``."""
    return Path(os.environ.get(DATA_DIR_ENV) or "data")


def fetch_hint(name: str, root: str | Path) -> str:
    """The command that fetches data set ``name`` into data directory ``root``."""
    return f"run `dpfl data fetch {name} --dir {root}`"


def folder_candidates(root: Path, pins: DatasetPins) -> tuple[Path, ...]:
    """Folders that may hold the data set under ``root``: ``root/<folder>``, ``root/<name>``,
    and ``root`` itself (when the user points at the data set's own folder)."""
    out: list[Path] = [root / pins.folder]
    if pins.name != pins.folder:
        out.append(root / pins.name)
    out.append(root)
    return tuple(out)


def locate(folder: Path, pin: FilePin) -> Path | None:
    """The path of ``pin``'s file in ``folder`` (canonical name first, then the raw variant)."""
    for rel in pin.candidate_relpaths():
        path = folder / rel
        if path.is_file():
            return path
    return None


def resolve_folder(root: str | Path, pins: DatasetPins) -> Path:
    """The folder holding data set ``pins.name`` under data directory ``root``.

    The first candidate of :func:`folder_candidates` that holds any of the data set's files wins;
    with none, ``root/<folder>`` (where fetch puts the files).
    """
    root = Path(root)
    for folder in folder_candidates(root, pins):
        if not folder.is_dir():
            continue
        if any(locate(folder, pin) is not None for pin in pins.files):
            return folder
        if any(next(folder.glob(pattern), None) is not None for pattern in pins.unpinned):
            return folder
    return root / pins.folder


def require_file(folder: Path, pin: FilePin, *, name: str, root: str | Path) -> Path:
    """The path of ``pin``'s file in ``folder``.

    Raises:
        DataFormatError: the file is missing (the message says where it looked and how to fetch).
    """
    path = locate(folder, pin)
    if path is None:
        looked = " or ".join(str(folder / rel) for rel in pin.candidate_relpaths())
        raise DataFormatError(
            f"data set {name!r}: file {pin.relpath} is missing (looked for {looked}); "
            f"{fetch_hint(name, root)}"
        )
    return path
