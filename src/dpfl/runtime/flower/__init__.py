"""Flower adapter: every split dpfl algorithm as a Flower ServerApp + ClientApp.

* :mod:`.server_app` — the ServerApp: runs :func:`dpfl.rounds.run_experiment` with a
  :class:`.transport.FlowerCohort` that sends each round's global model to the SuperNodes of the
  sampled clients, validates what comes back and hands the valid rows to ``aggregate``.
* :mod:`.client_app` — the ClientApp: trains its own client with the run's engine and runs the
  algorithm's ``client_step`` (clip, noise, randomize) before anything leaves the node.
* :mod:`dpfl.runtime.validate` — rejection of bad uploads (shape, NaN/Inf, declared noise that does not
  match the plan), independent of Flower.
* :mod:`.secagg` / :mod:`.masks` — secure aggregation: DP-FedAvg's integer uploads summed by
  Flower's SecAgg+ (``privacy.secure_aggregation``), with masks expanded by ChaCha20 instead of
  Flower's 32-bit-seeded MT19937: one SecAgg+ run per round among the sampled clients' nodes
  (visible participation), or among every node, each client deciding with its own secret coin
  whether its update is in the sum (``privacy.participation: hidden``); see :mod:`.transport`.
* :mod:`.local` — start a SuperLink and N SuperNodes on 127.0.0.1 as separate processes and run
  a config on them (``dpfl federate``); on real machines use Flower's own commands
  (``docs/how-to/flower.md``, "On real machines").

dpfl inside someone else's Flower app (strategy wrappers and client mods for the user's own
ServerApp and ClientApp) is :mod:`dpfl.runtime.flowerapps`; ``certified`` and ``distributed`` here
re-export it under the paths apps were first written against.

Flower is an optional dependency: ``pip install 'dpfl[flower]'``.
"""

from pathlib import Path

APP_DIR = Path(__file__).resolve().parent / "app"
"""The Flower App directory (``flwr run APP_DIR <superlink>``): a pyproject.toml that points
Flower at :mod:`.server_app` and :mod:`.client_app` (dpfl itself is installed on every machine)."""
