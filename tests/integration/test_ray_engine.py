"""The Ray-sharded engine on a local 2-CPU Ray instance gives the in-process engine's global model.

Three runs of the same private config (DP-FedAvg with Gaussian noise, 14 clients of unequal
sizes, Poisson-sampled cohorts, 3 rounds of 4 full-batch local steps) through ``run_experiment``:

* ``ray``: two actors, one torch thread each, each round's cohort cut into two contiguous shards;
* the same computation in process (the same shards, one thread): must give the same bits —
  every random draw is keyed by (round, client, purpose), and an actor runs the in-process code;
* the plain in-process vectorized engine (whole cohort in one stack, 2 threads): equal up to
  float32 rounding, not bit for bit. Each client's arithmetic is the same; what changes is the
  summation order inside two kernels whose shapes depend on the stack: (1) the bias step
  ``grad_out.sum(1)`` reduces over the padded batch width — the largest full batch in the stack,
  so a shard without the cohort's largest client pads to a shorter width, and the vectorized
  reduction groups its partial sums differently (zeros appended change the rounding); (2) the
  fused weight step ``baddbmm_`` on a one-client stack with 2 threads splits a single GEMM across
  the threads, while with ≥ 2 clients each thread runs whole GEMMs. With a mini-batch width
  every shard shares and no one-client shard the runs agree bit for bit (measured). Observed
  here: max |Δ| ≈ 3e-8 (one float32 ulp at weights ≈ 0.4); tolerance 1e-6 per parameter
  (~30 ulps: 3 rounds of clipping, averaging and the same noise draws do not amplify it).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from dpfl import rounds as runner
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.rounds import run_experiment
from dpfl.sim.base import LocalResult
from dpfl.sim.checkpoint import load_checkpoint
from dpfl.sim.ray_engine import RayEngine, concat_results, shard_bounds
from dpfl.sim.vectorized import VectorizedEngine
from dpfl.store import RunStore

SIZES = [30, 55, 12, 80, 41, 64, 9, 100, 23, 70, 18, 47, 5, 36]
ACTORS = 2


@pytest.fixture(scope="module")
def ray_2cpu() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=ACTORS, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _cfg(shared: Path, engine: str):  # type: ignore[no-untyped-def]
    return parse_config({
        "name": "ray-vs-inprocess",
        "seed": 5,
        "rounds": 3,
        "data": {"name": "mnist", "dir": str(shared), "verify": False},
        "partition": {"kind": "iid", "num_clients": len(SIZES), "sizes": SIZES},
        "model": {"name": "mlp", "options": {"hidden": 32}},
        "algorithm": {"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}},
        "sampling": {"kind": "poisson", "sample_rate": 0.6},
        "privacy": {"delta": 1e-3},
        "local": {"lr": 0.1, "epochs": 4, "batch_size": None},
        "engine": engine,
        "eval_every": 3,
    })


class _InProcessShards(VectorizedEngine):
    """The Ray engine's computation without Ray: the same shards, each with the actors' one thread,
    and, like the Ray engine, the stacked round (no ``train_blocks``: a round is not streamed)."""

    train_blocks = None  # type: ignore[assignment]

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return concat_results([
                super(_InProcessShards, self).train(global_params, list(clients[a:b]), round_idx)
                for a, b in shard_bounds(len(clients), ACTORS)
            ])
        finally:
            torch.set_num_threads(previous)


def _run(cfg, folder: Path) -> tuple[dict[str, Any], torch.Tensor]:  # type: ignore[no-untyped-def]
    res = run_experiment(cfg, RunStore(folder / "runs.sqlite"))
    assert res.status == "finished" and res.rounds_done == 3
    state = load_checkpoint(res.final["model_path"])
    assert state is not None
    return res.final, state["global_params"]


def test_shard_bounds_are_contiguous_and_balanced() -> None:
    assert shard_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2)]
    for k in range(1, 30):
        for n in range(1, 6):
            b = shard_bounds(k, n)
            assert b[0][0] == 0 and b[-1][1] == k
            assert all(s1 == e0 for (_, e0), (s1, _) in zip(b, b[1:], strict=False))
            sizes = [e - s for s, e in b]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_ray_engine_matches_in_process(ray_2cpu: Any, mnist_fixture: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ray_final, ray_params = _run(_cfg(mnist_fixture, "ray"), tmp_path / "ray")
    vec_final, vec_params = _run(_cfg(mnist_fixture, "vectorized"), tmp_path / "vectorized")
    monkeypatch.setitem(runner.ENGINES, "vectorized", _InProcessShards)
    _, shard_params = _run(_cfg(mnist_fixture, "vectorized"), tmp_path / "sharded")

    # the same shards and thread count in process: the same bits
    assert torch.equal(ray_params, shard_params)
    # the whole cohort in one stack: equal up to float32 rounding in the batched matmuls
    diff = float((ray_params - vec_params).abs().max())
    assert diff <= 1e-6, diff
    assert float(ray_params.abs().max()) > 1e-2  # a model that moved, not an all-zero pass
    assert ray_final["test_accuracy"] == pytest.approx(vec_final["test_accuracy"], abs=2e-3)
    # the ledger does not depend on the engine
    assert ray_final["privacy"] == vec_final["privacy"]
    # the Ray instance the test started is still up (the engine releases only what it started)
    assert ray_2cpu.is_initialized()


def test_actors_use_one_thread_each_and_close_releases_them(ray_2cpu: Any, mnist_fixture: Path) -> None:
    exp = runner.build_experiment(_cfg(mnist_fixture, "ray"))
    engine = exp.engine
    stats = engine.actor_stats()  # type: ignore[attr-defined]
    assert len(stats) == ACTORS
    assert [s["threads"] for s in stats] == [1] * ACTORS  # 2 actors on 2 CPUs: no oversubscription
    assert len({s["pid"] for s in stats}) == ACTORS
    engine.close()  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="closed"):
        engine.train(exp.init_params, [0, 1], 0)
    assert ray_2cpu.is_initialized()


def test_without_ray_the_engine_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'dpfl\[ray\]'"):
        RayEngine(None, None, None)  # type: ignore[arg-type]
