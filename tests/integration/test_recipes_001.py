"""001 recipes end to end at smoke scale: Table 1 on real MNIST / Fashion-MNIST, CIFAR-10 on a tiny
CIFAR-format data set written here (random pixels; checks the wiring, not the accuracy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpfl.data.cifar import TEST_BATCH, TRAIN_BATCHES, encode_cifar_batch
from dpfl.experiments.recipes import get_recipe
from dpfl.experiments.recipes.base import reproduce
from dpfl.rounds import run_experiment
from dpfl.store import RunStore


def _reproduce(key: str, tmp_path: Path, data_dir: Path) -> tuple[str, RunStore]:
    store = RunStore(tmp_path / "runs.sqlite")
    path = reproduce(get_recipe(key), "smoke", store, tmp_path / "reports", data_dir=str(data_dir),
                     run_one=lambda cfg: run_experiment(cfg, store, checkpoint_dir=tmp_path / "ckpt"))
    return path.read_text(), store


@pytest.mark.slow  # 14 runs (~20 s); the 001 recipes by default: the CIFAR-10 smoke below
def test_table1_smoke_reports_accuracy_and_both_epsilons(tmp_path: Path, shared_data: Path) -> None:
    text, store = _reproduce("001/table1", tmp_path, shared_data)
    assert (tmp_path / "reports" / "001_table1" / "smoke" / "table1.png").stat().st_size > 0
    for dataset in ("mnist", "fashion-mnist"):
        assert f"### {dataset}" in text
    # ε = 10 with d = 1,199,882 weights: pure bound T·d·ε = 1.2e7 for one round; RDP is tighter but
    # still astronomically above the paper's per-weight ε (which the table prints as "10").
    assert "| 10 | fixed |" in text and "(no amplification)" in text
    assert "ledger ε (run" in text and "reproduced**" in text
    records = store.list()
    # 4 cells × 2 data sets, and the small-CNN ablation: noise-free, ε = 10, clip only × 2 data sets
    assert len(records) == 14 and all(r.status == "finished" for r in records)
    small = [r for r in records if r.config["model"]["name"] == "cnn-mnist-small"]
    assert len(small) == 6 and "### Ablation: a small CNN (21,840 weights)" in text
    # the clip-only ablation: FedAvg with the fixed range, no randomizer, shown as not private
    assert "∞: range clip only (ablation" in text and "none: no randomizer, not private" in text
    assert "clipping the weights into the fixed range alone costs" in text
    clip = [r for r in records if "clip-only" in r.name and r not in small]
    assert len(clip) == 2 and all(r.algorithm == "fedavg" for r in clip)
    assert {r.config["algorithm"]["options"]["clip_radius"] for r in clip} == {0.075, 0.015}
    for rec in records:
        assert rec.result is not None and 0.0 <= rec.result["test_accuracy"] <= 1.0
        if rec.algorithm == "ldp-fl":
            priv = rec.result["privacy"]
            assert priv["claimed_epsilon"] in (0.1, 10.0)  # the paper's claim: ε per weight
            assert priv["certified"]["headline"]["epsilon"] > 1000 * priv["claimed_epsilon"]


def _tiny_cifar(root: Path, per_batch: int = 4, test: int = 10) -> None:
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [*((b, per_batch) for b in TRAIN_BATCHES), (TEST_BATCH, test)]:
        images = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        (folder / name).write_bytes(encode_cifar_batch(images, [int(x) for x in rng.integers(0, 10, n)]))


def test_cifar10_smoke_on_a_tiny_cifar_format_data_set(tmp_path: Path) -> None:
    _tiny_cifar(tmp_path / "data")
    # The files are synthetic; the recipe's smoke configs set data.verify: false.
    text, store = _reproduce("001/cifar10", tmp_path, tmp_path / "data")
    assert "| 10 | global-model |" in text and "| 10 | client-minmax |" in text
    # the exact min-max is released without noise: its privacy cells are infinite; the DP one is finite
    minmax = next(line for line in text.splitlines() if line.startswith("| 10 | client-minmax |"))
    private = next(line for line in text.splitlines() if line.startswith("| 10 | private-minmax |"))
    public = next(line for line in text.splitlines() if line.startswith("| 10 | global-model |"))
    assert minmax.split("|")[6].strip() == "inf" and minmax.split("|")[8].strip() == "inf"
    assert private.split("|")[6].strip() not in ("inf", "n/a")
    assert float(private.split("|")[6]) >= float(public.split("|")[6])  # equal at the table's 4 digits
    certified = {rec.name.split()[1]: float(rec.result["privacy"]["certified"]["headline"]["epsilon"])
                 for rec in store.list() if rec.name.startswith("001-cifar10") and "eps=" in rec.name}
    assert certified["private-minmax"] > certified["global-model"] and certified["client-minmax"] == float("inf")
    assert "| noise-free | fedavg |" in text
    assert (tmp_path / "reports" / "001_cifar10" / "smoke" / "cifar10.png").exists()
