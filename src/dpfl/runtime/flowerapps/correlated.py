"""Correlated noise across rounds for any Flower app: DP-FTRL's tree, banded MF or BLT, in a few lines.

A fleet that cannot be sampled at random (devices check in when idle, charging and on Wi-Fi) gives
Flower's central-DP wrappers nothing to amplify with, and their independent Gaussian noise each round
then costs the full composition. The mechanisms of :mod:`dpfl.algorithms.dp_ftrl` — noise correlated
across rounds by a matrix factorization, under a participation schema the server enforces — do
better there. :class:`CorrelatedNoiseStrategy` gives them to a Flower (Message API) app whose
strategy is ``FedAvg`` or one like it::

    strategy = FedAvg(fraction_evaluate=0.0)
    strategy = CorrelatedNoiseStrategy(                       # + dpfl
        strategy, num_clients=10, num_rounds=10, delta=1e-5,
        schema={"kind": "min_separation", "min_separation": 5},
        mechanism="blt", clip_norm=1.0, target_epsilon=8.0)

Each round the wrapper

1. **selects the cohort by the schema** — dpfl's own sampler (:mod:`dpfl.sampling.schemas`:
   ``min_separation``, ``cyclic_poisson`` or ``availability``) over the fleet, the nodes numbered
   0..N−1 in id order at the first round. The app's strategy still builds the training message
   (its arrays and config, so FedProx's proximal term or a learning-rate schedule stay its own),
   but its random sample is overridden: a uniform sample is what such a fleet cannot draw, and the
   schema the sampler enforces is the schema the certificate prices — a cohort that broke it
   could not happen, rather than be refused after the fact;
2. **clips** each reply's update Δ_k = θ_k − θ to L2 norm C on the server (as Flower's
   ``DifferentialPrivacyServerSideFixedClipping``: a client that clips or not cannot exceed the
   sensitivity), **sums** them, **adds** round t's noise σC·w_t of the strategy's
   :class:`~dpfl.privacy.mechanisms.correlated.NoiseStream` (drawn from ChaCha20 under a fresh OS
   key per round, :class:`dpfl.rng.CsprngGenerator`, unless ``noise_generator="seeded"``),
   **divides** by the public denominator m (the schema's expected cohort) and steps θ ← θ + η·(mean,
   or heavy-ball momentum) — :meth:`dpfl.algorithms.dp_ftrl.DpFtrl.aggregate` itself;
3. **records** the round in the ledger of a :class:`dpfl.rounds.gate.PrivacyGate`, the gate of
   ``dpfl account`` and of dpfl's own runs, around the same :class:`~dpfl.algorithms.dp_ftrl.DpFtrl`
   that :func:`dpfl.rounds.build_plan` builds from the equivalent run config
   (:meth:`CorrelatedNoiseStrategy.account_config`): the certificates are ``dpfl account``'s by
   construction, per observer — **server** ε = ∞ (central DP: it sees every update before it adds
   the noise; stated, never hidden), **public** (whoever sees the models) the composition, at the
   participations that happened, of G_tt + 2·Σ_{s<t}|G_st| per participation (G = CᵀC, clip 1:
   the b-min-separated sensitivity of Choquette-Choo et al. 2023, arXiv 2306.08153, as
   :mod:`dpfl.privacy.releases.factorization` prices it; the tree: Kairouz et al. 2021, arXiv
   2103.00039, via dp-accounting's tree event, :mod:`dpfl.privacy.releases.tree`). The calibration
   (``target_epsilon`` → σ) is dp-ftrl's: the papers' claim at the schema's worst participation
   pattern equals the target.

The inner strategy's evaluation passes through; its ``train_metrics_aggr_fn`` aggregates the
replies' metrics (the experimenter's view, outside the certificate). A round whose scheduled
nodes all fail still releases its noise (the noise stream's next entry; the model moves by it), as
dp-ftrl's rounds do. Flower's own DP wrappers around the inner strategy are refused (the noise
would be added twice, and certified once).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from logging import INFO, WARNING
from typing import Any

import numpy as np
import torch

from dpfl.algorithms.base import Uploads
from dpfl.algorithms.dp_ftrl import DpFtrl
from dpfl.client.context import RoundInfo
from dpfl.config import parse_config
from dpfl.errors import ConfigError
from dpfl.privacy.releases import Release
from dpfl.rounds import build_plan
from dpfl.rounds.gate import PrivacyGate
from dpfl.rounds.result import PrivacySummary
from dpfl.runtime.flowerapps.certified import _fmt, _log, _message_strategy_base

__all__ = ["CorrelatedNoiseStrategy", "flatten_arrays", "unflatten_arrays"]

SCHEMAS = ("min_separation", "cyclic_poisson", "availability")


def flatten_arrays(arrays: Any) -> tuple[torch.Tensor, list[str], list[tuple[tuple[int, ...], np.dtype]]]:
    """An ``ArrayRecord`` as one float32 vector, with its keys and each array's (shape, dtype)."""
    keys = list(arrays.keys())
    nd = arrays.to_numpy_ndarrays()
    meta = [(tuple(a.shape), a.dtype) for a in nd]
    flat = np.concatenate([np.asarray(a, dtype=np.float32).reshape(-1) for a in nd]) if nd else np.zeros(0, np.float32)
    return torch.from_numpy(flat), keys, meta


def unflatten_arrays(vec: torch.Tensor, keys: list[str], meta: list[tuple[tuple[int, ...], np.dtype]]) -> Any:
    """The inverse of :func:`flatten_arrays`: an ``ArrayRecord`` with the same keys, shapes, dtypes."""
    from flwr.app import Array, ArrayRecord

    flat = vec.detach().cpu().numpy()
    out: dict[str, Any] = {}
    at = 0
    for key, (shape, dtype) in zip(keys, meta, strict=True):
        size = int(np.prod(shape)) if shape else 1
        out[key] = Array(np.ascontiguousarray(flat[at:at + size].reshape(shape).astype(dtype)))
        at += size
    return ArrayRecord(out)


def _refuse_flower_dp(strategy: Any) -> None:
    from flwr.serverapp import strategy as message

    flower_dp = (message.DifferentialPrivacyServerSideFixedClipping, message.DifferentialPrivacyClientSideFixedClipping,
                 message.DifferentialPrivacyServerSideAdaptiveClipping,
                 message.DifferentialPrivacyClientSideAdaptiveClipping)
    if isinstance(strategy, flower_dp):
        raise ConfigError(f"{type(strategy).__name__} inside CorrelatedNoiseStrategy: the wrapper clips and adds the "
                          "noise itself; Flower's wrapper would add independent noise a second time, uncertified. "
                          "Wrap the plain strategy (FedAvg(...)).")
    if not callable(getattr(strategy, "configure_train", None)):
        raise ConfigError(f"CorrelatedNoiseStrategy wraps a Flower Message-API strategy (flwr.serverapp.strategy, "
                          f"e.g. FedAvg). Found {type(strategy).__name__}.")


class CorrelatedNoiseStrategy(_message_strategy_base()):  # type: ignore[misc]
    """A Flower (Message API) strategy with dp-ftrl's correlated noise and dpfl's certificates.

    Args:
        strategy: the app's strategy (``FedAvg`` or one like it: it builds the training messages and
            aggregates the metrics; the model's aggregate is the wrapper's).
        num_clients: N, the fleet: the nodes the schema numbers 0..N−1 (in node-id order, at the
            first round, which waits until N nodes are connected; nodes beyond the first N take no
            part). The denominator m and the schedule depend on it, as ``partition.num_clients``.
        num_rounds: the rounds the strategy is optimized and calibrated for (``start`` must run at
            most as many).
        delta: δ of every certificate.
        schema: the participation schema, as a run config's ``sampling`` section: ``kind``
            (min_separation, cyclic_poisson or availability), ``min_separation`` b, and
            ``max_participations``, ``sample_rate`` or ``availability`` as the kind takes.
        mechanism: blt | banded | tree | independent (dp-ftrl's ``mechanism``).
        clip_norm: C, the L2 bound of each client's update (clipped on the server).
        noise_multiplier: σ; or ``target_epsilon``: σ calibrated so that the papers' claim at the
            schema's worst participation pattern is the target (exactly one of the two).
        server_lr, server_momentum: η and heavy-ball β of the server step (β is also the workload
            BLT and banded MF are optimized for); FedAvg's step is η = 1, β = 0.
        noise_generator: "csprng" (default: ChaCha20 under a fresh OS key per stream, as dpfl's
            deployments draw) or "seeded" (from ``seed``: reproducible, for tests only — anyone who
            knows the seed can subtract the noise). It also draws the random schemas' coins.
        seed: the seed of the equivalent run config (the ``seeded`` streams; the availability
            schema's phases come from its own ``availability.seed``).
        **options: dp-ftrl's other options (``bands``, ``buffers``, ``restart_every``,
            ``denominator``, ``cooldown_rounds``, ``cooldown_final``).

    Raises:
        ConfigError: an unknown option or one out of range (named as in a run config:
            ``algorithm.options.…``, ``sampling.…``); a schema that is not a participation schema;
            Flower's DP wrappers as ``strategy``; ``start`` with more rounds than ``num_rounds``.
    """

    def __init__(self, strategy: Any, *, num_clients: int, num_rounds: int, delta: float, schema: Mapping[str, Any],
                 mechanism: str = "blt", clip_norm: float, noise_multiplier: float | None = None,
                 target_epsilon: float | None = None, server_lr: float = 1.0, server_momentum: float = 0.0,
                 noise_generator: str = "csprng", seed: int = 0, **options: Any) -> None:
        super().__init__()
        _refuse_flower_dp(strategy)
        if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
            raise ConfigError(f"`num_clients` must be a positive integer (the fleet's nodes). Found {num_clients!r}.")
        kind = dict(schema).get("kind") if isinstance(schema, Mapping) else None
        if kind not in SCHEMAS:
            raise ConfigError(f"`schema` must be a participation schema, a mapping with `kind` one of {list(SCHEMAS)} "
                              f"(as a run config's `sampling`). Found {schema!r}.")
        algo_options: dict[str, Any] = {"mechanism": mechanism, "clip_norm": clip_norm, "server_lr": server_lr,
                                        "server_momentum": server_momentum, **options}
        if noise_multiplier is not None:
            algo_options["noise_multiplier"] = noise_multiplier
        if target_epsilon is not None:
            algo_options["target_epsilon"] = target_epsilon
        self.strategy = strategy
        self.num_clients = num_clients
        self._raw = {"name": "flower-correlated-noise", "seed": seed, "rounds": num_rounds,
                     "algorithm": {"name": "dp-ftrl", "options": algo_options}, "sampling": dict(schema),
                     "privacy": {"delta": delta, "noise_generator": noise_generator}}
        self.config = parse_config(self._raw)
        # the run's own build from shapes (dpfl account's): the sizes are public and unused by dp-ftrl
        self.plan = build_plan(self.config, [1] * num_clients, 1)
        algorithm = self.plan.algorithm
        assert isinstance(algorithm, DpFtrl)
        self.algorithm: DpFtrl = algorithm
        self.gate = PrivacyGate(algorithm, num_clients, self.plan.sizes, self.config.privacy, self.plan.seeds,
                                planned_rounds=self.config.rounds)
        self.num_rounds = int(self.config.rounds)
        self.clients: dict[int, int] = {}  # node id → client
        self.nodes: list[int] = []  # client → node id
        self._current: Any = None
        self._rounds: dict[int, tuple[RoundInfo, list[Release]]] = {}
        self._notices: list[str] = []
        self.round_lines: list[str] = []

    # ------------------------------------------------------------------ what dpfl account sees

    def account_config(self) -> dict[str, Any]:
        """The run config whose ``dpfl account`` gives this wrapper's certificates: the same
        algorithm options, schema, rounds, δ, noise generator and seed, and ``partition.num_clients``
        = N (write it as YAML, with a ``data`` section naming any dataset of at least N·1 samples)."""
        return {**self._raw, "partition": {"kind": "iid", "num_clients": self.num_clients}}

    def privacy(self) -> PrivacySummary:
        """The certificates so far, per observer (the gate's summary: ``dpfl account``'s form)."""
        return self.gate.summary()

    def __repr__(self) -> str:
        return f"dpfl correlated noise ({self.algorithm.options.mechanism}) around {self.strategy!r}"

    def _emit(self, kind: str, message: str, round_idx: int | None = None) -> None:
        del round_idx
        self._notices.append(f"{kind}: {message}")
        _log(WARNING, f"dpfl: {message}")

    def summary(self) -> None:
        c = self.algorithm.calibration()
        _log(INFO, f"dpfl: correlated noise {c.mechanism} over {self.num_rounds} rounds, σ = {c.noise_multiplier:.6g}, "
                   f"C = {self.algorithm.clip_norm:g}, m = {c.denominator:g}, schema {self.config.sampling.kind} "
                   f"(b = {c.min_separation}, k = {c.max_participations}), δ = {self.config.privacy.delta:g}; "
                   f"claimed ε {_fmt(self.algorithm.claimed_epsilon(self.num_rounds))} "
                   f"({self.algorithm.claim_notion()})")
        self.strategy.summary()

    # ------------------------------------------------------------------ train

    def _fleet(self, grid: Any) -> None:
        """Number the fleet at the first round: the first N node ids, once N are connected."""
        if self.nodes:
            return
        from flwr.serverapp.strategy.strategy_utils import sample_nodes

        _, connected = sample_nodes(grid, self.num_clients, 0)  # waits for N nodes
        ids = sorted(int(n) for n in connected)
        if len(ids) > self.num_clients:
            _log(WARNING, f"dpfl: {len(ids)} nodes connected, the fleet is the first {self.num_clients} by node id; "
                          "the others take no part")
        self.nodes = ids[: self.num_clients]
        self.clients = {node: i for i, node in enumerate(self.nodes)}

    def configure_train(self, server_round: int, arrays: Any, config: Any, grid: Any) -> Iterable[Any]:
        from flwr.app import Message, MessageType

        t = server_round - 1
        if t >= self.num_rounds:
            raise ConfigError(f"round {server_round}: the correlated noise was built for num_rounds = "
                              f"{self.num_rounds}; run start(num_rounds=...) with at most that many.")
        self._fleet(grid)
        self._current = arrays
        clients = self.algorithm.sample(t, self.num_clients, self.plan.seeds)
        info = RoundInfo(t, self.num_clients, clients, self.plan.seeds)
        info = info.with_plan(self.algorithm.plan(info))
        decision = self.gate.before_round(info, self._emit)
        if decision.stop_reason is not None:  # no target ε is set: dp-ftrl's calibration is the budget
            raise ConfigError(decision.stop_reason)
        self._rounds[t] = (info, decision.releases)
        if not len(clients):
            return []
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        if not messages:
            raise ConfigError(f"{type(self.strategy).__name__}.configure_train sent no message (fraction_train = 0?): "
                              "the wrapper addresses the strategy's training message to the schema's cohort.")
        content = messages[0].content
        _log(INFO, f"dpfl: round {server_round}: the schema's cohort, {len(clients)} of {self.num_clients} nodes "
                   f"(the strategy's own sample of {len(messages)} is not used)")
        return [Message(content=content, message_type=MessageType.TRAIN, dst_node_id=self.nodes[int(c)])
                for c in clients.tolist()]

    def _key(self) -> str | None:
        key = getattr(self.strategy, "arrayrecord_key", None)
        return None if key is None else str(key)

    def aggregate_train(self, server_round: int, replies: Iterable[Any]) -> tuple[Any, Any]:
        t = server_round - 1
        planned_round = self._rounds.pop(t, None)
        if planned_round is None:
            raise ConfigError(f"round {server_round} was not configured by this wrapper.")
        info, releases = planned_round
        current, keys, meta = flatten_arrays(self._current)
        planned = set(int(c) for c in info.clients.tolist())
        rows: dict[int, torch.Tensor] = {}
        ok = []
        for reply in replies:
            if reply.has_error():
                continue
            client = self.clients.get(int(reply.metadata.src_node_id))
            if client is None or client not in planned or client in rows:
                continue  # not in this round's cohort: nothing of it enters the aggregate
            records = reply.content.array_records
            key = self._key()
            record = records[key] if key is not None and key in records else next(iter(records.values()), None)
            if record is None:
                continue
            vec, got_keys, _ = flatten_arrays(record)
            if got_keys != keys or vec.numel() != current.numel():
                _log(WARNING, f"dpfl: round {server_round}: node {reply.metadata.src_node_id}'s arrays do not match "
                              "the model's (keys or sizes); its reply is not aggregated")
                continue
            rows[client] = vec - current
            ok.append(reply)
        arrived = sorted(rows)
        ids = torch.tensor(arrived, dtype=torch.long)
        params = torch.stack([rows[c] for c in arrived]) if arrived else torch.zeros(0, current.numel())
        norms = params.norm(dim=1).to(torch.float64) if arrived else torch.zeros(0, dtype=torch.float64)
        ones = torch.ones(len(arrived), dtype=torch.long)
        uploads = Uploads(ids, params, ones, torch.zeros(len(arrived)), diagnostics={"update_norm": norms})
        if len(arrived) < len(planned):  # what the arrivals released (dp-ftrl: each as planned)
            releases = self.gate.arrivals(info, ids, ones)
        out = self.algorithm.aggregate(current, uploads, info)  # re-clips, sums, adds σC·w_t, over m, steps
        entry = self.gate.record(t, releases, arrived, self.algorithm.claimed_epsilon(t + 1))
        clipped = int((norms > self.algorithm.clip_norm).sum())
        line = (f"dpfl round {server_round}: certified ε at δ = {self.config.privacy.delta:g} (RDP, worst client): "
                + ", ".join(f"{obs} {_fmt(float(eps))}" for obs, eps in entry["certified_rdp"].items())
                + f" · {len(arrived)} of {len(planned)} scheduled updates, {clipped} clipped"
                + f" · claimed ε {_fmt(self.algorithm.claimed_epsilon(t + 1))}")
        self.round_lines.append(line)
        _log(INFO, line)
        metrics = None
        aggr = getattr(self.strategy, "train_metrics_aggr_fn", None)
        if ok and callable(aggr):
            metrics = aggr([r.content for r in ok], str(getattr(self.strategy, "weighted_by_key", "num-examples")))
        return unflatten_arrays(out.global_params, keys, meta), metrics

    # ------------------------------------------------------------------ evaluate: the app's

    def configure_evaluate(self, server_round: int, arrays: Any, config: Any, grid: Any) -> Iterable[Any]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Any]) -> Any:
        return self.strategy.aggregate_evaluate(server_round, replies)

    # ------------------------------------------------------------------ the end

    def start(self, *args: Any, **kwargs: Any) -> Any:
        """Flower's round loop, then dpfl's final certificates in Flower's log."""
        rounds = kwargs.get("num_rounds", args[2] if len(args) > 2 else 3)
        if rounds > self.num_rounds:
            raise ConfigError(f"start(num_rounds={rounds}): the correlated noise was built and calibrated for "
                              f"num_rounds = {self.num_rounds}; pass at most that many (or build the wrapper for "
                              f"{rounds}).")
        result = super().start(*args, **kwargs)
        for line in self.report():
            _log(INFO, line)
        return result

    def report(self) -> list[str]:
        """The certificates so far as lines (what :meth:`start` logs at the end)."""
        summary = self.gate.summary()
        c = self.algorithm.calibration()
        rounds = self.gate.ledger.rounds_recorded
        head = (f"dpfl certificates after {rounds} rounds (dp-ftrl {c.mechanism}, σ = {c.noise_multiplier:.6g}, "
                f"C = {self.algorithm.clip_norm:g}, m = {c.denominator:g}, schema {self.config.sampling.kind}, "
                f"b = {c.min_separation}, k = {c.max_participations}):")
        lines = [head]
        for obs, cert in (summary.certified or {}).items():
            lines.append(f"  {obs} ε = {_fmt(cert.epsilon)} at δ = {cert.delta:g} ({cert.method}; RDP "
                         f"{_fmt(cert.epsilon_rdp)}, PLD {_fmt(cert.epsilon_pld)}; {cert.basis_text})")
        lines.append(f"  claimed ε = {_fmt(self.algorithm.claimed_epsilon(rounds))} ({summary.claim_notion})")
        lines.append("  why the server's figure: central DP — the server sees every clipped update before it adds "
                     "the correlated noise")
        for note in summary.not_covered:
            lines.append(f"  not covered: {note}")
        lines.append("  the same certificates: dpfl account of account_config() (the equivalent run config)")
        # the form of `dpfl account --json`'s "privacy" (its per-client tables left out)
        stored = {k: v for k, v in summary.to_dict().items() if not k.startswith("client_epsilons")}
        lines.append("dpfl certificates as JSON: " + json.dumps({"rounds": rounds, "privacy": stored}))
        return lines
