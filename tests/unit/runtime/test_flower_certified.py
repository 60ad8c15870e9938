"""dpfl's certificates for Flower's own DP (``dpfl.runtime.flowerapps.certified``), checked against
dp-accounting called directly on the same Gaussian events.

Flower's fixed-clipping wrappers add N(0, (z·C/m)²) to the weighted average of updates clipped to
C; against the public (who sees the broadcast models) client k's sensitivity is w_k·C, its weight
in the average times C, so with equal weights the noise multiplier is z. The server adds the
noise after it has the updates (or their SecAgg+ sum): ∞ against it.
"""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

pytest.importorskip("flwr")

from flwr.client.mod import LocalDpMod as LegacyLocalDpMod  # noqa: E402
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod  # noqa: E402
from flwr.server import strategy as legacy  # noqa: E402
from flwr.serverapp import strategy as message  # noqa: E402

from dpfl.errors import ConfigError  # noqa: E402
from dpfl.runtime.flowerapps.certified import RoundCertifier, read_flower_dp  # noqa: E402

DELTA = 1e-5


def _rdp(event: dp_accounting.DpEvent, count: int,
         relation: dp_accounting.NeighboringRelation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE) -> float:
    acc = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    acc.compose(event, count)
    return float(acc.get_epsilon(DELTA))


def _pld(event: dp_accounting.DpEvent, count: int) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event, count)
    return float(acc.get_epsilon(DELTA))


def _fl_dp_sa(cohort: str = "known", **kw: object) -> RoundCertifier:
    """Flower's examples/fl-dp-sa: client-side fixed clipping + SecAgg+, z = 0.2, 20 of 100 nodes."""
    dp = read_flower_dp(legacy.DifferentialPrivacyClientSideFixedClipping(legacy.FedAvg(), 0.2, 0.1, 20),
                        [fixedclipping_mod])
    cert = RoundCertifier(dp, DELTA, cohort, secure_aggregation=True, **kw)  # type: ignore[arg-type]
    cert.start(range(1000, 1100))
    return cert


def test_flowers_wrappers_are_read_as_they_are() -> None:
    for cls, who in ((message.DifferentialPrivacyServerSideFixedClipping, "server"),
                     (legacy.DifferentialPrivacyServerSideFixedClipping, "server"),
                     (message.DifferentialPrivacyClientSideFixedClipping, "clients"),
                     (legacy.DifferentialPrivacyClientSideFixedClipping, "clients")):
        inner = message.FedAvg() if cls.__module__.startswith("flwr.serverapp") else legacy.FedAvg()
        dp = read_flower_dp(cls(inner, 0.8, 2.0, 10), [fixedclipping_mod])
        assert (dp.noise_multiplier, dp.clipping_norm, dp.num_sampled_clients, dp.clipped_by) == (0.8, 2.0, 10, who)
        assert dp.server_noise_std == pytest.approx(0.8 * 2.0 / 10)  # Flower's compute_stdv


def test_what_dpfl_cannot_see_is_refused_or_named() -> None:
    with pytest.raises(ConfigError, match="adaptiveclipping_mod"):
        read_flower_dp(message.DifferentialPrivacyClientSideAdaptiveClipping(message.FedAvg(), 0.5, 10))
    with pytest.raises(ConfigError, match="fixedclipping_mod"):
        read_flower_dp(message.DifferentialPrivacyClientSideFixedClipping(message.FedAvg(), 0.5, 1.0, 10))

    def my_noise_mod(msg, ctx, call_next):  # type: ignore[no-untyped-def]
        return call_next(msg, ctx)

    class MyStrategy(message.FedAvg):
        pass

    MyStrategy.__module__ = "my_app.server_app"
    dp = read_flower_dp(MyStrategy(), [my_noise_mod])
    assert dp.noise_multiplier == 0 and dp.update_bound is None
    assert any("my_noise_mod" in n and "not counted" in n for n in dp.notes)
    assert any("MyStrategy" in n for n in dp.notes)


def test_fl_dp_sa_known_cohort_server_infinite_public_equals_dp_accounting_without_amplification() -> None:
    cert = _fl_dp_sa()
    cohort = list(range(1000, 1020))  # the same 20 nodes three times: the worst client took part in all
    for t in range(1, 4):
        cert.record(t, cohort, [1.0] * 20)
    eps = cert.epsilons("best")
    assert math.isinf(eps["server"])
    gauss = dp_accounting.GaussianDpEvent(0.2)
    pld, rdp = _pld(gauss, 3), _rdp(gauss, 3)
    assert pld == pytest.approx(74, abs=1.5) and rdp == pytest.approx(77, abs=1.5)  # the figures
    assert eps["public"] == pytest.approx(pld, rel=2e-3)
    assert cert.epsilons("rdp")["public"] == pytest.approx(rdp, rel=1e-6)
    # Flower's own RdpAccountant on the same events: the RDP figure
    assert cert.flower_epsilon() == pytest.approx(rdp, rel=1e-9)
    text = "\n".join(cert.report())
    assert "server ε = ∞" in text and "SecAgg+ shows it only the sum" in text


def test_fl_dp_sa_secret_cohort_is_amplified_as_dp_accounting_prices_sampling_without_replacement() -> None:
    cert = _fl_dp_sa("secret", population_size=100)
    for t in range(1, 4):
        cert.record(t, list(range(1000 + t, 1020 + t)), [1.0] * 20)
    # replace-one: the average moves by 2C/m for a replaced client, the noise std is zC/m
    wor = dp_accounting.SampledWithoutReplacementDpEvent(100, 20, dp_accounting.GaussianDpEvent(0.1))
    expected = _rdp(wor, 3, dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert cert.epsilons("rdp")["public"] == pytest.approx(expected, rel=1e-6)
    # Flower samples a fixed number of nodes, whose amplification dp-accounting certifies under
    # replace-one only (Wang, Balle, Kasiviswanathan 2019): at z = 0.2 that bound is above both the
    # 77 of add/remove without amplification and the 231 of replace-one without it — the secret
    # cohort buys nothing provable at this noise; it does at larger z (below)
    assert cert.epsilons("rdp")["public"] > _rdp(dp_accounting.GaussianDpEvent(0.1), 3,
                                                  dp_accounting.NeighboringRelation.REPLACE_ONE)
    dp = read_flower_dp(legacy.DifferentialPrivacyClientSideFixedClipping(legacy.FedAvg(), 4.0, 0.1, 20),
                        [fixedclipping_mod])
    big = RoundCertifier(dp, DELTA, "secret", secure_aggregation=True, population_size=100)
    big.start(range(100))
    for t in range(50):
        big.record(t, list(range(20)), [1.0] * 20)
    wor = dp_accounting.SampledWithoutReplacementDpEvent(100, 20, dp_accounting.GaussianDpEvent(2.0))
    amplified = _rdp(wor, 50, dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert big.epsilons("rdp")["public"] == pytest.approx(amplified, rel=1e-6)
    assert amplified < _rdp(dp_accounting.GaussianDpEvent(4.0), 50)  # below add/remove without amplification
    assert math.isinf(cert.epsilons("rdp")["server"])


def test_fedavg_weighted_by_examples_protects_a_heavy_client_less_than_flower_assumes() -> None:
    dp = read_flower_dp(message.DifferentialPrivacyServerSideFixedClipping(message.FedAvg(), 1.0, 1.0, 4))
    cert = RoundCertifier(dp, DELTA)
    cert.start([11, 12, 13, 14])
    cert.record(1, [11, 12, 13, 14], [10.0, 10.0, 10.0, 50.0])  # node 14 holds 5/8 of the weight
    # noise std z·C/m = 1/4 against sensitivity (50/80)·C: multiplier 0.4
    heavy = cert.ledger.certify("public", client_id=3, method="rdp").epsilon  # type: ignore[union-attr]
    light = cert.ledger.certify("public", client_id=0, method="rdp").epsilon  # type: ignore[union-attr]
    assert heavy == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(0.25 / (50 / 80)), 1), rel=1e-6)
    assert light == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(0.25 / (10 / 80)), 1), rel=1e-6)
    assert cert.flower_epsilon() == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(1.0), 1), rel=1e-9)
    assert heavy > cert.flower_epsilon()  # type: ignore[operator]


@pytest.mark.parametrize("mod_cls", [LocalDpMod, LegacyLocalDpMod])
def test_local_dp_mod_gives_the_server_a_finite_certificate(mod_cls: type) -> None:
    mod = mod_cls(clipping_norm=1.0, sensitivity=1.0, epsilon=0.5, delta=1e-5)
    dp = read_flower_dp(message.FedAvg(), [mod])
    std = math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5  # Flower's add_localdp_gaussian_noise_to_params
    assert dp.local_noise_std == pytest.approx(std) and dp.update_bound == 1.0
    cert = RoundCertifier(dp, DELTA)
    cert.start(range(5))
    for t in range(4):
        cert.record(t, list(range(5)), [1.0] * 5)
    assert cert.epsilons("rdp")["server"] == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(std), 4), rel=1e-6)
    # the public sees the average of 5 locally noised updates: std/sqrt(5) against C/5
    public = dp_accounting.GaussianDpEvent((std / math.sqrt(5)) / (1.0 / 5))
    assert cert.epsilons("rdp")["public"] == pytest.approx(_rdp(public, 4), rel=1e-6)
    assert "each client adds its own noise" in "\n".join(cert.report())


def test_a_local_dp_mod_above_epsilon_one_is_named_as_outside_the_classical_constants_range() -> None:
    dp = read_flower_dp(message.FedAvg(), [LocalDpMod(1.0, 1.0, 4.0, 1e-5)])
    assert any("ε = 4 > 1" in n for n in dp.notes)


def test_max_epsilon_stops_before_the_round_that_would_exceed_it() -> None:
    cert = _fl_dp_sa(max_epsilon=60.0)
    cohort = list(range(1000, 1020))
    assert cert.planned(1, cohort) is None
    cert.record(1, cohort, [1.0] * 20)
    assert cert.planned(2, cohort) is None
    cert.record(2, cohort, [1.0] * 20)
    assert cert.epsilons("rdp")["public"] < 60
    why = cert.planned(3, cohort)
    assert why is not None and "before round 3" in why and "max_epsilon = 60" in why
    assert cert.planned(4, cohort) == why  # stays stopped
    with pytest.raises(ConfigError, match="unknown observer"):
        _fl_dp_sa(max_epsilon={"cloud": 1.0})
    with pytest.raises(ConfigError, match="must be > 0"):
        _fl_dp_sa(max_epsilon=0.0)


def test_an_update_above_the_clipping_norm_makes_the_round_infinite_and_is_named() -> None:
    dp = read_flower_dp(message.DifferentialPrivacyClientSideFixedClipping(message.FedAvg(), 1.0, 0.5, 2),
                        [fixedclipping_mod])
    cert = RoundCertifier(dp, DELTA)
    cert.start([1, 2])
    cert.check_update_norms(1, [1, 2], [0.5, 0.7])
    cert.record(1, [1, 2], [1.0, 1.0])
    assert math.isinf(cert.epsilons("rdp")["public"])
    assert "above the clipping norm 0.5 (node 2: 0.7)" in "\n".join(cert.report())


def test_add_remove_with_fedavgs_realized_denominator_doubles_the_sensitivity() -> None:
    # removing client k changes the weight FedAvg divides by: the average moves by
    # w_k·(x_k − avg') with ‖x_k − avg'‖ <= 2C, twice the zero-out bound Flower's accountant uses
    dp = read_flower_dp(message.DifferentialPrivacyServerSideFixedClipping(message.FedAvg(), 1.0, 1.0, 4))
    zero, gone = RoundCertifier(dp, DELTA), RoundCertifier(dp, DELTA, relation="add_remove")
    for cert in (zero, gone):
        cert.start(range(4))
        cert.record(1, [0, 1, 2, 3], [1.0] * 4)
    assert zero.epsilons("rdp")["public"] == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(1.0), 1), rel=1e-6)
    assert gone.epsilons("rdp")["public"] == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(0.5), 1), rel=1e-6)
    assert "relation: zero-out" in "\n".join(zero.report())
    assert "relation: add/remove of one client, FedAvg's denominator included" in "\n".join(gone.report())
    with pytest.raises(ConfigError, match="`relation`"):
        RoundCertifier(dp, DELTA, relation="replace")  # type: ignore[arg-type]


def test_nodes_that_connect_after_the_first_round_are_counted_and_a_secret_cohort_needs_its_population() -> None:
    dp = read_flower_dp(message.DifferentialPrivacyServerSideFixedClipping(message.FedAvg(), 1.0, 1.0, 2))
    cert = RoundCertifier(dp, DELTA)
    cert.start([5, 6, 7])  # 97 of 100 nodes had connected when Flower's sample drew the first cohort
    cert.record(1, [5, 6], [1.0, 1.0])
    cert.record(2, [6, 99], [1.0, 1.0])  # node 99 connected later
    assert cert.client_of(99) == 3 and cert.taken_part == {0: 1, 1: 2, 3: 1}
    with pytest.raises(ConfigError, match="population_size"):
        RoundCertifier(dp, DELTA, "secret")


# --------------------------------------------------------------------------- what an independent review found


def test_local_noise_then_the_servers_clip_is_priced_by_the_bounds_that_hold() -> None:
    # LocalDpMod clips to C1 = 1 and adds σ_l; the server-side wrapper then clips the *noised*
    # upload to C2 = 0.5 and adds z·C2/m: the server sees (σ_l, C1) — not min(C1, C2) — and the
    # public the larger multiplier of (σ_l, C1) and (z·C2/m, w_k·min(C1, 2·C2))
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=0.5, epsilon=1.0, delta=1e-5)
    dp = read_flower_dp(message.DifferentialPrivacyServerSideFixedClipping(message.FedAvg(), 1.0, 0.5, 4), [mod])
    assert (dp.bound_before_noise, dp.bound_after_noise) == (1.0, 0.5)
    sigma_l = 0.5 * math.sqrt(2 * math.log(1.25e5))
    cert = RoundCertifier(dp, DELTA)
    cert.start(range(4))
    cert.record(1, [0, 1, 2, 3], [1.0] * 4)
    assert cert.epsilons("rdp")["server"] == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(sigma_l), 1), rel=1e-6)
    public = max(sigma_l / 1.0, (1.0 * 0.5 / 4) / (0.25 * min(1.0, 1.0)))
    assert cert.epsilons("rdp")["public"] == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(public), 1), rel=1e-6)


def test_the_order_of_the_client_mods_decides_whether_the_clip_comes_before_the_local_noise() -> None:
    mod = LocalDpMod(clipping_norm=2.0, sensitivity=2.0, epsilon=1.0, delta=1e-5)
    wrapper = message.DifferentialPrivacyClientSideFixedClipping(message.FedAvg(), 1.0, 1.0, 4)
    inner = read_flower_dp(wrapper, [mod, fixedclipping_mod])  # fixedclipping_mod clips, then LocalDpMod noises
    outer = read_flower_dp(wrapper, [fixedclipping_mod, mod])  # LocalDpMod noises, then the clip
    assert (inner.bound_before_noise, inner.bound_after_noise) == (1.0, None)
    assert (outer.bound_before_noise, outer.bound_after_noise) == (2.0, 1.0)
    cert = RoundCertifier(inner, DELTA)
    cert.start(range(2))
    cert.check_update_norms(1, [0, 1], [5.0, 5.0])  # noised uploads are not within C: not an unclipped round
    cert.record(1, [0, 1], [1.0, 1.0])
    assert math.isfinite(cert.epsilons("rdp")["public"]) and not cert.unclipped


def test_an_aggregator_other_than_fedavgs_mean_is_not_priced_as_a_mean() -> None:
    dp = read_flower_dp(message.DifferentialPrivacyServerSideFixedClipping(message.FedMedian(), 1.0, 1.0, 3))
    assert not dp.averages and any("FedMedian" in n for n in dp.notes)
    cert = RoundCertifier(dp, DELTA)
    cert.start(range(3))
    cert.record(1, [0, 1, 2], [1.0] * 3)
    assert math.isinf(cert.epsilons("rdp")["public"])


def test_secagg_with_server_side_clipping_is_refused() -> None:
    from dpfl.runtime.flowerapps.certified import CertifiedLegacyStrategy

    with pytest.raises(ConfigError, match="clips the \\*sum\\*"):
        CertifiedLegacyStrategy(legacy.DifferentialPrivacyServerSideFixedClipping(legacy.FedAvg(), 1.0, 1.0, 10),
                                delta=DELTA, secure_aggregation=True)


def test_a_secret_cohort_round_that_is_not_a_uniform_draw_is_not_amplified() -> None:
    dp = read_flower_dp(legacy.DifferentialPrivacyClientSideFixedClipping(legacy.FedAvg(), 4.0, 0.1, 10),
                        [fixedclipping_mod])
    amplified = RoundCertifier(dp, DELTA, "secret", secure_aggregation=True, population_size=100)
    short = RoundCertifier(dp, DELTA, "secret", secure_aggregation=True, population_size=100)
    unequal = RoundCertifier(dp, DELTA, "secret", secure_aggregation=True, population_size=100)
    for cert in (amplified, short, unequal):
        cert.start(range(100))
    amplified.cohort_drawn(1, 100, 10)
    amplified.record(1, list(range(10)), [1.0] * 10)
    short.cohort_drawn(1, 60, 10)  # only 60 of the 100 nodes connected
    short.record(1, list(range(10)), [1.0] * 10)
    unequal.cohort_drawn(1, 100, 10)
    unequal.record(1, list(range(10)), [1.0] * 9 + [100.0])
    wor = dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(2.0))
    assert amplified.epsilons("rdp")["public"] == pytest.approx(
        _rdp(wor, 1, dp_accounting.NeighboringRelation.REPLACE_ONE), rel=1e-6)
    assert short.epsilons("rdp")["public"] == pytest.approx(
        _rdp(dp_accounting.GaussianDpEvent(2.0), 1, dp_accounting.NeighboringRelation.REPLACE_ONE), rel=1e-6)
    assert "6" in short.round_notes[0] and "recorded without amplification" in short.round_notes[0]
    assert any("unequal weights" in n for n in unequal.round_notes)
    heavy = (0.4 / 10) / (2 * 0.1 * 100 / 109)  # noise z·C/m against 2·w_k·C for the heaviest client
    assert unequal.epsilons("rdp")["public"] == pytest.approx(
        _rdp(dp_accounting.GaussianDpEvent(heavy), 1, dp_accounting.NeighboringRelation.REPLACE_ONE), rel=1e-6)


def test_a_withheld_aggregate_is_recorded_for_the_server_that_saw_the_uploads() -> None:
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=1.0, delta=1e-5)
    dp = read_flower_dp(message.FedAvg(), [mod])
    cert = RoundCertifier(dp, DELTA)
    cert.start(range(3))
    cert.record(1, [0, 1, 2], [1.0] * 3, released=False)
    assert cert.epsilons("rdp")["public"] == 0.0 and cert.epsilons("rdp")["server"] > 0
    assert any("no aggregate was broadcast" in line for line in cert.report())


def test_a_round_dpfl_stopped_is_not_aggregated_even_with_flowers_accountant() -> None:
    from flwr.supercore.privacy_accounting import NeighboringRelation, PrivacyConfig, SamplingMethod
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    from dpfl.runtime.flowerapps.certified import CertifiedStrategy

    acc = RdpAccountant(PrivacyConfig(1e-5, 10, NeighboringRelation.ADD_OR_REMOVE_ONE,
                                      SamplingMethod.NO_AMPLIFICATION))
    strategy = CertifiedStrategy(message.DifferentialPrivacyServerSideFixedClipping(
        message.FedAvg(), 1.0, 1.0, 5, accountant=acc), delta=1e-5, max_epsilon=1.0)
    strategy.certifier.stopped = "dpfl stopped the run before round 3: ..."
    assert list(strategy.configure_train(3, None, None, None)) == []
    assert strategy.aggregate_train(3, []) == (None, None)  # Flower's start() still calls it


def test_local_dp_mod_delta_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="delta"):
        read_flower_dp(message.FedAvg(), [LocalDpMod(1.0, 1.0, 1.0, 0.0)])


def test_adaptive_clipping_is_priced_with_the_clip_flower_really_noises_with() -> None:
    # Flower's adaptive wrappers update the clip norm (geometric step on the noisy clipped count)
    # *before* adding z·C/m, so a round clipped at C_t is noised with z·C_{t+1}/m: when the norm
    # shrinks, the multiplier against C_t is z·C_{t+1}/C_t < z. dpfl reads both norms each round.
    wrapper = message.DifferentialPrivacyServerSideAdaptiveClipping(message.FedAvg(), 1.0, 10,
                                                                    initial_clipping_norm=1.0, clipped_count_stddev=2.0)
    dp = read_flower_dp(wrapper)
    z, sigma_b = dp.noise_multiplier, dp.count_noise_std
    # Flower's split of the total multiplier (Andrew et al. 2021): z_Δ = (z^-2 − (2σ_b)^-2)^(-1/2)
    assert sigma_b == 2.0 and z == pytest.approx((1.0 ** -2 - (2 * 2.0) ** -2) ** -0.5)
    clip_t = wrapper.clipping_norm
    wrapper._geometric_update(1.0)  # every update clipped: the norm shrinks, as Flower does in aggregate_train
    clip_next = wrapper.clipping_norm
    assert clip_next < clip_t
    cert = RoundCertifier(dp, DELTA)
    cert.start(range(10))
    cert.round_clip = (clip_t, clip_next)
    cert.record(1, list(range(10)), [1.0] * 10)
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(z * clip_next / clip_t))  # the update, against the round's clip
    acc.compose(dp_accounting.GaussianDpEvent(sigma_b))  # the clipped count, a bit per client
    assert cert.epsilons("rdp")["public"] == pytest.approx(float(acc.get_epsilon(DELTA)), rel=1e-6)
    assert math.isinf(cert.epsilons("rdp")["server"])
    flower_claims = rdp_privacy_accountant.RdpAccountant()
    flower_claims.compose(dp_accounting.GaussianDpEvent(z))
    flower_claims.compose(dp_accounting.GaussianDpEvent(sigma_b))
    assert cert.epsilons("rdp")["public"] > float(flower_claims.get_epsilon(DELTA))  # the noise was smaller
    # Flower's figure beside it: its accountant on the user's total multiplier (1.0), one round
    assert cert.flower_epsilon() == pytest.approx(_rdp(dp_accounting.GaussianDpEvent(1.0), 1), rel=1e-9)


def test_client_side_adaptive_clipping_reads_its_mod_without_naming_it_unseen() -> None:
    from flwr.clientapp.mod import adaptiveclipping_mod

    dp = read_flower_dp(message.DifferentialPrivacyClientSideAdaptiveClipping(message.FedAvg(), 1.0, 10,
                                                                              clipped_count_stddev=2.0),
                        [adaptiveclipping_mod])
    assert dp.adaptive and dp.clipped_by == "clients" and not dp.notes


def test_a_max_epsilon_stop_names_the_figures_and_a_cohort_smaller_than_the_wrappers() -> None:
    # Fails before the change: the stop said only "it would take the certified ε against the public
    # above max_epsilon = 60", without the ε reached, nor that the round drew fewer nodes than the
    # wrapper's noise assumed (fl-dp-sa: z·C/m for m = 20).
    cert = _fl_dp_sa(max_epsilon=60.0)
    small = list(range(1000, 1002))  # 2 nodes drawn where the noise assumed 20
    why = cert.planned(1, small)
    assert why is not None and "before round 1" in why and "max_epsilon = 60" in why
    assert "0 now" in why and "after this round" in why
    assert "drew 2 nodes" in why and "m = 20" in why and "0.2·2/20 = 0.02" in why and "fraction_train" in why
    full = _fl_dp_sa(max_epsilon=1.0)
    why = full.planned(1, list(range(1000, 1020)))
    assert why is not None and "raise noise_multiplier (now 0.2)" in why


# --------------------------------------------------------------------------- issue #54: certificate edges


class _Nodes:
    """A legacy ClientManager of fixed nodes (what FedAvg.configure_fit asks of it)."""

    def __init__(self, nodes: list[int]) -> None:
        from types import SimpleNamespace

        self.proxies = {str(n): SimpleNamespace(node_id=n, cid=str(n)) for n in nodes}

    def all(self) -> dict[str, object]:
        return self.proxies

    def num_available(self) -> int:
        return len(self.proxies)

    def sample(self, num_clients: int, min_num_clients: int | None = None, criterion: object = None) -> list[object]:
        return list(self.proxies.values())[:num_clients]


def _legacy_round(strategy: object, server_round: int, nodes: list[int], weights: list[int]) -> None:
    """One legacy fit round through ``strategy``: every node moves the model by 0.1 per coordinate."""
    import numpy as np
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    current = [np.zeros(3, dtype=np.float32)]
    pairs = strategy.configure_fit(server_round, ndarrays_to_parameters(current), _Nodes(nodes))  # type: ignore[attr-defined]
    results = [(proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([current[0] + 0.1]), n, {}))
               for (proxy, _), n in zip(pairs, weights, strict=True)]
    strategy.aggregate_fit(server_round, results, [])  # type: ignore[attr-defined]


def test_a_clipping_norm_set_to_zero_after_construction_leaves_the_server_infinite_and_is_named() -> None:
    # Fails before the change: the server's clip of 0 gave every update sensitivity 0, so the server,
    # which clips what it has already received, was certified ε = 0; no note named the attribute.
    wrapper = message.DifferentialPrivacyServerSideFixedClipping(message.FedAvg(), 1.0, 1.0, 4)
    wrapper.clipping_norm = 0
    cert = RoundCertifier(read_flower_dp(wrapper), DELTA)
    cert.start(range(4))
    cert.record(1, [0, 1, 2, 3], [1.0] * 4)
    assert math.isinf(cert.epsilons("rdp")["server"])
    assert cert.epsilons("rdp")["public"] == 0.0  # every update clipped to zero: the broadcast says nothing
    text = "\n".join(cert.report())
    assert ("DifferentialPrivacyServerSideFixedClipping.clipping_norm = 0: the wrapper clips every update to zero, "
            "but only after the server has received it — the server sees the raw updates (ε = ∞ against it)") in text


def test_the_wrappers_numbers_are_read_when_certifying_and_a_negative_or_non_finite_one_is_refused() -> None:
    # Fails before the change: the noise multiplier was read once, at construction (the round was
    # priced at z = 1 though Flower noised it with z = 2), and a negative clip reached Flower unnamed.
    from dpfl.runtime.flowerapps.certified import CertifiedLegacyStrategy

    wrapper = legacy.DifferentialPrivacyServerSideFixedClipping(
        legacy.FedAvg(fraction_fit=1.0, min_fit_clients=4, min_available_clients=4), 1.0, 1.0, 4)
    strategy = CertifiedLegacyStrategy(wrapper, delta=DELTA)
    wrapper.noise_multiplier = 2.0
    _legacy_round(strategy, 1, [1, 2, 3, 4], [5, 5, 5, 5])
    assert strategy.certifier.epsilons("rdp")["public"] == pytest.approx(
        _rdp(dp_accounting.GaussianDpEvent(2.0), 1), rel=1e-6)
    assert math.isinf(strategy.certifier.epsilons("rdp")["server"])
    wrapper.clipping_norm = -1.0
    with pytest.raises(ConfigError) as err:
        _legacy_round(strategy, 2, [1, 2, 3, 4], [5, 5, 5, 5])
    assert str(err.value) == ("DifferentialPrivacyServerSideFixedClipping.clipping_norm = -1.0: dpfl certifies a "
                              "finite number >= 0 only (Flower computes its noise std z·C/m from it). Set "
                              "DifferentialPrivacyServerSideFixedClipping.clipping_norm to a finite positive number.")
    wrapper.clipping_norm = 1.0
    wrapper.noise_multiplier = float("nan")
    with pytest.raises(ConfigError, match=r"DifferentialPrivacyServerSideFixedClipping\.noise_multiplier = nan"):
        read_flower_dp(wrapper)


def test_an_unknown_mod_outside_fixedclipping_mod_is_named_as_able_to_undo_the_clip() -> None:
    # Fails before the change: the note said only that dpfl cannot see what the mod does and that
    # its noise is not counted, wherever it sat.
    def my_mod(msg, ctx, call_next):  # type: ignore[no-untyped-def]
        return call_next(msg, ctx)

    wrapper = message.DifferentialPrivacyClientSideFixedClipping(message.FedAvg(), 1.0, 1.0, 4)
    outside = read_flower_dp(wrapper, [my_mod, fixedclipping_mod])  # the first mod handles the reply last
    assert outside.notes == ("client mod 'my_mod': dpfl cannot see what it does; any noise it adds is not counted; it "
                             "is outside fixedclipping_mod (before it in mods=[...]), so it handles the reply after "
                             "the clip and can change the clipped update and undo the clip — put it after "
                             "fixedclipping_mod in the list",)
    inside = read_flower_dp(wrapper, [fixedclipping_mod, my_mod])
    assert inside.notes == ("client mod 'my_mod': dpfl cannot see what it does; any noise it adds is not counted",)


def test_adaptive_clipping_says_the_composed_epsilon_needs_a_budget_fixed_in_advance(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Fails before the change: nothing said that the noise multiplier depends on the data (through
    # the noisy count), so that the composed ε holds only under a privacy filter (max_epsilon).
    from dpfl.runtime.flowerapps import certified

    logged: list[str] = []
    monkeypatch.setattr(certified, "_log", lambda level, msg: logged.append(msg))
    no_filter = ("adaptive clipping without a privacy filter: each round's noise multiplier z·C_{t+1}/C_t depends "
                 "on the data (through the noisy clipped count that moves the clip norm), so the composed ε below "
                 "is a guarantee only with the budget fixed in advance — pass max_epsilon= (the public's budget) "
                 "and dpfl stops the run before a round would exceed it")
    strategy = certified.CertifiedStrategy(message.DifferentialPrivacyServerSideAdaptiveClipping(
        message.FedAvg(), 1.0, 10, clipped_count_stddev=2.0), delta=DELTA)
    strategy.summary()
    assert f"dpfl: {no_filter}" in logged
    cert = strategy.certifier
    cert.start(range(10))
    cert.record(1, list(range(10)), [1.0] * 10)
    assert f"  {no_filter}" in cert.report()
    held = certified.CertifiedLegacyStrategy(legacy.DifferentialPrivacyServerSideAdaptiveClipping(
        legacy.FedAvg(), 1.0, 10, clipped_count_stddev=2.0), delta=DELTA, max_epsilon=5.0)
    assert logged[-1] == ("dpfl: adaptive clipping: each round's noise multiplier depends on the data (through the "
                          "noisy clipped count), so the guarantee is the budget fixed in advance, max_epsilon = 5 for "
                          "the public: dpfl's privacy filter holds it (it stops the run before a round would "
                          "exceed it)")
    assert held.certifier.filter_note() == logged[-1][len("dpfl: "):]
    fixed = RoundCertifier(read_flower_dp(message.DifferentialPrivacyServerSideFixedClipping(
        message.FedAvg(), 1.0, 1.0, 4)), DELTA)
    assert fixed.filter_note() is None  # a fixed clip: the multiplier does not depend on the data


def test_flowers_figure_is_labelled_and_fedavgs_add_remove_figure_is_shown_when_the_weights_differ() -> None:
    # Fails before the change: the legacy app's figure was "Flower (its RdpAccountant on the same
    # events)", as if the app ran it, and with unequal weights only the zero-out figures were shown.
    dp = read_flower_dp(legacy.DifferentialPrivacyServerSideFixedClipping(legacy.FedAvg(), 1.0, 1.0, 4))
    cert = RoundCertifier(dp, DELTA)
    cert.start([11, 12, 13, 14])
    cert.record(1, [11, 12, 13, 14], [10.0, 10.0, 10.0, 50.0])
    # noise std z·C/m = 1/4; the heavy client is w = 5/8 of the mean; gone from it, the realized
    # denominator shrinks with it: the mean moves by up to 2·w·C (zero-out: w·C)
    add_remove = dp_accounting.GaussianDpEvent(0.25 / (2 * 5 / 8))
    zero_out = dp_accounting.GaussianDpEvent(0.25 / (5 / 8))
    gone = cert.add_remove_epsilons("rdp")
    assert gone is not None and gone["public"] == pytest.approx(_rdp(add_remove, 1), rel=1e-6)
    assert cert.epsilons("rdp")["public"] == pytest.approx(_rdp(zero_out, 1), rel=1e-6)
    best = cert.add_remove_epsilons()
    assert best is not None and best["public"] == pytest.approx(_pld(add_remove, 1), rel=2e-3)
    assert math.isinf(best["server"])
    text = "\n".join(cert.report())
    assert (f"  add/remove, FedAvg's denominator included (the weights differ, so the zero-out figures above are not "
            f"add/remove ones): server ε = ∞, public ε = {best['public']:,.4g} at δ = 1e-05") in text
    assert ("  Flower's figure — Flower's RdpAccountant, run by dpfl on Flower's assumptions (total z, add/remove of "
            "one client at sensitivity C/m, i.e. equal weights over a fixed denominator m; the cohort known, no "
            "amplification): ε = ") in text
    line = cert.round_line(1)
    assert f"(zero-out; FedAvg's add/remove: public {gone['public']:,.4g})" in line
    assert line.endswith(f" · Flower's RdpAccountant, run by dpfl on Flower's assumptions (total z, add/remove): "
                         f"ε = {_rdp(dp_accounting.GaussianDpEvent(1.0), 1):,.4g}")
    equal = RoundCertifier(dp, DELTA)
    equal.start(range(4))
    equal.record(1, [0, 1, 2, 3], [1.0] * 4)
    assert equal.add_remove_epsilons() is None and "add/remove, FedAvg" not in "\n".join(equal.report())


def test_flowers_deprecated_dp_fedavg_wrappers_are_refused_with_their_replacement() -> None:
    # Fails before the change: DPFedAvgFixed was read as a strategy that adds no noise (∞), unnamed.
    from dpfl.runtime.flowerapps.certified import CertifiedLegacyStrategy

    with pytest.raises(ConfigError) as err:
        read_flower_dp(legacy.DPFedAvgFixed(legacy.FedAvg(), num_sampled_clients=10, clip_norm=1.0))
    assert str(err.value) == ("DPFedAvgFixed (Flower's deprecated DP-FedAvg wrapper) is not supported: dpfl does not "
                              "read its clipping, noise or sampling, so it cannot certify it. Use "
                              "DifferentialPrivacyServerSideFixedClipping (or "
                              "DifferentialPrivacyClientSideFixedClipping with fixedclipping_mod), as Flower "
                              "recommends.")
    with pytest.raises(ConfigError, match=r"^DPFedAvgAdaptive \(Flower's deprecated .* Use "
                                          r"DifferentialPrivacyServerSideAdaptiveClipping \(or "):
        CertifiedLegacyStrategy(legacy.DPFedAvgAdaptive(legacy.FedAvg(), num_sampled_clients=40), delta=DELTA)
