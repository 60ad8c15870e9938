"""Exact modular sums through Flower's SecAgg+ (:mod:`dpfl.runtime.flower.secagg`).

What is checked:
* Unit, with Flower's own quantizer (``flwr.common.secure_aggregation.quantization``): encoded
  residues quantize to themselves, deterministically, for bits 1, 16 and 31 (extremes included),
  and the int32 cast really breaks at bits = 32; the settings and the errors past the limits.
* The server's averaging in float64 (the three lines of ``unmask_stage`` after the unmasking,
  with Flower's ``dequantize``): ``decode`` is exact up to its bound for any number of clients
  (a simulation cannot reach 2**18 clients), and naive rounding really fails well past it.
* The main proof, a real in-process Flower simulation (``run_simulation``, Ray backend):
  ``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(...))`` with :func:`secagg_settings` and
  :class:`SecureSumStrategy`, ClientApps with ``mods=[secaggplus_mod]``, 3 clients
  (num_shares 3, threshold 2) and 5 clients (num_shares 3, threshold 2: a sparse ring of
  neighbours, SecAgg+'s point), bits 31 and 16, 2 rounds, random residue vectors of length 1000
  (0 and 2**bits - 1 included) from a fixed seed per (bits, client, round): the decoded sum equals
  ``sum(vectors) % 2**bits`` bit for bit in every round.
* What the server receives in the masked stage (recorded by a subclass of the workflow that
  wraps the Grid for that stage only, a public method) is not the plaintext.
* Dropouts: a client failing before its masked vector is out of the sum and of ``results``; one
  failing after it (in the unmask stage) is in both.
* The report "1, 2, 3 averaged to exactly 2.0" with max_weight=1, clipping_range=8,
  quantization_range=16: as written (an int clipping range) the clients reject the setup and the
  round yields nothing; with clipping_range=8.0 (and num_examples = 1) it is exactly 2.0.
* ``SecAggPlusWorkflow`` driven round by round from a ServerApp's own loop, without
  ``DefaultWorkflow``.

Each simulation starts and stops Ray and takes 7-10 s on 2 cores; the seven simulations (~60 s)
are marked ``slow`` like the other Flower tests (``-m slow`` runs them), the unit tests run by default.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

from flwr.app import ArrayRecord, ConfigRecord, Context, Message  # noqa: E402
from flwr.client import NumPyClient  # noqa: E402
from flwr.client.mod import secaggplus_mod  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common import FitRes, Parameters, Scalar, bytes_to_ndarray, parameters_to_ndarrays  # noqa: E402
from flwr.common.secure_aggregation.quantization import dequantize, quantize  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import (  # noqa: E402
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.compat.app_utils import start_update_client_manager_thread  # noqa: E402
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow  # noqa: E402
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD  # noqa: E402
from flwr.server.workflow.constant import Key as WorkflowKey  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from dpfl.runtime.flower.secagg import (  # noqa: E402
    MAX_BITS,
    WEIGHT,
    SecAggSettings,
    SecureSum,
    SecureSumStrategy,
    decode,
    encode,
    secagg_settings,
)

SEED = 20240611
LENGTH = 1000
ROUNDS = 2
BACKEND = {
    "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
    "init_args": {"address": "local", "num_cpus": 2, "include_dashboard": False, "log_to_driver": False},
}


# ---------------------------------------------------------------------------------------------
# client side (module level: Ray ships the ClientApp to its actors)


def residues(bits: int, partition: int, server_round: int) -> np.ndarray:
    """A client's vector: fixed seed per (bits, client, round); 0 and 2**bits - 1 included."""
    vec = np.random.default_rng([SEED, bits, partition, server_round]).integers(
        0, 2**bits, size=LENGTH, dtype=np.int64
    )
    vec[0], vec[1] = 0, 2**bits - 1
    return vec


class ResidueClient(NumPyClient):
    def __init__(self, partition: int) -> None:
        self.partition = partition

    def fit(
        self, parameters: list[np.ndarray], config: dict[str, Scalar]
    ) -> tuple[list[np.ndarray], int, dict[str, Scalar]]:
        bits, server_round = int(config["bits"]), int(config["server_round"])
        return encode(residues(bits, self.partition, server_round), bits), WEIGHT, {"partition": self.partition}


def residue_client_fn(context: Context) -> Any:
    return ResidueClient(int(context.node_config["partition-id"])).to_client()


class ConstantClient(NumPyClient):
    """Sends ``partition + 1`` in every coordinate (the reported three-client case)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition

    def fit(
        self, parameters: list[np.ndarray], config: dict[str, Scalar]
    ) -> tuple[list[np.ndarray], int, dict[str, Scalar]]:
        return [np.full(10, float(self.partition + 1))], 1, {}


def constant_client_fn(context: Context) -> Any:
    return ConstantClient(int(context.node_config["partition-id"])).to_client()


@dataclass
class FailAt:
    """Client mod (outside ``secaggplus_mod``): raise at a SecAgg+ stage, for (round, partition)."""

    plan: dict[tuple[int, int], str]

    def __call__(self, msg: Message, ctxt: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        partition = int(ctxt.node_config["partition-id"])
        stage = msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
        if self.plan.get((int(msg.metadata.group_id), partition)) == stage:
            raise RuntimeError(f"partition {partition} drops at stage {stage}")
        return call_next(msg, ctxt)


# ---------------------------------------------------------------------------------------------
# server side (runs in a thread of this process)


class _RecordingGrid:
    """Delegates to a Grid and keeps the replies of ``send_and_receive``."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self.replies: list[Message] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        self.replies.extend(replies)
        return replies

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


@dataclass
class Masked:
    """What the server received from one client in the masked stage."""

    server_round: int
    partition: int
    arrays: list[np.ndarray]


class RecordingSecAggPlusWorkflow(SecAggPlusWorkflow):
    """The workflow, recording the masked vectors it collects (public stage method, Grid wrapped)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.masked: list[Masked] = []

    def collect_masked_vectors_stage(self, grid: Grid, context: LegacyContext, state: Any) -> bool:
        recording = _RecordingGrid(grid)
        ok = super().collect_masked_vectors_stage(cast(Grid, recording), context, state)
        server_round = int(cast(int, context.state.config_records["config"]["current_round"]))
        for reply in recording.replies:
            if reply.has_error():
                continue
            content = reply.content
            blobs = cast(list[bytes], content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS])
            partition = int(cast(int, content.config_records["fitres.metrics"]["partition"]))
            self.masked.append(Masked(server_round, partition, [bytes_to_ndarray(b) for b in blobs]))
        return ok


@dataclass
class Seen:
    """What ``aggregate_fit`` was given in a round."""

    server_round: int
    num_results: int
    num_failures: int
    parameters: list[np.ndarray]
    partitions: list[int] = field(default_factory=list)


class SeeingStrategy(SecureSumStrategy):
    """SecureSumStrategy that also records what ``aggregate_fit`` receives."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[Seen] = []

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        self.seen.append(Seen(
            server_round, len(results), len(failures),
            parameters_to_ndarrays(results[0][1].parameters) if results else [],
            sorted(int(cast(int, res.metrics["partition"])) for _, res in results),
        ))
        return super().aggregate_fit(server_round, results, failures)


@dataclass
class Run:
    """A finished simulation: the sums handed to the callback and what the server saw."""

    bits: int
    num_clients: int
    settings: SecAggSettings
    sums: list[SecureSum]
    strategy: SeeingStrategy
    workflow: RecordingSecAggPlusWorkflow
    server_done: threading.Event


def simulate(num_clients: int, bits: int, num_shares: int, threshold: int,
             fail_plan: dict[tuple[int, int], str] | None = None) -> Run:
    """Run ``ROUNDS`` rounds of SecAgg+ on ``num_clients`` simulated SuperNodes."""
    settings = secagg_settings(bits, max_clients=num_clients)
    sums: list[SecureSum] = []
    strategy = SeeingStrategy(settings, num_clients, sums.append, fit_config=lambda _r: {"bits": bits})
    workflow = RecordingSecAggPlusWorkflow(
        num_shares, threshold,
        max_weight=settings.max_weight, clipping_range=settings.clipping_range,
        quantization_range=settings.quantization_range, modulus_range=settings.modulus_range,
    )
    done = threading.Event()
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=ROUNDS), strategy=strategy)
        DefaultWorkflow(fit_workflow=workflow)(grid, legacy)
        done.set()

    mods: list[Any] = ([FailAt(fail_plan)] if fail_plan else []) + [secaggplus_mod]
    run_simulation(server_app=server_app, client_app=ClientApp(client_fn=residue_client_fn, mods=mods),
                   num_supernodes=num_clients, backend_config=BACKEND)
    return Run(bits, num_clients, settings, sums, strategy, workflow, done)


def expected_sum(bits: int, partitions: Iterable[int], server_round: int) -> np.ndarray:
    total = sum(residues(bits, p, server_round).astype(object) for p in partitions)  # Python ints
    return np.array([int(t) % 2**bits for t in total], dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# unit: settings, encode with Flower's quantizer, decode's float bound


def test_settings() -> None:
    s = secagg_settings(16, max_clients=5)
    assert (s.clipping_range, s.quantization_range, s.modulus_range, s.max_weight) == (2.0**15, 2**16, 2**19, 1.0)
    assert isinstance(s.clipping_range, float)  # secaggplus_mod rejects an int clipping range
    s31 = secagg_settings(MAX_BITS)
    assert (s31.clipping_range, s31.quantization_range, s31.modulus_range) == (2.0**30, 2**31, 2**41)
    assert s31.max_clients * s31.quantization_range < s31.modulus_range
    wf = s31.workflow(3, 2)
    assert (wf.clipping_range, wf.quantization_range, wf.modulus_range, wf.max_weight) == (2.0**30, 2**31, 2**41, 1.0)
    for bad in (0, 32, 64, 16.0, True):
        with pytest.raises(ValueError, match=f"bits={bad!r}"):
            secagg_settings(bad)
    secagg_settings(31, max_clients=2**18 - 1)
    with pytest.raises(ValueError, match="max_clients=262144"):
        secagg_settings(31, max_clients=2**18)
    with pytest.raises(ValueError, match="max_clients=0"):
        secagg_settings(16, max_clients=0)


@pytest.mark.parametrize("bits", [1, 16, MAX_BITS])
def test_encoded_residues_quantize_to_themselves(bits: int) -> None:
    """Flower's own quantizer maps encode(r) to r exactly, whatever numpy's global RNG holds."""
    s = secagg_settings(bits)
    r = np.random.default_rng(bits).integers(0, 2**bits, size=5000, dtype=np.int64)
    r[:2] = [0, 2**bits - 1]
    (enc,) = encode(r, bits)
    assert enc.dtype == np.float64
    for seed in range(3):
        np.random.seed(seed)
        (q,) = quantize([enc * 1.0], s.clipping_range, s.quantization_range)  # dq_ratio is 1.0
        assert q.dtype == np.int32
        assert np.array_equal(q.astype(np.int64), r)
    # the weight factor: round(num_examples / max_weight * Q) / Q == 1 exactly
    q_ratio = round(WEIGHT / s.max_weight * s.quantization_range)
    assert q_ratio == s.quantization_range and q_ratio / s.quantization_range == 1.0


def test_int32_cast_is_why_bits_stop_at_31() -> None:
    """With bits = 32 (c = 2**31, Q = 2**32) the largest residue does not survive the int32 cast."""
    top = np.array([2.0**32 - 1 - 2.0**31])  # encode's value of 2**32 - 1
    with np.errstate(invalid="ignore"):
        (q,) = quantize([top], 2.0**31, 2**32)
    assert int(q[0]) != 2**32 - 1


def test_encode_rejects() -> None:
    with pytest.raises(ValueError, match=r"\[0, 2\*\*16\)"):
        encode(np.array([0, 2**16]), 16)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*16\)"):
        encode(np.array([-1, 3]), 16)
    with pytest.raises(TypeError, match="integer"):
        encode(np.array([1.0]), 16)
    with pytest.raises(ValueError, match="bits=32"):
        encode(np.array([1]), 32)


def _server_average(total: np.ndarray, n: int, s: SecAggSettings) -> np.ndarray:
    """``unmask_stage`` after the unmasking, for the unmasked sum ``total`` of ``n`` clients."""
    q_total_ratio = np.array([n * s.quantization_range], dtype=np.int64)[0]
    inv_dq_total_ratio = s.quantization_range / q_total_ratio
    (vec,) = dequantize([total], s.clipping_range, s.quantization_range)
    vec += -(n - 1) * s.clipping_range
    vec *= inv_dq_total_ratio
    return cast(np.ndarray, vec)


@pytest.mark.parametrize("bits,n", [(31, 3), (31, 2**18 - 1), (31, 2**18), (16, 7), (16, 2**33 - 5), (1, 2**48 - 1)])
def test_decode_is_exact_up_to_its_bound(bits: int, n: int) -> None:
    """Any unmasked sum of n clients (quantized values are the residues) decodes exactly."""
    s = SecAggSettings(bits, n, float(2 ** (bits - 1)), 2**bits, 2 ** (bits + n.bit_length()), 1.0)
    rng = np.random.default_rng(n)
    top = n * (2**bits - 1)
    total = np.concatenate([rng.integers(0, top + 1, size=100_000, dtype=np.int64),
                            np.array([0, 1, top - 1, top, top // 2], dtype=np.int64)])
    out = decode([_server_average(total, n, s)], n, bits)
    assert out.dtype == np.int64
    assert np.array_equal(out, total % 2**bits)


def test_decode_bound_is_needed() -> None:
    """Far past the bound the float average really loses the integer; decode refuses before."""
    bits, n = 31, 2**23 - 1
    s = SecAggSettings(bits, n, 2.0**30, 2**31, 2**54, 1.0)
    total = np.random.default_rng(0).integers(0, n * (2**bits - 1) + 1, size=100_000, dtype=np.int64)
    avg = _server_average(total, n, s)
    naive = (np.rint(avg * n).astype(np.int64) + n * 2**30) % 2**bits
    assert not np.array_equal(naive, total % 2**bits)
    with pytest.raises(ValueError, match=f"num_clients={n}"):
        decode([avg], n, bits)
    with pytest.raises(ValueError, match="num_clients=262145"):
        decode([np.zeros(3)], 2**18 + 1, 31)


def test_decode_detects_a_wrong_client_count() -> None:
    s = secagg_settings(16, max_clients=7)
    total = np.array([5, 2**16 + 3, 3 * (2**16 - 1)], dtype=np.int64)
    avg = _server_average(total, 3, s)
    assert np.array_equal(decode([avg], 3, 16), total % 2**16)
    with pytest.raises(ValueError, match="not an average of 2"):
        decode([avg], 2, 16)
    with pytest.raises(ValueError, match="non-finite"):
        decode([np.array([np.inf])], 3, 16)
    with pytest.raises(ValueError, match="one aggregated array"):
        decode([avg, avg], 3, 16)


# ---------------------------------------------------------------------------------------------
# real simulations


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[tuple[int, int], Run]]:
    """One simulation per (clients, bits), shared by the tests that read it."""
    cache: dict[tuple[int, int], Run] = {}
    yield cache


def _run(runs: dict[tuple[int, int], Run], num_clients: int, bits: int) -> Run:
    if (num_clients, bits) not in runs:
        runs[(num_clients, bits)] = simulate(num_clients, bits, num_shares=3, threshold=2)
    return runs[(num_clients, bits)]


CASES = [(3, MAX_BITS), (3, 16), (5, MAX_BITS), (5, 16)]


@pytest.mark.parametrize("num_clients,bits", CASES)
@pytest.mark.slow  # real Flower simulations on Ray (7–10 s each), like the other Flower tests
def test_secure_sum_is_the_modular_sum(runs: dict[tuple[int, int], Run], num_clients: int, bits: int) -> None:
    run = _run(runs, num_clients, bits)
    assert run.server_done.is_set()
    assert [s.server_round for s in run.sums] == list(range(1, ROUNDS + 1))
    for s, seen in zip(run.sums, run.strategy.seen, strict=True):
        assert s.num_clients == num_clients and s.node_ids == s.sampled_node_ids
        assert (seen.num_results, seen.num_failures) == (num_clients, 0)
        assert seen.partitions == list(range(num_clients))
        expected = expected_sum(bits, range(num_clients), s.server_round)
        assert s.total.dtype == np.int64
        assert np.array_equal(s.total, expected)
    assert not np.array_equal(run.sums[0].total, run.sums[1].total)


@pytest.mark.parametrize("num_clients,bits", [(3, 16), (5, MAX_BITS)])
@pytest.mark.slow  # real Flower simulations on Ray (7–10 s each), like the other Flower tests
def test_server_receives_masked_vectors_not_plaintext(runs: dict[tuple[int, int], Run], num_clients: int,
                                                      bits: int) -> None:
    run = _run(runs, num_clients, bits)
    m = run.settings.modulus_range
    assert sorted((x.server_round, x.partition) for x in run.workflow.masked) == [
        (r, p) for r in range(1, ROUNDS + 1) for p in range(num_clients)]
    for x in run.workflow.masked:
        weight, vec = x.arrays  # [masked weight factor, masked vector]
        plain = residues(bits, x.partition, x.server_round)
        assert vec.dtype == np.int64 and vec.shape == plain.shape
        assert vec.min() >= 0 and vec.max() < m
        assert int(weight[0]) != run.settings.quantization_range  # the weight is masked too
        assert np.mean(vec == plain) < 0.01
        # masks are spread over [0, M): far more than half of the entries leave [0, 2**bits)
        assert np.mean(vec >= 2**bits) > 0.5
    # and yet the sum of what was received, unmasked by the protocol, is the right sum
    assert np.array_equal(run.sums[0].total, expected_sum(bits, range(num_clients), 1))


@pytest.mark.slow  # real Flower simulations on Ray (7–10 s each), like the other Flower tests
def test_dropouts_before_and_after_masking() -> None:
    """Round 1: client 0 fails in the masked stage. Round 2: client 1 fails in the unmask stage."""
    run = simulate(5, 16, num_shares=3, threshold=2,
                   fail_plan={(1, 0): Stage.COLLECT_MASKED_VECTORS, (2, 1): Stage.UNMASK})
    assert [s.server_round for s in run.sums] == [1, 2]
    first, second = run.sums
    seen1, seen2 = run.strategy.seen
    # before masking: out of results and of the sum; the average is over the 4 survivors
    assert first.num_clients == 4 and len(first.sampled_node_ids) == 5
    assert set(first.node_ids) < set(first.sampled_node_ids)
    # flwr 1.42's masked stage appends each error reply to `failures` twice (two loops over the
    # replies); do not count dropouts from `failures`
    assert seen1.partitions == [1, 2, 3, 4] and seen1.num_failures >= 1
    assert np.array_equal(first.total, expected_sum(16, [1, 2, 3, 4], 1))
    # after masking: its masked vector is in, so it is in results and in the sum
    assert second.num_clients == 5 and second.node_ids == second.sampled_node_ids
    assert seen2.partitions == [0, 1, 2, 3, 4] and seen2.num_failures == 1
    assert np.array_equal(second.total, expected_sum(16, range(5), 2))
    print(f"\nfailures seen by aggregate_fit: round 1 {seen1.num_failures}, round 2 {seen2.num_failures}")


@pytest.mark.slow  # real Flower simulations on Ray (7–10 s each), like the other Flower tests
def test_reported_average_of_one_two_three() -> None:
    """The report: 3 clients sending 1, 2, 3 (num_examples 1), ``SecAggPlusWorkflow(num_shares=3,
    reconstruction_threshold=2, max_weight=1, clipping_range=8, quantization_range=16)``.

    As written (``clipping_range=8``, an int) every client rejects the setup stage
    (``secaggplus_mod`` requires a float clipping range), the workflow halts ("Insufficient
    available nodes") and ``aggregate_fit`` is never called: no result at all. With
    ``clipping_range=8.0`` the average is exactly 2.0 (quantized 9, 10, 11; no rounding).
    Both in one simulation: two one-round DefaultWorkflows, each with its own LegacyContext.
    """
    seen: dict[str, list[list[np.ndarray]]] = {"int": [], "float": []}

    class Capture(SecureSumStrategy):
        def __init__(self, label: str) -> None:
            super().__init__(secagg_settings(16, max_clients=3), 3, lambda _s: None)
            self.label = label

        def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                          failures: list[tuple[ClientProxy, FitRes] | BaseException]
                          ) -> tuple[Parameters | None, dict[str, Scalar]]:
            seen[self.label].append(parameters_to_ndarrays(results[0][1].parameters))
            return None, {}

    server_app = ServerApp()
    done = threading.Event()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        for label, clipping_range in (("int", 8), ("float", 8.0)):
            legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=Capture(label))
            wf = SecAggPlusWorkflow(num_shares=3, reconstruction_threshold=2, max_weight=1,
                                    clipping_range=clipping_range, quantization_range=16)
            DefaultWorkflow(fit_workflow=wf)(grid, legacy)
        done.set()

    run_simulation(server_app=server_app, client_app=ClientApp(client_fn=constant_client_fn, mods=[secaggplus_mod]),
                   num_supernodes=3, backend_config=BACKEND)
    assert done.is_set()
    assert seen["int"] == []
    assert len(seen["float"]) == 1
    (avg,) = seen["float"][0]
    assert avg.dtype == np.float64 and np.all(avg == 2.0)


@pytest.mark.slow  # real Flower simulations on Ray (7–10 s each), like the other Flower tests
def test_workflow_driven_round_by_round_from_own_loop() -> None:
    """A ServerApp's own loop runs one SecAgg+ round per call, with its own work in between."""
    bits, n = 16, 3
    settings = secagg_settings(bits, max_clients=n)
    sums: list[SecureSum] = []
    between: list[int] = []
    strategy = SecureSumStrategy(settings, n, sums.append, fit_config=lambda _r: {"bits": bits})
    workflow = settings.workflow(3, 2)
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        legacy = LegacyContext(context=context, strategy=strategy)
        thread, stop, registered = start_update_client_manager_thread(grid, legacy.client_manager)
        registered.wait()
        legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
        cfg = ConfigRecord()
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = cfg
        try:
            for server_round in (1, 2):
                cfg[WorkflowKey.CURRENT_ROUND] = server_round
                workflow(grid, legacy)  # one round: the four SecAgg+ stages
                between.append(len(sums))  # the caller's own work between rounds
        finally:
            stop.set()
            thread.join()

    run_simulation(server_app=server_app, client_app=ClientApp(client_fn=residue_client_fn, mods=[secaggplus_mod]),
                   num_supernodes=n, backend_config=BACKEND)
    assert between == [1, 2]
    for s in sums:
        assert np.array_equal(s.total, expected_sum(bits, range(n), s.server_round))
