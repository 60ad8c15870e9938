"""Checkpoints: the state a run needs to continue exactly where it stopped.

Written to a temporary file and moved into place with ``os.replace``, so a run killed while
writing keeps its previous checkpoint. Because every random stream is keyed by (round, client,
purpose) (:mod:`dpfl.rng`), a resumed run draws exactly the numbers the uninterrupted run would
have drawn: resuming never re-spends privacy with fresh noise for a round already released.

**Format: data only, never code.** A checkpoint is one file::

    b"DPFLCKPT" + version (1 byte) + header length (8 bytes, little endian) + header + tensor bytes

The header is UTF-8 JSON: the run id, what the checkpoint belongs to (``owner``, e.g. the run
store), the state as JSON with every tensor replaced by a reference, each tensor's dtype, shape
and byte range, and the SHA-256 of everything after the header's digest field (the JSON state
and the tensor bytes). :func:`load_checkpoint` checks the magic, the run id, the owner and the
digest *before* it decodes anything, and decoding builds only JSON values, tensors of
whitelisted dtypes and :class:`~dpfl.client.layout.ParamLayout`: there is no unpickling, so a
crafted file cannot run code. A resume checkpoint in the former pickle format is refused with the
reason; a final model file of that format (``legacy=True``, for stores written before) is read
with torch's restricted ``weights_only`` unpickler, which builds tensors and plain containers only.

The digest detects corruption and mix-ups (another run's or another store's file, a truncated
write); it is not a signature: whoever can write the checkpoint folder can also write a
consistent file. Keep the folder as private as the run store.

This module imports torch and :mod:`dpfl.client.layout` only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpfl.client.layout import ParamLayout
from dpfl.errors import DataFormatError

__all__ = ["FORMAT_VERSION", "MAGIC", "clean_orphans", "load_checkpoint", "save_checkpoint"]

MAGIC = b"DPFLCKPT"
FORMAT_VERSION = 2
_TENSOR = "__tensor__"
_LAYOUT = "__param_layout__"
_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_TMP_MARK = ".tmp"


def _encode(value: Any, tensors: list[torch.Tensor], where: str) -> Any:
    """JSON form of ``value``, with tensors moved to ``tensors`` and referenced by index."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in _NAMES:
            raise DataFormatError(f"checkpoint value {where}: tensor dtype {value.dtype} is not supported "
                                  f"(supported: {sorted(_DTYPES)})")
        tensors.append(value.detach().cpu().contiguous())
        return {_TENSOR: len(tensors) - 1}
    if isinstance(value, ParamLayout):
        return {_LAYOUT: {"names": list(value.names), "shapes": [list(s) for s in value.shapes],
                          "offsets": list(value.offsets), "numel": int(value.numel)}}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise DataFormatError(f"checkpoint value {where}: key {k!r} is not a string")
            if k in (_TENSOR, _LAYOUT):
                raise DataFormatError(f"checkpoint value {where}: key {k!r} is reserved")
            out[k] = _encode(v, tensors, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value  # json writes inf/nan as Infinity/NaN and reads them back
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise DataFormatError(f"checkpoint value {where}: {type(value).__name__} cannot be stored "
                          "(only JSON values, tensors and ParamLayout)")


def _decode(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            return tensors[int(value[_TENSOR])]
        if set(value) == {_LAYOUT}:
            lay = value[_LAYOUT]
            return ParamLayout(tuple(str(n) for n in lay["names"]),
                               tuple(tuple(int(d) for d in s) for s in lay["shapes"]),
                               tuple(int(o) for o in lay["offsets"]), int(lay["numel"]))
        return {k: _decode(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    return value


def save_checkpoint(path: str | Path, state: Mapping[str, Any], *, owner: str | None = None) -> None:
    """Write ``state`` (JSON values, tensors, :class:`ParamLayout`) atomically to ``path``.

    Args:
        path: the checkpoint file.
        state: must hold a ``run_id`` string; everything else is free.
        owner: what the checkpoint belongs to (e.g. the run store's path); checked on load.

    Raises:
        DataFormatError: a value that cannot be stored, naming its key.
    """
    path = Path(path)
    if not isinstance(state.get("run_id"), str):
        raise DataFormatError(f"checkpoint {path}: `run_id` must be a string; found {state.get('run_id')!r}")
    tensors: list[torch.Tensor] = []
    body_state = _encode(dict(state), tensors, "state")
    specs, offset = [], 0
    blobs = []
    for t in tensors:
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        specs.append({"dtype": _NAMES[t.dtype], "shape": list(t.shape), "offset": offset, "nbytes": len(raw)})
        blobs.append(raw)
        offset += len(raw)
    payload = json.dumps({"state": body_state, "tensors": specs}, allow_nan=True).encode()
    data = b"".join(blobs)
    digest = hashlib.sha256(struct.pack("<Q", len(payload)) + payload + data).hexdigest()
    header = json.dumps({"run_id": state["run_id"], "owner": owner, "sha256": digest,
                         "payload_bytes": len(payload), "data_bytes": len(data)}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{_TMP_MARK}{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(MAGIC + bytes([FORMAT_VERSION]) + struct.pack("<Q", len(header)) + header + payload + data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_exact(f: Any, n: int, path: Path, what: str) -> bytes:
    raw = f.read(n)
    if len(raw) != n:
        raise DataFormatError(f"checkpoint {path} is truncated ({what}); delete it to restart the run from round 0")
    return raw


def load_checkpoint(path: str | Path, *, run_id: str | None = None, owner: str | None = None,
                    check_owner: bool = False, legacy: bool = False) -> dict[str, Any] | None:
    """The state saved at ``path`` (None if there is no file), verified before it is decoded.

    Args:
        path: the checkpoint file.
        run_id: if given, the run the checkpoint must belong to.
        owner: with ``check_owner``, what the checkpoint must belong to (see :func:`save_checkpoint`).
        check_owner: compare the stored owner with ``owner``.
        legacy: read a file of the former format with ``torch.load(weights_only=True)`` (no run
            id, owner or digest to check: for final model files of older stores, never to resume).

    Raises:
        DataFormatError: not a dpfl checkpoint (e.g. the former pickle format), another run's or
            owner's checkpoint, a digest mismatch or a malformed file; the message names the file.
    """
    path = Path(path)
    if not path.exists():
        return None
    fix = "delete it to restart the run from round 0"
    with open(path, "rb") as f:
        magic = f.read(len(MAGIC) + 1)
        if magic[: len(MAGIC)] != MAGIC and legacy:
            return _load_legacy(path)
        if magic[: len(MAGIC)] != MAGIC:
            raise DataFormatError(f"checkpoint {path} is not a dpfl checkpoint of format {FORMAT_VERSION} (files of "
                                  f"the former pickle format are not loaded: they can carry code); {fix}")
        if magic[len(MAGIC)] != FORMAT_VERSION:
            raise DataFormatError(f"checkpoint {path} has format version {magic[len(MAGIC)]}, this dpfl reads "
                                  f"{FORMAT_VERSION}; {fix}")
        (hlen,) = struct.unpack("<Q", _read_exact(f, 8, path, "header length"))
        if hlen > 1 << 20:
            raise DataFormatError(f"checkpoint {path}: header of {hlen} bytes is implausible; {fix}")
        try:
            header = json.loads(_read_exact(f, hlen, path, "header"))
            stored_id, stored_owner = header["run_id"], header.get("owner")
            digest, plen, dlen = str(header["sha256"]), int(header["payload_bytes"]), int(header["data_bytes"])
        except (ValueError, KeyError, TypeError) as err:
            raise DataFormatError(f"checkpoint {path}: unreadable header ({err}); {fix}") from None
        if run_id is not None and stored_id != run_id:
            raise DataFormatError(f"checkpoint {path} belongs to run {stored_id}, not {run_id}")
        if check_owner and stored_owner != owner:
            raise DataFormatError(f"checkpoint {path} belongs to {stored_owner!r}, not {owner!r}")
        payload = _read_exact(f, plen, path, "state")
        data = _read_exact(f, dlen, path, "tensors")
        if f.read(1):
            raise DataFormatError(f"checkpoint {path} has trailing bytes; {fix}")
    if hashlib.sha256(struct.pack("<Q", plen) + payload + data).hexdigest() != digest:
        raise DataFormatError(f"checkpoint {path}: SHA-256 digest mismatch (corrupt or altered file); {fix}")
    try:
        body = json.loads(payload)
        tensors = []
        for spec in body["tensors"]:
            dtype = _DTYPES[str(spec["dtype"])]
            shape = [int(d) for d in spec["shape"]]
            start, nbytes = int(spec["offset"]), int(spec["nbytes"])
            numel = math.prod(shape)
            itemsize = torch.empty((), dtype=dtype).element_size()
            if nbytes != numel * itemsize or start < 0 or start + nbytes > len(data):
                raise ValueError(f"tensor of shape {shape} and dtype {spec['dtype']} does not fit {nbytes} bytes")
            raw = bytearray(data[start : start + nbytes])
            t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if nbytes else torch.empty(0, dtype=dtype)
            tensors.append(t.reshape(shape))
        state = _decode(body["state"], tensors)
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise DataFormatError(f"checkpoint {path}: malformed content ({err}); {fix}") from None
    if not isinstance(state, dict) or state.get("run_id") != stored_id:
        raise DataFormatError(f"checkpoint {path}: the state's run id does not match its header; {fix}")
    return state


def _load_legacy(path: Path) -> dict[str, Any]:
    try:
        with torch.serialization.safe_globals([ParamLayout]):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # the restricted unpickler refuses anything but data
        raise DataFormatError(f"checkpoint {path} of the former format cannot be read as data only ({err})") from None
    if not isinstance(state, dict):
        raise DataFormatError(f"checkpoint {path} of the former format holds a {type(state).__name__}, not a dict")
    return state


def clean_orphans(folder: str | Path, prefix: str = "") -> list[Path]:
    """Delete temporary files left by writers killed mid-write (``<name>.tmp<pid>``) whose
    process is gone; returns what was deleted. Only files whose name starts with ``prefix``."""
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for p in folder.glob(f"{prefix}*{_TMP_MARK}*"):
        pid = p.name.rsplit(_TMP_MARK, 1)[1]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue  # not ours to judge, or a live writer's
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
