"""Each paper's *own* epsilon for the settings actually run: its noise formula, inverted.

The claimed ε is what the paper's analysis says the noise that was actually added buys, in the
paper's own privacy notion (per-weight ε-LDP, ε-MI-DP in nats, (ε, δ)-DP of a client's records
or of a whole client). It is reported next to the certified ε of a rigorous accountant, never
instead of it: several of these claims are weaker than their papers say (see the docstrings and
``ClaimNotion``). Inverting a formula outside its proven range emits the same
:class:`~dpfl.privacy.notices.FormulaRangeWarning` as calibrating with it.

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.privacy.notices`,
:mod:`dpfl.privacy.calibration` and the dp-accounting library.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from dpfl.errors import ConfigError
from dpfl.privacy.calibration import (
    classical_gaussian_constant,
    nbafl_uplink_sensitivity,
    pmidp_aggregation_weights,
)
from dpfl.privacy.calibration._checks import (
    _delta,
    _positive,
    _positive_int,
    _sample_rate,
    _weight,
    _weights,
)
from dpfl.privacy.calibration.gaussian import _classical_range_check
from dpfl.privacy.calibration.nbafl import _nbafl_exposures
from dpfl.privacy.calibration.udp import _udp_check_order

__all__ = [
    "CLAIM_NOTIONS",
    "ClaimNotion",
    "LdpFlClaim",
    "NbaflClaim",
    "amplified_mf_claimed_epsilon",
    "dpfedavg_claimed_epsilon",
    "dpfedavg_noise_multiplier",
    "ldp_fl_claimed_epsilon",
    "mf_claimed_epsilon",
    "midp_claimed_epsilon",
    "midp_client_claimed_epsilon",
    "midp_server_claimed_epsilon",
    "nbafl_claimed_epsilon",
    "pmidp_claimed_epsilon",
    "tree_restart_claimed_epsilon",
    "udp_claimed_epsilon",
]


@dataclass(frozen=True)
class ClaimNotion:
    """What a paper's claimed ε means.

    Attributes:
        notion: the privacy definition the number is stated in.
        unit: the privacy unit (what neighbouring inputs differ in).
        neighbouring: the neighbouring relation.
        observer: against whom the paper states the guarantee.
        caveat: what the paper's derivation does not cover (for the run report).
        reference: paper file and section.
    """

    notion: str
    unit: str
    neighbouring: str
    observer: str
    caveat: str
    reference: str


CLAIM_NOTIONS: dict[str, ClaimNotion] = {
    "udp": ClaimNotion(
        notion="(epsilon, delta)-DP, called LDP by the paper",
        unit="one record of the client's local data set",
        neighbouring="replace-one record (data sets of equal size)",
        observer="the honest-but-curious server (each upload)",
        caveat="moment bound by a first-order Taylor step (eq. 15), order lambda < 1 for "
        "epsilon > (4/3) ln(1/delta); fixed-K sampling analysed as a Poisson mixture; "
        "sensitivity valid only for one full-batch per-sample-clipped step",
        reference="000_3304bf6f36c753f8.txt, Theorem 1 (eq. 10), Theorem 4 (eq. 25)",
    ),
    "nbafl": ClaimNotion(
        notion="(epsilon, delta)-DP, 'global' for uplink and downlink",
        unit="one record of a client's local data set",
        neighbouring="replace-one record (data sets of equal size)",
        observer="uplink eavesdropper (L exposures) and downlink receivers (T broadcasts)",
        caveat="classical constant used at per-release epsilon >= 1; linear composition gives "
        "(epsilon, L*delta) resp. (epsilon, T*delta); sensitivity 2C/m rests on argmin of a "
        "sum = mean of argmins",
        reference="003_c42e3eb46a620b42.txt, §III-A, Theorem 1 (eq. 10), Lemma 4 (eq. 21-22)",
    ),
    "midp": ClaimNotion(
        notion="client-level epsilon-MI-DP in nats (mutual information), not (epsilon, delta)-DP",
        unit="a client's clipped local model parameters",
        neighbouring="none (sup of conditional mutual information over input priors)",
        observer="whoever sees the aggregate of one round",
        caveat="stated per round for the current aggregate only, never composed over the T "
        "broadcasts; the paper states the MI-DP / DP implication backwards",
        reference="002_2503fd7671e29121.txt, Definitions 2-4, eq. 4.7, 4.9, 5.25, 5.32",
    ),
    "ldp-fl": ClaimNotion(
        notion="pure epsilon-LDP per weight",
        unit="one model weight of one client in one round",
        neighbouring="replace-one (any two inputs in [c - r, c + r])",
        observer="the untrusted cloud, assuming split & shuffle make weights unlinkable",
        caveat="without a trusted shuffler the guarantee is T*d*epsilon-LDP (the paper's own "
        "statement, §4.2); local random delays are not a trusted shuffler; adaptive ranges "
        "leak unless privatized",
        reference="001_8ad797a147f2b989.txt, eq. 2, Theorem 1, §4.2",
    ),
    "dp-fedavg": ClaimNotion(
        notion="(epsilon, delta)-DP by the moments accountant (RDP)",
        unit="a whole client (user-level)",
        neighbouring="add/remove one client",
        observer="the public (the sequence of global models); not the server",
        caveat="Poisson client sampling assumed; the server sees each upload with noise "
        "multiplier sigma/sqrt(|P_t|) only",
        reference="004_32e0c8f847edac12.txt, Algorithm 1, §5.1 Theorem 1",
    ),
}


# --------------------------------------------------------------------------------------------
# 000 — UDP / CRD
# --------------------------------------------------------------------------------------------


def udp_claimed_epsilon(
    noise_stds: Sequence[float], delta: float, sensitivity: float, sample_rate: float, *, repeat: int = 1
) -> float:
    """000's own ε for the noise actually added: ε = sqrt(2qΔℓ² ln(1/δ)·Σ_t 1/σ_t²).

    The sum runs over every round of the run (the sampling rate q accounts for the rounds the
    client sat out). For constant σ over T rounds this inverts Theorem 1 (eq. 10); for CRD's
    changing σ it is the budget identity behind Theorem 4 (eq. 25–29). Notion: see
    ``CLAIM_NOTIONS["udp"]``. Emits :class:`FormulaRangeWarning` when the result exceeds
    (4/3)·ln(1/δ), where the paper's moment order falls below 1.

    Args:
        noise_stds: σ_t of every round run (``inf`` for a round that released nothing).
        delta: the client's δ_i.
        repeat: every σ_t is repeated this many times (constant noise over T rounds:
            ``[σ], repeat=T`` — closed form in T, no list of T entries).
        sensitivity: Δℓ of the paper (eq. 13).
        sample_rate: q = K/U.

    Returns:
        the claimed ε_i.

    References:
        000_3304bf6f36c753f8.txt, Theorem 1 (eq. 10) and Theorem 4 (eq. 25, 29).
    """
    dlt = _delta("delta", delta)
    sens = _positive("sensitivity", sensitivity)
    q = _sample_rate("sample_rate", sample_rate)
    if len(noise_stds) == 0:
        raise ConfigError("`noise_stds` must list at least one round. Found an empty sequence.")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ConfigError(f"`repeat` must be a positive integer. Found {repeat!r}.")
    precision = repeat * math.fsum(
        1.0 / _positive(f"noise_stds[{i}]", s, allow_inf=True) ** 2
        for i, s in enumerate(noise_stds)
    )
    epsilon = math.sqrt(2.0 * q * sens * sens * math.log(1.0 / dlt) * precision)
    if epsilon > 0:
        _udp_check_order(epsilon, dlt, "000 Thm 1/4 inverted")
    return epsilon


# --------------------------------------------------------------------------------------------
# 003 — NbAFL
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NbaflClaim:
    """003's own ε for a run, per channel.

    Attributes:
        uplink: ε of the uplink, c·L·Δs_U/σ_U (§III-A).
        downlink: ε of the T broadcasts from the aggregated noise σ_A (Theorem 1, or Lemma 4
            under K-random scheduling).
        epsilon: the paper's "global" ε, the larger of the two.
    """

    uplink: float
    downlink: float

    @property
    def epsilon(self) -> float:
        return max(self.uplink, self.downlink)


def nbafl_claimed_epsilon(
    uplink_noise_std: float,
    downlink_noise_std: float,
    delta: float,
    clip_norm: float,
    min_samples: int,
    num_clients: int,
    rounds: int,
    exposures: int,
    sampled_clients: int | None = None,
) -> NbaflClaim:
    """003's own ε for the noise actually added, uplink and downlink.

    Uplink: σ_U = c·L·Δs_U/ε inverted, ε_U = c·L·Δs_U/σ_U, with c = sqrt(2 ln(1.25/δ)) and
    Δs_U = 2C/m.

    Downlink, all N clients (Theorem 1, Appendix B): the broadcast carries
    σ_A = sqrt(σ_D² + σ_U²/N) and the paper sets σ_A = c·T·Δs_D/ε with Δs_D = 2C/(mN), so
    ε_D = c·T·Δs_D/σ_A.

    Downlink, K-random scheduling (Lemma 4, eq. 74): σ_A = c·Δs_D·T/(bε) with Δs_D = 2C/(mK),
    σ_A = sqrt(σ_D² + σ_U²/K) and bε/T = −ln(1 − (N/K)(1 − e^{−ε/T})). Solving for ε in closed
    form: with g = c·Δs_D/σ_A, ε_D = −T·ln(1 − (K/N)(1 − e^{−g})).

    Notion: see ``CLAIM_NOTIONS["nbafl"]``. Emits :class:`FormulaRangeWarning` when a
    per-release ε (ε_U/L, ε_D/T, resp. g) is >= 1.

    Args:
        uplink_noise_std: σ_U actually added by each client.
        downlink_noise_std: σ_D actually added by the server (0 if none).
        delta: δ.
        clip_norm: C.
        min_samples: m.
        num_clients: N.
        rounds: T, the aggregations actually run.
        exposures: L <= T.
        sampled_clients: K under K-random scheduling; ``None`` (or N) when all clients take
            part.

    Returns:
        the per-channel claim.

    References:
        003_c42e3eb46a620b42.txt, §III-A, Theorem 1 (eq. 10, 33), Lemma 4 (eq. 21–22, 67–75).
    """
    sigma_u = _positive("uplink_noise_std", uplink_noise_std)
    sigma_d = float(downlink_noise_std)
    if math.isnan(sigma_d) or sigma_d < 0 or math.isinf(sigma_d):
        raise ConfigError(
            f"`downlink_noise_std` must be finite and >= 0. Found {downlink_noise_std!r}."
        )
    c = classical_gaussian_constant(delta)
    sens_u = nbafl_uplink_sensitivity(clip_norm, min_samples)
    n = _positive_int("num_clients", num_clients)
    t = _positive_int("rounds", rounds)
    exp_count = _nbafl_exposures(exposures, t)
    k = n if sampled_clients is None else _positive_int("sampled_clients", sampled_clients)
    if k > n:
        raise ConfigError(f"`sampled_clients` must be <= `num_clients`. Found K = {k}, N = {n}.")

    uplink = c * exp_count * sens_u / sigma_u
    _classical_range_check(uplink / exp_count, "003 sigma_U inverted", "epsilon / exposures")

    sigma_a = math.sqrt(sigma_d * sigma_d + sigma_u * sigma_u / k)
    sens_d = sens_u / k
    if k == n:
        downlink = c * t * sens_d / sigma_a
        _classical_range_check(downlink / t, "003 Thm 1 inverted", "epsilon / rounds")
    else:
        g = c * sens_d / sigma_a  # = bε/T, the per-broadcast ε of eq. 74
        downlink = -t * math.log1p((k / n) * math.expm1(-g))
        _classical_range_check(g, "003 Lemma 4 inverted (eq. 72)", "b * epsilon / rounds")
    return NbaflClaim(uplink=uplink, downlink=downlink)


# --------------------------------------------------------------------------------------------
# 002 — MI-DP, PMIDP-FL (nats)
# --------------------------------------------------------------------------------------------


def midp_claimed_epsilon(
    clip_norms: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray,
    client_noise_stds: Sequence[float] | np.ndarray | None,
    server_noise_std: float,
    dim: int,
) -> np.ndarray:
    """002's ε-MI-DP (nats) of each client for one round's aggregate.

    ε_k = (d/2)·ln(1 + p_k²C_k² / (d·v)), where v = σ_s² + Σ_i p_i²σ_i² is the per-coordinate
    variance of the noise in the aggregate (server noise σ_s plus weighted client noise σ_i).
    This is eq. 5.25 (the supremum of the conditional mutual information) and inverts eq. 4.7
    (client noise 0), eq. 4.9 (server noise 0) and eq. 5.32 with the weights of eq. 5.33.
    Notion: see ``CLAIM_NOTIONS["midp"]`` — per round; the paper does not compose rounds.

    Args:
        clip_norms: C_k of each client (a single-element sequence is broadcast to all).
        weights: the aggregation weights p_k (summing to 1).
        client_noise_stds: σ_k added by each client, or ``None`` for none.
        server_noise_std: σ_s added by the server (0 for none).
        dim: d.

    Returns:
        ε_k in nats, one per client (``inf`` if no noise at all).

    References:
        002_2503fd7671e29121.txt, eq. 5.25 (and Theorem 1 eq. 4.7, Corollary 1 eq. 4.9,
        Corollary 2 eq. 5.32–5.33).
    """
    p = _weights("weights", weights)
    clips = np.broadcast_to(np.asarray(clip_norms, dtype=np.float64), p.shape)
    if not np.all(np.isfinite(clips) & (clips > 0)):
        raise ConfigError(f"`clip_norms` must all be finite and > 0. Found {clips[:5].tolist()}.")
    d = _positive_int("dim", dim)
    sigma_s = float(server_noise_std)
    if not (sigma_s >= 0 and math.isfinite(sigma_s)):
        raise ConfigError(
            f"`server_noise_std` must be finite and >= 0. Found {server_noise_std!r}."
        )
    variance = sigma_s * sigma_s
    if client_noise_stds is not None:
        sig = np.asarray(client_noise_stds, dtype=np.float64)
        if sig.shape != p.shape or not np.all(np.isfinite(sig) & (sig >= 0)):
            raise ConfigError(
                "`client_noise_stds` must be finite, >= 0 and one per weight. Found shape "
                f"{sig.shape} for {p.size} weights."
            )
        variance += math.fsum(((p * sig) ** 2).tolist())
    if variance == 0:
        return np.full(p.shape, math.inf)
    return 0.5 * d * np.log1p((p * clips) ** 2 / (d * variance))


def midp_server_claimed_epsilon(
    noise_std: float, clip_norm: float, max_weight: float, dim: int
) -> float:
    """Inverse of eq. 4.7: ε = (d/2)·ln(1 + C²·(max_i p_i)²/(d·σ_s²)), in nats.

    Args:
        noise_std: σ_s added by the server.
        clip_norm: C.
        max_weight: max_i p_i.
        dim: d.

    Returns:
        the claimed ε-MI-DP of one round's aggregate, in nats.

    References:
        002_2503fd7671e29121.txt, Theorem 1, eq. 4.7.
    """
    sigma = _positive("noise_std", noise_std)
    ratio = _positive("clip_norm", clip_norm) * _weight("max_weight", max_weight) / sigma
    d = _positive_int("dim", dim)
    return 0.5 * d * math.log1p(ratio * ratio / d)


def midp_client_claimed_epsilon(
    noise_std: float, clip_norm: float, weights: Sequence[float] | np.ndarray, dim: int
) -> float:
    """Inverse of eq. 4.9: ε = (d/2)·ln(1 + C²·(max p)²/(d·σ_c²·Σ_k p_k²)), in nats.

    Args:
        noise_std: σ_c added by every client.
        clip_norm: C.
        weights: the aggregation weights p_k.
        dim: d.

    Returns:
        the claimed ε-MI-DP of one round's aggregate, in nats (the worst client's).

    References:
        002_2503fd7671e29121.txt, Corollary 1, eq. 4.9.
    """
    p = _weights("weights", weights)
    sigma = _positive("noise_std", noise_std)
    eps = midp_claimed_epsilon(
        [_positive("clip_norm", clip_norm)], p, np.full(p.shape, sigma), 0.0, dim
    )
    return float(eps.max())


def pmidp_claimed_epsilon(
    clip_norms: Sequence[float] | np.ndarray, noise_stds: Sequence[float] | np.ndarray, dim: int
) -> np.ndarray:
    """PMIDP-FL's per-client ε_k (nats) for personalized noise aggregated with eq. 5.33 weights.

    With p_k ∝ 1/σ_k, eq. 5.25 gives ε_k = (d/2)·ln(1 + C_k²/(d·N·σ_k²)), the inverse of
    eq. 5.32.

    Args:
        clip_norms: C_{k,t} of each client this round.
        noise_stds: σ_{k,t} each client added.
        dim: d.

    Returns:
        ε_k in nats, one per client.

    References:
        002_2503fd7671e29121.txt, Corollary 2, eq. 5.32–5.33, and eq. 5.25.
    """
    sigma = np.asarray(noise_stds, dtype=np.float64)
    weights = pmidp_aggregation_weights(sigma)
    return midp_claimed_epsilon(clip_norms, weights, sigma, 0.0, dim)


# --------------------------------------------------------------------------------------------
# 001 — LDP-FL
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LdpFlClaim:
    """001's own ε-LDP statements for a run (all pure ε, per client).

    Attributes:
        per_weight: ε of one weight in one round (Theorem 1).
        per_round: what the paper claims for one round's whole upload: ε, because split &
            shuffle make the weights unlinkable (§4.2).
        total: what the paper claims for the whole run: ε, because the cloud cannot link a
            client's weights across rounds either (§4.2).
        per_round_unshuffled: d·ε, one round without split & shuffle (basic composition).
        total_unshuffled: T·d·ε, the paper's own figure without split & shuffle (§4.2) — the
            honest bound unless a trusted shuffler is in place.
    """

    per_weight: float
    per_round: float
    total: float
    per_round_unshuffled: float
    total_unshuffled: float


def ldp_fl_claimed_epsilon(epsilon: float, num_weights: int, rounds: int) -> LdpFlClaim:
    """001's claimed ε-LDP per weight, per round and in total.

    The randomizer (eq. 2) is ε-LDP for one weight (Theorem 1). The paper then argues that
    splitting and shuffling make it "sufficient to protect ε-LDP for each weight", across the
    weights of a round and across rounds, and states that without them the budget "will grow to
    Tdε" (§4.2). Notion: see ``CLAIM_NOTIONS["ldp-fl"]``.

    Args:
        epsilon: the per-weight ε of eq. 2.
        num_weights: d, the number of randomized weights per upload.
        rounds: T, the rounds in which the client uploaded.

    Returns:
        the claims, with the paper's own unshuffled figures.

    References:
        001_8ad797a147f2b989.txt, eq. 2, Theorem 1, §4.2 (Splitting and Shuffling).
    """
    eps = _positive("epsilon", epsilon)
    d = _positive_int("num_weights", num_weights)
    t = _positive_int("rounds", rounds)
    return LdpFlClaim(
        per_weight=eps,
        per_round=eps,
        total=eps,
        per_round_unshuffled=d * eps,
        total_unshuffled=t * d * eps,
    )


# --------------------------------------------------------------------------------------------
# 004 — DP-FedAvg (moments accountant)
# --------------------------------------------------------------------------------------------


def _dpfedavg_event(
    noise_multiplier: float, sample_rate: float, rounds: int
) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier)
        ),
        rounds,
    )


def dpfedavg_claimed_epsilon(
    noise_multiplier: float, sample_rate: float, rounds: int, delta: float, *, integer_orders: bool = False
) -> float:
    """004's own ε: the moments accountant on T Poisson-sampled Gaussian rounds.

    The paper accounts with the moments accountant (Abadi et al. 2016), whose modern form is
    the RDP accountant; this composes ``PoissonSampledDpEvent(p, GaussianDpEvent(σ))`` T times
    in dp-accounting's RDP accountant (add/remove one client) and converts to ε at δ. Notion:
    see ``CLAIM_NOTIONS["dp-fedavg"]``.

    Args:
        noise_multiplier: σ (noise std of the cohort mean over its sensitivity S/|P_t|).
        sample_rate: p, the client sampling probability.
        rounds: T.
        delta: δ (the paper uses 1/N).
        integer_orders: the same accountant restricted to the integer orders among its defaults
            (2, 3, …, 63, 128, …, 1024) — Abadi et al.'s moments accountant composes integer moments
            λ = α − 1. Not the claim: what the claim's formula gives on the order grid of a
            certificate proven at integer orders only (the Poisson-sampled Skellam sum), so the gap
            between the two can be told apart from a real excess.

    Returns:
        ε at δ.

    References:
        004_32e0c8f847edac12.txt, Algorithm 1 and §5.1 (Theorem 1, moments accountant).
    """
    z = _positive("noise_multiplier", noise_multiplier, allow_inf=True)
    q = _sample_rate("sample_rate", sample_rate)
    t = _positive_int("rounds", rounds)
    dlt = _delta("delta", delta)
    orders, rdp_one = _dpfedavg_round_rdp(z, q, integer_orders)
    # composing T identical rounds multiplies the RDP curve by T (the accountant does the same);
    # dp_accounting's conversion (compute_epsilon), bit for bit, in half its time (a run asks
    # for this every round)
    from dpfl.privacy.accounting.certify import epsilons_from_rdp

    return float(epsilons_from_rdp(orders, (rdp_one * t)[None, :], dlt)[0])


@functools.lru_cache(maxsize=256)
def _dpfedavg_round_rdp(noise_multiplier: float, sample_rate: float,
                        integer_orders: bool = False) -> tuple[tuple[float, ...], np.ndarray]:
    """RDP curve of one Poisson-sampled Gaussian round at dp-accounting's default orders (what its
    ``RdpAccountant()`` composes; cached: a run asks for it every round). Computed by the
    certificate's :func:`~dpfl.privacy.accounting.certify.rdp_vector`, which shares it with the
    certificate of the same event (dp-accounting's formulas vectorized; equal to its accountant to
    1e-10 relative, tested)."""
    from dpfl.privacy.accounting.certify import rdp_vector

    orders = tuple(float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS
                   if not integer_orders or float(a).is_integer())
    event = dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier))
    return orders, rdp_vector(event, "add_remove", orders)


def dpfedavg_noise_multiplier(
    target_epsilon: float, sample_rate: float, rounds: int, delta: float
) -> float:
    """The smallest σ for which :func:`dpfedavg_claimed_epsilon` is at most the target ε.

    Calibrated with dp-accounting's ``calibrate_dp_mechanism`` on the same RDP accountant and
    event (bisection to an absolute tolerance of 1e-6 in σ; the returned σ meets the target).

    Args:
        target_epsilon: ε.
        sample_rate: p.
        rounds: T.
        delta: δ.

    Returns:
        σ.

    References:
        004_32e0c8f847edac12.txt, §5.1 (Theorem 1); dp_accounting.mechanism_calibration.
    """
    eps = _positive("target_epsilon", target_epsilon)
    q = _sample_rate("sample_rate", sample_rate)
    t = _positive_int("rounds", rounds)
    dlt = _delta("delta", delta)
    return float(
        dp_accounting.calibrate_dp_mechanism(
            rdp_privacy_accountant.RdpAccountant,
            lambda z: _dpfedavg_event(z, q, t),
            eps,
            dlt,
            dp_accounting.LowerEndpointAndGuess(0.0, 1.0),
            tol=1e-6,
        )
    )


def dpsgd_claimed_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """The moments-accountant claim of DP-SGD inside a client (the dp-sgd-fedavg baseline): the
    same composition as :func:`dpfedavg_claimed_epsilon` — ``steps`` Poisson-sampled Gaussian
    steps (records kept with probability q, multiplier z), add/remove one record — in
    dp-accounting's RDP accountant at its default orders.

    References:
        Abadi et al. 2016, Algorithm 1 and Theorem 1 (moments accountant).
    """
    return dpfedavg_claimed_epsilon(noise_multiplier, sample_rate, steps, delta)


# --------------------------------------------------------------------------- correlated noise


def _rdp_to_epsilon(rdp: np.ndarray, orders: Sequence[float], delta: float) -> float:
    from dpfl.privacy.accounting.certify import epsilons_from_rdp

    return float(epsilons_from_rdp(tuple(orders), np.asarray(rdp, dtype=np.float64)[None, :], delta)[0])


def mf_claimed_epsilon(noise_multiplier: float, max_sensitivity: float, delta: float) -> float:
    """The matrix-factorization papers' ε: the Gaussian mechanism at the schema's worst-case
    sensitivity, ρ = S²/(2σ²)-zCDP, i.e. RDP α·S²/(2σ²) at every order, converted at δ.

    σ is the noise std of z over the clip norm, S = max over participation patterns the schema
    allows of ‖C·u‖ (clip = 1): Choquette-Choo et al. 2023 (arXiv 2306.08153) §2 and Thm 2 (b-min-
    separation sensitivity of banded C); Dvijotham et al. 2024 (arXiv 2404.16706) Lemma 5.3 (BLT);
    Denisov et al. 2022 Thm 2.1 (adaptive streams). Notion: (ε, δ)-DP per client, zero-out, for the
    released models, whatever participation pattern within the schema.

    >>> round(mf_claimed_epsilon(4.0, 2.0, 1e-5), 3) == round(mf_claimed_epsilon(2.0, 1.0, 1e-5), 3)
    True
    """
    z = _positive("noise_multiplier", noise_multiplier, allow_inf=True)
    s = _positive("max_sensitivity", max_sensitivity)
    dlt = _delta("delta", delta)
    if math.isinf(z):
        return 0.0
    orders = tuple(float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
    rdp = np.array([a * s * s / (2.0 * z * z) for a in orders])
    return _rdp_to_epsilon(rdp, orders, dlt)


def tree_restart_claimed_epsilon(noise_multiplier: float, tree_steps: Sequence[int], delta: float) -> float:
    """DP-FTRL's ε with tree restarts: one participation per tree, the trees' step counts given
    (Kairouz et al. 2021, arXiv 2103.00039, App. D; TF Privacy ``compute_rdp_tree_restart``):
    RDP Σ_e α·⌈log2(steps_e + 1)⌉/(2σ²), converted at δ.

    >>> e1 = tree_restart_claimed_epsilon(3.0, [7], 1e-5)
    >>> e1 == mf_claimed_epsilon(3.0, 3 ** 0.5, 1e-5)   # depth 3 = a Gaussian at sensitivity sqrt(3)
    True
    """
    z = _positive("noise_multiplier", noise_multiplier, allow_inf=True)
    dlt = _delta("delta", delta)
    steps = [_positive_int("tree_steps", int(x)) for x in tree_steps]
    if math.isinf(z) or not steps:
        return 0.0
    depth = sum(math.ceil(math.log2(x + 1)) for x in steps)
    orders = tuple(float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
    rdp = np.array([a * depth / (2.0 * z * z) for a in orders])
    return _rdp_to_epsilon(rdp, orders, dlt)


def amplified_mf_claimed_epsilon(noise_multiplier: float, column_norm: float, sample_rate: float, steps: int,
                                 delta: float) -> float:
    """Amplified banded MF's ε under cyclic Poisson sampling (Choquette-Choo et al. 2023, §4): a
    client's group is sampled at rate q in ⌈n/b⌉ rounds, each a Poisson-sampled Gaussian of
    multiplier σ/‖C[:, t]‖ (the largest column norm: the claim's worst case), composed ``steps`` times.
    """
    z = _positive("noise_multiplier", noise_multiplier, allow_inf=True)
    c = _positive("column_norm", column_norm)
    return dpfedavg_claimed_epsilon(z / c, sample_rate, steps, delta)
