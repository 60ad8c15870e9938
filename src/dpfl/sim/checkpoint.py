"""Checkpoints: the state a run needs to continue exactly where it stopped.

Written to a temporary file and moved into place with ``os.replace``, so a run killed while
writing keeps its previous checkpoint. Because every random stream is keyed by (round, client,
purpose) (:mod:`dpfl.rng`), a resumed run draws exactly the numbers the uninterrupted run would
have drawn: resuming never re-spends privacy with fresh noise for a round already released.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dpfl.errors import DataFormatError


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict[str, Any] | None:
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a corrupt checkpoint must not be silently ignored
        raise DataFormatError(
            f"checkpoint {path} cannot be read ({err}); delete it to restart the run from round 0"
        ) from None
