"""A Flower federation on this machine: one SuperLink and N SuperNodes as separate processes.

Used by ``dpfl federate`` and the integration tests; on real machines start the same Flower
commands yourself (``docs/how-to/flower.md``, "On real machines"). Nothing here does any
networking of its own: the processes are Flower's ``flower-superlink`` and
``flower-supernode``, and the run is submitted with ``flwr run``.

The federation belongs to the process that started it. Flower's processes start their own helpers
in new sessions (``flower-superexec``, ``flwr-serverapp``, ``flwr-clientapp``, the dpfl warm
workers), so neither a process group nor a parent-death signal reaches them all; instead every
process of a federation carries its token in the environment variable ``DPFL_FEDERATION`` (Flower
passes its environment on), and a watchdog process holds the read end of a pipe whose only writer
is the starting process: when that process ends without stopping the federation (``kill -9``), the
pipe reads end-of-file and the watchdog SIGKILLs every process with the token (Linux: found in
``/proc/PID/environ``), then removes the temporary working directory.

Paths reach Flower's processes absolute: their working directory is not the caller's (the config,
the store, the data directory — also the ServerApp's ``data.dir``, as a config override — and
``PYTHONPATH`` for user modules).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
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

from dpfl.errors import ConfigError, env_positive_int
from dpfl.runtime.flower import APP_DIR, timing
from dpfl.runtime.flower.warm import NODE_THREADS_ENV

__all__ = ["FEDERATION_ENV", "TASK_POLL_ENV", "LocalFederation", "federation_processes", "superexec_poll_seconds",
           "supernode_pull_seconds"]

FEDERATION_ENV = "DPFL_FEDERATION"
"""The environment variable holding a federation's token in each of its processes."""


TASK_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"
"""Flower's environment variable: seconds between a SuperExec's requests for work (default 1)."""


ISOLATIONS = ("fork", "subprocess")
"""How a local SuperNode starts its ClientApp processes (:class:`LocalFederation`'s ``isolation``)."""


def supernode_pull_seconds(num_nodes: int) -> float:
    """How long a local SuperNode waits after asking its SuperLink for work and finding none
    (:mod:`.supernode`): 0.25 s up to 4 nodes, then growing so that the SuperNodes together ask
    16 times a second, at most Flower's own 3 s (from 48 nodes on)."""
    return min(3.0, max(0.25, num_nodes / 16))


def superexec_poll_seconds(num_nodes: int) -> float:
    """The SuperExec poll interval of a local federation of ``num_nodes`` SuperNodes: 0.25 s up
    to 4 nodes, then growing so that the SuperNodes' SuperExecs together ask 16 times a second, at most
    Flower's default of 1 s (from 16 nodes on)."""
    return min(1.0, max(0.25, num_nodes / 16))


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


def federation_processes(token: str) -> list[int]:
    """Live processes whose environment holds ``DPFL_FEDERATION=token`` (Linux /proc; zombies,
    whose environment is gone, are not listed; this process never is)."""
    marker = f"{FEDERATION_ENV}={token}".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        pid = int(env.parent.name)
        if pid == os.getpid():
            continue
        try:
            if marker in env.read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:  # gone, or not ours
            continue
    return found


def _watch(fd: int, token: str, cleanup: str | None) -> None:
    """The watchdog: wait until the federation's owner writes a byte (it stopped the federation
    itself) or is gone (end of file); in the second case SIGKILL every process of the federation,
    until none is left (one that was being started when the scan began is found by the next)."""
    try:
        said = os.read(fd, 1)
    except OSError:
        said = b""
    if said:
        return
    for _ in range(200):
        pids = federation_processes(token)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    if cleanup:
        shutil.rmtree(cleanup, ignore_errors=True)


def _absolute_pythonpath(value: str) -> str:
    """``PYTHONPATH`` with every entry absolute (an empty entry is the working directory)."""
    return os.pathsep.join(str(Path(entry or ".").resolve()) for entry in value.split(os.pathsep))


_EXCEPTION_LINE = re.compile(r"^(?:\w+\.)*(\w+): (.*)$")
_DPFL_ERRORS = ("DpflError", "ConfigError", "DataFormatError", "PrivacyPreconditionError")


class _RunLog:
    """Reads ``flwr run --stream`` line by line: what to echo, and the ServerApp's error.

    Flower logs a ServerApp's exception with its traceback ("ServerApp raised an exception"), then
    an exit code and a help link: none of that is echoed; the exception's last line is kept, for
    one line of error. A traceback without that marker is left out of the echo the same way."""

    def __init__(self) -> None:
        self.failed = False
        self.error: str | None = None
        self._in_traceback = False

    def feed(self, line: str) -> bool:
        """Take one line; whether to echo it."""
        text = line.rstrip("\n")
        if "ServerApp raised an exception" in text or "Exit Code:" in text:
            self.failed = True
        if text.startswith("Traceback (most recent call last):"):
            self._in_traceback = True
            return False
        if self._in_traceback:
            if (not text or text[0].isspace() or text.startswith(("During handling", "The above exception"))
                    or text.startswith("Traceback")):
                return False
            self._in_traceback = False
            match = _EXCEPTION_LINE.match(text)
            if match is None:
                self.error = text
            else:
                self.error = match[2] if match[1] in _DPFL_ERRORS else f"{match[1]}: {match[2]}"
            return False
        return not self.failed


def _wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise ConfigError(f"process exited with {proc.returncode} while starting; "
                              f"log {log}:\n{log.read_text()[-2000:]}")
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
        isolation: ``"fork"`` (default): each SuperNode is Flower's with shorter waits between
            its pulls (:mod:`.supernode`, every :func:`supernode_pull_seconds`) and runs
            ``--isolation process`` with dpfl's executor beside it (:mod:`.executor`: ClientApp
            processes forked with Flower and dpfl's ClientApp imported); ``"subprocess"``:
            Flower's own ``flower-supernode`` unchanged, a fresh ``flwr-clientapp`` process per
            message started by ``flower-superexec``. Same messages and results; the fork saves
            the imports of every message, the shorter waits up to 3 s per message.
        simulation: run on Flower's Simulation Engine instead (a SuperLink in simulation mode;
            ``num_nodes`` virtual SuperNodes as Ray actors, node i = partition i; no real
            SuperNode processes, so no ``node_config`` and no shuffler).
    """

    def __init__(self, num_nodes: int, *, data_dir: str | Path | None = None,
                 node_config: dict[int, dict[str, Any]] | None = None, workdir: str | Path | None = None,
                 shuffler: bool = False, simulation: bool = False, isolation: str = "fork") -> None:
        if isolation not in ISOLATIONS:
            raise ConfigError(f"isolation = {isolation!r}: expected one of {', '.join(ISOLATIONS)}")
        self.isolation = isolation
        if num_nodes < 1:
            raise ConfigError(f"a federation needs at least one SuperNode; got num_nodes = {num_nodes}")
        self.num_nodes = num_nodes
        self.data_dir = None if data_dir is None else str(Path(data_dir).resolve())
        if self.data_dir is not None and ";" in self.data_dir:
            raise ConfigError(f"data directory {self.data_dir!r}: a path with ';' cannot be passed to the ServerApp "
                              "(its run config separates overrides with ';'); move or link the data elsewhere")
        self.node_config = node_config or {}
        self.shuffler = shuffler
        self.simulation = simulation
        if simulation and (shuffler or node_config):
            raise ConfigError("Flower's Simulation Engine has no real SuperNodes: no shuffler or node config")
        self._own_workdir = workdir is None  # a temporary directory, removed by stop() unless a run failed
        self.workdir = Path(workdir if workdir is not None else tempfile.mkdtemp(prefix="dpfl-flower-")).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.keep_workdir = False
        self._runs = self._submitted = 0
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        self.port = _free_port()
        self.superlink: subprocess.Popen[bytes] | None = None
        self.nodes: list[subprocess.Popen[bytes] | None] = []
        self.executors: list[subprocess.Popen[bytes] | None] = []  # node i's dpfl executor (isolation "fork")
        # Flower's processes start their helpers (flower-superexec, flwr-serverapp, flwr-clientapp)
        # by name: this interpreter's scripts come first on PATH
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.token = secrets.token_hex(16)
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "PATH": path, FEDERATION_ENV: self.token}
        # Flower's SuperExecs (one per SuperNode, one for the ServerApp) ask for work every second by
        # default: up to a second lost per message, i.e. per SecAgg+ stage. Asking more often costs CPU
        # (4 nodes: 0.14 cores idle at 1 s, 0.45 at 0.1 s), so the interval grows with the federation
        # (about 16 asks per second in all); FLWR_SUPEREXEC_TASK_POLL_INTERVAL set by the caller wins.
        self.env.setdefault(TASK_POLL_ENV, f"{superexec_poll_seconds(num_nodes):g}")
        # the nodes share this machine's cores: one OpenMP team per node beyond them only spins
        self.env.setdefault(NODE_THREADS_ENV, str(max(1, (os.cpu_count() or 1) // max(1, num_nodes))))
        env_positive_int(NODE_THREADS_ENV, self.env)  # a bad value of the caller's: refused here, not by every node
        if os.environ.get("PYTHONPATH"):  # user modules (`module:attribute` in a config), wherever Flower runs
            self.env["PYTHONPATH"] = _absolute_pythonpath(os.environ["PYTHONPATH"])
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._watch_fd: int | None = None
        conf = ('[superlink]\ndefault = "dpfl-local"\n\n'
                f'[superlink.dpfl-local]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
        if simulation:
            conf += f"options.num-supernodes = {num_nodes}\noptions.backend.client-resources.num-cpus = 1\n"
        (self.home / "config.toml").write_text(conf)

    # ------------------------------------------------------------------ processes

    def _spawn(self, args: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / log_name, "wb")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                start_new_session=True)

    def _start_watchdog(self) -> None:
        """The process that stops the federation if this one ends without doing it (module docstring)."""
        read_fd, write_fd = os.pipe()  # not inherited by anything else this process starts
        cleanup = ["--cleanup", str(self.workdir)] if self._own_workdir else []
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-m", "dpfl.runtime.flower.local", "--watchdog", "--fd", str(read_fd),
                 "--token", self.token, *cleanup],
                pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)  # not stopped by the terminal's Ctrl-C before it could act
        finally:
            os.close(read_fd)
        self._watch_fd = write_fd

    def _stop_watchdog(self) -> None:
        if self._watch_fd is not None:
            try:
                os.write(self._watch_fd, b"x")  # stopped: nothing for it to do
            except OSError:
                pass
            os.close(self._watch_fd)
            self._watch_fd = None
        if self._watchdog is not None:
            try:
                self._watchdog.wait(10)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
            self._watchdog = None

    def start(self) -> LocalFederation:
        launched = time.time()
        self._start_watchdog()
        self.superlink = self._spawn([_tool("flower-superlink"), "--insecure", "--port", str(self.port),
                                      "--disable-runtime-dependency-installation",
                                      *(["--simulation"] if self.simulation else []),
                                      # the SuperLink's state in memory (Flower's default): on disk,
                                      # SQLite's single writer made ~15 SuperNodes' concurrent calls
                                      # fail with "database is locked"
                                      "--database", ":flwr-in-memory:"], "superlink.log")
        _wait_port(self.port, 60, self.superlink, self.workdir / "superlink.log")
        listening = time.time()
        if not self.simulation:
            for i in range(self.num_nodes):
                self.nodes.append(self._start_node(i))
            if self.shuffler:
                self.nodes.append(self._start_node(self.num_nodes, {"role": "shuffler"}))
        timing.record("federation", launched=launched, superlink=listening, nodes=time.time())
        return self

    def _start_node(self, i: int, config: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
        cfg: dict[str, Any] = config or {"partition-id": i, **self.node_config.get(i, {})}
        if self.data_dir is not None and config is None:
            cfg.setdefault("data-dir", self.data_dir)
        parts = " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items())
        runtime_port = _free_port()
        if self.isolation == "fork":
            supernode = [sys.executable, "-m", "dpfl.runtime.flower.supernode",
                         "--pull-interval", f"{supernode_pull_seconds(self.num_nodes):g}", "--isolation", "process"]
        else:
            supernode = [_tool("flower-supernode")]
        node = self._spawn([*supernode, "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                            "--port", str(runtime_port), "--node-config", parts], f"supernode-{i}.log")
        executor = None
        if self.isolation == "fork":
            executor = self._spawn([sys.executable, "-m", "dpfl.runtime.flower.executor", "--insecure",
                                    "--runtime-api-address", f"127.0.0.1:{runtime_port}",
                                    "--parent-pid", str(node.pid)], f"executor-{i}.log")
        self.executors.append(executor)
        return node

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and everything it started (``flower-superexec``, ClientApps), and
        its dpfl executor with the ClientApps that one started."""
        # the executor first: once its SuperNode is gone it may exit on its own, and its
        # ClientApps would then be left to their own parent checks
        procs = [p for p in (self.executors[i] if i < len(self.executors) else None, self.nodes[i]) if p is not None]
        for proc in procs:
            if proc.poll() is None:
                _kill_tree(proc, signal.SIGKILL)
        for proc in procs:
            proc.wait(10)

    def node_processes(self, i: int) -> list[int]:
        """Process ids of SuperNode ``i`` and its descendants while it runs (empty once it is gone)."""
        proc = self.nodes[i]
        if proc is None or proc.poll() is not None:
            return []
        executor = self.executors[i] if i < len(self.executors) else None
        extra = [] if executor is None or executor.poll() is not None else [executor.pid, *_descendants(executor.pid)]
        return [proc.pid, *_descendants(proc.pid), *extra]

    def stop(self) -> None:
        """Stop every process of the federation: SIGTERM, then SIGKILL for what is left after 10 s.

        The SuperNodes are stopped together (each takes about a second to exit), then the
        SuperLink they report to."""
        began = time.time()
        procs = [p for p in [*self.nodes, *self.executors, self.superlink] if p is not None]
        helpers = [(pid, _start_time(pid)) for p in procs if p.poll() is None for pid in _descendants(p.pid)]
        nodes = [p for p in [*self.nodes, *self.executors] if p is not None]
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
        for pid in federation_processes(self.token):  # anything else of it (e.g. a `flwr run` still streaming)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._stop_watchdog()
        timing.record("stopped", began=began)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalFederation:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ runs

    def submit(self, config: str | Path, *, store: str | Path, overrides: Sequence[str] = (),
               round_timeout: float = 120.0, connect_timeout: float = 120.0,
               reproducible: bool = False, csv: str | Path | None = None,
               tensorboard: str | Path | None = None) -> subprocess.Popen[str]:
        """Start ``flwr run`` for a dpfl config (returns at once; see :meth:`run`).

        Paths are made absolute here (Flower's processes do not run in this working directory);
        the federation's ``data_dir``, if any, is also the ServerApp's ``data.dir``. ``csv`` and
        ``tensorboard``: the ServerApp writes the per-round metrics there (``dpfl run --csv
        --tensorboard``)."""
        overrides = list(overrides)
        if self.data_dir is not None:
            overrides.append(f"data.dir={json.dumps(self.data_dir)}")  # last: it wins
        bad = [o for o in overrides if ";" in o]
        if bad:
            raise ConfigError(f"override {bad[0]!r}: a value with ';' cannot be passed to the ServerApp "
                              "(its run config separates overrides with ';')")
        # a TOML file, not `key=value` pairs: Flower's pair syntax takes no quote or escape inside a value
        # (a path with a quote, or a JSON-quoted override, was refused); json.dumps gives TOML strings
        values: dict[str, str | float | bool] = {
            "config": str(Path(config).resolve()), "store": str(Path(store).resolve()),
            "overrides": ";".join(overrides), "round-timeout": float(round_timeout),
            "connect-timeout": float(connect_timeout), "reproducible": bool(reproducible),
            "csv": str(Path(csv).resolve()) if csv else "",
            "tensorboard": str(Path(tensorboard).resolve()) if tensorboard else ""}
        self._submitted += 1
        run_config = self.workdir / f"run-config-{self._submitted}.toml"
        run_config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()), encoding="utf-8")
        return subprocess.Popen([_tool("flwr"), "run", str(APP_DIR), "dpfl-local", "--stream", "--run-config",
                                 str(run_config)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
                                cwd=self.workdir)

    def run(self, config: str | Path, *, store: str | Path, overrides: Sequence[str] = (), round_timeout: float = 120.0,
            connect_timeout: float = 120.0, timeout: float = 1800.0, echo: bool = False,
            reproducible: bool = False, csv: str | Path | None = None,
            tensorboard: str | Path | None = None) -> dict[str, Any]:
        """Run a dpfl config on the federation; returns the ``dpfl-result`` line and the log
        (``csv``, ``tensorboard``: :meth:`submit`).

        ``echo`` prints the run's log as it comes, without Flower's tracebacks.

        Raises:
            ConfigError: the run ended without a result — one line: the ServerApp's error (or
                the log's last line) and the file holding the full log, which is kept (so is a
                temporary working directory: ``keep_workdir``).
        """
        submitted = time.time()
        proc = self.submit(config, store=store, overrides=overrides, round_timeout=round_timeout,
                           connect_timeout=connect_timeout, reproducible=reproducible, csv=csv,
                           tensorboard=tensorboard)
        self._runs += 1
        log_path = self.workdir / f"flwr-run-{self._runs}.log"
        lines: list[str] = []
        result: dict[str, Any] | None = None
        reader = _RunLog()
        end = time.monotonic() + timeout
        timed_out = False
        assert proc.stdout is not None
        with open(log_path, "w", encoding="utf-8") as log:
            for line in proc.stdout:
                lines.append(line)
                log.write(line)
                log.flush()
                if reader.feed(line) and echo:
                    print(line, end="", flush=True)
                if "dpfl-result " in line:
                    result = json.loads(line.split("dpfl-result ", 1)[1])
                    timing.record("flwr-run", submitted=submitted, result=time.time())
                    break
                if time.monotonic() > end:
                    timed_out = True
                    break
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if result is None:
            self.keep_workdir = True
            if reader.error is not None:
                why = f"the ServerApp failed: {reader.error}"
            elif timed_out:
                why = f"no result after {timeout:g} s"
            else:
                last = next((x.strip() for x in reversed(lines) if x.strip()), "no output")
                why = f"the Flower run ended without a result ({last})"
            raise ConfigError(f"{why}; full log: {log_path}")
        return {**result, "log": "".join(lines)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="dpfl's watchdog of a local Flower federation (started by LocalFederation)")
    ap.add_argument("--watchdog", action="store_true", required=True)
    ap.add_argument("--fd", type=int, required=True, help="read end of the pipe whose only writer is the owner")
    ap.add_argument("--token", required=True, help="the federation's DPFL_FEDERATION token")
    ap.add_argument("--cleanup", default=None, help="a temporary working directory to remove after")
    args = ap.parse_args(argv)
    _watch(args.fd, args.token, args.cleanup)


if __name__ == "__main__":
    main()
