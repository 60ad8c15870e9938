"""Every split algorithm on Flower's Simulation Engine gives the simulator's model (slow: opt-in).

    ./dev test -m slow tests/integration/test_flower_all_algorithms.py

One Flower run per algorithm (a SuperLink in simulation mode, 4 virtual SuperNodes on Ray, the
dpfl ServerApp/ClientApp, ``reproducible = true``), 2 rounds, against ``run_experiment`` in
process: the same parameter digest (sequential engine on both sides, see test_flower.py) and the
same certified ε. LDP-FL here has no shuffler node (the server mixes, with a notice), so its
per-id means are summed in the same order as in simulation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("flwr")

from dpfl.config import load_config  # noqa: E402
from dpfl.rounds import run_experiment  # noqa: E402
from dpfl.runtime.flower.local import LocalFederation  # noqa: E402
from dpfl.store import RunStore  # noqa: E402

pytestmark = pytest.mark.slow

UDP_LOCAL = {"lr": 0.1, "epochs": 1, "batch_size": None}
CASES = {
    "fedavg": ({"name": "fedavg"}, None),
    "dp-fedavg-adaptive": ({"name": "dp-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 0.5,
                                                             "adaptive_clip": {"count_noise_std": 1.0}}}, None),
    "dp-fedavg-blur-lus": ({"name": "dp-fedavg-blur-lus",
                            "options": {"noise_multiplier": 1.0, "clip_norm": 0.5}}, None),
    "udp": ({"name": "udp", "options": {"epsilon": 5.0, "clip_norm": 1.0}}, UDP_LOCAL),
    "udp-crd": ({"name": "udp-crd", "options": {"epsilon": 5.0, "clip_norm": 1.0, "threshold": 10.0}}, UDP_LOCAL),
    "udp-lei": ({"name": "udp-lei", "options": {"epsilon": 5.0, "clip_norm": 1.0}}, UDP_LOCAL),
    "ldp-fl": ({"name": "ldp-fl", "options": {"epsilon": 1.0, "radius": 0.1}}, None),
    "midp-server": ({"name": "midp-server", "options": {"epsilons": [2.0, 4.0, 6.0, 8.0], "clip_norm": 1.0}}, None),
    "midp-client": ({"name": "midp-client", "options": {"epsilons": [2.0, 4.0, 6.0, 8.0], "clip_norm": 1.0}}, None),
    "pmidp-fl": ({"name": "pmidp-fl", "options": {"epsilons": [2.0, 4.0, 6.0, 8.0], "clip_norm": 1.0}}, None),
    "dp-sgd-fedavg": ({"name": "dp-sgd-fedavg", "options": {"noise_multiplier": 1.0, "clip_norm": 1.0}}, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_algorithm_on_flower_simulation_equals_the_simulator(case: str, tmp_path: Path, mnist_fixture: Path) -> None:
    algorithm, local = CASES[case]
    cfg = {
        "name": f"flower-{case}", "seed": 11, "rounds": 2,
        "data": {"name": "mnist", "dir": str(mnist_fixture), "verify": False},
        "partition": {"kind": "iid", "num_clients": 4, "samples_per_client": 60},
        "model": {"name": "mlp"}, "algorithm": algorithm, "sampling": {"kind": "all"},
        "local": local or {"lr": 0.1, "epochs": 1, "batch_size": 20},
        "engine": "sequential", "threads": 1, "privacy": {"delta": 1e-3},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with LocalFederation(4, simulation=True, workdir=tmp_path / "fed") as fed:
        got = fed.run(path, store=tmp_path / "flower.sqlite", reproducible=True, timeout=900)
    want = run_experiment(load_config(path), RunStore(tmp_path / "sim.sqlite")).final
    assert got["status"] == "finished" and got["rounds"] == want["rounds"]  # CRD and Lei may end early
    assert got["params_sha256"] == want["params_sha256"]
    final = RunStore(tmp_path / "flower.sqlite").get(got["run_id"]).result
    if "privacy" in want:
        for obs in ("server", "public"):
            a = final["privacy"]["certified"]["observers"][obs]["epsilon"]
            b = want["privacy"]["certified"]["observers"][obs]["epsilon"]
            assert a == b if isinstance(b, str) else a == pytest.approx(b, rel=1e-12)  # "inf" is stored as text
