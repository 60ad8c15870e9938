"""The canary audit on tiny real-MNIST runs: it passes correct runs and catches a noise bug.

The bug is simulated the way such bugs happen: the code adds 10× less noise than the algorithm
declares to the ledger (``releases``) and to the claim; nothing else changes.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest

from dpfl.audit.canary import run_audited
from dpfl.config import parse_config
from dpfl.privacy.calibration import dpfedavg_client_noise_std
from dpfl.rounds import run_experiment
from dpfl.store import RunStore

logging.getLogger("absl").setLevel(logging.ERROR)
CANARIES, UNSEEN, BOOT = 50, 500, 300


def _cfg(shared: Path, algorithm: dict[str, Any], **over: Any) -> Any:
    raw: dict[str, Any] = {
        "name": "audit-tiny", "seed": 1, "rounds": 10,
        "data": {"name": "mnist", "dir": str(shared), "verify": False},
        "partition": {"kind": "iid", "num_clients": 50, "samples_per_client": 20},
        "model": {"name": "logistic"},
        "algorithm": algorithm,
        "sampling": {"kind": "all"},
        "privacy": {"delta": 1e-3},
        "local": {"lr": 0.05, "steps": 2, "batch_size": 10},
    }
    raw.update(over)
    return parse_config(raw)


DPFEDAVG = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}}


def _dpfedavg_noise_10x_too_small(algo: Any) -> None:
    """A bug the ledger cannot see: the noise drawn is a tenth of the round plan's, while the
    releases (from the loop's plan) still state the planned noise."""
    inner_step = algo.server_step

    def step(g: Any, local: Any, info: Any) -> Any:
        plan = algo.round_plan(info)
        broken = dataclasses.replace(plan, sum_std=plan.sum_std * 0.1, client_std=plan.client_std * 0.1)
        return inner_step(g, local, info.with_plan(broken))

    algo.server_step = step


def _udp_noise_10x_too_small(algo: Any) -> None:
    """The same bug in UDP: a tenth of the planned σ_i drawn, the planned σ_i declared."""
    inner_step = algo.server_step

    def step(g: Any, local: Any, info: Any) -> Any:
        plan = algo.round_plan(info)
        broken = dataclasses.replace(plan, noise_stds=tuple(s * 0.1 for s in plan.noise_stds))
        return inner_step(g, local, info.with_plan(broken))

    algo.server_step = step


def test_dpfedavg_correct_run_passes_and_broken_noise_is_flagged(mnist_fixture: Path) -> None:
    cfg = _cfg(mnist_fixture, DPFEDAVG)
    ok = run_audited(cfg, CANARIES, num_unseen=UNSEEN, bootstrap=BOOT)
    bad = run_audited(cfg, CANARIES, num_unseen=UNSEEN, bootstrap=BOOT, break_noise=_dpfedavg_noise_10x_too_small)
    a, b = ok.final["privacy"]["audit"], bad.final["privacy"]["audit"]
    # the ledger cannot see the bug: both runs certify and claim the same ε
    assert b["certified_epsilon_public"] == pytest.approx(a["certified_epsilon_public"], rel=1e-12)
    assert b["claimed_epsilon"] == pytest.approx(a["claimed_epsilon"], rel=1e-12)
    # correct run: empirical ε ≤ certified public ε within the interval, no flag
    assert a["empirical_epsilon_interval"][0] <= a["certified_epsilon_public"]
    assert not a["flag"]
    # broken run: the whole interval above certified and claimed ε (measured ≈ 25.7 vs 14.1 / 15.5)
    assert b["flag"]
    assert b["empirical_epsilon_interval"][0] > a["certified_epsilon_public"]
    assert b["empirical_epsilon_interval"][0] > a["claimed_epsilon"]
    assert b["empirical_epsilon"] > 1.5 * a["certified_epsilon_public"]


def test_canaries_leave_ledger_and_real_noise_unchanged(mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _cfg(mnist_fixture, DPFEDAVG, rounds=4)
    plain = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    audited = run_audited(cfg, CANARIES, num_unseen=UNSEEN, bootstrap=0)
    p, q = plain.final["privacy"], audited.final["privacy"]
    assert q["claimed_epsilon"] == pytest.approx(p["claimed_epsilon"], rel=1e-12)
    for obs in ("server", "public"):
        assert q["certified"]["observers"][obs]["epsilon"] == pytest.approx(
            p["certified"]["observers"][obs]["epsilon"], rel=1e-9)
    # each real upload keeps the std of the real cohort (50 clients), not of the 100-row cohort
    real_std = dpfedavg_client_noise_std(0.5, 1.0, 50)
    assert all(m["canaries"] == CANARIES for m in audited.history)
    assert all(m["client_noise_std"] == pytest.approx(real_std, rel=1e-12) for m in audited.history)


def test_udp_and_nbafl_audits_run_and_udp_bug_is_flagged(mnist_fixture: Path) -> None:
    udp = {"name": "udp", "options": {"epsilon": 4.0, "clip_norm": 1.0}}
    local = {"lr": 0.05, "batch_size": None, "steps": None}
    ok = run_audited(_cfg(mnist_fixture, udp, local=local), CANARIES, num_unseen=UNSEEN, bootstrap=BOOT)
    bad = run_audited(_cfg(mnist_fixture, udp, local=local), CANARIES, num_unseen=UNSEEN, bootstrap=BOOT,
                      break_noise=_udp_noise_10x_too_small)
    a, b = ok.final["privacy"]["audit"], bad.final["privacy"]["audit"]
    assert not a["flag"] and a["empirical_epsilon_interval"][0] <= a["certified_epsilon_public"]
    assert b["flag"] and b["empirical_epsilon"] > 2 * a["certified_epsilon_public"]
    nb = run_audited(_cfg(mnist_fixture, {"name": "nbafl", "options": {"epsilon": 60.0, "clip_norm": 10.0}}),
                     CANARIES, num_unseen=UNSEEN, bootstrap=BOOT)
    c = nb.final["privacy"]["audit"]
    assert not c["flag"] and c["empirical_epsilon_interval"][0] <= c["certified_epsilon_public"]
    assert c["canary_participations_mean"] == 10.0


def test_dpfl_run_attaches_the_audit(mnist_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dpfl.cli import main
    from dpfl.store import RunStore

    root = Path(__file__).resolve().parents[2]
    store = tmp_path / "s.sqlite"
    code = main(["run", str(root / "reports" / "audit" / "dpfedavg.yaml"), "--audit", "10", "--store", str(store),
                 "--set", f"data.dir={mnist_fixture}", "--set", "data.verify=false", "--set", "rounds=3"])
    assert code == 0
    assert "empirical epsilon" in capsys.readouterr().out
    (rec,) = RunStore(store).list()
    audit = rec.result["privacy"]["audit"]
    assert audit["canaries"] == 10 and audit["flag"] is False
    assert audit["empirical_epsilon"] <= audit["empirical_epsilon_interval"][1]


def test_killed_audit_resumes_to_the_uninterrupted_result(mnist_fixture: Path, tmp_path: Path) -> None:
    """An audit is a stored, checkpointed run: killed after round 3 (checkpoint at 2) and run again,
    it ends with exactly the model, canary participations and estimate of one uninterrupted run."""
    udp = {"name": "udp", "options": {"epsilon": 4.0, "clip_norm": 1.0}}
    cfg = _cfg(mnist_fixture, udp, rounds=6, checkpoint_every=2, local={"lr": 0.05, "batch_size": None, "steps": None},
               sampling={"kind": "poisson", "sample_rate": 0.5})
    kw: dict[str, Any] = {"num_unseen": 200, "bootstrap": 100}
    whole = run_audited(cfg, 20, store=RunStore(tmp_path / "whole.sqlite"), **kw)

    store = RunStore(tmp_path / "killed.sqlite")
    seen: list[int] = []

    def kill_after_round_3(done: int, total: int, metrics: dict[str, Any], elapsed: float) -> None:
        seen.append(done)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_audited(cfg, 20, store=store, progress=kill_after_round_3, **kw)
    rid = whole.run_id
    assert rid.endswith("-audit20") and store.get(rid).status == "interrupted"
    from dpfl.rounds import checkpoint_path

    assert checkpoint_path(store, rid).exists()
    seen.clear()
    resumed = run_audited(cfg, 20, store=store, progress=lambda d, *_: seen.append(d), **kw)
    assert seen == [3, 4, 5, 6]  # rounds 3..6 only: it continued from the round-2 checkpoint
    assert resumed.run_id == rid and resumed.status == "finished"
    assert resumed.final["params_sha256"] == whole.final["params_sha256"]
    a, b = whole.final["privacy"]["audit"], resumed.final["privacy"]["audit"]
    assert b == a  # same estimate, interval, certified and claimed ε, participations (exact)
    assert 0 < a["canary_participations_mean"] < 6  # Poisson-joined canaries: a count the resume must carry
    assert [m["canaries"] for m in resumed.history] == [m["canaries"] for m in whole.history]
    # the audit is part of the stored result; a finished audit is not run again
    assert store.get(rid).result["privacy"]["audit"] == a
    seen.clear()
    again = run_audited(cfg, 20, store=store, progress=lambda d, *_: seen.append(d), **kw)
    assert seen == [] and again.final["privacy"]["audit"] == a
    # the plain run of the same config is another run
    plain = run_experiment(cfg, store)
    assert plain.run_id == rid.removesuffix("-audit20") and "audit" not in plain.final["privacy"]


def test_canaries_are_simulation_only(mnist_fixture: Path, tmp_path: Path) -> None:
    from dpfl.errors import ConfigError

    cfg = _cfg(mnist_fixture, DPFEDAVG, rounds=1)
    with pytest.raises(ConfigError, match="simulation only"):
        run_experiment(cfg, RunStore(tmp_path / "s.sqlite"), remote=lambda *a: None,  # type: ignore[arg-type,return-value]
                       wrap=lambda exp: exp.algorithm)
