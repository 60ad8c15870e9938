"""The canary-audit report (``reports/audit``): the committed README and plots are what its audit
records write, and a run of the report's audits (shrunk, on the MNIST-format fixture) writes a
report whose every row is the audit code's own entry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dpfl.experiments import audit_report
from dpfl.experiments.audit_report import (
    AUDITS_FILE,
    SWEEPS,
    Settings,
    read_audits,
    run_audits,
    write_report,
)

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "reports" / "audit"


def _copy_configs(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for sweep in SWEEPS:
        shutil.copy(COMMITTED / f"{sweep.name}.yaml", dest / f"{sweep.name}.yaml")


def test_the_committed_audit_report_regenerates_byte_for_byte_from_its_records(tmp_path: Path) -> None:
    out = tmp_path / "audit"
    _copy_configs(out)
    shutil.copy(COMMITTED / AUDITS_FILE, out / AUDITS_FILE)
    assert audit_report.main(["--out", str(out), "--from-records"]) == 0
    assert (out / "README.md").read_text() == (COMMITTED / "README.md").read_text()
    for sweep in SWEEPS:
        assert (out / f"{sweep.name}.png").read_bytes() == (COMMITTED / f"{sweep.name}.png").read_bytes()


def test_committed_records_hold_every_audit_with_reach_and_verdict() -> None:
    settings, records = read_audits(COMMITTED)
    assert settings == Settings()
    assert [r["label"] for r in records if r["group"] != "broken"] == [
        f"{s.key}={v:g}" for s in SWEEPS for v in s.values]
    for r in records:
        a = r["audit"]
        assert a["verdict"] in ("violation", "consistent", "inconclusive")
        assert a["reach"] == a["reach_estimate"]["epsilon_low"]
        assert r["wall_seconds"] > 0
    # the broken mechanism: each pair certifies the same ε, and only the broken run is a violation
    broken = [r for r in records if r["group"] == "broken"]
    for ok, bad in zip(broken[::2], broken[1::2], strict=True):
        assert ok["noise_scale"] == 1.0 and bad["noise_scale"] == 0.1
        assert bad["audit"]["certified_epsilon_public"] == pytest.approx(ok["audit"]["certified_epsilon_public"])
        assert ok["audit"]["verdict"] != "violation" and bad["audit"]["verdict"] == "violation"


def test_a_run_of_the_audits_writes_records_and_report(mnist_fixture: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    _copy_configs(out)
    small = Settings(canaries=6, unseen=40, bootstrap=20,
                     overrides=("rounds=2", "partition.num_clients=8", "data.verify=false"))
    records = run_audits(out, small, data_dir=str(mnist_fixture))
    assert len(records) == sum(len(s.values) for s in SWEEPS) + len(audit_report.BROKEN)
    payload = json.loads((out / AUDITS_FILE).read_text())
    assert payload["records"] == json.loads(json.dumps(records, default=str))
    text = write_report(out, small, records).read_text()
    for r in records:
        a = r["audit"]
        assert f"| {a['verdict']} |" in text
        assert audit_report._interval(a) in text
    assert "python -m dpfl.experiments.audit_report --from-records" in text
    assert "8 clients" in text.splitlines()[0]
