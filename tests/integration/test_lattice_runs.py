"""`privacy.gaussian_noise: lattice`: the algorithms' Gaussian releases as lattice releases, end to end.

* A run with the switch and ``noise_generator: csprng`` records Skellam releases (the lattice
  form's), names them in its privacy statement and text summary, and certifies within 1% of its
  floating-point twin against the observer the algorithm's noise is calibrated for (the
  broadcast's release of UDP and NbAFL is priced as a post-processing of the uploads: higher,
  stated); ``dpfl account`` (the dry run) certifies what the run certifies.
* A deployment's path in process (``secure_rng``: fresh ChaCha20 keys, the config's
  ``gaussian_noise`` unset → "lattice") certifies exactly what the simulated twin (``lattice`` +
  ``csprng``) certifies, per observer. The Flower deployments themselves:
  ``test_flower_federate.py`` and ``test_flower.py``.
* Unset in simulation: the float Gaussian, nothing added to the config or the privacy statement
  (run ids and stored ledgers unchanged).
* An algorithm without the lattice form keeps the float Gaussian and says so (a notice and
  ``gaussian_noise: float``); a bad value is refused naming it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from test_account_equals_run import CASES, POISSON, _config

from dpfl.commands.run import _privacy_summary
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.rounds import dry_run, run_experiment
from dpfl.rounds.result import PrivacySummary
from dpfl.store import RunStore

logging.getLogger("absl").setLevel(logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

LATTICE_CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "dp-fedavg": CASES["dp-fedavg"],
    "dp-fedavg-central": ("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5, "variant": "central"}, POISSON),
    "udp": CASES["udp"],
    "udp-lei": CASES["udp-lei"],
    "nbafl": CASES["nbafl"],
    "nbafl-all": CASES["nbafl-all"],
}


def _with(cfg: Any, **privacy: Any) -> Any:
    raw = cfg.model_dump(mode="json")
    raw["privacy"].update(privacy)
    return parse_config(raw)


def _observers(final: dict[str, Any]) -> dict[str, float]:
    return {o: float(c["epsilon"]) for o, c in final["privacy"]["certified"]["observers"].items()}


@pytest.mark.parametrize("case", list(LATTICE_CASES))
def test_a_lattice_run_records_skellam_releases_and_certifies_like_its_float_twin(
        case: str, mnist_fixture: Path, tmp_path: Path) -> None:
    base = _config(*LATTICE_CASES[case], mnist_fixture)
    secure = run_experiment(_with(base, gaussian_noise="lattice", noise_generator="csprng"),
                            RunStore(tmp_path / "c.sqlite"))
    assert secure.status == "finished"
    privacy = secure.final["privacy"]
    assert privacy["gaussian_noise"] == "lattice" and privacy["noise_generator"].startswith("chacha20")
    assert "Gaussian releases: lattice" in _privacy_summary(PrivacySummary.from_dict(privacy))
    # seeded: the same cohorts as the float twin and the dry run
    lattice = _with(base, gaussian_noise="lattice")
    res = run_experiment(lattice, RunStore(tmp_path / "s.sqlite"))
    twin = run_experiment(_with(base, gaussian_noise="float"), RunStore(tmp_path / "f.sqlite")).final
    got, want = _observers(res.final), _observers(twin)
    # the observer the noise is calibrated against: the broadcast for DP-FedAvg, the uploads otherwise
    calibrated = "public" if lattice.algorithm.name == "dp-fedavg" else "server"
    assert got[calibrated] == pytest.approx(want[calibrated], rel=1e-2), (got, want)
    assert got[calibrated] >= want[calibrated] * (1 - 1e-9)  # discreteness never certifies less
    # the ledger holds Skellam releases: `dpfl account` (the dry run) certifies the same
    dry = dry_run(lattice).privacy.to_dict()
    for obs, eps in got.items():
        assert float(dry["certified"]["observers"][obs]["epsilon"]) == pytest.approx(eps, rel=1e-9), obs
    assert dry["gaussian_noise"] == "lattice"


@pytest.mark.parametrize("case", ["dp-fedavg-all", "udp-all", "nbafl-all"])
def test_a_deployments_path_certifies_what_the_simulated_twin_certifies(
        case: str, mnist_fixture: Path, tmp_path: Path) -> None:
    # full participation: the certificate does not depend on the cohorts drawn
    name = case.removesuffix("-all")
    spec = CASES["dp-fedavg" if name == "dp-fedavg" else name if name == "udp" else "nbafl-all"]
    cfg = _config(spec[0], spec[1], {**spec[2], "sampling": {"kind": "all"}}, mnist_fixture)
    assert cfg.privacy.gaussian_noise is None
    deployed = run_experiment(cfg, RunStore(tmp_path / "d.sqlite"), secure_rng=True)
    assert deployed.status == "finished" and deployed.run_id.endswith("-secure")
    assert deployed.final["privacy"]["gaussian_noise"] == "lattice"
    twin = run_experiment(_with(cfg, gaussian_noise="lattice", noise_generator="csprng"),
                          RunStore(tmp_path / "s.sqlite")).final
    got, want = _observers(deployed.final), _observers(twin)
    assert got.keys() == want.keys()
    for obs in got:
        assert got[obs] == pytest.approx(want[obs], rel=1e-9), (obs, got, want)


def test_unset_in_simulation_is_the_float_gaussian_and_changes_no_run_id(mnist_fixture: Path, tmp_path: Path) -> None:
    cfg = _config(*CASES["dp-fedavg"], mnist_fixture)
    assert "gaussian_noise" not in cfg.model_dump()["privacy"]
    res = run_experiment(cfg, RunStore(tmp_path / "s.sqlite"))
    assert "gaussian_noise" not in res.final["privacy"]
    floated = run_experiment(_with(cfg, gaussian_noise="float"), RunStore(tmp_path / "f.sqlite"))
    assert floated.final["privacy"]["gaussian_noise"] == "float"
    assert floated.final["params_sha256"] == res.final["params_sha256"]  # the same draws
    assert _observers(floated.final) == _observers(res.final)


def test_an_algorithm_without_the_lattice_form_keeps_the_float_gaussian_and_says_so(
        mnist_fixture: Path, tmp_path: Path) -> None:
    for case, why in (("udp-crd", "Rényi filter"), ("dp-fedavg-adaptive", "adaptive clipping"),
                      ("dp-sgd-fedavg", "no lattice form")):
        cfg = _with(_config(*CASES[case], mnist_fixture), gaussian_noise="lattice")
        store = RunStore(tmp_path / f"{case}.sqlite")
        res = run_experiment(cfg, store)
        assert res.final["privacy"]["gaussian_noise"] == "float", case
        notes = [n["message"] for n in store.notices(res.run_id) if n["kind"] == "gaussian-noise"]
        assert len(notes) == 1 and why in notes[0] and "floating-point" in notes[0], (case, notes)


def test_a_bad_value_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"gaussian_noise.*'float' or 'lattice'.*'gaussian'"):
        parse_config({"privacy": {"gaussian_noise": "gaussian"}})
