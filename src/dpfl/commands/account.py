"""``dpfl account``: claimed ε next to certified ε for a run config or a paper's parameters, without training.

``dpfl account CONFIG`` dry-runs a run config (:func:`dpfl.rounds.dry_run`): the run's own
algorithm objects, sampling, calibration, privacy gate and ledger, no training. The per-paper
shortcuts ``udp`` (000), ``dp-fedavg`` (004), ``nbafl`` (003), ``midp`` (002) and ``ldp-fl`` (001)
are thin front-ends: each builds the run config its arguments describe (printed under ``config``
with ``--json``) and dry-runs it from shapes only (:func:`dpfl.rounds.build_plan`), so a shortcut
and ``dpfl account`` of that config print the same numbers, which are the ledger's of a run.
The inverse forms take the paper's target ε (the algorithm calibrates the paper's noise); ``dp-fedavg
--epsilon`` also gives the multiplier a rigorous accountant needs for the target, and ``ldp-fl
--target-epsilon`` the largest per-weight ε whose dry run meets it. ``dp-fedavg
--secure-aggregation`` is the config with ``privacy.secure_aggregation: true`` (DP-FedAvg's integer
pipeline with distributed Skellam noise, as runs execute it; ``--participation hidden`` for hidden
participation). ``ldp-fl --trusted-shuffler`` is a what-if, labelled as such: a run's certificate
never counts a shuffler's amplification, not even where a shuffler node mixes the reports
(``dpfl federate local --shuffler``), since it rests on trusting that node.

A shortcut prints a table (default) or one JSON object (``--json``) with at least
``epsilon_claimed`` (the paper's claim; the largest per-client claim for UDP), the worst
observer's ``epsilon_rdp`` and ``epsilon_pld`` (and ``observer``, ``epsilon``, ``method``),
a per-observer breakdown under ``observers`` (each a certificate with its privacy unit,
neighbouring relation and δ), ``claim_notion``, ``not_covered``, ``notices`` and ``config``.
An infinite ε is written as the string ``"inf"``.

Against the **server** (which knows whom it sampled) nothing is amplified by sampling; a dry run
draws the cohorts with the config's seed, as the run would, and certifies the worst client of
those draws. The **public** sees only broadcast models (amplified by a secret sample where the
clients are interchangeable, see :mod:`dpfl.privacy.accounting.broadcast`).

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

def _lazy(name: str) -> Callable[[argparse.Namespace], int]:
    """The implementation ``name`` of :mod:`dpfl.commands.dry_run`, imported when it runs
    (``dpfl --help`` then loads neither dp-accounting nor torch)."""

    def run(args: argparse.Namespace) -> int:
        from dpfl.commands import preload

        if name == "_config":  # the config first (pydantic only): a typo is reported before torch loads
            from dpfl.config import load_config

            load_config(args.config, args.set or [])

        # what every dry run loads (torch, dp-accounting, pydantic), loaded before it runs
        preload("dpfl.commands.dry_run", "dpfl.config", "dpfl.rounds.build", "dpfl.rounds.session",
                "rich.console", "rich.table")
        from dpfl.commands import dry_run

        return int(getattr(dry_run, name)(args))

    return run


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--delta", type=float, required=True, help="delta of the certified epsilon")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--per-round", action="store_true", help="also the certified epsilon after each round")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``account`` and its sub-subcommands to the CLI's subparsers (each shortcut labelled from
    the configs it builds: :func:`dpfl.commands.dry_run.shortcut_label`)."""
    from dpfl.commands.dry_run import shortcut_label  # light: the shortcuts' imports are in their functions

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
    p.add_argument("--colluding", metavar="C1,C2,...",
                   help="secure aggregation: the server's epsilon if at most c clients of each secure sum collude "
                        "with it, for each c listed (one dry run each)")
    p.set_defaults(func=_lazy("_config"))

    p = sub.add_parser("udp", help=shortcut_label("udp"))
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="the paper's target epsilon (inverse)")
    g.add_argument("--noise-std", type=float, help="noise std added to the parameters (forward)")
    p.add_argument("--clients", type=int, required=True, help="U, number of clients")
    p.add_argument("--sampled", type=int, help="K, clients per round (default U)")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--lr", type=float, required=True, help="local learning rate eta")
    p.add_argument("--clip", type=float, required=True, help="per-sample gradient clip C")
    p.add_argument("--samples-per-client", type=int, required=True, help="|D_i|")
    _common(p)
    p.set_defaults(func=_lazy("_udp"))

    p = sub.add_parser("dp-fedavg", help=shortcut_label("dp-fedavg"))
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="target epsilon (inverse)")
    g.add_argument("--noise-multiplier", type=float, metavar="SIGMA", help="sigma of Alg. 1 (forward)")
    p.add_argument("--sample-rate", type=float, required=True, help="p, client sampling rate")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--clients", type=int, required=True, help="N, number of clients")
    p.add_argument("--secure-aggregation", action="store_true",
                   help="secure aggregation as dpfl runs it (`privacy.secure_aggregation: true`): each client "
                        "uploads its clipped update as integers modulo 2^31 with a share of Skellam noise and the "
                        "server obtains only their sum; priced as the Skellam sum (the PLD of its dominating Gaussian "
                        "pair, and RDP), as `dpfl account "
                        "CONFIG` prices such a config")
    p.add_argument("--participation", choices=("visible", "hidden"),
                   help="with --secure-aggregation: visible (default; the server knows whom it sampled) or hidden "
                        "(every client joins each secure sum, a secret coin of probability p decides whether its "
                        "update is in it)")
    p.add_argument("--dim", type=int,
                   help="with --secure-aggregation: d, the model's number of parameters (the integer pipeline's "
                        "dimension, which enters the rounding bound and the L1 sensitivity; default 1)")
    _common(p)
    p.set_defaults(func=_lazy("_dpfedavg"))

    p = sub.add_parser("nbafl", help=shortcut_label("nbafl"))
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="the paper's global epsilon (inverse)")
    g.add_argument("--noise-std", type=float, help="uplink noise std sigma_U (forward)")
    p.add_argument("--downlink-noise", choices=("paper", "none"),
                   help="sigma_D of Thm 1 / Lemma 4 for the same epsilon, or none (default: paper with "
                        "--epsilon, none with --noise-std)")
    p.add_argument("--clients", type=int, required=True, help="N")
    p.add_argument("--sampled", type=int, help="K under K-random scheduling (default N)")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--exposures", type=int, help="L (default T)")
    p.add_argument("--clip", type=float, required=True, help="parameter clip C")
    p.add_argument("--min-samples", type=int, required=True, help="m, smallest local data set")
    _common(p)
    p.set_defaults(func=_lazy("_nbafl"))

    p = sub.add_parser("midp", help=shortcut_label("midp"))
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

    p = sub.add_parser("ldp-fl", help=shortcut_label("ldp-fl"))
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epsilon", type=float, help="per-weight epsilon of eq. 2 (forward)")
    g.add_argument("--target-epsilon", type=float,
                   help="target certified epsilon per client (inverse)")
    p.add_argument("--dim", type=int, required=True, help="d, number of weights per upload")
    p.add_argument("--rounds", type=int, required=True, help="T")
    p.add_argument("--clients", type=int, required=True, help="n, clients per round")
    p.add_argument("--range", choices=("fixed", "client-minmax"), default="fixed",
                   help="how clients agree on the clipping range (001 §3; client-minmax is an exact "
                        "release). private-minmax needs the model's layers: `dpfl account CONFIG`")
    p.add_argument("--trusted-shuffler", action="store_true",
                   help="what-if: also the epsilon with a trusted shuffler mixing each coordinate's reports")
    _common(p)
    p.set_defaults(func=_lazy("_ldpfl"))


