"""A Flower federation on this machine: one SuperLink and N SuperNodes as separate processes.

Used by ``dpfl federate`` and the integration tests; on real machines start the same Flower
commands yourself (README, "Running a federation on real machines"). Nothing here does any
networking of its own: the processes are Flower's ``flower-superlink`` and
``flower-supernode``, and the run is submitted with ``flwr run``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpfl.errors import ConfigError
from dpfl.runtime.flower import APP_DIR

__all__ = ["LocalFederation"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"`{name}` not found: install Flower with `pip install 'dpfl[flower]'`")
    return found


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), from /proc; empty where there is none."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit():
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (/proc), to tell it from a later process with its id."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return None


def _signal_same(procs: list[tuple[int, str | None]], sig: int) -> None:
    """Signal each (pid, start time) that is still the same process."""
    for pid, started in procs:
        if started is not None and _start_time(pid) == started:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _kill_tree(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal ``proc``, its process group and every descendant, also those that left the group
    (Flower's ``flower-superexec`` and the ClientApp processes it starts)."""
    kids = [(pid, _start_time(pid)) for pid in _descendants(proc.pid)]
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    _signal_same(kids, sig)


def _wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise ConfigError(f"process exited with {proc.returncode} while starting; log {log}:\n{log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise ConfigError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s; log {log}")


class LocalFederation:
    """``with LocalFederation(3, data_dir=...) as fed: fed.run("cfg.yaml")``.

    Args:
        num_nodes: SuperNodes to start; node i holds dpfl client i (``partition-id=i``).
        data_dir: the data directory every node reads (``data-dir`` of its node config).
        node_config: extra node config per node index, e.g. ``{2: {"fault": "nan"}}``.
        workdir: where logs and Flower's home go (default: a temporary directory).
        shuffler: also start a shuffler SuperNode (``role=shuffler``) for split & shuffle.
        simulation: run on Flower's Simulation Engine instead (a SuperLink in simulation mode;
            ``num_nodes`` virtual SuperNodes as Ray actors, node i = partition i; no real
            SuperNode processes, so no ``node_config`` and no shuffler).
    """

    def __init__(self, num_nodes: int, *, data_dir: str | Path | None = None,
                 node_config: dict[int, dict[str, Any]] | None = None, workdir: str | Path | None = None,
                 shuffler: bool = False, simulation: bool = False) -> None:
        if num_nodes < 1:
            raise ConfigError(f"a federation needs at least one SuperNode; got num_nodes = {num_nodes}")
        self.num_nodes = num_nodes
        self.data_dir = None if data_dir is None else str(Path(data_dir).resolve())
        self.node_config = node_config or {}
        self.shuffler = shuffler
        self.simulation = simulation
        if simulation and (shuffler or node_config):
            raise ConfigError("Flower's Simulation Engine has no real SuperNodes: no shuffler or node config")
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="dpfl-flower-")
        self.workdir = Path(workdir or self._tmp.name).resolve()  # type: ignore[union-attr]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        self.port = _free_port()
        self.superlink: subprocess.Popen[bytes] | None = None
        self.nodes: list[subprocess.Popen[bytes] | None] = []
        # Flower's processes start their helpers (flower-superexec, flwr-serverapp, flwr-clientapp)
        # by name: this interpreter's scripts come first on PATH
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "PATH": path}
        conf = f'[superlink]\ndefault = "dpfl-local"\n\n[superlink.dpfl-local]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n'
        if simulation:
            conf += f"options.num-supernodes = {num_nodes}\noptions.backend.client-resources.num-cpus = 1\n"
        (self.home / "config.toml").write_text(conf)

    # ------------------------------------------------------------------ processes

    def _spawn(self, args: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / log_name, "wb")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                start_new_session=True)

    def start(self) -> LocalFederation:
        self.superlink = self._spawn([_tool("flower-superlink"), "--insecure", "--port", str(self.port),
                                      "--disable-runtime-dependency-installation",
                                      *(["--simulation"] if self.simulation else []),
                                      # the SuperLink's state in memory (Flower's default): on disk,
                                      # SQLite's single writer made ~15 SuperNodes' concurrent calls
                                      # fail with "database is locked"
                                      "--database", ":flwr-in-memory:"], "superlink.log")
        _wait_port(self.port, 60, self.superlink, self.workdir / "superlink.log")
        if self.simulation:
            return self
        for i in range(self.num_nodes):
            self.nodes.append(self._start_node(i))
        if self.shuffler:
            self.nodes.append(self._start_node(self.num_nodes, {"role": "shuffler"}))
        return self

    def _start_node(self, i: int, config: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
        cfg: dict[str, Any] = config or {"partition-id": i, **self.node_config.get(i, {})}
        if self.data_dir is not None and config is None:
            cfg.setdefault("data-dir", self.data_dir)
        parts = " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items())
        return self._spawn([_tool("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                            "--port", str(_free_port()), "--node-config", parts], f"supernode-{i}.log")

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and everything it started (``flower-superexec``, ClientApps)."""
        proc = self.nodes[i]
        if proc is not None and proc.poll() is None:
            _kill_tree(proc, signal.SIGKILL)
            proc.wait(10)

    def node_processes(self, i: int) -> list[int]:
        """Process ids of SuperNode ``i`` and its descendants while it runs (empty once it is gone)."""
        proc = self.nodes[i]
        if proc is None or proc.poll() is not None:
            return []
        return [proc.pid, *_descendants(proc.pid)]

    def stop(self) -> None:
        """Stop every process of the federation: SIGTERM, then SIGKILL for what is left after 10 s.

        The SuperNodes are stopped together (each takes about a second to exit), then the
        SuperLink they report to."""
        procs = [p for p in [*self.nodes, self.superlink] if p is not None]
        helpers = [(pid, _start_time(pid)) for p in procs if p.poll() is None for pid in _descendants(p.pid)]
        nodes = [p for p in self.nodes if p is not None]
        for group in (nodes, [self.superlink] if self.superlink is not None else []):
            running = [p for p in group if p.poll() is None]
            for proc in running:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 10
            for proc in running:
                try:
                    proc.wait(max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _kill_tree(proc, signal.SIGKILL)
        _signal_same(helpers, signal.SIGKILL)  # helpers that left the group or outlived their parent
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalFederation:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ runs

    def submit(self, config: str | Path, *, store: str | Path, overrides: Sequence[str] = (),
               round_timeout: float = 120.0, connect_timeout: float = 120.0,
               reproducible: bool = False) -> subprocess.Popen[str]:
        """Start ``flwr run`` for a dpfl config (returns at once; see :meth:`run`)."""
        run_config = " ".join([
            f"config={json.dumps(str(Path(config).resolve()))}",
            f"store={json.dumps(str(Path(store).resolve()))}",
            f"overrides={json.dumps(';'.join(overrides))}",
            f"round-timeout={float(round_timeout)}",
            f"connect-timeout={float(connect_timeout)}",
            f"reproducible={'true' if reproducible else 'false'}",
        ])
        return subprocess.Popen([_tool("flwr"), "run", str(APP_DIR), "dpfl-local", "--stream", "--run-config", run_config],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env, cwd=self.workdir)

    def run(self, config: str | Path, *, store: str | Path, overrides: Sequence[str] = (), round_timeout: float = 120.0,
            connect_timeout: float = 120.0, timeout: float = 1800.0, echo: bool = False,
            reproducible: bool = False) -> dict[str, Any]:
        """Run a dpfl config on the federation; returns the ``dpfl-result`` line and the log."""
        proc = self.submit(config, store=store, overrides=overrides, round_timeout=round_timeout,
                           connect_timeout=connect_timeout, reproducible=reproducible)
        lines: list[str] = []
        result: dict[str, Any] | None = None
        end = time.monotonic() + timeout
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if echo:
                print(line, end="", flush=True)
            if "dpfl-result " in line:
                result = json.loads(line.split("dpfl-result ", 1)[1])
                break
            if time.monotonic() > end:
                break
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if result is None:
            raise ConfigError("the Flower run ended without a result; its log:\n" + "".join(lines[-60:]))
        return {**result, "log": "".join(lines)}
