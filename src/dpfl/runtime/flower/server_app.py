"""The dpfl ServerApp: the simulator's run loop with the cohort trained on SuperNodes.

Run config (``[tool.flwr.app.config]`` of :data:`dpfl.runtime.flower.APP_DIR`, overridable with
``flwr run ... --run-config``): ``config`` (path of the dpfl run config on the SuperLink
machine), ``overrides`` (``key=value;key=value``), ``store`` (run store path), ``round-timeout``
and ``connect-timeout`` (seconds), ``reproducible`` (draw all noise from the run's seed, for testing:
default false, i.e. the OS CSPRNG on the server and on every client), ``csv`` and ``tensorboard``
(per-round metrics, as ``dpfl run --csv FILE --tensorboard DIR``; "" for none).

The server samples, calibrates, aggregates, evaluates, checkpoints and keeps the privacy ledger
exactly as :func:`dpfl.rounds.run_experiment` does in simulation (it *is* that
function, with a :class:`dpfl.runtime.flower.transport.FlowerCohort`); the run is stored under the
simulation's run id with the suffix ``-flower``.

With ``privacy.secure_aggregation`` (DP-FedAvg) every round is a SecAgg+ secure sum among the
sampled clients' nodes (visible participation) or among all clients' nodes, each sampling itself
with its own secret coin (``privacy.participation: hidden``) (:mod:`.transport`); ``algorithm.options.secure_sum.bits``
must be at most 31 (checked before any node is contacted). Importing this module replaces
Flower's SecAgg+ mask generator with ChaCha20 (:mod:`.masks`).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from dpfl.errors import ConfigError
from dpfl.runtime.flower import masks, timing

if TYPE_CHECKING:
    from dpfl.rounds.loop import RoundObserver

masks.install()  # SecAgg+ unmasks with ChaCha20 masks, like the ClientApps mask

_LOADED = time.time()

app = ServerApp()


def _overrides(text: str) -> list[str]:
    return [part.strip() for part in text.split(";") if part.strip()]


def _observers(csv: str, tensorboard: str) -> tuple[RoundObserver, ...]:
    """The round observers of the run config's ``csv`` and ``tensorboard`` (as ``dpfl run --csv
    --tensorboard``; :mod:`dpfl.rounds.observers`)."""
    from dpfl.rounds.observers import CsvMetrics, TensorBoardMetrics

    return (*([CsvMetrics(csv)] if csv else []), *([TensorBoardMetrics(tensorboard)] if tensorboard else []))


@app.main()
def main(grid: Grid, context: Context) -> None:
    from dpfl.config import deployment_config, load_config
    from dpfl.rounds import build_experiment, run_experiment
    from dpfl.runtime.flower.transport import (
        FlowerCohort,
        PromptGrid,
        Shuffler,
        discover_nodes,
        secure_bits_for,
    )
    from dpfl.store import RunStore

    marks = {"proc": timing.process_start(), "loaded": _LOADED}
    grid = PromptGrid(grid)  # SecAgg+ stages poll for replies every 0.2 s, not every 3 s
    rc = context.run_config
    path = str(rc.get("config", ""))
    if not path:
        raise ConfigError("set the run config path: flwr run ... --run-config 'config=\"/path/run.yaml\"'")
    config = load_config(path, _overrides(str(rc.get("overrides", ""))))
    reproducible = bool(rc.get("reproducible", False))
    if not reproducible:
        # a deployment's Gaussian releases are lattice releases unless the config says otherwise;
        # the clients build the run from this config, so they agree (a reproducible run stays the
        # simulation's twin)
        config = deployment_config(config)
    store = RunStore(str(rc.get("store", "runs/flower.sqlite")))
    exp = build_experiment(config)  # the server's view: public client sizes, model layout, test data
    marks["built"] = time.time()
    secure_bits = secure_bits_for(config, exp.algorithm, reproducible=reproducible)  # refuses bits > 31 up front
    found: list[Shuffler] = []
    config_json = json.dumps(config.model_dump(mode="json"))
    nodes = discover_nodes(grid, exp.data.num_clients, float(rc.get("connect-timeout", 120.0)), shuffler=found,
                           config_json=config_json)
    marks["connected"] = time.time()
    cohort = FlowerCohort(grid, nodes, config_json, exp.data.sizes(),
                          exp.problem.layout.numel, float(rc.get("round-timeout", 120.0)), reproducible=reproducible,
                          shuffler=found[0] if found else None, secure_bits=secure_bits,
                          hidden_participation=secure_bits is not None and config.privacy.participation == "hidden")
    del exp

    def progress(done: int, total: int, metrics: dict, seconds: float) -> None:
        acc = metrics.get("test_accuracy")
        eps = metrics.get("epsilon_certified")
        spent = metrics.get("epsilon_spent")  # under a Rényi filter: what happened, not the guarantee
        print(f"round {done}/{total}: {metrics.get('arrived', '?')} uploads"
              + (f", test accuracy {acc:.4f}" if acc is not None else "")
              + (f", certified epsilon {eps:.4g}" if eps is not None else "")
              + (f", spent epsilon {spent:.4g}" if spent is not None else "")
              + f" ({seconds:.1f} s)", flush=True)

    if reproducible:
        print("notice: reproducible = true: all noise is drawn from the run's seed, so anyone who knows it (this "
              "server included) can recompute it; the certified epsilon holds only against observers who do not "
              "know the seed. Use it to test a deployment, not to protect data.", flush=True)
    seen: set[str] = set()

    def notice(message: str) -> None:  # each distinct notice once on the console (all are stored)
        if message not in seen:
            seen.add(message)
            print(f"notice: {message}", flush=True)

    result = run_experiment(config, store, remote=cohort, progress=progress, secure_rng=not reproducible,
                            notice=notice, observers=_observers(str(rc.get("csv", "")), str(rc.get("tensorboard", ""))))
    timing.record("serverapp", **marks, done=time.time())
    print("dpfl-result " + json.dumps({"run_id": result.run_id, "status": result.status, "rounds": result.rounds_done,
                                       "store": str(store.path),
                                       **{k: v for k, v in result.final.items()
                                          if k in ("test_accuracy", "test_loss", "params_sha256",
                                                   "stop_reason", "empty_rounds")}}),
          flush=True)
