"""A SuperNode's task executor that starts each ClientApp by forking a process that has Flower and
dpfl's ClientApp imported already.

Flower 1.42 runs every message of a run in a fresh ``flwr-clientapp`` process, started by the
SuperNode's ``flower-superexec`` (``--isolation subprocess``, the default). Importing Flower takes
that process 1–2 s of CPU before it reads its message, and SecAgg+ sends each node four messages
a round. Flower's other mode, ``flower-supernode --isolation process``, leaves starting the
ClientApp processes to a separate executor that asks the SuperNode's Runtime API for work; this
module is such an executor. It asks exactly as ``flower-superexec`` does (``AcquireTask``, Flower's
plugin picks the task), and for a ClientApp task it runs Flower's own ``run_clientapp`` with the
task's token in a new process forked from a fork server (``multiprocessing``'s ``forkserver``,
single-threaded, with ``flwr.supernode.runtime.run_clientapp`` and
:mod:`dpfl.runtime.flower.client_app` imported once). The ClientApp process is still one process
per message, with Flower's isolation and exit handling; only the imports are shared. Tasks of
other types go to Flower's ``SubprocessExecutor`` unchanged.

``dpfl federate local`` starts one per SuperNode. On other machines::

    flower-supernode --insecure --superlink HOST:9092 --isolation process --port 9094 ...
    python -m dpfl.runtime.flower.executor --runtime-api-address 127.0.0.1:9094 --insecure

(or keep Flower's default ``--isolation subprocess``: same results, slower messages). A SuperNode
served by this executor runs dpfl's app only: the fork server imports dpfl's ClientApp, which
installs dpfl's ChaCha20 SecAgg+ masks in Flower (:mod:`.masks`) for every ClientApp it forks.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ForkExecutor", "PRELOAD", "main"]

PRELOAD = ["flwr.supernode.runtime.run_clientapp", "dpfl.runtime.flower.client_app"]
"""Modules the fork server imports once, before it forks any ClientApp process."""

_DEFAULT_POLL_SECONDS = 1.0  # Flower's SuperExec default; FLWR_SUPEREXEC_TASK_POLL_INTERVAL overrides


def _run_clientapp(runtime_api_address: str, token: str, insecure: bool, certificates: bytes | None,
                   parent_pid: int | None) -> None:
    """One ClientApp task, in a process forked from the fork server (what ``flwr-clientapp`` runs)."""
    from flwr.supernode.runtime.run_clientapp import run_clientapp

    try:
        from dpfl.runtime.flower import client_app

        client_app.mark_loaded()  # imported by the fork server: in this process it is ready now
    except Exception:  # noqa: BLE001 - Flower's loader below fails on it too, and replies with the error
        pass
    run_clientapp(runtime_api_address=runtime_api_address, token=token, insecure=insecure,
                  certificates=certificates, parent_pid=parent_pid, runtime_dependency_install=False)


class ForkExecutor:
    """Flower's ``Executor`` protocol: ClientApp tasks forked from a fork server, other tasks
    through Flower's ``SubprocessExecutor``."""

    def __init__(self, preload: Sequence[str] = PRELOAD) -> None:
        from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor

        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(list(preload))
        self._fallback = SubprocessExecutor()
        self._children: list[Any] = []

    def get_eligible_capacity(self, supported_task_types: set[Any], *, insecure: bool = False,
                              root_certificates_path: str | None = None) -> tuple[set[Any], set[str]]:
        return self._fallback.get_eligible_capacity(supported_task_types, insecure=insecure,
                                                    root_certificates_path=root_certificates_path)

    def wait_for_capacity(self, task_type: Any = None, *, fab_hash: str | None = None, insecure: bool = False,
                          root_certificates_path: str | None = None) -> None:
        return None  # no capacity gate: like Flower's subprocess executor

    def launch(self, spec: Any) -> Any:
        from flwr.supercore.constant import TaskType
        from flwr.supercore.superexec.executor.types import LaunchResult

        if spec.task_type != TaskType.CLIENT_APP:
            return self._fallback.launch(spec)
        certificates = None
        if not spec.insecure and spec.root_certificates_path is not None:
            with open(spec.root_certificates_path, "rb") as f:
                certificates = f.read()
        proc = self._ctx.Process(target=_run_clientapp, name=f"dpfl-clientapp-{spec.task_id}",
                                 args=(spec.runtime_api_address, spec.token, spec.insecure, certificates,
                                       spec.parent_pid))
        try:
            proc.start()
        except Exception as exc:  # noqa: BLE001 - the task fails, the executor goes on with the next
            return LaunchResult.failed(f"could not fork the ClientApp process: {exc!r}")
        self._children.append(proc)
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished ClientApp processes (no zombies)."""
        self._children = [p for p in self._children if p.is_alive()]

    def close(self) -> None:
        # A running ClientApp finishes its task (it watches this process: parent pid); on a
        # graceful exit multiprocessing joins it, within Flower's exit handlers' time limit.
        return None

    def warm_up(self) -> None:
        """Start the fork server now (it imports :data:`PRELOAD`), not at the first task."""
        proc = self._ctx.Process(target=time.sleep, args=(0,))
        proc.start()
        proc.join()


def _poll_seconds() -> float:
    """``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` checked as Flower's SuperExec checks it (0.01–60 s)."""
    from dpfl.runtime.flower.local import TASK_POLL_ENV

    raw = os.environ.get(TASK_POLL_ENV)
    if not raw:
        return _DEFAULT_POLL_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.01 <= value <= 60.0:
        raise SystemExit(f"{TASK_POLL_ENV} = {raw!r}: expected seconds between 0.01 and 60")
    return value


def serve(runtime_api_address: str, *, insecure: bool, root_certificates_path: str | None = None,
          parent_pid: int | None = None, poll_seconds: float | None = None) -> None:
    """Ask the SuperNode's Runtime API for tasks and launch them, until this process is stopped
    (or ``parent_pid`` ends)."""
    from flwr.supercore.exit import register_signal_handlers
    from flwr.supercore.superexec.plugin import AutoExecPlugin
    from flwr.supercore.superexec.run_superexec import _handle_launch_result
    from flwr.supercore.telemetry import EventType
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    interval = _poll_seconds() if poll_seconds is None else poll_seconds
    executor = ForkExecutor()
    executor.warm_up()
    if parent_pid is not None:
        from flwr.supercore.app_utils import start_parent_process_monitor

        start_parent_process_monitor(parent_pid)
    client = _runtime_client(runtime_api_address, insecure,
                             validate_and_resolve_root_certificates(root_certificates_path, insecure))
    register_signal_handlers(event_type=EventType.RUN_SUPEREXEC_LEAVE, exit_message="dpfl executor stopped.",
                             grpc_servers=[], exit_handlers=[client.close, executor.close])
    plugin = AutoExecPlugin(runtime_api_address=runtime_api_address, insecure=insecure,
                            root_certificates_path=root_certificates_path, runtime_dependency_install=False,
                            executor=executor)
    request = _acquire_request()
    while True:
        executor.reconcile()
        types, hashes = executor.get_eligible_capacity(set(plugin.supported_task_types), insecure=insecure,
                                                       root_certificates_path=root_certificates_path)
        res = client.AcquireTask(request(types, hashes))
        if res.HasField("task") and res.token:
            _handle_launch_result(plugin.launch_task(token=res.token, task=res.task), res.task)
        time.sleep(interval)


def _acquire_request() -> Any:
    from flwr.proto.runtime_pb2 import AcquireTaskRequest

    def build(types: set[Any], hashes: set[str]) -> Any:
        return AcquireTaskRequest(supported_task_types=types, agentapp_fab_hashes=hashes)

    return build


def _runtime_client(address: str, insecure: bool, certificates: bytes | None) -> Any:
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    return RuntimeHttpClient.from_server_address(
        server_address=address, insecure=insecure, root_certificates=certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dpfl.runtime.flower.executor", description=__doc__.split("\n")[0])
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API (HOST:PORT)")
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--root-certificates", default=None)
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process ends")
    args = parser.parse_args(argv)
    serve(args.runtime_api_address, insecure=args.insecure, root_certificates_path=args.root_certificates,
          parent_pid=args.parent_pid)


if __name__ == "__main__":
    main(sys.argv[1:])
