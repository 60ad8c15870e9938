"""The Flower cohort against an in-process stand-in for Flower's Grid (no Flower processes).

Four SuperNodes: client 0 is well; client 1's node is gone (the SuperLink answers for it with its
own "node unavailable" error, from the SuperLink's node id); client 2 always answers after its
round closed; client 3 sends its upload ×10⁶. Checked: the dropout is labelled as a dropout; the
scaled upload is rejected by the norm check; the late and the rejected uploads, which reached
the server, are charged to the server observer exactly like an aggregated one.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Error, Message  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from dpfl.config import parse_config  # noqa: E402
from dpfl.rounds import build_experiment, run_experiment  # noqa: E402
from dpfl.runtime.flower.client_app import _upload  # noqa: E402
from dpfl.runtime.flower.transport import FlowerCohort  # noqa: E402
from dpfl.runtime.flower.warm import train_round  # noqa: E402
from dpfl.store import RunStore  # noqa: E402

SUPERLINK_NODE = 1
NODES = {0: 10, 1: 11, 2: 12, 3: 13}


class FakeGrid:
    """push/pull of Flower's Grid; replies are computed by the real client code at push time."""

    def __init__(self, data_dir: str, forged_loss: float | None = None) -> None:
        self.data_dir = data_dir
        self.forged_loss = forged_loss  # a modified client that sends a loss anyway
        self.ready: list[Message] = []
        self.late: list[Message] = []

    def push_messages(self, messages: list[Message]) -> list[str]:
        self.ready += self.late  # what was late in the previous round arrives now
        self.late = []
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            ids.append(msg.metadata.message_id)
            node = msg.metadata.dst_node_id
            cid = {v: k for k, v in NODES.items()}[node]
            if cid == 1:
                err = Message(Error(code=3, reason="Error: Node Unavailable"), reply_to=msg)
                err.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE
                self.ready.append(err)
                continue
            rc: dict[str, Any] = dict(msg.content["round"])
            rc["state"] = json.loads(str(rc["state"]))
            params = np.array(msg.content["global"]["params"].numpy(), copy=True)
            meta, vector = train_round(rc, params, cid, self.data_dir)
            if self.forged_loss is not None:
                meta["train_loss"] = self.forged_loss
            if cid == 3:
                vector = vector * 1e6
            reply = Message(_upload(cid, vector, meta, meta["declared"]), reply_to=msg)
            (self.late if cid == 2 else self.ready).append(reply)
        return ids

    def pull_messages(self, ids: Any) -> list[Message]:
        want = set(ids)
        got = [m for m in self.ready if m.metadata.reply_to_message_id in want]
        self.ready = [m for m in self.ready if m not in got]
        return got


@pytest.fixture(autouse=True)
def _task_identity() -> Any:
    before = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)  # type: ignore[attr-defined]
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1  # needed to build Messages
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = before  # type: ignore[attr-defined]


def _nbafl(shared_data: Path, name: str, rounds: int) -> Any:
    return parse_config({
        "name": name, "seed": 3, "rounds": rounds,
        "data": {"name": "mnist", "dir": str(shared_data)},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 30},
        "model": {"name": "logistic"},
        "algorithm": {"name": "nbafl", "options": {"epsilon": 60.0, "clip_norm": 10.0, "prox_mu": 0.1}},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 10}, "engine": "sequential", "threads": 1,
        "privacy": {"delta": 0.01},
    })


def test_dropouts_late_and_rejected_uploads_on_a_grid(shared_data: Path, tmp_path: Path) -> None:
    cfg = _nbafl(shared_data, "cohort", rounds=2)
    exp = build_experiment(cfg)
    cohort = FlowerCohort(FakeGrid(str(shared_data)), NODES, json.dumps(cfg.model_dump(mode="json")),
                          exp.data.sizes(), exp.problem.layout.numel, round_timeout=0.3, reproducible=True)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store, remote=cohort)
    assert res.status == "finished"
    assert [r["arrived"] for r in store.rounds(res.run_id)] == [1, 1]
    notes = store.notices(res.run_id)

    def kind(k: str) -> list[str]:
        return [n["message"] for n in notes if n["kind"] == k]

    # the SuperLink's error reply for client 1 is its dropout, not "a reply from node 1"
    assert [m for m in kind("dropout") if "client 1 (node 11) failed" in m] and len(kind("dropout")) == 4
    rejected = kind("rejected-upload")
    assert len(rejected) == 2 and all("client 3: L2 norm" in m for m in rejected)
    late = kind("late-upload")
    assert len(late) == 2 and all("client 2" in m for m in late)
    assert "round 1: the upload of client 2 arrived after the round closed" in late[0]
    assert "round 2: client 2 had not replied when the run ended" in late[1]
    eps = res.final["privacy"]["client_epsilons_rdp"]["server"]
    assert sorted(eps) == ["0", "2", "3"]  # client 1 never sent anything
    assert eps["2"] == pytest.approx(eps["0"], rel=1e-12) and eps["3"] == pytest.approx(eps["0"], rel=1e-12)


def test_a_training_loss_sent_for_a_private_algorithm_is_discarded_not_stored(shared_data: Path,
                                                                               tmp_path: Path) -> None:
    """The honest client sends NaN (warm.py); a modified one that sends its loss anyway has it
    discarded by the server, with a notice, and no round stores a train_loss."""
    cfg = _nbafl(shared_data, "cohort-loss", rounds=1)
    exp = build_experiment(cfg)
    cohort = FlowerCohort(FakeGrid(str(shared_data), forged_loss=0.123), NODES,
                          json.dumps(cfg.model_dump(mode="json")), exp.data.sizes(), exp.problem.layout.numel,
                          round_timeout=0.3, reproducible=True)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store, remote=cohort)
    assert res.status == "finished"
    notes = [n["message"] for n in store.notices(res.run_id) if n["kind"] == "discarded-loss"]
    assert notes and "clients [0]" in notes[0] and "discarded, not stored" in notes[0]
    assert all("train_loss" not in r for r in store.rounds(res.run_id))
