"""Every registered algorithm splits its round at the wire: client_step on each client, aggregate
on the server, with the simulation's results unchanged.

For each algorithm (tiny MNIST runs: 6 clients of 12–50 samples, a logistic model, cohorts of 4):

1. ``splits_rounds`` is True (LDP-FL's ``client-minmax`` and ``private-minmax`` ranges excepted, on
   purpose: they need a cross-client agreement; they say so and refuse a partial cohort).
2. Row separability, through the real client path: a second copy of the algorithm (what a
   SuperNode builds from the config) loads the server's JSON-round-tripped ``client_state`` and
   runs ``client_step`` on one row with ``info.for_clients([c])``; the rows concatenated equal the
   server's ``client_step`` on the stacked cohort bit for bit (every draw is keyed by
   (round, client, purpose) and clipping and noise are row-wise). Checked in rounds 0 and 1, so
   state carried between rounds (UDP-CRD's new T and stds, PMIDP's thresholds) is covered.
3. ``server_step`` equals ``aggregate(client_step(...))`` (same bits; server_step may add
   simulation-only diagnostics), and for the newly split algorithms the pre-split formula
   computed independently here (float64 sums of the same float32 draws: rtol 1e-5). A one-off
   comparison of all these configs against the code before the split gave identical parameter
   digests, metrics, releases and state over 3 rounds.
4. Dropouts: ``aggregate`` on 2 of the 4 rows works, and ``releases_for_arrivals`` names exactly
   the arrived clients (plus broadcasts), with the noise each upload declared and the noise the
   aggregate really carries.
5. ``declared_plan`` equals what ``client_step`` declares, and the upload passes
   :func:`dpfl.runtime.validate.check_upload`.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpfl.algorithms.base import Algorithm, Uploads
from dpfl.algorithms.midp import PmidpFl, PmidpOptions
from dpfl.algorithms.private import PrivateAlgorithm
from dpfl.algorithms.registry import algorithms
from dpfl.client.context import LocalResult, RoundInfo
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.privacy.calibration import (
    midp_client_noise_std,
    midp_server_noise_std,
    pmidp_aggregation_weights,
    pmidp_client_noise_std,
)
from dpfl.privacy.mechanisms import clip_by_l2_norm, two_point_randomize
from dpfl.privacy.releases import (
    ExactRelease,
    FactorizationRelease,
    GaussianRelease,
    Release,
    SampledGaussianRelease,
    TwoPointRelease,
)
from dpfl.rng import SERVER, SeedSequence
from dpfl.rounds import Experiment, build_experiment
from dpfl.runtime.validate import check_upload
from dpfl.sampling import AllClients
from dpfl.server.shuffle import Shuffler

SIZES = [20, 35, 12, 50, 28, 40]
EPS6 = [1.0, 3.0, 9.0, 2.0, 20.0, 5.0]
UDP_LOCAL = {"local": {"lr": 0.1, "epochs": 1, "batch_size": None, "steps": None}}

# case → (algorithm name, options, extra config)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "fedavg": ("fedavg", {}, {}),
    "dp-fedavg": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5}, {}),
    "dp-fedavg-adaptive": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5,
                                         "adaptive_clip": {"count_noise_std": 1.0}}, {}),
    "dp-fedavg-blur-lus": ("dp-fedavg-blur-lus", {"noise_multiplier": 1.0, "clip_norm": 0.5}, {}),
    "dp-fedavg-central": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5, "variant": "central"}, {}),
    "nbafl": ("nbafl", {"epsilon": 2.0, "clip_norm": 10.0}, {}),
    "udp": ("udp", {"epsilon": 5.0, "clip_norm": 1.0}, UDP_LOCAL),
    # ζ = 10: the test loss never falls that much, so T is discounted after round 0 and round 1
    # uses the eq. 25 stds — server state the clients must receive
    "udp-crd": ("udp-crd", {"epsilon": 5.0, "clip_norm": 1.0, "threshold": 10.0}, UDP_LOCAL),
    "udp-lei": ("udp-lei", {"epsilon": 5.0, "clip_norm": 1.0}, UDP_LOCAL),
    "ldp-fl": ("ldp-fl", {"epsilon": 1.0, "radius": 0.1}, {}),
    "ldp-fl-global": ("ldp-fl", {"epsilon": 1.0, "range": "global-model"}, {}),
    "midp-server": ("midp-server", {"epsilons": EPS6, "clip_norm": 1.0}, {}),
    "midp-client": ("midp-client", {"epsilons": EPS6, "clip_norm": 1.0}, {}),
    "pmidp-fl": ("pmidp-fl", {"epsilons": EPS6, "clip_norm": 1.0, "clip_lr": 0.3}, {}),
    "dp-sgd-fedavg": ("dp-sgd-fedavg", {"noise_multiplier": 1.0, "clip_norm": 1.0},
                      {"local": {"lr": 0.1, "epochs": 1, "batch_size": 10}}),
    "dp-ftrl": ("dp-ftrl", {"mechanism": "blt", "noise_multiplier": 1.0, "clip_norm": 0.5, "buffers": 2,
                            "server_momentum": 0.5},
                {"sampling": {"kind": "min_separation", "min_separation": 1}}),
}


def _config(name: str, options: dict[str, Any], extra: dict[str, Any], data_dir: Path) -> Any:
    raw: dict[str, Any] = {
        "name": f"split-{name}", "seed": 7, "rounds": 3,
        "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "model": {"name": "logistic"},
        "algorithm": {"name": name, "options": options},
        "sampling": {"kind": "fixed", "clients_per_round": 4},
        "privacy": {"delta": 1e-5},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": None},
        "eval_every": 3,
    }
    raw.update(extra)
    return parse_config(raw)


@dataclass
class Setup:
    exp: Experiment
    fresh: Algorithm  # a copy taken before any round: what a client node builds from the config

    @property
    def server(self) -> Algorithm:
        return self.exp.algorithm


_BUILT: dict[str, Setup] = {}


def _setup(case: str, data_dir: Path) -> Setup:
    """A fresh experiment per call (tests mutate algorithm state); the build is cached."""
    if case not in _BUILT:
        exp = build_experiment(_config(*CASES[case], data_dir))
        _BUILT[case] = Setup(exp, copy.deepcopy(exp.algorithm))
    base = _BUILT[case]
    exp = copy.copy(base.exp)
    exp.algorithm = copy.deepcopy(base.fresh)
    return Setup(exp, copy.deepcopy(base.fresh))


def _clone(local: LocalResult) -> LocalResult:
    return LocalResult(local.params.clone(), local.train_loss.clone(), local.num_samples.clone(),
                       None if local.final_grads is None else local.final_grads.clone())


def _start_round(s: Setup, params: torch.Tensor, t: int) -> tuple[RoundInfo, LocalResult, list[Release] | None]:
    """What the runner does before the clients' step: sample, plan the releases, train."""
    algo = s.server
    clients = algo.sample(t, s.exp.data.num_clients, s.exp.seeds)
    info = RoundInfo(t, s.exp.data.num_clients, clients, s.exp.seeds)
    releases = None
    if isinstance(algo, PrivateAlgorithm):
        info = info.with_plan(algo.plan(info))  # the round's plan, fixed once (rounds/loop.py)
        releases = algo.releases(info, s.exp.data.sizes(clients.tolist()), False)
    local = s.exp.engine.train(params, clients.tolist(), t)
    return info, local, releases


def _client_node_uploads(s: Setup, params: torch.Tensor, local: LocalResult, info: RoundInfo) -> Uploads:
    """Each cohort member alone, as on a SuperNode: the server's state (through JSON), one row."""
    parts = []
    for i, c in enumerate(info.clients.tolist()):
        node = s.fresh
        node.load_state_dict(json.loads(json.dumps(s.server.client_state(c, info))))  # its own part only
        one = LocalResult(local.params[i : i + 1].clone(), local.train_loss[i : i + 1].clone(),
                          local.num_samples[i : i + 1].clone(),
                          None if local.final_grads is None else local.final_grads[i : i + 1].clone())
        # a SuperNode is not given the server's plan: it plans its own row from the same facts
        parts.append(node.client_step(params.clone(), one, info.for_clients(torch.tensor([c])).with_plan(None)))
    return Uploads.cat(parts)


def _assert_same_uploads(a: Uploads, b: Uploads) -> None:
    assert torch.equal(a.clients, b.clients)
    assert torch.equal(a.params, b.params)
    assert torch.equal(a.num_samples, b.num_samples)
    assert torch.equal(a.train_loss, b.train_loss)
    assert set(a.declared) == set(b.declared)
    for k in a.declared:
        assert torch.equal(a.declared[k].to(torch.float64), b.declared[k].to(torch.float64)), k


# ---------------------------------------------------------------- 1 and the registry


def test_every_registered_algorithm_is_covered() -> None:
    assert set(algorithms()) <= {name for name, _, _ in CASES.values()}


@pytest.mark.parametrize("case", list(CASES))
def test_splits_rounds(case: str, mnist_fixture: Path) -> None:
    assert _setup(case, mnist_fixture).server.splits_rounds is True


@pytest.mark.parametrize("options", [{"range": "client-minmax"},
                                     {"range": "private-minmax", "range_noise_multiplier": 1.0}])
def test_ldp_fl_cross_client_ranges_are_not_splittable_and_say_why(
        options: dict[str, Any], mnist_fixture: Path) -> None:
    exp = build_experiment(_config("ldp-fl", {"epsilon": 1.0, **options}, {}, mnist_fixture))
    algo = exp.algorithm
    assert algo.splits_rounds is False and type(algo).splits_rounds is True
    info = RoundInfo(0, 6, torch.tensor([2]), exp.seeds, cohort_size=4)
    local = exp.engine.train(exp.init_params, [2], 0)
    with pytest.raises(ConfigError, match=f"{options['range']}.*whole cohort"):
        algo.client_step(exp.init_params, local, info)


# ---------------------------------------------------------------- 2 and 5


@pytest.mark.parametrize("case", list(CASES))
def test_client_rows_are_separable_and_declare_the_plan(case: str, mnist_fixture: Path) -> None:
    s = _setup(case, mnist_fixture)
    params = s.exp.init_params.clone()
    for t in range(2):
        info, local, _ = _start_round(s, params, t)
        stacked = s.server.client_step(params.clone(), _clone(local), info)
        single = _client_node_uploads(s, params, local, info)
        _assert_same_uploads(stacked, single)
        # 5: the declared values are the server's plan, and the upload passes validation
        for row, c in enumerate(info.clients.tolist()):
            plan = s.server.declared_plan(info, c)
            if isinstance(s.server, PrivateAlgorithm) and case != "fedavg" and not case.startswith("ldp-fl"):
                assert "noise_std" in plan
            for key, want in plan.items():
                assert float(single.declared[key][row]) == pytest.approx(want, rel=1e-12, abs=0.0), key
            declared = {k: float(v[row]) for k, v in single.declared.items()}
            bad = check_upload(c, single.params[row], int(single.num_samples[row]), declared,
                               num_params=int(params.numel()), expected_samples=SIZES[c], plan=plan)
            assert bad is None, bad
        params = s.server.server_step(params, _clone(local), info).global_params


def test_a_client_without_the_servers_round_state_refuses_to_guess(mnist_fixture: Path) -> None:
    s = _setup("midp-client", mnist_fixture)
    info = RoundInfo(0, 6, torch.tensor([1]), s.exp.seeds, cohort_size=4)
    local = s.exp.engine.train(s.exp.init_params, [1], 0)
    with pytest.raises(ConfigError, match="whole cohort"):
        s.fresh.client_step(s.exp.init_params, local, info)


# ---------------------------------------------------------------- 3


def _expected_pre_split(case: str, algo: Any, params: torch.Tensor, local: LocalResult,
                        info: RoundInfo) -> torch.Tensor | None:
    """The pre-split server_step, computed independently (float64 sums of the same draws)."""
    ids = info.clients.tolist()
    w = local.params
    n = local.num_samples.double()
    p = n / n.sum()
    t = info.round_idx

    def randn(c: int, purpose: str = "noise") -> torch.Tensor:
        return torch.randn(w.shape[1], generator=info.seeds.generator(t, c, purpose), dtype=w.dtype).double()

    if case in ("udp", "udp-crd", "udp-lei"):
        stds = [algo.history[t][c] for c in ids]
        return sum(p[i] * (w[i].double() + stds[i] * randn(c)) for i, c in enumerate(ids))
    if case in ("midp-server", "midp-client"):
        eps = min(EPS6[c] for c in ids)
        clipped = clip_by_l2_norm(w, 1.0)[0].double()
        d = int(w.shape[1])
        if case == "midp-server":
            s = midp_server_noise_std(eps, 1.0, float(p.float().max()), d)
            return (p.float().double() @ clipped) + s * randn(SERVER, "server_noise")
        s = midp_client_noise_std(eps, 1.0, p.float().double().numpy(), d)
        return sum(p[i] * (clipped[i] + s * randn(c)) for i, c in enumerate(ids))
    if case == "pmidp-fl":
        clips = algo.clip_norms[ids]
        d = int(w.shape[1])
        stds = [pmidp_client_noise_std(EPS6[c], float(clips[i]), d, len(ids)) for i, c in enumerate(ids)]
        pw = pmidp_aggregation_weights(stds)
        clipped = clip_by_l2_norm(w, torch.as_tensor(clips, dtype=w.dtype))[0].double()
        return sum(float(pw[i]) * (clipped[i] + stds[i] * randn(c)) for i, c in enumerate(ids))
    if case == "ldp-fl":
        rows = [two_point_randomize(w[i : i + 1], 0.0, 0.1, 1.0, info.seeds.generator(t, c, "randomizer"))[0][0]
                for i, c in enumerate(ids)]
        return torch.stack(rows).double().mean(0)
    return None  # fedavg, dp-fedavg, nbafl: split before, covered by their own regression tests


def _tensor_list(value: Any) -> Any:
    """A tensor in an algorithm's state (dp-ftrl's momentum; checkpoints store tensors) as a list."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


@pytest.mark.parametrize("case", list(CASES))
def test_server_step_is_aggregate_of_client_step_and_the_pre_split_result(case: str, mnist_fixture: Path) -> None:
    s = _setup(case, mnist_fixture)
    twin = copy.deepcopy(s.server)
    params = s.exp.init_params.clone()
    for t in range(2):
        info, local, _ = _start_round(s, params, t)
        tinfo = info
        if isinstance(twin, PrivateAlgorithm):  # the twin plans its own round, as a loop would
            tinfo = info.with_plan(twin.plan(info))
            assert tinfo.plan == info.plan
            twin.releases(tinfo, s.exp.data.sizes(info.clients.tolist()), False)
        clips_before = getattr(s.server, "clip_norms", None)
        clips_before = None if clips_before is None else np.array(clips_before, copy=True)
        want = _expected_pre_split(case, s.server, params, local, info)
        out = s.server.server_step(params, _clone(local), info)
        split = twin.aggregate(params, twin.client_step(params, _clone(local), tinfo), tinfo)
        assert torch.equal(out.global_params, split.global_params)
        for k, v in split.metrics.items():
            assert out.metrics[k] == v, k
        assert json.dumps(s.server.state_dict(), sort_keys=True, default=_tensor_list) == json.dumps(
            twin.state_dict(), sort_keys=True, default=_tensor_list)
        if want is not None:
            scale = float(want.abs().max())
            torch.testing.assert_close(out.global_params.double(), want, rtol=1e-5, atol=1e-6 * scale)
        if case == "pmidp-fl":  # eq. 5.18 on the unclipped norms, as before the split
            assert clips_before is not None
            norms = local.params.norm(dim=1).double().numpy()
            ids = info.clients.numpy()
            np.testing.assert_allclose(s.server.clip_norms[ids], clips_before[ids] - 0.3 * (clips_before[ids] - norms),
                                       rtol=1e-6)
        params = out.global_params


def test_ldp_fl_aggregates_a_shuffler_processes_multisets_like_its_own(mnist_fixture: Path) -> None:
    s = _setup("ldp-fl", mnist_fixture)
    params = s.exp.init_params.clone()
    info, local, _ = _start_round(s, params, 0)
    up = s.server.client_step(params, _clone(local), info)
    own = s.server.aggregate(params, up, info)
    low, high = (torch.full((params.numel(),), v) for v in (-0.1 / math.tanh(0.5), 0.1 / math.tanh(0.5)))
    mixed = Shuffler.shuffle_two_point(up.params, low.to(up.params.dtype), high.to(up.params.dtype))
    remote = Uploads(up.clients[:0], up.params[:0], up.num_samples[:0], up.train_loss[:0], shuffled=mixed)
    theirs = s.server.aggregate(params, remote, info)
    torch.testing.assert_close(theirs.global_params, own.global_params, rtol=0, atol=1e-7)
    assert theirs.metrics["epsilon_total_unshuffled"] == own.metrics["epsilon_total_unshuffled"]
    with pytest.raises(ConfigError, match="IdMultisets"):
        s.server.aggregate(params, Uploads(up.clients, up.params, up.num_samples, up.train_loss, shuffled=up.params),
                           info)


# ---------------------------------------------------------------- 4


def _std_of(releases: list[Release], observer: str) -> dict[int | None, list[float]]:
    """Per client (None: a broadcast), the noise stds of its releases to ``observer``."""
    out: dict[int | None, list[float]] = {}
    for r in releases:
        if r.observer == observer:
            for c in r.client_ids if r.client_ids is not None else (None,):
                out.setdefault(c, []).append(r.noise_std)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_dropouts_aggregate_the_arrivals_and_the_ledger_records_their_noise(case: str, mnist_fixture: Path) -> None:
    s = _setup(case, mnist_fixture)
    algo = s.server
    params = s.exp.init_params.clone()
    info, local, planned = _start_round(s, params, 0)
    algo_clip = float(getattr(algo, "clip_norm", 1.0))  # dp-fedavg's S_t of this round
    up = algo.client_step(params.clone(), _clone(local), info)
    keep = torch.tensor([0, 2])  # rows 1 and 3 never arrive
    arrived = up.select(keep)
    out = algo.aggregate(params, arrived, info)
    assert out.global_params.shape == params.shape and bool(torch.isfinite(out.global_params).all())
    if not isinstance(algo, PrivateAlgorithm):
        return
    assert planned is not None
    got = algo.releases_for_arrivals(info, arrived.clients, arrived.num_samples, False)
    ids = set(arrived.clients.tolist())
    named = {c for r in got if r.client_ids is not None for c in r.client_ids}
    assert named == ids
    m = out.metrics
    if case.startswith("ldp-fl"):
        for obs in ("server", "public"):
            (r,) = [r for r in got if r.observer == obs]
            assert isinstance(r, TwoPointRelease) and r.num_coordinates == params.numel() and r.epsilon == 1.0
        return
    if case == "dp-sgd-fedavg":  # each arrival's own DP-SGD steps, to both observers, as declared
        declared_of = {c: i for i, c in enumerate(arrived.clients.tolist())}
        for obs in ("server", "public"):
            charged = {}
            for r in got:
                assert isinstance(r, SampledGaussianRelease) and r.client_ids is not None
                if r.observer == obs:
                    charged.update({c: (r.noise_multiplier, r.sample_rate, r.count) for c in r.client_ids})
            assert charged == {c: (float(arrived.declared["noise_multiplier"][i]),
                                   float(arrived.declared["record_sample_rate"][i]),
                                   int(arrived.declared["local_steps"][i])) for c, i in declared_of.items()}
        return
    if case == "pmidp-fl":  # adaptive thresholds (clip_lr > 0): each arrival's norm released exactly
        exact = [r for r in got if isinstance(r, ExactRelease)]
        assert ({(r.observer, c) for r in exact for c in r.client_ids}
                == {(o, c) for o in ("server", "public") for c in ids})
        got = [r for r in got if r not in exact]
    if case == "dp-ftrl":  # the server saw the clipped uploads (ε = ∞); the public each arrival's participation
        (seen,) = [r for r in got if r.observer == "server"]
        assert isinstance(seen, ExactRelease) and set(seen.client_ids) == ids
        public_f = [r for r in got if r.observer == "public"]
        assert all(isinstance(r, FactorizationRelease) and r.noise_std == pytest.approx(algo.noise_multiplier * 0.5)
                   for r in public_f)
        assert {c for r in public_f for c in r.client_ids or ()} == ids
        assert m["noise_multiplier"] == algo.noise_multiplier
        return
    server = _std_of(got, "server")
    public = _std_of(got, "public")
    declared = dict(zip(arrived.clients.tolist(), arrived.declared["noise_std"].tolist(), strict=True))
    p = arrived.num_samples.double() / arrived.num_samples.double().sum()
    if case.startswith("dp-fedavg"):
        # topped up to the plan: the broadcast is the planned one, each upload its declared noise
        assert m["topped_up_clients"] == 2
        assert _std_of(planned, "public") == public
        if "central" not in case:
            # the update's noise multiplier σ_c/S as declared (with adaptive clipping the count is
            # a second release; and releases_for_arrivals, called after aggregate moved S_t on to
            # S_{t+1}, states std and sensitivity at S_{t+1}: same ratio, same ε)
            mult = {c: float(arrived.declared["noise_std"][i]) / algo_clip
                    for i, c in enumerate(arrived.clients.tolist())}
            ratios = {c: [r.noise_std / r.sensitivity for r in got if r.observer == "server" and r.client_ids
                          and c in r.client_ids] for c in ids}
            assert all(any(v == pytest.approx(mult[c], rel=1e-9) for v in ratios[c]) for c in ids)
        return
    assert {c: server[c] for c in ids} == {c: [pytest.approx(declared[c], rel=1e-12, abs=0.0)] for c in ids}
    if case == "nbafl":
        total = math.sqrt(float((p**2).sum()) * m["uplink_noise_std"] ** 2 + m["downlink_noise_std"] ** 2)
    elif case.startswith("udp"):
        sig = torch.tensor([declared[c] for c in arrived.clients.tolist()], dtype=torch.float64)
        total = math.sqrt(float((p**2 * sig**2).sum()))
    else:  # midp-*, pmidp-fl: what aggregate reports it carries
        total = m["aggregate_noise_std"]
    broadcasts = [r for r in got if r.observer == "public" and r.client_ids is None]
    if broadcasts:
        # priced at the worst cohort of the round's size, never above the arrivals' own multiplier
        # one broadcast: amplified only for interchangeable clients at a client-level unit
        (b,) = broadcasts
        assert b.amplifiable or algo.sampler.describe()["kind"] == "all"
        assert b.noise_std == pytest.approx(total, rel=1e-6)
    else:  # per participant at the drawn cohort (unequal sizes or budgets, or a record-level unit)
        assert set(public) == ids
        assert all(v == pytest.approx(total, rel=1e-6) for stds in public.values() for v in stds)
    if case in ("midp-server", "midp-client"):
        # eq. 4.7 for the arrivals, at the cohort's smallest budget: σ_s recalibrated (server side)
        # or reached by the server's top-up (client side)
        eps = min(EPS6[c] for c in info.clients.tolist())
        target = midp_server_noise_std(eps, 1.0, float(p.float().max()), int(params.numel()))
        assert total == pytest.approx(target, rel=1e-6)
        assert m["server_noise_std"] > 0
    if case == "pmidp-fl":
        # p_k ∝ 1/σ_k over the arrivals' declared stds; σ_k kept at N = the cohort
        w = np.array(m["weights"])
        np.testing.assert_allclose(w, pmidp_aggregation_weights(list(declared.values())), rtol=1e-12)
        k_planned = _std_of([r for r in planned if isinstance(r, GaussianRelease)], "server")
        assert {c: k_planned[c] for c in ids} == {c: [pytest.approx(declared[c], rel=1e-12)] for c in ids}


def test_pmidp_keeps_a_threshold_whose_declared_successor_is_invalid() -> None:
    pm = PmidpFl(PmidpOptions(epsilon=5.0, clip_norm=2.0, clip_lr=0.5), AllClients(), 3, 10, seed=0, delta=1e-5)
    info = RoundInfo(0, 3, torch.arange(3), SeedSequence(0))
    f64 = torch.float64
    up = Uploads(torch.arange(3), torch.zeros(3, 10), torch.ones(3, dtype=torch.long), torch.zeros(3), {
        "noise_std": torch.ones(3, dtype=f64), "clip_norm": torch.full((3,), 2.0, dtype=f64),
        "next_clip_norm": torch.tensor([1.5, -1.0, float("nan")], dtype=f64)})
    out = pm.aggregate(torch.zeros(10), up, info)
    assert pm.clip_norms.tolist() == [1.5, 2.0, 2.0]
    assert out.metrics["rejected_next_clip_norms"] == 2
