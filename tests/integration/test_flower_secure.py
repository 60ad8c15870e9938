"""DP-FedAvg with secure aggregation on Flower: every round a SecAgg+ secure sum (flwr 1.42's
``SecAggPlusWorkflow``, dpfl's ChaCha20 masks) among the sampled clients' SuperNodes.

What is checked:
* The mask generator (:mod:`dpfl.runtime.flower.masks`): installed in the workflow's, the client
  mod's and the utility module's namespaces (idempotently); deterministic per seed, different
  seeds differ, shapes as Flower's (a 0-d array for ``()``); a modulus that is not a power of two
  refused; uniform: chi-square over 256 buckets (high bits and low bits) of 2^20 values from a
  fixed seed, below 400 (df 255: mean 255, sd 22.6; P(chi2 > 400) < 1e-8 for a uniform source).
* The SecAgg+ parameters (``secagg_shares``) and the refusals: ``bits > 31`` names
  ``algorithm.options.secure_sum.bits`` (rotation is allowed: its signs are public); a cohort of one client
  never uploads in the clear (an empty round, noticed; no message pushed).
* (a) 3 SuperNodes (``LocalFederation``), 2 rounds, ``reproducible = true``, sequential engine, all
  clients and Poisson sampling (seed 5, q = 0.7: cohorts {0, 2} and {0, 1}, i.e. the 2-client
  case): the deployed params digest and the certified epsilons equal the simulation's.
* (b) (~12 s) What the server receives in the masked stage (a subclass of the workflow recording that
  stage, in a Flower simulation whose ServerApp runs ``run_experiment`` with a ``FlowerCohort``
  and whose ClientApp is dpfl's): not the plaintext residues, and uniform modulo the modulus
  2^33 (chi-square over 64 buckets of the top bits, below 140; df 63: mean 63, sd 11.2); the
  server's unmasking called dpfl's ChaCha20 generator, and the decoded sums made the simulator's
  model: so the clients masked with it too (one generator on each side would not unmask).
* (c, slow, ~120 s each) 5 SuperNodes, visible and hidden participation (all clients in every sum,
  Poisson q = 0.7 by the clients' own coins), client 4 killed in round 2 before its masked vector: the round
  completes by SecAgg+ reconstruction (its pairwise masks from the neighbours' shares), the server
  is charged only for the survivors (client 4 for round 1 only; the survivors for a round-2 sum of
  4 Skellam shares, i.e. more than in the simulation), the public's noise is the plan's.
* (d) (~15 s) ``participation: hidden`` (the clients' own coins), 3 ClientApps of a Flower
  simulation, 2 rounds, q = 0.7, ``reproducible = true``: every round's secure sum runs among all
  three nodes with the same FitIns for each (the server sends no coin), the masked vectors of
  sampled and of non-sampled clients have the same shape and are uniform (the chi-square test of
  (b)), the model equals an in-process run of the same coins and noise bit for bit, and the
  server's certificate is the public's.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import yaml

pytest.importorskip("flwr")

from flwr.app import Message  # noqa: E402
from flwr.common import bytes_to_ndarray, parameters_to_ndarrays  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from flwr.server import Grid, LegacyContext  # noqa: E402
from flwr.server.workflow import SecAggPlusWorkflow  # noqa: E402

from dpfl.config import load_config, parse_config  # noqa: E402
from dpfl.errors import ConfigError  # noqa: E402
from dpfl.rounds import build_experiment, run_experiment  # noqa: E402
from dpfl.runtime.flower import masks  # noqa: E402
from dpfl.runtime.flower.local import LocalFederation  # noqa: E402
from dpfl.runtime.flower.secagg import secagg_shares  # noqa: E402
from dpfl.runtime.flower.transport import FlowerCohort, secure_bits_for  # noqa: E402
from dpfl.runtime.flower.warm import process_alive  # noqa: E402
from dpfl.store import RunStore  # noqa: E402

SECURE = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5, "secure_sum": {"bits": 31}}}
POISSON = {"kind": "poisson", "sample_rate": 0.7}  # seed 5: cohorts [0, 2], [0, 1]

pytestmark = pytest.mark.usefixtures("prompt_superexec")


def _raw(data: Path, name: str, *, num_clients: int = 3, rounds: int = 2, sampling: dict | None = None,
         algorithm: dict | None = None, privacy: dict | None = None, seed: int = 5) -> dict:
    return {
        "name": name, "seed": seed, "rounds": rounds,
        "data": {"name": "mnist", "dir": str(data), "verify": False},
        "partition": {"kind": "iid", "num_clients": num_clients, "samples_per_client": 100},
        "model": {"name": "mlp"},
        "algorithm": algorithm or SECURE,
        "sampling": sampling or {"kind": "all"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 50},
        "engine": "sequential",
        "threads": 1,
        "privacy": privacy or {"delta": 0.01, "secure_aggregation": True},
    }


def _config(tmp: Path, data: Path, name: str, **kw: Any) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(_raw(data, name, **kw)))
    return path


def _certified(final: dict, observer: str) -> float:
    return float(final["privacy"]["certified"]["observers"][observer]["epsilon"])


def _notices(store: Path, kind: str) -> list[str]:
    with sqlite3.connect(store) as con:
        return [m for (m,) in con.execute("SELECT message FROM notices WHERE kind = ?", (kind,))]


def _chi_square(values: np.ndarray, buckets: int) -> float:
    counts = np.bincount(values, minlength=buckets).astype(np.float64)
    expected = values.size / buckets
    return float(((counts - expected) ** 2 / expected).sum())


# ---------------------------------------------------------------------------------------------
# the mask generator


def test_masks_installed_where_flower_calls_them() -> None:
    import importlib

    import dpfl.runtime.flower.client_app  # noqa: F401  (installs on import)
    import dpfl.runtime.flower.server_app  # noqa: F401

    assert masks.installed()
    for name in ("flwr.client.mod.secure_aggregation.secaggplus_mod",
                 "flwr.server.workflow.secure_aggregation.secaggplus_workflow",
                 "flwr.common.secure_aggregation.secaggplus_utils"):
        assert importlib.import_module(name).pseudo_rand_gen is masks.chacha_rand_gen
    masks.install()  # idempotent
    assert masks.installed()


def test_masks_deterministic_shapes_and_refusals() -> None:
    seed = bytes(range(32))
    dims = [(), (3,), (2, 5)]
    a = masks.chacha_rand_gen(seed, 2**33, dims)
    b = masks.chacha_rand_gen(seed, 2**33, dims)
    assert [x.shape for x in a] == dims and all(x.dtype == np.int64 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other = masks.chacha_rand_gen(seed[:-1] + b"\xff", 2**33, dims)
    assert not np.array_equal(a[2], other[2])
    # Flower's own generator folds the seed to 32 bits: these two seeds collide there, not here
    folded = bytes(4) * 8
    flipped = (b"\x01\x00\x00\x00" * 2) + bytes(24)  # XOR fold of both is 0
    assert not np.array_equal(masks.chacha_rand_gen(folded, 2**20, [(64,)])[0],
                              masks.chacha_rand_gen(flipped, 2**20, [(64,)])[0])
    for bad in (0, 1, 3, 2**33 + 2, 2**64):
        with pytest.raises(ValueError, match="power of two"):
            masks.chacha_rand_gen(seed, bad, [(2,)])


def test_masks_are_uniform() -> None:
    """2^20 values modulo 2^33 from a fixed seed: chi-square over 256 buckets of the top 8 bits
    and of the low 8 bits, each below 400 (df 255; P > 1e-8 only for a non-uniform source)."""
    (x,) = masks.chacha_rand_gen(b"dpfl-chi-square-seed-0000000000!", 2**33, [(2**20,)])
    assert x.min() >= 0 and x.max() < 2**33
    high, low = _chi_square(x >> 25, 256), _chi_square(x & 255, 256)
    print(f"\nchi-square (df 255): high bits {high:.1f}, low bits {low:.1f}")
    assert high < 400 and low < 400


# ---------------------------------------------------------------------------------------------
# parameters and refusals (no Flower processes)


def test_secagg_parameters() -> None:
    assert secagg_shares(2) == (1.0, 2)
    assert secagg_shares(3) == (3, 2)
    assert secagg_shares(5) == (5, 3)
    assert secagg_shares(15) == (15, 8)
    assert secagg_shares(100) == (15, 8)  # 2 ceil(log2 100) + 1
    assert secagg_shares(1000) == (21, 11)
    for n in (2, 3, 4, 5, 8, 15, 16, 100, 1000):
        shares, threshold = secagg_shares(n)
        k = n if isinstance(shares, float) else shares
        assert 2 <= threshold <= k and threshold > k / 2
        SecAggPlusWorkflow(shares, threshold)  # Flower accepts them
    with pytest.raises(ValueError, match="at least 2"):
        secagg_shares(1)


def test_bits_above_31_are_refused_and_rotation_is_deployable(mnist_fixture: Path) -> None:
    bits32 = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5, "secure_sum": {"bits": 32}}}
    cfg = parse_config(_raw(mnist_fixture, "b32", algorithm=bits32))
    with pytest.raises(ConfigError, match=r"algorithm\.options\.secure_sum\.bits = 32"):
        secure_bits_for(cfg, build_experiment(cfg).algorithm, reproducible=True)
    rot = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5,
                                            "secure_sum": {"bits": 31, "rotation": True}}}
    cfg = parse_config(_raw(mnist_fixture, "rot", algorithm=rot))
    # the rotation's signs are a public function of the round: the same on every node whatever
    # randomness source draws the noise
    assert secure_bits_for(cfg, build_experiment(cfg).algorithm, reproducible=False) == 31
    assert secure_bits_for(cfg, build_experiment(cfg).algorithm, reproducible=True) == 31
    plain = parse_config(_raw(mnist_fixture, "plain", privacy={"delta": 0.01}))
    assert secure_bits_for(plain, build_experiment(plain).algorithm, reproducible=False) is None


class _NoGrid:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the cohort used the grid ({name}) for a round SecAgg+ cannot run")


def test_a_cohort_of_one_never_uploads_in_the_clear(tmp_path: Path, mnist_fixture: Path) -> None:
    """Seed 2, q = 0.3: each round samples exactly one client. That round contacts no node (the
    grid would fail the test), is noticed, and charges nobody against the server."""
    import torch

    cfg = parse_config(_raw(mnist_fixture, "one", sampling={"kind": "poisson", "sample_rate": 0.3}, seed=2))
    exp = build_experiment(cfg)
    cohorts = [exp.algorithm.sample(t, 3, exp.seeds).tolist() for t in range(2)]
    assert [len(c) for c in cohorts] == [1, 1], cohorts
    cohort = FlowerCohort(cast(Grid, _NoGrid()), {0: 10, 1: 11, 2: 12}, "{}", exp.data.sizes(),
                          exp.problem.layout.numel, 5.0, reproducible=True, secure_bits=31)
    assert cohort.secure_sum and not cohort.hidden_participation
    store = tmp_path / "one.sqlite"
    result = run_experiment(cfg, RunStore(store), remote=cohort)
    # every round was empty: the loop's rule for deployments ends such a run `failed`, honestly
    assert result.status == "failed" and "no upload arrived" in result.final["stop_reason"], result.final
    assert len(_notices(store, "secure-sum-skipped")) == 2
    rounds = RunStore(store).rounds(result.run_id)
    assert [r.get("topped_up_clients", 0) for r in rounds] == [1, 1]
    assert not result.final["privacy"]["client_epsilons_rdp"].get("server")
    assert torch.isfinite(torch.tensor(result.final["test_loss"]))


# ---------------------------------------------------------------------------------------------
# (a) and (d): a federation of 3 SuperNodes


@pytest.fixture(scope="module")
def federation(prompt_superexec: None, tmp_path_factory: pytest.TempPathFactory,
               mnist_fixture: Path) -> Iterator[LocalFederation]:
    with LocalFederation(3, data_dir=mnist_fixture, workdir=tmp_path_factory.mktemp("fed")) as fed:
        yield fed


@pytest.mark.slow  # ~60 s: four SecAgg+ stages per round, each a SuperNode poll away
@pytest.mark.parametrize("sampling", [None, POISSON], ids=["all", "poisson"])
def test_secure_deployment_equals_the_simulation(tmp_path: Path, mnist_fixture: Path, federation: LocalFederation,
                                                 sampling: dict | None) -> None:
    path = _config(tmp_path, mnist_fixture, "secure", sampling=sampling)
    store = tmp_path / "flower.sqlite"
    got = federation.run(path, store=store, round_timeout=300, connect_timeout=120, timeout=900, reproducible=True)
    want = run_experiment(load_config(path), RunStore(tmp_path / "sim.sqlite")).final
    assert got["status"] == "finished" and got["rounds"] == 2, got["log"][-3000:]
    assert got["params_sha256"] == want["params_sha256"]
    final = RunStore(store).get(got["run_id"]).result
    assert final is not None
    for observer in ("server", "public"):
        assert _certified(final, observer) == pytest.approx(_certified(want, observer), rel=1e-12)
    assert final["privacy"]["client_epsilons_rdp"]["server"] == pytest.approx(
        want["privacy"]["client_epsilons_rdp"]["server"], rel=1e-12)
    arrived = [r["arrived"] for r in RunStore(store).rounds(got["run_id"])]
    assert arrived == ([3, 3] if sampling is None else [2, 2])
    assert not _notices(store, "dropout") and not _notices(store, "secure-sum-failed")


# ---------------------------------------------------------------------------------------------
# (b) what the server receives in the masked stage


class _RecordingGrid:
    """Delegates to a Grid and keeps the replies of ``send_and_receive``."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self.replies: list[Message] = []

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Message]:
        out = list(self._grid.send_and_receive(messages, timeout=timeout))
        self.replies.extend(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


class RecordingWorkflow(SecAggPlusWorkflow):
    """Records what the masked stage sends (FitIns per node) and receives (masked vectors)."""

    sent: list[dict[int, Any]] = []
    received: list[dict[int, list[np.ndarray]]] = []
    modulus: list[int] = []

    def collect_masked_vectors_stage(self, grid: Grid, context: LegacyContext, state: Any) -> bool:
        from flwr.compat.common import recorddict_compat as compat

        self.sent.append({nid: compat.recorddict_to_fitins(rd, keep_input=True)
                          for nid, rd in state.nid_to_fitins.items()})
        self.modulus.append(int(state.mod_range))
        rec = _RecordingGrid(grid)
        ok = super().collect_masked_vectors_stage(cast(Grid, rec), context, state)
        self.received.append({
            int(r.metadata.src_node_id): [bytes_to_ndarray(cast(bytes, b)) for b in cast(
                list, r.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS])]
            for r in rec.replies if not r.has_error()})
        return ok


def _simulate_recorded(config: Any, store: Path, *, hidden_participation: bool = False) -> Any:
    """``run_experiment`` on a ``FlowerCohort`` (reproducible, b = 31) recorded by
    :class:`RecordingWorkflow`, in a Flower simulation of 3 SuperNodes running dpfl's ClientApp;
    the finished run's result (the recorder's lists are reset first)."""
    from flwr.server import ServerApp
    from flwr.simulation import run_simulation

    from dpfl.runtime.flower.client_app import app as client_app
    from dpfl.runtime.flower.transport import discover_nodes

    results: list[Any] = []
    failed: list[BaseException] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Any) -> None:
        try:
            exp = build_experiment(config)
            nodes = discover_nodes(grid, 3, 120.0)
            cohort = FlowerCohort(grid, nodes, json.dumps(config.model_dump(mode="json")), exp.data.sizes(),
                                  exp.problem.layout.numel, 300.0, reproducible=True, secure_bits=31,
                                  hidden_participation=hidden_participation)
            cohort.workflow_type = RecordingWorkflow
            results.append(run_experiment(config, RunStore(store), remote=cohort))
        except BaseException as err:  # noqa: BLE001 (reported by the test)
            failed.append(err)

    RecordingWorkflow.sent, RecordingWorkflow.received, RecordingWorkflow.modulus = [], [], []
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=3,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"address": "local", "num_cpus": 2, "include_dashboard": False,
                                                 "log_to_driver": False}})
    assert not failed, failed
    assert results and results[0].status == "finished"
    return results[0]


def test_server_sees_uniform_masked_vectors_not_residues(tmp_path: Path, mnist_fixture: Path) -> None:
    pytest.importorskip("ray")
    from flwr.server.workflow.secure_aggregation import secaggplus_workflow

    from dpfl.runtime.flower.warm import train_round

    path = _config(tmp_path, mnist_fixture, "masked")
    config = load_config(path)
    calls: list[int] = []
    real = masks.chacha_rand_gen

    def counting(seed: bytes, num_range: int, dims: list[tuple[int, ...]]) -> list[np.ndarray]:
        calls.append(num_range)
        return real(seed, num_range, dims)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(secaggplus_workflow, "pseudo_rand_gen", counting)
        result = _simulate_recorded(config, tmp_path / "flower.sqlite")
    assert calls and set(calls) == {2**33}  # the server unmasked with dpfl's generator
    want = run_experiment(config, RunStore(tmp_path / "sim.sqlite")).final
    assert result.final["params_sha256"] == want["params_sha256"]  # so the clients masked with it too
    assert len(RecordingWorkflow.received) == 2
    chis: list[float] = []
    for sent, received, modulus in zip(RecordingWorkflow.sent, RecordingWorkflow.received,
                                       RecordingWorkflow.modulus, strict=True):
        assert sorted(received) == sorted(sent) and modulus == 2**33
        for nid, (weight, vec) in received.items():
            ins = sent[nid]
            rc = dict(ins.config)
            rc["state"] = json.loads(str(rc["state"]))
            rc.pop("secure-sum-bits")
            (params,) = parameters_to_ndarrays(ins.parameters)
            _, plain = train_round(rc, np.array(params, copy=True), int(rc["client"]), None)
            assert vec.dtype == np.int64 and vec.shape == plain.shape
            assert vec.min() >= 0 and vec.max() < modulus
            assert int(weight[0]) != 2**31  # the weight is masked too
            assert np.mean(vec == plain) < 0.001
            chi = _chi_square(vec >> 27, 64)  # top 6 of 33 bits; plaintext residues (< 2^31) fill 16 of 64
            print(f"round {len(chis) // 3 + 1}, node {nid}: chi-square of the masked vector {chi:.1f} (df 63)")
            chis.append(chi)
            assert chi < 140, chi
            assert _chi_square(plain >> 27, 64) > 10 * 140


# ---------------------------------------------------------------------------------------------
# (c) a SuperNode killed mid-round


@pytest.mark.slow  # 40-60 s until Flower's SuperLink declares the killed node unavailable
@pytest.mark.parametrize("participation", ["visible", "hidden"])
def test_killed_node_is_out_of_the_sum_and_of_the_ledger(tmp_path: Path, mnist_fixture: Path,
                                                         participation: str) -> None:
    hidden = participation == "hidden"
    path = _config(tmp_path, mnist_fixture, "secure-drop", num_clients=5, sampling=POISSON if hidden else None,
                   privacy={"delta": 0.01, "secure_aggregation": True, "participation": participation})
    store = tmp_path / "flower.sqlite"
    signals = tmp_path / "signals"
    signals.mkdir()
    node_config = {4: {"fault": "block:2", "signal-dir": str(signals)}}
    with LocalFederation(5, data_dir=mnist_fixture, workdir=tmp_path / "fed", node_config=node_config) as fed:
        proc = fed.submit(path, store=store, round_timeout=600, connect_timeout=300, reproducible=True)
        deadline = time.monotonic() + 900
        while not (signals / "client-4-round-2").exists():  # in the masked stage, before its vector
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("client 4 never started round 2")
            time.sleep(0.1)
        processes = fed.node_processes(4)
        fed.kill_node(4)
        end = time.monotonic() + 30
        while any(process_alive(p) for p in processes) and time.monotonic() < end:
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=900)
    assert "dpfl-result" in out, out[-3000:]
    rec = RunStore(store).list()[0]
    assert rec.status == "finished"
    rounds = RunStore(store).rounds(rec.run_id)
    assert [r["arrived"] for r in rounds] == [5, 4]
    assert [r.get("topped_up_clients", 0) for r in rounds] == [0, 1]
    assert not _notices(store, "secure-sum-failed")
    partial = _notices(store, "round-partial")
    assert len(partial) == 1 and "without clients [4]" in partial[0]
    final = rec.result
    assert final is not None
    if hidden:
        # every node in every round's sum, whatever its coin; the server's figure is the in-process
        # run's with the same coins, noise and loss of client 4's round-2 vector, bit for bit
        from secure_transports import OwnCoinsTransport

        twin = run_experiment(load_config(path), RunStore(tmp_path / "twin.sqlite"),
                              remote=OwnCoinsTransport(load_config(path), drop=lambda t: [4] if t == 1 else [])).final
        assert final["params_sha256"] == twin["params_sha256"]
        for observer in ("server", "public"):
            assert _certified(final, observer) == pytest.approx(_certified(twin, observer), rel=1e-12)
        # the public's noise is the plan's; the server's round-2 sum carried 4 shares of mu/5
        assert _certified(final, "public") == pytest.approx(
            _certified(run_experiment(load_config(path), RunStore(tmp_path / "sim.sqlite")).final, "public"), rel=1e-9)
        assert _certified(final, "server") > _certified(final, "public")
        print(f"\nhidden: server {_certified(final, 'server'):.6g}, public {_certified(final, 'public'):.6g}")
        return
    sim = run_experiment(load_config(path), RunStore(tmp_path / "sim.sqlite")).final
    # the public sees the planned noise (the server topped up client 4's share)
    assert _certified(final, "public") == pytest.approx(_certified(sim, "public"), rel=1e-9)
    # against the server: client 4 is charged for round 1 only (its round-2 vector never entered
    # a sum); the survivors' round-2 sum carried 4 Skellam shares of mu/5, not 5 (the server's
    # top-up does not protect against the server), so their epsilon is above the simulation's
    per_client = final["privacy"]["client_epsilons_rdp"]["server"]
    want = sim["privacy"]["client_epsilons_rdp"]["server"]
    assert per_client["4"] < want["4"]
    assert all(per_client[c] == pytest.approx(per_client["0"], rel=1e-12) for c in "123")
    assert per_client["0"] > want["0"] and per_client["4"] < per_client["0"]
    print(f"\nserver epsilons: deployed {per_client}, simulation {want}")



# ---------------------------------------------------------------------------------------------
# (d) hidden participation: the clients' own coins


@pytest.mark.slow  # ~15 s; hidden participation in the simulator: tests/integration/test_secure_aggregation.py
def test_hidden_participation_on_flower_hides_who_was_sampled(tmp_path: Path, mnist_fixture: Path) -> None:
    pytest.importorskip("ray")
    import torch
    from secure_transports import OwnCoinsTransport

    path = _config(tmp_path, mnist_fixture, "hidden", sampling=POISSON,
                   privacy={"delta": 0.01, "secure_aggregation": True, "participation": "hidden"})
    config = load_config(path)
    result = _simulate_recorded(config, tmp_path / "flower.sqlite", hidden_participation=True)
    final = result.final
    assert _certified(final, "server") == pytest.approx(_certified(final, "public"), rel=1e-12)
    assert final["privacy"]["certified"]["observers"]["server"]["basis"] == "ex-ante"
    # the same coins, noise and training in process: the same model, bit for bit
    want = run_experiment(config, RunStore(tmp_path / "inproc.sqlite"), remote=OwnCoinsTransport(config)).final
    assert final["params_sha256"] == want["params_sha256"]
    seeds = build_experiment(config).seeds
    kinds: dict[bool, list[float]] = {True: [], False: []}
    assert len(RecordingWorkflow.received) == 2
    for t, (sent, received) in enumerate(zip(RecordingWorkflow.sent, RecordingWorkflow.received, strict=True)):
        assert len(sent) == 3 and sorted(received) == sorted(sent)  # every node, every round
        configs = [{k: v for k, v in ins.config.items() if k not in ("client", "state")} for ins in sent.values()]
        # no coin from the server
        assert all(c == configs[0] for c in configs) and configs[0]["hidden-participation"] is True
        shapes = {vec.shape for _, vec in received.values()}
        assert len(shapes) == 1
        for nid, (_, vec) in received.items():
            client = int(sent[nid].config["client"])
            coin = float(torch.rand((), generator=seeds.generator(t, client, "coin"), dtype=torch.float64)) < 0.7
            chi = _chi_square(vec >> 27, 64)
            print(f"round {t + 1}, client {client}, coin {int(coin)}: "
                  f"chi-square of the masked vector {chi:.1f} (df 63)")
            kinds[coin].append(chi)
    assert kinds[True] and kinds[False]  # both kinds of client were seen (seed 5)
    assert max(kinds[True] + kinds[False]) < 140
