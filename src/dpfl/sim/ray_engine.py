"""Ray-sharded simulation: each round's cohort is split across Ray actors running the vectorized engine.

For users with a Ray cluster. Each actor holds one :class:`~dpfl.sim.vectorized.VectorizedEngine`
built once over the run's local problem and client data, which are shipped once with ``ray.put``
(the sample arrays as numpy, so actors on the same node share one read-only copy in Ray's object
store). Every round the cohort (in the order the algorithm sampled it) is cut into contiguous
shards whose sizes differ by at most one, shard ``i`` goes to actor ``i``, every actor trains its
shard from the same global parameters, and the shard results are concatenated in cohort order
into one :class:`~dpfl.client.context.LocalResult`. Server-side steps (clipping, noise,
aggregation, the ledger) stay in the driver, unchanged.

Randomness: every draw in local training is keyed by (round, client, purpose) (:mod:`dpfl.rng`),
so a client's batches are the same whichever actor trains it. The local models equal the
in-process engine's up to float32 rounding, not always bit for bit: a shard's stack has its own
padded batch width (the largest batch among its clients) and client count, and two kernels'
summation order depends on those shapes — the bias step's sum over the padded width, and the
fused weight step (``baddbmm_``) on a one-client stack with several threads, where MKL splits one
GEMM across threads. An in-process run with the same shards and thread count gives the same
bits (tests/integration/test_ray_engine.py).

Where Ray runs: an already initialized Ray (``ray.init`` called by the user) is used as is; else
the engine connects to ``address`` or ``$RAY_ADDRESS`` when given, else starts a new local
instance with ``num_cpus`` CPUs (``$DPFL_RAY_NUM_CPUS``, default ``os.cpu_count()``) — it never
attaches to a ``ray start`` instance it was not pointed at. What the engine
started (actors; the connection or the local instance) it releases in :meth:`RayEngine.close`,
which also runs when the engine is garbage collected or the interpreter exits.

Options (constructor arguments; the runner builds engines without options, so there the
environment variables apply):
  ``num_actors`` / ``$DPFL_RAY_ACTORS``  actors, default = CPUs available in the Ray cluster;
  ``cpus_per_actor``  CPUs each actor reserves and torch threads it uses, default = available
  CPUs // actors (at least 1), so actors never oversubscribe the cores Ray hands out.

Secure-mode seeds (``SeedSequence.secure_mode()``) are drawn from each actor's own OS CSPRNG;
the no-reuse check is per process (a repeat across processes has probability ~2⁻⁶⁴ per pair).

Imports Ray lazily: dpfl works without it (``pip install 'dpfl[ray]'``). Training runs on CPU.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from dpfl.errors import ConfigError, env_positive_int
from dpfl.rng import SeedSequence
from dpfl.sim.base import ClientData, Engine, LocalProblem, LocalResult

__all__ = ["RayEngine", "concat_results", "shard_bounds"]

_READY_TIMEOUT_S = 300.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("engine 'ray' needs Ray, which is not installed: pip install 'dpfl[ray]'") from None
    return ray


def shard_bounds(k: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` ranges cutting ``k`` cohort positions into ``min(k, num_shards)``
    shards whose sizes differ by at most one (the first ``k mod n`` shards hold one more).

    >>> shard_bounds(7, 3)
    [(0, 3), (3, 5), (5, 7)]
    """
    if num_shards < 1:
        raise ConfigError(f"`num_shards` must be at least 1. Found {num_shards}.")
    n = min(k, num_shards)
    bounds, start = [], 0
    for i in range(n):
        stop = start + k // n + (1 if i < k % n else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def concat_results(parts: Sequence[LocalResult]) -> LocalResult:
    """Shard results concatenated along the cohort dimension, in the order given."""
    if not parts:
        raise ValueError("no shard results to concatenate")
    has_grads = [p.final_grads is not None for p in parts]
    if any(has_grads) and not all(has_grads):
        raise ValueError("some shards returned final gradients and some did not")
    return LocalResult(
        params=torch.cat([p.params for p in parts]),
        train_loss=torch.cat([p.train_loss for p in parts]),
        num_samples=torch.cat([p.num_samples for p in parts]),
        final_grads=torch.cat([p.final_grads for p in parts]) if all(has_grads) else None,  # type: ignore[misc]
    )


class ShardWorker:
    """What one Ray actor runs: a vectorized engine over the whole run's data (trains any shard)."""

    def __init__(self, payload: tuple[Any, ...], threads: int, engine_options: dict[str, Any]) -> None:
        from dpfl.sim.vectorized import VectorizedEngine

        problem, x, y, indices, seeds = payload
        torch.set_num_threads(threads)
        with warnings.catch_warnings():
            # The arrays are read-only views of Ray's shared object store; training only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            data = ClientData(torch.from_numpy(x), torch.from_numpy(y), [torch.from_numpy(i) for i in indices])
        self.engine = VectorizedEngine(problem, data, seeds, **engine_options)
        self.train_seconds: list[float] = []

    def info(self) -> dict[str, Any]:
        """Process id, torch threads, peak resident memory (MB) and seconds of each train call."""
        import resource

        return {
            "pid": os.getpid(),
            "threads": torch.get_num_threads(),
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "train_seconds": list(self.train_seconds),
        }

    def train(self, global_params: torch.Tensor, clients: list[int], round_idx: int) -> tuple[Any, ...]:
        """The shard's LocalResult as numpy arrays: Ray ships those through its object store
        without pickling a copy (a torch tensor would be serialized into bytes and back)."""
        t0 = time.perf_counter()
        res = self.engine.train(global_params, clients, round_idx)
        self.train_seconds.append(time.perf_counter() - t0)
        grads = None if res.final_grads is None else res.final_grads.numpy()
        return res.params.numpy(), res.train_loss.numpy(), res.num_samples.numpy(), grads


def _tensor(array: Any) -> torch.Tensor:
    with warnings.catch_warnings():
        # a read-only view of Ray's object store; concat_results copies it
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def _from_arrays(params: Any, train_loss: Any, num_samples: Any, final_grads: Any) -> LocalResult:
    grads = None if final_grads is None else _tensor(final_grads)
    return LocalResult(_tensor(params), _tensor(train_loss), _tensor(num_samples), grads)


# Ray 2.55 warns on every ray.init that a future release will stop hiding GPUs from tasks
# that reserve none (num_gpus=0). The engine's actors reserve no GPU and train on CPU, so either
# behaviour is the same to them; the tip is not the user's to act on.
_RAY_GPU_TIP = r"Tip: In future versions of Ray, Ray will no longer override accelerator"


def _init_ray(ray: Any, **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` without Ray's FutureWarning about GPU visibility (only that one)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RAY_GPU_TIP, category=FutureWarning)
        ray.init(**kwargs)


def _release(actors: list[Any], shutdown: bool) -> None:
    """Kill the engine's actors and, if the engine initialized Ray, shut its connection down."""
    try:
        import ray
    except ImportError:  # pragma: no cover - the engine could not have been built
        return
    if not ray.is_initialized():
        return
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - an actor that is already gone is fine
            pass
    actors.clear()
    if shutdown:
        ray.shutdown()


class RayEngine(Engine):
    """Shards each round's cohort across Ray actors; see the module docstring.

    Args:
        problem, data, seeds: as for every engine.
        num_actors: actors to start (``$DPFL_RAY_ACTORS``; default: CPUs available in the cluster).
        address: a Ray cluster to connect to (default ``$RAY_ADDRESS``; none: a local instance).
        num_cpus: CPUs of a local instance the engine starts (``$DPFL_RAY_NUM_CPUS``; default
            ``os.cpu_count()``); an error when connecting to a cluster.
        cpus_per_actor: CPUs each actor reserves and torch threads it uses (default: available
            CPUs // actors, at least 1).
        engine_options: keyword arguments of each actor's ``VectorizedEngine``.
    """

    name = "ray"

    def __init__(
        self,
        problem: LocalProblem,
        data: ClientData,
        seeds: SeedSequence,
        *,
        num_actors: int | None = None,
        address: str | None = None,
        num_cpus: int | None = None,
        cpus_per_actor: int | None = None,
        engine_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(problem, data, seeds)
        ray = _ray()
        if data.x.device.type != "cpu":
            raise ConfigError(f"engine 'ray' trains on CPU actors; `device` must be 'cpu'. Found {data.x.device}.")
        for name, value in (("num_actors", num_actors), ("num_cpus", num_cpus), ("cpus_per_actor", cpus_per_actor)):
            if value is not None and value < 1:
                raise ConfigError(f"`{name}` must be at least 1. Found {value}.")
        address = address or os.environ.get("RAY_ADDRESS") or None
        num_cpus = num_cpus or env_positive_int("DPFL_RAY_NUM_CPUS")
        started = False
        if not ray.is_initialized():
            if address is not None:
                if num_cpus is not None:
                    raise ConfigError(
                        f"`num_cpus` ({num_cpus}) sizes a local Ray instance; it cannot be set when "
                        f"connecting to the cluster at {address!r}."
                    )
                _init_ray(ray, address=address, log_to_driver=False)
            else:
                # "local": a new instance, never one found on the machine that nobody asked for
                _init_ray(ray, address="local", num_cpus=num_cpus or os.cpu_count() or 1,
                          include_dashboard=False, log_to_driver=False)
            started = True
        self._actors: list[Any] = []
        self._finalizer = weakref.finalize(self, _release, self._actors, started)
        available = int(ray.available_resources().get("CPU", 0))
        self.num_actors = num_actors or env_positive_int("DPFL_RAY_ACTORS") or max(available, 1)
        self.cpus_per_actor = cpus_per_actor or max(available // self.num_actors, 1)
        payload = ray.put((
            problem,
            data.x.detach().contiguous().numpy(),
            data.y.detach().contiguous().numpy(),
            [idx.detach().contiguous().numpy() for idx in data.client_indices],
            seeds,
        ))
        actor_cls = ray.remote(num_cpus=self.cpus_per_actor)(ShardWorker)
        options = dict(engine_options or {})
        self._actors.extend(actor_cls.remote(payload, self.cpus_per_actor, options) for _ in range(self.num_actors))
        pending = [a.info.remote() for a in self._actors]
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=_READY_TIMEOUT_S)
        if len(ready) < len(pending):
            self.close()
            raise ConfigError(
                f"only {len(ready)} of {self.num_actors} Ray actors started within {_READY_TIMEOUT_S:.0f} s; "
                f"each reserves {self.cpus_per_actor} CPU(s) and the cluster has {available} available "
                "(lower $DPFL_RAY_ACTORS or `cpus_per_actor`)."
            )
        self.actor_info: list[dict[str, Any]] = ray.get(ready)

    def train(self, global_params: torch.Tensor, clients: Sequence[int], round_idx: int) -> LocalResult:
        if not self._actors:
            raise RuntimeError("this RayEngine is closed")
        ids = [int(c) for c in clients]
        if not ids:
            raise ValueError("cannot train an empty cohort")
        ray = _ray()
        params_ref = ray.put(global_params.detach().cpu())  # one copy in the object store for all actors
        futures = [
            actor.train.remote(params_ref, ids[start:stop], round_idx)
            for actor, (start, stop) in zip(self._actors, shard_bounds(len(ids), len(self._actors)), strict=False)
        ]
        return concat_results([_from_arrays(*arrays) for arrays in ray.get(futures)])

    def actor_stats(self) -> list[dict[str, Any]]:
        """Process id, torch threads and peak resident memory of every actor (diagnostics)."""
        return _ray().get([a.info.remote() for a in self._actors])

    def close(self) -> None:
        """Kill the actors and shut down the Ray connection or instance this engine started."""
        self._finalizer()

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
