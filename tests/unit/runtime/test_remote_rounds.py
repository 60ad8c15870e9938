"""The runner's deployment hooks, with an in-process stand-in for the Flower cohort.

* Rounds where nothing arrives are skipped with nothing released; a run whose every round was
  empty (or that has too many empty rounds in a row) ends ``failed``, never ``finished``.
* A server killed while a round's uploads were arriving resumes with that round already charged:
  the redo, with fresh noise on real clients, is charged as the second release it is.
* Uploads that reached the server but entered no aggregate (rejected, late) are charged to the
  server observer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dp_accounting as dpa
import pytest
import torch

from dpfl.algorithms.base import Algorithm, Uploads
from dpfl.client.context import RoundInfo
from dpfl.config import parse_config
from dpfl.rounds import MAX_CONSECUTIVE_EMPTY_ROUNDS, build_experiment, run_experiment
from dpfl.store import RunStore

NBAFL = {"name": "nbafl", "options": {"epsilon": 60.0, "clip_norm": 10.0, "prox_mu": 0.1}}
DPFEDAVG = {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}}


def _cfg(shared: Path, algorithm: dict, rounds: int = 4, **over: Any) -> Any:
    raw = {
        "name": "remote-tiny", "seed": 2, "rounds": rounds,
        "data": {"name": "mnist", "dir": str(shared)},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 30},
        "model": {"name": "logistic"},
        "algorithm": algorithm,
        "sampling": {"kind": "all"},
        "local": {"lr": 0.1, "epochs": 1, "batch_size": 10},
        "engine": "sequential",
        "privacy": {"delta": 1e-3},
        "checkpoint_every": 100,
    }
    raw.update(over)
    return parse_config(raw)


class FakeCohort:
    """Trains the cohort in process like SuperNodes would; ``arrive(t, cohort)`` picks which
    uploads are aggregated, ``unused(t, cohort)`` which others reached the server."""

    tag = "fake"

    def __init__(self, config: Any, arrive: Callable[[int, list[int]], list[int]] | None = None,
                 unused: Callable[[int, list[int]], list[int]] | None = None,
                 kill: Callable[[int], bool] | None = None) -> None:
        self.exp = build_experiment(config)
        self.arrive = arrive or (lambda t, cohort: cohort)
        self.unused = unused or (lambda t, cohort: [])
        self.kill = kill or (lambda t: False)
        self._seen: list[tuple[int, int]] = []
        self.calls: list[int] = []

    def __call__(self, params: torch.Tensor, info: RoundInfo, algo: Algorithm, emit: Any) -> Uploads:
        t = info.round_idx
        self.calls.append(t)
        cohort = info.clients.tolist()
        local = self.exp.engine.train(params, cohort, t)
        ups = algo.client_step(params, local, info)
        if self.kill(t):  # the uploads reached the server, then the server died
            raise KeyboardInterrupt
        keep = set(self.arrive(t, cohort))
        self._seen += [(t, c) for c in self.unused(t, cohort)]
        return ups.select(torch.tensor([c in keep for c in cohort]))

    def outstanding(self) -> list[tuple[int, int]]:
        return []

    def unused_uploads(self, *, final: bool = False, emit: Any) -> list[tuple[int, int]]:
        out, self._seen = self._seen, []
        return out


def _server_eps(final: dict, client: str) -> float:
    return float(final["privacy"]["client_epsilons_rdp"]["server"][client])


def test_a_round_with_no_upload_releases_dp_fedavg_noise_and_skips_nbafl(shared_data: Path, tmp_path: Path) -> None:
    """DP-FedAvg: nobody arrived, so the server releases the round's planned noise (what an empty
    cohort releases) — the public is charged 3 rounds, the server only the 2 rounds it saw; a
    skip would reveal that the secret cohort was not empty."""
    cfg = _cfg(shared_data, DPFEDAVG, rounds=3, sampling={"kind": "poisson", "sample_rate": 0.5})
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store, remote=FakeCohort(cfg, arrive=lambda t, c: [] if t == 1 else c))
    assert res.status == "finished" and res.rounds_done == 3
    rows = store.rounds(res.run_id)
    assert rows[1]["empty"] is True and rows[1]["arrived"] == 0
    assert any(n["kind"] == "round-empty" and "planned noise" in n["message"] for n in store.notices(res.run_id))
    # public: 3 rounds of PoissonSampled(q, Gaussian(1)) — dp-accounting directly
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(0.5, dpa.GaussianDpEvent(1.0)), 3)
    public = res.final["privacy"]["certified"]["observers"]["public"]["epsilon_rdp"]
    assert public == pytest.approx(acc.get_epsilon(cfg.privacy.delta), rel=1e-6)


def test_a_round_with_no_upload_is_skipped_and_releases_nothing(shared_data: Path, tmp_path: Path) -> None:
    # uplink noise only, calibrated for L = 2 exposures: the same noise in a 3- and a 2-round run
    nbafl = {"name": "nbafl", "options": {**NBAFL["options"], "exposures": 2, "downlink_noise": "none"}}
    cfg = _cfg(shared_data, nbafl, rounds=3)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store, remote=FakeCohort(cfg, arrive=lambda t, c: [] if t == 1 else c))
    assert res.status == "finished" and res.rounds_done == 3
    rounds = store.rounds(res.run_id)
    assert [r["arrived"] for r in rounds] == [4, 0, 4] and rounds[1]["empty"] is True
    assert any(n["kind"] == "round-empty" and "round 2" in n["message"] for n in store.notices(res.run_id))
    # the ledger holds two rounds of releases: the same as a 2-round run with every upload
    two = _cfg(shared_data, nbafl, rounds=2)
    ref = run_experiment(two, RunStore(tmp_path / "r.sqlite"), remote=FakeCohort(two))
    for c in "0123":
        assert _server_eps(res.final, c) == pytest.approx(_server_eps(ref.final, c), rel=1e-12)
    for obs in ("server", "public"):
        got, want = (r.final["privacy"]["certified"]["observers"][obs]["epsilon_rdp"] for r in (res, ref))
        assert got == pytest.approx(want, rel=1e-12)
    assert res.final["empty_rounds"] == 1


@pytest.mark.parametrize("algorithm", [NBAFL, DPFEDAVG], ids=["nbafl", "dp-fedavg"])
def test_a_run_whose_every_round_is_empty_is_not_finished(algorithm: dict, shared_data: Path, tmp_path: Path) -> None:
    cfg = _cfg(shared_data, algorithm, rounds=2)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store, remote=FakeCohort(cfg, arrive=lambda t, c: []))
    assert res.status == "failed"
    assert "no upload arrived in any of the 2 rounds" in res.final["stop_reason"]
    assert store.get(res.run_id).status == "failed"


def test_too_many_empty_rounds_in_a_row_stop_the_run(shared_data: Path, tmp_path: Path) -> None:
    cfg = _cfg(shared_data, DPFEDAVG, rounds=10)
    store = RunStore(tmp_path / "s.sqlite")
    res = run_experiment(cfg, store, remote=FakeCohort(cfg, arrive=lambda t, c: c if t == 0 else []))
    assert res.status == "failed" and res.rounds_done == 1 + MAX_CONSECUTIVE_EMPTY_ROUNDS
    assert f"no upload arrived in {MAX_CONSECUTIVE_EMPTY_ROUNDS} rounds in a row" in res.final["stop_reason"]
    # the same command resumes the failed run where it stopped, its ledger kept
    again = FakeCohort(cfg)
    res2 = run_experiment(cfg, store, remote=again)
    assert again.calls == list(range(1 + MAX_CONSECUTIVE_EMPTY_ROUNDS, 10)) and res2.status == "finished"
    assert res2.final["empty_rounds"] == MAX_CONSECUTIVE_EMPTY_ROUNDS


def test_a_round_redone_after_a_server_kill_is_charged_twice(shared_data: Path, tmp_path: Path) -> None:
    """Killed in round 5 after the uploads reached the server (checkpoint after round 4): the
    resumed run redoes round 5, and the ledger holds 6 server-observer releases per client (what
    the server saw) and 5 public ones (what was broadcast)."""
    cfg = _cfg(shared_data, DPFEDAVG, rounds=5, checkpoint_every=1)
    store = RunStore(tmp_path / "s.sqlite")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, store, remote=FakeCohort(cfg, kill=lambda t: t == 4))
    again = FakeCohort(cfg)
    res = run_experiment(cfg, store, remote=again)
    assert again.calls == [4] and res.status == "finished"
    six, five = (_cfg(shared_data, DPFEDAVG, rounds=r) for r in (6, 5))
    ref6 = run_experiment(six, RunStore(tmp_path / "r6.sqlite"), remote=FakeCohort(six)).final
    ref5 = run_experiment(five, RunStore(tmp_path / "r5.sqlite"), remote=FakeCohort(five)).final
    obs = res.final["privacy"]["certified"]["observers"]
    assert obs["server"]["epsilon_rdp"] == pytest.approx(
        ref6["privacy"]["certified"]["observers"]["server"]["epsilon_rdp"], rel=1e-12)
    assert obs["public"]["epsilon_rdp"] == pytest.approx(
        ref5["privacy"]["certified"]["observers"]["public"]["epsilon_rdp"], rel=1e-12)


def test_rejected_and_late_uploads_are_charged_to_the_server(shared_data: Path, tmp_path: Path) -> None:
    """Client 3's upload reaches the server every round but is rejected (never aggregated):
    against the server it released as much as client 0, whose upload was aggregated."""
    cfg = _cfg(shared_data, NBAFL, rounds=2)
    store = RunStore(tmp_path / "s.sqlite")
    fake = FakeCohort(cfg, arrive=lambda t, c: [x for x in c if x != 3], unused=lambda t, c: [3])
    res = run_experiment(cfg, store, remote=fake)
    assert res.status == "finished"
    assert _server_eps(res.final, "3") == pytest.approx(_server_eps(res.final, "0"), rel=1e-12)
    assert _server_eps(res.final, "3") > 0
    assert [r["charged_unaggregated"] for r in store.rounds(res.run_id)] == [1, 1]


def test_secure_aggregation_is_refused_where_the_server_sees_each_upload(shared_data: Path, tmp_path: Path) -> None:
    from dpfl.errors import ConfigError

    cfg = _cfg(shared_data, DPFEDAVG, rounds=1, privacy={"delta": 1e-3, "secure_aggregation": True})
    with pytest.raises(ConfigError, match="this deployment.*SecAgg"):
        run_experiment(cfg, RunStore(tmp_path / "s.sqlite"), remote=FakeCohort(cfg))
