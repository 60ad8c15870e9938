"""The server side of a round on Flower: send, wait, validate, hand over the valid rows.

:class:`FlowerCohort` is the ``remote`` of :func:`dpfl.rounds.run_experiment`. It
knows which SuperNode holds which dpfl client (asked once with a ``query`` message), sends the
global model to the nodes of the sampled clients, and collects replies until all arrived or the
round timeout passed. A client that does not reply in time (crashed, killed, straggling) or
replies with an error is a dropout; a reply that fails :func:`dpfl.runtime.validate.check_upload`
is rejected. Both are logged with the client's id and the round goes on with the rest; the
runner then records what the round really released (``releases_for_arrivals``).

Secure aggregation (``privacy.secure_aggregation`` with DP-FedAvg's integer pipeline; built with
``secure_bits``, see :func:`secure_bits_for`): a round is one run of
Flower's ``SecAggPlusWorkflow`` among the nodes of the sampled clients (:meth:`FlowerCohort.secure_round`),
the masks expanded with ChaCha20 (:mod:`.masks`). Each client trains and uploads its residues
modulo 2^b (b <= 31) through the workflow's "collect masked vectors" stage (legacy FitIns/FitRes,
:func:`dpfl.runtime.flower.secagg.encode`); the server learns only their modular sum and who is
in it. Parameters (:func:`dpfl.runtime.flower.secagg.secagg_shares`): every client of a cohort of
n <= 15 shares its secrets with all n (SecAgg, a complete graph); larger cohorts use SecAgg+'s
sparse graph of ``2*ceil(log2 n) + 1`` neighbours; the reconstruction threshold is
``floor(shares/2) + 1`` — more than half the shares, so that no set of replies lets the server
reconstruct both a client's private mask seed and its pairwise key (Bell et al. 2020), and at most
``shares - threshold`` neighbours of each client may drop out. Every stage waits at most the round
timeout.

Hidden participation (``privacy.participation: hidden``, ``hidden_participation``): the loop does not sample;
every round's secure sum runs among all N clients' nodes, and each client flips its own secret coin
of probability q (stream (t, k, "coin"): the OS CSPRNG unless the run is ``reproducible``). Every
client trains; one whose coin is 0 uploads the encoding of a zero update plus its Skellam share
μ/N, so each message has the same size, the same masking and a training's timing whatever the coin
(DP-FedAvg's ``client_step``). The server learns the modular sum and who replied, never who was
sampled: its release is the public's, amplified by the clients' own Poisson sample. Cost: N
uploads and N trainings per round instead of qN.

Dropouts and the ledger: the round's ``Uploads.clients`` are exactly the clients whose masked
vector reached the server (the workflow's survivors of the masked stage; a client lost after it,
in the unmask stage, is in the sum, reconstructed from its neighbours' shares). A client lost
before is not in the sum and not charged; DP-FedAvg tops the noise up for it. If the protocol
halts (fewer than the threshold survive in some neighbourhood), or the cohort has fewer than 2
clients (SecAgg+ needs two, and a sum of one is that client's upload), the round is an empty
round: no client is asked to train, nothing is charged, the server draws the whole planned noise
(notice ``secure-sum-skipped`` / ``secure-sum-failed``) — never a plaintext upload. Masked vectors
that never enter an unmasked sum reveal nothing (uniform one-time pads): they are not charged.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common import FitIns, Scalar, ndarrays_to_parameters
from flwr.server import LegacyContext
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid

from dpfl.algorithms.base import Algorithm, Uploads
from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.client.context import RoundInfo
from dpfl.errors import ConfigError
from dpfl.runtime.flower import masks, timing
from dpfl.runtime.flower.codec import decode_upload, encode_train
from dpfl.runtime.flower.records import as_array, as_bytes, as_int, as_list, error_reason
from dpfl.runtime.flower.secagg import (
    MAX_BITS,
    SECURE_SUM_KEY,
    SecAggSettings,
    SecureSum,
    SecureSumStrategy,
    secagg_settings,
    secagg_shares,
)
from dpfl.runtime.sealed import sealed_length
from dpfl.runtime.validate import RejectedUpload, check_upload
from dpfl.server.shuffle import IdMultisets

masks.install()  # the server unmasks with the masks the clients use (ChaCha20)

POLL_SECONDS = 0.2

_Row = tuple[torch.Tensor, int, float, dict[str, float]]
"""An accepted upload: (vector [P], number of samples, training loss, declared values)."""


def _push_pull(grid: Grid, messages: list[Message], timeout: float) -> tuple[list[str], list[Message], set[str]]:
    """Push ``messages`` and pull replies until all came back or ``timeout`` seconds passed.

    Returns the ids of the pushed messages (in order), the replies, and the ids still unanswered.
    """
    ids = [str(i) for i in grid.push_messages(messages)]
    pending = set(ids)
    replies: list[Message] = []
    end = time.monotonic() + timeout
    while pending and time.monotonic() < end:
        got = list(grid.pull_messages(pending))
        replies.extend(got)
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if pending:
            time.sleep(POLL_SECONDS)
    return ids, replies, pending


class PromptGrid(Grid):
    """A ServerApp's ``Grid`` whose ``send_and_receive`` polls for replies every
    :data:`POLL_SECONDS` (Flower's waits 3 s between polls: SecAgg+'s four stages per round each
    lost up to that); everything else is the wrapped grid's. With ``DPFL_FLOWER_TIMINGS`` set it
    records when each reply arrives (:mod:`.timing`)."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self._sent: dict[str, float] = {}  # message id → created (timings only)

    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return self._grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = [str(i) for i in self._grid.push_messages(messages)]
        if timing.enabled():
            self._sent.update((i, m.metadata.created_at) for i, m in zip(ids, messages, strict=True))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        got = list(self._grid.pull_messages(message_ids))
        if timing.enabled():
            for m in got:
                ask = str(m.metadata.reply_to_message_id)
                timing.record("pulled", reply_to=ask, sent=self._sent.pop(ask, None), created=m.metadata.created_at,
                              error=m.has_error())
        return got

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return _push_pull(self, list(messages), math.inf if timeout is None else timeout)[1]


def _exchange(grid: Grid, messages: list[Message], timeout: float) -> list[Message]:
    """The replies of :func:`_push_pull`."""
    return _push_pull(grid, messages, timeout)[1]


@dataclass
class Shuffler:
    """The shuffler SuperNode of a federation (node config ``role=shuffler``)."""

    node: int
    public_key: bytes


def discover_nodes(grid: Grid, num_clients: int, timeout: float, log: Callable[[str], None] = print,
                   shuffler: list[Shuffler] | None = None, config_json: str = "") -> dict[int, int]:
    """dpfl client id → node id, asking every connected SuperNode which client it holds.

    Waits up to ``timeout`` seconds for all ``num_clients`` clients to be present. A shuffler
    node, if one answers, is appended to ``shuffler``. ``config_json`` (the run's config, as the
    train messages carry it) goes with the question, so that each node's warm worker starts and
    builds the run before the first round.
    """
    end = time.monotonic() + timeout
    mapping: dict[int, int] = {}
    asked: set[int] = set()
    while time.monotonic() < end:
        nodes = [n for n in grid.get_node_ids() if n not in asked]
        if nodes:
            ask = {"ask": "client", **({"config": config_json} if config_json else {})}
            msgs = [Message(RecordDict({"q": ConfigRecord(dict(ask))}), n, "query") for n in nodes]
            for rep in _exchange(grid, msgs, max(5.0, min(30.0, end - time.monotonic()))):
                if rep.has_error():
                    continue
                node = int(rep.metadata.src_node_id)
                if "shuffler" in rep.content:
                    if shuffler is not None and not shuffler:
                        shuffler.append(Shuffler(node, as_bytes(rep.content["shuffler"]["public"])))
                        log(f"shuffler: node {node}")
                    asked.add(node)
                    continue
                cid = as_int(rep.content["meta"]["client"])
                if cid in mapping and mapping[cid] != node:
                    raise ConfigError(f"two SuperNodes ({mapping[cid]} and {node}) hold client {cid}")
                if not 0 <= cid < num_clients:
                    raise ConfigError(f"SuperNode {node} holds client {cid}, but the run has clients "
                                      f"0..{num_clients - 1}")
                mapping[cid] = node
                asked.add(node)
        if len(mapping) == num_clients:
            log(f"all {num_clients} clients connected")
            return mapping
        time.sleep(0.5)
    missing = sorted(set(range(num_clients)) - set(mapping))
    raise ConfigError(
        f"{len(mapping)} of {num_clients} clients connected within {timeout:g} s; missing client ids "
        f"{missing[:20]} (start a SuperNode with --node-config 'partition-id=<id>' for each)")


def secure_bits_for(config: Any, algorithm: Algorithm, *, reproducible: bool) -> int | None:
    """The modulus exponent b of a deployed secure sum, or None when the run has none.

    None unless ``privacy.secure_aggregation`` is set and the algorithm's calibration has an
    integer pipeline (``secure_sum``); :func:`dpfl.rounds.session.check_secure_aggregation` then
    refuses what cannot run (other algorithms, hidden participation).

    Raises:
        ConfigError: ``algorithm.options.secure_sum.bits`` above 31 (Flower's SecAgg+ quantizer
            casts to int32).
    """
    if not config.privacy.secure_aggregation:
        return None
    calibration = getattr(algorithm, "calibration", None)
    secure = getattr(calibration(), "secure_sum", None) if callable(calibration) else None
    if secure is None:
        return None
    bits = int(secure.bits)
    if bits > MAX_BITS:
        raise ConfigError(f"algorithm.options.secure_sum.bits = {bits}: a deployed secure sum runs through Flower's "
                          f"SecAgg+, whose quantizer casts to int32, so residues modulo 2^b pass unchanged only for "
                          f"b <= {MAX_BITS}; set `algorithm.options.secure_sum.bits: {MAX_BITS}` (or fewer: the "
                          "calibration refuses a modulus whose wrap-around bound is too high)")
    del reproducible  # the rotation's signs are a public function of the round (any randomness source)
    return bits


class _NodeProxy(ClientProxy):
    """The legacy ClientProxy of a node: the workflow and the strategy only read ``node_id``."""

    def __init__(self, node_id: int) -> None:
        super().__init__(str(node_id))
        self.node_id = int(node_id)

    def _legacy(self, *_: Any, **__: Any) -> Any:
        raise NotImplementedError("dpfl drives SecAgg+ through the workflow's messages only")

    get_properties = get_parameters = fit = evaluate = reconnect = _legacy


class _CohortStrategy(SecureSumStrategy):
    """:class:`SecureSumStrategy` for one dpfl round: exactly the cohort's nodes, each with its own
    FitIns (the global model; the round record of :mod:`.codec` plus :data:`SECURE_SUM_KEY`)."""

    def __init__(
        self, settings: SecAggSettings, fitins: dict[int, FitIns], on_sum: Callable[[SecureSum], None]
    ) -> None:
        super().__init__(settings, len(fitins), on_sum)
        self._fitins = fitins

    def configure_fit(self, server_round: int, parameters: Any, client_manager: ClientManager
                      ) -> list[tuple[ClientProxy, FitIns]]:
        self._sampled[server_round] = tuple(sorted(self._fitins))
        return [(_NodeProxy(node), ins) for node, ins in self._fitins.items()]


class FlowerCohort:
    """See the module docstring.

    ``secure_bits`` (:func:`secure_bits_for`): run each round as a SecAgg+ secure sum of
    residues modulo ``2**secure_bits``; the cohort then declares ``secure_sum = True``. With
    ``hidden_participation`` as well (``privacy.participation: hidden``): every client of the population joins
    every round's secure sum and samples itself with its own secret coin
    (``hidden_participation = True``; the loop then does not sample).
    """

    tag = "flower"
    workflow_type: type[SecAggPlusWorkflow] = SecAggPlusWorkflow
    """The SecAgg+ workflow class (a test may record its stages with a subclass)."""

    def __init__(self, grid: Grid, nodes: dict[int, int], config_json: str, client_sizes: torch.Tensor,
                 num_params: int, round_timeout: float, *, reproducible: bool = False,
                 shuffler: Shuffler | None = None, secure_bits: int | None = None,
                 hidden_participation: bool = False) -> None:
        if hidden_participation and secure_bits is None:
            raise ConfigError("hidden participation (the clients' own coins) needs a secure sum: without one the "
                              "server would read every upload and so every coin.")
        self.secure_bits = secure_bits
        self.secure_sum = secure_bits is not None
        self.hidden_participation = bool(hidden_participation)
        self.grid = grid
        self.nodes = nodes
        self.config_json = config_json
        self.client_sizes = client_sizes
        self.num_params = num_params
        self.round_timeout = float(round_timeout)
        self.reproducible = bool(reproducible)
        self.shuffler = shuffler
        self._warned_no_shuffler = False
        self._pending: dict[str, tuple[int, int]] = {}  # train message id → (round, client), no reply yet
        self._unused: list[tuple[int, int]] = []  # (round, client): upload received, not aggregated

    def fewest_in_sum(self, cohort_size: int) -> int | None:
        """The fewest masked vectors a completed secure sum of ``cohort_size`` clients can hold
        (None without a secure sum): the unmask stage needs replies from at least the SecAgg+
        reconstruction threshold, each from a client whose vector is in the sum. What the round
        loop charges ahead of a secure round, in case the server dies before recording it."""
        if self.secure_bits is None or cohort_size < 2:
            return None
        return min(int(cohort_size), secagg_shares(int(cohort_size))[1])

    # ------------------------------------------------------------------ uploads seen, not used

    def _drain(self, emit: Callable[[str, str, Any], None]) -> None:
        """Pull replies that came after their round closed: a late upload reached the SuperLink
        (a release to the server observer); a late error is a dropout already noted."""
        if not self._pending:
            return
        for rep in self.grid.pull_messages(list(self._pending)):
            key = self._pending.pop(str(rep.metadata.reply_to_message_id), None)
            if key is None or rep.has_error():
                continue
            r, c = key
            self._unused.append((r, c))
            emit("late-upload", f"round {r + 1}: the upload of client {c} arrived after the round closed; not "
                 "aggregated, charged to the server observer", r)

    def outstanding(self) -> list[tuple[int, int]]:
        """(round, client) of train messages still unanswered: their uploads may still arrive."""
        return sorted(self._pending.values())

    def unused_uploads(self, *, final: bool = False, emit: Callable[[str, str, Any], None]) -> list[tuple[int, int]]:
        """(round, client) of uploads that reached the server but entered no aggregate since the
        last call (rejected, or late). With ``final`` (the run ends), uploads still outstanding
        are included: they can reach the SuperLink until the run is closed."""
        self._drain(emit)
        if final:
            for r, c in self.outstanding():
                self._unused.append((r, c))
                emit("late-upload", f"round {r + 1}: client {c} had not replied when the run ended; charged to the "
                     "server observer, as its upload may still reach the SuperLink before the run is closed", r)
            self._pending.clear()
        out, self._unused = self._unused, []
        return out

    def __call__(self, params: torch.Tensor, info: RoundInfo, algo: Algorithm,
                 emit: Callable[[str, str, Any], None]) -> Uploads:
        if self.secure_bits is not None:
            return self.secure_round(params, info, algo, emit)
        t = info.round_idx
        cohort = [int(c) for c in info.clients.tolist()]
        shuffled = bool(getattr(algo, "shuffles_uploads", False))
        if shuffled and self.shuffler is None and not self._warned_no_shuffler:
            emit("no-shuffler", f"{algo.name} splits and shuffles its reports, but the federation has no shuffler "
                 "SuperNode (--node-config role=\"shuffler\"): the server receives each client's report and mixes "
                 "them itself, i.e. it is trusted as the shuffler (the certified server-observer epsilon assumes "
                 "no shuffler either way)", t)
            self._warned_no_shuffler = True
        shuffled = shuffled and self.shuffler is not None
        self._drain(emit)
        shuffler_key = self.shuffler.public_key if shuffled and self.shuffler is not None else None
        msgs = []
        for member in cohort:
            content = encode_train(params, round_idx=t, client=member, cohort_size=len(cohort),
                                   num_clients=info.num_clients, config_json=self.config_json,
                                   state=algo.client_state(member, info), reproducible=self.reproducible,
                                   shuffler_key=shuffler_key)
            msgs.append(Message(content, self.nodes[member], "train", group_id=str(t)))
        limits = ({} if shuffled or not isinstance(algo, PrivateAlgorithm)
                  else algo.upload_norm_limits(info, self.client_sizes[info.clients], self.num_params))
        # a private algorithm's loss stays on the client (no certificate covers it): whatever a
        # client sends in its place is discarded here, not stored
        keep_loss = not isinstance(algo, PrivateAlgorithm) or algo.reports_train_loss
        discarded: list[int] = []
        sent, replies, pending = _push_pull(self.grid, msgs, self.round_timeout)
        message_client = dict(zip(sent, cohort, strict=True))
        for mid in pending:
            self._pending[mid] = (t, message_client[mid])
            emit("dropout", f"round {t + 1}: client {message_client[mid]} (node {self.nodes[message_client[mid]]}) "
                 f"did not reply within the round timeout of {self.round_timeout:g} s", t)
        rows: dict[int, _Row] = {}
        reports: dict[int, bytes] = {}  # shuffled: the sealed report of each accepted client
        for rep in replies:
            # a reply is matched to the message it answers: the SuperLink's own error replies
            # (e.g. "node unavailable" for a killed SuperNode) come from the SuperLink's node id
            c = message_client.get(str(rep.metadata.reply_to_message_id))
            if c is None:
                continue  # cannot happen: only replies to this round's messages were pulled
            node = self.nodes[c]
            if rep.has_error():
                emit("dropout", f"round {t + 1}: client {c} (node {node}) failed: {error_reason(rep.error)}", t)
                continue
            try:
                if shuffled:  # the vector is an empty placeholder; the report is sealed
                    cid, vector, n, loss, declared = decode_upload(_without_upload(rep.content))
                    report = as_bytes(rep.content["sealed"]["report"])
                else:
                    cid, vector, n, loss, declared = decode_upload(rep.content)
                    report = b""
            except Exception as err:  # malformed records
                emit("rejected-upload",
                     f"round {t + 1}: rejected the upload of client {c}: malformed message ({err})", t)
                self._unused.append((t, c))
                continue
            if cid != c or c in rows:
                emit("rejected-upload",
                     f"round {t + 1}: rejected the upload of client {c}: it claims to be client {cid}"
                     if cid != c else f"round {t + 1}: rejected a second upload of client {c}", t)
                if c not in rows:
                    self._unused.append((t, c))
                continue
            if shuffled:  # sealed: the server checks length and declarations; the shuffler the values
                ok = len(report) == sealed_length(self.num_params)
                bad = None if ok else RejectedUpload(c, f"sealed report of {len(report)} bytes, expected "
                                                        f"{sealed_length(self.num_params)}")
                bad = bad or check_upload(c, torch.zeros(self.num_params), n, declared, num_params=self.num_params,
                                          expected_samples=int(self.client_sizes[c]), plan=algo.declared_plan(info, c))
            else:
                bad = check_upload(c, vector, n, declared, num_params=self.num_params,
                                   expected_samples=int(self.client_sizes[c]), plan=algo.declared_plan(info, c),
                                   norm_limit=limits.get(c))
            if bad is not None:
                emit("rejected-upload", bad.message(t), t)
                self._unused.append((t, c))
                continue
            if not keep_loss:
                if math.isfinite(loss):
                    discarded.append(c)
                loss = math.nan
            rows[c] = (vector, n, loss, declared)
            if shuffled:
                reports[c] = report
        if discarded:
            emit("discarded-loss", f"round {t + 1}: clients {discarded} sent a training loss that {algo.name} keeps on "
                 "the client (an unnoised function of their data); discarded, not stored", t)
        missing = [c for c in cohort if c not in rows]
        if missing:
            emit("round-partial", f"round {t + 1}: {len(rows)} of {len(cohort)} uploads accepted; without clients "
                 f"{missing} (timeout {self.round_timeout:g} s, errors or rejections logged above)", t)
        ids = sorted(rows)
        if shuffled and ids:
            return self._mix(info, rows, reports, ids, params, emit)
        if not ids:
            return _empty(self.num_params)
        dtype = params.dtype
        keys = set().union(*(rows[c][3].keys() for c in ids))
        return Uploads(
            torch.tensor(ids, dtype=torch.long),
            torch.stack([rows[c][0].to(dtype) for c in ids]).to(params.device),
            torch.tensor([rows[c][1] for c in ids], dtype=torch.long),
            torch.tensor([rows[c][2] for c in ids], dtype=torch.float32),
            {k: torch.tensor([rows[c][3].get(k, float("nan")) for c in ids], dtype=torch.float64) for k in keys},
        )

    def secure_round(self, params: torch.Tensor, info: RoundInfo, algo: Algorithm,
                     emit: Callable[[str, str, Any], None]) -> Uploads:
        """One SecAgg+ run among the cohort's nodes: the modular sum of the residues of the
        clients whose masked vector reached the server, and their ids (module docstring). With
        ``hidden_participation`` the cohort is the whole population and the ids are every client whose masked
        vector arrived, sampled by its coin or not (the server cannot tell which)."""
        assert self.secure_bits is not None
        t = info.round_idx
        cohort = [int(c) for c in info.clients.tolist()]
        if len(cohort) < 2:
            emit("secure-sum-skipped", f"round {t + 1}: a cohort of {len(cohort)} client(s) cannot run SecAgg+ "
                 "(it needs 2, and a sum of one is that client's upload): no client trains, nothing is charged, "
                 "the server draws the round's whole planned noise", t)
            return _empty(self.num_params)
        settings = secagg_settings(self.secure_bits, max_clients=max(2, info.num_clients))
        shares, threshold = secagg_shares(len(cohort))
        glob = ndarrays_to_parameters([np.ascontiguousarray(params.detach().cpu().numpy())])
        fitins: dict[int, FitIns] = {}
        for member in cohort:
            config: dict[str, Scalar] = {
                "round": int(t), "client": member, "cohort-size": len(cohort), "num-clients": int(info.num_clients),
                "config": self.config_json, "state": json.dumps(algo.client_state(member, info)),
                "reproducible": self.reproducible, SECURE_SUM_KEY: int(self.secure_bits),
                "hidden-participation": self.hidden_participation}
            fitins[self.nodes[member]] = FitIns(glob, config)
        sums: list[SecureSum] = []
        strategy = _CohortStrategy(settings, fitins, sums.append)
        run_id = int(getattr(getattr(self.grid, "run", None), "run_id", 0) or 0)
        legacy = LegacyContext(Context(run_id, 0, {}, RecordDict(), {}), strategy=strategy)
        legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: t + 1})
        workflow = self.workflow_type(shares, threshold, max_weight=settings.max_weight,
                                      clipping_range=settings.clipping_range,
                                      quantization_range=settings.quantization_range,
                                      modulus_range=settings.modulus_range, timeout=self.round_timeout)
        workflow(self.grid, legacy)
        node_client = {self.nodes[c]: c for c in cohort}
        if not sums:
            emit("secure-sum-failed", f"round {t + 1}: SecAgg+ among clients {cohort} halted (too few clients "
                 f"replied at some stage for threshold {threshold} of {shares} shares, within the round timeout of "
                 f"{self.round_timeout:g} s): no sum was unmasked, nothing is charged, the server draws the round's "
                 "whole planned noise", t)
            return _empty(self.num_params)
        total = sums[0]
        ids = sorted(node_client[n] for n in total.node_ids)
        missing = [c for c in cohort if c not in ids]
        for c in missing:
            emit("dropout", f"round {t + 1}: client {c} (node {self.nodes[c]}) sent no masked vector within the round "
                 f"timeout of {self.round_timeout:g} s: not in the secure sum", t)
        if missing:
            emit("round-partial", f"round {t + 1}: the secure sum covers {len(ids)} of {len(cohort)} clients; without "
                 f"clients {missing}", t)
        dim = int(total.total.shape[0])
        return Uploads(
            torch.tensor(ids, dtype=torch.long),
            torch.zeros(0, dim, dtype=params.dtype),
            self.client_sizes[ids].to(torch.long).reshape(-1),
            torch.full((len(ids),), math.nan, dtype=torch.float32),
            {},
            secure_sum=torch.from_numpy(np.array(total.total, dtype=np.int64, copy=True)),
        )

    def _mix(self, info: RoundInfo, rows: dict[int, _Row], reports: dict[int, bytes], ids: list[int],
             params: torch.Tensor, emit: Callable[[str, str, Any], None]) -> Uploads:
        """Relay the sealed reports to the shuffler; the server gets back per-id multisets only
        (and which relayed reports the shuffler rejected, so those clients can be named)."""
        assert self.shuffler is not None
        t = info.round_idx
        content = RecordDict({"sealed": ConfigRecord({"blobs": [reports[c] for c in ids], "round": t,
                                                      "num-params": self.num_params})})
        replies = _exchange(self.grid, [Message(content, self.shuffler.node, "query.shuffle", group_id=str(t))],
                            self.round_timeout)
        if not replies or replies[0].has_error():
            why = error_reason(replies[0].error) if replies else f"no reply within {self.round_timeout:g} s"
            emit("dropout", f"round {t + 1}: the shuffler failed ({why}); the round aggregates nothing", t)
            self._unused.extend((t, c) for c in ids)  # relayed: charged as if the server read them
            return _empty(self.num_params)
        rep = replies[0].content
        rejected = {as_int(i) for i in as_list(rep["result"]["rejected"]) if as_int(i) >= 0}
        for i in sorted(rejected):
            emit("rejected-upload", f"round {t + 1}: the shuffler rejected the sealed report of client {ids[i]} "
                 "(unreadable, wrong length or non-finite values)", t)
            self._unused.append((t, ids[i]))
        kept = [c for i, c in enumerate(ids) if i not in rejected]
        if not kept:
            return _empty(self.num_params)
        mixed = IdMultisets(torch.from_numpy(as_array(rep["mixed"]["support"]).copy()).to(params.dtype),
                            torch.from_numpy(as_array(rep["mixed"]["counts"]).copy()).to(torch.int64))
        keys = set().union(*(rows[c][3].keys() for c in kept))
        return Uploads(
            torch.tensor(kept, dtype=torch.long),
            torch.zeros(0, self.num_params, dtype=params.dtype),
            torch.tensor([rows[c][1] for c in kept], dtype=torch.long),
            torch.tensor([rows[c][2] for c in kept], dtype=torch.float32),
            {k: torch.tensor([rows[c][3].get(k, float("nan")) for c in kept], dtype=torch.float64) for k in keys},
            shuffled=mixed,
        )


def _empty(num_params: int) -> Uploads:
    return Uploads(torch.zeros(0, dtype=torch.long), torch.zeros(0, num_params), torch.zeros(0, dtype=torch.long),
                   torch.zeros(0))


def _without_upload(content: RecordDict) -> RecordDict:
    """A sealed reply with an empty placeholder vector, so the common decoder reads the rest."""
    out = RecordDict({k: v for k, v in content.items() if k != "sealed"})
    out["upload"] = ArrayRecord({"params": Array(np.zeros(0, dtype=np.float32))})
    return out
