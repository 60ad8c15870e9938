"""dpfl's certificates for a Flower app's own differential privacy, per observer, in a few lines.

A Flower app that trains with Flower's central-DP wrappers (``DifferentialPrivacyServerSideFixedClipping``,
``DifferentialPrivacyClientSideFixedClipping``, Message API or legacy), ``fixedclipping_mod``,
``LocalDpMod`` or SecAgg+ wraps its strategy once more::

    strategy = DifferentialPrivacyClientSideFixedClipping(FedAvg(...), 0.2, 0.1, 20)
    strategy = CertifiedStrategy(strategy, delta=1e-5)             # Message API
    strategy = CertifiedLegacyStrategy(strategy, delta=1e-5, secure_aggregation=True)   # legacy + SecAgg+

Each round the wrapper reads what the DP strategy really does (noise multiplier z, clipping norm
C, the configured cohort size m, the cohort it drew, who clips, whether SecAgg+ hides the uploads,
the weights of the aggregate, the local noise of a declared ``LocalDpMod``) and records the
round's releases in a :class:`dpfl.privacy.PrivacyLedger`:

* **server** — in both of Flower's wrappers the server adds the noise after it has the clipped
  updates (server-side clipping) or their sum (client-side clipping, with or without SecAgg+), so
  against the server the ε is ∞ unless the clients add noise themselves (``LocalDpMod``).
* **public** — whoever sees the models the server broadcasts: the weighted average plus Gaussian
  noise of std ``z·C/m`` (Flower's ``compute_stdv``) and the clients' local noise, against client
  k's sensitivity ``w_k·C`` (its normalized weight times the clipping norm: FedAvg weighted by
  examples protects a heavy client less than Flower's accountant assumes). That is for zero-out
  neighbours (the client's update replaced by zero, its weight kept), what Flower's accountant
  assumes; ``relation="add_remove"`` prices the client gone from the average, whose realized
  denominator shrinks with it (FedAvg divides by the weight that arrived): ``2·w_k·C``.

``cohort="known"`` (the default): the observer knows who was sampled, no amplification (Flower's
own accountant assumes the same, ``SamplingMethod.NO_AMPLIFICATION``). ``cohort="secret"``: the
observer does not learn the cohort, drawn uniformly without replacement (Flower's
``sample_nodes``), which amplifies the public's figure — certified by dp-accounting's RDP for
sampling without replacement under replace-one (sensitivity 2C). The ε is logged each round in
Flower's log with Flower's own ``RdpAccountant`` figure beside it (the wrapped strategy's
accountant where it has one, else Flower's accountant composed over the same events), and at the
end with the PLD. ``max_epsilon`` stops the run before a round that would take an observer's
certified ε above its limit: the remaining rounds send no messages, and the last model stays.

Where dpfl cannot see what the app does it says so instead of guessing: a strategy it does not
know is taken to add no noise (ε = ∞ for what it releases); Flower's adaptive-clipping wrappers
are refused (the clip norm and the count query's share of the noise move each round inside the
wrapper); a client mod other than ``fixedclipping_mod`` and ``LocalDpMod`` is named as not
counted; with client-side clipping the server checks every visible update's norm against C.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any, Literal

import numpy as np

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import validate_delta
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release
from dpfl.privacy.releases.federated import federated_round_releases

__all__ = ["CertifiedLegacyStrategy", "CertifiedStrategy", "FlowerDp", "RoundCertifier", "read_flower_dp"]

Cohort = Literal["known", "secret"]
Neighbours = Literal["zero_out", "add_remove"]
RELATION_TEXT = {
    "zero_out": ("zero-out: neighbours differ in one client's update, replaced by zero with its weight and place in "
                 "the average kept (what Flower's accountant assumes); the weights (num-examples) are public"),
    "add_remove": ("add/remove of one client, FedAvg's denominator included: removing a client also changes the "
                   "weight the average divides by, so its update moves the average by up to 2·w_k·C; the weights "
                   "(num-examples) are public"),
    "replace_one": ("replace-one: neighbours differ in one client's update (secret cohort of fixed size, "
                    "sensitivity 2·w_k·C); the weights (num-examples) are public"),
}
OBSERVERS = ("server", "public")
SPARE_NODES = 1 << 16
"""Ids the ledger of a known cohort keeps for nodes that connect after the first round (without
``population_size``); a per-client index costs 8 bytes each."""
NORM_SLACK = 1e-5
"""Relative slack on the clipping norm when checking a client-clipped update (float32 rounding)."""


@dataclass(frozen=True)
class FlowerDp:
    """What a Flower app does for differential privacy, as read from its strategy and declared mods.

    Attributes:
        noise_multiplier: z of the central-DP wrapper (0: no server noise).
        clipping_norm: C of the wrapper (None: it clips nothing).
        num_sampled_clients: m, the cohort size the wrapper's noise std z·C/m is computed for.
        clipped_by: "server", "clients" (``fixedclipping_mod``) or None.
        local_clip: the clipping norm of a declared ``LocalDpMod`` (None: none).
        local_noise_std: its Gaussian noise std per coordinate (0: none).
        flower_accountant: the wrapped strategy's Flower accountant, if it has one.
        notes: what dpfl could not see or assumed.
    """

    noise_multiplier: float = 0.0
    clipping_norm: float | None = None
    num_sampled_clients: int | None = None
    clipped_by: Literal["server", "clients"] | None = None
    local_clip: float | None = None
    local_noise_std: float = 0.0
    flower_accountant: Any = None
    wrapper: str = ""
    notes: tuple[str, ...] = ()

    @property
    def server_noise_std(self) -> float:
        """Flower's ``compute_stdv``: z·C/m, added by the server to the aggregate."""
        if self.noise_multiplier == 0 or self.clipping_norm is None or not self.num_sampled_clients:
            return 0.0
        return self.noise_multiplier * self.clipping_norm / self.num_sampled_clients

    @property
    def update_bound(self) -> float | None:
        """The L2 bound on one client's update the app enforces (the smallest of its clips)."""
        clips = [c for c in (self.clipping_norm, self.local_clip) if c is not None]
        return min(clips) if clips else None


def _flower_dp_classes() -> dict[str, tuple[type, ...]]:
    from flwr.server import strategy as legacy
    from flwr.serverapp import strategy as message

    return {
        "server": (message.DifferentialPrivacyServerSideFixedClipping,
                   legacy.DifferentialPrivacyServerSideFixedClipping),
        "clients": (message.DifferentialPrivacyClientSideFixedClipping,
                    legacy.DifferentialPrivacyClientSideFixedClipping),
        "adaptive": (message.DifferentialPrivacyServerSideAdaptiveClipping,
                     message.DifferentialPrivacyClientSideAdaptiveClipping,
                     legacy.DifferentialPrivacyServerSideAdaptiveClipping,
                     legacy.DifferentialPrivacyClientSideAdaptiveClipping),
    }


def _local_dp(mods: Iterable[Any], notes: list[str]) -> tuple[float | None, float, bool]:
    """(clip, noise std, fixed clipping declared) of the declared client mods."""
    from flwr.client.mod import LocalDpMod as LegacyLocalDp
    from flwr.client.mod import fixedclipping_mod as legacy_fixed
    from flwr.client.mod import secagg_mod, secaggplus_mod
    from flwr.clientapp.mod import LocalDpMod as MessageLocalDp
    from flwr.clientapp.mod import fixedclipping_mod as message_fixed

    clip: float | None = None
    std = 0.0
    fixed = False
    for mod in mods:
        if isinstance(mod, (MessageLocalDp, LegacyLocalDp)):
            # Flower's add_localdp_gaussian_noise_to_params: the classical Gaussian-mechanism std
            # Δ·sqrt(2 ln(1.25/δ))/ε with the mod's own Δ ("sensitivity"), which need not be its clip
            if mod.epsilon <= 0:
                raise ConfigError(f"LocalDpMod epsilon must be > 0 for a finite noise std. Found {mod.epsilon!r}.")
            mod_std = mod.sensitivity * math.sqrt(2 * math.log(1.25 / mod.delta)) / mod.epsilon
            if clip is not None or std:
                raise ConfigError("more than one LocalDpMod declared: dpfl reads one.")
            clip, std = float(mod.clipping_norm), float(mod_std)
            if mod.epsilon > 1:
                notes.append(f"LocalDpMod ε = {mod.epsilon:g} > 1: the classical Gaussian-mechanism constant "
                             "it calibrates with is proven for ε ≤ 1 only; dpfl certifies the std it adds")
        elif mod in (message_fixed, legacy_fixed):
            fixed = True
        elif mod in (secaggplus_mod, secagg_mod):
            pass  # masks the upload for the secure sum, adds no noise (``secure_aggregation`` says what it hides)
        else:
            name = getattr(mod, "__name__", type(mod).__name__)
            notes.append(f"client mod {name!r}: dpfl cannot see what it does; any noise it adds is not counted")
    return clip, std, fixed


def read_flower_dp(strategy: Any, client_mods: Sequence[Any] = ()) -> FlowerDp:
    """What ``strategy`` (a Flower strategy, Message API or legacy) and the ClientApp's declared
    ``client_mods`` do for differential privacy.

    Raises:
        ConfigError: Flower's adaptive-clipping wrappers (not read: the clip norm and the count
            query's noise move inside the wrapper each round), or client-side clipping without
            ``fixedclipping_mod`` among the declared mods.
    """
    classes = _flower_dp_classes()
    notes: list[str] = []
    local_clip, local_std, fixed_mod = _local_dp(client_mods, notes)
    if isinstance(strategy, classes["adaptive"]):
        raise ConfigError(f"{type(strategy).__name__}: dpfl does not read Flower's adaptive-clipping wrappers yet "
                          "(the clip norm and the count query's share of the noise change inside the wrapper each "
                          "round); a certificate would be a guess. Use fixed clipping to have it certified.")
    who: Literal["server", "clients"]
    for who in ("server", "clients"):
        if isinstance(strategy, classes[who]):
            if who == "clients" and not fixed_mod:
                raise ConfigError(f"{type(strategy).__name__} expects the clients to clip: declare the ClientApp's "
                                  "mods (client_mods=[fixedclipping_mod, ...]) so dpfl knows they do.")
            wrapper: Any = strategy
            return FlowerDp(noise_multiplier=float(wrapper.noise_multiplier),
                            clipping_norm=float(wrapper.clipping_norm),
                            num_sampled_clients=int(wrapper.num_sampled_clients), clipped_by=who,
                            local_clip=local_clip, local_noise_std=local_std,
                            flower_accountant=getattr(strategy, "accountant", None),
                            wrapper=type(strategy).__name__, notes=tuple(notes))
    if not type(strategy).__module__.startswith("flwr."):
        notes.append(f"strategy {type(strategy).__name__}: not one of Flower's DP wrappers; dpfl takes it to add "
                     "no noise and clip nothing")
    return FlowerDp(local_clip=local_clip, local_noise_std=local_std, wrapper=type(strategy).__name__,
                    notes=tuple(notes))


@dataclass
class RoundCertifier:
    """The ledger of a Flower app's rounds: node ids → clients, releases, certificates, budget.

    Args:
        dp: what the app does (:func:`read_flower_dp`).
        delta: δ of every certificate.
        cohort: "known" (no amplification) or "secret" (amplified by Flower's uniform sample; the
            relation is then replace-one).
        relation: with a known cohort, "zero_out" (default: Flower's accountant's neighbours, the
            client's update replaced by zero, sensitivity w_k·C) or "add_remove" (the client gone
            from the average, whose denominator shrinks with it: sensitivity 2·w_k·C).
        secure_aggregation: the server sees only the sum of the uploads (SecAgg+).
        max_epsilon: a limit on the public's certified ε, or limits per observer.
        population_size: the number of nodes (required for a secret cohort; for a known one it
            only bounds how many distinct nodes may join: by default those connected at the first
            round plus :data:`SPARE_NODES`).
    """

    dp: FlowerDp
    delta: float
    cohort: Cohort = "known"
    relation: Neighbours = "zero_out"
    secure_aggregation: bool = False
    max_epsilon: float | Mapping[str, float] | None = None
    population_size: int | None = None
    ledger: PrivacyLedger | None = None
    clients: dict[int, int] = field(default_factory=dict)
    stopped: str | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    unclipped: list[str] = field(default_factory=list)
    unclipped_this_round: bool = False
    taken_part: dict[int, int] = field(default_factory=dict)
    _flower_shadow: Any = None

    def __post_init__(self) -> None:
        self.delta = validate_delta(self.delta)
        if self.cohort not in ("known", "secret"):
            raise ConfigError(f"`cohort` must be 'known' or 'secret'. Found {self.cohort!r}.")
        if self.relation not in ("zero_out", "add_remove"):
            raise ConfigError(f"`relation` must be 'zero_out' or 'add_remove'. Found {self.relation!r}.")
        limits = self.max_epsilon
        if limits is not None:
            items = limits.items() if isinstance(limits, Mapping) else [("public", limits)]
            for obs, eps in items:
                if obs not in OBSERVERS:
                    raise ConfigError(f"`max_epsilon` names an unknown observer {obs!r} (server, public).")
                if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
                    raise ConfigError(f"`max_epsilon` for the {obs} must be > 0. Found {eps!r}.")
        if self.cohort == "secret" and self.dp.num_sampled_clients is None:
            raise ConfigError("cohort='secret' needs the cohort size of a Flower DP wrapper (num_sampled_clients).")
        if self.cohort == "secret" and self.population_size is None:
            raise ConfigError("cohort='secret' needs `population_size`: the amplification by the secret sample "
                              "depends on how many nodes it is drawn from (Flower's accountant asks for it too).")

    # ------------------------------------------------------------------ clients and releases

    def start(self, all_nodes: Iterable[int]) -> None:
        """Number the population at the first round (sorted node ids → clients 0..N−1)."""
        if self.ledger is not None:
            return
        nodes = sorted(int(n) for n in all_nodes)
        # a known cohort: the population only bounds the ids (nodes still connecting when the first
        # round starts join later); a secret one is drawn from exactly population_size nodes
        n = self.population_size or len(nodes) + SPARE_NODES
        if n < len(nodes):
            raise ConfigError(f"`population_size` ({n}) is below the {len(nodes)} nodes connected.")
        self.clients = {node: i for i, node in enumerate(nodes)}
        secret = self.cohort == "secret"
        sampler = ({"kind": "fixed_size", "num_sampled": self.dp.num_sampled_clients} if secret else {"kind": "all"})
        self.ledger = PrivacyLedger(num_clients=n, sampler=sampler, delta=self.delta,
                                    relation="replace_one" if secret else "add_remove", pld_every=0)

    def client_of(self, node: int) -> int:
        node = int(node)
        if node not in self.clients:
            assert self.ledger is not None
            if len(self.clients) >= self.ledger.num_clients:
                raise ConfigError(f"node {node} joined beyond the population of {self.ledger.num_clients} nodes the "
                                  "ledger was opened with: pass population_size=")
            self.clients[node] = len(self.clients)
        return self.clients[node]

    def releases(self, nodes: Sequence[int], weights: Sequence[float]) -> list[Release]:
        """What the server and the public see of one round whose aggregate holds ``nodes``' updates
        with these (unnormalized) weights."""
        ids = [self.client_of(n) for n in nodes]
        total = float(sum(weights))
        if not ids or total <= 0:
            return []
        w = [float(x) / total for x in weights]
        bound = self.dp.update_bound
        secret = self.cohort == "secret"
        if bound is None or self.unclipped_this_round:
            # nothing bounds an update: what the aggregate says about a client is unbounded
            return [Release.gaussian("server", 0.0, 1.0, ids), Release.gaussian("public", 0.0, 1.0, ids)]
        # the average moves by w_k·(x_k − x') for a neighbour x' within C of 0 (zero-out) or of any
        # clipped update (replace-one, add/remove with the realized denominator: 2·w_k·C)
        sens = bound if not secret and self.relation == "zero_out" else 2 * bound
        return federated_round_releases(ids, self.dp.local_noise_std, sens, w,
                                        server_noise_std=self.dp.server_noise_std,
                                        ideal_secure_sum=self.secure_aggregation, per_client_public=not secret,
                                        amplifiable=secret)

    def check_update_norms(self, server_round: int, nodes: Sequence[int], norms: Sequence[float]) -> None:
        """Client-side clipping: every update the server can see must be within C."""
        self.unclipped_this_round = False
        if self.dp.clipped_by != "clients" or self.dp.clipping_norm is None:
            return
        limit = self.dp.clipping_norm * (1 + NORM_SLACK)
        over = [(n, x) for n, x in zip(nodes, norms, strict=True) if x > limit]
        if over:
            self.unclipped_this_round = True
            node, norm = over[0]
            self.unclipped.append(f"round {server_round}: {len(over)} update(s) above the clipping norm "
                                  f"{self.dp.clipping_norm:g} (node {node}: {norm:.6g}); the round is certified ∞")

    # ------------------------------------------------------------------ budget

    def _limits(self) -> dict[str, float]:
        if self.max_epsilon is None:
            return {}
        if isinstance(self.max_epsilon, Mapping):
            return {k: float(v) for k, v in self.max_epsilon.items()}
        return {"public": float(self.max_epsilon)}

    def exceeds(self, releases: list[Release], nodes: Sequence[int]) -> str | None:
        """Why recording ``releases`` would break a limit of ``max_epsilon`` (None: it would not)."""
        assert self.ledger is not None
        ids = [self.client_of(n) for n in nodes]
        for obs, limit in self._limits().items():
            if releases and self.ledger.would_exceed(releases, limit, participants=ids, observer=obs):  # type: ignore[arg-type]
                return f"it would take the certified ε against the {obs} above max_epsilon = {limit:g}"
        return None

    def planned(self, server_round: int, nodes: Sequence[int]) -> str | None:
        """Before a round: stop (the reason) if its cohort with equal weights would exceed a limit."""
        if self.stopped is not None:
            return self.stopped
        why = self.exceeds(self.releases(nodes, [1.0] * len(nodes)), nodes)
        if why is not None:
            self.stopped = f"dpfl stopped the run before round {server_round}: {why}"
        return self.stopped

    # ------------------------------------------------------------------ recording and reporting

    def record(self, server_round: int, nodes: Sequence[int], weights: Sequence[float]) -> list[Release]:
        """Record a released aggregate; returns the releases recorded."""
        assert self.ledger is not None
        releases = self.releases(nodes, weights)
        ids = [self.client_of(n) for n in nodes]
        self.ledger.record_round(self.ledger.rounds_recorded, releases, sampling=self.ledger.sampling,
                                 participants=ids, certify_round=False)
        for cid in ids:
            self.taken_part[cid] = self.taken_part.get(cid, 0) + 1
        self._flower_compose(len(nodes))
        self.rounds.append({"round": server_round, "cohort": len(nodes), **self.epsilons("rdp")})
        return releases

    def _flower_compose(self, cohort: int) -> None:
        """Flower's own RdpAccountant over the same events (when the strategy has none)."""
        if self.dp.flower_accountant is not None or self.dp.noise_multiplier <= 0 or self.ledger is None:
            return
        from flwr.supercore.privacy_accounting import (
            GaussianPrivacyEvent,
            NeighboringRelation,
            PrivacyConfig,
            SamplingMethod,
        )
        from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

        n = self.ledger.num_clients
        if self._flower_shadow is None:
            self._flower_shadow = RdpAccountant(PrivacyConfig(
                target_delta=self.delta, population_size=n,
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=SamplingMethod.NO_AMPLIFICATION))
        self._flower_shadow.compose(GaussianPrivacyEvent(self.dp.noise_multiplier, min(cohort, n), n))

    def flower_epsilon(self) -> float | None:
        """Flower's RdpAccountant figure for the run so far (None: Flower accounts nothing here)."""
        acc = self.dp.flower_accountant if self.dp.flower_accountant is not None else self._flower_shadow
        if acc is None or acc.num_releases == 0:
            return None
        return float(acc.get_epsilon(self.delta))

    def epsilons(self, method: Literal["rdp", "best"] = "best") -> dict[str, float]:
        """Certified ε per observer (worst client)."""
        if self.ledger is None or self.ledger.rounds_recorded == 0:
            return {obs: 0.0 for obs in OBSERVERS}
        return {obs: float(self.ledger.certify(obs, method=method).epsilon) for obs in OBSERVERS}  # type: ignore[arg-type]

    def certificates(self) -> dict[str, Any]:
        """The final certificates per observer (tightest of PLD and RDP)."""
        assert self.ledger is not None
        return {obs: self.ledger.certify(obs, method="best") for obs in OBSERVERS}  # type: ignore[arg-type]

    def round_line(self, server_round: int) -> str:
        eps = self.rounds[-1] if self.rounds else {"server": 0.0, "public": 0.0}
        flower = self.flower_epsilon()
        beside = "" if flower is None else f" · Flower's RdpAccountant: ε = {_fmt(flower)}"
        return (f"dpfl round {server_round}: certified ε at δ = {self.delta:g} (RDP, worst client): "
                f"server {_fmt(eps['server'])}, public {_fmt(eps['public'])}{beside}")

    def report(self) -> list[str]:
        """The run's privacy in lines for Flower's log: per observer, basis, Flower's figure, notes."""
        if self.ledger is None or self.ledger.rounds_recorded == 0:
            return ["dpfl: no aggregate was released; nothing to certify"]
        most = max(self.taken_part.values(), default=0)
        lines = [f"dpfl certificates after {self.ledger.rounds_recorded} released rounds ({self.dp.wrapper}; "
                 f"cohort {self.cohort}; secure aggregation {'on' if self.secure_aggregation else 'off'}; "
                 f"the most rounds one client took part in: {most}):"]
        for obs, cert in self.certificates().items():
            lines.append(f"  {obs:<6} ε = {_fmt(cert.epsilon)} at δ = {cert.delta:g} ({cert.method}; RDP "
                         f"{_fmt(cert.epsilon_rdp)}, PLD {_fmt(cert.epsilon_pld)}; {cert.basis_text})")
        lines.append(f"  relation: {RELATION_TEXT['replace_one' if self.cohort == 'secret' else self.relation]}")
        lines.append(f"  why the server's figure: {self._server_reason()}")
        flower = self.flower_epsilon()
        if flower is not None:
            own = "its accountant" if self.dp.flower_accountant is not None else "its RdpAccountant on the same events"
            lines.append(f"  Flower ({own}): ε = {_fmt(flower)} — one figure, no observer: it is the public's "
                         "without amplification, by RDP")
        for note in (*self.dp.notes, *self.unclipped):
            lines.append(f"  not seen / not covered: {note}")
        if self.stopped:
            lines.append(f"  {self.stopped}")
        return lines

    def _server_reason(self) -> str:
        if self.dp.update_bound is None:
            return "nothing bounds a client's update"
        if self.dp.local_noise_std > 0:
            return "each client adds its own noise (LocalDpMod) before the server sees its update"
        if self.secure_aggregation:
            return "SecAgg+ shows it only the sum, but the sum carries no noise: the server adds it afterwards"
        return "it sees each update before it adds the noise"


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if math.isinf(x):
        return "∞"
    return f"{x:,.4g}"


def _log(level: int, msg: str) -> None:
    from flwr.common.logger import log

    log(level, "%s", msg)


def _update_norm(reply: Sequence[np.ndarray], current: Sequence[np.ndarray]) -> float:
    return float(math.sqrt(sum(float(np.sum((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2))
                               for a, b in zip(reply, current, strict=True))))


# --------------------------------------------------------------------------- Message API


def _message_strategy_base() -> type:
    from flwr.serverapp.strategy import Strategy

    return Strategy


class CertifiedStrategy(_message_strategy_base()):  # type: ignore[misc]
    """A Flower (Message API) strategy with dpfl's per-observer certificates.

    Args:
        strategy: the app's strategy — one of Flower's fixed-clipping DP wrappers around ``FedAvg``
            (or any strategy: one dpfl does not know is taken to add no noise).
        delta: δ of the certificates.
        client_mods: the ClientApp's mods (``fixedclipping_mod``, ``LocalDpMod``), which the server
            cannot see otherwise.
        cohort: "known" (default) or "secret" (see the module docstring).
        relation: "zero_out" (default) or "add_remove" (see :class:`RoundCertifier`).
        max_epsilon: stop before a round that would take the public's (or, as a mapping, an
            observer's) certified ε above it.
        population_size: the number of nodes (required for a secret cohort; see :class:`RoundCertifier`).
    """

    def __init__(self, strategy: Any, *, delta: float, client_mods: Sequence[Any] = (), cohort: Cohort = "known",
                 relation: Neighbours = "zero_out", max_epsilon: float | Mapping[str, float] | None = None,
                 population_size: int | None = None) -> None:
        super().__init__()
        self.strategy = strategy
        self.certifier = RoundCertifier(read_flower_dp(strategy, client_mods), delta, cohort, relation,
                                        max_epsilon=max_epsilon, population_size=population_size)
        self._current: Any = None
        self._planned: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return f"dpfl certificates around {self.strategy!r}"

    def _weight_key(self) -> str:
        inner = getattr(self.strategy, "strategy", self.strategy)
        return str(getattr(inner, "weighted_by_key", "num-examples"))

    def summary(self) -> None:
        _log(INFO, f"dpfl: certifying {self.certifier.dp.wrapper} per observer (server, public), "
                   f"δ = {self.certifier.delta:g}, cohort {self.certifier.cohort}")
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: Any, config: Any, grid: Any) -> Iterable[Any]:
        if self.certifier.stopped is not None:
            return []
        self._current = arrays
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self.certifier.start(grid.get_node_ids())  # after the strategy waited for its nodes
        nodes = [int(m.metadata.dst_node_id) for m in messages]
        why = self.certifier.planned(server_round, nodes)
        if why is not None:
            _log(WARNING, why)
            return []
        self._planned[server_round] = nodes
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Any]) -> tuple[Any, Any]:
        replies = list(replies)
        self._planned.pop(server_round, None)
        ok = [r for r in replies if not r.has_error()]
        nodes = [int(r.metadata.src_node_id) for r in ok]
        key = self._weight_key()
        weights = [float(next(iter(r.content.metric_records.values())).get(key, 0.0)) for r in ok]
        if self._current is not None and ok:
            current = self._current.to_numpy_ndarrays()
            norms = [_update_norm(next(iter(r.content.array_records.values())).to_numpy_ndarrays(), current)
                     for r in ok]
            self.certifier.check_update_norms(server_round, nodes, norms)
        why = self.certifier.exceeds(self.certifier.releases(nodes, weights), nodes) if ok else None
        if why is not None:
            self.certifier.stopped = f"dpfl withheld the aggregate of round {server_round}: {why}"
            _log(WARNING, self.certifier.stopped)
            return None, None
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        if arrays is not None and ok:
            self.certifier.record(server_round, nodes, weights)
            _log(INFO, self.certifier.round_line(server_round))
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: Any, config: Any, grid: Any) -> Iterable[Any]:
        if self.certifier.stopped is not None:
            return []
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Any]) -> Any:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def start(self, *args: Any, **kwargs: Any) -> Any:
        """Flower's round loop, then dpfl's final certificates in Flower's log."""
        result = super().start(*args, **kwargs)
        for line in self.certifier.report():
            _log(INFO, line)
        return result

    def report(self) -> list[str]:
        """The final certificates as lines (what :meth:`start` logs at the end)."""
        return self.certifier.report()


# --------------------------------------------------------------------------- legacy Strategy


def _legacy_strategy_base() -> type:
    from flwr.server.strategy import Strategy

    return Strategy


class CertifiedLegacyStrategy(_legacy_strategy_base()):  # type: ignore[misc]
    """A legacy Flower strategy (``DefaultWorkflow`` / ``SecAggPlusWorkflow``) with dpfl's certificates.

    Args: as :class:`CertifiedStrategy`, plus ``secure_aggregation``: the app runs
    ``SecAggPlusWorkflow`` (the server sees only the weighted sum of the uploads), and
    ``num_rounds``: the final certificates (with the PLD) are logged after that round (the legacy
    workflow has no end hook; :meth:`report` gives them at any time). Each round's certificate
    (RDP) is logged after its aggregation.
    """

    def __init__(self, strategy: Any, *, delta: float, client_mods: Sequence[Any] = (), cohort: Cohort = "known",
                 relation: Neighbours = "zero_out", secure_aggregation: bool = False,
                 max_epsilon: float | Mapping[str, float] | None = None, population_size: int | None = None,
                 num_rounds: int | None = None) -> None:
        super().__init__()
        self.strategy = strategy
        self.num_rounds = num_rounds
        self.certifier = RoundCertifier(read_flower_dp(strategy, client_mods), delta, cohort, relation,
                                        secure_aggregation=secure_aggregation, max_epsilon=max_epsilon,
                                        population_size=population_size)
        self._current: Any = None

    def __repr__(self) -> str:
        return f"dpfl certificates around {self.strategy!r}"

    def initialize_parameters(self, client_manager: Any) -> Any:
        return self.strategy.initialize_parameters(client_manager)

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list[Any]:
        if self.certifier.stopped is not None:
            return []
        self._current = parameters
        pairs = list(self.strategy.configure_fit(server_round, parameters, client_manager))
        self.certifier.start(p.node_id for p in client_manager.all().values())  # after it waited for its nodes
        why = self.certifier.planned(server_round, [p.node_id for p, _ in pairs])
        if why is not None:
            _log(WARNING, why)
            return []
        return pairs

    def aggregate_fit(self, server_round: int, results: list[Any], failures: list[Any]) -> tuple[Any, Any]:
        from flwr.common import parameters_to_ndarrays

        nodes = [int(p.node_id) for p, _ in results]
        weights = [float(r.num_examples) for _, r in results]
        if not self.certifier.secure_aggregation and self._current is not None and results:
            current = parameters_to_ndarrays(self._current)
            norms = [_update_norm(parameters_to_ndarrays(r.parameters), current) for _, r in results]
            self.certifier.check_update_norms(server_round, nodes, norms)
        elif len(results) > 1 and len({id(r.parameters) for _, r in results}) > 1 and self.certifier.secure_aggregation:
            raise ConfigError("secure_aggregation=True but the results carry different parameters: the app does not "
                              "run SecAggPlusWorkflow (the server sees each upload).")
        why = self.certifier.exceeds(self.certifier.releases(nodes, weights), nodes) if results else None
        if why is not None:
            self.certifier.stopped = f"dpfl withheld the aggregate of round {server_round}: {why}"
            _log(WARNING, self.certifier.stopped)
            return None, {}
        params, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        if params is not None and results:
            self.certifier.record(server_round, nodes, weights)
            _log(INFO, self.certifier.round_line(server_round))
        if server_round == self.num_rounds:
            for line in self.certifier.report():
                _log(INFO, line)
        return params, metrics

    def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> list[Any]:
        if self.certifier.stopped is not None:
            return []
        return list(self.strategy.configure_evaluate(server_round, parameters, client_manager))

    def aggregate_evaluate(self, server_round: int, results: list[Any], failures: list[Any]) -> tuple[Any, Any]:
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Any) -> Any:
        return self.strategy.evaluate(server_round, parameters)

    def report(self) -> list[str]:
        """The certificates so far as lines (the run's final ones once it ended)."""
        return self.certifier.report()
