"""The releases of one weighted-aggregation round: the policy every federated algorithm states its
round with (what the server and the public saw, from the clients that actually arrived).

**Never silently weaken.** The aggregate's noise is whatever the caller says is *really* in it:
:func:`federated_round_releases` computes it from the clients that actually arrived, so if fewer
arrive than the noise was split over, the weaker guarantee is what gets recorded.

References:
    000 eq. 2; 002 eq. 4.7, 4.14; 003 eq. 31–33; 004 Algorithm 1 line 8.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from dpfl.errors import ConfigError
from dpfl.privacy.accounting.events import aggregate_noise_std
from dpfl.privacy.releases.base import Release

__all__ = ["federated_round_releases"]


def federated_round_releases(
    client_ids: Sequence[int],
    client_noise_stds: Sequence[float] | float,
    client_sensitivities: Sequence[float] | float,
    weights: Sequence[float],
    *,
    server_noise_std: float = 0.0,
    ideal_secure_sum: bool = False,
    per_client_public: bool = False,
    amplifiable: bool = False,
) -> list[Release]:
    """The releases of one weighted-aggregation round, computed from the clients that *arrived*.

    Server: each client's upload (noise σ_k, sensitivity Δ_k) — or, with ``ideal_secure_sum``,
    only the aggregate of the client noises (the server knows its own noise, so it never counts).
    Public: the broadcast ``Σ_k w_k x̃_k + n_s`` with noise sqrt(Σ_k w_k² σ_k² + σ_s²) against
    sensitivity max_k w_k Δ_k (one broadcast release), or per client w_k Δ_k with
    ``per_client_public`` (personalized weights/noise; never amplified by sampling).

    Args:
        client_ids: the clients whose uploads entered the aggregate.
        client_noise_stds: σ_k per client (or one value for all).
        client_sensitivities: Δ_k per client (or one value), enforced, under the ledger's relation.
        weights: aggregation weights w_k of the arrived clients.
        server_noise_std: noise the server adds to the aggregate before broadcasting.
        ideal_secure_sum: a what-if — an ideal secure sum that shows the server only the sum of the
            Gaussian-noised uploads (no integer pipeline; the Skellam sum dpfl runs is recorded by
            DP-FedAvg as Skellam releases instead).
        per_client_public: record the public release per client (sensitivity w_k Δ_k).
        amplifiable: the clients are interchangeable and the unit is a client
            (:func:`.cohorts.broadcast_mode` says "amplified"): the broadcast may be amplified by
            the secret sample. Under client sampling a broadcast that is not must be recorded per
            participant (``per_client_public``); the ledger refuses it otherwise.

    Returns:
        the releases, grouped so that clients with equal numbers share one release.

    References:
        000 eq. 2; 002 eq. 4.7, 4.14; 003 eq. 31–33; 004 Algorithm 1 line 8.
    """
    ids = [int(c) for c in client_ids]
    n = len(ids)
    one_std = isinstance(client_noise_stds, (int, float))
    one_sens = isinstance(client_sensitivities, (int, float))
    sig = ([float(client_noise_stds)] * n if isinstance(client_noise_stds, (int, float))
           else [float(s) for s in client_noise_stds])
    sens = ([float(client_sensitivities)] * n if isinstance(client_sensitivities, (int, float))
            else [float(s) for s in client_sensitivities])
    w = [float(x) for x in weights]
    if not (len(sig) == len(sens) == len(w) == n):
        raise ConfigError(
            f"client_ids, noise stds, sensitivities and weights must have equal lengths. Found "
            f"{n}, {len(sig)}, {len(sens)}, {len(w)}."
        )
    releases: list[Release] = []
    if n == 0:
        return releases  # a noise-only broadcast says nothing about any client
    equal_weights = len(set(w)) == 1
    client_part, total = _aggregate_noise_stds(sig, w, float(server_noise_std), one_std and equal_weights)
    # server
    groups: dict[tuple[float, float], list[int]] = {}
    if not ideal_secure_sum and one_std and one_sens:
        groups[(sig[0], sens[0])] = ids
    elif ideal_secure_sum:
        for cid, wk, dk in zip(ids, w, sens, strict=True):
            groups.setdefault((client_part, wk * dk), []).append(cid)
    else:
        for cid, sk, dk in zip(ids, sig, sens, strict=True):
            groups.setdefault((sk, dk), []).append(cid)
    releases += [Release.gaussian("server", s, d, c) for (s, d), c in groups.items()]
    # public
    if per_client_public:
        pub: dict[float, list[int]] = {}
        for cid, wk, dk in zip(ids, w, sens, strict=True):
            pub.setdefault(wk * dk, []).append(cid)
        releases += [Release.gaussian("public", total, d, c) for d, c in pub.items()]
    else:
        agg_sens = w[0] * sens[0] if one_sens and equal_weights else max(
            wk * dk for wk, dk in zip(w, sens, strict=True))
        releases.append(Release.gaussian("public", total, agg_sens, None, amplifiable=amplifiable))
    return releases


def _aggregate_noise_stds(sig: list[float], w: list[float], server: float, uniform: bool) -> tuple[float, float]:
    """``aggregate_noise_std(sig, w)`` and ``aggregate_noise_std(sig, w, server)`` — the same
    numbers (the same terms summed by the same ``sum`` in the same order) in one pass; with
    ``uniform`` (one std, equal weights) the identical terms are not recomputed."""
    vals = np.asarray(sig + w + [server])
    if not bool(np.all(np.isfinite(vals) & (vals >= 0))):
        return aggregate_noise_std(sig, w), aggregate_noise_std(sig, w, server)  # raises, naming the value
    terms = itertools.repeat((w[0] * sig[0]) ** 2, len(sig)) if uniform else (
        (wk * sk) ** 2 for wk, sk in zip(w, sig, strict=True))
    total = sum(terms)
    return math.sqrt(total + 0.0**2), math.sqrt(total + server**2)
