"""004 end to end: recipes build at every scale, a smoke reproduction writes its report, and
DP-FedAvg+BLUR+LUS runs on FEMNIST (LEAF JSON, natural writer split) and CIFAR-10 (Dirichlet)
files written by the tests in exactly the public formats."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from dpfl.config import parse_config
from dpfl.data import partition as P
from dpfl.data.checksums import ChecksumRegistry
from dpfl.data.cifar import TEST_BATCH, TRAIN_BATCHES, encode_cifar_batch
from dpfl.data.leaf import encode_leaf_json
from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import GIVEN_COHORTS_MARK, GIVEN_COHORTS_NOTE, reproduce
from dpfl.rounds import build_experiment, run_experiment
from dpfl.store import RunStore

logging.getLogger("absl").setLevel(logging.ERROR)

KEYS = ("004/table1", "004/table3", "004/fig1", "004/fig2", "004/fig3", "004/fig4")


@pytest.mark.parametrize("key", KEYS)
def test_recipes_build_at_every_scale(key: str) -> None:
    recipe = get_recipe(key)
    for scale in ("smoke", "reduced", "full"):
        runs = recipe.build(scale)
        assert runs and len({r.label for r in runs}) == len(runs)
        algos = {r.config.algorithm.name for r in runs}
        assert algos <= {"dp-fedavg", "dp-fedavg-blur-lus"}
        assert all(r.config.sampling.kind == "poisson" for r in runs)
    full = recipe.build("full")
    assert all(r.config.device == "cuda" for r in full)
    data = {r.config.data.name for r in full}
    assert data == ({"cifar10"} if key in ("004/fig3", "004/fig4") else {"femnist"})


def test_fig2_smoke_reproduction_writes_report(shared_data: Path, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.sqlite")
    path = reproduce(get_recipe("004/fig2"), "smoke", store, tmp_path / "reports", data_dir=str(shared_data),
                     run_one=lambda cfg: run_experiment(cfg, store))
    text = path.read_text()
    assert "| DP-FedAvg |" in text and "| DP-FedAvg+BLUR+LUS |" in text and "Verdict:" in text
    # Poisson sampling: the public's ε is amplified by the secret sample (ex ante, unmarked); the
    # server knows whom it sampled, so its ε is composed at the cohorts drawn (marked, footnoted)
    lines = text.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("| run | claimed ε")):]
    for label in ("DP-FedAvg", "DP-FedAvg+BLUR+LUS"):
        row = next(line for line in table if line.startswith(f"| {label} | "))
        claimed, public, server = row.strip("| ").split(" | ")[1:4]
        assert server.endswith(GIVEN_COHORTS_MARK) and GIVEN_COHORTS_MARK not in claimed + public, row
    assert GIVEN_COHORTS_NOTE in text
    assert (path.parent / "fig2.png").stat().st_size > 1000
    for run in get_recipe("004/fig2").build("smoke"):
        rec = store.find(run_id_of(run.config, shared_data))
        assert rec is not None and rec.status == "finished"
        rows = store.rounds(rec.run_id)
        # pre-clip norms recorded every round, one per sampled client
        assert all(len(r.get("update_norms", [])) == r["clients"] for r in rows)


def run_id_of(config, data_dir: Path) -> str:  # type: ignore[no-untyped-def]
    from dpfl.config import run_id

    return run_id(config.model_copy(update={"data": config.data.model_copy(update={"dir": str(data_dir)})}))


def _write_femnist(root: Path, writers: dict[str, int], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for split, frac in (("train", 1.0), ("test", 0.5)):
        folder = root / "femnist" / split
        folder.mkdir(parents=True)
        users = {}
        for w, n in writers.items():
            m = max(1, int(n * frac))
            users[w] = (rng.random((m, 784)).astype(np.float32), rng.integers(0, 62, m))
        names = list(users)
        half = len(names) // 2  # two files per split, as LEAF writes them
        for i, chunk in enumerate((names[:half], names[half:])):
            (folder / f"all_data_{i}.json").write_text(encode_leaf_json({u: users[u] for u in chunk}))


def _base(data: dict, partition: dict, algo: str, **opts: object) -> dict:
    return {
        "name": "004-data", "seed": 3, "rounds": 2, "data": data, "partition": partition,
        "model": {"name": "mlp", "options": {"hidden": 8}},
        "algorithm": {"name": algo, "options": {"noise_multiplier": 1.0, "clip_norm": 0.5, **opts}},
        "sampling": {"kind": "poisson", "sample_rate": 0.5}, "privacy": {"delta": 1e-2},
        "local": {"lr": 0.05, "steps": 3, "batch_size": 4}, "eval_every": 1,
    }


def test_femnist_natural_writer_split(tmp_path: Path) -> None:
    writers = {"f0001_11": 9, "f0002_22": 5, "f0003_33": 12, "f0004_44": 7, "f0005_55": 3, "f0006_66": 8}
    _write_femnist(tmp_path, writers)
    cfg = parse_config(_base({"name": "femnist", "dir": str(tmp_path)}, {"kind": "natural", "num_clients": 6},
                             "dp-fedavg-blur-lus"))
    exp = build_experiment(cfg)
    # one client per writer, holding exactly that writer's samples
    assert exp.data.sizes().tolist() == list(writers.values())
    assert exp.dataset.num_classes == 62
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert res.status == "finished" and res.rounds_done == 2
    assert res.final["privacy"]["certified"]["observers"]["public"]["epsilon"] > 0


def test_cifar10_dirichlet_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    pins = {}
    for name in (*TRAIN_BATCHES, TEST_BATCH):
        n = 40 if name != TEST_BATCH else 20
        blob = encode_cifar_batch(rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n))
        (folder / name).write_bytes(blob)
        pins[f"cifar-10-batches-py/{name}"] = {"content": {"md5": hashlib.md5(blob).hexdigest()}}
    meta = b"meta"
    (folder / "batches.meta").write_bytes(meta)
    pins["cifar-10-batches-py/batches.meta"] = {"content": {"md5": hashlib.md5(meta).hexdigest()}}
    registry = ChecksumRegistry.from_dict(json.loads(json.dumps({"datasets": {"cifar10": {"folder": "cifar10",
                                                                                          "files": pins}}})))
    monkeypatch.setattr(ChecksumRegistry, "default", classmethod(lambda cls: registry))
    partition = {"kind": "dirichlet", "num_clients": 10, "alpha": 0.5, "min_size": 2}
    cfg = parse_config(_base({"name": "cifar10", "dir": str(tmp_path)}, partition, "dp-fedavg-blur-lus",
                             adaptive_clip={"count_noise_std": 2.0}))
    exp = build_experiment(cfg)
    assert tuple(exp.dataset.input_shape) == (3, 32, 32)
    labels = exp.dataset.y_train.numpy()
    expected = P.partition_dirichlet(labels, num_clients=10, alpha=0.5, min_samples_per_client=2,
                                     seed=_partition_seed(cfg))
    assert [len(p) for p in expected] == exp.data.sizes().tolist()
    assert sum(exp.data.sizes().tolist()) == 200
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert res.status == "finished"
    rows = res.history
    assert all("clip_norm" in r for r in rows) and rows[0]["clip_norm"] == 0.5


def _partition_seed(cfg) -> int:  # type: ignore[no-untyped-def]
    from dpfl.rng import SERVER, SeedSequence

    return SeedSequence(cfg.seed).seed(0, SERVER, "partition") % (2**63)
