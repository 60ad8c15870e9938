"""Export the trained global model of a stored run as a plain ``state_dict`` or a safetensors file.

A finished run keeps its final model in the store's ``models/<run id>.pt``, in the data-only
checkpoint format of :mod:`dpfl.sim.checkpoint` (the flat parameter vector and its
:class:`~dpfl.client.layout.ParamLayout`). Export rebuilds the run's model (the registry model of
its config, for the data set's input shape and class count), checks that its parameters have the
stored names and shapes, and writes one tensor per ``model.state_dict()`` key, so that

    model.load_state_dict(torch.load("RUN.pt"))           # torch's default weights_only=True

or ``safetensors.torch.load_file("RUN.safetensors")`` restores the model with torch alone.

The safetensors file is written here from the format's definition (8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and byte range, an optional
``__metadata__`` map of strings, then the raw little-endian bytes): it is plain data, and dpfl
needs no extra package to write it. Its ``__metadata__`` records the run id, the model name and
options, the data set and the dpfl version.

This module imports the run store at import time and torch, the config, the model registry and
the checkpoint reader when it runs (so that the ``export`` command's registration stays light).
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpfl.errors import ConfigError, DataFormatError
from dpfl.store import DEFAULT_STORE, RunStore

if TYPE_CHECKING:
    import torch

__all__ = ["EXPORT_FORMATS", "export_model", "exported_state_dict", "save_safetensors"]

EXPORT_FORMATS: tuple[str, ...] = ("state_dict", "safetensors")
_SUFFIX = {"state_dict": ".pt", "safetensors": ".safetensors"}
_EXPORTABLE = ("finished", "stopped")  # stopped: ended early by its privacy budget, model final


def _safetensors_dtypes() -> dict[torch.dtype, str]:
    import torch

    return {
        torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
        torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
        torch.bool: "BOOL",
    }


def _check_format(fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"export `format` must be one of {list(EXPORT_FORMATS)}. Found {fmt!r}.")
    return fmt


def exported_state_dict(
    run_id: str, store: RunStore | str | Path = DEFAULT_STORE
) -> tuple[str, dict[str, torch.Tensor], dict[str, str]]:
    """The trained global model of a stored run as ``model.state_dict()`` keys → CPU tensors.

    Args:
        run_id: a run id or a unique prefix of one.
        store: the run store (or its path).

    Returns:
        (the full run id, the state dict, string metadata describing the model).

    Raises:
        ConfigError: no store, unknown or ambiguous run id, a run that is not finished.
        DataFormatError: the model file is missing, unreadable, or does not fit the run's model.
    """
    import torch

    from dpfl import __version__
    from dpfl.config import parse_config
    from dpfl.models import build_model
    from dpfl.models.registry import MODELS
    from dpfl.sim.checkpoint import load_checkpoint

    run_store = store if isinstance(store, RunStore) else RunStore(store)
    record = run_store.get(run_id)
    rid = record.run_id
    if record.status not in _EXPORTABLE:
        raise ConfigError(
            f"run {rid} is {record.status!r}, not finished: there is no final model to export "
            f"(resume it with the same `dpfl run` command, then export)."
        )
    path = run_store.path.parent / "models" / f"{rid}.pt"
    if not path.is_file():
        raise DataFormatError(f"run {rid}: its model file {path} is missing (deleted or moved?); "
                              "re-run it with `dpfl run ... --restart` to write it again.")
    state = load_checkpoint(path, run_id=rid, owner=run_store.path.name, check_owner=True, legacy=True)
    if state is None or "global_params" not in state or "layout" not in state:
        raise DataFormatError(f"run {rid}: model file {path} holds no `global_params` and `layout`.")
    flat, layout = state["global_params"], state["layout"]
    config = parse_config(record.config)
    if flat.shape != (layout.numel,):
        raise DataFormatError(f"run {rid}: model file {path} holds {tuple(flat.shape)} values, "
                              f"its layout {layout.numel}.")
    views = layout.views(flat.detach().to("cpu", torch.float32))
    keys = list(views)
    if config.model.name in MODELS:
        # a built-in model: check the stored parameters against the structure this dpfl builds
        model = build_model(
            config.model.name,
            _input_shape(config.data.name, layout),
            _num_classes(config.data.name),
            generator=torch.Generator().manual_seed(0),  # overwritten below: only the structure is used
            **config.model.options,
        )
        names = tuple(n for n, _ in model.named_parameters())
        shapes = tuple(tuple(p.shape) for _, p in model.named_parameters())
        if names != tuple(layout.names) or shapes != tuple(tuple(s) for s in layout.shapes):
            raise DataFormatError(
                f"run {rid}: the stored model's parameters "
                f"{list(zip(layout.names, layout.shapes, strict=True))[:3]}... "
                f"do not match model {config.model.name!r} as this dpfl builds it; export it with the dpfl "
                f"version that ran it ({record.env.get('dpfl', 'unknown')})."
            )
        keys = list(model.state_dict())
        if set(keys) != set(views):
            raise DataFormatError(f"run {rid}: model {config.model.name!r} has state beyond its parameters "
                                  f"({sorted(set(keys) - set(views))}); it cannot be exported from parameters.")
    # a user's model (a `module:attribute` reference or the Python API's): dpfl trains only models
    # without buffers (models/validate.py), so its state_dict is exactly the stored parameters
    state_dict = {k: views[k].clone().contiguous() for k in keys}
    metadata = {
        "run_id": rid,
        "model": config.model.name,
        "model_options": json.dumps(config.model.options, sort_keys=True),
        "dataset": config.data.name,
        "dpfl": __version__,
    }
    return rid, state_dict, metadata


def _input_shape(dataset: str, layout: Any) -> tuple[int, ...]:
    from dpfl.data.registry import dataset_info

    shape = dataset_info(dataset).input_shape
    if shape is not None:
        return tuple(shape)
    # tabular data: the width is the data's; a dense model's first weight is [out, width]
    first = tuple(layout.shapes[0]) if layout.shapes else ()
    if len(first) != 2:
        raise DataFormatError(f"cannot tell the input width of data set {dataset!r} from the stored model.")
    return (int(first[1]),)


def _num_classes(dataset: str) -> int:
    from dpfl.data.registry import dataset_info

    return int(dataset_info(dataset).num_classes)


def save_safetensors(
    tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` as a safetensors file (see the module docstring), atomically.

    Raises:
        DataFormatError: a dtype the format does not have, or metadata that is not strings.
    """
    import torch

    dtypes = _safetensors_dtypes()
    if sys.byteorder != "little":
        raise DataFormatError("safetensors is little endian; this machine is not (write format 'state_dict').")
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise DataFormatError("safetensors metadata must map strings to strings.")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name, t in tensors.items():
        if t.dtype not in dtypes:
            raise DataFormatError(f"tensor {name!r}: dtype {t.dtype} cannot be written to safetensors.")
        t = t.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # keep the tensor bytes 8-byte aligned
    _write_atomic(Path(path), struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def export_model(run_id: str, *, store: RunStore | str | Path = "runs/dpfl.sqlite", format: str = "state_dict",
                 out: str | Path | None = None) -> Path:
    """Write the trained global model of a stored run to a file torch alone can load.

    Args:
        run_id: a run id or a unique prefix of one.
        store: the run store (or its path).
        format: ``"state_dict"`` (``torch.save`` of a dict of tensors: ``torch.load`` with its
            default ``weights_only=True`` reads it) or ``"safetensors"``.
        out: the file to write; default ``<run id>.pt`` / ``<run id>.safetensors`` in the
            current directory.

    Returns:
        The path written.

    Raises:
        ConfigError: unknown format, run id or store; a run that is not finished.
        DataFormatError: the run's model file is missing or does not fit its model.
    """
    fmt = _check_format(format)
    rid, state_dict, metadata = exported_state_dict(run_id, store)
    path = Path(out) if out is not None else Path(f"{rid}{_SUFFIX[fmt]}")
    if path.is_dir():
        raise ConfigError(f"export `out` {str(path)!r} is a directory; give a file name such as "
                          f"{str(path / (rid + _SUFFIX[fmt]))!r}.")
    if fmt == "safetensors":
        save_safetensors(state_dict, path, metadata)
    else:
        import torch

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        torch.save(state_dict, tmp)
        os.replace(tmp, path)
    return path
