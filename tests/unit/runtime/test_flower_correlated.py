"""Correlated noise for a Flower app (``dpfl.runtime.flowerapps.correlated``), driven without Flower's
engines: a grid of fake nodes, replies built by hand.

Checked: the cohort is the schema's (cyclic order over the nodes in id order), each update is
clipped on the server, the aggregate is θ + (Σ clipped Δ + σC·w_t)/m with w_t the strategy's noise
stream, a round with no arrival still releases its noise, and the certificates equal
:func:`dpfl.rounds.dry_run` of :meth:`account_config` (``dpfl account``) and the Gaussian at the
worst client's participation pattern computed from the dense factorization by dp-accounting.
Bad arguments are refused naming the value.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant as rdp

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp import strategy as message  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from dpfl.config import parse_config  # noqa: E402
from dpfl.errors import ConfigError  # noqa: E402
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS  # noqa: E402
from dpfl.rng import SERVER  # noqa: E402
from dpfl.rounds import build_plan, dry_run  # noqa: E402
from dpfl.runtime.flowerapps.correlated import CorrelatedNoiseStrategy, flatten_arrays  # noqa: E402


@pytest.fixture(autouse=True)
def _task_identity() -> Iterator[None]:
    """Flower builds a Message only inside a run: a run, node and task id for these tests."""
    before = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)  # type: ignore[attr-defined]
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = before  # type: ignore[attr-defined]


NODES = [907, 11, 305, 42, 7000, 12]  # node ids: the fleet is numbered in id order
SCHEMA = {"kind": "min_separation", "min_separation": 3}


class Grid:
    def get_node_ids(self) -> list[int]:
        return list(NODES)


class Reply:
    def __init__(self, node: int, arrays: ArrayRecord, error: bool = False) -> None:
        self.metadata = type("Meta", (), {"src_node_id": node})()
        self.content = RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": 10, "loss": 1.0})})
        self._error = error

    def has_error(self) -> bool:
        return self._error


def _arrays(vec: np.ndarray) -> ArrayRecord:
    return ArrayRecord({"w": Array(np.asarray(vec[:4], dtype=np.float32).reshape(2, 2)),
                        "b": Array(np.asarray(vec[4:], dtype=np.float32))})


def _wrapper(**kw: Any) -> CorrelatedNoiseStrategy:
    args: dict[str, Any] = {"num_clients": len(NODES), "num_rounds": 6, "delta": 1e-5, "schema": SCHEMA,
                            "mechanism": "blt", "clip_norm": 1.0, "noise_multiplier": 0.0,
                            "noise_generator": "seeded", **kw}
    return CorrelatedNoiseStrategy(message.FedAvg(fraction_evaluate=0.0, min_available_nodes=1), **args)


def _round(strategy: CorrelatedNoiseStrategy, r: int, theta: np.ndarray,
           update: dict[int, np.ndarray], fail: frozenset[int] = frozenset()) -> tuple[list[int], np.ndarray]:
    """One round: the nodes addressed, and the new global vector when ``update[node]`` is each's Δ."""
    msgs = list(strategy.configure_train(r, _arrays(theta), ConfigRecord({"lr": 0.1}), Grid()))
    nodes = [int(m.metadata.dst_node_id) for m in msgs]
    replies = [Reply(n, _arrays(theta + update[n]), error=n in fail) for n in nodes]
    arrays, metrics = strategy.aggregate_train(r, replies)
    assert metrics is None or "loss" in metrics
    return nodes, flatten_arrays(arrays)[0].numpy()


def test_the_cohort_is_the_schemas_and_the_aggregate_is_the_clipped_sum_over_m() -> None:
    s = _wrapper()
    order = sorted(NODES)
    theta = np.arange(6, dtype=np.float32) / 10
    big = {n: np.full(6, 3.0, np.float32) for n in NODES}  # norm 7.35: clipped to 1
    small = {n: np.full(6, 0.1, np.float32) for n in NODES}  # norm 0.245: kept
    nodes, got = _round(s, 1, theta, big)
    assert nodes == [order[0], order[3]]  # round 1: clients 0 and 3 (cyclic order, b = 3)
    m = s.algorithm.calibration().denominator
    assert m == 2.0  # ⌈6/3⌉
    clipped = np.full(6, 3.0) / np.linalg.norm(np.full(6, 3.0))
    np.testing.assert_allclose(got, theta + 2 * clipped / m, rtol=1e-6)
    nodes, got2 = _round(s, 2, got, small)
    assert nodes == [order[1], order[4]]
    np.testing.assert_allclose(got2, got + 2 * np.full(6, 0.1) / m, rtol=1e-6)


def test_the_noise_is_the_strategys_stream_and_an_empty_round_still_releases_it() -> None:
    sigma = 0.7
    s = _wrapper(noise_multiplier=sigma, seed=3)
    ref = s.algorithm.strategy.noise_stream(6, dtype=torch.float32)
    theta = np.zeros(6, np.float32)
    zero = {n: np.zeros(6, np.float32) for n in NODES}
    m = s.algorithm.calibration().denominator
    for r in (1, 2):
        fail = frozenset(NODES) if r == 2 else frozenset()  # round 2: every scheduled node fails
        _, new = _round(s, r, theta, zero, fail)
        w = ref.next(r - 1, s.plan.seeds.noise_generator(r - 1, SERVER, "correlated_noise"))
        np.testing.assert_allclose(new, theta + sigma * w.numpy() / m, rtol=1e-5, atol=1e-7)
        theta = new
    # the failed round charged nobody: its arrivals were none
    assert s.gate.ledger.rounds_recorded == 2


@pytest.mark.parametrize("mechanism,kw", [("blt", {"target_epsilon": 4.0}), ("banded", {"noise_multiplier": 1.3}),
                                          ("tree", {"noise_multiplier": 2.0})])
def test_the_certificates_are_dpfl_accounts_and_the_gaussian_at_the_worst_pattern(
        mechanism: str, kw: dict[str, Any]) -> None:
    s = _wrapper(mechanism=mechanism, **{"noise_multiplier": None, **kw})
    theta = np.zeros(6, np.float32)
    step = {n: np.full(6, 0.01, np.float32) for n in NODES}
    for r in range(1, 7):
        theta = _round(s, r, theta, step)[1]
    cfg = parse_config(s.account_config())
    account = dry_run(cfg, experiment=build_plan(cfg, [1] * len(NODES), 1)).privacy
    mine = s.privacy()
    assert account is not None and account.certified is not None and mine.certified is not None
    for obs in ("server", "public"):
        a, b = account.certified[obs], mine.certified[obs]
        assert (b.epsilon_rdp, b.epsilon_pld, b.method) == (a.epsilon_rdp, a.epsilon_pld, a.method)
    assert math.isinf(mine.certified["server"].epsilon)
    sigma = s.algorithm.noise_multiplier
    if mechanism == "blt":  # calibrated: the claim at the schema's worst pattern is the target
        assert s.algorithm.claimed_epsilon(6) == pytest.approx(4.0, rel=1e-5)
    if mechanism != "tree":  # every client took part in rounds i and i + 3: the Gaussian at Σ|G| over them
        enc = s.algorithm.strategy.encoder_matrix()
        gram = np.abs(enc.T @ enc)
        worst = max(float(gram[np.ix_([i, i + 3], [i, i + 3])].sum()) for i in range(3))
        acc = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
        acc.compose(dpa.GaussianDpEvent(sigma / math.sqrt(worst)))
        assert mine.certified["public"].epsilon_rdp == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    lines = s.report()
    assert lines[0].startswith("dpfl certificates after 6 rounds") and lines[-1].startswith("dpfl certificates as JSON")


def test_bad_arguments_are_refused_naming_the_value() -> None:
    with pytest.raises(ConfigError, match="DifferentialPrivacyServerSideFixedClipping"):
        CorrelatedNoiseStrategy(message.DifferentialPrivacyServerSideFixedClipping(message.FedAvg(), 1.0, 1.0, 2),
                                num_clients=6, num_rounds=6, delta=1e-5, schema=SCHEMA, clip_norm=1.0,
                                noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="participation schema.*'poisson'"):
        _wrapper(schema={"kind": "poisson", "sample_rate": 0.5})
    with pytest.raises(ConfigError, match="num_clients.*0"):
        _wrapper(num_clients=0)
    with pytest.raises(ConfigError, match="clip_norm"):
        _wrapper(clip_norm=-1.0)
    with pytest.raises(ConfigError, match="bandz"):
        _wrapper(bandz=2)
    with pytest.raises(ConfigError, match="bands"):
        _wrapper(mechanism="banded", bands=4)  # more bands than b = 3
    with pytest.raises(ConfigError, match="restart_every"):
        _wrapper(mechanism="tree", restart_every=5)
    with pytest.raises(ConfigError, match="num_rounds = 6"):
        s = _wrapper()
        s.configure_train(7, _arrays(np.zeros(6)), ConfigRecord(), Grid())
    with pytest.raises(ConfigError, match="num_rounds=9"):
        _wrapper().start(grid=Grid(), initial_arrays=_arrays(np.zeros(6)), num_rounds=9)
    with pytest.raises(ConfigError, match="fraction_train"):
        s = CorrelatedNoiseStrategy(message.FedAvg(fraction_train=0.0, min_available_nodes=1), num_clients=6,
                                    num_rounds=6, delta=1e-5, schema=SCHEMA, clip_norm=1.0, noise_multiplier=1.0)
        s.configure_train(1, _arrays(np.zeros(6)), ConfigRecord(), Grid())


def test_a_reply_from_outside_the_cohort_or_of_another_shape_is_not_aggregated() -> None:
    s = _wrapper()
    theta = np.zeros(6, np.float32)
    msgs = list(s.configure_train(1, _arrays(theta), ConfigRecord(), Grid()))
    addressed = [int(m.metadata.dst_node_id) for m in msgs]
    outsider = next(n for n in NODES if n not in addressed)
    replies = [Reply(addressed[0], _arrays(theta + 0.1)), Reply(outsider, _arrays(theta + 0.1)),
               Reply(addressed[1], ArrayRecord({"w": Array(np.zeros(3, np.float32))}))]
    arrays, _ = s.aggregate_train(1, replies)
    np.testing.assert_allclose(flatten_arrays(arrays)[0].numpy(), np.full(6, 0.1) / 2, rtol=1e-6)
    assert "1 of 2 scheduled updates" in s.round_lines[-1]


def test_the_paths_apps_were_written_against_still_import() -> None:
    from dpfl.runtime.flower import certified as old_certified
    from dpfl.runtime.flower import distributed as old_distributed
    from dpfl.runtime.flowerapps import certified, distributed

    assert old_certified.CertifiedStrategy is certified.CertifiedStrategy
    assert old_certified.CertifiedLegacyStrategy is certified.CertifiedLegacyStrategy
    assert old_distributed.DistributedDpMod is distributed.DistributedDpMod
    assert old_distributed.DistributedDpLegacyStrategy is distributed.DistributedDpLegacyStrategy
