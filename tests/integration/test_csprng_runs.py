"""`privacy.noise_generator: csprng`: a simulation draws every noise, sampling coin and shuffle from
fresh ChaCha20 streams, and its privacy statement says so.

Every private algorithm's account = run case (``test_account_equals_run.CASES``) runs with the
switch while every stream a run asks for is recorded: no noise purpose may reach a torch
generator (only data batching, model initialization, the partition and public draws do), and
each run's final record names ChaCha20. A run whose certificate does not depend on the drawn
cohorts certifies what its seeded twin certifies; its noise is not reproducible.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from test_account_equals_run import CASES, _config

from dpfl.config import parse_config
from dpfl.rng import NOISE_PURPOSES, CsprngGenerator, SeedSequence
from dpfl.rounds import run_experiment
from dpfl.store import RunStore

logging.getLogger("absl").setLevel(logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _csprng(cfg: Any) -> Any:
    raw = cfg.model_dump(mode="json")
    raw["privacy"]["noise_generator"] = "csprng"
    return parse_config(raw)


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """The purposes asked of ``generator`` (torch) and of ``noise_generator`` (and what it gave)."""
    seen: dict[str, set[str]] = {"torch": set(), "noise": set(), "noise_kinds": set()}
    generator, noise_generator = SeedSequence.generator, SeedSequence.noise_generator

    def torch_stream(self: SeedSequence, round_idx: int, client: int, purpose: str, device: Any = "cpu") -> Any:
        seen["torch"].add(purpose)
        return generator(self, round_idx, client, purpose, device)

    def noise_stream(self: SeedSequence, round_idx: int, client: int, purpose: str, device: Any = "cpu") -> Any:
        seen["noise"].add(purpose)
        gen = noise_generator(self, round_idx, client, purpose, device)
        seen["noise_kinds"].add(type(gen).__name__)
        return gen

    monkeypatch.setattr(SeedSequence, "generator", torch_stream)
    monkeypatch.setattr(SeedSequence, "noise_generator", noise_stream)
    return seen


@pytest.mark.parametrize("case", list(CASES))
def test_a_csprng_run_draws_no_noise_from_torch_and_names_its_generator(
        case: str, mnist_fixture: Path, tmp_path: Path, streams: dict[str, set[str]]) -> None:
    cfg = _csprng(_config(*CASES[case], mnist_fixture))
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert res.status in ("finished", "stopped")
    leaked = streams["torch"] & NOISE_PURPOSES
    assert not leaked, f"{case}: noise streams drawn from torch: {sorted(leaked)}"
    assert streams["noise"] and streams["noise_kinds"] == {"CsprngGenerator"}, streams
    assert res.final["privacy"]["noise_generator"].startswith("chacha20")


def test_the_sequential_engine_draws_dp_sgds_noise_from_chacha_too(
        mnist_fixture: Path, tmp_path: Path, streams: dict[str, set[str]]) -> None:
    raw = _csprng(_config(*CASES["dp-sgd-fedavg"], mnist_fixture)).model_dump(mode="json")
    res = run_experiment(parse_config({**raw, "engine": "sequential"}), RunStore(tmp_path / "s.sqlite"))
    assert res.status == "finished"
    assert not streams["torch"] & NOISE_PURPOSES and "noise" in streams["noise"]


def test_the_switch_keeps_the_certificate_and_the_default_run_id_and_makes_the_noise_fresh(
        mnist_fixture: Path, tmp_path: Path) -> None:
    # full participation: the certificate does not depend on the cohorts drawn
    seeded_cfg = _config(*CASES["nbafl-all"], mnist_fixture)
    assert "noise_generator" not in seeded_cfg.model_dump()["privacy"]  # run ids of seeded runs unchanged
    store = RunStore(tmp_path / "s.sqlite")
    seeded = run_experiment(seeded_cfg, store)
    fresh = run_experiment(_csprng(seeded_cfg), store)
    assert fresh.run_id != seeded.run_id
    assert seeded.final["privacy"]["noise_generator"].startswith("seeded")
    assert fresh.final["privacy"]["certified"] == seeded.final["privacy"]["certified"]
    again = run_experiment(_csprng(seeded_cfg), store, restart=True)
    assert again.final["params_sha256"] != fresh.final["params_sha256"]  # fresh keys: other noise
    repeat = run_experiment(seeded_cfg, store, restart=True)
    assert repeat.final["params_sha256"] == seeded.final["params_sha256"]  # seeded: the same noise


def test_a_secure_run_draws_from_chacha20_whatever_the_configs_generator(mnist_fixture: Path, tmp_path: Path) -> None:
    """``secure_rng`` (what a deployment's server asks for) draws every noise from ChaCha20 under fresh
    OS keys, whether or not the config asks for the CSPRNG (simulations default to seeded generators)."""
    cfg = _config(*CASES["nbafl-all"], mnist_fixture)
    store = RunStore(tmp_path / "s.sqlite")
    chacha = run_experiment(_csprng(cfg), store, secure_rng=True)
    assert chacha.final["privacy"]["noise_generator"].startswith("chacha20")
    default = run_experiment(cfg, store, secure_rng=True)
    assert default.final["privacy"]["noise_generator"].startswith("chacha20")
    assert isinstance(SeedSequence.secure_mode("chacha20").noise_generator(0, 1, "noise"), CsprngGenerator)
