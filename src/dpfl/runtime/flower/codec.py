"""dpfl round data ↔ Flower records (the only place that knows the message layout).

Server → client (message type ``train``):
    ``global``: ArrayRecord ``{"params": [P]}``; ``round``: ConfigRecord with ``round``,
    ``client`` (the dpfl client id the node must act as), ``cohort-size``, ``num-clients``,
    ``config`` (the run config as JSON), ``state`` (the algorithm's client state as JSON),
    ``reproducible`` (draw the client's noise from the run's seed instead of the OS CSPRNG) and,
    when the round's reports go through a shuffler, ``shuffler-key`` (its public key).
Client → server:
    ``upload``: ArrayRecord ``{"params": [P]}``; ``meta``: MetricRecord with ``client``,
    ``num-samples``, ``train-loss``; ``declared``: MetricRecord of the declared values.
Server → client (message type ``query``) and back: ``meta`` with the node's ``client`` id and
``num-samples``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.app.typing import ConfigRecordValues

from dpfl.runtime.flower.records import as_array, as_float, as_int

__all__ = ["decode_train", "decode_upload", "encode_train", "encode_upload"]


def _array(t: torch.Tensor) -> ArrayRecord:
    return ArrayRecord({"params": Array(np.ascontiguousarray(t.detach().cpu().numpy()))})


def _tensor(content: RecordDict, key: str) -> torch.Tensor:
    return torch.from_numpy(np.array(as_array(content[key]["params"]), copy=True))


def encode_train(params: torch.Tensor, *, round_idx: int, client: int, cohort_size: int, num_clients: int,
                 config_json: str, state: dict[str, Any], reproducible: bool = False,
                 shuffler_key: bytes | None = None) -> RecordDict:
    round_config: dict[str, ConfigRecordValues] = {
        "round": int(round_idx), "client": int(client), "cohort-size": int(cohort_size),
        "num-clients": int(num_clients), "config": config_json, "state": json.dumps(state),
        "reproducible": bool(reproducible),
    }
    if shuffler_key is not None:
        round_config["shuffler-key"] = shuffler_key
    return RecordDict({"global": _array(params), "round": ConfigRecord(round_config)})


def decode_train(content: RecordDict) -> tuple[torch.Tensor, dict[str, Any]]:
    rc = dict(content["round"])
    rc["state"] = json.loads(str(rc["state"]))
    return _tensor(content, "global"), rc


def encode_upload(client: int, vector: torch.Tensor, num_samples: int, train_loss: float,
                  declared: dict[str, float]) -> RecordDict:
    return RecordDict({
        "upload": _array(vector),
        "meta": MetricRecord({"client": int(client), "num-samples": int(num_samples), "train-loss": float(train_loss)}),
        "declared": MetricRecord({k: float(v) for k, v in declared.items()}),
    })


def decode_upload(content: RecordDict) -> tuple[int, torch.Tensor, int, float, dict[str, float]]:
    meta = content["meta"]
    declared = {k: as_float(v) for k, v in dict(content["declared"]).items()} if "declared" in content else {}
    return (as_int(meta["client"]), _tensor(content, "upload"), as_int(meta["num-samples"]),
            as_float(meta["train-loss"]), declared)
