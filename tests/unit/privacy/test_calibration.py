"""Each calibration formula against numbers worked out by hand (the arithmetic is in the
comments), its preconditions, its range notices, and the analytic Gaussian reference.

Hand values were computed step by step with a pocket calculator (or Python used as one on the
intermediate numbers shown); none of them calls the function under test.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import privacy_loss_distribution

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy import calibration as cal
from dpfl.privacy.notices import FormulaRangeWarning, collect_range_warnings

REL = 1e-9


@pytest.fixture(autouse=True)
def _range_warnings_are_errors_unless_expected():
    """A FormulaRangeWarning a test does not expect fails it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FormulaRangeWarning)
        yield


# ---------------------------------------------------------------------------------------------
# 000 — UDP / CRD
# ---------------------------------------------------------------------------------------------


def test_udp_sensitivity_by_hand() -> None:
    # 2·η·C/|D_i| = 2 · 0.05 · 1.0 / 800 = 0.1 / 800 = 1.25e-4 (000 §5: |D_i| = 800, MNIST).
    assert cal.udp_sensitivity(0.05, 1.0, 800) == pytest.approx(1.25e-4, rel=1e-15)


def test_udp_noise_std_by_hand_at_000_headline() -> None:
    # 000 §5: K = 30 of U = 50 (q = 0.6), T = 200, δ = 1e-3, ε = 8, Δℓ = 1.25e-4.
    # ln(1/δ) = ln 1000 = 6.907755278982137
    # 2·q·T·ln(1/δ) = 2 · 0.6 · 200 · 6.907755278982137 = 1657.8612669557128
    # sqrt(1657.8612669557128) = 40.71684254649067
    # Δℓ · 40.71684254649067 = 0.0050896053183113335;  / ε = 8  →  6.362006647889167e-4
    assert cal.udp_noise_std(8.0, 1e-3, 1.25e-4, 0.6, 200) == pytest.approx(
        6.362006647889167e-4, rel=REL
    )


def test_udp_theorem4_by_hand() -> None:
    # ε = 2, δ = e^-2 (ln(1/δ) = 2), q = 0.5, Δℓ = 1:
    # total budget ε²/(2qΔℓ² ln(1/δ)) = 4 / (2 · 0.5 · 1 · 2) = 2.
    # past σ = [2, 2]: Σ 1/σ² = 1/4 + 1/4 = 0.5; left = 2 − 0.5 = 1.5.
    # 6 rounds remaining: σ = sqrt(6 / 1.5) = sqrt(4) = 2.
    sigma = cal.udp_noise_std_after_change(2.0, math.exp(-2.0), 1.0, 0.5, 6, [2.0, 2.0])
    assert sigma == pytest.approx(2.0, rel=1e-12)
    # 24 rounds remaining: sqrt(24 / 1.5) = sqrt(16) = 4.
    assert cal.udp_noise_std_after_change(
        2.0, math.exp(-2.0), 1.0, 0.5, 24, [2.0, 2.0]
    ) == pytest.approx(4.0, rel=1e-12)
    # A round with infinite noise released nothing and spends nothing.
    assert cal.udp_noise_std_after_change(
        2.0, math.exp(-2.0), 1.0, 0.5, 6, [2.0, math.inf, 2.0]
    ) == pytest.approx(2.0, rel=1e-12)


def test_udp_theorem4_without_history_is_theorem1_and_keeps_sigma_when_T_is_unchanged() -> None:
    # No past rounds: σ = sqrt(T / budget) = Δℓ·sqrt(2qT ln(1/δ))/ε, i.e. Theorem 1.
    args = (8.0, 1e-3, 1.25e-4, 0.6)
    first = cal.udp_noise_std_after_change(*args, 200, [])
    assert first == pytest.approx(cal.udp_noise_std(*args, 200), rel=1e-12)
    # eq. 30–31: after one more round at that σ with T unchanged, σ stays the same.
    assert cal.udp_noise_std_after_change(*args, 199, [first]) == pytest.approx(first, rel=1e-12)


@pytest.mark.parametrize("past", [[1.0, 1.0], [1.0, 1.0, 1.0]])
def test_udp_theorem4_budget_exhausted_is_an_error(past: list[float]) -> None:
    # Budget 2 (as above); Σ 1/σ² = 2 resp. 3 >= 2: nothing is left.
    with pytest.raises(PrivacyPreconditionError, match=rf"exhausted after {len(past)} rounds"):
        cal.udp_noise_std_after_change(2.0, math.exp(-2.0), 1.0, 0.5, 5, past)


def test_udp_range_notice_beyond_the_admissible_moment_order() -> None:
    # (4/3)·ln(1000) = 9.2103...; ε = 20 > 9.21 → the proof's λ = 2·6.9078/20 − 1/2 = 0.19 < 1.
    assert cal.udp_max_proven_epsilon(1e-3) == pytest.approx(4 / 3 * 6.907755278982137, rel=1e-12)
    with pytest.warns(FormulaRangeWarning, match=r"`epsilon` = 20"):
        cal.udp_noise_std(20.0, 1e-3, 1.0, 0.6, 200)
    cal.udp_noise_std(9.0, 1e-3, 1.0, 0.6, 200)  # inside the range: no notice (autouse fixture)


# ---------------------------------------------------------------------------------------------
# 003 — NbAFL
# ---------------------------------------------------------------------------------------------

# 003 §VI: N = 50 clients, MNIST 60000 / 50 → m = 1200, T = 25, δ = 0.01. C = 1.
C_003 = 3.1075114600922396  # sqrt(2 ln(1.25/0.01)) = sqrt(2 · 4.8283137373023015)


def test_classical_constant_by_hand() -> None:
    # ln(1.25/0.01) = ln 125 = 4.8283137373023015; 2·that = 9.656627474604603; sqrt → 3.10751146
    assert cal.classical_gaussian_constant(0.01) == pytest.approx(C_003, rel=1e-15)


def test_nbafl_uplink_by_hand_and_range_notice_at_epsilon_50() -> None:
    # Δs_U = 2C/m = 2/1200 = 1/600.
    assert cal.nbafl_uplink_sensitivity(1.0, 1200) == pytest.approx(1 / 600, rel=1e-15)
    # σ_U = c·L·Δs_U/ε = 3.10751146 · 1 · (1/600) / 50 = 3.10751146 / 30000 = 1.0358371533640797e-4
    with pytest.warns(FormulaRangeWarning, match=r"`epsilon / exposures` = 50 .*< 1"):
        sigma_u = cal.nbafl_uplink_noise_std(50.0, 0.01, 1.0, 1200, 1)
    assert sigma_u == pytest.approx(1.0358371533640797e-4, rel=REL)


def test_nbafl_uplink_inside_the_classical_range_is_silent() -> None:
    # ε/L = 0.5 < 1: c·Δs_U/(ε/L) = 3.10751146 · (1/600) · 2 = 0.010358371533640799
    assert cal.nbafl_uplink_noise_std(0.5, 0.01, 1.0, 1200, 1) == pytest.approx(
        0.010358371533640799, rel=REL
    )


def test_nbafl_downlink_theorem1_by_hand() -> None:
    # T² − L²N = 625 − 1·50 = 575; sqrt(575) = 23.979157616563597
    # 2·c·C·23.9791576 = 149.031014193659; / (m·N·ε) = / (1200·50·50 = 3e6) = 4.967700473121966e-5
    with collect_range_warnings() as notices:
        sigma_d = cal.nbafl_downlink_noise_std(50.0, 0.01, 1.0, 1200, 50, 25, 1)
    assert sigma_d == pytest.approx(4.967700473121966e-5, rel=REL)
    # Both releases are outside c's range: ε/L = 50 and ε/T = 2.
    assert sorted((n.parameter, n.value) for n in notices) == [
        ("epsilon / exposures", 50.0),
        ("epsilon / rounds", 2.0),
    ]


def test_nbafl_downlink_is_zero_when_client_noise_suffices() -> None:
    # T <= L·sqrt(N): L = 5, N = 50 → L²N = 1250 >= T² = 625 → σ_D = 0.
    assert cal.nbafl_downlink_noise_std(0.5, 0.01, 1.0, 1200, 50, 25, 5) == 0.0
    # The boundary T = L·sqrt(N) exactly (T = 5, L = 1, N = 25): 25 − 25 = 0 → 0.
    assert cal.nbafl_downlink_noise_std(0.5, 0.01, 1.0, 1200, 25, 5, 1) == 0.0


def test_nbafl_k_random_takes_log_of_negative_at_the_papers_settings() -> None:
    # 003 Figs. 4–5: N = 50, K = 20, T = 25, δ = 0.01, ε ∈ {50, 60, 100}.
    # ε = 50: 1 − N/K + (N/K)·e^{−ε/T} = 1 − 2.5 + 2.5·e^{−2} = −1.5 + 0.33834 = −1.16166 < 0.
    for eps, argument in [(50.0, "-1.16166"), (60.0, "-1.27321"), (100.0, "-1.45421")]:
        for exposures in (1, 25):  # L does not enter the argument
            with pytest.raises(PrivacyPreconditionError, match=argument) as info:
                cal.nbafl_downlink_noise_std_k_random(eps, 0.01, 1.0, 1200, 50, 20, 25, exposures)
            message = str(info.value)
            assert f"epsilon = {eps:g}" in message and "K = 20" in message and "N = 50" in message
    # The paper's own condition (eq. 69) ε < −T ln(1 − K/N) = −25 ln 0.6 = 12.7706...
    assert cal.nbafl_k_random_log_argument(12.77, 50, 20, 25) > 0
    assert cal.nbafl_k_random_log_argument(12.78, 50, 20, 25) < 0


def test_nbafl_k_random_by_hand() -> None:
    # ε = 1, T = 10, N = 4, K = 2 (q = 1/2), L = 2, C = 1, m = 100, δ = 0.01.
    # e^{−ε/T} = e^{−0.1} = 0.9048374180359595
    # argument = 1 − 2 + 2·0.9048374180 = 0.809674836071919; ln → −0.21112254886128298
    # b = −(T/ε)·ln(argument) = 2.11122548861283;  T²/b² = 100 / 4.457273063768482 = 22.43524203461145
    # ε/(L·sqrt K) = 1/(2·1.41421356) = 0.35355339059327373; e^{−that} = 0.7021885013265596
    # γ = −ln(1 − 1/2 + 1/2 · 0.7021885013) = 0.16123240370558897; ε/γ = 6.2022 < T = 10 → noise
    # T²/b² − L²K = 22.43524203461145 − 8 = 14.43524203461145; sqrt → 3.799373900343509
    # σ_D = 2·c·C·3.7993739/(m·K·ε) = 2 · 3.10751146 · 3.7993739 / 200 = 0.11806597936492805
    assert cal.nbafl_downlink_noise_std_k_random(1.0, 0.01, 1.0, 100, 4, 2, 10, 2) == pytest.approx(
        0.11806597936492805, rel=REL
    )


def test_nbafl_k_random_with_all_clients_is_theorem1() -> None:
    # K = N: b = −(T/ε)·ln(e^{−ε/T}) = 1 and γ = ε/(L·sqrt N): Lemma 4 becomes eq. 10.
    for args in [(0.5, 0.01, 1.0, 1200, 50, 25, 1), (0.9, 1e-5, 2.0, 60, 10, 40, 3)]:
        eps, delta, clip, m, n, t, exposures = args
        assert cal.nbafl_downlink_noise_std_k_random(
            eps, delta, clip, m, n, n, t, exposures
        ) == pytest.approx(cal.nbafl_downlink_noise_std(*args), rel=1e-9)


def test_nbafl_rejects_more_exposures_than_rounds_and_more_sampled_than_clients() -> None:
    with pytest.raises(ConfigError, match="`exposures` must be <= `rounds`"):
        cal.nbafl_downlink_noise_std(0.5, 0.01, 1.0, 10, 5, 3, 4)
    with pytest.raises(ConfigError, match="`sampled_clients` must be <= `num_clients`"):
        cal.nbafl_downlink_noise_std_k_random(0.5, 0.01, 1.0, 10, 5, 6, 3, 1)


# ---------------------------------------------------------------------------------------------
# 002 — MI-DP / PMIDP-FL
# ---------------------------------------------------------------------------------------------

LN2 = math.log(2.0)


def test_midp_formulas_by_hand() -> None:
    # d = 2, ε = ln 2 nats → e^{2ε/d} − 1 = e^{ln 2} − 1 = 1, so d(e^{2ε/d} − 1) = 2.
    # eq. 4.7, C = 10, max p = 0.5: σ_s = 10·0.5/sqrt(2) = 3.5355339059327378
    assert cal.midp_server_noise_std(LN2, 10.0, 0.5, 2) == pytest.approx(
        3.5355339059327378, rel=REL
    )
    # eq. 4.9, p = [0.5, 0.5]: Σp² = 0.5 → σ_c = 10·0.5/sqrt(2·0.5) = 5
    assert cal.midp_client_noise_std(LN2, 10.0, [0.5, 0.5], 2) == pytest.approx(5.0, rel=REL)
    # eq. 4.9, p = [0.2, 0.3, 0.5]: Σp² = 0.04 + 0.09 + 0.25 = 0.38 → 10·0.5/sqrt(2·0.38)
    #   = 5/sqrt(0.76) = 5/0.8717797887 = 5.735393346
    assert cal.midp_client_noise_std(LN2, 10.0, [0.2, 0.3, 0.5], 2) == pytest.approx(
        5 / math.sqrt(0.76), rel=REL
    )
    # eq. 5.32, C = 10, d = 2, N = 2: σ = 10/sqrt(2·2·1) = 5
    assert cal.pmidp_client_noise_std(LN2, 10.0, 2, 2) == pytest.approx(5.0, rel=REL)


def test_midp_is_stable_for_huge_and_tiny_dimensions() -> None:
    # d = 1e9, ε = 5: d(e^{2ε/d} − 1) = 2ε + 2ε²/d + … = 10 + 5e-8 (next term ~1e-16).
    # σ_s = C·p/sqrt(10.00000005); a naive exp(1e-8) − 1 is off by ~1e-8 relative.
    assert cal.midp_server_noise_std(5.0, 10.0, 1.0, 10**9) == pytest.approx(
        10.0 / math.sqrt(10.0 + 5e-8), rel=1e-13
    )
    # d = 1, ε = 400: sqrt(e^{800} − 1) ≈ e^{400} (e^{800} overflows a float) → σ ≈ e^{−400}.
    assert cal.midp_server_noise_std(400.0, 1.0, 1.0, 1) == pytest.approx(
        1.9151695967140057e-174, rel=1e-12
    )


def test_pmidp_weights_are_stable_for_a_thousand_clients() -> None:
    # eq. 5.33 by hand for [1, 2, 4]: products of the others = [8, 4, 2], sum 14 → [4/7, 2/7, 1/7].
    assert cal.pmidp_aggregation_weights([1.0, 2.0, 4.0]) == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    # N = 1000 equal σ = 1e-3: the literal product of 999 σ's is 1e-2997 (underflows to 0, 0/0).
    p = cal.pmidp_aggregation_weights(np.full(1000, 1e-3))
    assert np.all(np.isfinite(p)) and p == pytest.approx(np.full(1000, 1e-3), rel=1e-12)
    # N = 1000 spread over 300 decades: ratios still exact, sum 1, nothing NaN.
    sigma = np.logspace(-150, 150, 1000)
    p = cal.pmidp_aggregation_weights(sigma)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    assert math.fsum(p.tolist()) == pytest.approx(1.0, abs=1e-15)
    assert p[1] / p[0] == pytest.approx(sigma[0] / sigma[1], rel=1e-12)
    with pytest.raises(ConfigError, match=r"`noise_stds` must all be finite and > 0.*\[0\.0\]"):
        cal.pmidp_aggregation_weights([1.0, 0.0])


def test_midp_weights_are_validated() -> None:
    with pytest.raises(ConfigError, match="must sum to 1"):
        cal.midp_client_noise_std(1.0, 1.0, [0.5, 0.6], 10)


# ---------------------------------------------------------------------------------------------
# 004 — DP-FedAvg
# ---------------------------------------------------------------------------------------------


def test_dpfedavg_client_noise_std_by_hand() -> None:
    # S·σ/sqrt(|P_t|) = 0.03 · 1.0 / sqrt(100) = 0.003 (EMNIST clip S = 0.03).
    assert cal.dpfedavg_client_noise_std(0.03, 1.0, 100) == pytest.approx(0.003, rel=1e-15)
    # 004 EMNIST: 3400 writers × p = 0.04 = 136 expected: 0.03/11.661903789690601 = 0.00257247877
    assert cal.dpfedavg_client_noise_std(0.03, 1.0, 136) == pytest.approx(0.0025724787771376325)


# ---------------------------------------------------------------------------------------------
# Analytic Gaussian (Balle & Wang 2018)
# ---------------------------------------------------------------------------------------------


def test_analytic_delta_at_epsilon_zero_is_total_variation() -> None:
    # δ(0) = Φ(Δ/2σ) − Φ(−Δ/2σ) = 2Φ(Δ/2σ) − 1; σ = Δ/2 → 2Φ(1) − 1 = P(|Z| < 1) = 0.6826894921370859
    assert cal.analytic_gaussian_delta(0.5, 0.0, 1.0) == pytest.approx(
        0.6826894921370859, rel=1e-12
    )
    assert cal.analytic_gaussian_delta(1.5, 0.0, 3.0) == pytest.approx(
        0.6826894921370859, rel=1e-12
    )


@pytest.mark.parametrize("sigma", [0.5, 2.0, 10.0])
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0, 3.0])
def test_analytic_delta_matches_dp_accounting_pld(sigma: float, epsilon: float) -> None:
    # dp-accounting's PLD of a single Gaussian release (connect-the-dots, fine grid) is exact to
    # well within 1e-6 relative for these values.
    pld = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, value_discretization_interval=1e-4
    )
    expected = pld.get_delta_for_epsilon(epsilon)
    assert cal.analytic_gaussian_delta(sigma, epsilon, 1.0) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(0.1, 1e-5), (1.0, 1e-5), (0.5, 1e-6), (5.0, 1e-3), (50.0, 0.01)]
)
def test_analytic_noise_std_matches_dp_accounting_and_meets_target(
    epsilon: float, delta: float
) -> None:
    sigma = cal.analytic_gaussian_noise_std(epsilon, delta, 2.0)
    # dp-accounting's independent implementation (same paper, Brent's method), sensitivity 1.
    assert sigma == pytest.approx(
        2.0 * gaussian_mechanism.get_sigma_gaussian(epsilon, delta), rel=1e-9
    )
    assert cal.analytic_gaussian_delta(sigma, epsilon, 2.0) <= delta  # never under-noised
    assert cal.analytic_gaussian_delta(sigma * (1 - 1e-9), epsilon, 2.0) > delta * (1 - 1e-6)


def test_analytic_reference_value_epsilon_1_delta_1e_minus_5() -> None:
    # Pinned reference: at ε = 1, δ = 1e-5, Δ = 1 the analytic σ is 3.7306 (dp-accounting's
    # gaussian_mechanism.get_sigma_gaussian and its PLD agree), against the classical
    # σ = sqrt(2 ln(1.25e5)) = sqrt(2 · 11.736069) = 4.8448: 23% less noise for the same (ε, δ).
    assert cal.analytic_gaussian_noise_std(1.0, 1e-5, 1.0) == pytest.approx(3.7306, abs=1e-4)


@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-9])
@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 0.9, 0.999])
def test_classical_gaussian_exceeds_analytic_below_epsilon_1(epsilon: float, delta: float) -> None:
    classical = cal.classical_gaussian_noise_std(epsilon, delta, 1.0)
    assert classical > cal.analytic_gaussian_noise_std(epsilon, delta, 1.0)


def test_classical_gaussian_fails_beyond_epsilon_6_8_at_delta_0_01() -> None:
    # The classical σ is still enough at ε = 6.7 (δ(ε) = 0.00965 < 0.01) but not at 6.8 (0.01014)
    # nor at 003's ε = 50; every use at ε >= 1 is announced.
    for eps, enough in [(0.5, True), (6.7, True), (6.8, False), (50.0, False)]:
        with collect_range_warnings() as notices:
            sigma = cal.classical_gaussian_noise_std(eps, 0.01, 1.0)
        assert (len(notices) == 1) == (eps >= 1)
        assert (cal.analytic_gaussian_delta(sigma, eps, 1.0) <= 0.01) == enough


# ---------------------------------------------------------------------------------------------
# Validation at the boundary
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda: cal.udp_noise_std(-1.0, 1e-3, 1.0, 0.6, 200),
            r"`epsilon` must be finite and > 0\. Found -1\.0",
        ),
        (lambda: cal.udp_noise_std(0.0, 1e-3, 1.0, 0.6, 200), r"`epsilon` .* Found 0\.0"),
        (
            lambda: cal.udp_noise_std(1.0, 1.0, 1.0, 0.6, 200),
            r"`delta` must be in \(0, 1\)\. Found 1\.0",
        ),
        (
            lambda: cal.udp_noise_std(1.0, 0.0, 1.0, 0.6, 200),
            r"`delta` must be in \(0, 1\)\. Found 0\.0",
        ),
        (
            lambda: cal.udp_noise_std(1.0, 1e-3, 1.0, 1.5, 200),
            r"`sample_rate` must be in \(0, 1\]\. Found 1\.5",
        ),
        (lambda: cal.udp_noise_std(1.0, 1e-3, 1.0, 0.0, 200), r"`sample_rate` .* Found 0\.0"),
        (
            lambda: cal.udp_noise_std(1.0, 1e-3, 1.0, 0.6, 0),
            r"`rounds` must be a positive integer .* Found 0",
        ),
        (
            lambda: cal.udp_noise_std(1.0, 1e-3, 1.0, 0.6, 2.5),
            r"`rounds` must be a positive integer\. Found 2\.5",
        ),
        (lambda: cal.udp_noise_std(1.0, 1e-3, 1.0, 0.6, True), r"`rounds` .* Found True"),
        (
            lambda: cal.udp_noise_std(math.nan, 1e-3, 1.0, 0.6, 2),
            r"`epsilon` must be a number, not NaN",
        ),
        (lambda: cal.udp_sensitivity(0.1, 1.0, -3), r"`num_samples` .* Found -3"),
        (lambda: cal.midp_server_noise_std(1.0, 1.0, 1.5, 10), r"`max_weight` .* Found 1\.5"),
        (
            lambda: cal.dpfedavg_client_noise_std(1.0, -1.0, 10),
            r"`noise_multiplier` must be finite and >= 0",
        ),
        (lambda: cal.analytic_gaussian_noise_std(1.0, 1e-5, 0.0), r"`sensitivity` .* Found 0\.0"),
    ],
)
def test_bad_values_raise_config_error_naming_parameter_rule_and_value(call, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        call()
