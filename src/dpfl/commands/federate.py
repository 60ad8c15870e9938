"""``dpfl federate``: run a config on Flower's deployment engine.

* ``dpfl federate local CONFIG --nodes N`` starts a SuperLink and N SuperNodes (node i holds
  client i; ``--shuffler`` adds the shuffler node of split & shuffle) as separate processes on
  127.0.0.1 with Flower's own commands, submits the run with ``flwr run``, streams its log and
  stops the processes. The run is stored like a simulated one (run id suffix ``-flower``), and
  the command ends with the lines ``dpfl run`` ends with (certified epsilons, and what secure
  aggregation buys); ``--csv`` / ``--tensorboard`` write the per-round metrics as ``dpfl run``'s
  do (the ServerApp's round observers). A config of more than :data:`LOCAL_NODE_LIMIT` clients
  (the built-in ``default`` has 1,000) is refused unless ``--nodes`` asks for that many: each
  client is a SuperNode, a SuperExec and a warm worker process on this one machine.
  Relative paths (config, ``--store``, ``--data-dir`` or ``data.dir``, ``PYTHONPATH``) are the
  caller's: they reach Flower's processes absolute. The processes end with the command, also when
  it is killed (:mod:`dpfl.runtime.flower.local`).
* ``dpfl federate app`` prints the Flower App directory for ``flwr run`` on real machines
  (``docs/how-to/flower.md``, "On real machines").
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpfl.errors import ConfigError
from dpfl.runtime.flower.local import ISOLATIONS
from dpfl.store import DEFAULT_STORE

LOCAL_NODE_LIMIT = 16
"""The most SuperNodes ``dpfl federate local`` starts without ``--nodes`` asking for them (each
is three processes, about 0.9 GB with an MNIST worker: torch and the data set)."""


def _config_path(name: str) -> Path:
    from dpfl.config import builtin_configs

    path = Path(name)
    if path.exists():
        return path
    builtin = builtin_configs()
    if name in builtin:
        return builtin[name]
    raise ConfigError(f"no config file {name!r} and no built-in config of that name; built-in: {sorted(builtin)}")


class _Background:
    """``fn(*args)`` in a daemon thread at the lowest CPU priority (a Ctrl-C or a failed run does not
    wait for it); :meth:`result` joins it and returns its value or raises its exception. What secure aggregation
    buys against the server is priced by dry runs of the config (the same cohorts, drawn from its
    seed): computed while the federation runs, printed after it."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._out: list[Any] = []
        self._err: list[BaseException] = []

        def work() -> None:
            try:
                # the lowest CPU priority for this thread only (Linux: a thread's own nice value): the
                # federation's processes start up on the same cores, and these lines wait for its end
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            except (AttributeError, OSError):
                pass
            try:
                self._out.append(fn(*args))
            except BaseException as err:  # noqa: BLE001 - re-raised by result()
                self._err.append(err)

        self._thread = threading.Thread(target=work, name="dpfl-background", daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join()
        if self._err:
            raise self._err[0]
        return self._out[0]


def _local(args: argparse.Namespace) -> int:
    from dpfl.config import load_config

    try:
        from dpfl.runtime.flower.local import LocalFederation
    except ModuleNotFoundError as err:
        raise ConfigError("Flower is not installed: pip install 'dpfl[flower]'") from err
    path = _config_path(args.config)
    overrides = list(args.set or [])
    config = load_config(path, overrides)
    clients = config.partition.num_clients
    nodes = args.nodes if args.nodes is not None else clients
    if nodes != clients:
        raise ConfigError(f"--nodes {nodes}: each SuperNode holds one client, and the config has "
                          f"partition.num_clients = {clients}")
    if args.nodes is None and clients > LOCAL_NODE_LIMIT:
        raise ConfigError(f"partition.num_clients = {clients}: `dpfl federate local` runs one SuperNode per client "
                          f"on this machine (3 processes each) and starts at most {LOCAL_NODE_LIMIT} unless asked; "
                          f"run fewer clients (--set partition.num_clients=4), pass --nodes {clients} to start them "
                          "all, or start SuperNodes on other machines (docs/how-to/flower.md, \"On real "
                          "machines\")")
    from dpfl.commands.run import _observers, _secure_aggregation_lines

    _observers(args)  # a missing `tensorboard` is refused here, before any process starts
    data_dir = Path(args.data_dir or config.data.dir).resolve()  # the SuperNodes' and the ServerApp's
    if args.reproducible and config.engine != "sequential":
        print(f"notice: --reproducible with engine: {config.engine}: the same cohorts and noise as `dpfl run`, but "
              "not a bit-identical model (a SuperNode trains its client alone, the simulation the whole cohort in "
              "one batched step, which rounds differently); bit-identical needs engine: sequential", flush=True)
    print(f"starting a SuperLink and {nodes} SuperNodes{' + a shuffler' if args.shuffler else ''} on 127.0.0.1",
          flush=True)
    with LocalFederation(nodes, data_dir=data_dir, shuffler=args.shuffler, workdir=args.workdir,
                         isolation=args.isolation) as fed:
        secagg_lines = _Background(_secure_aggregation_lines, config.model_copy(
            update={"data": config.data.model_copy(update={"dir": str(data_dir)})})) \
            if config.privacy.secure_aggregation else None
        result = fed.run(path, store=args.store, overrides=overrides, round_timeout=args.round_timeout,
                         connect_timeout=args.connect_timeout, reproducible=args.reproducible, echo=True,
                         timeout=args.timeout, csv=args.csv, tensorboard=args.tensorboard)
    summary = {k: v for k, v in result.items() if k != "log"}
    lines, certified = _privacy_of(summary)
    if certified:
        summary["certified_epsilon"] = certified
    print(json.dumps(summary, indent=2))
    if lines:
        print(lines)
        if secagg_lines is not None and summary.get("status") == "finished":
            print(secagg_lines.result())
    return 0 if summary.get("status") in ("finished", "stopped") else 1


def _privacy_of(summary: dict) -> tuple[str, dict[str, float | str | None]]:
    """The stored run's privacy, as ``dpfl run`` prints it, and the certified ε per observer for
    the JSON summary ("" and {} when the run or its store cannot be read here)."""
    from dpfl.commands.run import _privacy_summary
    from dpfl.rounds.result import PrivacySummary, json_epsilon
    from dpfl.store import RunStore

    run_id, store = summary.get("run_id"), summary.get("store")
    if not run_id or not store or not Path(str(store)).is_file():
        return "", {}
    record = RunStore(str(store)).find(str(run_id))
    privacy = PrivacySummary.of(record.result if record is not None else None)
    if privacy is None or not privacy.certified:
        return "", {}
    certified = {obs: json_epsilon(c.epsilon) for obs, c in privacy.certified.items()}
    return _privacy_summary(privacy), certified


def _app(args: argparse.Namespace) -> int:
    from dpfl.runtime.flower import APP_DIR

    print(APP_DIR)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("federate", help="run a config on Flower's deployment engine (SuperLink + SuperNodes)")
    sub = p.add_subparsers(dest="federate_command", metavar="WHAT")
    q = sub.add_parser("local", help="start a SuperLink and SuperNodes on 127.0.0.1 and run CONFIG on them")
    q.add_argument("config", help="a YAML config file or a built-in config name")
    q.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value")
    q.add_argument("--nodes", type=int, default=None,
                   help=f"SuperNodes (one per client; default partition.num_clients, refused above {LOCAL_NODE_LIMIT} "
                        "unless given)")
    q.add_argument("--shuffler", action="store_true", help="add a shuffler SuperNode (split & shuffle, 001)")
    q.add_argument("--data-dir", default=None, help="data directory the SuperNodes read (default: data.dir)")
    q.add_argument("--store", default=str(DEFAULT_STORE), help="run store (SQLite file)")
    q.add_argument("--round-timeout", type=float, default=120.0, help="seconds to wait for a round's uploads")
    q.add_argument("--connect-timeout", type=float, default=120.0, help="seconds to wait for every client to connect")
    q.add_argument("--reproducible", action="store_true",
                   help="draw all noise from the run's seed (testing only): the same cohorts and noise as "
                        "`dpfl run` of the config; the model is bit-identical to it with engine: sequential, only "
                        "close with the vectorized engine (a cohort trained in one batched step rounds differently "
                        "from one client trained alone)")
    q.add_argument("--workdir", default=None, help="keep the Flower logs here (default: a temporary directory, kept if "
                                                     "the run fails)")
    q.add_argument("--isolation", choices=ISOLATIONS, default="fork",
                   help="how each SuperNode starts its ClientApp processes: fork (default: `--isolation process` "
                        "with dpfl's executor, forking them with Flower and dpfl imported) or subprocess (Flower's "
                        "default: a fresh `flwr-clientapp` per message)")
    q.add_argument("--timeout", type=float, default=24 * 3600.0, help="give up after this many seconds")
    q.add_argument("--csv", metavar="FILE", default=None,
                   help="also write the per-round metrics to this CSV file ({run_id} in the name is replaced)")
    q.add_argument("--tensorboard", metavar="DIR", default=None,
                   help="also log the per-round metrics to TensorBoard in DIR/RUN_ID (needs `tensorboard`)")
    q.set_defaults(func=_local)
    a = sub.add_parser("app", help="print the Flower App directory (for `flwr run` on real machines)")
    a.set_defaults(func=_app)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
