"""The worst cohort (dpfl.privacy.accounting.cohorts) and the public certificate that uses it.

Independent checks: brute-force enumeration of every cohort, dp-accounting called directly with
a hand-derived multiplier, and a Monte Carlo of the privacy loss for a concrete neighbouring pair.
"""

from __future__ import annotations

import itertools
import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.pld import pld_privacy_accountant as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from scipy.special import logsumexp

from dpfl.algorithms.nbafl import NbAfl, NbAflOptions
from dpfl.client.context import RoundInfo
from dpfl.privacy.accounting.cohorts import secret_cohort_size, worst_cohort_broadcast
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.rng import SeedSequence
from dpfl.sampling import FixedSizeSampler


def _brute_force(k: int, sig: np.ndarray, sens: np.ndarray, sizes: np.ndarray, weighting: str,
                 server: float) -> float:
    """min over clients c and cohorts P ∋ c of |P| = k of s(P) / (w_c(P) Δ_c), by enumeration."""
    best = math.inf
    n = sig.shape[0]
    for cohort in itertools.combinations(range(n), k):
        ids = list(cohort)
        w = sizes[ids] / sizes[ids].sum() if weighting == "samples" else np.full(k, 1.0 / k)
        noise = math.sqrt(float(((w * sig[ids]) ** 2).sum()) + server**2)
        for pos, c in enumerate(ids):
            best = min(best, noise / (w[pos] * sens[c]))
    return best


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
@pytest.mark.parametrize("server", [0.0, 0.3])
def test_worst_cohort_is_never_above_any_cohort_and_exact_without_server_noise(weighting: str, server: float) -> None:
    rng = np.random.default_rng(7)
    for trial in range(20):
        n = 6
        k = 1 + trial % n
        sizes = rng.integers(5, 200, n).astype(float)
        sig = rng.uniform(0.2, 3.0, n) if trial % 2 else np.full(n, 1.1)
        sens = rng.uniform(0.1, 2.0, n)
        exact = _brute_force(k, sig, sens, sizes, weighting, server)
        got = worst_cohort_broadcast(cohort_size=k, noise_stds=sig.tolist(), sensitivities=sens.tolist(),
                                     weighting=weighting, sizes=sizes.tolist(), server_noise_std=server)
        assert got.noise_multiplier <= exact * (1 + 1e-12)  # a lower bound: valid
        if server == 0.0 or weighting == "uniform":
            assert got.noise_multiplier == pytest.approx(exact, rel=1e-12)  # and exact here
        else:  # both sums minimized separately: pessimistic by a bounded factor only
            assert got.noise_multiplier >= exact * 0.5


def test_cohort_sizes_priced_per_sampler() -> None:
    assert secret_cohort_size({"kind": "all"}, 5) is None
    assert secret_cohort_size({"kind": "fixed_size", "num_sampled": 4}, 4) == 4
    assert secret_cohort_size({"kind": "fixed_size", "num_sampled": 4}, 2) == 2  # arrivals
    assert secret_cohort_size({"kind": "fixed_size", "num_sampled": 4}, 0) == 4  # an empty round
    assert secret_cohort_size({"kind": "poisson", "sample_rate": 0.1}, 9) == 1  # the worst size


# ---------------------------------------------------------------- the reproduction of the report

SIZES = [50] * 7 + [400]
N, K, T, DELTA, C = 8, 4, 4, 0.01, 1.0


def _privacy_loss_delta(noise_std: float, epsilons: list[float], samples: int = 50_000) -> list[float]:
    """δ(ε) of T rounds of the K-of-N NbAFL broadcast (weights by samples, no downlink noise)
    for the pair: client 7's clipped parameters at +C vs −C, everybody else at 0 (1-D),
    by Monte Carlo of the privacy loss L: δ(ε) = E_D[(1 − e^{ε − L})₊]."""
    sizes = np.asarray(SIZES, dtype=float)
    cohorts = list(itertools.combinations(range(N), K))
    w7 = np.array([sizes[7] / sizes[list(c)].sum() if 7 in c else 0.0 for c in cohorts])
    s = np.array([noise_std * math.sqrt(float(((sizes[list(c)] / sizes[list(c)].sum()) ** 2).sum())) for c in cohorts])
    rng = np.random.default_rng(2026)
    loss = np.zeros(samples)
    for _ in range(T):
        pick = rng.integers(0, len(cohorts), samples)
        y = rng.normal(w7[pick] * C, s[pick])
        logp = [logsumexp(-0.5 * ((y[:, None] - sign * w7[None, :] * C) / s[None, :]) ** 2 - np.log(s[None, :]), axis=1)
                for sign in (1.0, -1.0)]
        loss += logp[0] - logp[1]
    return [float(np.maximum(0.0, 1.0 - np.exp(e - loss)).mean()) for e in epsilons]


def test_nbafl_public_certificate_prices_the_largest_client_never_drawn() -> None:
    """The configuration of the privacy-truth report: NbAFL, weights by samples, 7 clients of 50
    and one of 400, K = 4 of 8, T = 4, δ = 0.01, and cohorts that never contain the large client."""
    algo = NbAfl(NbAflOptions(epsilon=2.0, clip_norm=C, weights="samples"), FixedSizeSampler(K),
                 torch.tensor(SIZES), T, DELTA)
    sigma_u = algo.uplink_noise_std
    assert algo.downlink_noise_std == 0.0
    ledger = PrivacyLedger(num_clients=N, sampler=algo.sampler, delta=DELTA, relation="replace_one",
                           privacy_unit="client", pld_every=0)
    for t, cohort in enumerate([[0, 1, 2, 3], [3, 4, 5, 6], [0, 2, 4, 6], [1, 3, 5, 6]]):
        ids = torch.tensor(cohort)
        rel = algo.releases(RoundInfo(t, N, ids, SeedSequence(0)), torch.tensor(SIZES)[ids], False)
        ledger.record_round(t, rel, sampling=algo.sampler.describe(), participants=cohort)
    new = ledger.certify("public").epsilon

    # hand derivation: the worst cohort is the 400-client with three 50-clients (Σn = 550)
    noise = sigma_u * math.sqrt(400**2 + 3 * 50**2) / 550
    z_worst = noise / (400 / 550 * 2 * C)
    def best(z: float) -> float:
        """dp-accounting directly: the smaller of RDP with the K-of-N amplification (replace-one)
        and PLD of the unamplified Gaussian (a shift-ratio z pair, the same under both relations)."""
        amplified = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        amplified.compose(dpa.SampledWithoutReplacementDpEvent(N, K, dpa.GaussianDpEvent(z)), T)
        plain = pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
        plain.compose(dpa.GaussianDpEvent(z), T)
        return min(amplified.get_epsilon(DELTA), plain.get_epsilon(DELTA))

    assert new == pytest.approx(best(z_worst), rel=2e-3)
    old = best(sigma_u)  # the drawn cohorts' multiplier (equal weights 1/4): the former figure
    assert old == pytest.approx(50.2, abs=0.5) and new == pytest.approx(159.3, abs=1.0)

    # Monte Carlo of the privacy loss (50,000 draws; SE of δ <= 0.002): at the old figure δ is
    # ≈ 0.22, far above 0.01 (the old certificate was false); at the new one it is within 0.01
    d_old, d_new = _privacy_loss_delta(sigma_u, [old, new])
    assert d_old > 0.15
    assert d_new <= DELTA
