"""Private runs end to end: ledger in the store, target epsilon, strict mode, resume with ledger."""

from __future__ import annotations

import math
from pathlib import Path

import dp_accounting as dpa
import pytest

from dpfl.config import parse_config
from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.rounds import PrivacySummary, run_experiment
from dpfl.store import RunStore


def _cfg(shared: Path, **over: object):
    raw = {
        "name": "dpfedavg-tiny",
        "seed": 1,
        "rounds": 6,
        "data": {"name": "mnist", "dir": str(shared), "verify": False},
        "partition": {"kind": "iid", "num_clients": 50, "samples_per_client": 20},
        "model": {"name": "logistic"},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "sampling": {"kind": "poisson", "sample_rate": 0.2},
        "privacy": {"delta": 1e-3},
        "local": {"lr": 0.05, "steps": 2, "batch_size": 10},
        "checkpoint_every": 2,
    }
    raw.update(over)
    return parse_config(raw)


def test_public_epsilon_matches_dp_accounting_and_is_stored(mnist_fixture: Path, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(_cfg(mnist_fixture), store)
    assert res.status == "finished"
    priv = res.final["privacy"]
    # Independent check: 6 rounds of Poisson(0.2)-sampled Gaussian with multiplier 1.0, add/remove.
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(1.0)), 6)
    expected_rdp = acc.get_epsilon(1e-3)
    public = priv["certified"]["observers"]["public"]
    assert public["epsilon_rdp"] == pytest.approx(expected_rdp, rel=1e-6)
    assert priv["claimed_epsilon"] == pytest.approx(expected_rdp, rel=1e-6)  # 004's own claim is this RDP bound
    # the server sees each upload with multiplier σ/sqrt(|P_t|): far weaker than the public view
    assert priv["certified"]["observers"]["server"]["epsilon"] > public["epsilon"]
    assert priv["certified"]["headline"]["observer"] == "server"
    rows = store.rounds(res.run_id)
    eps = [r["epsilon_certified"] for r in rows]
    assert eps == sorted(eps) and len(eps) == 6
    # 004's claim is about the broadcast: compared with the public certificate (equal here, the
    # same RDP bound), not with the server's, so no "claim exceeded" notice
    kinds = {n["kind"] for n in store.notices(res.run_id)}
    assert "claim-exceeded" not in kinds


def test_target_epsilon_stops_before_exceeding(mnist_fixture: Path, tmp_path: Path) -> None:
    # the headline is the server's (each upload carries σ/sqrt(|P_t|)): more noise, so that the
    # target is reached after a few rounds rather than before the first
    algorithm = {"name": "dp-fedavg", "options": {"noise_multiplier": 6.0, "clip_norm": 0.5}}
    cfg = _cfg(mnist_fixture, rounds=50, algorithm=algorithm, privacy={"delta": 1e-3, "target_epsilon": 4.0})
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert res.status == "stopped"
    assert 0 < res.rounds_done < 50
    assert res.final["privacy"]["certified"]["headline"]["epsilon_rdp"] <= 4.0
    assert "target_epsilon" in res.final["stop_reason"]


def test_secure_aggregation_is_refused_by_an_algorithm_without_an_integer_pipeline(mnist_fixture: Path,
                                                                                    tmp_path: Path) -> None:
    """Only DP-FedAvg computes the secure sum; another algorithm's uploads would reach the server
    in the clear, so a certificate that lets the server see only the sum would be false: the run
    is refused before it starts."""
    algorithm = {"name": "nbafl", "options": {"epsilon": 10.0, "clip_norm": 1.0}}
    cfg = _cfg(mnist_fixture, algorithm=algorithm, sampling={"kind": "all"},
               privacy={"delta": 1e-3, "secure_aggregation": True})
    store = RunStore(tmp_path / "s.sqlite")
    with pytest.raises(ConfigError, match="secure_aggregation.*'nbafl'.*in the clear"):
        run_experiment(cfg, store)
    assert store.list() == []


def test_strict_refuses_a_round_whose_certified_epsilon_exceeds_the_claim(mnist_fixture: Path, tmp_path: Path) -> None:
    # UDP's claim is against the server but amortizes the rounds a client sat out (q = 1/2);
    # the server knows whom it sampled: its certificate exceeds the claim in round 1
    udp = _cfg(mnist_fixture, privacy={"delta": 1e-3, "strict": True},
               algorithm={"name": "udp", "options": {"epsilon": 4.0, "clip_norm": 1.0}},
               sampling={"kind": "fixed", "clients_per_round": 3}, local={"lr": 0.5, "batch_size": None})
    with pytest.raises(PrivacyPreconditionError, match="against the server exceeds .* refusing"):
        run_experiment(udp, RunStore(tmp_path / "s.sqlite"))
    # DP-FedAvg's claim is about the broadcast: its public certificate is the same RDP bound, so
    # strict mode runs it (the server's far larger ε stays the headline)
    res = run_experiment(_cfg(mnist_fixture, privacy={"delta": 1e-3, "strict": True}), RunStore(tmp_path / "t.sqlite"))
    assert res.status == "finished"
    cert = res.final["privacy"]["certified"]
    assert (cert["headline"]["observer"] == "server"
            and cert["headline"]["epsilon"] > res.final["privacy"]["claimed_epsilon"])


def test_resume_restores_the_ledger(mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _cfg(mnist_fixture)
    store = RunStore(tmp_path / "a.sqlite")

    def crash(done: int, total: int, metrics: dict, elapsed: float) -> None:
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, store, progress=crash)
    resumed = run_experiment(cfg, store)
    fresh = run_experiment(cfg, RunStore(tmp_path / "b.sqlite"))
    assert resumed.final["params_sha256"] == fresh.final["params_sha256"]
    assert resumed.final["privacy"]["certified"] == fresh.final["privacy"]["certified"]


def test_crd_headline_is_the_budget_fixed_before_the_run(mnist_fixture: Path, tmp_path: Path) -> None:
    """udp-crd planned for T = 8 rounds, discounted (ζ large, β = 1/2) to 2 rounds. Its noise and
    length were chosen from the test loss, so what it spent is not a guarantee; the headline is
    plain UDP's 8 rounds at the Thm 1 noise (RDP), the budget its Rényi filter enforced."""
    from dpfl.algorithms.udp import local_sensitivity
    from dpfl.privacy.calibration import udp_noise_std

    n, rounds, eps, delta, lr, clip = 6, 8, 4.0, 1e-3, 0.5, 1.0
    algorithm = {"name": "udp-crd", "options": {"epsilon": eps, "clip_norm": clip, "threshold": 10.0,
                                                "discount": 0.5}}
    cfg = _cfg(mnist_fixture, rounds=rounds, algorithm=algorithm, sampling={"kind": "all"},
               partition={"kind": "iid", "num_clients": n, "samples_per_client": 20},
               local={"lr": lr, "batch_size": None}, privacy={"delta": delta})
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert res.rounds_done == 2  # T: 8 → ⌊8/2⌋ = 4 → ⌊(4 − 1)/2⌋ + 1 = 2
    priv = res.final["privacy"]
    # dp-accounting directly: each client's upload, every one of the 8 planned rounds, at Thm 1's σ
    sens = local_sensitivity(lr, clip, 20)
    sigma0 = udp_noise_std(eps, delta, sens, 1.0, rounds)
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.GaussianDpEvent(sigma0 / sens), rounds)
    server = priv["certified"]["observers"]["server"]
    assert server["epsilon"] == pytest.approx(acc.get_epsilon(delta), rel=1e-6)
    assert server["method"] == "rdp"
    assert priv["spent"]["observers"]["server"]["epsilon_rdp"] < server["epsilon"]
    assert "Renyi filter" in priv["certified_basis"]
    # the per-round figure is what was spent, under that name, never under the guarantee's
    rows = RunStore(tmp_path / "s.sqlite").rounds(res.run_id)
    assert all("epsilon_spent_rdp" in r and "epsilon_certified_rdp" not in r for r in rows)
    # `dpfl run` / `dpfl report` print budget and spent, each labelled
    from dpfl.commands.run import _privacy_summary

    text = _privacy_summary(PrivacySummary.from_dict(priv))
    assert "Renyi filter" in text and "spent epsilon" in text
    spent_line = next(line for line in text.splitlines() if "observer server" in line and "spent" in line)
    assert f"{priv['spent']['observers']['server']['epsilon']:.4g}" in spent_line


def test_crd_train_loss_rise_variant_runs_and_certifies_infinity(mnist_fixture: Path, tmp_path: Path) -> None:
    """The train-loss-rise variant (not 000 Alg. 2) sends every participant's training loss to the
    server: the run completes, its claim is 000's formula, and both observers certify ∞."""
    algorithm = {"name": "udp-crd", "options": {"epsilon": 4.0, "clip_norm": 1.0, "trigger": "train-loss-rise",
                                                "discount": 0.5}}
    cfg = _cfg(mnist_fixture, rounds=4, algorithm=algorithm, sampling={"kind": "all"},
               partition={"kind": "iid", "num_clients": 6, "samples_per_client": 20},
               local={"lr": 0.5, "batch_size": None}, privacy={"delta": 1e-3})
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert res.status == "finished" and 1 <= res.rounds_done <= 4
    priv = res.final["privacy"]
    for obs in ("server", "public"):
        assert math.isinf(float(priv["certified"]["observers"][obs]["epsilon"]))
    assert any("train-loss-rise" in line for line in priv["not_covered"])


def test_a_round_whose_arrivals_would_exceed_the_filter_is_not_broadcast(shared_data: Path, tmp_path: Path) -> None:
    """udp-crd, K = 3 of 6, on a remote cohort where only one upload arrives: its weight is 1
    instead of 1/3, so the broadcast would release more than the budget fixed before the run.
    The server saw the upload (charged); the aggregate is withheld and the run stops."""
    import torch

    from dpfl.client.context import LocalResult, RoundInfo

    def one_arrives(params, info, algo, emit):  # type: ignore[no-untyped-def]
        keep = info.clients[:1]
        sub = RoundInfo(info.round_idx, info.num_clients, keep, info.seeds, cohort_size=info.cohort)
        return algo.client_step(params, LocalResult(params.repeat(1, 1), torch.zeros(1), torch.tensor([20])), sub)

    algorithm = {"name": "udp-crd", "options": {"epsilon": 4.0, "clip_norm": 1.0}}
    kw = {"algorithm": algorithm, "sampling": {"kind": "fixed", "clients_per_round": 3},
          "partition": {"kind": "iid", "num_clients": 6, "samples_per_client": 20},
          "local": {"lr": 0.5, "batch_size": None}, "privacy": {"delta": 1e-3}}
    # T = 1: the budget is one round at the worst 3-cohort; one arrival at weight 1 exceeds it
    res = run_experiment(_cfg(shared_data, rounds=1, **kw), RunStore(tmp_path / "a.sqlite"), remote=one_arrives)
    assert res.status == "stopped" and "not broadcast" in res.final["stop_reason"]
    assert res.rounds_done == 0
    spent = res.final["privacy"]["spent"]["observers"]
    assert spent["public"]["epsilon"] == 0.0 and spent["server"]["epsilon"] > 0.0
    # T = 4: the filter lets rounds through while the budget lasts, then stops; never above it
    res = run_experiment(_cfg(shared_data, rounds=4, **kw), RunStore(tmp_path / "b.sqlite"), remote=one_arrives)
    assert res.status == "stopped" and res.rounds_done < 4
    priv = res.final["privacy"]
    for obs in ("server", "public"):
        assert priv["spent"]["observers"][obs]["epsilon_rdp"] <= priv["certified"]["observers"][obs]["epsilon_rdp"]
