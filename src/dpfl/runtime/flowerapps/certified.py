"""dpfl's certificates for a Flower app's own differential privacy, per observer, in a few lines.

A Flower app that trains with Flower's central-DP wrappers (``DifferentialPrivacyServerSideFixedClipping``,
``DifferentialPrivacyClientSideFixedClipping``, Message API or legacy), ``fixedclipping_mod``,
``LocalDpMod`` or SecAgg+ wraps its strategy once more::

    strategy = DifferentialPrivacyClientSideFixedClipping(FedAvg(...), 0.2, 0.1, 20)
    # Message API
    strategy = CertifiedStrategy(strategy, delta=1e-5)
    # legacy + SecAgg+
    strategy = CertifiedLegacyStrategy(strategy, delta=1e-5,
                                       secure_aggregation=True)

Each round the wrapper reads what the DP strategy really does — at certification time, as the
wrapper is then, not as it was constructed (noise multiplier z, clipping norm C, the configured
cohort size m, the cohort it drew, who clips, whether SecAgg+ hides the uploads,
the weights of the aggregate, the local noise of a declared ``LocalDpMod``) and records the
round's releases in a :class:`dpfl.privacy.PrivacyLedger`:

* **server** — in both of Flower's wrappers the server adds the noise after it has the raw
  updates (server-side clipping: it clips them itself, whatever ``clipping_norm``, 0 included) or
  the clipped updates' sum (client-side clipping, with or without SecAgg+), so against the server
  the ε is ∞ unless the clients add noise themselves (``LocalDpMod``).
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
know is taken to add no noise (ε = ∞ for what it releases); a client mod other than
``fixedclipping_mod``, ``adaptiveclipping_mod``, ``LocalDpMod`` and ``secaggplus_mod`` is named as
not counted (and, placed outside the clipping mod, as able to undo the clip); with client-side
clipping the server checks every visible update's norm against C. Flower's deprecated
``DPFedAvgFixed`` / ``DPFedAvgAdaptive`` are refused, naming the wrapper to use instead.

Flower's adaptive-clipping wrappers are read each round: the wrapper clips with C_t, updates the
norm from the noisy clipped count, and only then adds z_Δ·C_{t+1}/m — so the update's multiplier
against the clip it was clipped with is z_Δ·C_{t+1}/C_t, below z_Δ whenever the norm shrinks. dpfl
reads C_t before and C_{t+1} after the wrapper's aggregation and prices that, plus the count query
(σ_b against one bit per client). The multiplier thus depends on the data (through the noisy
count): the composed ε is a guarantee only with the budget fixed in advance — ``max_epsilon``, a
privacy filter — which the report and the summary say.
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
        bound_before_noise: the L2 bound on an update enforced before any local noise (the smallest
            clip applied to the un-noised update; None: nothing bounds it).
        bound_after_noise: a clip applied to the *noised* update (the server-side wrapper's, or a
            ``fixedclipping_mod`` outside ``LocalDpMod``), None when there is none. It does not
            bound the update linearly: the release is then priced by the two bounds that hold.
        averages: the aggregate is FedAvg's weighted mean (the inner strategy's own
            ``aggregate_train`` / ``aggregate_fit`` is FedAvg's); otherwise only what the uploads
            themselves carry is certified.
        adaptive: Flower's adaptive clipping (Andrew et al. 2021): the clip norm moves each round
            and the wrapper's noise std is z·C/m with the clip norm *after* that round's update
            (Flower updates it before it adds the noise), so the multiplier against the round's
            clip C_t is z·C_{t+1}/C_t — read each round, never assumed to be z.
        count_noise_std: σ_b of the noisy clipped-count query (a bit per client, sensitivity 1).
        flower_accountant: the wrapped strategy's Flower accountant, if it has one.
        notes: what dpfl could not see or assumed.
    """

    noise_multiplier: float = 0.0
    clipping_norm: float | None = None
    num_sampled_clients: int | None = None
    clipped_by: Literal["server", "clients"] | None = None
    local_clip: float | None = None
    local_noise_std: float = 0.0
    bound_before_noise: float | None = None
    bound_after_noise: float | None = None
    averages: bool = True
    adaptive: bool = False
    count_noise_std: float = 0.0
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
        """The L2 bound on one client's update before any noise (the smallest clip applied to it)."""
        return self.bound_before_noise


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


def _local_dp(mods: Iterable[Any], notes: list[str]) -> tuple[float | None, float, int | None, int | None]:
    """(clip, noise std, position of LocalDpMod, position of fixedclipping_mod) of the declared
    client mods, in ``ClientApp(mods=[...])`` order (the first is the outermost: it handles the
    reply last)."""
    from flwr.client.mod import LocalDpMod as LegacyLocalDp
    from flwr.client.mod import adaptiveclipping_mod as legacy_adaptive
    from flwr.client.mod import fixedclipping_mod as legacy_fixed
    from flwr.client.mod import secagg_mod, secaggplus_mod
    from flwr.clientapp.mod import LocalDpMod as MessageLocalDp
    from flwr.clientapp.mod import adaptiveclipping_mod as message_adaptive
    from flwr.clientapp.mod import fixedclipping_mod as message_fixed

    clip: float | None = None
    std = 0.0
    local_at: int | None = None
    fixed_at: int | None = None
    clip_at: tuple[int, str] | None = None  # the client-side clipping mod (fixed or adaptive): position, name
    unknown: list[tuple[int, str]] = []
    for at, mod in enumerate(mods):
        if isinstance(mod, (MessageLocalDp, LegacyLocalDp)):
            if not 0 < mod.delta < 1:
                raise ConfigError(f"LocalDpMod delta must be in (0, 1) for a finite noise std. Found {mod.delta!r}.")
            # Flower's add_localdp_gaussian_noise_to_params: the classical Gaussian-mechanism std
            # Δ·sqrt(2 ln(1.25/δ))/ε with the mod's own Δ ("sensitivity"), which need not be its clip
            if mod.epsilon <= 0:
                raise ConfigError(f"LocalDpMod epsilon must be > 0 for a finite noise std. Found {mod.epsilon!r}.")
            mod_std = mod.sensitivity * math.sqrt(2 * math.log(1.25 / mod.delta)) / mod.epsilon
            if clip is not None or std:
                raise ConfigError("more than one LocalDpMod declared: dpfl reads one.")
            clip, std, local_at = float(mod.clipping_norm), float(mod_std), at
            if mod.epsilon > 1:
                notes.append(f"LocalDpMod ε = {mod.epsilon:g} > 1: the classical Gaussian-mechanism constant "
                             "it calibrates with is proven for ε ≤ 1 only; dpfl certifies the std it adds")
        elif mod in (message_fixed, legacy_fixed):
            fixed_at = at
            clip_at = (at, "fixedclipping_mod")
        elif mod in (message_adaptive, legacy_adaptive):
            clip_at = (at, "adaptiveclipping_mod")  # read with the adaptive wrapper it serves
        elif mod in (secaggplus_mod, secagg_mod):
            pass  # masks the upload for the secure sum, adds no noise (``secure_aggregation`` says what it hides)
        else:
            unknown.append((at, getattr(mod, "__name__", type(mod).__name__)))
    for at, name in unknown:
        note = f"client mod {name!r}: dpfl cannot see what it does; any noise it adds is not counted"
        if clip_at is not None and at < clip_at[0]:
            # make_ffn: the first mod is the outermost, it handles the reply after the mods that follow it
            clipper = clip_at[1]
            note += (f"; it is outside {clipper} (before it in mods=[...]), so it handles the reply after the clip "
                     f"and can change the clipped update and undo the clip — put it after {clipper} in the list")
        notes.append(note)
    return clip, std, local_at, fixed_at


def _setting(strategy: Any, attr: str) -> float:
    """A DP wrapper's number (``clipping_norm``, ``noise_multiplier``, ...) as it is *now*: Flower's
    wrappers read their attributes when they aggregate, so dpfl reads them when it certifies (an app
    may set them after construction, past Flower's own checks)."""
    name = type(strategy).__name__
    value = getattr(strategy, attr)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise ConfigError(f"{name}.{attr} = {value!r}: dpfl certifies a finite number >= 0 only (Flower computes "
                          f"its noise std z·C/m from it). Set {name}.{attr} to a finite positive number.")
    return number


DEPRECATED = {
    "DPFedAvgAdaptive": ("DifferentialPrivacyServerSideAdaptiveClipping (or "
                         "DifferentialPrivacyClientSideAdaptiveClipping with adaptiveclipping_mod)"),
    "DPFedAvgFixed": ("DifferentialPrivacyServerSideFixedClipping (or DifferentialPrivacyClientSideFixedClipping with "
                      "fixedclipping_mod)"),
}
"""Flower's deprecated DP-FedAvg wrappers (``flwr.server.strategy``) and the wrapper dpfl certifies instead."""


def _refuse_deprecated(strategy: Any) -> None:
    from flwr.server import strategy as legacy

    for name, replacement in DEPRECATED.items():  # DPFedAvgAdaptive first: it subclasses DPFedAvgFixed
        cls = getattr(legacy, name, None)
        if cls is not None and isinstance(strategy, cls):
            raise ConfigError(f"{name} (Flower's deprecated DP-FedAvg wrapper) is not supported: dpfl does not read "
                              f"its clipping, noise or sampling, so it cannot certify it. Use {replacement}, as "
                              "Flower recommends.")


def _averages(inner: Any) -> bool:
    """Whether ``inner`` aggregates with FedAvg's own weighted mean (Flower's accountant asks the
    same: a median, Krum or a server optimizer moves the model by more than w_k·C)."""
    from flwr.server import strategy as legacy
    from flwr.serverapp import strategy as message

    if isinstance(inner, message.FedAvg):
        return type(inner).aggregate_train is message.FedAvg.aggregate_train
    if isinstance(inner, legacy.FedAvg):
        return type(inner).aggregate_fit is legacy.FedAvg.aggregate_fit
    return False


def read_flower_dp(strategy: Any, client_mods: Sequence[Any] = ()) -> FlowerDp:
    """What ``strategy`` (a Flower strategy, Message API or legacy) and the ClientApp's declared
    ``client_mods`` do for differential privacy.

    Raises:
        ConfigError: client-side clipping without ``fixedclipping_mod`` (``adaptiveclipping_mod``)
            among the declared mods; adaptive clipping with ``LocalDpMod``; a LocalDpMod whose ε or δ
            gives no finite std; a wrapper's ``clipping_norm`` or ``noise_multiplier`` negative or not
            finite (read as they are now, not as they were at construction); Flower's deprecated
            ``DPFedAvgFixed`` / ``DPFedAvgAdaptive``.
    """
    _refuse_deprecated(strategy)
    classes = _flower_dp_classes()
    notes: list[str] = []
    mods = list(client_mods)
    local_clip, local_std, local_at, fixed_at = _local_dp(mods, notes)
    if isinstance(strategy, classes["adaptive"]):
        return _read_adaptive(strategy, mods, notes, local_std)
    who: Literal["server", "clients"]
    for who in ("server", "clients"):
        if isinstance(strategy, classes[who]):
            if who == "clients" and fixed_at is None:
                raise ConfigError(f"{type(strategy).__name__} expects the clients to clip: declare the ClientApp's "
                                  "mods (client_mods=[fixedclipping_mod, ...]) so dpfl knows they do.")
            wrapper: Any = strategy
            clip = _setting(wrapper, "clipping_norm")
            z = _setting(wrapper, "noise_multiplier")
            if clip == 0 and who == "server" and local_at is None:
                notes.append(f"{type(strategy).__name__}.clipping_norm = 0: the wrapper clips every update to zero, "
                             "but only after the server has received it — the server sees the raw updates (ε = ∞ "
                             "against it); set clipping_norm to a positive number")
            # the wrapper's clip acts on the un-noised update unless local noise came first: the
            # server clips what it received; fixedclipping_mod outside LocalDpMod clips the noised one
            after = local_at is not None and (who == "server" or (fixed_at is not None and fixed_at < local_at))
            before = [c for c in (local_clip, None if after else clip) if c is not None]
            averages = _averages(getattr(wrapper, "strategy", None))
            if not averages:
                notes.append(f"{type(getattr(wrapper, 'strategy', None)).__name__} inside {type(strategy).__name__} "
                             "does not aggregate with FedAvg's weighted mean: the broadcast is certified only by what "
                             "the uploads carry (∞ without local noise)")
            return FlowerDp(noise_multiplier=z, clipping_norm=clip,
                            num_sampled_clients=int(wrapper.num_sampled_clients), clipped_by=who,
                            local_clip=local_clip, local_noise_std=local_std,
                            bound_before_noise=min(before) if before else None,
                            bound_after_noise=clip if after else None, averages=averages,
                            flower_accountant=getattr(strategy, "accountant", None),
                            wrapper=type(strategy).__name__, notes=tuple(notes))
    if not type(strategy).__module__.startswith("flwr."):
        notes.append(f"strategy {type(strategy).__name__}: not one of Flower's DP wrappers; dpfl takes it to add "
                     "no noise and clip nothing")
    return FlowerDp(local_clip=local_clip, local_noise_std=local_std, bound_before_noise=local_clip,
                    averages=_averages(strategy), wrapper=type(strategy).__name__, notes=tuple(notes))


def _read_adaptive(strategy: Any, mods: list[Any], notes: list[str], local_std: float) -> FlowerDp:
    """Flower's adaptive-clipping wrappers: the round's clip norm, the count query's noise, who clips."""
    from flwr.client.mod import adaptiveclipping_mod as legacy_adaptive
    from flwr.clientapp.mod import adaptiveclipping_mod as message_adaptive

    name = type(strategy).__name__
    who: Literal["server", "clients"] = "server" if "ServerSide" in name else "clients"
    if who == "clients" and not any(m in (legacy_adaptive, message_adaptive) for m in mods):
        raise ConfigError(f"{name} expects the clients to clip: declare the ClientApp's mods "
                          "(client_mods=[adaptiveclipping_mod, ...]) so dpfl knows they do.")
    if local_std > 0:
        raise ConfigError(f"{name} with LocalDpMod: dpfl does not price local noise under adaptive clipping.")
    averages = _averages(getattr(strategy, "strategy", None))
    if not averages:
        notes.append(f"{type(getattr(strategy, 'strategy', None)).__name__} inside {name} does not aggregate with "
                     "FedAvg's weighted mean: the broadcast is certified only by what the uploads carry (∞)")
    clip = _setting(strategy, "clipping_norm")
    count_std = _setting(strategy, "clipped_count_stddev") if strategy.clipped_count_stddev is not None else 0.0
    if clip == 0 and who == "server":
        notes.append(f"{name}.clipping_norm = 0: the wrapper clips every update to zero, but only after the server "
                     "has received it — the server sees the raw updates (ε = ∞ against it)")
    return FlowerDp(noise_multiplier=_setting(strategy, "noise_multiplier"), clipping_norm=clip,
                    num_sampled_clients=int(strategy.num_sampled_clients), clipped_by=who, bound_before_noise=clip,
                    averages=averages, adaptive=True, count_noise_std=count_std,
                    flower_accountant=None, wrapper=name, notes=tuple(notes))


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
        secagg_quantization: SecAgg+'s (clipping_range c, quantization_range Q, max_weight) — Flower's
            defaults unless the app's ``SecAggPlusWorkflow`` sets others: its stochastic rounding moves
            a client's share of the sum by up to √d·2c/Q per upload, added to the sensitivity.
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
    secagg_quantization: tuple[float, int, float] = (8.0, 1 << 22, 1000.0)
    round_notes: list[str] = field(default_factory=list)
    round_clip: tuple[float, float] | None = None
    weights_differ: bool = False
    _amplify_round: bool = True
    _flower_shadow: Any = None
    _add_remove: PrivacyLedger | None = None

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
        if self.cohort == "secret" and self.dp.adaptive:
            raise ConfigError("cohort='secret' with adaptive clipping: the per-round clip norms are not priced under "
                              "amplification by dpfl; use the known cohort.")
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
        if not secret and self.relation == "zero_out":
            # beside the zero-out default: FedAvg's add/remove figure (reported once the weights differ)
            self._add_remove = PrivacyLedger(num_clients=n, sampler=sampler, delta=self.delta,
                                             relation="add_remove", pld_every=0)

    def refresh(self, dp: FlowerDp) -> None:
        """What the app does, read again at certification time (:func:`read_flower_dp` on the
        wrapper as it is now); a note of an earlier reading that no longer holds stays reported."""
        for note in self.dp.notes:
            if note not in dp.notes and note not in self.round_notes:
                self.round_notes.append(note)
        self.dp = dp

    def client_of(self, node: int) -> int:
        node = int(node)
        if node not in self.clients:
            assert self.ledger is not None
            if len(self.clients) >= self.ledger.num_clients:
                raise ConfigError(f"node {node} joined beyond the population of {self.ledger.num_clients} nodes the "
                                  "ledger was opened with: pass population_size=")
            self.clients[node] = len(self.clients)
        return self.clients[node]

    def cohort_drawn(self, server_round: int, connected: int, cohort: int) -> None:
        """A secret cohort is a uniform draw of ``num_sampled_clients`` of ``population_size`` nodes
        only when that many were connected and drawn; a round that is not is recorded per participant
        (no amplification) and named."""
        self._amplify_round = True
        if self.cohort != "secret":
            return
        n, m = self.population_size, self.dp.num_sampled_clients
        if connected != n or cohort != m:
            self._amplify_round = False
            self.round_notes.append(f"round {server_round}: {cohort} of {connected} connected nodes drawn (the secret "
                                    f"cohort assumes {m} of {n}): recorded without amplification")

    def releases(self, nodes: Sequence[int], weights: Sequence[float], dim: int | None = None,
                 relation: Neighbours | None = None) -> list[Release]:
        """What the server and the public see of one round whose aggregate holds ``nodes``' updates
        with these (unnormalized) weights; ``dim``: the number of parameters (SecAgg+'s rounding);
        ``relation``: priced for that relation instead of the certifier's (known cohort)."""
        ids = [self.client_of(n) for n in nodes]
        total = float(sum(weights))
        if not ids or total <= 0:
            return []
        w = [float(x) / total for x in weights]
        dp = self.dp
        secret = self.cohort == "secret"
        unbounded = [Release.gaussian("server", 0.0, 1.0, ids), Release.gaussian("public", 0.0, 1.0, ids)]
        before = dp.bound_before_noise
        server_noise = dp.server_noise_std
        if dp.adaptive:
            # the round's clip C_t bounds the updates; Flower's noise is z·C_{t+1}/m (the norm after
            # this round's update), read by the wrapper around the strategy's aggregation
            initial = float(dp.clipping_norm or 0.0)
            clip_t, clip_next = self.round_clip or (initial, initial)
            before = clip_t
            server_noise = dp.noise_multiplier * clip_next / dp.num_sampled_clients if dp.num_sampled_clients else 0.0
        if before is None or self.unclipped_this_round:
            return unbounded  # nothing bounds an update: what the aggregate says about a client is unbounded
        # the average moves by w_k·(x_k − x') for a neighbour x' within C of 0 (zero-out) or of any
        # clipped update (replace-one, add/remove with the realized denominator: 2·w_k·C)
        factor = 1.0 if not secret and (relation or self.relation) == "zero_out" else 2.0
        if (dp.clipped_by == "clients" and dp.bound_after_noise is None and dp.local_noise_std == 0
                and not self.secure_aggregation):
            before *= 1 + NORM_SLACK  # what check_update_norms lets through
        extra = [0.0] * len(ids)
        if self.secure_aggregation and dim:
            # SecAgg+ rounds dq_k·x_k (dq_k = n_k/max_weight, at most 1) to steps of 2c/Q per
            # coordinate and divides the sum by Σ dq: client k's share moves by up to
            # w_k·(‖Δ‖ + 2·√d·(2c/Q)/dq_k) (two roundings, one per neighbour)
            c, q, max_weight = self.secagg_quantization
            step = 2 * c / q
            extra = [2 * math.sqrt(dim) * step / min(1.0, max(x / max_weight, 1 / q)) for x in weights]
        sens = [factor * before + e for e in extra]
        amplify = secret and self._amplify_round and len(set(w)) == 1
        if secret and not amplify and len(set(w)) > 1:
            self.round_notes.append("a secret-cohort round with unequal weights: recorded without amplification (the "
                                    "heaviest client's sensitivity is not bounded over the cohorts it could be in)")
        local = dp.local_noise_std
        if not dp.averages:
            # the broadcast is some function of the uploads: it says no more than they do
            if local == 0:
                return unbounded
            return [Release.gaussian("server", local, factor * dp.bound_before_noise, ids),  # type: ignore[operator]
                    Release.gaussian("public", local, factor * dp.bound_before_noise, ids)]  # type: ignore[operator]
        if dp.bound_after_noise is None or local == 0:
            out = federated_round_releases(ids, local, sens, w, server_noise_std=server_noise,
                                           ideal_secure_sum=self.secure_aggregation, per_client_public=not amplify,
                                           amplifiable=amplify)
            if dp.clipped_by == "server" and local == 0:
                # the server clips what it received: it has the raw updates, whatever the clip (0 included)
                out = [r for r in out if r.observer != "server"] + unbounded[:1]
            if dp.adaptive:
                # the noisy clipped count (Andrew et al. 2021): one bit per client, sensitivity 1, noise
                # σ_b; its value moves the next clip norm, which the public sees through the models
                out.append(Release.gaussian("public", dp.count_noise_std, 1.0, ids))
            return out
        # local noise, then a clip: not linear. Each upload is a post-processing of (σ_l, C1); the
        # broadcast is both a post-processing of the uploads and the clipped uploads' mean plus the
        # server's noise, whose shift is w_k·min(factor·C1, 2·C2) (the clip is 1-Lipschitz and
        # maps into the ball of C2): per client the larger of the two noise multipliers holds
        c1 = factor * dp.bound_before_noise  # type: ignore[operator]
        out = [Release.gaussian("server", local, c1, ids)]
        for cid, wk, e in zip(ids, w, extra, strict=True):
            shift = wk * (min(c1, 2 * dp.bound_after_noise) + e)
            if server_noise / shift > local / c1:
                out.append(Release.gaussian("public", server_noise, shift, [cid]))
            else:
                out.append(Release.gaussian("public", local, c1, [cid]))
        return out

    def check_update_norms(self, server_round: int, nodes: Sequence[int], norms: Sequence[float]) -> None:
        """Client-side clipping: every update the server can see must be within C."""
        self.unclipped_this_round = False
        if self.dp.clipped_by != "clients" or self.dp.clipping_norm is None or self.dp.local_noise_std > 0:
            return  # (a locally noised update is not within C; its clip was before the noise)
        clip = self.round_clip[0] if self.dp.adaptive and self.round_clip else self.dp.clipping_norm
        limit = clip * (1 + NORM_SLACK)
        over = [(n, x) for n, x in zip(nodes, norms, strict=True) if x > limit]
        if over:
            self.unclipped_this_round = True
            node, norm = over[0]
            self.unclipped.append(f"round {server_round}: {len(over)} update(s) above the clipping norm "
                                  f"{clip:g} (node {node}: {norm:.6g}); the round is certified ∞")

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
                now, after = self.ledger.trial_epsilons(releases, participants=ids)[obs]
                return (f"it would take the certified ε against the {obs} above max_epsilon = {limit:g} (RDP, worst "
                        f"client: {_fmt(now)} now, {_fmt(after)} after this round){self._why_costly(len(ids))}")
        return None

    def _why_costly(self, cohort: int) -> str:
        """Why a round costs what it does, and what would fit: the DP wrapper's noise z·C/m is
        computed for m nodes, and a round that draws fewer weighs each node more than the noise
        assumes (an effective multiplier z·n/m for n nodes of equal weight)."""
        dp = self.dp
        m, z = dp.num_sampled_clients, dp.noise_multiplier
        if not m or z <= 0 or dp.clipping_norm is None:
            return ("; nothing adds noise to the aggregate that dpfl can see: wrap the strategy in a Flower DP wrapper "
                    "or raise max_epsilon")
        if cohort < m:
            return (f"; the round drew {cohort} nodes where the DP wrapper's noise z·C/m assumed m = {m}: each node is "
                    f"1/{cohort} of the average, an effective noise multiplier of {z:g}·{cohort}/{m} = "
                    f"{z * cohort / m:.3g} — let the strategy draw {m} nodes per round (fraction_train, "
                    f"min_train_nodes, enough connected nodes), raise noise_multiplier, or raise max_epsilon")
        return f"; raise noise_multiplier (now {z:g}), run fewer rounds, or raise max_epsilon"


    def planned(self, server_round: int, nodes: Sequence[int]) -> str | None:
        """Before a round: stop (the reason) if its cohort with equal weights would exceed a limit."""
        if self.stopped is not None:
            return self.stopped
        why = self.exceeds(self.releases(nodes, [1.0] * len(nodes)), nodes)
        if why is not None:
            self.stopped = f"dpfl stopped the run before round {server_round}: {why}"
        return self.stopped

    # ------------------------------------------------------------------ recording and reporting

    def record(self, server_round: int, nodes: Sequence[int], weights: Sequence[float], *, dim: int | None = None,
               released: bool = True) -> list[Release]:
        """Record a round whose uploads reached the server; returns the releases recorded.

        ``released=False``: the aggregate was not broadcast (withheld, or the strategy returned
        none) — the server still saw the uploads (or their sum), and that is recorded."""
        assert self.ledger is not None
        releases = self.releases(nodes, weights, dim)
        if not released:
            releases = [r for r in releases if r.observer == "server"]
        ids = [self.client_of(n) for n in nodes]
        self.ledger.record_round(self.ledger.rounds_recorded, releases, sampling=self.ledger.sampling,
                                 participants=ids, certify_round=False)
        if self._add_remove is not None:
            self.weights_differ = self.weights_differ or len({float(x) for x in weights}) > 1
            gone = self.releases(nodes, weights, dim, relation="add_remove")
            if not released:
                gone = [r for r in gone if r.observer == "server"]
            self._add_remove.record_round(self._add_remove.rounds_recorded, gone, sampling=self._add_remove.sampling,
                                          participants=ids, certify_round=False)
        for cid in ids:
            self.taken_part[cid] = self.taken_part.get(cid, 0) + 1
        if released:
            self._flower_compose(len(nodes))
        self.rounds.append({"round": server_round, "cohort": len(nodes), "released": released,
                            **self.epsilons("rdp")})
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
        z = self.dp.noise_multiplier
        if self.dp.adaptive and self.dp.count_noise_std > 0:
            # the user's total multiplier, which Flower split into z_Δ and σ_b (Andrew et al. 2021, Thm 1):
            # what its accountant would be given for such a run
            z = (z ** -2 + (2 * self.dp.count_noise_std) ** -2) ** -0.5
        self._flower_shadow.compose(GaussianPrivacyEvent(z, min(cohort, n), n))

    def flower_epsilon(self) -> float | None:
        """Flower's RdpAccountant figure for the run so far (None: Flower accounts nothing here)."""
        acc = self.dp.flower_accountant if self.dp.flower_accountant is not None else self._flower_shadow
        if acc is None or acc.num_releases == 0:
            return None
        return float(acc.get_epsilon(self.delta))

    def add_remove_epsilons(self, method: Literal["rdp", "best"] = "best") -> dict[str, float] | None:
        """FedAvg's add/remove figure per observer (worst client) beside the zero-out default: the
        client gone from the average, whose realized denominator (the weight that arrived) shrinks with
        it, moves the weighted mean by up to 2·w_k·C. None unless the certifier is zero-out on a known
        cohort and the weights of a recorded round differed (with equal weights Flower's own
        fixed-denominator reading is the one dpfl reports)."""
        ledger = self._add_remove
        if ledger is None or not self.weights_differ or ledger.rounds_recorded == 0:
            return None
        return {obs: float(ledger.certify(obs, method=method).epsilon) for obs in OBSERVERS}  # type: ignore[arg-type]

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
        beside = "" if flower is None else f" · {self._flower_label(short=True)}: ε = {_fmt(flower)}"
        gone = self.add_remove_epsilons("rdp")
        also = "" if gone is None else f" (zero-out; FedAvg's add/remove: public {_fmt(gone['public'])})"
        return (f"dpfl round {server_round}: certified ε at δ = {self.delta:g} (RDP, worst client): "
                f"server {_fmt(eps['server'])}, public {_fmt(eps['public'])}{also}{beside}")

    def _flower_label(self, short: bool = False) -> str:
        """What Flower's figure is: the wrapper's own accountant, or Flower's RdpAccountant that dpfl
        runs itself on Flower's assumptions (the app runs none: legacy wrappers have no accountant)."""
        if self.dp.flower_accountant is not None:
            return "Flower's RdpAccountant" if short else "Flower (its accountant)"
        what = "the user's total z" if self.dp.adaptive and not short else "total z"
        return (f"Flower's RdpAccountant, run by dpfl on Flower's assumptions ({what}, add/remove"
                + (")" if short else " of one client at sensitivity C/m, i.e. equal weights over a fixed "
                   "denominator m; the cohort known, no amplification)"))

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
        gone = self.add_remove_epsilons()
        if gone is not None:
            lines.append(f"  add/remove, FedAvg's denominator included (the weights differ, so the zero-out figures "
                         f"above are not add/remove ones): server ε = {_fmt(gone['server'])}, public ε = "
                         f"{_fmt(gone['public'])} at δ = {self.delta:g} (tightest of PLD and RDP)")
        lines.append(f"  relation: {RELATION_TEXT['replace_one' if self.cohort == 'secret' else self.relation]}")
        lines.append(f"  why the server's figure: {self._server_reason()}")
        flower = self.flower_epsilon()
        if flower is not None and self.dp.flower_accountant is not None:
            lines.append(f"  Flower (its accountant): ε = {_fmt(flower)} — one figure, no observer: it is the public's "
                         "without amplification, by RDP")
        elif flower is not None:
            lines.append(f"  Flower's figure — {self._flower_label()}: ε = {_fmt(flower)}; one figure, no observer, "
                         "not a dpfl certificate")
        adaptive = self.filter_note()
        if adaptive is not None:
            lines.append(f"  {adaptive}")
        for note in (*self.dp.notes, *self.unclipped, *self.round_notes, *self._standing_notes()):
            lines.append(f"  not seen / not covered: {note}")
        if self.stopped:
            lines.append(f"  {self.stopped}")
        return lines

    def filter_note(self) -> str | None:
        """Adaptive clipping: whether the composed ε is a guarantee (a budget fixed in advance) or not."""
        if not self.dp.adaptive:
            return None
        limit = self._limits().get("public")
        if limit is None:
            return ("adaptive clipping without a privacy filter: each round's noise multiplier z·C_{t+1}/C_t depends "
                    "on the data (through the noisy clipped count that moves the clip norm), so the composed ε below "
                    "is a guarantee only with the budget fixed in advance — pass max_epsilon= (the public's budget) "
                    "and dpfl stops the run before a round would exceed it")
        return (f"adaptive clipping: each round's noise multiplier depends on the data (through the noisy clipped "
                f"count), so the guarantee is the budget fixed in advance, max_epsilon = {limit:g} for the public: "
                "dpfl's privacy filter holds it (it stops the run before a round would exceed it)")

    def _standing_notes(self) -> list[str]:
        out = ["the privacy unit is one node registration (a SuperNode that registers again is a new client); "
               "train/evaluate metrics and the weights (num-examples) reach the server outside the certificate"]
        if self.dp.clipped_by == "clients" and (self.secure_aggregation or self.dp.local_noise_std > 0):
            out.append("the clients are trusted to clip: the server cannot check updates it sees only masked or "
                       "noised")
        withheld = [r["round"] for r in self.rounds if not r["released"]]
        if withheld:
            out.append(f"rounds {withheld}: the uploads reached the server but no aggregate was broadcast (recorded "
                       "for the server only)")
        return out

    def _server_reason(self) -> str:
        if self.dp.update_bound is None:
            return "nothing bounds a client's update before its noise"
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
        self.client_mods = list(client_mods)
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
        note = self.certifier.filter_note()
        if note is not None:
            _log(WARNING if self.certifier.max_epsilon is None else INFO, f"dpfl: {note}")
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: Any, config: Any, grid: Any) -> Iterable[Any]:
        if self.certifier.stopped is not None:
            return []
        self.certifier.refresh(read_flower_dp(self.strategy, self.client_mods))  # as the wrapper is now
        self._current = arrays
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        connected = list(grid.get_node_ids())
        self.certifier.start(connected)  # after the strategy waited for its nodes
        nodes = [int(m.metadata.dst_node_id) for m in messages]
        self.certifier.cohort_drawn(server_round, len(connected), len(nodes))
        why = self.certifier.planned(server_round, nodes)
        if why is not None:
            _log(WARNING, why)
            return []
        self._planned[server_round] = nodes
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Any]) -> tuple[Any, Any]:
        replies = list(replies)
        if self._planned.pop(server_round, None) is None:
            return None, None  # a round dpfl stopped: nothing was sent, nothing is aggregated
        self.certifier.refresh(read_flower_dp(self.strategy, self.client_mods))  # what the wrapper will use
        ok = [r for r in replies if not r.has_error()]
        nodes = [int(r.metadata.src_node_id) for r in ok]
        key = self._weight_key()
        weights = [float(next(iter(r.content.metric_records.values())).get(key, 0.0)) for r in ok]
        adaptive = self.certifier.dp.adaptive
        clip_t = float(getattr(self.strategy, "clipping_norm", 0.0))
        if adaptive:
            self.certifier.round_clip = (clip_t, clip_t)
        if self._current is not None and ok:
            current = self._current.to_numpy_ndarrays()
            norms = [_update_norm(next(iter(r.content.array_records.values())).to_numpy_ndarrays(), current)
                     for r in ok]
            self.certifier.check_update_norms(server_round, nodes, norms)
        why = self.certifier.exceeds(self.certifier.releases(nodes, weights), nodes) if ok and not adaptive else None
        if why is not None:
            self.certifier.stopped = f"dpfl withheld the aggregate of round {server_round}: {why}"
            _log(WARNING, self.certifier.stopped)
            self.certifier.record(server_round, nodes, weights, released=False)
            return None, None
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        if adaptive:  # the noise was z·C_{t+1}/m: known only now
            self.certifier.round_clip = (clip_t, float(self.strategy.clipping_norm))
            why = self.certifier.exceeds(self.certifier.releases(nodes, weights), nodes) if ok else None
            if why is not None:
                self.certifier.stopped = f"dpfl withheld the aggregate of round {server_round}: {why}"
                _log(WARNING, self.certifier.stopped)
                self.certifier.record(server_round, nodes, weights, released=False)
                return None, None
        if ok:
            self.certifier.record(server_round, nodes, weights, released=arrays is not None)
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


class LegacyWrapper(_legacy_strategy_base()):  # type: ignore[misc]
    """A legacy strategy around the app's own (``self.strategy``): initialization and evaluation
    pass through; the subclass decides fit (and may stop evaluation)."""

    strategy: Any

    def initialize_parameters(self, client_manager: Any) -> Any:
        return self.strategy.initialize_parameters(client_manager)

    def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> list[Any]:
        return list(self.strategy.configure_evaluate(server_round, parameters, client_manager))

    def aggregate_evaluate(self, server_round: int, results: list[Any], failures: list[Any]) -> tuple[Any, Any]:
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Any) -> Any:
        return self.strategy.evaluate(server_round, parameters)


class CertifiedLegacyStrategy(LegacyWrapper):
    """A legacy Flower strategy (``DefaultWorkflow`` / ``SecAggPlusWorkflow``) with dpfl's certificates.

    Args: as :class:`CertifiedStrategy`, plus ``secure_aggregation``: the app runs
    ``SecAggPlusWorkflow`` (the server sees only the weighted sum of the uploads), and
    ``num_rounds``: the final certificates (with the PLD) are logged after that round (the legacy
    workflow has no end hook; :meth:`report` gives them at any time), and ``secagg_quantization``:
    the app's ``SecAggPlusWorkflow`` (clipping_range, quantization_range, max_weight) — Flower's
    defaults unless it sets others. Each round's certificate (RDP) is logged after its aggregation.

    Raises:
        ConfigError: SecAgg+ with server-side clipping (the server clips the sum, not the updates).
    """

    def __init__(self, strategy: Any, *, delta: float, client_mods: Sequence[Any] = (), cohort: Cohort = "known",
                 relation: Neighbours = "zero_out", secure_aggregation: bool = False,
                 max_epsilon: float | Mapping[str, float] | None = None, population_size: int | None = None,
                 num_rounds: int | None = None,
                 secagg_quantization: tuple[float, int, float] = (8.0, 1 << 22, 1000.0)) -> None:
        super().__init__()
        self.strategy = strategy
        self.client_mods = list(client_mods)
        self.num_rounds = num_rounds
        self._planned: set[int] = set()
        dp = read_flower_dp(strategy, client_mods)
        if secure_aggregation and dp.clipped_by == "server":
            raise ConfigError(f"{type(strategy).__name__} with SecAgg+: the server clips the *sum* it receives, not "
                              "each update, so one client can move the average by up to 2C whatever its weight. Clip "
                              "on the clients (DifferentialPrivacyClientSideFixedClipping + fixedclipping_mod).")
        if secure_aggregation:
            from dpfl.runtime.flower import masks

            if masks.installed():
                _log(WARNING, "dpfl's ChaCha20 SecAgg+ masks are installed in this process (dpfl's Flower runtime or "
                              "distributed DP was imported): the ClientApps must mask with them too "
                              "(dpfl.runtime.flower.masks.install()), or call masks.uninstall() here")
        self.certifier = RoundCertifier(dp, delta, cohort, relation, secagg_quantization=secagg_quantization,
                                        secure_aggregation=secure_aggregation, max_epsilon=max_epsilon,
                                        population_size=population_size)
        self._current: Any = None
        note = self.certifier.filter_note()
        if note is not None:  # the legacy Strategy has no summary: said once, here
            _log(WARNING if max_epsilon is None else INFO, f"dpfl: {note}")

    def __repr__(self) -> str:
        return f"dpfl certificates around {self.strategy!r}"

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list[Any]:
        if self.certifier.stopped is not None:
            return []
        self.certifier.refresh(read_flower_dp(self.strategy, self.client_mods))  # as the wrapper is now
        self._current = parameters
        pairs = list(self.strategy.configure_fit(server_round, parameters, client_manager))
        connected = [p.node_id for p in client_manager.all().values()]
        self.certifier.start(connected)  # after the strategy waited for its nodes
        self.certifier.cohort_drawn(server_round, len(connected), len(pairs))
        why = self.certifier.planned(server_round, [p.node_id for p, _ in pairs])
        if why is not None:
            _log(WARNING, why)
            return []
        self._planned.add(server_round)
        return pairs

    def aggregate_fit(self, server_round: int, results: list[Any], failures: list[Any]) -> tuple[Any, Any]:
        from flwr.common import parameters_to_ndarrays

        if server_round not in self._planned:
            return None, {}  # a round dpfl stopped: nothing was sent, nothing is aggregated
        self._planned.discard(server_round)
        self.certifier.refresh(read_flower_dp(self.strategy, self.client_mods))  # what the wrapper will use
        nodes = [int(p.node_id) for p, _ in results]
        weights = [float(r.num_examples) for _, r in results]
        dim = sum(int(a.size) for a in parameters_to_ndarrays(self._current)) if self._current is not None else None
        adaptive = self.certifier.dp.adaptive
        clip_t = float(getattr(self.strategy, "clipping_norm", 0.0))
        if adaptive:
            self.certifier.round_clip = (clip_t, clip_t)
        if not self.certifier.secure_aggregation and self._current is not None and results:
            current = parameters_to_ndarrays(self._current)
            norms = [_update_norm(parameters_to_ndarrays(r.parameters), current) for _, r in results]
            self.certifier.check_update_norms(server_round, nodes, norms)
        elif len(results) > 1 and len({id(r.parameters) for _, r in results}) > 1 and self.certifier.secure_aggregation:
            raise ConfigError("secure_aggregation=True but the results carry different parameters: the app does not "
                              "run SecAggPlusWorkflow (the server sees each upload).")
        why = (self.certifier.exceeds(self.certifier.releases(nodes, weights, dim), nodes)
               if results and not adaptive else None)
        if why is not None:
            self.certifier.stopped = f"dpfl withheld the aggregate of round {server_round}: {why}"
            _log(WARNING, self.certifier.stopped)
            self.certifier.record(server_round, nodes, weights, dim=dim, released=False)
            return None, {}
        params, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        if adaptive:  # the noise was z·C_{t+1}/m: known only now
            self.certifier.round_clip = (clip_t, float(self.strategy.clipping_norm))
            why = self.certifier.exceeds(self.certifier.releases(nodes, weights, dim), nodes) if results else None
            if why is not None:
                self.certifier.stopped = f"dpfl withheld the aggregate of round {server_round}: {why}"
                _log(WARNING, self.certifier.stopped)
                self.certifier.record(server_round, nodes, weights, dim=dim, released=False)
                return None, {}
        if results:
            self.certifier.record(server_round, nodes, weights, dim=dim, released=params is not None)
            _log(INFO, self.certifier.round_line(server_round))
        if server_round == self.num_rounds:
            for line in self.certifier.report():
                _log(INFO, line)
        return params, metrics

    def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> list[Any]:
        if self.certifier.stopped is not None:
            return []
        return super().configure_evaluate(server_round, parameters, client_manager)

    def report(self) -> list[str]:
        """The certificates so far as lines (the run's final ones once it ended)."""
        return self.certifier.report()
