"""``dpfl account``: claimed ε next to certified ε for each paper's parameters, without training.

Sub-subcommands ``udp`` (000), ``dp-fedavg`` (004), ``nbafl`` (003), ``midp`` (002) and ``ldp-fl``
(001). Each works forward (noise → ε) and inverse (the paper's target ε → the paper's noise, and
the noise a rigorous accountant needs for the same ε), and prints a table (default) or one JSON
object (``--json``) with at least ``epsilon_claimed``, the worst observer's ``epsilon_rdp`` and
``epsilon_pld``, and a per-observer breakdown under ``observers`` — each with its privacy unit,
neighbouring relation and δ. An infinite ε is written as the string ``"inf"``.

A priori statements against the **server** (which knows whom it sampled) do not use sampling
amplification; a client sampled with probability q per round takes part in at most k of T rounds
except with probability δ/2 (Binomial tail), and k unamplified releases are certified at δ/2, so
the statement holds at δ. The **public** sees only broadcast models (amplified by a secret sample).

Bad values raise :class:`dpfl.errors.ConfigError` naming the value (the CLI prints it on one line
and exits with status 2).

References:
    000 Thm 1 (eq. 10, 13); 001 eq. 2 and §4.2; 002 eq. 4.7–4.11; 003 Thm 1 (eq. 10), Lemma 4
    (eq. 21–22); 004 Alg. 1 and Thm 1; see :mod:`dpfl.privacy.accounting`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["register"]

#: the PLD grid step by default (equal to dpfl.privacy.accounting.certify.DEFAULT_PLD_DISCRETIZATION,
#: checked by a test); a literal here so that building the parser imports no accountant
PLD_DISCRETIZATION = 1e-3


def _lazy(name: str) -> Callable[[argparse.Namespace], int]:
    """The implementation ``name`` of :mod:`dpfl.commands.account_impl`, imported when it runs
    (``dpfl --help`` then loads neither dp-accounting nor torch)."""

    def run(args: argparse.Namespace) -> int:
        from dpfl.commands import account_impl

        return int(getattr(account_impl, name)(args))

    return run


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--delta", type=float, required=True, help="delta of the certified epsilon")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--pld-discretization", type=float, default=PLD_DISCRETIZATION,
                   help="PLD grid step (pessimistic: coarser only over-estimates epsilon)")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``account`` and its sub-subcommands to the CLI's subparsers."""
    account = subparsers.add_parser(
        "account", help="claimed vs certified epsilon for an algorithm's parameters",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = account.add_subparsers(dest="account_command", metavar="ALGORITHM | CONFIG", required=True)

    p = sub.add_parser(
        "config", help="dry run of a run config: the run's own sampling, calibration and ledger "
                       "(`dpfl account CONFIG` is short for `dpfl account config CONFIG`)")
    p.add_argument("config", help="a YAML file or a built-in config name")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--per-round", action="store_true", help="also the certified epsilon after each round")
    p.set_defaults(func=_lazy("_config"))

    p = sub.add_parser("udp", help="000 UDP (Theorem 1 noise)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="the paper's target epsilon (inverse)")
    g.add_argument("--noise-std", type=float, help="noise std added to the parameters (forward)")
    p.add_argument("--clients", type=int, required=True, help="U, number of clients")
    p.add_argument("--sampled", type=int, help="K, clients per round (default U)")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--lr", type=float, required=True, help="local learning rate eta")
    p.add_argument("--clip", type=float, required=True, help="per-sample gradient clip C")
    p.add_argument("--samples-per-client", type=int, required=True, help="|D_i|")
    p.add_argument("--public-knows-cohort", action="store_true",
                   help="accepted for compatibility: the public figure never assumes amplification by "
                        "client sampling (UDP protects records)")
    _common(p)
    p.set_defaults(func=_lazy("_udp"))

    p = sub.add_parser("dp-fedavg", help="004 DP-FedAvg (central, Poisson sampling)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="target epsilon (inverse)")
    g.add_argument("--noise-multiplier", type=float, help="sigma of Alg. 1 (forward)")
    p.add_argument("--sample-rate", type=float, required=True, help="p, client sampling rate")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--clients", type=int, help="N (enables the server observer)")
    p.add_argument("--secure-aggregation", action="store_true",
                   help="what-if: the server sees only the sum of the uploads (no dpfl runtime "
                        "implements secure aggregation yet; runs refuse it)")
    _common(p)
    p.set_defaults(func=_lazy("_dpfedavg"))

    p = sub.add_parser("nbafl", help="003 NbAFL (Theorem 1 / Lemma 4)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="the paper's global epsilon (inverse)")
    g.add_argument("--noise-std", type=float, help="uplink noise std sigma_U (forward)")
    p.add_argument("--downlink-noise-std", type=float, default=0.0, help="sigma_D (forward)")
    p.add_argument("--clients", type=int, required=True, help="N")
    p.add_argument("--sampled", type=int, help="K under K-random scheduling (default N)")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--exposures", type=int, help="L (default T)")
    p.add_argument("--clip", type=float, required=True, help="parameter clip C")
    p.add_argument("--min-samples", type=int, required=True, help="m, smallest local data set")
    _common(p)
    p.set_defaults(func=_lazy("_nbafl"))

    p = sub.add_parser("midp", help="002 MI-DP (server- or client-side noise)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="epsilon-MI-DP budget in nats (inverse)")
    g.add_argument("--noise-std", type=float, help="noise std actually added (forward)")
    p.add_argument("--mode", choices=("server", "client"), default="client",
                   help="where the noise is added (eq. 4.7 server, eq. 4.9 client)")
    p.add_argument("--clients", type=int, required=True, help="N (equal weights 1/N)")
    p.add_argument("--clip", type=float, required=True, help="parameter clip C")
    p.add_argument("--dim", type=int, required=True, help="d, number of model parameters")
    p.add_argument("--rounds", type=int, required=True, help="T")
    _common(p)
    p.set_defaults(func=_lazy("_midp"))

    p = sub.add_parser("ldp-fl", help="001 LDP-FL two-point randomizer")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="per-weight epsilon of eq. 2 (forward)")
    g.add_argument("--target-epsilon", type=float,
                   help="target certified epsilon per client (inverse)")
    p.add_argument("--dim", type=int, required=True, help="d, number of weights per upload")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--clients", type=int, required=True, help="n, clients per round")
    p.add_argument("--trusted-shuffler", action="store_true",
                   help="a trusted shuffler mixes each coordinate's reports")
    _common(p)
    p.set_defaults(func=_lazy("_ldpfl"))


