"""The dpfl ClientApp: one SuperNode acts as one dpfl client.

Node config (``flower-supernode --node-config '...'``):
    ``partition-id`` — the dpfl client id this node holds (0 .. N−1 of the run's partition);
    ``data-dir`` — where this machine keeps the data set (default: the run config's ``data.dir``);
    ``fault`` — for testing a deployment only: ``nan`` (send NaN), ``shape`` (send a truncated
    vector), ``noise`` (declare a noise std off the plan), ``crash`` (raise during training),
    ``delay:S`` (straggle: sleep S seconds before training).

On a ``train`` message the node rebuilds the run from the config the server sent (the data set
from its own disk; the partition, model and algorithm are deterministic functions of the
config), trains its own client from the received global model with the run's engine, and runs
the algorithm's ``client_step`` — clipping and noise happen here, before anything leaves the
node. The noise comes from the OS CSPRNG; with the run config ``reproducible = true`` (testing
only) from the client's stream (round, client, purpose) of the run's seed, exactly as in
simulation.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from dpfl.client.context import RoundInfo
from dpfl.errors import ConfigError
from dpfl.rng import SeedSequence
from dpfl.runtime.flower.codec import decode_train, encode_upload

app = ClientApp()

_CACHE: dict[str, Any] = {}


def _experiment(config_json: str, data_dir: str | None) -> Any:
    """The run, rebuilt from the server's config on this node (cached per config)."""
    from dpfl.experiments.config import parse_config
    from dpfl.experiments.runner import build_experiment

    key = hashlib.sha256((config_json + "|" + str(data_dir)).encode()).hexdigest()
    if key not in _CACHE:
        raw = json.loads(config_json)
        if data_dir:
            raw.setdefault("data", {})["dir"] = data_dir
        _CACHE.clear()
        _CACHE[key] = build_experiment(parse_config(raw))
    return _CACHE[key]


def _client_id(context: Context) -> int:
    if "partition-id" not in context.node_config:
        raise ConfigError("this SuperNode has no `partition-id` in its --node-config (the dpfl client id it holds)")
    return int(context.node_config["partition-id"])


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which dpfl client this node holds (sent once by the server before the first round)."""
    return Message(RecordDict({"meta": MetricRecord({"client": _client_id(context)})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    cid = _client_id(context)
    params, rc = decode_train(msg.content)
    if int(rc["client"]) != cid:
        raise ConfigError(f"the server asked node of client {cid} to act as client {rc['client']}")
    fault = str(context.node_config.get("fault", ""))
    data_dir = context.node_config.get("data-dir")
    exp = _experiment(str(rc["config"]), str(data_dir) if data_dir else None)
    if exp.data.num_clients != int(rc["num-clients"]):
        raise ConfigError(f"this node partitions the data into {exp.data.num_clients} clients, the server into "
                          f"{rc['num-clients']}: the data sets differ")
    algo = exp.algorithm
    algo.load_state_dict(rc["state"])
    t = int(rc["round"])
    if fault == "crash":
        raise RuntimeError(f"client {cid}: injected crash (node config fault=crash)")
    if fault.startswith("delay:"):
        time.sleep(float(fault.split(":", 1)[1]))
    params = params.to(exp.init_params.device, exp.init_params.dtype)
    local = exp.engine.train(params, [cid], t)
    # the client's noise: from the OS CSPRNG unless the run asks for reproducible noise (testing)
    noise_seeds = exp.seeds if bool(rc.get("reproducible", False)) else SeedSequence.secure_mode()
    info = RoundInfo(t, exp.data.num_clients, torch.tensor([cid]), noise_seeds, cohort_size=int(rc["cohort-size"]))
    up = algo.client_step(params, local, info)
    vector = up.params[0]
    declared = {k: float(v[0]) for k, v in up.declared.items()}
    if fault == "nan":
        vector = vector.clone()
        vector[0] = float("nan")
    elif fault == "shape":
        vector = vector[:-1]
    elif fault == "noise":
        declared["noise_std"] = declared.get("noise_std", 0.0) * 0.5 + 1e-3
    return Message(encode_upload(cid, vector, int(up.num_samples[0]), float(up.train_loss[0]), declared), reply_to=msg)
