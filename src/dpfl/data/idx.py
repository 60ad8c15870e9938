"""The IDX file format of MNIST and Fashion-MNIST, gzipped or raw.

Layout (http://yann.lecun.com/exdb/mnist/): two zero bytes, a type code (0x08 = uint8, 0x09 =
int8, 0x0B = int16, 0x0C = int32, 0x0D = float32, 0x0E = float64), the number of dimensions,
that many big-endian uint32 sizes, then the data in C order (big-endian for multi-byte types).

This module imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.data.checksums`.
"""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path

import numpy as np

from dpfl.data.checksums import read_content
from dpfl.errors import DataFormatError

_TYPE_CODES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODE_OF = {dt.newbyteorder("="): code for code, dt in _TYPE_CODES.items()}


def parse_idx(data: bytes, *, source: str) -> np.ndarray:
    """Decode the (decompressed) bytes of an IDX file.

    Args:
        data: the whole file content.
        source: what to call the data in error messages (usually the file path).

    Returns:
        The array, in native byte order (a read-only view of ``data`` for uint8/int8).

    Raises:
        DataFormatError: bad magic number, unknown type code, or a size that disagrees with the
            header (truncated file or trailing bytes).
    """
    if len(data) < 4:
        raise DataFormatError(
            f"{source}: not an IDX file: {len(data)} bytes, shorter than the 4-byte magic number"
        )
    if data[0] != 0 or data[1] != 0 or data[2] not in _TYPE_CODES or data[3] == 0:
        raise DataFormatError(
            f"{source}: not an IDX file: bad magic number 0x{bytes(data[:4]).hex()} "
            f"(expected 0x0000TTNN with type TT in "
            f"{{{', '.join(f'{c:02x}' for c in _TYPE_CODES)}}} and NN ≥ 1 dimensions)"
        )
    dtype = _TYPE_CODES[data[2]]
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataFormatError(
            f"{source}: truncated IDX file: the header declares {ndim} dimensions "
            f"({header} header bytes) but the file has only {len(data)} bytes"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = math.prod(dims) * dtype.itemsize
    actual = len(data) - header
    if actual != expected:
        what = "truncated IDX file" if actual < expected else "IDX file with trailing bytes"
        raise DataFormatError(
            f"{source}: {what}: the header declares shape {tuple(dims)} of {dtype.name} "
            f"= {expected} data bytes, but {actual} bytes follow the header"
        )
    array = np.frombuffer(data, dtype=dtype, count=math.prod(dims), offset=header).reshape(dims)
    if dtype.itemsize > 1:
        array = array.astype(dtype.newbyteorder("="))
    return array


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file, gzipped or raw (detected from the content, not the name).

    Raises:
        DataFormatError: see :func:`parse_idx`; also an unreadable file or corrupt gzip stream.
    """
    path = Path(path)
    return parse_idx(read_content(path), source=str(path))


def encode_idx(array: np.ndarray) -> bytes:
    """The IDX encoding of ``array`` (dtype uint8, int8, int16, int32, float32 or float64).

    Raises:
        DataFormatError: unsupported dtype, or a 0-d array.
    """
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _CODE_OF or array.ndim == 0 or array.ndim > 255:
        raise DataFormatError(
            f"cannot encode an array of dtype {array.dtype} with {array.ndim} dimensions as IDX"
        )
    code = _CODE_OF[native]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=_TYPE_CODES[code]).tobytes()


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file, gzipped when ``path`` ends with ``.gz``."""
    path = Path(path)
    data = encode_idx(array)
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
