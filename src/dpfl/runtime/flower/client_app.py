"""The dpfl ClientApp: one SuperNode acts as one dpfl client.

Node config (``flower-supernode --node-config '...'``):
    ``partition-id`` — the dpfl client id this node holds (0 .. N−1 of the run's partition);
    ``data-dir`` — where this machine keeps the data set (default: the run config's ``data.dir``);
    ``role`` — ``client`` (default) or ``shuffler``: the anonymizing shuffler of split & shuffle
    (001), which holds no data, opens the sealed reports of a round and returns per-id multisets;
    ``fault`` — for testing a deployment only: ``nan`` (send NaN), ``shape`` (send a truncated
    vector), ``noise`` (declare a noise std off the plan), ``scale`` (send the upload ×10⁶),
    ``crash`` (raise during training), ``delay:S`` (straggle: sleep S seconds before training),
    ``block:R`` (in round R, 1-based, create the file ``signal-dir``/``client-<id>-round-R``
    holding the ClientApp process's pid, and never reply: a test kills the node when the file
    appears, whatever the machine's load);
    ``warm`` — ``true`` (default on a SuperNode): train in the node's warm worker process
    (:mod:`.warm`), which keeps torch, the data and the built run between rounds; ``false``:
    train in the ClientApp process itself (on Flower's Simulation Engine, whose ClientApps live in
    long-running Ray actors, always so).

On a ``train`` message the node rebuilds the run from the config the server sent (the data set
from its own disk; the partition, model and algorithm are deterministic functions of the
config), trains its own client from the received global model with the run's engine, and runs
the algorithm's ``client_step`` — clipping and noise happen here, before anything leaves the
node. The noise comes from the OS CSPRNG; with the run config ``reproducible = true`` (testing
only) from the client's stream (round, client, purpose) of the run's seed, exactly as in
simulation.

Secure aggregation (SecAgg+): the ClientApp's mod hands a ``train`` message to Flower's
``secaggplus_mod`` only when it carries SecAgg+ settings (the ``secaggplus`` config record of
``SecAggPlusWorkflow``), so ordinary ``train`` messages reach :func:`train` unchanged. In the
protocol's "collect masked vectors" stage the handler receives legacy FitIns records: the global
model and, in the FitIns config, the round record above plus ``secure-sum-bits`` (b). It trains
exactly as an ordinary round (the warm worker's :func:`.warm.train_round`), whose DP-FedAvg
``client_step`` under secure aggregation returns the residues modulo 2^b (integer pipeline and
Skellam share), and replies with legacy FitRes records: parameters
:func:`dpfl.runtime.flower.secagg.encode` of the residues, ``num_examples = 1`` (the weight
the settings need) and no metrics — FitRes ``num_examples`` and ``metrics`` are not masked, so
nothing else (no declared values, no loss, no sample count) is sent. ``secaggplus_mod`` then masks
the vector; the masks come from ChaCha20 (:mod:`.masks`, installed when this module is imported).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat

from dpfl.errors import ConfigError
from dpfl.runtime.flower import masks, timing
from dpfl.runtime.flower.records import as_array, as_bytes, as_int, as_list
from dpfl.runtime.flower.secagg import SECURE_SUM_KEY, WEIGHT, encode
from dpfl.runtime.flower.warm import WarmClient, train_round

if TYPE_CHECKING:
    from dpfl.runtime.sealed import ShufflerKey

# This module imports neither torch nor the rest of dpfl: a ClientApp process (one per message
# in Flower 1.41) only decodes the message and hands the round to its SuperNode's warm worker
# (:mod:`.warm`), which keeps torch, the data and the built run loaded between rounds.

masks.install()  # this process masks with ChaCha20, like the server unmasks

_LOADED = time.time()  # this module imported (the ClientApp process handles one message)


_FORKED = False  # this process was forked by dpfl's executor (:mod:`.executor`), not started by Flower


def mark_loaded() -> None:
    """This process is ready to handle its message now: a ClientApp process forked from dpfl's
    executor's fork server (:mod:`.executor`) inherits this module imported, and its timings
    (:mod:`.timing`) count from the fork."""
    global _LOADED, _FORKED
    _LOADED, _FORKED = time.time(), True

_WORKER: dict[str, Any] = {}  # the warm worker's timings of this process's training message


def secure_sum_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``secaggplus_mod`` for messages of SecAgg+ (a ``train`` message with its settings
    record), a pass-through for everything else (``secaggplus_mod`` claims every ``train``
    message and fails on one without the record). Records the message's timings
    (:mod:`.timing`) when ``DPFL_FLOWER_TIMINGS`` is set."""
    start = time.time()
    secure = msg.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in msg.content.config_records
    fields = _timing_fields(msg, context, secure) if timing.enabled() else None  # before the mod reads the message
    reply = secaggplus_mod(msg, context, call_next) if secure else call_next(msg, context)
    if fields is not None:
        timing.record("clientapp", **fields, proc=timing.process_start(), loaded=_LOADED, start=start,
                      end=time.time(), forked=_FORKED, **_WORKER)
    return reply


def _timing_fields(msg: Message, context: Context, secure: bool) -> dict[str, Any]:
    """Which message this is, for :mod:`.timing`: node, kind, round (0-based), id, sent."""
    kind, t = msg.metadata.message_type, None
    if secure:
        kind = f"secagg-{msg.content.config_records[RECORD_KEY_CONFIGS].get('stage', '?')!s}"
        t = int(msg.metadata.group_id) - 1 if msg.metadata.group_id.isdigit() else None  # SecAgg+ rounds are 1-based
    elif kind == MessageType.TRAIN and "round" in msg.content.config_records:
        t = as_int(msg.content["round"]["round"])
    node = "shuffler" if _is_shuffler(context) else context.node_config.get("partition-id")
    return {"node": node, "kind": kind, "round": t, "id": msg.metadata.message_id, "sent": msg.metadata.created_at}


app = ClientApp(mods=[secure_sum_mod])


def _client_id(context: Context) -> int:
    if "partition-id" not in context.node_config:
        raise ConfigError("this SuperNode has no `partition-id` in its --node-config (the dpfl client id it holds)")
    return int(context.node_config["partition-id"])


def _is_shuffler(context: Context) -> bool:
    return str(context.node_config.get("role", "client")) == "shuffler"


def _shuffler_key(context: Context) -> ShufflerKey:
    """This shuffler node's key pair for the run (kept in the node's context state)."""
    from dpfl.runtime.sealed import ShufflerKey

    if "shuffler" not in context.state:
        context.state["shuffler"] = ConfigRecord({"key": ShufflerKey.generate().to_bytes()})
    return ShufflerKey.from_bytes(as_bytes(context.state["shuffler"]["key"]))


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which dpfl client this node holds, or, for the shuffler, its public key (asked once by
    the server before the first round). A query that carries the run's config (``q.config``)
    also starts the node's warm worker, which builds the run while the server goes on."""
    if _is_shuffler(context):
        return Message(RecordDict({"shuffler": ConfigRecord({"public": _shuffler_key(context).public})}), reply_to=msg)
    cid = _client_id(context)
    ask = msg.content.config_records.get("q")
    config = ask.get("config") if ask is not None else None
    if isinstance(config, str) and config and _warm(context):
        data_dir = context.node_config.get("data-dir")
        WarmClient(f"{os.getppid()}-{cid}", os.getppid()).prepare(config, str(data_dir) if data_dir else None)
    return Message(RecordDict({"meta": MetricRecord({"client": cid})}), reply_to=msg)


def _warm(context: Context) -> bool:
    """Whether this node trains in its warm worker (node config ``warm``; never on Flower's
    Simulation Engine, which sets ``num-partitions``)."""
    if "num-partitions" in context.node_config:
        return False
    return str(context.node_config.get("warm", "true")).lower() not in ("false", "0", "no")


@app.query("shuffle")
def shuffle(msg: Message, context: Context) -> Message:
    """The shuffler's round: open the sealed reports the server relayed, drop the bad ones, and
    return per parameter id the sorted multiset of values — no client ids, no order."""
    if not _is_shuffler(context):
        raise ConfigError("a `shuffle` request reached a node that is not the shuffler (node config role=shuffler)")
    from dpfl.runtime.sealed import open_and_mix

    rc = msg.content["sealed"]
    blobs = [as_bytes(b) for b in as_list(rc["blobs"])]
    mixed, rejected = open_and_mix(blobs, _shuffler_key(context), as_int(rc["round"]), as_int(rc["num-params"]))
    content = RecordDict({"result": MetricRecord({"rejected": [int(i) for i in rejected] or [-1],
                                                  "accepted": len(blobs) - len(rejected)})})
    if mixed is not None:
        content["mixed"] = ArrayRecord({"support": Array(mixed.support.numpy()), "counts": Array(mixed.counts.numpy())})
    return Message(content, reply_to=msg)


def _upload(cid: int, vector: np.ndarray, meta: dict[str, Any], declared: dict[str, float]) -> RecordDict:
    """The reply layout of :mod:`.codec` (``encode_upload``), built from numpy."""
    return RecordDict({
        "upload": ArrayRecord({"params": Array(np.ascontiguousarray(vector))}),
        "meta": MetricRecord({"client": int(cid), "num-samples": int(meta["num_samples"]),
                              "train-loss": float(meta["train_loss"])}),
        "declared": MetricRecord({k: float(v) for k, v in declared.items()}),
    })


def _train_here(
    rc: dict[str, Any], params: np.ndarray, cid: int, context: Context
) -> tuple[dict[str, Any], np.ndarray]:
    """The node's faults (testing), then :func:`train_round` cold or in the node's warm worker."""
    fault = str(context.node_config.get("fault", ""))
    data_dir = context.node_config.get("data-dir")
    t = int(rc["round"])
    if int(rc["client"]) != cid:
        raise ConfigError(f"the server asked node of client {cid} to act as client {rc['client']}")
    if fault == "crash":
        raise RuntimeError(f"client {cid}: injected crash (node config fault=crash)")
    if fault.startswith("delay:"):
        time.sleep(float(fault.split(":", 1)[1]))
    if fault.startswith("block:") and int(fault.split(":", 1)[1]) == t + 1:
        folder = Path(str(context.node_config.get("signal-dir", ".")))
        signal_file = folder / f"client-{cid}-round-{t + 1}"
        signal_file.with_suffix(".tmp").write_text(str(os.getpid()))
        signal_file.with_suffix(".tmp").replace(signal_file)  # appears with this process's pid in it
        while True:  # until the node is killed
            time.sleep(3600)
    data = str(data_dir) if data_dir else None
    if not _warm(context):
        meta, vector = train_round(rc, params, cid, data)  # cold: in this process
        _WORKER.update(worker=meta["seconds"])
        return meta, vector
    # the worker of this SuperNode (the parent of this process is its flower-superexec, or the
    # fork server of dpfl's executor: either lives as long as the node's executor)
    meta, vector = WarmClient(f"{os.getppid()}-{cid}", os.getppid()).train(rc, params, cid, data)
    _WORKER.update(worker=meta.get("seconds"), connect=meta.get("connect"))
    return meta, vector


def _secure_train(msg: Message, context: Context) -> Message:
    """The SecAgg+ "collect masked vectors" stage: legacy FitIns in, legacy FitRes out (module
    docstring); ``secaggplus_mod`` masks the reply's parameters."""
    cid = _client_id(context)
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    rc: dict[str, Any] = dict(fitins.config)
    rc["state"] = json.loads(str(rc["state"]))
    bits = int(rc.pop(SECURE_SUM_KEY))
    (params,) = parameters_to_ndarrays(fitins.parameters)
    _, vector = _train_here(rc, np.array(params, copy=True), cid, context)
    if vector.dtype.kind not in "iu" or vector.ndim != 1:
        raise ConfigError(f"client {cid}: a secure round needs integer residues from the algorithm's client step, "
                          f"got a {vector.dtype} array of shape {vector.shape} (is privacy.secure_aggregation set?)")
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(encode(vector.astype(np.int64), bits)), WEIGHT, {})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    if "fitins.config" in msg.content.config_records:  # SecAgg+, through secure_sum_mod
        return _secure_train(msg, context)
    cid = _client_id(context)
    rc: dict[str, Any] = dict(msg.content["round"])
    rc["state"] = json.loads(str(rc["state"]))
    if isinstance(rc.get("shuffler-key"), bytes):
        rc["shuffler-key"] = bytes(rc["shuffler-key"]).hex()
    params = np.array(as_array(msg.content["global"]["params"]), copy=True)
    fault = str(context.node_config.get("fault", ""))
    meta, vector = _train_here(rc, params, cid, context)
    declared = dict(meta["declared"])
    if fault == "nan":
        vector = vector.copy()
        vector[0] = float("nan")
    elif fault == "shape":
        vector = vector[:-1]
    elif fault == "noise":
        declared["noise_std"] = declared.get("noise_std", 0.0) * 0.5 + 1e-3
    elif fault == "scale":
        vector = vector * 1e6
    content = _upload(cid, vector, meta, declared)
    if meta.get("sealed"):  # split & shuffle: only the shuffler can read the report
        del content["upload"]
        content["sealed"] = ConfigRecord({"report": bytes.fromhex(meta["sealed"])})
    return Message(content, reply_to=msg)
