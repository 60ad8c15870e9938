"""The implementation of ``dpfl account`` (parser: :mod:`dpfl.commands.account`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any

import dp_accounting as dpa

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy import calibration
from dpfl.privacy.accounting import claimed as claims
from dpfl.privacy.accounting.certify import (
    MAX_PLD_SAMPLED_COMPOSITIONS,
    Certificate,
    binomial_upper_bound,
    calibrate_noise_multiplier,
    certify,
)
from dpfl.privacy.accounting.events import (
    PrivacyUnit,
    Relation,
    aggregate_noise_std,
    gaussian_event,
    two_point_event,
)
from dpfl.privacy.accounting.shuffle import shuffled_two_point_epsilon
from dpfl.privacy.notices import collect_range_warnings
from dpfl.sampling.clients import FixedSizeSampler, PoissonSampler

_SERVER_NOTE = "the server sees every upload and knows whom it sampled: no sampling amplification"


# --------------------------------------------------------------------------- validation


def _positive(name: str, value: float | int | None) -> float:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"`--{name}` must be a finite number > 0. Found {value!r}.")
    return float(value)


def _positive_int(name: str, value: int | None) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`--{name}` must be a positive integer. Found {value!r}.")
    return value


def _delta(value: float | None) -> float:
    if value is None or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise ConfigError(f"`--delta` must be in (0, 1). Found {value!r}.")
    return float(value)


def _sampled(sampled: int | None, clients: int, name: str = "sampled") -> int:
    k = clients if sampled is None else _positive_int(name, sampled)
    if k > clients:
        raise ConfigError(f"`--{name}` ({k}) must not exceed `--clients` ({clients}).")
    return k


def _one_of(args: argparse.Namespace, a: str, b: str) -> str:
    va, vb = getattr(args, a.replace("-", "_")), getattr(args, b.replace("-", "_"))
    if (va is None) == (vb is None):
        raise ConfigError(f"give exactly one of `--{a}` (inverse) and `--{b}` (forward).")
    return a if va is not None else b


# --------------------------------------------------------------------------- helpers


def _jsonable(value: Any) -> Any:
    if isinstance(value, Certificate):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _participation(rounds: int, rate: float, delta: float) -> tuple[int, float, list[str]]:
    """(rounds to compose against the server, δ left for them, notes)."""
    if rate >= 1.0:
        return rounds, delta, []
    k = binomial_upper_bound(rounds, rate, delta / 2.0)
    return k, delta / 2.0, [
        f"a client takes part in at most {k} of {rounds} rounds except with probability "
        f"{delta / 2:.3g} (Binomial({rounds}, {rate:.4g}) tail); those {k} releases are "
        "certified at delta/2 so that the statement holds at delta"
    ]


def _with_delta(cert: Certificate, delta: float, notes: list[str]) -> Certificate:
    return dataclasses.replace(cert, delta=delta, notes=tuple(notes) + cert.notes)


def _server_gaussian(
    noise_multiplier: float, releases: int, delta_left: float, delta: float, relation: str,
    unit: str, notes: list[str], pld_discretization: float,
) -> Certificate:
    event: dpa.DpEvent
    if releases == 0 or math.isinf(noise_multiplier):
        event = dpa.NoOpDpEvent()
    elif releases == 1:
        event = gaussian_event(noise_multiplier, 1.0)
    else:
        event = dpa.SelfComposedDpEvent(gaussian_event(noise_multiplier, 1.0), releases)
    cert = certify(event, delta_left, relation=relation, privacy_unit=unit, observer="server",
                   pld_discretization=pld_discretization)
    return _with_delta(cert, delta, [*notes, _SERVER_NOTE])


def _headline(observers: dict[str, Certificate]) -> dict[str, Any]:
    worst = max(observers.values(), key=lambda c: c.epsilon)
    return {
        "observer": worst.observer,
        "epsilon": worst.epsilon,
        "method": worst.method,
        "epsilon_rdp": worst.epsilon_rdp,
        "epsilon_pld": worst.epsilon_pld,
        "privacy_unit": worst.privacy_unit,
        "relation": worst.relation,
    }


def _emit(args: argparse.Namespace, result: dict[str, Any]) -> int:
    data = _jsonable(result)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()

    def fmt(x: Any) -> str:
        if x is None:
            return "—"
        if isinstance(x, str):
            return x
        return f"{x:.4g}"

    console.print(f"[bold]dpfl account {data['algorithm']}[/bold]  ({data['paper']})")
    for key in ("noise_std", "noise_multiplier", "sensitivity", "sample_rate"):
        if key in data and data[key] is not None:
            console.print(f"  {key}: {fmt(data[key])}")
    console.print(
        f"  claimed epsilon: [bold]{fmt(data['epsilon_claimed'])}[/bold]  — {data['claim']['notion']}"
    )
    table = Table(title=f"certified epsilon at delta = {data['delta']:g}")
    for col in ("observer", "epsilon", "method", "rdp", "pld", "unit", "relation"):
        table.add_column(col)
    for name, c in data["observers"].items():
        mark = " (headline)" if name == data["observer"] else ""
        table.add_row(name + mark, fmt(c["epsilon"]), c["method"], fmt(c["epsilon_rdp"]),
                      fmt(c["epsilon_pld"]), c["privacy_unit"], c["relation"])
    console.print(table)
    if data.get("inverse"):
        for key, value in data["inverse"].items():
            console.print(f"  inverse · {key}: {fmt(value)}")
    for note in data.get("notes", []):
        console.print(f"  note: {note}")
    for w in data.get("formula_warnings", []):
        console.print(f"  [yellow]notice:[/yellow] {w['message']}")
    return 0


def _claim_info(name: str) -> dict[str, str]:
    notion = claims.CLAIM_NOTIONS[name]
    return dataclasses.asdict(notion)


def _finish(
    args: argparse.Namespace, result: dict[str, Any], observers: dict[str, Certificate],
    notices: list[Any],
) -> int:
    result.update(_headline(observers))
    result["observers"] = observers
    rounds = result.get("rounds")
    if isinstance(rounds, int) and any(any(n.startswith("PLD: skipped") for n in c.notes) for c in observers.values()):
        print(f"dpfl: note: --rounds {rounds}: beyond {MAX_PLD_SAMPLED_COMPOSITIONS:,} sampled compositions the PLD "
              "is skipped and RDP (closed form in the number of rounds) answers", file=sys.stderr)
    unique = {n.to_dict()["message"]: n.to_dict() for n in notices}
    result["formula_warnings"] = list(unique.values())
    return _emit(args, result)


# --------------------------------------------------------------------------- udp (000)


def _udp(args: argparse.Namespace) -> int:
    mode = _one_of(args, "epsilon", "noise-std")
    delta = _delta(args.delta)
    clients = _positive_int("clients", args.clients)
    k = _sampled(args.sampled, clients)
    rounds = _positive_int("rounds", args.rounds)
    lr = _positive("lr", args.lr)
    clip = _positive("clip", args.clip)
    n = _positive_int("samples-per-client", args.samples_per_client)
    q = k / clients
    with collect_range_warnings() as notices:
        sens = calibration.udp_sensitivity(lr, clip, n)
        if mode == "epsilon":
            target = _positive("epsilon", args.epsilon)
            noise = calibration.udp_noise_std(target, delta, sens, q, rounds)
        else:
            noise = _positive("noise-std", args.noise_std)
        claimed = claims.udp_claimed_epsilon([noise], delta, sens, q, repeat=rounds)
    relation, unit, disc = "replace_one", "record", args.pld_discretization
    z = noise / sens
    k_server, d_left, part_notes = _participation(rounds, q, delta)
    server = _server_gaussian(z, k_server, d_left, delta, relation, unit, part_notes, disc)

    weights = [1.0 / k] * k

    def public_event(z_client: float) -> dpa.DpEvent:
        agg = aggregate_noise_std([z_client * sens] * k, weights)
        z_pub = agg / (sens / k)  # sensitivity of the mean: max weight × Δℓ
        return dpa.SelfComposedDpEvent(gaussian_event(z_pub, 1.0), k_server)

    mean_note = ("the public sees the mean of the K uploads: noise std sigma/sqrt(K) against sensitivity "
                 "Delta/K (000 eq. 2 with p_i = 1/K, equal client sizes)")
    # a record-level unit: sampling clients does not amplify a record's guarantee (a cohort
    # without the client is other clients' whole models), so the public is charged per
    # participation, unamplified, like a public that knows the cohort
    public = _with_delta(certify(public_event(z), d_left, relation=relation, privacy_unit=unit,
                                 observer="public", pld_discretization=disc), delta,
                         [mean_note, "charged per participation, unamplified: sampling clients does not amplify a "
                          f"record-level guarantee ({part_notes[0] if part_notes else 'every round'})"])
    pub_delta = d_left
    observers = {"server": server, "public": public}
    result: dict[str, Any] = {
        "algorithm": "udp",
        "paper": "000 (UDP), Theorem 1",
        "noise_std": noise,
        "sensitivity": sens,
        "noise_multiplier": z,
        "sample_rate": q,
        "rounds": rounds,
        "delta": delta,
        "epsilon_claimed": claimed,
        "claim": _claim_info("udp"),
        "notes": [
            "sensitivity 2*lr*C/|D_i| (000 eq. 13) holds for one full-batch step of per-sample "
            "clipped gradients only; the certified epsilon assumes exactly that local procedure",
            "not covered: the median clip norm and CRD's test-loss stopping rule are data-"
            "dependent choices that are not privatized",
        ],
    }
    if mode == "epsilon":
        with collect_range_warnings():
            z_server = calibrate_noise_multiplier(
                lambda x: dpa.SelfComposedDpEvent(gaussian_event(x, 1.0), k_server),
                target, d_left, relation=relation, pld_discretization=disc)
            z_need = z_server
            if certify(public_event(z_need), pub_delta, relation=relation, privacy_unit=unit,
                       pld_discretization=disc).epsilon > target:
                z_need = max(z_need, calibrate_noise_multiplier(
                    public_event, target, pub_delta, relation=relation, pld_discretization=disc))
        result["inverse"] = {
            "epsilon_target": target,
            "noise_std_paper": noise,
            "noise_std_certified": z_need * sens,
            "noise_ratio_certified_over_paper": z_need * sens / noise,
        }
    return _finish(args, result, observers, notices)


# --------------------------------------------------------------------------- dp-fedavg (004)


def _dpfedavg(args: argparse.Namespace) -> int:
    mode = _one_of(args, "epsilon", "noise-multiplier")
    delta = _delta(args.delta)
    q = args.sample_rate
    if q is None or not isinstance(q, (int, float)) or not 0.0 < q <= 1.0:
        raise ConfigError(f"`--sample-rate` must be in (0, 1]. Found {q!r}.")
    rounds = _positive_int("rounds", args.rounds)
    disc = args.pld_discretization
    sampler = PoissonSampler(float(q))
    relation, unit = "add_remove", "client"

    def central(z: float) -> dpa.DpEvent:
        return dpa.SelfComposedDpEvent(sampler.wrap_event(gaussian_event(z, 1.0), 1), rounds)

    inverse: dict[str, Any] | None = None
    with collect_range_warnings() as notices:
        if mode == "epsilon":
            target = _positive("epsilon", args.epsilon)
            z_claimed = claims.dpfedavg_noise_multiplier(target, q, rounds, delta)
            z_rdp = calibrate_noise_multiplier(central, target, delta, relation=relation, method="rdp", pld_discretization=disc)
            z_pld = calibrate_noise_multiplier(central, target, delta, relation=relation, method="pld", pld_discretization=disc)
            z = z_claimed  # the paper's own calibration; certified below like any other run
            inverse = {
                "epsilon_target": target,
                "noise_multiplier_paper": z_claimed,
                "noise_multiplier_rdp": z_rdp,
                "noise_multiplier_pld": z_pld,
                "noise_multiplier_certified": min(z_rdp, z_pld),
            }
        else:
            z = _positive("noise-multiplier", args.noise_multiplier)
        claimed = claims.dpfedavg_claimed_epsilon(z, q, rounds, delta)
    public = certify(central(z), delta, relation=relation, privacy_unit=unit, observer="public",
                     pld_discretization=disc)
    public = _with_delta(public, delta, [
        "central DP-FedAvg guarantee: Poisson client sampling (secret), noise multiplier on the "
        "cohort sum with the clipped update norm S as sensitivity (add/remove one client)"])
    observers = {"public": public}
    notes = [
        "dpfl divides the cohort sum by the expected cohort size pN (fixed denominator, McMahan et "
        "al. 2018), for which this is exact; 004 Alg. 1 divides by the realized |P_t|, which this "
        "does not cover",
        "not covered: LUS's sparsity mask is data-dependent; it is covered only if noise is added "
        "to every coordinate (not just the kept ones)",
    ]
    if args.clients is not None:
        clients = _positive_int("clients", args.clients)
        k_part, d_left, part_notes = _participation(rounds, q, delta / 2.0 if q < 1 else delta)
        if args.secure_aggregation:
            z_upload = z
            extra = ["what-if: secure aggregation (the server sees only the sum of the cohort's uploads); "
                     "no dpfl runtime implements it yet, and `dpfl run` refuses the setting"]
            d_server = d_left
        else:
            k_max = binomial_upper_bound(clients, q, delta / (4.0 * rounds)) if q < 1 else clients
            z_upload = z / math.sqrt(max(k_max, 1))
            extra = [
                f"each upload carries noise multiplier sigma/sqrt(|P_t|) only; |P_t| <= {k_max} "
                f"in every round except with probability {delta / 4:.3g}",
                "client-split noise protects nothing more against the server without secure "
                "aggregation",
            ]
            d_server = d_left
        server = _server_gaussian(z_upload, k_part, d_server, delta, relation, unit,
                                  [*part_notes, *extra], disc)
        observers["server"] = server
    else:
        notes.append("server observer not certified: pass --clients N (and --secure-aggregation "
                     "if the server only sees the sum)")
    result: dict[str, Any] = {
        "algorithm": "dp-fedavg",
        "paper": "004 (DP-FedAvg), Algorithm 1 / Theorem 1",
        "noise_multiplier": z,
        "sample_rate": q,
        "rounds": rounds,
        "delta": delta,
        "epsilon_claimed": claimed,
        "claim": _claim_info("dp-fedavg"),
        "notes": notes,
    }
    if inverse:
        result["inverse"] = inverse
    return _finish(args, result, observers, notices)


# --------------------------------------------------------------------------- nbafl (003)


def _nbafl(args: argparse.Namespace) -> int:
    mode = _one_of(args, "epsilon", "noise-std")
    delta = _delta(args.delta)
    clients = _positive_int("clients", args.clients)
    k = _sampled(args.sampled, clients)
    rounds = _positive_int("rounds", args.rounds)
    clip = _positive("clip", args.clip)
    m = _positive_int("min-samples", args.min_samples)
    exposures = rounds if args.exposures is None else _positive_int("exposures", args.exposures)
    disc = args.pld_discretization
    with collect_range_warnings() as notices:
        if mode == "epsilon":
            target = _positive("epsilon", args.epsilon)
            sigma_u = calibration.nbafl_uplink_noise_std(target, delta, clip, m, exposures)
            if k == clients:
                sigma_d = calibration.nbafl_downlink_noise_std(target, delta, clip, m, clients, rounds, exposures)
            else:
                sigma_d = calibration.nbafl_downlink_noise_std_k_random(
                    target, delta, clip, m, clients, k, rounds, exposures)
        else:
            sigma_u = _positive("noise-std", args.noise_std)
            sigma_d = float(args.downlink_noise_std or 0.0)
            if sigma_d < 0:
                raise ConfigError(f"`--downlink-noise-std` must be >= 0. Found {sigma_d!r}.")
        claim = claims.nbafl_claimed_epsilon(sigma_u, sigma_d, delta, clip, m, clients, rounds,
                                             exposures, None if k == clients else k)
    relation, unit = "replace_one", "client"
    q = k / clients

    def observers_for(sensitivity: float) -> dict[str, Certificate]:
        k_part, d_left, part_notes = _participation(rounds, q, delta)
        server = _server_gaussian(sigma_u / sensitivity, k_part, d_left, delta, relation, unit,
                                  part_notes, disc)
        agg = aggregate_noise_std([sigma_u] * k, [1.0 / k] * k, sigma_d)
        z_pub = agg / (sensitivity / k)
        event = gaussian_event(z_pub, 1.0)
        if k < clients:
            event = FixedSizeSampler(k).wrap_event(event, clients)
        public = certify(dpa.SelfComposedDpEvent(event, rounds), delta, relation=relation,
                         privacy_unit=unit, observer="public", pld_discretization=disc)
        public = _with_delta(public, delta, [
            "the public (downlink) sees sum_i p_i (w_i + n_i) + n_D with p_i = 1/K: noise "
            "sqrt(sigma_U^2/K + sigma_D^2) against sensitivity max_i p_i x Delta",
        ])
        return {"server": server, "public": public}

    enforced = 2.0 * clip
    observers = observers_for(enforced)
    paper_sens = calibration.nbafl_uplink_sensitivity(clip, m)
    paper = observers_for(paper_sens)
    result: dict[str, Any] = {
        "algorithm": "nbafl",
        "paper": "003 (NbAFL), Theorem 1 / Lemma 4",
        "noise_std": sigma_u,
        "downlink_noise_std": sigma_d,
        "sensitivity": enforced,
        "sensitivity_paper": paper_sens,
        "noise_multiplier": sigma_u / enforced,
        "sample_rate": q,
        "rounds": rounds,
        "exposures": exposures,
        "delta": delta,
        "epsilon_claimed": claim.epsilon,
        "epsilon_claimed_uplink": claim.uplink,
        "epsilon_claimed_downlink": claim.downlink,
        "claim": _claim_info("nbafl"),
        "epsilon_if_paper_sensitivity": {name: c.epsilon for name, c in paper.items()},
        "notes": [
            "certified with the sensitivity the code enforces: parameters clipped to C give "
            "2C under replace-one (the paper's 2C/m rests on 'argmin of a sum = mean of argmins'; "
            "epsilon_if_paper_sensitivity shows what the paper's value would give)",
            "privacy unit 'client': a parameter clip bounds any change of the client's data, "
            "which also covers one record",
            f"the server observer sees every upload; 003 assumes an uplink eavesdropper sees at "
            f"most L = {exposures} of them",
        ],
    }
    if mode == "epsilon":
        k_part, d_left, _ = _participation(rounds, q, delta)
        with collect_range_warnings():
            z_need = calibrate_noise_multiplier(
                lambda x: dpa.SelfComposedDpEvent(gaussian_event(x, 1.0), k_part),
                target, d_left, relation=relation, pld_discretization=disc)
        result["inverse"] = {
            "epsilon_target": target,
            "noise_std_paper": sigma_u,
            "downlink_noise_std_paper": sigma_d,
            "noise_std_certified": z_need * enforced,
            "noise_ratio_certified_over_paper": z_need * enforced / sigma_u,
        }
    return _finish(args, result, observers, notices)


# --------------------------------------------------------------------------- midp (002)


def _midp(args: argparse.Namespace) -> int:
    mode = _one_of(args, "epsilon", "noise-std")
    delta = _delta(args.delta)
    clients = _positive_int("clients", args.clients)
    clip = _positive("clip", args.clip)
    dim = _positive_int("dim", args.dim)
    rounds = _positive_int("rounds", args.rounds)
    disc = args.pld_discretization
    weights = [1.0 / clients] * clients
    side = args.mode
    with collect_range_warnings() as notices:
        if mode == "epsilon":
            eps_nats = _positive("epsilon", args.epsilon)
            if side == "server":
                noise = calibration.midp_server_noise_std(eps_nats, clip, 1.0 / clients, dim)
            else:
                noise = calibration.midp_client_noise_std(eps_nats, clip, weights, dim)
        else:
            noise = _positive("noise-std", args.noise_std)
        if side == "server":
            claimed = claims.midp_server_claimed_epsilon(noise, clip, 1.0 / clients, dim)
        else:
            claimed = claims.midp_client_claimed_epsilon(noise, clip, weights, dim)
    relation, unit = "replace_one", "client"
    enforced = 2.0 * clip
    agg = noise if side == "server" else aggregate_noise_std([noise] * clients, weights)
    z_pub = agg / (enforced / clients)
    z_up = 0.0 if side == "server" else noise / enforced  # 0: the server sees raw uploads

    def per_rounds(t: int) -> dict[str, Certificate]:
        srv_notes = ["uploads are not noised in the server-side scheme: the server sees them raw"] if side == "server" else []
        server = _server_gaussian(z_up, t, delta, delta, relation, unit, srv_notes, disc)
        public = certify(dpa.SelfComposedDpEvent(gaussian_event(z_pub, 1.0), t) if t > 1 else gaussian_event(z_pub, 1.0),
                         delta, relation=relation, privacy_unit=unit, observer="public",
                         pld_discretization=disc)
        return {"server": server, "public": public}

    observers = per_rounds(rounds)
    one = per_rounds(1)
    result: dict[str, Any] = {
        "algorithm": "midp",
        "paper": f"002 (MI-DP), {'Theorem 1 eq. 4.7' if side == 'server' else 'Corollary 1 eq. 4.9'}",
        "mode": side,
        "noise_std": noise,
        "sensitivity": enforced,
        "aggregate_noise_std": agg,
        "rounds": rounds,
        "delta": delta,
        "epsilon_claimed": claimed,
        "epsilon_claimed_units": "nats of epsilon-MI-DP, per round (not (epsilon, delta)-DP)",
        "claim": _claim_info("midp"),
        "epsilon_one_round": {name: c.epsilon for name, c in one.items()},
        "notes": [
            "epsilon-MI-DP is not (epsilon, delta)-DP (the paper states the implication "
            "backwards); at epsilon >= ln 2 nats MI-DP permits deterministic disclosure of a bit. "
            "The certified epsilon is for the Gaussian actually added, composed over the rounds",
            "sensitivity 2C per upload (parameters clipped to C, replace-one client), 2C/N for "
            "the equally weighted aggregate (002 eq. 4.7 uses C max p_i)",
            "not covered: the adaptive clip norm (eq. 5.17-5.18) is data-dependent",
        ],
    }
    if mode == "epsilon":
        with collect_range_warnings():
            z_need = calibrate_noise_multiplier(
                lambda x: dpa.SelfComposedDpEvent(gaussian_event(x, 1.0), rounds),
                eps_nats, delta, relation=relation, pld_discretization=disc)
        result["inverse"] = {
            "epsilon_target": eps_nats,
            "noise_std_paper": noise,
            "noise_std_certified_server_side": z_need * enforced / clients,
            "noise_std_certified_client_side": z_need * enforced,
            "note": "noise for a certified (epsilon, delta)-DP of the same number over all rounds: "
                    "server-side noise protects the public only; client-side noise must protect "
                    "each upload against the server",
        }
    return _finish(args, result, observers, notices)


# --------------------------------------------------------------------------- ldp-fl (001)


def _ldpfl_certs(eps0: float, dim: int, rounds: int, clients: int, delta: float, shuffler: bool,
                 disc: float) -> tuple[dict[str, Certificate], list[str]]:
    relation: Relation = "replace_one"
    unit: PrivacyUnit = "client"
    notes: list[str] = []
    plain = certify(two_point_event(eps0, dim, rounds), delta, relation=relation,
                    privacy_unit=unit, observer="server", pld_discretization=disc)
    shuffled: Certificate | None = None
    try:
        sc = shuffled_two_point_epsilon(eps0, clients, dim, rounds, delta)
        shuffled = Certificate(
            epsilon=sc.epsilon, delta=delta, method="shuffle", observer="public",
            privacy_unit=unit, relation=relation,
            notes=(f"shuffle amplification (Feldman-McMillan-Talwar 2021 Thm 3.1) per coordinate "
                   f"and round: ({sc.epsilon_per_release:.4g}, {sc.delta_per_release:.3g}), "
                   f"composed over {sc.releases} releases by advanced composition",),
        )
    except PrivacyPreconditionError as err:
        notes.append(f"shuffle amplification not applicable: {err}")

    def pick(observer: str, allow_shuffle: bool, extra: list[str]) -> Certificate:
        base = dataclasses.replace(plain, observer=observer, notes=tuple(extra) + plain.notes)
        if allow_shuffle and shuffled is not None and shuffled.epsilon < base.epsilon:
            return dataclasses.replace(
                shuffled, observer=observer, epsilon_rdp=plain.epsilon_rdp,
                epsilon_pld=plain.epsilon_pld, epsilon_pure=plain.epsilon_pure,
                notes=tuple(extra) + shuffled.notes + plain.notes)
        return base

    server = pick("server", shuffler, [
        "a trusted shuffler hides who sent each coordinate" if shuffler else
        "no trusted shuffler: the server can link a client's d weights (local random delays are "
        "not a trusted shuffler), so the upload composes d x rounds reports"])
    public = pick("public", True, [
        "the public sees only the per-coordinate averages, a function of the shuffled reports"])
    return {"server": server, "public": public}, notes


def _ldpfl(args: argparse.Namespace) -> int:
    mode = _one_of(args, "target-epsilon", "epsilon")
    delta = _delta(args.delta)
    dim = _positive_int("dim", args.dim)
    rounds = _positive_int("rounds", args.rounds)
    clients = _positive_int("clients", args.clients)
    disc = args.pld_discretization
    inverse: dict[str, Any] | None = None
    if mode == "target-epsilon":
        target = _positive("target-epsilon", args.target_epsilon)

        def worst(e0: float) -> float:
            obs, _ = _ldpfl_certs(e0, dim, rounds, clients, delta, args.trusted_shuffler, disc)
            return max(c.epsilon for c in obs.values())

        # pure composition meets the target at eps0 = target / (d T); grow, then bisect
        ok = target / (dim * rounds)
        bad = ok * 2.0
        while worst(bad) <= target:
            ok, bad = bad, bad * 2.0
            if bad > 60.0:
                break
        for _ in range(60):
            if bad - ok <= 1e-6 * bad:
                break
            mid = 0.5 * (ok + bad)
            if worst(mid) <= target:
                ok = mid
            else:
                bad = mid
        hi_ok = ok
        eps0 = hi_ok
        inverse = {"epsilon_target": target, "epsilon_per_weight": eps0,
                   "epsilon_per_weight_pure_composition": target / (dim * rounds)}
    else:
        eps0 = _positive("epsilon", args.epsilon)
    with collect_range_warnings() as notices:
        claim = claims.ldp_fl_claimed_epsilon(eps0, dim, rounds)
    observers, notes = _ldpfl_certs(eps0, dim, rounds, clients, delta, args.trusted_shuffler, disc)
    result: dict[str, Any] = {
        "algorithm": "ldp-fl",
        "paper": "001 (LDP-FL), eq. 2 / Theorem 1 / §4.2",
        "epsilon_per_weight": eps0,
        "dim": dim,
        "rounds": rounds,
        "clients": clients,
        "delta": delta,
        "epsilon_claimed": claim.total,
        "epsilon_claimed_unshuffled": claim.total_unshuffled,
        "claim": _claim_info("ldp-fl"),
        "notes": [
            *notes,
            "not covered: the adaptive per-layer ranges (clients' min/max) leak unless computed "
            "privately",
        ],
    }
    if inverse:
        result["inverse"] = inverse
    return _finish(args, result, observers, notices)


# --------------------------------------------------------------------------- registration


def _config(args: argparse.Namespace) -> int:
    """``dpfl account CONFIG``: :func:`dpfl.rounds.dry_run` of the config."""
    from dpfl.config import load_config
    from dpfl.rounds import dry_run

    config = load_config(args.config, args.set or [])
    notices: list[str] = []
    out = dry_run(config, notice=notices.append, per_round=bool(getattr(args, "per_round", False)))
    priv = out.privacy
    if priv is None:
        raise ConfigError(f"algorithm {config.algorithm.name!r} adds no noise: there is no privacy to account.")
    if args.json:
        sys.stdout.write(json.dumps(_jsonable({**out.to_dict(), "notices": notices}), indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]dpfl account[/bold] {args.config}  ({config.algorithm.name}, dry run of "
                  f"{out.rounds} rounds: no training)")
    claimed = priv.claimed_max
    console.print(f"  claimed epsilon: [bold]{'—' if claimed is None else f'{claimed:.4g}'}[/bold]  — "
                  f"{priv.claim_notion}")
    head = priv.headline
    if priv.certified is not None and head is not None:
        table = Table(title=f"certified epsilon at delta = {priv.delta:g}")
        for col in ("observer", "epsilon", "method", "rdp", "pld", "unit", "relation"):
            table.add_column(col)
        f = (lambda x: "—" if x is None else f"{float(x):.4g}")  # noqa: E731
        for name, c in priv.certified.items():
            table.add_row(name + (" (headline)" if name == head.observer else ""), f(c.epsilon), c.method,
                          f(c.epsilon_rdp), f(c.epsilon_pld), c.privacy_unit, c.relation)
        console.print(table)
    if out.per_round:
        table = Table(title="certified epsilon (RDP) after each round")
        for col in ("round", "server", "public"):
            table.add_column(col)
        for row in out.per_round:
            table.add_row(str(row["round"]), f"{float(row['server']):.4g}", f"{float(row['public']):.4g}")
        console.print(table)
    if priv.certified_basis:
        console.print(f"  basis: {priv.certified_basis}")
    if out.stop_reason:
        console.print(f"  the run would stop early: {out.stop_reason}")
    for line in priv.not_covered:
        console.print(f"  not covered: {line}")
    for line in dict.fromkeys(notices):
        console.print(f"  [yellow]notice:[/yellow] {line}")
    return 0
