"""Each paper's claimed ε: the inverse of its calibration (round trips), the issue's example,
and 004's claim against dp-accounting called directly."""

from __future__ import annotations

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from dpfl.errors import ConfigError
from dpfl.privacy import calibration as cal
from dpfl.privacy.accounting import claimed
from dpfl.privacy.notices import FormulaRangeWarning, collect_range_warnings


@pytest.fixture(autouse=True)
def _range_warnings_are_errors_unless_expected():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FormulaRangeWarning)
        yield


# ---------------------------------------------------------------------------------------------
# 000
# ---------------------------------------------------------------------------------------------


def test_issue_example_udp_epsilon_20_round_trips_and_is_flagged() -> None:
    # Issue 3: 000 Thm 1 noise for ε = 20, q = 0.6, T = 200, δ = 1e-3 → claimed 20.
    sens = cal.udp_sensitivity(0.05, 1.0, 800)
    with pytest.warns(FormulaRangeWarning, match=r"`epsilon` = 20"):
        sigma = cal.udp_noise_std(20.0, 1e-3, sens, 0.6, 200)
    with pytest.warns(FormulaRangeWarning, match=r"`epsilon` = 20"):
        eps = claimed.udp_claimed_epsilon([sigma] * 200, 1e-3, sens, 0.6)
    assert eps == pytest.approx(20.0, rel=1e-12)


@pytest.mark.parametrize("epsilon", [4.0, 8.0])
def test_udp_claim_inverts_theorem1(epsilon: float) -> None:
    sigma = cal.udp_noise_std(epsilon, 1e-3, 1.25e-4, 0.6, 200)
    assert claimed.udp_claimed_epsilon([sigma] * 200, 1e-3, 1.25e-4, 0.6) == pytest.approx(
        epsilon, rel=1e-12
    )
    # Fewer rounds run than planned: ε scales with sqrt(rounds run / T) = sqrt(50/200) = 1/2.
    assert claimed.udp_claimed_epsilon([sigma] * 50, 1e-3, 1.25e-4, 0.6) == pytest.approx(
        epsilon / 2, rel=1e-12
    )


def test_udp_claim_after_crd_changes_T_is_the_full_budget() -> None:
    # CRD: plan T = 200, run 60 rounds, then T ← ⌊0.8·(200 − 60)⌋ + 60 = 112 + 60 = 172;
    # Thm 4 gives the noise for the remaining 112 rounds; the whole run spends exactly ε = 8.
    args = (8.0, 1e-3, 1.25e-4, 0.6)
    first = cal.udp_noise_std(*args, 200)
    past = [first] * 60
    later = cal.udp_noise_std_after_change(*args, 112, past)
    assert later < first  # fewer rounds left for the same remaining budget: less noise each
    assert claimed.udp_claimed_epsilon(past + [later] * 112, 1e-3, 1.25e-4, 0.6) == pytest.approx(
        8.0, rel=1e-12
    )


# ---------------------------------------------------------------------------------------------
# 003
# ---------------------------------------------------------------------------------------------


def test_nbafl_claim_inverts_theorem1() -> None:
    # ε = 0.5 (inside c's range), N = 50, T = 25, L = 1, m = 1200, C = 1, δ = 0.01.
    sigma_u = cal.nbafl_uplink_noise_std(0.5, 0.01, 1.0, 1200, 1)
    sigma_d = cal.nbafl_downlink_noise_std(0.5, 0.01, 1.0, 1200, 50, 25, 1)
    assert sigma_d > 0
    claim = claimed.nbafl_claimed_epsilon(sigma_u, sigma_d, 0.01, 1.0, 1200, 50, 25, 1)
    assert claim.uplink == pytest.approx(0.5, rel=1e-12)
    assert claim.downlink == pytest.approx(0.5, rel=1e-12)
    assert claim.epsilon == pytest.approx(0.5, rel=1e-12)


def test_nbafl_claim_when_client_noise_suffices() -> None:
    # T = 25 <= L·sqrt(N) = 5·sqrt(50) = 35.4: σ_D = 0; the downlink then gets
    # ε_D = T·ε/(L·sqrt N) = 25·0.5/35.355 = 0.35355 < ε, and the claim is the uplink's ε.
    sigma_u = cal.nbafl_uplink_noise_std(5.0 * 0.5, 0.01, 1.0, 1200, 5)
    claim = claimed.nbafl_claimed_epsilon(sigma_u, 0.0, 0.01, 1.0, 1200, 50, 25, 5)
    assert claim.downlink == pytest.approx(25 * 2.5 / (5 * math.sqrt(50)), rel=1e-12)
    assert claim.epsilon == pytest.approx(2.5, rel=1e-12)


def test_nbafl_claim_inverts_lemma4() -> None:
    # The hand example of test_calibration: ε = 1, T = 10, N = 4, K = 2, L = 2.
    sigma_u = cal.nbafl_uplink_noise_std(1.0, 0.01, 1.0, 100, 2)
    sigma_d = cal.nbafl_downlink_noise_std_k_random(1.0, 0.01, 1.0, 100, 4, 2, 10, 2)
    claim = claimed.nbafl_claimed_epsilon(
        sigma_u, sigma_d, 0.01, 1.0, 100, 4, 10, 2, sampled_clients=2
    )
    assert claim.uplink == pytest.approx(1.0, rel=1e-12)
    assert claim.downlink == pytest.approx(1.0, rel=1e-10)


def test_nbafl_claim_flags_the_papers_settings() -> None:
    # 003 Fig. 2: ε = 50, N = 50, T = 25, L = 1: the run's noise inverts to 50, flagged twice.
    with collect_range_warnings():
        sigma_u = cal.nbafl_uplink_noise_std(50.0, 0.01, 1.0, 1200, 1)
        sigma_d = cal.nbafl_downlink_noise_std(50.0, 0.01, 1.0, 1200, 50, 25, 1)
    with collect_range_warnings() as notices:
        claim = claimed.nbafl_claimed_epsilon(sigma_u, sigma_d, 0.01, 1.0, 1200, 50, 25, 1)
    assert claim.epsilon == pytest.approx(50.0, rel=1e-12)
    assert {n.parameter for n in notices} == {"epsilon / exposures", "epsilon / rounds"}


# ---------------------------------------------------------------------------------------------
# 002
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2, 1000, 200_000, 10**9])
@pytest.mark.parametrize("epsilon", [0.1, 5.0, 20.0])
def test_midp_claims_invert_eq_4_7_and_4_9(dim: int, epsilon: float) -> None:
    sigma_s = cal.midp_server_noise_std(epsilon, 10.0, 0.01, dim)
    assert claimed.midp_server_claimed_epsilon(sigma_s, 10.0, 0.01, dim) == pytest.approx(
        epsilon, rel=1e-9
    )
    weights = np.full(100, 0.01)
    sigma_c = cal.midp_client_noise_std(epsilon, 10.0, weights, dim)
    assert claimed.midp_client_claimed_epsilon(sigma_c, 10.0, weights, dim) == pytest.approx(
        epsilon, rel=1e-9
    )
    # Theorem 2: the same utility, i.e. the aggregate carries the same noise: σ_c²·Σp² = σ_s².
    assert sigma_c * math.sqrt(float(np.sum(weights**2))) == pytest.approx(sigma_s, rel=1e-12)


def test_pmidp_claims_invert_eq_5_32_with_eq_5_33_weights() -> None:
    # Personalized budgets ε_k floored at 1 as in 002 §VI, and per-client clip norms.
    rng = np.random.default_rng(0)
    eps = np.maximum(rng.normal(10.0, 5.0, size=50), 1.0)
    clips = rng.uniform(2.5, 20.0, size=50)
    dim = 200_000
    sigmas = [cal.pmidp_client_noise_std(e, c, dim, 50) for e, c in zip(eps, clips, strict=True)]
    assert claimed.pmidp_claimed_epsilon(clips, sigmas, dim) == pytest.approx(eps, rel=1e-9)


def test_midp_claim_without_noise_is_infinite() -> None:
    assert np.all(np.isinf(claimed.midp_claimed_epsilon([1.0], [0.5, 0.5], None, 0.0, 10)))


# ---------------------------------------------------------------------------------------------
# 001
# ---------------------------------------------------------------------------------------------


def test_ldp_fl_claims_as_the_paper_states_them() -> None:
    # 001 §5 MNIST CNN: 10 rounds; d = 1000 weights for the arithmetic; ε = 1 per weight.
    claim = claimed.ldp_fl_claimed_epsilon(1.0, 1000, 10)
    assert (claim.per_weight, claim.per_round, claim.total) == (1.0, 1.0, 1.0)
    assert claim.per_round_unshuffled == 1000.0  # d·ε
    assert claim.total_unshuffled == 10_000.0  # T·d·ε, the paper's own figure (§4.2)


# ---------------------------------------------------------------------------------------------
# 004
# ---------------------------------------------------------------------------------------------


def test_dpfedavg_claim_is_dp_accounting_rdp_called_directly() -> None:
    # The issue's `dpfl account dp-fedavg` example: σ = 1.0, p = 0.04, T = 1000, δ = 2.94e-4.
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(0.04, dp_accounting.GaussianDpEvent(1.0)), 1000
    )
    expected = accountant.get_epsilon(2.94e-4)
    assert claimed.dpfedavg_claimed_epsilon(1.0, 0.04, 1000, 2.94e-4) == pytest.approx(
        expected, rel=1e-12
    )


@pytest.mark.parametrize(("z", "q", "rounds", "delta"), [(1.0, 0.1, 1, 1e-5), (1.0, 0.1, 1000, 1e-5),
                                                       (1.5, 0.2, 100, 1e-5), (0.5, 0.01, 37, 1e-3),
                                                       (5.0, 1.0, 3, 0.1)])
def test_dpfedavg_claim_equals_dp_accountings(z: float, q: float, rounds: int, delta: float) -> None:
    """The claim computes its RDP curve with dpfl's vectorized sampled-Gaussian formulas and converts
    it with dpfl's vectorized conversion (a run asks every round): the same number as dp-accounting's
    accountant composing the event itself, to 1e-12 relative (the curve's terms are summed in
    another order: a few units in the last place)."""
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds))
    assert claimed.dpfedavg_claimed_epsilon(z, q, rounds, delta) == pytest.approx(
        accountant.get_epsilon(delta), rel=1e-12)


def test_dpfedavg_noise_multiplier_is_the_inverse() -> None:
    z = claimed.dpfedavg_noise_multiplier(4.0, 0.04, 1000, 2.94e-4)
    eps = claimed.dpfedavg_claimed_epsilon(z, 0.04, 1000, 2.94e-4)
    assert eps <= 4.0
    assert eps == pytest.approx(4.0, rel=1e-4)
    # More noise than σ = 1.0 (ε ≈ 7.66 there) is needed for ε = 4.
    assert z > 1.0


# ---------------------------------------------------------------------------------------------
# Notions and validation
# ---------------------------------------------------------------------------------------------


def test_every_algorithm_documents_its_notion() -> None:
    assert set(claimed.CLAIM_NOTIONS) == {"udp", "nbafl", "midp", "ldp-fl", "dp-fedavg"}
    assert "nats" in claimed.CLAIM_NOTIONS["midp"].notion
    assert "add/remove one client" == claimed.CLAIM_NOTIONS["dp-fedavg"].neighbouring


def test_claim_inputs_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"`noise_stds` must list at least one round"):
        claimed.udp_claimed_epsilon([], 1e-3, 1.0, 0.5)
    with pytest.raises(ConfigError, match=r"`noise_stds\[1\]` must be > 0\. Found -1\.0"):
        claimed.udp_claimed_epsilon([1.0, -1.0], 1e-3, 1.0, 0.5)
    with pytest.raises(ConfigError, match=r"`downlink_noise_std` must be finite and >= 0"):
        claimed.nbafl_claimed_epsilon(1.0, -0.1, 0.01, 1.0, 10, 5, 5, 1)
