"""The dpfl ClientApp: one SuperNode acts as one dpfl client.

Node config (``flower-supernode --node-config '...'``):
    ``partition-id`` — the dpfl client id this node holds (0 .. N−1 of the run's partition);
    ``data-dir`` — where this machine keeps the data set (default: the run config's ``data.dir``);
    ``role`` — ``client`` (default) or ``shuffler``: the anonymizing shuffler of split & shuffle
    (001), which holds no data, opens the sealed reports of a round and returns per-id multisets;
    ``fault`` — for testing a deployment only: ``nan`` (send NaN), ``shape`` (send a truncated
    vector), ``noise`` (declare a noise std off the plan), ``scale`` (send the upload ×10⁶),
    ``crash`` (raise during training), ``delay:S`` (straggle: sleep S seconds before training),
    ``block:R`` (in round R, 1-based, create the file ``signal-dir``/``client-<id>-round-R`` and
    never reply: a test kills the node when the file appears, whatever the machine's load).

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
from pathlib import Path
from typing import Any

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from dpfl.client.context import RoundInfo
from dpfl.errors import ConfigError
from dpfl.rng import SeedSequence
from dpfl.runtime.flower.codec import decode_train, encode_upload
from dpfl.runtime.sealed import ShufflerKey, open_and_mix, seal

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


def _is_shuffler(context: Context) -> bool:
    return str(context.node_config.get("role", "client")) == "shuffler"


def _shuffler_key(context: Context) -> ShufflerKey:
    """This shuffler node's key pair for the run (kept in the node's context state)."""
    if "shuffler" not in context.state:
        context.state["shuffler"] = ConfigRecord({"key": ShufflerKey.generate().to_bytes()})
    return ShufflerKey.from_bytes(bytes(context.state["shuffler"]["key"]))  # type: ignore[arg-type]


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which dpfl client this node holds, or, for the shuffler, its public key (asked once by
    the server before the first round)."""
    if _is_shuffler(context):
        return Message(RecordDict({"shuffler": ConfigRecord({"public": _shuffler_key(context).public})}), reply_to=msg)
    return Message(RecordDict({"meta": MetricRecord({"client": _client_id(context)})}), reply_to=msg)


@app.query("shuffle")
def shuffle(msg: Message, context: Context) -> Message:
    """The shuffler's round: open the sealed reports the server relayed, drop the bad ones, and
    return per parameter id the sorted multiset of values — no client ids, no order."""
    if not _is_shuffler(context):
        raise ConfigError("a `shuffle` request reached a node that is not the shuffler (node config role=shuffler)")
    rc = msg.content["sealed"]
    blobs = [bytes(b) for b in rc["blobs"]]  # type: ignore[union-attr]
    mixed, rejected = open_and_mix(blobs, _shuffler_key(context), int(rc["round"]), int(rc["num-params"]))
    content = RecordDict({"result": MetricRecord({"rejected": [int(i) for i in rejected] or [-1],
                                                  "accepted": len(blobs) - len(rejected)})})
    if mixed is not None:
        content["mixed"] = ArrayRecord({"support": Array(mixed.support.numpy()), "counts": Array(mixed.counts.numpy())})
    return Message(content, reply_to=msg)


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
    if fault.startswith("block:") and int(fault.split(":", 1)[1]) == t + 1:
        folder = Path(str(context.node_config.get("signal-dir", ".")))
        (folder / f"client-{cid}-round-{t + 1}").touch()
        while True:  # until the node is killed
            time.sleep(3600)
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
    elif fault == "scale":
        vector = vector * 1e6
    shuffler_key = rc.get("shuffler-key")
    if shuffler_key:  # split & shuffle: only the shuffler can read the report
        content = encode_upload(cid, torch.zeros(0), int(up.num_samples[0]), float(up.train_loss[0]), declared)
        del content["upload"]
        content["sealed"] = ConfigRecord({"report": seal(vector, bytes(shuffler_key), t)})
        return Message(content, reply_to=msg)
    return Message(encode_upload(cid, vector, int(up.num_samples[0]), float(up.train_loss[0]), declared), reply_to=msg)
