"""Certified numbers do not move when the ledger's implementation does.

``ledger_golden.json`` holds, for small runs of every private algorithm (dry runs of configs and of
the ``dpfl account`` shortcuts, the default config with secure aggregation and ``--colluding``) and
for ledgers fed by hand (every release kind, every sampling, dropouts, personalized noise, many
distinct events), the certificates, per-client tables, per-round entries, ``would_exceed`` and
``within_budget`` answers and the stored ledger (``to_dict``), as the ledger computed them before
it was vectorized over clients. Each test recomputes them: every number must agree to a relative
1e-9 (an infinite ε exactly), everything else exactly; a stored ledger of that format must load
and certify the same.

Regenerate the file (``python tests/unit/privacy/accounting/test_ledger_golden.py``) only when a
certified number is *meant* to change, and say why in the commit.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).with_name("ledger_golden.json")

# --------------------------------------------------------------------------- dry runs of configs

SIZES40 = [20 + (7 * i) % 45 for i in range(40)]
SIZES6 = [20, 35, 12, 50, 28, 40]
EPS6 = [1.0, 3.0, 9.0, 2.0, 20.0, 5.0]
FULL_BATCH = {"lr": 0.05, "epochs": 1, "batch_size": None, "steps": None}
MLP_784_64_10 = 784 * 64 + 64 + 64 * 10 + 10


def _raw(name: str, options: dict[str, Any], *, rounds: int, sampling: dict[str, Any],
         privacy: dict[str, Any] | None = None, local: dict[str, Any] | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": f"golden-{name}", "seed": 3, "rounds": rounds,
                           "algorithm": {"name": name, "options": options}, "sampling": sampling,
                           "privacy": {"delta": 1e-5, **(privacy or {})}}
    if local is not None:
        raw["local"] = local
    return raw


def _default(participation: str, colluding: int) -> dict[str, Any]:
    """The built-in default config (secure aggregation, Skellam), 200 clients, 25 rounds."""
    from dpfl.config import load_config

    cfg = load_config("default", []).model_dump(mode="json")
    raw = _raw("dp-fedavg", cfg["algorithm"]["options"], rounds=25, sampling=cfg["sampling"],
               privacy={**cfg["privacy"], "participation": participation, "colluding_clients": colluding})
    raw["privacy"] = {k: v for k, v in raw["privacy"].items() if v is not None}
    return raw


POISSON = {"kind": "poisson", "sample_rate": 0.1}
FIXED10 = {"kind": "fixed", "clients_per_round": 10}
FIXED4 = {"kind": "fixed", "clients_per_round": 4}
ALL = {"kind": "all"}

# name -> (raw config, client sizes, number of parameters, per_round)
DRY: dict[str, tuple[dict[str, Any], list[int], int, bool]] = {
    **{f"default-hidden-c{c}": (_default("hidden", c), [60] * 200, MLP_784_64_10, False) for c in (0, 10, 100)},
    **{f"default-visible-c{c}": (_default("visible", c), [60] * 200, MLP_784_64_10, False) for c in (0, 10)},
    "dp-fedavg": (_raw("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 1.0}, rounds=60, sampling=POISSON),
                  [1] * 100, 1, True),
    "dp-fedavg-adaptive": (_raw("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5,
                                              "adaptive_clip": {"count_noise_std": 1.0}}, rounds=20,
                                sampling={"kind": "poisson", "sample_rate": 0.2}), SIZES40, 1, False),
    "dp-fedavg-central-fixed": (_raw("dp-fedavg", {"noise_multiplier": 1.0, "clip_norm": 0.5, "variant": "central"},
                                     rounds=20, sampling=FIXED10), SIZES40, 1, False),
    "dp-fedavg-blur-lus": (_raw("dp-fedavg-blur-lus", {"noise_multiplier": 1.0, "clip_norm": 0.5}, rounds=10,
                                sampling={"kind": "poisson", "sample_rate": 0.3}), SIZES40, 1, False),
    "dp-fedavg-target": (_raw("dp-fedavg", {"target_epsilon": 4.0, "clip_norm": 1.0}, rounds=10,
                              sampling={"kind": "poisson", "sample_rate": 0.5}), [1] * 12, 1, False),
    "dp-fedavg-secure-target": (_raw("dp-fedavg", {"noise_multiplier": 1.5, "clip_norm": 1.0}, rounds=60,
                                     sampling=POISSON, privacy={"target_epsilon": 4.0, "secure_aggregation": True,
                                                                "participation": "hidden"}), [1] * 50, 10, True),
    "udp": (_raw("udp", {"epsilon": 5.0, "clip_norm": 1.0}, rounds=15, sampling=FIXED10, local=FULL_BATCH),
            SIZES40, 1, True),
    "udp-target": (_raw("udp", {"epsilon": 5.0, "clip_norm": 1.0}, rounds=15, sampling=FIXED10, local=FULL_BATCH,
                        privacy={"target_epsilon": 5.0}), SIZES40, 1, True),
    "udp-all": (_raw("udp", {"epsilon": 2.0, "clip_norm": 0.5}, rounds=8, sampling=ALL, local=FULL_BATCH),
                [100] * 10, 1, False),
    "udp-crd": (_raw("udp-crd", {"epsilon": 5.0, "clip_norm": 1.0, "threshold": 10.0}, rounds=8, sampling=FIXED4,
                     local=FULL_BATCH), SIZES6, 1, False),
    "udp-lei": (_raw("udp-lei", {"epsilon": 5.0, "clip_norm": 1.0}, rounds=8, sampling=FIXED4, local=FULL_BATCH),
                SIZES6, 1, False),
    "ldp-fl": (_raw("ldp-fl", {"epsilon": 1.0, "radius": 0.1}, rounds=3, sampling=ALL), [1] * 10, 20, False),
    "ldp-fl-client-minmax": (_raw("ldp-fl", {"epsilon": 0.5, "range": "client-minmax"}, rounds=2, sampling=ALL),
                             [1] * 4, 5, False),
    "midp-server": (_raw("midp-server", {"epsilons": EPS6, "clip_norm": 1.0}, rounds=5, sampling=FIXED4),
                    SIZES6, 10, False),
    "midp-client": (_raw("midp-client", {"epsilons": EPS6, "clip_norm": 1.0}, rounds=5, sampling=FIXED4),
                    SIZES6, 10, False),
    "pmidp-fl": (_raw("pmidp-fl", {"epsilons": EPS6, "clip_norm": 1.0}, rounds=5, sampling=FIXED4), SIZES6, 10, False),
    "pmidp-fl-adaptive": (_raw("pmidp-fl", {"epsilons": EPS6, "clip_norm": 1.0, "clip_lr": 0.3}, rounds=5,
                               sampling=FIXED4), SIZES6, 10, False),
    "nbafl": (_raw("nbafl", {"epsilon": 2.0, "clip_norm": 10.0, "downlink_noise": "none"}, rounds=6,
                   sampling=FIXED4), SIZES6, 1, False),
    "nbafl-all": (_raw("nbafl", {"epsilon": 2.0, "clip_norm": 10.0}, rounds=6, sampling=ALL), SIZES6, 1, False),
    "dp-sgd-fedavg": (_raw("dp-sgd-fedavg", {"noise_multiplier": 1.1, "clip_norm": 1.0}, rounds=4, sampling=FIXED4,
                           local={"lr": 0.1, "epochs": 1, "batch_size": 10}), SIZES6, 1, False),
    "dp-sgd-fedavg-fixed-rate": (_raw("dp-sgd-fedavg", {"noise_multiplier": 0.9, "clip_norm": 1.0,
                                                        "record_sample_rate": 0.2}, rounds=4,
                                      sampling={"kind": "poisson", "sample_rate": 0.5},
                                      local={"lr": 0.1, "batch_size": None, "steps": 4}), SIZES6, 1, False),
    # correlated noise under participation schemas (dp-ftrl), 40 clients
    "dp-ftrl-blt": (_raw("dp-ftrl", {"mechanism": "blt", "noise_multiplier": 3.0, "clip_norm": 1.0},
                         rounds=24, sampling={"kind": "min_separation", "min_separation": 4}), SIZES40, 100, True),
    "dp-ftrl-banded-amplified": (_raw("dp-ftrl", {"mechanism": "banded", "noise_multiplier": 1.2, "clip_norm": 1.0},
                                      rounds=24, sampling={"kind": "cyclic_poisson", "min_separation": 4,
                                                           "sample_rate": 0.5}), SIZES40, 100, False),
    "dp-ftrl-tree": (_raw("dp-ftrl", {"mechanism": "tree", "noise_multiplier": 2.5, "clip_norm": 1.0},
                          rounds=24, sampling={"kind": "min_separation", "min_separation": 8,
                                               "max_participations": 2}), SIZES40, 100, False),
    "dp-ftrl-availability": (_raw("dp-ftrl", {"mechanism": "banded", "noise_multiplier": 2.0, "clip_norm": 1.0,
                                              "bands": 3, "server_momentum": 0.9},
                                  rounds=30, sampling={"kind": "availability", "min_separation": 3,
                                                       "availability": {"period": 6, "window": 0.5,
                                                                        "checkin_rate": 0.5}}), SIZES40, 100, False),
}

# `dpfl account` shortcuts: name -> argv (without "account" and "--json")
SHORTCUTS: dict[str, list[str]] = {
    "dp-fedavg": ["dp-fedavg", "--noise-multiplier", "1.0", "--sample-rate", "0.1", "--rounds", "80",
                  "--clients", "200", "--delta", "1e-5"],
    "dp-fedavg-inverse": ["dp-fedavg", "--epsilon", "4", "--sample-rate", "0.5", "--rounds", "10", "--clients", "12",
                          "--delta", "1e-4"],
    "udp-sampled": ["udp", "--epsilon", "8", "--delta", "1e-3", "--clients", "20", "--sampled", "6", "--rounds", "15",
                    "--lr", "0.05", "--clip", "1.0", "--samples-per-client", "800"],
    "nbafl-all": ["nbafl", "--epsilon", "50", "--delta", "0.01", "--clients", "10", "--rounds", "5", "--clip", "10",
                  "--min-samples", "1200"],
    "nbafl-k-random": ["nbafl", "--epsilon", "5", "--delta", "0.01", "--clients", "20", "--sampled", "5",
                       "--rounds", "6", "--exposures", "3", "--clip", "1", "--min-samples", "100",
                       "--downlink-noise", "none"],
    "midp-server": ["midp", "--epsilon", "10", "--mode", "server", "--clients", "8", "--clip", "10", "--dim", "1000",
                    "--rounds", "4", "--delta", "1e-5"],
    "midp-client": ["midp", "--epsilon", "3", "--mode", "client", "--clients", "6", "--clip", "1", "--dim", "50",
                    "--rounds", "3", "--delta", "1e-5"],
    "ldp-fl": ["ldp-fl", "--epsilon", "1", "--dim", "20", "--rounds", "3", "--clients", "10", "--delta", "1e-5"],
    "ldp-fl-inverse": ["ldp-fl", "--target-epsilon", "30", "--dim", "5", "--rounds", "3", "--clients", "4",
                       "--delta", "1e-5"],
}


#: The notices the privacy gate emits (the others come from the algorithms and the build, which
#: the ledger does not decide).
GATE_NOTICES = ("claim-exceeded", "claim-order-grid", "target-epsilon", "privacy-filter", "stopped", "early-end")


def _gate_notices(notices: list[str]) -> list[str]:
    return [n for n in notices if n.split(":", 1)[0] in GATE_NOTICES]


def dry_case(name: str) -> dict[str, Any]:
    from dpfl.config import parse_config
    from dpfl.rounds import build_plan, dry_run

    raw, sizes, num_params, per_round = DRY[name]
    config = parse_config(raw)
    notices: list[str] = []
    out = dry_run(config, notices.append, per_round=per_round, experiment=build_plan(config, sizes, num_params))
    return {**out.to_dict(), "notices": _gate_notices(notices)}


def shortcut_case(name: str) -> dict[str, Any]:
    import contextlib
    import io

    from dpfl.commands.account import register

    parser = argparse.ArgumentParser(prog="dpfl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["account", *SHORTCUTS[name], "--json"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert args.func(args) == 0
    out = json.loads(buf.getvalue())
    out.pop("config", None)  # the config is not a number the ledger certifies
    out["notices"] = _gate_notices(out.get("notices", []))
    return out


# --------------------------------------------------------------------------- ledgers fed by hand


def _lcg(seed: int) -> Callable[[], float]:
    """A tiny deterministic uniform generator (no dependence on any library's RNG)."""
    state = [seed]

    def draw() -> float:
        state[0] = (6364136223846793005 * state[0] + 1442695040888963407) % (1 << 64)
        return (state[0] >> 11) / float(1 << 53)

    return draw


def _poisson_cohort(n: int, q: float, u: Callable[[], float]) -> list[int]:
    return [c for c in range(n) if u() < q]


def _fixed_cohort(n: int, k: int, u: Callable[[], float]) -> list[int]:
    ids = list(range(n))
    for i in range(n - 1, 0, -1):
        j = int(u() * (i + 1))
        ids[i], ids[j] = ids[j], ids[i]
    return sorted(ids[:k])


def _record(ledger: Any, t: int, releases: list[Any], sampling: dict[str, Any], parts: list[int],
            claimed: Any = None) -> None:
    ledger.record_round(t, releases, sampling=sampling, participants=parts, claimed_epsilon=claimed)


def ledger_poisson_split_noise() -> tuple[Any, list[Any]]:
    """DP-FedAvg's local variant: per-upload noise σ/sqrt(|P_t|) to the server, amplified broadcast."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import federated_round_releases

    n, q, sampling = 30, 0.2, {"kind": "poisson", "sample_rate": 0.2}
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-5, relation="add_remove",
                           privacy_unit="client", pld_every=4, pld_discretization=1e-2)
    u = _lcg(11)
    for t in range(24):
        parts = _poisson_cohort(n, q, u)
        k = max(len(parts), 1)
        rel = federated_round_releases(parts, 1.1 / math.sqrt(k), 1.0, [1.0 / (q * n)] * len(parts),
                                       amplifiable=True)
        if not parts:
            from dpfl.privacy.releases import Release
            rel = [Release.gaussian("public", 1.1 / (q * n), 1.0 / (q * n), None, amplifiable=True)]
        _record(ledger, t, rel, sampling, parts, claimed=0.3 * (t + 1))
    nxt = federated_round_releases([1, 2, 5], 1.1 / math.sqrt(3), 1.0, [1.0 / (q * n)] * 3, amplifiable=True)
    return ledger, [(nxt, [1, 2, 5])]


def ledger_fixed_personalized() -> tuple[Any, list[Any]]:
    """Fixed-size sampling, replace-one, personalized noise and weights by samples: the public's
    broadcast charged per participant (non-interchangeable clients); one round loses uploads."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import federated_round_releases

    n, k = 12, 4
    sampling = {"kind": "fixed_size", "num_sampled": k}
    sizes = [10 + 3 * i for i in range(n)]
    sigmas = [0.8 + 0.1 * (i % 5) for i in range(n)]
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-4, relation="replace_one",
                           privacy_unit="client", pld_every=0)
    u = _lcg(5)
    for t in range(18):
        parts = _fixed_cohort(n, k, u)
        if t == 7:
            parts = parts[:2]  # dropouts
        tot = sum(sizes[c] for c in parts)
        rel = federated_round_releases(parts, [sigmas[c] for c in parts], 2.0, [sizes[c] / tot for c in parts],
                                       server_noise_std=0.05, per_client_public=True)
        _record(ledger, t, rel, sampling, parts, claimed={c: 0.1 * (t + 1) * (1 + c) for c in range(n)})
    parts = [0, 3, 6, 9]
    tot = sum(sizes[c] for c in parts)
    nxt = federated_round_releases(parts, [sigmas[c] for c in parts], 2.0, [sizes[c] / tot for c in parts],
                                   server_noise_std=0.05, per_client_public=True)
    return ledger, [(nxt, parts)]


def ledger_all_mixed() -> tuple[Any, list[Any]]:
    """Full participation with dropouts (partial rounds), two-point reports, DP-SGD steps, an
    exact release for one client, shared broadcasts and one client that never takes part."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import Release, SampledGaussianRelease

    n, sampling = 8, {"kind": "all"}
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-5, relation="add_remove",
                           privacy_unit="record", pld_every=3, pld_discretization=1e-2)
    for t in range(9):
        parts = [c for c in range(n - 1) if (c + t) % 4 != 0]  # client 7 never takes part
        rel: list[Any] = [
            SampledGaussianRelease("server", 1.0 + 0.1 * (t % 2), 0.1, 5, tuple(parts)),
            SampledGaussianRelease("public", 1.0 + 0.1 * (t % 2), 0.1, 5, tuple(parts)),
            Release.gaussian("public", 3.0, 1.0, None),
        ]
        if t % 3 == 0:
            rel.append(Release.gaussian("server", 2.0 + t, 1.0, parts[:2]))
        _record(ledger, t, rel, sampling, parts)
    nxt = [SampledGaussianRelease("server", 1.0, 0.1, 5, (1, 2)), Release.gaussian("public", 3.0, 1.0, None)]
    return ledger, [(nxt, [1, 2])]


def ledger_two_point_and_exact() -> tuple[Any, list[Any]]:
    """LDP-FL's reports (randomized response, PLD per leaf) and a client-minmax exact release."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import Release

    n, sampling = 5, {"kind": "all"}
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-5, relation="replace_one",
                           privacy_unit="client", pld_every=2, pld_discretization=1e-2)
    for t in range(4):
        parts = list(range(n))
        rel: list[Any] = [Release.two_point(obs, 0.5 + 0.25 * (c % 2), 6, [c]) for obs in ("server", "public")
                          for c in parts]
        if t == 2:
            rel += [Release.exact("server", [4]), Release.exact("public", [4])]
        _record(ledger, t, rel, sampling, parts, claimed=3.0 * (t + 1))
    return ledger, [([Release.two_point("server", 0.5, 6, [0])], [0])]


def ledger_skellam() -> tuple[Any, list[Any]]:
    """Secure aggregation: hidden participation (shared, amplified Skellam) then visible (per participant)."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import SkellamRelease

    n, q, sampling = 20, 0.25, {"kind": "poisson", "sample_rate": 0.25}
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-5, relation="add_remove",
                           privacy_unit="client", pld_every=5)
    u = _lcg(3)
    for t in range(10):
        parts = _poisson_cohort(n, q, u)
        rel: list[Any] = [SkellamRelease("public", 4.0e6, 1500.0, 9000.0, None, amplifiable=True)]
        if t < 5:
            rel.append(SkellamRelease("server", 3.9e6, 1500.0, 9000.0, None, amplifiable=True))
        elif parts:
            rel.append(SkellamRelease("server", 3.9e6 * len(parts) / 5.0, 1500.0, 9000.0, tuple(parts)))
        _record(ledger, t, rel, sampling, parts)
    return ledger, [([SkellamRelease("server", 3.0e6, 1500.0, 9000.0, (2, 3))], [2, 3])]


def ledger_decaying_noise() -> tuple[Any, list[Any]]:
    """A broadcast whose noise changes every round (many distinct sampled events: PLD groups them
    on a grid) and per-upload noise that changes too."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import Release

    n, q, sampling = 16, 0.3, {"kind": "poisson", "sample_rate": 0.3}
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-5, relation="add_remove",
                           privacy_unit="client", pld_every=0, pld_discretization=2e-2)
    u = _lcg(7)
    for t in range(70):
        parts = _poisson_cohort(n, q, u)
        z = 3.0 * 0.985**t
        rel = [Release.gaussian("public", z, 1.0, None, amplifiable=True)]
        if parts:
            rel.append(Release.gaussian("server", z / math.sqrt(len(parts)), 1.0, parts))
        _record(ledger, t, rel, sampling, parts)
    return ledger, [([Release.gaussian("public", 2.0, 1.0, None, amplifiable=True)], [0])]


def ledger_public_known_cohort() -> tuple[Any, list[Any]]:
    """``sample_secret=False``: the public knows the cohort, so a broadcast is charged per participant."""
    from dpfl.privacy.accounting.ledger import PrivacyLedger
    from dpfl.privacy.releases import federated_round_releases

    n, sampling = 9, {"kind": "all"}
    ledger = PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-6, relation="add_remove",
                           privacy_unit="client", sample_secret=False, pld_every=0)
    for t in range(12):
        parts = [c for c in range(n) if (c * 7 + t) % 5 != 1]
        rel = federated_round_releases(parts, 1.5, 1.0, [1.0 / len(parts)] * len(parts), server_noise_std=0.1)
        _record(ledger, t, rel, sampling, parts)
    return ledger, [(federated_round_releases([0, 1], 1.5, 1.0, [0.5, 0.5]), [0, 1])]


LEDGERS: dict[str, Callable[[], tuple[Any, list[Any]]]] = {
    "poisson-split-noise": ledger_poisson_split_noise,
    "fixed-personalized": ledger_fixed_personalized,
    "all-mixed": ledger_all_mixed,
    "two-point-and-exact": ledger_two_point_and_exact,
    "skellam": ledger_skellam,
    "decaying-noise": ledger_decaying_noise,
    "public-known-cohort": ledger_public_known_cohort,
}


def _certs(ledger: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method in ("rdp", "best"):
        for obs in ("server", "public", None):
            out[f"{obs}/{method}"] = ledger.certify(obs, None, method).to_dict()
        for obs in ("server", "public"):
            for cid in sorted({0, 1, ledger.num_clients - 1}):
                out[f"{obs}/{method}/client{cid}"] = ledger.certify(obs, cid, method).to_dict()
            out[f"{obs}/{method}/clients"] = {str(c): e for c, e in ledger.client_epsilons(obs, method).items()}
    out["certify_all"] = ledger.certify_all("best")
    return out


def ledger_case(name: str) -> dict[str, Any]:
    from dpfl.privacy.accounting.ledger import PrivacyLedger

    ledger, trials = LEDGERS[name]()
    out: dict[str, Any] = {"certificates": _certs(ledger), "history": ledger.history,
                           "claimed": ledger.claimed_epsilon, "stored": ledger.to_dict()}
    answers = []
    for releases, parts in trials:
        for method in ("rdp", "best"):
            for obs in (None, "server", "public"):
                worst = ledger.certify(obs, None, method).epsilon
                for target in (0.5 * worst, worst, worst * (1 + 1e-6), 2.0 * worst + 1.0):
                    if not math.isfinite(target) or target <= 0:
                        continue
                    answers.append(bool(ledger.would_exceed(releases, target, participants=parts, method=method,
                                                            observer=obs)))
        budget = PrivacyLedger.from_dict(ledger.to_dict())
        budget.record_round(-1, releases, sampling=ledger.sampling, participants=parts, certify_round=False)
        answers.append(ledger.within_budget(budget, releases, participants=parts))
        answers.append(ledger.within_budget(budget, releases + releases, participants=parts))
        answers.append(ledger.within_budget(ledger, releases, participants=parts))
    out["answers"] = answers
    return out


# --------------------------------------------------------------------------- comparison


def _num(x: Any) -> float | None:
    if x == "inf":
        return math.inf
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    return None


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Equal structure and strings; numbers to a relative 1e-9 (infinities and NaN exactly)."""
    g, w = _num(got), _num(want)
    if g is not None and w is not None:
        if math.isinf(w) or math.isnan(w):
            assert (math.isinf(g) and g == w) or (math.isnan(g) and math.isnan(w)), (where, got, want)
        else:
            assert g == pytest.approx(w, rel=1e-9, abs=1e-12), (where, got, want)
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), (where, sorted(got), sorted(want))
        for k in want:
            assert_same(got[k], want[k], f"{where}/{k}")
        return
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (where, got, want)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
        return
    assert got == want, (where, got, want)


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str, allow_nan=True).replace("Infinity", '"inf"'))


KINDS: dict[str, tuple[dict[str, Any], Callable[[str], dict[str, Any]]]] = {
    "dry": (DRY, dry_case),
    "shortcut": (SHORTCUTS, shortcut_case),
    "ledger": (LEDGERS, ledger_case),
}


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("kind,name", [(k, n) for k, (cases, _) in KINDS.items() for n in cases])
def test_certified_numbers_are_unchanged(kind: str, name: str) -> None:
    want = _golden()[kind][name]
    got = _jsonable(KINDS[kind][1](name))
    assert_same(got, want, f"{kind}/{name}")


@pytest.mark.parametrize("name", list(LEDGERS))
def test_a_stored_ledger_of_the_current_format_loads_and_certifies_the_same(name: str) -> None:
    from dpfl.privacy.accounting.ledger import PrivacyLedger

    want = _golden()["ledger"][name]
    ledger = PrivacyLedger.from_dict(want["stored"])
    assert_same(_jsonable(ledger.to_dict()), want["stored"], f"{name}/stored")
    got = _jsonable(_certs(ledger))
    assert_same(got, want["certificates"], f"{name}/certificates")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(GOLDEN))
    args = parser.parse_args()
    data = {kind: {name: _jsonable(fn(name)) for name in cases} for kind, (cases, fn) in KINDS.items()}
    Path(args.out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
