"""Fixtures for the dpfl.data tests: the shared offline data, tiny pin registries, a local HTTP server."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import threading
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dpfl.data.checksums import ChecksumRegistry

# Tests and CI find the offline data at ../shared/data from the project root, or where
# DPFL_SHARED_DATA says (the same rule as tests/conftest.py).
SHARED_DATA = Path(os.environ.get("DPFL_SHARED_DATA", Path(__file__).resolve().parents[3].parent / "shared" / "data"))


class DataTestKit:
    """Helpers shared by the data tests, handed out by the ``kit`` fixture."""

    shared_data = SHARED_DATA

    @staticmethod
    def shared_folder(name: str) -> Path:
        """The shared folder of a data set; skips the test when it is not on this machine, and
        fails it under CI (``CI=true``), which provides the folder."""
        folder = SHARED_DATA / name
        if not folder.is_dir():
            message = f"offline data set {name!r} not found at {folder} (present on dev and CI machines only)"
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"{message}; CI must provide it", pytrace=False)
            pytest.skip(message)
        return folder

    @staticmethod
    def pin_of(data: bytes, *, gzip_pin: bool = False, algorithm: str = "sha256") -> dict[str, Any]:
        """A checksums.json file entry pinning ``data`` (the decompressed content for gzip pins)."""
        entry: dict[str, Any] = {
            "content": {algorithm: hashlib.new(algorithm, data).hexdigest(), "size": len(data)}
        }
        if gzip_pin:
            entry["compression"] = "gzip"
        return entry

    @staticmethod
    def registry(datasets: Mapping[str, Mapping[str, Any]]) -> ChecksumRegistry:
        """A registry from ``{name: {"folder": ..., "files": {relpath: entry}, ...}}``."""
        return ChecksumRegistry.from_dict({"datasets": datasets})

    @staticmethod
    def gz(data: bytes) -> bytes:
        """gzip with a fixed header."""
        return gzip.compress(data, mtime=0)


@pytest.fixture
def kit() -> type[DataTestKit]:
    """The data test helpers."""
    return DataTestKit


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served on 127.0.0.1 by a background thread: ``(directory, base_url)``."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
