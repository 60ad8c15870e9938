"""dpfl's distributed DP for Flower apps (:mod:`dpfl.runtime.flowerapps.distributed`), without a simulation:
residues through Flower's own quantizer, masks and unmasking arithmetic; the decoded noise; the
certificate against dp-accounting's Gaussian RDP; the mod and the strategy on hand-built messages."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace
from typing import Any, Literal

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import stats

pytest.importorskip("flwr")

from flwr.common.secure_aggregation.ndarrays_arithmetic import (  # noqa: E402
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
    parameters_multiply,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen  # noqa: E402

from dpfl.errors import ConfigError  # noqa: E402
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS  # noqa: E402
from dpfl.privacy.accounting.ledger import PrivacyLedger  # noqa: E402
from dpfl.runtime.flowerapps.distributed import (  # noqa: E402
    DistributedDpLegacyStrategy,
    DistributedDpMod,
    SecAggPlusSettings,
    client_residues,
    distributed_dp_plan,
    floats_to_residue_sum,
    residues_to_floats,
)

SETTINGS = [SecAggPlusSettings(),  # Flower's defaults: c = 8, Q = 2^22, M = 2^32, max_weight = 1000
            SecAggPlusSettings(0.5, 2**8, 2**16, 1.0),
            SecAggPlusSettings(2.0**30, 2**31, 2**40, 7.0)]


def _flower_client(residues: np.ndarray, s: SecAggPlusSettings, seed: bytes) -> list[np.ndarray]:
    """What ``secaggplus_mod`` does to a FitRes of our floats (num_examples = max_weight): the weight
    factor, Flower's quantizer, the weight column, a private mask (mod M)."""
    floats = [residues_to_floats(residues, s.clipping_range, s.quantization_range)]
    q_ratio = round(int(s.max_weight) / s.max_weight * s.quantization_range)
    params = parameters_multiply(floats, q_ratio / s.quantization_range)
    quantized = factor_combine(q_ratio, quantize(params, s.clipping_range, s.quantization_range))
    mask = pseudo_rand_gen(seed, s.modulus_range, [a.shape for a in quantized])
    return parameters_mod(parameters_addition(quantized, mask), s.modulus_range)


def _flower_server(masked: list[list[np.ndarray]], seeds: list[bytes], s: SecAggPlusSettings) -> np.ndarray:
    """``SecAggPlusWorkflow``'s unmask stage: sum mod M, masks removed, weight column extracted,
    dequantized, offset −(n − 1)c, times Q/W."""
    total = masked[0]
    for vec in masked[1:]:
        total = parameters_addition(total, vec)
    total = parameters_mod(total, s.modulus_range)
    for seed in seeds:
        total = parameters_subtraction(total, pseudo_rand_gen(seed, s.modulus_range, [a.shape for a in total]))
    weight, recon = factor_extract(parameters_mod(total, s.modulus_range))
    vectors = dequantize(recon, s.clipping_range, s.quantization_range)
    for vec in vectors:
        vec += -(len(masked) - 1) * s.clipping_range
        vec *= s.quantization_range / weight
    return vectors[0]


@pytest.mark.parametrize("s", SETTINGS, ids=["flower-defaults", "b8", "b31"])
def test_residues_pass_flowers_quantizer_exactly(s: SecAggPlusSettings) -> None:
    rng = np.random.default_rng(1)
    q = s.quantization_range
    r = rng.integers(0, q, size=20_000)
    r[:4] = [0, q - 1, 1, q // 2]
    floats = [residues_to_floats(r, s.clipping_range, q)]
    for _ in range(3):  # the stochastic rounding draws from numpy's global RNG: it must never move an integer
        out = quantize(parameters_multiply(floats, round(q) / q), s.clipping_range, q)[0]
        assert out.dtype == np.int32 and np.array_equal(out.astype(np.int64), r)


@pytest.mark.parametrize("n", [1, 7, 20])
@pytest.mark.parametrize("s", SETTINGS, ids=["flower-defaults", "b8", "b31"])
def test_server_recovers_the_modular_sum_from_flowers_average(n: int, s: SecAggPlusSettings) -> None:
    if n * s.quantization_range >= s.modulus_range:
        pytest.skip("the weight column would wrap (refused by check_cohort)")
    rng = np.random.default_rng(n)
    q = s.quantization_range
    rows = [rng.integers(0, q, size=3_000) for _ in range(n)]
    rows[0][:2] = [0, q - 1]
    seeds = [os.urandom(32) for _ in rows]
    agg = _flower_server([_flower_client(r, s, seed) for r, seed in zip(rows, seeds, strict=True)], seeds, s)
    got = floats_to_residue_sum(agg, n, s.clipping_range, q)
    assert np.array_equal(got, np.mod(np.sum(rows, axis=0), q))


def test_recovery_refuses_a_sum_that_is_not_of_residues() -> None:
    s = SecAggPlusSettings()
    agg = residues_to_floats(np.arange(10), s.clipping_range, s.quantization_range) + 1e-3
    with pytest.raises(ConfigError, match="not a sum of residues"):
        floats_to_residue_sum(agg, 3, s.clipping_range, s.quantization_range)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"clipping_range": 3.0}, "clipping_range"),
    ({"quantization_range": 1000}, "quantization_range"),
    ({"quantization_range": 2**32, "modulus_range": 2**40}, "quantization_range"),
    ({"modulus_range": 2**22 + 2**21}, "modulus_range"),
    ({"max_weight": 2.5}, "max_weight"),
])
def test_settings_refused(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        SecAggPlusSettings(**kwargs)


def test_cohort_whose_weight_column_would_wrap_is_refused() -> None:
    with pytest.raises(ConfigError, match="modulus_range"):
        SecAggPlusSettings(8.0, 2**22, 2**26).check_cohort(16)
    SecAggPlusSettings(8.0, 2**22, 2**26).check_cohort(15)


def test_decoded_noise_has_the_declared_variance() -> None:
    """n clients' uploads summed mod Q and decoded: the error on the sum of the clipped updates, in
    integer units, has variance n·μ/m plus the rounding's (<= n/4), within 2% over 10^5 coordinates
    (fixed seed; the relative standard error of a variance estimate is sqrt(2/10^5) = 0.45%)."""
    dim, n, m = 100_000, 7, 10
    plan = distributed_dp_plan(dim, clip_norm=1.0, noise_multiplier=0.2, expected_clients=m, bits=22)
    pipe = plan.pipeline
    assert plan.sum_variance == pytest.approx((0.2 * pipe.l2_sensitivity) ** 2)
    assert plan.share_variance == pytest.approx(plan.sum_variance / m)
    rng = np.random.default_rng(3)
    updates = [rng.normal(size=dim) * (0.5 if k % 2 else 0.001) for k in range(n)]  # some clipped, some not
    total = np.zeros(dim, dtype=np.int64)
    for k, u in enumerate(updates):
        rounding, noise = torch.Generator().manual_seed(2 * k), np.random.default_rng(2 * k + 1)
        total += client_residues(u, plan, rounding, noise)
    decoded = pipe.decode(pipe.to_residues(torch.from_numpy(total))).numpy()
    clipped = sum(u * min(1.0, 1.0 / np.linalg.norm(u)) for u in updates)
    error = (decoded - clipped) * pipe.scale
    declared = n * plan.share_variance
    assert abs(float(error.mean())) < 5 * math.sqrt(declared / dim)
    ratio = float(error.var()) / declared
    assert abs(ratio - 1) < 0.02, ratio


def test_what_the_server_sees_of_one_client_is_uniform() -> None:
    """A masked vector as Flower's client sends it (residues + Flower's private mask, mod M): χ² over
    64 equal bins of [0, M), 2^16 coordinates, fixed seeds; the residues themselves are far from uniform
    (a small update: residues near 0 and near Q)."""
    s = SecAggPlusSettings()
    plan = distributed_dp_plan(2**16, clip_norm=1.0, noise_multiplier=0.2, expected_clients=10, bits=s.bits)
    update = np.full(2**16, 1e-4)
    residues = client_residues(update, plan, torch.Generator().manual_seed(5), np.random.default_rng(6))
    raw = np.histogram(residues, bins=64, range=(0, s.quantization_range))[0]
    assert stats.chisquare(raw).pvalue < 1e-100
    masked = _flower_client(residues, s, bytes(range(32)))[1]  # [0] is the weight column
    counts = np.histogram(masked, bins=64, range=(0, s.modulus_range))[0]
    result = stats.chisquare(counts)
    assert result.pvalue > 1e-3, result


INTEGER_ORDERS = sorted({max(2, math.ceil(o - 1e-12)) for o in DEFAULT_RDP_ORDERS})


def _gaussian_rdp(z: float, count: int, integer_orders: bool = False) -> float:
    """dp-accounting's Gaussian RDP ε at δ = 1e-5 (at its default orders, or at the integer orders
    dpfl prices a Skellam release at: RDP is non-decreasing in α, so ε(α) <= ε(⌈α⌉))."""
    acc = rdp_privacy_accountant.RdpAccountant(INTEGER_ORDERS if integer_orders else None)
    acc.compose(dp_accounting.GaussianDpEvent(z), count)
    return float(acc.get_epsilon(1e-5))


def _strategy(**kwargs: Any) -> DistributedDpLegacyStrategy:
    from flwr.server.strategy import FedAvg

    return DistributedDpLegacyStrategy(FedAvg(), clip_norm=1.0, noise_multiplier=kwargs.pop("z", 0.7),
                                       expected_clients=10, delta=1e-5, **kwargs)


def _certify(strategy: DistributedDpLegacyStrategy, dim: int, arrived: int, rounds: int,
             method: Literal["rdp", "best"] = "rdp") -> dict[str, float]:
    """Each observer's certified ε: by its RDP route (``method="rdp"``), or the certificate."""
    ledger = PrivacyLedger(num_clients=20, sampler={"kind": "all"}, delta=1e-5, pld_every=0)
    plan = strategy.plan(dim)
    for _ in range(rounds):
        ids = list(range(arrived))
        ledger.record_round(ledger.rounds_recorded, strategy.releases(plan, ids), sampling={"kind": "all"},
                            participants=ids)
    return {obs: float(ledger.certify(obs, None, method).epsilon) for obs in ("server", "public")}


def test_the_certificate_is_the_gaussian_dominating_pld_between_the_gaussian_and_the_rdp_route() -> None:
    """The certificate (the PLD of the Gaussian pair dominating the Skellam sum, docs/proofs/skellam-gdp.md)
    lies between dp-accounting's Gaussian PLD at the same z (exact here: unsampled Gaussians compose to a
    Gaussian) and the RDP route, and comes within 1e-4 of the former once γ makes the rounding inflation of Δ2 small."""
    from dpfl.privacy.accounting.certify import certify

    z, rounds, dim = 0.7, 5, 1000
    gauss_pld = certify(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds), 1e-5,
                        relation="add_remove", privacy_unit="client").epsilon
    excess = []
    for k in (4, 8, 16):
        best = _certify(_strategy(z=z, scale=2.0**k), dim, 10, rounds, method="best")
        rdp = _certify(_strategy(z=z, scale=2.0**k), dim, 10, rounds, method="rdp")
        assert best["server"] == best["public"]
        assert gauss_pld <= best["public"] < rdp["public"]
        excess.append(best["public"] / gauss_pld - 1)
    # γS = 2^4: Δ2 inflated by rounding; from 2^8 on, only the certified η's own slack (< 1e-4) is left
    assert excess[0] > max(excess[1:]) and max(excess[1:]) < 1e-4, excess


def test_certificate_server_equals_public_and_approaches_the_gaussian_from_above() -> None:
    """dp-accounting's Gaussian RDP at the same z is a lower bound (AKL21 Thm 3.5: the Skellam RDP is the
    Gaussian's α/(2z²) plus a non-negative term) that the Skellam figure approaches from above as γ
    grows — the Gaussian's at the integer orders dpfl prices Skellam at (4.2% above dp-accounting's
    figure at its fractional orders here: the price of pricing α at ⌈α⌉)."""
    z, rounds, dim = 0.7, 5, 1000
    gauss, gauss_int = _gaussian_rdp(z, rounds), _gaussian_rdp(z, rounds, integer_orders=True)
    excess = []
    for k in (2, 4, 6, 8, 12, 16):
        eps = _certify(_strategy(z=z, scale=2.0**k), dim, 10, rounds)
        assert eps["server"] == eps["public"]
        assert eps["public"] >= gauss_int * (1 - 1e-9) >= gauss
        excess.append(eps["public"] / gauss_int - 1)
    assert all(a >= b for a, b in zip(excess, excess[1:], strict=False)), excess
    assert excess[0] > 5e-3 and excess[-1] < 1e-4, excess
    default = _certify(_strategy(z=z), dim, 10, rounds)  # dpfl's γ: γS = 2^16
    assert default["public"] == pytest.approx(gauss_int, rel=1e-4)
    assert gauss < default["public"] < gauss * 1.05


def test_fewer_shares_than_expected_are_priced_for_the_server() -> None:
    z, rounds = 0.7, 3
    eps = _certify(_strategy(z=z), 1000, 6, rounds)  # 6 of 10 shares reached the sum
    # the server tops the sum up for the broadcast
    assert eps["public"] == pytest.approx(_gaussian_rdp(z, rounds, integer_orders=True), rel=1e-3)
    # the server saw noise of variance 6/10·μ: multiplier z·sqrt(0.6)
    assert eps["server"] == pytest.approx(_gaussian_rdp(z * math.sqrt(0.6), rounds, integer_orders=True), rel=1e-3)
    assert eps["server"] > eps["public"]


# --------------------------------------------------------------------------- the mod and the strategy


class _Manager:
    def __init__(self, nodes: list[int]) -> None:
        self.proxies = {str(n): SimpleNamespace(node_id=n, cid=str(n)) for n in nodes}

    def all(self) -> dict[str, Any]:
        return self.proxies

    def num_available(self) -> int:
        return len(self.proxies)

    def sample(self, num_clients: int, min_num_clients: int | None = None, criterion: Any = None) -> list[Any]:
        return list(self.proxies.values())[:num_clients]


def _train_message(params: list[np.ndarray], node: int) -> Any:
    from flwr.app import ConfigRecord, Message
    from flwr.app.message_type import MessageType
    from flwr.common import FitIns, ndarrays_to_parameters
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
    from flwr.compat.common import recorddict_compat as compat

    content = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters(params), {}), keep_input=True)
    content.config_records[RECORD_KEY_CONFIGS] = ConfigRecord({"stage": "collect_masked_vectors"})
    return Message(content, dst_node_id=node, message_type=MessageType.TRAIN, group_id="1")


def _context(s: SecAggPlusSettings) -> Any:
    from flwr.app import ConfigRecord, Context, RecordDict
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE

    state = RecordDict()
    state.config_records[RECORD_KEY_STATE] = ConfigRecord({
        "clipping_range": s.clipping_range, "target_range": s.quantization_range, "mod_range": s.modulus_range,
        "max_weight": s.max_weight})
    return Context(run_id=1, node_id=0, node_config={}, state=state, run_config={})


def _app(step: list[np.ndarray]) -> Any:
    """A ClientApp's reply: the received model plus ``step``, 2400 examples, a train_loss metric."""
    from flwr.app import Message
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat

    def call_next(msg: Any, ctxt: Any) -> Any:
        got = parameters_to_ndarrays(compat.recorddict_to_fitins(msg.content, keep_input=True).parameters)
        reply = [a + b for a, b in zip(got, step, strict=True)]
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(reply), 2400, {"train_loss": 0.5})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    return call_next


@pytest.fixture
def task_identity() -> Any:
    """Flower needs a run id to build a Message outside a run."""
    from flwr.supercore.task_identity import TaskIdentity

    before = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)  # type: ignore[attr-defined]
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = before  # type: ignore[attr-defined]


@pytest.mark.usefixtures("task_identity")
def test_mod_and_strategy_end_to_end_on_flowers_arithmetic() -> None:
    """Ten clients' replies through the mod, Flower's client and server SecAgg+ arithmetic, and the
    strategy: the new model is the current one plus the mean of the clipped updates, up to the noise
    (std z·Δ2/(γm) per coordinate)."""
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE
    from flwr.compat.common import recorddict_compat as compat
    from flwr.server.strategy import FedAvg

    s, m, z = SecAggPlusSettings(), 10, 0.2
    mod = DistributedDpMod(1.0, z, m, seed=11, send_metrics=True)
    rng = np.random.default_rng(4)
    current = [rng.normal(size=(30, 40)).astype(np.float32), rng.normal(size=40).astype(np.float32)]
    strategy = DistributedDpLegacyStrategy(FedAvg(fraction_fit=0.5, min_fit_clients=m, min_available_clients=m),
                                           clip_norm=1.0, noise_multiplier=z, expected_clients=m, delta=1e-5,
                                           num_rounds=1, seed=12)
    manager = _Manager(list(range(100, 120)))
    pairs = strategy.configure_fit(1, ndarrays_to_parameters(current), manager)
    assert len(pairs) == m
    steps, masked, seeds, results = [], [], [], []
    for proxy, _ in pairs:
        step = [rng.normal(size=a.shape).astype(np.float32) * 0.05 for a in current]
        steps.append(step)
        ctxt = _context(s)
        out = mod(_train_message(current, proxy.node_id), ctxt, _app(step))
        assert RECORD_KEY_STATE in ctxt.state.config_records
        res = compat.recorddict_to_fitres(out.content, keep_input=True)
        assert res.num_examples == 1000 and res.metrics["train_loss"] == 0.5
        floats = parameters_to_ndarrays(res.parameters)
        assert len(floats) == 1 and floats[0].shape == (1240,) and floats[0].dtype == np.float64
        residues = quantize(floats, s.clipping_range, s.quantization_range)[0].astype(np.int64)
        seeds.append(os.urandom(32))
        masked.append(_flower_client(residues, s, seeds[-1]))
        results.append((proxy, res))
    agg = _flower_server(masked, seeds, s)
    summed = ndarrays_to_parameters([agg])
    for _, res in results:  # what SecAggPlusWorkflow hands the strategy: one Parameters object for all
        res.parameters = summed
    new, _ = strategy.aggregate_fit(1, results, [])
    got = np.concatenate([a.ravel() for a in parameters_to_ndarrays(new)]).astype(np.float64)
    flat = np.concatenate([a.ravel() for a in current]).astype(np.float64)
    updates = [np.concatenate([a.ravel() for a in st]).astype(np.float64) for st in steps]
    mean = sum(u * min(1.0, 1.0 / np.linalg.norm(u)) for u in updates) / m
    plan = strategy.plan(flat.size)
    std = z * plan.pipeline.l2_sensitivity / plan.pipeline.scale / m
    err = got - flat - mean
    assert abs(float(err.std()) / std - 1) < 0.1, (float(err.std()), std)
    eps = strategy.epsilons()
    assert eps["server"] == eps["public"] and math.isfinite(eps["public"])
    assert any("train_loss" in line for line in strategy.report())
    assert any("REPRODUCIBLE NOISE in rounds [1]" in line for line in strategy.report())  # the mod was seeded


@pytest.mark.usefixtures("task_identity")
def test_mod_refuses_to_run_outside_secaggplus_mod() -> None:
    from flwr.app import Context, RecordDict

    mod = DistributedDpMod(1.0, 0.5, 10)
    ctxt = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(ConfigError, match="inside secaggplus_mod"):
        mod(_train_message([np.zeros(3, dtype=np.float32)], 1), ctxt, _app([np.zeros(3, dtype=np.float32)]))


def test_strategy_refuses_a_client_with_other_settings() -> None:
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    strategy = DistributedDpLegacyStrategy(FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2),
                                           clip_norm=1.0, noise_multiplier=0.5, expected_clients=2, delta=1e-5)
    current = [np.zeros(4, dtype=np.float32)]
    strategy.configure_fit(1, ndarrays_to_parameters(current), _Manager([1, 2]))
    plan = strategy.plan(4)
    params = ndarrays_to_parameters([np.zeros(4)])
    metrics = {"dpfl-dd-dim": 4, "dpfl-dd-bits": 22, "dpfl-dd-scale": plan.pipeline.scale / 2,
               "dpfl-dd-share-variance": plan.share_variance, "dpfl-dd-clipping-range": 8.0,
               "dpfl-dd-modulus-range": 2**32, "dpfl-dd-max-weight": 1000.0}
    results = [(SimpleNamespace(node_id=n), FitRes(Status(Code.OK, ""), params, 1000, dict(metrics))) for n in (1, 2)]
    with pytest.raises(ConfigError, match="scale"):
        strategy.aggregate_fit(1, results, [])
    results[0][1].num_examples = 999
    with pytest.raises(ConfigError, match="num_examples = 999"):
        strategy.aggregate_fit(1, results, [])


def _one_round(strategy: DistributedDpLegacyStrategy, mod: DistributedDpMod, manager: _Manager,
               arrive: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One round through the strategy, the mod on every configured node, Flower's SecAgg+ arithmetic
    (only the first ``arrive`` masked vectors reach the sum): (error of the new model against the
    current one plus the mean of the included clipped updates, in units of the planned noise std; the
    coins)."""
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat

    s = strategy.settings
    rng = np.random.default_rng(9)
    current = [rng.normal(size=(30, 40)).astype(np.float32), rng.normal(size=40).astype(np.float32)]
    pairs = strategy.configure_fit(1, ndarrays_to_parameters(current), manager)[:arrive]
    plan = strategy.plan(1240)
    masked, seeds, results, included = [], [], [], []
    total = np.zeros(1240)
    for proxy, _ in pairs:
        step = [rng.normal(size=a.shape).astype(np.float32) * 0.05 for a in current]
        out = mod(_train_message(current, proxy.node_id), _context(s), _app(step))
        res = compat.recorddict_to_fitres(out.content, keep_input=True)
        residues = quantize(parameters_to_ndarrays(res.parameters), s.clipping_range, s.quantization_range)[0]
        seeds.append(os.urandom(32))
        masked.append(_flower_client(residues.astype(np.int64), s, seeds[-1]))
        results.append((proxy, res))
        coin = mod.included(proxy.node_id, "1", plan.sample_rate) if plan.hidden else True
        included.append(coin)
        u = np.concatenate([a.ravel() for a in step]).astype(np.float64)
        total += coin * u * min(1.0, 1.0 / np.linalg.norm(u))
    summed = ndarrays_to_parameters([_flower_server(masked, seeds, s)])
    for _, res in results:
        res.parameters = summed
    new, _ = strategy.aggregate_fit(1, results, [])
    got = np.concatenate([a.ravel() for a in parameters_to_ndarrays(new)]).astype(np.float64)
    flat = np.concatenate([a.ravel() for a in current]).astype(np.float64)
    m = plan.expected_clients
    std = math.sqrt(plan.sum_variance) / plan.pipeline.scale / m
    return (got - flat - total / m) / std, np.array(included)


@pytest.mark.usefixtures("task_identity")
def test_missing_vectors_priced_for_the_server_and_topped_up_for_the_broadcast() -> None:
    from flwr.server.strategy import FedAvg

    m, z = 10, 0.5
    strategy = DistributedDpLegacyStrategy(FedAvg(fraction_fit=0.5, min_fit_clients=m, min_available_clients=m),
                                           clip_norm=1.0, noise_multiplier=z, expected_clients=m, delta=1e-5,
                                           num_rounds=1, seed=3)
    err, _ = _one_round(strategy, DistributedDpMod(1.0, z, m, seed=4), _Manager(list(range(20))), arrive=6)
    assert abs(float(err.std()) - 1) < 0.1  # the broadcast carries all the planned noise (6 shares + top-up)
    eps = strategy.epsilons("rdp")
    assert eps["server"] == pytest.approx(_gaussian_rdp(z * math.sqrt(0.6), 1, integer_orders=True), rel=1e-3)
    assert eps["public"] == pytest.approx(_gaussian_rdp(z, 1, integer_orders=True), rel=1e-3)
    assert any("6 of 10 vectors arrived" in line for line in strategy.report())


@pytest.mark.usefixtures("task_identity")
def test_hidden_participation_every_node_a_share_a_secret_coin_amplified() -> None:
    """20 nodes, q = 0.5: every node sends, its secret coin decides whether its update is in the sum;
    the new model is the current one plus the included updates over m = qN, up to the planned noise;
    server = public, amplified: below the visible figure, at least the Poisson-sampled Gaussian's."""
    from flwr.server.strategy import FedAvg

    n, m, z = 20, 10, 0.7
    strategy = DistributedDpLegacyStrategy(FedAvg(fraction_fit=1.0, min_fit_clients=n, min_available_clients=n),
                                           clip_norm=1.0, noise_multiplier=z, expected_clients=m, delta=1e-5,
                                           num_rounds=1, population_size=n, participation="hidden", seed=5)
    mod = DistributedDpMod(1.0, z, m, seed=6, population=n)
    plan = mod.plan(1240, 22)
    assert plan.hidden and plan.sample_rate == 0.5 and plan.share_variance == pytest.approx(plan.sum_variance / n)
    err, coins = _one_round(strategy, mod, _Manager(list(range(100, 100 + n))))
    assert 0 < coins.sum() < n  # some in, some out
    assert abs(float(err.std()) - 1) < 0.1 and abs(float(err.mean())) < 0.1
    eps = strategy.epsilons("rdp")
    assert eps["server"] == eps["public"]
    acc = rdp_privacy_accountant.RdpAccountant(INTEGER_ORDERS)
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(z)), 1)
    sampled_gauss = float(acc.get_epsilon(1e-5))
    assert sampled_gauss * (1 - 1e-6) <= eps["public"] <= sampled_gauss * 1.01, (eps, sampled_gauss)
    assert eps["public"] < _gaussian_rdp(z, 1, integer_orders=True)
    assert any("hidden participation" in line for line in strategy.report())


def test_hidden_participation_needs_the_population() -> None:
    from flwr.server.strategy import FedAvg

    with pytest.raises(ConfigError, match="population_size"):
        DistributedDpLegacyStrategy(FedAvg(), clip_norm=1.0, noise_multiplier=0.5, expected_clients=10, delta=1e-5,
                                    participation="hidden")
    with pytest.raises(ConfigError, match="population"):
        DistributedDpMod(1.0, 0.5, 10, population=5)


def test_a_cohort_larger_than_the_planned_shares_is_refused() -> None:
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    strategy = DistributedDpLegacyStrategy(FedAvg(fraction_fit=0.5, min_fit_clients=5, min_available_clients=5),
                                           clip_norm=1.0, noise_multiplier=0.5, expected_clients=5, delta=1e-5)
    with pytest.raises(ConfigError, match="more than the 5 shares"):
        strategy.configure_fit(1, ndarrays_to_parameters([np.zeros(3, dtype=np.float32)]), _Manager(list(range(20))))


def test_a_non_finite_update_is_uploaded_as_zero_plus_the_share() -> None:
    """A NaN update must not make the client fail (a failure the server would see depends on the
    data): it is encoded as the zero update, and the share is added as always."""
    plan = distributed_dp_plan(64, clip_norm=1.0, noise_multiplier=0.5, expected_clients=4, bits=22)
    bad = np.full(64, np.nan)
    got = client_residues(bad, plan, torch.Generator().manual_seed(1), np.random.default_rng(2))
    zero = client_residues(np.zeros(64), plan, torch.Generator().manual_seed(1), np.random.default_rng(2))
    assert np.array_equal(got, zero)


@pytest.mark.usefixtures("task_identity")
def test_the_mod_sends_no_app_metrics_unless_asked() -> None:
    from flwr.compat.common import recorddict_compat as compat

    s = SecAggPlusSettings()
    current = [np.zeros((30, 40), dtype=np.float32), np.zeros(40, dtype=np.float32)]
    step = [np.full(a.shape, 0.01, dtype=np.float32) for a in current]
    out = DistributedDpMod(1.0, 0.2, 10)(_train_message(current, 7), _context(s), _app(step))
    metrics = compat.recorddict_to_fitres(out.content, keep_input=True).metrics
    assert "train_loss" not in metrics and metrics["dpfl-dd-seeded"] == 0
    assert all(k.startswith("dpfl-dd-") for k in metrics)


def test_distributed_mode_says_once_that_it_replaces_example_weighting_by_an_unweighted_mean(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Fails before the change (#54): nothing said that the app's FedAvg weighting by num_examples is
    # replaced by the SecAgg+ sum divided by the fixed denominator m, however many vectors arrive.
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    from dpfl.runtime.flowerapps import distributed

    logged: list[str] = []
    monkeypatch.setattr(distributed, "_log", lambda level, msg: logged.append(msg))
    strategy = DistributedDpLegacyStrategy(FedAvg(fraction_fit=1.0, min_fit_clients=10, min_available_clients=10),
                                           clip_norm=1.0, noise_multiplier=0.7, expected_clients=10, delta=1e-5)
    params = ndarrays_to_parameters([np.zeros(4, dtype=np.float32)])
    for server_round in (1, 2):
        strategy.configure_fit(server_round, params, _Manager(list(range(10))))
    said = [line for line in logged if "unweighted mean" in line]
    assert said == ["dpfl distributed DP: the aggregate is an unweighted mean over the fixed denominator — the SecAgg+ "
                    "sum of the clipped updates divided by expected_clients = 10, however many arrive; it replaces the "
                    "example weighting of FedAvg (num_examples), since every client reports num_examples = "
                    "max_weight = 1000"]
    assert "by an unweighted mean over the fixed denominator" in (DistributedDpLegacyStrategy.__doc__ or "")
    assert "replacing\n    the app's example weighting" in (DistributedDpMod.__doc__ or "")
