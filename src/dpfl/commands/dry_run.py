"""What ``dpfl account`` runs (its parser: :mod:`dpfl.commands.account`).

Every form is a dry run (:func:`dpfl.rounds.dry_run`): ``dpfl account CONFIG`` of the config, and
each per-paper shortcut of the run config its arguments describe — built by
:func:`dpfl.rounds.build_plan` from shapes only (client sizes, number of parameters), so the
algorithm objects, sampling, calibration, privacy gate and ledger are the ones a run of that
config uses. A shortcut only translates its arguments into that config (printed under
``config`` with ``--json``: ``dpfl account`` of it gives the same numbers); where an argument is
a noise level and the algorithm's option is the paper's ε, the paper's own formula
(:mod:`dpfl.privacy.calibration`, :mod:`dpfl.privacy.accounting.claimed`) turns the one into
the other. No accounting happens here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpfl.errors import ConfigError

# --------------------------------------------------------------------------- validation


def _positive(name: str, value: float | int | None) -> float:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"`--{name}` must be a finite number > 0. Found {value!r}.")
    return float(value)


def _positive_int(name: str, value: int | None) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`--{name}` must be a positive integer. Found {value!r}.")
    return value


def _rounds(value: int | None) -> int:
    from dpfl.config import MAX_ROUNDS

    rounds = _positive_int("rounds", value)
    if rounds > MAX_ROUNDS:
        raise ConfigError(f"`--rounds` must be at most {MAX_ROUNDS:,} (a run config's limit; the dry run "
                          f"goes round by round). Found {rounds}.")
    return rounds


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
        raise ConfigError(f"give exactly one of `--{a}` and `--{b}`.")
    return a if va is not None else b


# --------------------------------------------------------------------------- the dry run of a shortcut


def _raw_config(name: str, options: dict[str, Any], *, rounds: int, delta: float, clients: int,
                samples: int, sampling: dict[str, Any], local: dict[str, Any] | None = None,
                privacy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run config a shortcut describes, as a YAML config would write it."""
    raw: dict[str, Any] = {
        "name": f"account-{name}",
        "rounds": rounds,
        "partition": {"kind": "iid", "num_clients": clients, "samples_per_client": samples},
        "algorithm": {"name": name, "options": options},
        "sampling": sampling,
        "privacy": {"delta": delta, **(privacy or {})},
    }
    if local is not None:
        raw["local"] = local
    return raw


def _sampling(sampled: int, clients: int) -> dict[str, Any]:
    return {"kind": "all"} if sampled == clients else {"kind": "fixed", "clients_per_round": sampled}


# --------------------------------------------------------------------------- what each shortcut runs, in words

_PAPERS = {"udp": "000 UDP", "ldp-fl": "001 LDP-FL", "midp-server": "002 MI-DP", "midp-client": "002 MI-DP",
           "nbafl": "003 NbAFL", "dp-fedavg": "004 DP-FedAvg"}


def describe_config(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    """(paper, noise, sampling): what a shortcut's run config runs, in words — read from the config
    itself (its algorithm, options, privacy and sampling), so a label cannot say another variant."""
    algo = raw["algorithm"]
    name, opts = str(algo["name"]), dict(algo.get("options") or {})
    privacy, kind = dict(raw.get("privacy") or {}), str((raw.get("sampling") or {}).get("kind", "all"))
    if name == "dp-fedavg":
        if privacy.get("secure_aggregation"):
            noise = (f"distributed Skellam noise in a secure sum, {privacy.get('participation') or 'visible'} "
                     "participation")
        elif opts.get("variant", "local") == "central":
            noise = "Gaussian noise added by the server, no secure aggregation: the server sees each upload"
        else:
            noise = "Gaussian noise split over the clients, no secure aggregation: the server sees each upload"
    elif name == "udp":
        noise = "Gaussian noise on each upload, Theorem 1"
    elif name == "nbafl":
        noise = "Gaussian noise on each upload, Theorem 1 / Lemma 4"
    elif name == "midp-server":
        noise = "noise added by the server, eq. 4.7"
    elif name == "midp-client":
        noise = "noise on each upload, eq. 4.9"
    elif name == "ldp-fl":
        noise = "two-point randomizer on each weight, eq. 2"
    else:
        noise = f"algorithm {name!r}"
    sampling = {"all": "every client each round", "fixed": "K clients at random each round",
                "poisson": "Poisson sampling"}.get(kind, f"sampling {kind!r}")
    return _PAPERS.get(name, name), noise, sampling


def compose_label(forms: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """A shortcut's ``--help`` label from the configs it builds: the first form's (no flag) paper,
    noise and sampling, then what each other form (its flag) changes."""
    (_, first), *others = forms
    paper, noise, sampling = describe_config(first)
    parts = [noise, sampling]
    for flag, raw in others:
        _, n, smp = describe_config(raw)
        parts.append(f"{flag}: " + ", ".join(x for x, base in ((n, noise), (smp, sampling)) if x != base))
    return f"{paper} ({'; '.join(parts)})"


def _label_forms() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each shortcut's configs, with placeholder numbers, as its builders below write them: with no
    flag, then with each flag that changes what runs (tests/unit/commands/test_account_labels.py
    holds them to the configs the shortcuts build)."""
    few: dict[str, Any] = {"rounds": 1, "delta": 1e-5, "clients": 2, "samples": 1}
    dpfedavg = {"noise_multiplier": 1.0, "clip_norm": 1.0}
    poisson = {"kind": "poisson", "sample_rate": 0.5}
    return {
        "udp": [("", _raw_config("udp", {}, **few, sampling=_sampling(2, 2))),
                ("--sampled", _raw_config("udp", {}, **few, sampling=_sampling(1, 2)))],
        "dp-fedavg": [("", _raw_config("dp-fedavg", dpfedavg, **few, sampling=poisson)),
                      ("--secure-aggregation", _raw_config("dp-fedavg", dpfedavg, **few, sampling=poisson,
                                                           privacy=_secure_privacy(True, None)))],
        "nbafl": [("", _raw_config("nbafl", {}, **few, sampling=_sampling(2, 2))),
                  ("--sampled", _raw_config("nbafl", {}, **few, sampling=_sampling(1, 2)))],
        "midp": [("", _raw_config(_midp_name("client"), {}, **few, sampling={"kind": "all"})),
                 ("--mode server", _raw_config(_midp_name("server"), {}, **few, sampling={"kind": "all"}))],
        "ldp-fl": [("", _raw_config("ldp-fl", {}, **few, sampling={"kind": "all"}))],
    }


def shortcut_label(name: str) -> str:
    """The ``--help`` label of shortcut ``name``: :func:`compose_label` of the configs it builds."""
    return compose_label(_label_forms()[name])


def _secure_privacy(secure: bool, participation: str | None) -> dict[str, Any] | None:
    """``privacy`` entries of ``dp-fedavg --secure-aggregation [--participation P]``."""
    return {"secure_aggregation": True, "participation": participation or "visible"} if secure else None


def _midp_name(side: str) -> str:
    """The algorithm ``midp --mode side`` runs."""
    return f"midp-{side}"


@dataclass
class _Dry:
    """A shortcut's config, its plan (the built algorithm) and its dry run."""

    config: Any
    plan: Any
    out: Any
    notices: list[str] = field(default_factory=list)


def dry_run_shortcut(raw: dict[str, Any], client_sizes: list[int], num_params: int, *,
                     per_round: bool = False) -> _Dry:
    """Parse ``raw``, build its plan from shapes and dry-run it (what every shortcut does)."""
    from dpfl.config import parse_config
    from dpfl.rounds import build_plan, dry_run

    config = parse_config(raw)
    plan = build_plan(config, client_sizes, num_params)
    notices: list[str] = []
    out = dry_run(config, notices.append, per_round=per_round, experiment=plan)
    if out.privacy is None or out.privacy.certified is None:
        raise ConfigError(f"algorithm {config.algorithm.name!r} released nothing in the dry run: there is no "
                          "privacy to account.")
    return _Dry(config, plan, out, notices)


def _jsonable(value: Any) -> Any:
    from dpfl.privacy.accounting.certify import Certificate
    from dpfl.rounds.result import json_epsilon

    if isinstance(value, Certificate):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return json_epsilon(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _result(algorithm: str, paper: str, dry: _Dry, facts: dict[str, Any]) -> dict[str, Any]:
    """The shortcut's output: the dry run's privacy summary, flattened as the documented keys."""
    out, priv = dry.out, dry.out.privacy
    head = priv.headline
    result: dict[str, Any] = {
        "algorithm": algorithm,
        "paper": paper,
        **facts,
        "rounds": out.rounds,
        "delta": priv.delta,
        "epsilon_claimed": priv.claimed_max,
        "claim_notion": priv.claim_notion,
        "claim_comparable": priv.claim_comparable,
        "observer": head.observer,
        "epsilon": head.epsilon,
        "method": head.method,
        "epsilon_rdp": head.epsilon_rdp,
        "epsilon_pld": head.epsilon_pld,
        "privacy_unit": head.privacy_unit,
        "relation": head.relation,
        "observers": dict(priv.certified),
        "not_covered": list(priv.not_covered),
        "notices": list(dict.fromkeys(dry.notices)),
    }
    if out.stop_reason:
        result["stop_reason"] = out.stop_reason
    if out.per_round:
        result["per_round"] = list(out.per_round)
    result["config"] = dry.config.model_dump(mode="json")
    return result


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return str(x).lower()
    return f"{float(x):.4g}"


def _print_privacy(console: Any, priv: Any, per_round: Any, label: str | None = None) -> None:
    """The claimed ε, the certificate table and the per-round ε (both forms of ``dpfl account``)."""
    from rich.table import Table

    console.print(f"  claimed epsilon: [bold]{_fmt(priv.claimed_max)}[/bold]  — {priv.claim_notion}")
    head = priv.headline
    if priv.certified is not None and head is not None:
        title = f"certified epsilon at delta = {priv.delta:g}" + (f" — {label}" if label else "")
        table = Table(title=title)
        for col in ("observer", "epsilon", "method", "rdp", "pld", "unit", "relation", "basis"):
            table.add_column(col)
        for name, c in priv.certified.items():
            table.add_row(name + (" (headline)" if name == head.observer else ""), _fmt(c.epsilon), c.method,
                          _fmt(c.epsilon_rdp), _fmt(c.epsilon_pld), c.privacy_unit, c.relation,
                          c.basis or "—")
        console.print(table)
        for basis, text in sorted({(c.basis, c.basis_text) for c in priv.certified.values() if c.basis}):
            console.print(f"  basis {basis}: {text}")
        for note in dict.fromkeys(n for c in priv.certified.values() for n in c.notes if n.startswith("relation: ")):
            console.print(f"  {note}")
        for line in priv.readings():
            console.print(f"  {line}")
        if priv.spent:
            console.print("  spent (composition of what happened, not a guarantee): "
                          + ", ".join(f"{o} {_fmt(c.epsilon)}" for o, c in priv.spent.items()))
    if per_round:
        table = Table(title="certified epsilon (RDP) after each round")
        for col in ("round", "server", "public"):
            table.add_column(col)
        for row in per_round:
            table.add_row(str(row["round"]), _fmt(row["server"]), _fmt(row["public"]))
        console.print(table)


def _emit(args: argparse.Namespace, result: dict[str, Any], dry: _Dry) -> int:
    if args.json:
        sys.stdout.write(json.dumps(_jsonable(result), indent=2) + "\n")
        return 0
    from rich.console import Console

    console = Console()
    console.print(f"[bold]dpfl account {result['algorithm']}[/bold]  ({result['paper']}; dry run of "
                  f"{result['rounds']} rounds of config `{dry.config.algorithm.name}`: no training)")
    for key in ("noise_std", "downlink_noise_std", "noise_multiplier", "sensitivity", "sample_rate",
                "epsilon_per_weight"):
        if result.get(key) is not None:
            console.print(f"  {key}: {_fmt(result[key])}")
    sec = result.get("secure_aggregation")
    _print_privacy(console, dry.out.privacy, dry.out.per_round,
                   f"secure aggregation, {sec['participation']} participation" if sec else None)
    if sec:
        console.print(f"  secure aggregation: {sec['mechanism']}; " + ", ".join(
            f"{k} = {v if isinstance(v, int) else _fmt(v)}" for k, v in sec.items()
            if k not in ("participation", "mechanism")))
    for key, value in result.get("inverse", {}).items():
        console.print(f"  inverse · {key}: {_fmt(value)}")
    for key, value in result.get("what_if", {}).items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} = {_fmt(v)}" for k, v in value.items() if not isinstance(v, str))
        console.print(f"  [cyan]what-if[/cyan] · {key}: {value}")
    if result.get("stop_reason"):
        console.print(f"  the run would stop early: {result['stop_reason']}")
    for line in result["not_covered"]:
        console.print(f"  not covered: {line}")
    for line in result["notices"]:
        console.print(f"  [yellow]notice:[/yellow] {line}")
    return 0


# --------------------------------------------------------------------------- udp (000)


def _udp(args: argparse.Namespace) -> int:
    """000 UDP: the paper's ε (or the ε whose Thm 1 noise is ``--noise-std``) as ``udp``'s option."""
    from dpfl.algorithms.udp import udp_epsilon_for_noise_std
    from dpfl.privacy.notices import collect_range_warnings

    mode = _one_of(args, "epsilon", "noise-std")
    delta = _delta(args.delta)
    clients = _positive_int("clients", args.clients)
    k = _sampled(args.sampled, clients)
    rounds = _rounds(args.rounds)
    lr = _positive("lr", args.lr)
    clip = _positive("clip", args.clip)
    n = _positive_int("samples-per-client", args.samples_per_client)
    if mode == "epsilon":
        epsilon = _positive("epsilon", args.epsilon)
    else:
        noise = _positive("noise-std", args.noise_std)
        with collect_range_warnings():  # the build below notes the formula's range
            # the ε whose Thm 1 noise (000 eq. 10) is `noise`: 000's own budget identity
            epsilon = udp_epsilon_for_noise_std(noise, delta, lr, clip, n, k / clients, rounds)
    raw = _raw_config("udp", {"epsilon": epsilon, "clip_norm": clip}, rounds=rounds, delta=delta, clients=clients,
                      samples=n, sampling=_sampling(k, clients),
                      local={"lr": lr, "epochs": 1, "batch_size": None, "steps": None})
    dry = dry_run_shortcut(raw, [n] * clients, 1, per_round=args.per_round)
    algo = dry.plan.algorithm
    result = _result("udp", "000 (UDP), Theorem 1", dry, {
        "noise_std": algo.history[0][0] if algo.history else None,
        "sensitivity": algo.sensitivities[0],
        "sample_rate": algo.sample_rate,
    })
    if mode == "epsilon":
        result["inverse"] = {"epsilon_target": epsilon, "noise_std_paper": result["noise_std"]}
    return _emit(args, result, dry)


# --------------------------------------------------------------------------- dp-fedavg (004)


def _dpfedavg(args: argparse.Namespace) -> int:
    """004 DP-FedAvg (local variant: client-split noise, Poisson sampling, fixed denominator)."""
    mode = _one_of(args, "epsilon", "noise-multiplier")
    delta = _delta(args.delta)
    q = args.sample_rate
    if q is None or not isinstance(q, (int, float)) or not 0.0 < q <= 1.0:
        raise ConfigError(f"`--sample-rate` must be in (0, 1]. Found {q!r}.")
    rounds = _rounds(args.rounds)
    clients = _positive_int("clients", args.clients)
    secure = bool(args.secure_aggregation)
    participation = getattr(args, "participation", None)
    dim_arg = getattr(args, "dim", None)
    for name, value in (("participation", participation), ("dim", dim_arg)):
        if value is not None and not secure:
            raise ConfigError(f"`--{name}` describes secure aggregation: add `--secure-aggregation`. Found "
                              f"`--{name} {value}` without it.")
    dim = 1 if dim_arg is None else _positive_int("dim", dim_arg)
    # secure aggregation as runs execute it: the config's integer pipeline and Skellam noise
    privacy = _secure_privacy(secure, participation)

    def run(noise: dict[str, float]) -> _Dry:
        # S = 1: the guarantee is scale-free (sensitivity S, noise S·sigma)
        raw = _raw_config("dp-fedavg", {**noise, "clip_norm": 1.0}, rounds=rounds, delta=delta, clients=clients,
                          samples=1, sampling={"kind": "poisson", "sample_rate": float(q)}, privacy=privacy)
        return dry_run_shortcut(raw, [1] * clients, dim, per_round=args.per_round)

    if mode == "epsilon":
        target = _positive("epsilon", args.epsilon)
        dry = run({"target_epsilon": target})  # 004's own calibration (moments accountant)
    else:
        dry = run({"noise_multiplier": _positive("noise-multiplier", args.noise_multiplier)})
    z = float(dry.plan.algorithm.noise_multiplier)
    result = _result("dp-fedavg", "004 (DP-FedAvg), Algorithm 1 / Theorem 1", dry, {
        "noise_multiplier": z, "sample_rate": float(q), "clients": clients})
    if mode == "epsilon" and secure:
        result["inverse"] = {
            "epsilon_target": target,
            "noise_multiplier_paper": z,
            "noise_multiplier_certified": None,
            "note": ("the certified inverse calibrates a Gaussian broadcast; under secure aggregation the broadcast "
                     "is the Skellam sum: read the certified epsilon at the paper's multiplier above"),
        }
    elif mode == "epsilon":
        # the smallest multiplier the accountant certifies at the target for the algorithm's own
        # broadcast event (its plan's public release under its sampler, T rounds), then the dry
        # run of that config says what it gives
        z_cert = dry.plan.algorithm.certified_noise_multiplier(target, rounds)
        check = run({"noise_multiplier": z_cert}).out.privacy
        result["inverse"] = {
            "epsilon_target": target,
            "noise_multiplier_paper": z,
            "noise_multiplier_certified": z_cert,
            "epsilon_public_at_certified": check.certified["public"].epsilon,
            "epsilon_at_certified": check.headline.epsilon,
        }
    if secure:
        sec = dry.plan.algorithm.calibration().secure_sum
        result["secure_aggregation"] = {
            "participation": participation or "visible",
            "mechanism": "distributed Skellam noise on the integer sum modulo 2^b (Agarwal, Kairouz, Liu 2021)",
            "dim": dim,
            "bits": sec.bits,
            "scale": sec.scale,
            "variance": sec.variance,
            "l2_sensitivity": sec.l2_sensitivity,
            "l1_sensitivity": sec.l1_sensitivity,
        }
    return _emit(args, result, dry)


# --------------------------------------------------------------------------- nbafl (003)


def _nbafl(args: argparse.Namespace) -> int:
    """003 NbAFL: the paper's ε (or the ε whose uplink noise is ``--noise-std``) as ``nbafl``'s option."""
    from dpfl.algorithms.nbafl import nbafl_epsilon_for_uplink_noise_std

    mode = _one_of(args, "epsilon", "noise-std")
    delta = _delta(args.delta)
    clients = _positive_int("clients", args.clients)
    k = _sampled(args.sampled, clients)
    rounds = _rounds(args.rounds)
    clip = _positive("clip", args.clip)
    m = _positive_int("min-samples", args.min_samples)
    exposures = rounds if args.exposures is None else _positive_int("exposures", args.exposures)
    downlink = args.downlink_noise or ("paper" if mode == "epsilon" else "none")
    if mode == "epsilon":
        epsilon = _positive("epsilon", args.epsilon)
    else:
        sigma_u = _positive("noise-std", args.noise_std)
        # the inverse of 003 §III-A, sigma_U = c L Delta s_U / epsilon
        epsilon = nbafl_epsilon_for_uplink_noise_std(sigma_u, delta, clip, m, exposures)
    options: dict[str, Any] = {"epsilon": epsilon, "clip_norm": clip, "downlink_noise": downlink}
    if args.exposures is not None:
        options["exposures"] = exposures
    raw = _raw_config("nbafl", options, rounds=rounds, delta=delta, clients=clients, samples=m,
                      sampling=_sampling(k, clients))
    dry = dry_run_shortcut(raw, [m] * clients, 1, per_round=args.per_round)
    algo = dry.plan.algorithm
    paper_sensitivity = algo.calibration().paper_sensitivity
    result = _result("nbafl", "003 (NbAFL), Theorem 1 / Lemma 4", dry, {
        "noise_std": algo.uplink_noise_std,
        "downlink_noise_std": algo.downlink_noise_std,
        "sensitivity": 2.0 * clip,
        "sensitivity_paper": paper_sensitivity,
        "sample_rate": k / clients,
        "exposures": exposures,
        "epsilon_paper": epsilon,
    })
    if mode == "epsilon":
        result["inverse"] = {"epsilon_target": epsilon, "noise_std_paper": algo.uplink_noise_std,
                             "downlink_noise_std_paper": algo.downlink_noise_std}
    return _emit(args, result, dry)


# --------------------------------------------------------------------------- midp (002)


def _midp(args: argparse.Namespace) -> int:
    """002 MI-DP: the budget in nats (or the one whose eq. 4.7 / 4.9 noise is ``--noise-std``) as
    ``midp-server`` / ``midp-client``'s option; N clients of equal weight 1/N."""
    import torch

    from dpfl.algorithms.midp import midp_epsilon_for_noise_std
    from dpfl.client.context import RoundInfo

    mode = _one_of(args, "epsilon", "noise-std")
    delta = _delta(args.delta)
    clients = _positive_int("clients", args.clients)
    clip = _positive("clip", args.clip)
    dim = _positive_int("dim", args.dim)
    rounds = _rounds(args.rounds)
    side = args.mode
    weights = [1.0 / clients] * clients
    if mode == "epsilon":
        eps_nats = _positive("epsilon", args.epsilon)
    else:
        noise = _positive("noise-std", args.noise_std)
        eps_nats = midp_epsilon_for_noise_std(side, noise, clip, weights, dim)
    raw = _raw_config(_midp_name(side), {"epsilon": eps_nats, "clip_norm": clip, "weighting": "uniform"},
                      rounds=rounds, delta=delta, clients=clients, samples=1, sampling={"kind": "all"})
    dry = dry_run_shortcut(raw, [1] * clients, dim, per_round=args.per_round)
    # the noise the algorithm adds: its own plan of a round with every client (eq. 4.7 / 4.9)
    algo = dry.plan.algorithm
    first = algo.plan(RoundInfo(0, clients, torch.arange(clients), dry.plan.seeds))
    noise_std = first.server_std if side == "server" else first.client_std
    result = _result("midp", f"002 (MI-DP), {'Theorem 1 eq. 4.7' if side == 'server' else 'Corollary 1 eq. 4.9'}",
                     dry, {"mode": side, "noise_std": noise_std, "sensitivity": 2.0 * clip, "dim": dim,
                           "epsilon_mi_dp_nats": eps_nats})
    if mode == "epsilon":
        result["inverse"] = {"epsilon_target": eps_nats, "noise_std_paper": noise_std}
    return _emit(args, result, dry)


# --------------------------------------------------------------------------- ldp-fl (001)


def _ldpfl_options(args: argparse.Namespace, eps0: float) -> dict[str, Any]:
    options: dict[str, Any] = {"epsilon": eps0, "range": args.range}
    if args.range == "fixed":
        options["radius"] = 1.0  # where the weights are clipped: no effect on privacy
    return options


def _largest_meeting(target: float, start: float, worst: Callable[[float], float], name: str) -> float:
    """The largest x with worst(x) <= target (worst increasing), from ``start`` with worst(start) <= target:
    doubling, then bisection to a relative 1e-4 (the answer is on the safe side)."""
    if not worst(start) <= target:
        raise ConfigError(f"`--{name}` {target:g} cannot be met: even {start:.4g} per weight gives a larger "
                          "certified epsilon (client-minmax ranges are an exact release: epsilon = inf).")
    ok, bad = start, 2.0 * start
    while worst(bad) <= target:
        ok, bad = bad, 2.0 * bad
        if bad > 64.0:
            return ok
    while bad - ok > 1e-4 * bad:
        mid = 0.5 * (ok + bad)
        ok, bad = (mid, bad) if worst(mid) <= target else (ok, mid)
    return ok


def _ldpfl(args: argparse.Namespace) -> int:
    """001 LDP-FL: the per-weight ε of eq. 2 as ``ldp-fl``'s option; every one of n clients each round."""
    mode = _one_of(args, "target-epsilon", "epsilon")
    delta = _delta(args.delta)
    dim = _positive_int("dim", args.dim)
    rounds = _rounds(args.rounds)
    clients = _positive_int("clients", args.clients)

    def run(eps0: float, per_round: bool = False) -> _Dry:
        raw = _raw_config("ldp-fl", _ldpfl_options(args, eps0), rounds=rounds, delta=delta, clients=clients,
                          samples=1, sampling={"kind": "all"})
        return dry_run_shortcut(raw, [1] * clients, dim, per_round=per_round)

    inverse: dict[str, Any] | None = None
    if mode == "target-epsilon":
        target = _positive("target-epsilon", args.target_epsilon)
        # pure composition of d*T reports meets the target at target / (d T): search upwards, each
        # candidate priced by the dry run itself
        eps0 = _largest_meeting(target, target / (dim * rounds),
                                lambda e: float(run(e).out.privacy.headline.epsilon), "target-epsilon")
        inverse = {"epsilon_target": target, "epsilon_per_weight": eps0,
                   "epsilon_per_weight_pure_composition": target / (dim * rounds)}
    else:
        eps0 = _positive("epsilon", args.epsilon)
    dry = run(eps0, args.per_round)
    from dpfl.privacy.notices import collect_range_warnings

    with collect_range_warnings():
        claim = dry.plan.algorithm.claim(rounds)
    result = _result("ldp-fl", "001 (LDP-FL), eq. 2 / Theorem 1 / §4.2", dry, {
        "epsilon_per_weight": eps0, "dim": dim, "clients": clients, "range": args.range,
        "epsilon_claimed_unshuffled": claim.total_unshuffled})
    if inverse:
        result["inverse"] = inverse
    if args.trusted_shuffler:
        from dpfl.algorithms.ldp_fl import ldp_fl_privacy

        z = 0.0 if args.range == "client-minmax" else None  # exact bounds: epsilon = inf; fixed: free
        stmt = ldp_fl_privacy(eps0, dim, rounds, clients, delta, z)  # the run's own epsilon_total_* metrics
        result["what_if"] = {"trusted_shuffler": {**stmt.to_dict(), "note": (
            "not a certificate of the ledger: a trusted shuffler per id over the n reports of each round "
            "(Feldman-McMillan-Talwar), as a run reports it in its metrics epsilon_total_shuffled")}}
    return _emit(args, result, dry)


# --------------------------------------------------------------------------- config


def _config(args: argparse.Namespace) -> int:
    """``dpfl account CONFIG``: :func:`dpfl.rounds.dry_run` of the config."""
    from dpfl.config import load_config
    from dpfl.rounds import build_experiment, build_plan, dry_run
    from dpfl.rounds.build import plan_of

    config = load_config(args.config, args.set or [])
    colluding = _colluding_counts(getattr(args, "colluding", None), config)
    notices: list[str] = []
    experiment = build_experiment(config, train=False)
    out = dry_run(config, notice=notices.append, per_round=bool(getattr(args, "per_round", False)),
                  experiment=experiment)
    priv = out.privacy
    if priv is None:
        raise ConfigError(f"algorithm {config.algorithm.name!r} adds no noise: there is no privacy to account.")
    by_c: list[tuple[int, Any]] = []
    shapes = plan_of(experiment)  # the data are read once: each line rebuilds only the algorithm
    for c in colluding:
        other = config.model_copy(update={"privacy": config.privacy.model_copy(update={"colluding_clients": c})})
        got = dry_run(other, experiment=build_plan(other, shapes.client_sizes, shapes.num_params)).privacy
        if got is not None and got.certified is not None:
            by_c.append((c, got.certified["server"]))
    if args.json:
        extra = {"colluding": {str(c): cert.to_dict() for c, cert in by_c}} if by_c else {}
        sys.stdout.write(json.dumps(_jsonable({**out.to_dict(), **extra, "notices": notices}), indent=2) + "\n")
        return 0
    from rich.console import Console

    console = Console()
    console.print(f"[bold]dpfl account[/bold] {args.config}  ({config.algorithm.name}, dry run of "
                  f"{out.rounds} rounds: no training)")
    _print_privacy(console, priv, out.per_round)
    if priv.certified_basis:
        console.print(f"  basis: {priv.certified_basis}")
    if out.stop_reason:
        console.print(f"  the run would stop early: {out.stop_reason}")
    for line in priv.not_covered:
        console.print(f"  not covered: {line}")
    for c, cert in by_c:
        console.print(f"  against the server if at most {c} client{'s' if c != 1 else ''} of each secure sum "
                      f"collude: epsilon {_fmt_eps(cert.epsilon)} ({cert.method}; {cert.basis_text})")
    for line in dict.fromkeys(notices):
        console.print(f"  [yellow]notice:[/yellow] {line}")
    return 0


def _fmt_eps(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _colluding_counts(text: str | None, config: Any) -> list[int]:
    """``--colluding 0,10,100`` → [0, 10, 100]; only with secure aggregation."""
    if text is None:
        return []
    if not config.privacy.secure_aggregation:
        raise ConfigError("`--colluding` needs a config with `privacy.secure_aggregation: true` (without it the "
                          "server sees every upload, colluding clients or not).")
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"`--colluding` takes integers separated by commas. Found {text!r}.") from None
    if not counts or any(c < 0 for c in counts):
        raise ConfigError(f"`--colluding` takes integers >= 0. Found {text!r}.")
    return counts
