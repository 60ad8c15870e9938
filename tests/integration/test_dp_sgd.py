"""dp-sgd-fedavg end to end: its certificates against dp_accounting called here on the composed
event, and the same model trained at user level (dp-fedavg) or record level (dp-sgd-fedavg).

The event of client k is written out in this file from the settings (not read from dpfl): each
round it takes part in, ⌈|D_k|/B⌉ local steps, each a Poisson-sampled Gaussian with rate
q_k = B/|D_k| and multiplier z, i.e. ``SelfComposedDpEvent(PoissonSampledDpEvent(q_k,
GaussianDpEvent(z)), steps_k × rounds_k)``; the rounds a client took part in are the cohorts
redrawn from the run's seed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dp_accounting as dpa
import pytest
import torch
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from torch import nn

import dpfl
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.rng import SERVER, SeedSequence
from dpfl.rounds import dry_run, run_experiment
from dpfl.sampling import FixedSizeSampler, PoissonSampler
from dpfl.store import RunStore

SIZES = [20, 35, 12, 50, 28, 40]
DELTA = 1e-5
ADD_REMOVE = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
# dpfl certifies with orders 1.01–1.09 in front of dp_accounting's defaults (certify.py)
ORDERS = [round(1 + i / 100, 2) for i in range(1, 10)] + list(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


def _config(data_dir: Path, **over: Any) -> Any:
    raw: dict[str, Any] = {
        "name": "dp-sgd", "seed": 7, "rounds": 4,
        "data": {"name": "mnist", "dir": str(data_dir), "verify": False},
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-sgd-fedavg", "options": {"noise_multiplier": 1.1, "clip_norm": 1.0}},
        "sampling": {"kind": "fixed", "clients_per_round": 4},
        "privacy": {"delta": DELTA, "pld_every": 0},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 10},
        "eval_every": 4,
    }
    raw.update(over)
    return parse_config(raw)


def _rounds_taken_part(sampler: Any, rounds: int, seed: int) -> list[int]:
    seeds = SeedSequence(seed)
    counts = [0] * len(SIZES)
    for t in range(rounds):
        for c in sampler.sample(len(SIZES), seeds.generator(t, SERVER, "sample")).tolist():
            counts[c] += 1
    return counts


def _event(z: float, q: float, count: int) -> dpa.DpEvent:
    step = dpa.GaussianDpEvent(z) if q == 1 else dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))
    return dpa.SelfComposedDpEvent(step, count)


def _direct(z: float, rates: list[float], steps: list[int], rounds: list[int]) -> dict[int, tuple[float, float, float]]:
    """Per client that took part: (RDP ε at dpfl's orders, PLD ε at grid 1e-3, RDP ε at
    dp_accounting's default orders = the moments-accountant claim)."""
    out = {}
    for c, r in enumerate(rounds):
        if not r:
            continue
        event = _event(z, rates[c], steps[c] * r)
        rdp = rdp_privacy_accountant.RdpAccountant(ORDERS, ADD_REMOVE).compose(event).get_epsilon(DELTA)
        pld = pld_privacy_accountant.PLDAccountant(ADD_REMOVE, value_discretization_interval=1e-3
                                                   ).compose(event).get_epsilon(DELTA)
        claim = rdp_privacy_accountant.RdpAccountant().compose(event).get_epsilon(DELTA)
        out[c] = (rdp, pld, claim)
    return out


@pytest.mark.parametrize("variant", ["batch-size", "fixed-rate"])
def test_certified_epsilon_equals_dp_accounting_on_the_composed_event(variant: str, mnist_fixture: Path,
                                                                      tmp_path: Path) -> None:
    if variant == "batch-size":  # q_k = 10/|D_k|, ⌈|D_k|/10⌉ steps; 4 of 6 clients a round
        cfg = _config(mnist_fixture)
        z = 1.1
        rates = [min(1.0, 10 / n) for n in SIZES]
        steps = [math.ceil(n / 10) for n in SIZES]
        rounds = _rounds_taken_part(FixedSizeSampler(4), 4, 7)
    else:  # q = 0.2, 3 steps; Poisson client sampling at 0.5 (not amplified for a record)
        cfg = _config(mnist_fixture, algorithm={"name": "dp-sgd-fedavg", "options": {
            "noise_multiplier": 0.9, "clip_norm": 1.0, "record_sample_rate": 0.2}},
            local={"lr": 0.1, "batch_size": None, "steps": 3}, sampling={"kind": "poisson", "sample_rate": 0.5})
        z = 0.9
        rates = [0.2] * len(SIZES)
        steps = [3] * len(SIZES)
        rounds = _rounds_taken_part(PoissonSampler(0.5), 4, 7)
    assert sum(1 for r in rounds if r) >= 3 and len(set(rounds)) > 1  # heterogeneous participation
    direct = _direct(z, rates, steps, rounds)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store)
    privacy = res.final["privacy"]
    for obs in ("server", "public"):
        cert = privacy["certified"]["observers"][obs]
        assert (cert["privacy_unit"], cert["relation"]) == ("record", "add_remove")
        worst_rdp = max(v[0] for v in direct.values())
        worst = max(min(v[0], v[1]) for v in direct.values())
        assert float(cert["epsilon_rdp"]) == pytest.approx(worst_rdp, rel=1e-9)
        assert float(cert["epsilon"]) == pytest.approx(worst, rel=1e-9)
        # each client's own RDP ε (the per-client table of the summary)
        table = privacy["client_epsilons_rdp"][obs]
        assert {int(k): pytest.approx(float(v), rel=1e-9) for k, v in table.items()} == {
            c: v[0] for c, v in direct.items()}
    claimed = {int(k): float(v) for k, v in privacy["claimed_epsilon"].items()}
    assert claimed == {c: pytest.approx(direct[c][2], rel=1e-9) if c in direct else 0.0 for c in range(len(SIZES))}
    assert res.status == "finished"
    # the certificate (RDP at more orders, or PLD) never exceeds the moments-accountant claim
    assert "claim-exceeded" not in {n["kind"] for n in store.notices(res.run_id)}
    assert float(privacy["certified"]["headline"]["epsilon"]) <= max(claimed.values())


def test_the_run_refuses_two_record_sampling_rates(mnist_fixture: Path) -> None:
    cfg = _config(mnist_fixture, algorithm={"name": "dp-sgd-fedavg", "options": {
        "noise_multiplier": 1.0, "clip_norm": 1.0, "record_sample_rate": 0.2}})
    with pytest.raises(ConfigError, match=r"record_sample_rate.*batch_size = 10"):
        dry_run(cfg)


def test_momentum_is_refused_with_the_reason(mnist_fixture: Path) -> None:
    cfg = _config(mnist_fixture, local={"lr": 0.1, "batch_size": 10, "optimizer": {"name": "sgd", "momentum": 0.9}})
    with pytest.raises(ConfigError, match="dp-sgd-fedavg.*momentum 0.9.*noisy gradients"):
        dry_run(cfg)


# ---------------------------------------------------------------- the same model, user or record level


class TinyNet(nn.Module):
    """A small model defined here (not in dpfl's zoo): conv → group norm → linear."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.avg_pool2d(torch.relu(self.norm(self.conv(x))), 2)
        return self.head(h.flatten(1))


def _tensors(n_train: int = 240, n_test: int = 60) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_train + n_test, 1, 8, 8, generator=g)
    y = (x.reshape(x.shape[0], -1) @ torch.randn(64, 3, generator=g)).argmax(1)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def test_the_same_model_trains_with_user_or_record_level_protection(tmp_path: Path) -> None:
    data = dpfl.FederatedData.from_tensors(*_tensors(), partition={"kind": "iid", "num_clients": 6})
    torch.manual_seed(3)
    model = TinyNet()
    common = {"rounds": 3, "sampling": {"kind": "poisson", "sample_rate": 0.5},
              "local": {"lr": 0.1, "epochs": 1, "batch_size": 10}, "store": tmp_path / "s.sqlite", "notice": None}
    user = dpfl.train(model, data, "dp-fedavg", options={"noise_multiplier": 1.0, "clip_norm": 1.0}, **common)
    record = dpfl.train(model, data, "dp-sgd-fedavg", options={"noise_multiplier": 1.0, "clip_norm": 1.0}, **common)
    assert user.status == record.status == "finished"
    assert isinstance(record.model, TinyNet)
    for res, unit in ((user, "client"), (record, "record")):
        assert res.privacy is not None and res.privacy.certified is not None
        for obs in ("server", "public"):
            cert = res.privacy.certified[obs]
            assert (cert.privacy_unit, cert.relation) == (unit, "add_remove")
            assert math.isfinite(cert.epsilon) and cert.epsilon > 0
    # the record-level run's certificate is what `dpfl.account` plans for the same call
    plan = dpfl.account(model, data, "dp-sgd-fedavg", options={"noise_multiplier": 1.0, "clip_norm": 1.0},
                        rounds=3, sampling=common["sampling"], local=common["local"])
    assert plan.privacy is not None
    for obs in ("server", "public"):
        assert record.certified_epsilon(obs) == pytest.approx(plan.privacy.epsilon(obs), rel=1e-9)


def test_a_resumed_run_equals_an_uninterrupted_one(mnist_fixture: Path, tmp_path: Path) -> None:
    """Interrupted after round 3 of 5 (checkpoint every 2): the same model, certificates and
    per-client claims (the participation counts are algorithm state in the checkpoint)."""
    cfg = _config(mnist_fixture, rounds=5, checkpoint_every=2, eval_every=5)
    store = RunStore(tmp_path / "a.sqlite")

    def crash(done: int, total: int, metrics: dict, elapsed: float) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, store, progress=crash)
    resumed = run_experiment(cfg, store).final
    fresh = run_experiment(cfg, RunStore(tmp_path / "b.sqlite")).final
    assert resumed["params_sha256"] == fresh["params_sha256"]
    assert resumed["privacy"]["certified"] == fresh["privacy"]["certified"]
    assert resumed["privacy"]["claimed_epsilon"] == fresh["privacy"]["claimed_epsilon"]
