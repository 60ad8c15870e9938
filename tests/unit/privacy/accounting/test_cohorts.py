"""How the public's view of a sampled round is priced (dpfl.privacy.accounting.broadcast).

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
from dpfl.privacy.accounting.broadcast import broadcast_mode, worst_cohort_multipliers
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.rng import SeedSequence
from dpfl.sampling import FixedSizeSampler


def _brute_force(k: int, sig: np.ndarray, sens: np.ndarray, sizes: np.ndarray, weighting: str,
                 server: float) -> np.ndarray:
    """Per client c: min over cohorts P ∋ c of |P| = k of s(P) / (w_c(P) Δ_c), by enumeration."""
    n = sig.shape[0]
    best = np.full(n, math.inf)
    for cohort in itertools.combinations(range(n), k):
        ids = list(cohort)
        w = sizes[ids] / sizes[ids].sum() if weighting == "samples" else np.full(k, 1.0 / k)
        noise = math.sqrt(float(((w * sig[ids]) ** 2).sum()) + server**2)
        for pos, c in enumerate(ids):
            best[c] = min(best[c], noise / (w[pos] * sens[c]))
    return best


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
@pytest.mark.parametrize("server", [0.0, 0.3])
def test_worst_cohort_multipliers_bound_every_cohort_and_are_exact_without_server_noise(
        weighting: str, server: float) -> None:
    rng = np.random.default_rng(7)
    for trial in range(20):
        n = 6
        k = 1 + trial % n
        sizes = rng.integers(5, 200, n).astype(float)
        sig = rng.uniform(0.2, 3.0, n) if trial % 2 else np.full(n, 1.1)
        sens = rng.uniform(0.1, 2.0, n)
        exact = _brute_force(k, sig, sens, sizes, weighting, server)
        got = worst_cohort_multipliers(cohort_size=k, noise_stds=sig.tolist(), sensitivities=sens.tolist(),
                                       weighting=weighting, sizes=sizes.tolist(), server_noise_std=server)
        assert np.all(got <= exact * (1 + 1e-12))  # a lower bound: a valid price
        if server == 0.0 or weighting == "uniform":
            np.testing.assert_allclose(got, exact, rtol=1e-12)  # and exact here


def test_broadcast_mode_amplifies_only_interchangeable_clients_at_a_client_unit() -> None:
    fixed, poisson = {"kind": "fixed_size", "num_sampled": 4}, {"kind": "poisson", "sample_rate": 0.1}
    assert broadcast_mode({"kind": "all"}, "replace_one", "record", False) == "shared"
    assert broadcast_mode(fixed, "replace_one", "client", True) == "amplified"
    assert broadcast_mode(poisson, "add_remove", "client", True) == "amplified"
    assert broadcast_mode(fixed, "replace_one", "client", False) == "per_client"  # unequal sizes / budgets
    assert broadcast_mode(fixed, "replace_one", "record", True) == "per_client"  # UDP: records
    assert broadcast_mode(poisson, "replace_one", "client", True) == "per_client"  # not amplified by the accountant


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


def test_nbafl_with_unequal_sizes_charges_each_participant_at_its_drawn_cohort() -> None:
    """The configuration of the privacy-truth report: NbAFL, weights by samples, 7 clients of 50
    and one of 400, K = 4 of 8, T = 4, δ = 0.01, cohorts that never contain the large client.
    The clients are not interchangeable, so the broadcast is not amplified by the schedule: each
    participant is charged p_c·2C against the drawn cohort's noise, unamplified."""
    algo = NbAfl(NbAflOptions(epsilon=2.0, clip_norm=C, weights="samples"), FixedSizeSampler(K),
                 torch.tensor(SIZES), T, DELTA)
    sigma_u = algo.uplink_noise_std
    assert algo.downlink_noise_std == 0.0
    ledger = PrivacyLedger(num_clients=N, sampler=algo.sampler, delta=DELTA, relation="replace_one",
                           privacy_unit="client", pld_every=0)
    cohorts = [[0, 1, 2, 3], [3, 4, 5, 6], [0, 2, 4, 6], [1, 3, 5, 6]]
    for t, cohort in enumerate(cohorts):
        ids = torch.tensor(cohort)
        rel = algo.releases(RoundInfo(t, N, ids, SeedSequence(0)), torch.tensor(SIZES)[ids], False)
        assert all(r.client_ids is not None for r in rel)  # nothing amplified
        ledger.record_round(t, rel, sampling=algo.sampler.describe(), participants=cohort)
    # hand derivation: four clients of 50, weights 1/4: noise σ_U/2 against 2C/4 → multiplier σ_U;
    # clients 3 and 6 took part 3 times; dp-accounting directly (PLD of the unamplified Gaussian)
    direct = pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    direct.compose(dpa.GaussianDpEvent(sigma_u), 3)
    assert ledger.certify("public").epsilon == pytest.approx(direct.get_epsilon(DELTA), rel=2e-3)
    assert ledger.certify("public", client_id=7).epsilon == 0.0  # never drawn: its data never entered

    # why not amplify: the drawn cohorts' multiplier amplified by the schedule (what the ledger
    # certified before, 50.2) is false — a Monte Carlo of the privacy loss of client 7 (+C vs −C,
    # everybody else at 0, random 4-cohorts) gives δ(50.2) ≈ 0.22 > 0.01 (50,000 draws, SE <= 0.002)
    amplified = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    amplified.compose(dpa.SampledWithoutReplacementDpEvent(N, K, dpa.GaussianDpEvent(sigma_u)), T)
    unamplified = pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    unamplified.compose(dpa.GaussianDpEvent(sigma_u), T)
    old = min(amplified.get_epsilon(DELTA), unamplified.get_epsilon(DELTA))
    assert old == pytest.approx(50.2, abs=0.5)
    (d_old,) = _privacy_loss_delta(sigma_u, [old])
    assert d_old > 0.15
