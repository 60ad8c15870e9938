"""Flower apps as Flower users write them (``tests/flower_apps``), run in Flower's simulation engine
with dpfl's certificates attached, their figures checked against dp-accounting called directly.

* ``fl_dp_sa`` — the pattern of Flower's ``examples/fl-dp-sa`` (legacy ServerApp,
  ``DifferentialPrivacyClientSideFixedClipping`` + ``SecAggPlusWorkflow``, ClientApp with
  ``secaggplus_mod`` + ``fixedclipping_mod``; z = 0.2, C = 10, 20 of 100 nodes, 3 rounds), on
  local MNIST. dpfl changes 3 lines of its server app (the import and a two-line wrapper).
* ``message_dp`` — a Message-API app: ``FedAvg`` in ``DifferentialPrivacyServerSideFixedClipping``
  with Flower's own ``RdpAccountant`` (z = 1, C = 1, 5 of 10 nodes, 5 rounds). dpfl changes 2
  lines of its server app (the import and the wrapper).

Both print, each round, the certified ε per observer beside Flower's accountant figure, and at
the end the PLD: ∞ against the server (it has the updates, or their SecAgg+ sum, before it adds
the noise), and for the public dp-accounting's figure for the Gaussian events of the rounds the
most frequent client took part in (the cohort is known to the server: no amplification).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

pytest.importorskip("flwr")

TESTS = Path(__file__).resolve().parents[1]
APPS = TESTS / "flower_apps"


def _dpfl_lines(app: str) -> int:
    return sum(line.rstrip().endswith("# dpfl") for path in (APPS / app).glob("*.py")
               for line in path.read_text(encoding="utf-8").splitlines())


def _gaussian(z: float, count: int) -> tuple[float, float]:
    """(PLD, RDP) ε at δ = 1e-5 of ``count`` Gaussian releases of noise multiplier z."""
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(z), count)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(dp_accounting.GaussianDpEvent(z), count)
    return float(pld.get_epsilon(1e-5)), float(rdp.get_epsilon(1e-5))


def _final(lines: list[str]) -> dict[str, str]:
    """The final report's figures: rounds, most rounds of one client, server and public lines."""
    text = "\n".join(lines)
    head = re.search(r"dpfl certificates after (\d+) released rounds .*one client took part in: (\d+)\)", text)
    assert head is not None, text[-3000:]
    server = re.search(r"^\s*server ε = (\S+) .*$", text, flags=re.M)
    public = re.search(r"^\s*public ε = (\S+) at δ = 1e-05 \((\w+); RDP (\S+), PLD (\S+);", text, flags=re.M)
    assert server is not None and public is not None, text[-3000:]
    return {"rounds": head.group(1), "most": head.group(2), "server": server.group(1), "public": public.group(1),
            "rdp": public.group(3), "pld": public.group(4)}


def test_fl_dp_sa_pattern_certified_per_observer_beside_flowers_figure(flower_log: Any) -> None:
    from flower_apps.fl_dp_sa.client_app import app as client_app
    from flower_apps.fl_dp_sa.server_app import app as server_app
    from flwr.simulation import run_simulation

    assert _dpfl_lines("fl_dp_sa") == 3  # the import and the two-line wrapper
    from dpfl.runtime.flower import masks

    # the app's ClientApps mask with Flower's own generator: so must this (server) process, where an
    # earlier test may have installed dpfl's ChaCha20 masks
    was = masks.installed()
    masks.uninstall()
    try:
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=100)
    finally:
        if was:
            masks.install()
    rounds = [line for line in flower_log.lines if line.startswith("dpfl round")]
    assert len(rounds) == 3 and all("server ∞" in line for line in rounds), rounds
    got = _final(flower_log.lines)
    assert got["rounds"] == "3" and got["server"] == "∞"
    pld, rdp = _gaussian(0.2, int(got["most"]))
    # SecAgg+'s stochastic rounding adds 2·√d·(2c/Q)/dq_k to the sensitivity C = 10 (d = 50,890,
    # c = 8, Q = 2^22, dq_k = 480/1000): 3.6e-3, a few 1e-4 of the ε above the Gaussian's
    assert float(got["pld"].replace(",", "")) == pytest.approx(pld, rel=2e-3)
    assert rdp <= float(got["rdp"].replace(",", "")) <= rdp * (1 + 2e-3)
    # Flower's RdpAccountant on the same events charges every round to everyone: 3 Gaussian(0.2)
    flower = re.search(r"Flower's RdpAccountant, run by dpfl on Flower's assumptions \(total z, add/remove\): "
                       r"ε = (\S+)$", rounds[-1])
    assert flower is not None and float(flower.group(1)) == pytest.approx(_gaussian(0.2, 3)[1], rel=1e-3)
    text = "\n".join(flower_log.lines)
    assert "SecAgg+ shows it only the sum, but the sum carries no noise" in text
    assert "secure aggregation on" in text
    assert "cannot see what it does" not in text  # secaggplus_mod and fixedclipping_mod are both read
    assert "the clients are trusted to clip" in text  # under SecAgg+ the server cannot check it


def test_message_api_app_with_flowers_accountant_certified_per_observer(flower_log: Any) -> None:
    from flower_apps.message_dp.client_app import app as client_app
    from flower_apps.message_dp.server_app import app as server_app
    from flwr.simulation import run_simulation

    assert _dpfl_lines("message_dp") == 2  # the import and the wrapper
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=10)
    rounds = [line for line in flower_log.lines if line.startswith("dpfl round")]
    assert len(rounds) == 5, rounds
    # Flower's own accountant logs its figure; dpfl's line shows the same figure beside its own
    spent = [float(m.group(1)) for line in flower_log.lines
             if (m := re.match(r"Privacy spent: epsilon=(\S+) at delta=1e-05", line))]
    assert spent and spent[-1] == pytest.approx(_gaussian(1.0, 5)[1], rel=1e-6)
    assert rounds[-1].endswith(f"Flower's RdpAccountant: ε = {spent[-1]:,.4g}")
    got = _final(flower_log.lines)
    assert got["server"] == "∞" and got["rounds"] == "5"
    pld, rdp = _gaussian(1.0, int(got["most"]))
    assert float(got["pld"]) == pytest.approx(pld, rel=2e-3)
    assert float(got["rdp"]) == pytest.approx(rdp, rel=1e-3)
    assert "Flower (its accountant)" in "\n".join(flower_log.lines)


@pytest.mark.slow
def test_message_api_app_through_flwr_run_on_three_supernodes(shared_data: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same app deployed: a SuperLink and 3 of Flower's own SuperNodes (separate processes,
    Flower's subprocess isolation) on 127.0.0.1, submitted with ``flwr run`` (minutes: every
    message starts a ClientApp process that imports torch)."""
    import subprocess

    from dpfl.runtime.flower.local import LocalFederation, _tool

    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("FLOWER_APPS_DATA", str(shared_data))
    with LocalFederation(3, isolation="subprocess", workdir=tmp_path,
                         node_config={i: {"num-partitions": 3} for i in range(3)}) as fed:
        run_config = tmp_path / "run-config.toml"
        run_config.write_text("num-nodes = 3\nnum-sampled-clients = 2\nnum-server-rounds = 3\n", encoding="utf-8")
        done = subprocess.run([_tool("flwr"), "run", str(APPS / "message_dp"), "dpfl-local", "--stream",
                               "--run-config", str(run_config)], capture_output=True, text=True, env=fed.env,
                              cwd=tmp_path, timeout=900, check=False)
    out = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    lines = [line.split(":", 1)[1].strip() if line.startswith("INFO") else line for line in out.splitlines()]
    rounds = [line for line in lines if line.startswith("dpfl round")]
    assert len(rounds) == 3 and all("server ∞" in line for line in rounds), out[-3000:]
    assert rounds[-1].endswith(f"Flower's RdpAccountant: ε = {_gaussian(1.0, 3)[1]:,.4g}")
    got = _final(lines)
    pld, _ = _gaussian(1.0, int(got["most"]))
    assert got["server"] == "∞" and float(got["pld"]) == pytest.approx(pld, rel=2e-3)
