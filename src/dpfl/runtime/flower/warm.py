"""A warm dpfl client per SuperNode: torch, the data set and the built run stay loaded between rounds.

Flower (1.41) starts a fresh ClientApp process for every message, which would re-import torch
and rebuild the run (load and verify the data set, partition it, build the model) every round:
≈ 10 s of CPU per client per round, enough to make every upload late on a loaded machine. The
dpfl ClientApp therefore only decodes the message and forwards the round to a long-running
worker process of its SuperNode (started by the first ClientApp, in the process group of what
starts the node's ClientApps — the SuperNode's, or dpfl's executor's (:mod:`.executor`) — so it is
stopped with it; it also exits when the ClientApps' parent process is gone or after
``IDLE_SECONDS`` without a request). Node config ``warm=false`` trains in the ClientApp process
instead (the same code, cold).

The worker listens on a Unix socket in a folder only the user can open (mode 0700), accepts
connections only from the same user (SO_PEERCRED), and speaks a data-only protocol: a JSON
header and raw array bytes each way, no pickle. What it computes is :func:`train_round`, the
same function a cold ClientApp calls.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["IDLE_SECONDS", "NODE_THREADS_ENV", "WarmClient", "node_threads", "process_alive", "train_round"]

IDLE_SECONDS = 1800.0
NODE_THREADS_ENV = "DPFL_NODE_THREADS"
"""Torch threads a node trains its client with (unset: the run config's ``threads``). The
SuperNodes of a local federation share the machine's cores: ``dpfl federate local`` sets it to
cores // nodes, at least 1."""
_MAX_HEADER = 64 << 20  # the run config travels in the header
_CACHE: dict[str, Any] = {}


# --------------------------------------------------------------------------- the round itself


def _experiment(config_json: str, data_dir: str | None) -> tuple[Any, float]:
    """The run, rebuilt from the server's config on this node (cached per config), and the
    seconds the build took (0 when cached)."""
    from dpfl.config import parse_config
    from dpfl.rounds import build_experiment

    key = hashlib.sha256((config_json + "|" + str(data_dir)).encode()).hexdigest()
    if key in _CACHE:
        return _CACHE[key], 0.0
    start = time.perf_counter()
    threads = node_threads()  # a bad value fails this message, before anything is cached
    raw = json.loads(config_json)
    if data_dir:
        raw.setdefault("data", {})["dir"] = data_dir
    _CACHE.clear()
    exp = build_experiment(parse_config(raw))
    if threads is not None:
        # the build sets torch's threads to the config's `threads`: four nodes on two cores each
        # running two OpenMP threads spent 5-25x the CPU seconds of one thread on the same training
        import torch

        torch.set_num_threads(threads)
    _CACHE[key] = exp
    return exp, time.perf_counter() - start


def node_threads() -> int | None:
    """Torch threads for this node's training: ``DPFL_NODE_THREADS``; None when unset (the run
    config's ``threads``, set by the build).

    Raises:
        ConfigError: the variable holds anything but a whole number >= 1.
    """
    from dpfl.errors import env_positive_int

    return env_positive_int(NODE_THREADS_ENV)


def train_round(
    rc: dict[str, Any], params: np.ndarray, cid: int, data_dir: str | None
) -> tuple[dict[str, Any], np.ndarray]:
    """One client's round: train from ``params``, run the algorithm's ``client_step`` (clip,
    noise, randomize), seal the report for a shuffler if the round says so.

    Args:
        rc: the round record of the server's message (:mod:`.codec`), ``state`` decoded.
        params: the global model.
        cid: the dpfl client this node holds.
        data_dir: this machine's data folder (None: the config's).

    Returns:
        (meta, vector): meta holds ``num_samples``, ``train_loss``, ``declared``, ``seconds``
        (``build``, ``train``, ``step``: :mod:`.timing`) and, for a sealed report, ``sealed``
        (hex); vector is the upload (empty when sealed).
    """
    import torch

    from dpfl.client.context import RoundInfo
    from dpfl.errors import ConfigError
    from dpfl.rng import SeedSequence

    exp, build = _experiment(str(rc["config"]), data_dir)
    if exp.data.num_clients != int(rc["num-clients"]):
        raise ConfigError(f"this node partitions the data into {exp.data.num_clients} clients, the server into "
                          f"{rc['num-clients']}: the data sets differ")
    algo = exp.algorithm
    algo.load_state_dict(rc["state"])
    t = int(rc["round"])
    start = torch.from_numpy(np.array(params, copy=True)).to(exp.init_params.device, exp.init_params.dtype)
    t0, cpu0 = time.perf_counter(), time.process_time()
    local = exp.engine.train(start, [cid], t)
    t1, cpu1 = time.perf_counter(), time.process_time()
    # the client's noise: ChaCha20 under fresh OS keys unless the run asks for reproducible noise (testing)
    noise_seeds = exp.seeds if bool(rc.get("reproducible", False)) else SeedSequence.secure_mode("chacha20")
    # hidden participation: this client samples itself with its own secret coin
    info = RoundInfo(t, exp.data.num_clients, torch.tensor([cid]), noise_seeds, cohort_size=int(rc["cohort-size"]),
                     hidden_participation=bool(rc.get("hidden-participation", False)))
    up = algo.client_step(start, local, info)
    vector = up.params[0].detach().cpu()
    seconds = {"build": build, "train": t1 - t0, "train_cpu": cpu1 - cpu0, "step": time.perf_counter() - t1}
    # a private algorithm's client keeps its training loss: the loss is a function of its data with
    # no noise on it, which the certificate against the server does not cover (NaN on the wire)
    from dpfl.algorithms.private import PrivateAlgorithm

    keep = isinstance(algo, PrivateAlgorithm) and not algo.reports_train_loss
    loss = float("nan") if keep else float(up.train_loss[0])
    meta: dict[str, Any] = {"num_samples": int(up.num_samples[0]), "train_loss": loss,
                            "declared": {k: float(v[0]) for k, v in up.declared.items()}, "seconds": seconds}
    shuffler_key = rc.get("shuffler-key")
    if shuffler_key:  # split & shuffle: only the shuffler can read the report
        from dpfl.runtime.sealed import seal

        key = bytes.fromhex(shuffler_key) if isinstance(shuffler_key, str) else bytes(shuffler_key)
        meta["sealed"] = seal(vector, key, t).hex()
        seconds["step"] = time.perf_counter() - t1
        return meta, np.zeros(0, dtype=np.float32)
    return meta, np.ascontiguousarray(vector.numpy())


# --------------------------------------------------------------------------- wire format


def _send(sock: socket.socket, header: dict[str, Any], array: np.ndarray) -> None:
    head = json.dumps(header).encode()
    body = np.ascontiguousarray(array).tobytes()
    sock.sendall(struct.pack("<QQ", len(head), len(body)) + head + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> tuple[dict[str, Any], np.ndarray]:
    hlen, blen = struct.unpack("<QQ", _recv_exact(sock, 16))
    if hlen > _MAX_HEADER:
        raise ConnectionError(f"header of {hlen} bytes")
    header = json.loads(_recv_exact(sock, hlen))
    dtype = np.dtype(str(header.get("dtype", "float32")))
    if dtype.kind not in "fiub":
        raise ConnectionError(f"array dtype {dtype} is not numeric")
    body = _recv_exact(sock, blen)
    return header, np.frombuffer(body, dtype=dtype).copy()


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


# --------------------------------------------------------------------------- the worker


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def serve(path: Path, parent_pid: int, idle_seconds: float = IDLE_SECONDS, prepare: Path | None = None) -> None:
    """Answer ``train`` requests on ``path`` until ``parent_pid`` is gone or nothing came for
    ``idle_seconds``; ``prepare``: a JSON file (``config``, ``data_dir``) of the run to build
    once listening, before the first request is read (a request waits in the backlog)."""
    import torch

    import dpfl.rounds  # noqa: F401 (the first request's build then times the data, not the imports)
    from dpfl.runtime.flower.timing import process_start

    torch.set_num_threads(1)  # until a run is built (each build sets the node's threads)
    began = process_start()
    imports = time.time() - began if began is not None else 0.0  # interpreter start and imports
    served = 0
    last = [time.monotonic()]

    def leave(*_: Any) -> None:
        for leftover in (path, path.with_suffix(".lock"), path.with_suffix(".pid")):
            try:
                leftover.unlink()
            except OSError:
                pass
        os._exit(0)

    def watch() -> None:
        while process_alive(parent_pid) and time.monotonic() - last[0] < idle_seconds:
            time.sleep(0.5)
        leave()

    signal.signal(signal.SIGTERM, leave)  # stopped with its SuperNode's process group
    threading.Thread(target=watch, daemon=True).start()
    tmp = path.with_name(path.name + f".{os.getpid()}")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(tmp))
    os.chmod(tmp, 0o600)
    srv.listen(8)
    os.replace(tmp, path)  # visible only once it listens
    if prepare is not None:
        try:
            plan = json.loads(prepare.read_text())
            prepare.unlink()
            _experiment(str(plan["config"]), plan.get("data_dir"))
        except Exception:  # noqa: BLE001 (the first request rebuilds the run and reports the error)
            pass
    while True:
        conn, _ = srv.accept()
        with conn:
            last[0] = time.monotonic()
            if not _same_user(conn):
                continue
            try:
                header, params = _recv(conn)
                meta, vector = train_round(header["rc"], params, int(header["client"]), header.get("data_dir"))
                meta["seconds"] = {**meta["seconds"], "imports": imports, "first": served == 0}
                served += 1
                _send(conn, {"ok": True, **meta, "dtype": str(vector.dtype)}, vector)
            except Exception as err:  # reported to the ClientApp, which fails the round for this client
                try:
                    _send(conn, {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}, np.zeros(0, np.uint8))
                except OSError:
                    pass
            last[0] = time.monotonic()


class WarmClient:
    """The ClientApp's handle on its SuperNode's worker (started on first use)."""

    def __init__(self, key: str, parent_pid: int, timeout: float = 3600.0) -> None:
        folder = Path(tempfile.gettempdir()) / f"dpfl-warm-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
            raise PermissionError(f"{folder} must belong to this user and be private (mode 0700)")
        self.path = folder / f"{key}.sock"
        self.parent_pid = parent_pid
        self.timeout = timeout

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            return None
        return sock

    def _clean_stale(self) -> None:
        """Remove the sockets of workers that were killed (nobody listens any more)."""
        for sock_path in self.path.parent.glob("*.sock"):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(sock_path))
            except ConnectionRefusedError:
                for leftover in (sock_path, sock_path.with_suffix(".lock")):
                    try:
                        leftover.unlink()
                    except OSError:
                        pass
            except OSError:
                pass
            finally:
                probe.close()

    def _start(self, prepare: tuple[str, str | None] | None = None, wait: bool = True) -> None:
        """Start the worker unless one listens or is starting (its pid file names a live
        process); ``prepare`` (config JSON, data dir): the worker builds that run as soon as it
        listens; ``wait``: return once it listens."""
        self._clean_stale()
        lock = self.path.with_suffix(".lock")
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)  # one worker per node even if two ClientApps race
            sock = self._connect()
            if sock is not None:
                sock.close()
                return
            pid_file = self.path.with_suffix(".pid")
            try:
                starting = int(pid_file.read_text())
            except (OSError, ValueError):
                starting = 0
            if not (starting and process_alive(starting)):
                args = [sys.executable, "-m", "dpfl.runtime.flower.warm", "--socket", str(self.path),
                        "--parent-pid", str(self.parent_pid)]
                if prepare is not None:
                    plan = self.path.with_suffix(".prepare.json")
                    plan_fd = os.open(plan, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
                    with os.fdopen(plan_fd, "w") as f:
                        json.dump({"config": prepare[0], "data_dir": prepare[1]}, f)
                    args += ["--prepare", str(plan)]
                proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, close_fds=True)
                pid_file.write_text(str(proc.pid))
            if not wait:
                return
            end = time.monotonic() + 120
            while not self.path.exists():
                if time.monotonic() > end:
                    raise TimeoutError(f"the dpfl worker did not open {self.path} within 120 s")
                time.sleep(0.05)
        finally:
            os.close(fd)

    def prepare(self, config_json: str, data_dir: str | None) -> None:
        """Start the worker now, without waiting for it, and have it build the run of
        ``config_json`` (load and partition the data, build the model) before the first
        ``train`` (the ClientApp calls this when the server asks which client the node holds);
        nothing when a worker already runs or is starting."""
        self._start((config_json, data_dir), wait=False)

    def train(self, rc: dict[str, Any], params: np.ndarray, client: int,
              data_dir: str | None) -> tuple[dict[str, Any], np.ndarray]:
        """:func:`train_round` in the worker; the meta also holds ``connect``, the seconds it took
        to reach the worker (including starting it when there was none)."""
        begun = time.perf_counter()
        sock = self._connect()
        if sock is None:
            self._start()
            sock = self._connect()
            if sock is None:
                raise ConnectionError(f"cannot connect to the dpfl worker at {self.path}")
        connect = time.perf_counter() - begun
        with sock:
            _send(sock, {"rc": rc, "client": int(client), "data_dir": data_dir, "dtype": str(params.dtype)}, params)
            header, vector = _recv(sock)
        if not header.get("ok"):
            raise RuntimeError(f"the dpfl worker failed: {header.get('error')}")
        return {**header, "connect": connect}, vector


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="dpfl's warm client worker of one SuperNode (started by the ClientApp)")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--parent-pid", type=int, required=True)
    ap.add_argument("--idle-seconds", type=float, default=IDLE_SECONDS)
    ap.add_argument("--prepare", default=None, help="JSON file of the run to build before the first request")
    args = ap.parse_args(argv)
    serve(Path(args.socket), args.parent_pid, args.idle_seconds, None if args.prepare is None else Path(args.prepare))


if __name__ == "__main__":
    main()
