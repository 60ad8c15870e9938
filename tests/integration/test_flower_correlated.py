"""Correlated noise in a Flower app (``tests/flower_apps/correlated_noise``): message_dp's FedAvg app with
``CorrelatedNoiseStrategy`` in place of Flower's central-DP wrapper, run in Flower's simulation engine
(10 nodes in cyclic order, b = 5: 2 per round, each client twice in 10 rounds) and, slow, through
``flwr run`` on three of Flower's SuperNodes.

Checked: the certificates the app logs at the end equal ``dpfl account`` (the command, in a
subprocess) of the run config written by hand for the same schema, mechanism, noise (σ, or the
target ε it is calibrated to) and rounds, to 1e-9 — against the server ∞ (central DP), against the
public RDP and PLD; and, for BLT, the public RDP equals dp-accounting's Gaussian at the worst
client's sensitivity Σ_{s,t∈rounds}|G_st| computed from the dense factorization. dpfl changes two
lines of the app.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS

pytest.importorskip("flwr")

TESTS = Path(__file__).resolve().parents[1]
APPS = TESTS / "flower_apps"
APP = "correlated_noise"


def _dpfl_lines(app: str) -> int:
    return sum(line.rstrip().endswith("# dpfl") for path in (APPS / app).glob("*.py")
               for line in path.read_text(encoding="utf-8").splitlines())


def _logged(lines: list[str]) -> dict[str, Any]:
    got = [json.loads(line.split(": ", 1)[1]) for line in lines if line.startswith("dpfl certificates as JSON: ")]
    assert len(got) == 1, lines[-40:]
    return got[0]


def _account(tmp_path: Path, data: Path, *, nodes: int, rounds: int, b: int, options: dict[str, Any]) -> dict[str, Any]:
    """``dpfl account CONFIG --json`` of the run config of the same schema, mechanism and noise."""
    opts = ", ".join(f"{k}: {v}" for k, v in options.items())
    config = tmp_path / "same.yaml"
    config.write_text(
        f"name: flower-correlated\nseed: 0\nrounds: {rounds}\ndata: {{name: mnist, dir: {data}}}\n"
        f"partition: {{kind: iid, num_clients: {nodes}}}\n"
        f"algorithm: {{name: dp-ftrl, options: {{{opts}}}}}\n"
        f"sampling: {{kind: min_separation, min_separation: {b}}}\n"
        "privacy: {delta: 1.0e-5, noise_generator: csprng}\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "dpfl", "account", str(config), "--json"], capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout)["privacy"])


def _same(logged: dict[str, Any], account: dict[str, Any]) -> None:
    ours = logged["privacy"]
    assert (ours["claimed_epsilon"], ours["claim_notion"]) == (account["claimed_epsilon"], account["claim_notion"])
    for obs in ("server", "public"):
        mine, theirs = ours["certified"]["observers"][obs], account["certified"]["observers"][obs]
        assert (mine["method"], mine["relation"], mine["notes"]) == (theirs["method"], theirs["relation"],
                                                                     theirs["notes"]), (obs, mine, theirs)
        for key in ("epsilon", "epsilon_rdp", "epsilon_pld"):
            if theirs[key] in ("inf", None):  # no PLD for the tree's event: none on either side
                assert mine[key] == theirs[key], (obs, key, mine)
            else:
                assert mine[key] == pytest.approx(theirs[key], rel=1e-9, abs=0), (obs, key, mine, theirs)
    assert ours["certified"]["observers"]["server"]["epsilon"] == "inf"  # central DP: stated, never hidden


def _run_in_simulation(settings: dict[str, Any]) -> None:
    from flower_apps.correlated_noise import server_app
    from flower_apps.correlated_noise.client_app import app as client_app
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    app = ServerApp()  # the app's main under run-config values (run_simulation takes none)

    @app.main()
    def main(grid: Any, context: Any) -> None:
        context.run_config.update(settings)
        server_app.main(grid, context)

    run_simulation(server_app=app, client_app=client_app, num_supernodes=int(settings.get("num-nodes", 10)))


@pytest.mark.parametrize("mechanism,settings,options", [
    ("blt", {"target-epsilon": 8.0}, {"target_epsilon": 8.0}),
    ("tree", {"noise-multiplier": 1.5}, {"noise_multiplier": 1.5}),
])
def test_the_apps_certificates_are_dpfl_accounts_in_the_simulation_engine(
        flower_log: Any, shared_data: Path, tmp_path: Path, mechanism: str, settings: dict[str, Any],
        options: dict[str, Any]) -> None:
    assert _dpfl_lines(APP) == 2  # the import and the wrapper
    _run_in_simulation({"mechanism": mechanism, **settings})
    lines = flower_log.lines
    rounds = [line for line in lines if line.startswith("dpfl round")]
    assert len(rounds) == 10 and all("server ∞" in line and "2 of 2 scheduled" in line for line in rounds), rounds
    logged = _logged(lines)
    assert logged["rounds"] == 10
    account = _account(tmp_path, shared_data, nodes=10, rounds=10, b=5,
                       options={"mechanism": mechanism, "clip_norm": 1.0, **options})
    _same(logged, account)
    if mechanism == "blt":  # the public's RDP, independently: the Gaussian at the worst client's Σ|G|
        from dpfl.algorithms.dp_ftrl import build_strategy

        head = next(line for line in lines if line.startswith("dpfl: correlated noise"))
        m = re.search(r"σ = (\S+),", head)
        assert m is not None
        strategy = build_strategy("blt", 10, 5, 2, None, 4, None, 0.0)
        enc = strategy.encoder_matrix()
        gram = np.abs(enc.T @ enc)
        worst = max(float(gram[np.ix_([i, i + 5], [i, i + 5])].sum()) for i in range(5))
        acc = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
        acc.compose(dpa.GaussianDpEvent(float(m.group(1)) / math.sqrt(worst)))
        # σ is logged to 6 digits: the RDP agrees to about that
        public = logged["privacy"]["certified"]["observers"]["public"]
        assert public["epsilon_rdp"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-5)
        assert logged["privacy"]["claimed_epsilon"] == pytest.approx(8.0, rel=1e-5)  # calibrated to the target
        assert public["epsilon_rdp"] <= logged["privacy"]["claimed_epsilon"] * (1 + 1e-9)


@pytest.mark.slow
def test_the_app_through_flwr_run_on_three_supernodes(shared_data: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The same app deployed: a SuperLink and 3 of Flower's own SuperNodes (separate processes,
    Flower's subprocess isolation) on 127.0.0.1, submitted with ``flwr run`` (minutes: every
    message starts a ClientApp process that imports torch); BLT over 4 rounds, b = 2."""
    from dpfl.runtime.flower.local import LocalFederation, _tool

    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("FLOWER_APPS_DATA", str(shared_data))
    with LocalFederation(3, isolation="subprocess", workdir=tmp_path,
                         node_config={i: {"num-partitions": 3} for i in range(3)}) as fed:
        run_config = tmp_path / "run-config.toml"
        run_config.write_text("num-nodes = 3\nnum-server-rounds = 4\nmin-separation = 2\nmechanism = \"blt\"\n"
                              "noise-multiplier = 2.0\n", encoding="utf-8")
        done = subprocess.run([_tool("flwr"), "run", str(APPS / APP), "dpfl-local", "--stream",
                               "--run-config", str(run_config)], capture_output=True, text=True, env=fed.env,
                              cwd=tmp_path, timeout=900, check=False)
    out = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    lines = [line.split(":", 1)[1].strip() if line.startswith("INFO") else line for line in out.splitlines()]
    rounds = [line for line in lines if line.startswith("dpfl round")]
    assert len(rounds) == 4 and all("server ∞" in line for line in rounds), out[-3000:]
    account = _account(tmp_path, shared_data, nodes=3, rounds=4, b=2,
                       options={"mechanism": "blt", "clip_norm": 1.0, "noise_multiplier": 2.0})
    _same(_logged(lines), account)
