"""The privacy ledger (dpfl.privacy.accounting.ledger): receipts per round, client and observer."""

from __future__ import annotations

import json
import math
import warnings

import dp_accounting as dpa
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpfl.errors import ConfigError, PrivacyPreconditionError
from dpfl.privacy.accounting.certify import DEFAULT_RDP_ORDERS, certify
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release, federated_round_releases
from dpfl.sampling import AllClients, FixedSizeSampler, PoissonSampler

COARSE = 1e-2


def _ledger(sampler: object, n: int = 10, **kw: object) -> PrivacyLedger:
    opts: dict[str, object] = {"delta": 1e-5, "relation": "add_remove", "privacy_unit": "client",
                               "pld_every": 0, "pld_discretization": COARSE}
    opts.update(kw)
    return PrivacyLedger(num_clients=n, sampler=sampler, **opts)  # type: ignore[arg-type]


def _gauss_rdp_eps(z: float, count: int, delta: float = 1e-5) -> float:
    return rdp.RdpAccountant().compose(dpa.GaussianDpEvent(z), count).get_epsilon(delta)


# ---------------------------------------------------------------- sampling agreement


def test_poisson_sampler_with_a_fixed_size_round_is_an_error() -> None:
    ledger = _ledger(PoissonSampler(0.3))
    rel = federated_round_releases([1, 2, 3], 1.0, 1.0, [1 / 3] * 3, amplifiable=True)
    with pytest.raises(PrivacyPreconditionError, match="sampling mismatch"):
        ledger.record_round(0, rel, sampling=FixedSizeSampler(3).describe(), participants=[1, 2, 3])
    with pytest.raises(PrivacyPreconditionError, match="sampling mismatch"):
        ledger.record_round(0, rel, sampling=AllClients(), participants=[1, 2, 3])
    # the declared sampler (or its description) is accepted
    ledger.record_round(0, rel, sampling=PoissonSampler(0.3), participants=[1, 2, 3])
    with pytest.raises(PrivacyPreconditionError, match="sampling mismatch"):
        ledger.record_round(1, rel, sampling=PoissonSampler(0.31).describe(), participants=[1, 2, 3])


def test_a_broadcast_is_amplified_only_when_declared_amplifiable_at_a_client_unit() -> None:
    """Amplifying by a secret client sample needs interchangeable clients and a client-level unit
    (privacy/accounting/broadcast.py): any other broadcast is refused under fixed-size and Poisson sampling, and
    accepted (unamplified) under full participation."""
    for sampler in (FixedSizeSampler(3), PoissonSampler(0.3)):
        ledger = _ledger(sampler)
        rel = federated_round_releases([1, 2, 3], 1.0, 1.0, [1 / 3] * 3)
        with pytest.raises(PrivacyPreconditionError, match="interchangeable"):
            ledger.record_round(0, rel, sampling=sampler, participants=[1, 2, 3])
        records = _ledger(sampler, privacy_unit="record")
        with pytest.raises(PrivacyPreconditionError, match="record"):
            records.record_round(0, federated_round_releases([1, 2, 3], 1.0, 1.0, [1 / 3] * 3, amplifiable=True),
                                 sampling=sampler, participants=[1, 2, 3])
    full = _ledger(AllClients(), n=3)
    full.record_round(0, federated_round_releases([0, 1, 2], 1.0, 1.0, [1 / 3] * 3), sampling=AllClients(),
                      participants=[0, 1, 2])
    assert full.certify("public", method="rdp").epsilon == pytest.approx(_gauss_rdp_eps(math.sqrt(3.0), 1))


def test_restoring_with_a_different_sampler_is_an_error() -> None:
    ledger = _ledger(PoissonSampler(0.3))
    with pytest.raises(PrivacyPreconditionError, match="sampling mismatch"):
        PrivacyLedger.from_dict(ledger.to_dict(), sampler=AllClients())


def test_round_checks() -> None:
    ledger = _ledger(FixedSizeSampler(2), relation="replace_one")
    with pytest.raises(PrivacyPreconditionError, match="num_sampled = 2"):
        ledger.record_round(0, [], sampling={"kind": "fixed_size", "num_sampled": 2}, participants=[0, 1, 2])
    with pytest.raises(PrivacyPreconditionError, match="not among"):
        ledger.record_round(0, [Release.gaussian("server", 1.0, 1.0, [5])],
                            sampling={"kind": "fixed_size", "num_sampled": 2}, participants=[0, 1])
    with pytest.raises(ConfigError, match="observer"):
        Release.gaussian("analyst", 1.0, 1.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------- observers


def test_client_split_noise_protects_only_at_sigma_over_sqrt_k_against_the_server() -> None:
    """004 Alg. 1: each of K clients adds N(0, S^2 sigma^2 / K): the sum carries S*sigma (central
    multiplier sigma), but each upload only sigma/sqrt(K) against the server."""
    k, sigma, s, rounds = 16, 2.0, 0.5, 5
    ledger = _ledger(AllClients(), n=k)
    for t in range(rounds):
        rel = federated_round_releases(range(k), s * sigma / math.sqrt(k), s, [1.0] * k)  # a sum
        ledger.record_round(t, rel, sampling={"kind": "all"}, participants=range(k))
    server = ledger.certify("server", method="rdp")
    public = ledger.certify("public", method="rdp")
    assert server.epsilon_rdp == pytest.approx(_gauss_rdp_eps(sigma / math.sqrt(k), rounds))
    assert public.epsilon_rdp == pytest.approx(_gauss_rdp_eps(sigma, rounds))
    assert server.epsilon > 5 * public.epsilon
    assert ledger.certify(method="rdp").observer == "server"  # headline = worst observer


def test_secure_aggregation_gives_the_server_the_aggregate_only() -> None:
    k, sigma = 16, 2.0
    ledger = _ledger(AllClients(), n=k)
    rel = federated_round_releases(range(k), sigma / math.sqrt(k), 1.0, [1.0] * k, ideal_secure_sum=True)
    ledger.record_round(0, rel, sampling={"kind": "all"}, participants=range(k))
    assert ledger.certify("server", method="rdp").epsilon == pytest.approx(_gauss_rdp_eps(sigma, 1))


def test_server_noise_protects_the_public_not_the_server() -> None:
    ledger = _ledger(AllClients(), n=4)
    rel = federated_round_releases(range(4), 1.0, 1.0, [0.25] * 4, server_noise_std=2.0)
    ledger.record_round(0, rel, sampling={"kind": "all"}, participants=range(4))
    # public: sqrt(4 * 0.25^2 * 1 + 4) / (0.25 * 1)
    z_pub = math.sqrt(0.25 + 4.0) / 0.25
    assert ledger.certify("public", method="rdp").epsilon == pytest.approx(_gauss_rdp_eps(z_pub, 1))
    assert ledger.certify("server", method="rdp").epsilon == pytest.approx(_gauss_rdp_eps(1.0, 1))


def test_public_amplification_only_for_a_secret_sample() -> None:
    q, z, rounds = 0.2, 1.0, 30
    gen = torch.Generator().manual_seed(3)
    secret = _ledger(PoissonSampler(q), n=50)
    known = _ledger(PoissonSampler(q), n=50, sample_secret=False)
    sampler = PoissonSampler(q)
    for t in range(rounds):
        ids = sampler.sample(50, gen).tolist()
        rel = [Release.gaussian("public", z, 1.0, None, amplifiable=True)]
        secret.record_round(t, rel, sampling=sampler.describe(), participants=ids)
        known.record_round(t, rel, sampling=sampler.describe(), participants=ids)
    amplified = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), rounds)
    assert secret.certify("public", method="rdp").epsilon == pytest.approx(
        rdp.RdpAccountant().compose(amplified).get_epsilon(1e-5))
    # a known cohort: each client is charged for the rounds it took part in, unamplified
    worst = known.certify("public", method="rdp")
    counts = {c: 0 for c in range(50)}
    for r in known.to_dict()["rounds"]:
        for c in r["participants"]:
            counts[c] += 1
    assert worst.epsilon == pytest.approx(_gauss_rdp_eps(z, max(counts.values())))
    assert worst.epsilon > secret.certify("public", method="rdp").epsilon


def test_server_is_never_amplified_even_under_poisson_sampling() -> None:
    ledger = _ledger(PoissonSampler(0.1), n=20)
    for t in range(3):
        ledger.record_round(t, [Release.gaussian("server", 1.0, 1.0, [7])],
                            sampling={"kind": "poisson", "sample_rate": 0.1}, participants=[7])
    cert = ledger.certify("server", client_id=7, method="best")
    assert cert.epsilon_rdp == pytest.approx(_gauss_rdp_eps(1.0, 3))
    assert cert.epsilon_pld == pytest.approx(
        certify(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1.0), 3), 1e-5, relation="add_remove",
                privacy_unit="client").epsilon_pld)
    assert ledger.certify("server", client_id=3).epsilon == 0.0  # never sampled


def test_dropouts_record_the_weaker_guarantee() -> None:
    full, short = _ledger(AllClients(), n=4), _ledger(AllClients(), n=4)
    full.record_round(0, federated_round_releases(range(4), 1.0, 1.0, [0.25] * 4),
                      sampling={"kind": "all"}, participants=range(4))
    short.record_round(0, federated_round_releases([0, 1], 1.0, 1.0, [0.5] * 2),
                       sampling={"kind": "all"}, participants=[0, 1])
    assert short.certify("public", method="rdp").epsilon > full.certify("public", method="rdp").epsilon
    assert short.certify("public", method="rdp").epsilon == pytest.approx(_gauss_rdp_eps(math.sqrt(2), 1))


def test_personalized_noise_gives_each_client_its_own_epsilon() -> None:
    # 002 PMIDP: sigma_k per client, p_k proportional to 1/sigma_k; per-client public receipts
    sigmas = [0.5, 1.0, 2.0]
    inv = [1 / s for s in sigmas]
    weights = [v / sum(inv) for v in inv]
    ledger = _ledger(AllClients(), n=3, relation="replace_one")
    for t in range(4):
        rel = federated_round_releases(range(3), sigmas, 2.0, weights, per_client_public=True)
        ledger.record_round(t, rel, sampling={"kind": "all"}, participants=range(3))
    server = ledger.client_epsilons("server")
    for k, s in enumerate(sigmas):
        assert server[k] == pytest.approx(_gauss_rdp_eps(s / 2.0, 4))
    assert server[0] > server[1] > server[2]
    agg = math.sqrt(sum((w * s) ** 2 for w, s in zip(weights, sigmas, strict=True)))
    public = ledger.client_epsilons("public")
    for k, w in enumerate(weights):
        assert public[k] == pytest.approx(_gauss_rdp_eps(agg / (w * 2.0), 4))


def test_two_point_receipts() -> None:
    ledger = _ledger(AllClients(), n=2, relation="replace_one")
    for t in range(3):
        ledger.record_round(t, [Release.two_point("server", 0.5, 4, [0, 1])],
                            sampling={"kind": "all"}, participants=[0, 1])
    cert = ledger.certify("server")
    assert cert.epsilon_pure == pytest.approx(3 * 4 * 0.5)
    assert cert.epsilon <= 6.0


# ---------------------------------------------------------------- target epsilon


def test_target_epsilon_stops_before_the_round_that_would_exceed() -> None:
    target, z = 3.0, 3.0
    ledger = _ledger(AllClients(), n=5)
    rounds = 0
    for t in range(1000):
        rel = federated_round_releases(range(5), z, 1.0, [1.0] * 5)
        if ledger.would_exceed(rel, target, participants=range(5)):
            break
        ledger.record_round(t, rel, sampling={"kind": "all"}, participants=range(5))
        rounds += 1
    assert ledger.certify(method="rdp").epsilon <= target
    assert _gauss_rdp_eps(z, rounds) <= target < _gauss_rdp_eps(z, rounds + 1)
    assert ledger.rounds_recorded == rounds


def test_would_exceed_best_uses_the_tighter_bound() -> None:
    ledger = _ledger(AllClients(), n=1)
    rel = federated_round_releases([0], 1.0, 1.0, [1.0])
    # one Gaussian at z = 1: RDP ~4.73 > 4.5 > exact 4.38
    assert ledger.would_exceed(rel, 4.5, participants=[0]) is True
    assert ledger.would_exceed(rel, 4.5, participants=[0], method="best") is False
    assert ledger.rounds_recorded == 0


def test_would_exceed_per_observer_compares_that_observer_only() -> None:
    """A server release at z = 1 and a public one at z = 3: a target between their RDP ε
    (dp-accounting directly) is exceeded by the worst observer and the server, not the public."""
    server_eps, public_eps = _gauss_rdp_eps(1.0, 1), _gauss_rdp_eps(3.0, 1)
    target = (server_eps + public_eps) / 2
    assert public_eps < target < server_eps
    ledger = _ledger(AllClients(), n=1)
    rel = [Release.gaussian("server", 1.0, 1.0, [0]), Release.gaussian("public", 3.0, 1.0, [0])]
    assert ledger.would_exceed(rel, target, participants=[0]) is True
    assert ledger.would_exceed(rel, target, participants=[0], observer="server") is True
    assert ledger.would_exceed(rel, target, participants=[0], observer="public") is False
    assert ledger.would_exceed(rel, public_eps * 0.99, participants=[0], observer="public") is True
    with pytest.raises(ConfigError):
        ledger.would_exceed(rel, target, participants=[0], observer="eavesdropper")  # type: ignore[arg-type]


# ---------------------------------------------------------------- persistence and cost


def test_to_dict_from_dict_round_trip_continues_identically() -> None:
    sampler = FixedSizeSampler(3)
    gen = torch.Generator().manual_seed(0)
    ledger = PrivacyLedger(num_clients=8, sampler=sampler, delta=1e-5, relation="replace_one",
                           privacy_unit="client", pld_every=2, pld_discretization=COARSE)
    plans = []
    for t in range(6):
        ids = sampler.sample(8, gen).tolist()
        plans.append((t, federated_round_releases(ids, 2.0 + 0.1 * t, 1.0, [1 / 3] * 3, amplifiable=True), ids))
    for t, rel, ids in plans[:4]:
        ledger.record_round(t, rel, sampling=sampler.describe(), participants=ids,
                            claimed_epsilon={i: 1.0 + t for i in ids})
    restored = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict(), allow_nan=False)), sampler=sampler)
    assert restored.history == ledger.history
    assert restored.claimed_epsilon == ledger.claimed_epsilon
    for t, rel, ids in plans[4:]:
        ledger.record_round(t, rel, sampling=sampler.describe(), participants=ids)
        restored.record_round(t, rel, sampling=sampler.describe(), participants=ids)
    for obs in ("server", "public"):
        a, b = ledger.certify(obs), restored.certify(obs)
        assert a.epsilon == pytest.approx(b.epsilon, rel=1e-12)
        assert a.method == b.method
    assert ledger.client_epsilons("server") == pytest.approx(restored.client_epsilons("server"))


def test_rdp_certification_after_every_round_of_a_long_run() -> None:
    """1000 rounds, 20 clients, varying noise (Lei's decay): certify after every round; the last
    certificate is the server's, and equals dp-accounting's RDP composition of the 1000 per-client
    Gaussians. (Its speed is measured by ``./dev bench ledger_certify``, not asserted here.)"""
    ledger = _ledger(AllClients(), n=20, pld_every=0)
    zs = [40.0 - 0.01 * (t % 50) for t in range(1000)]
    epsilons = []
    for t, z in enumerate(zs):
        rel = federated_round_releases(range(20), z, 1.0, [0.05] * 20)
        ledger.record_round(t, rel, sampling={"kind": "all"}, participants=range(20))
        cert = ledger.certify(method="rdp")
        epsilons.append(cert.epsilon)
    assert math.isfinite(cert.epsilon) and cert.observer == "server"
    assert epsilons == sorted(epsilons)  # composition never lowers the certificate
    direct = rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    for z in zs:
        direct.compose(dpa.GaussianDpEvent(z))
    assert cert.epsilon == pytest.approx(direct.get_epsilon(1e-5), rel=1e-9)


def test_ledger_validates_its_configuration() -> None:
    with pytest.raises(ConfigError, match="delta"):
        _ledger(AllClients(), delta=0.0)
    with pytest.raises(ConfigError, match=r"\(30\).*\(10\)"):
        _ledger(FixedSizeSampler(30), n=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _ledger(AllClients()).certify()  # an empty ledger certifies 0 without warnings


def test_decaying_noise_under_poisson_groups_pld_conservatively(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lei-style decay with Poisson sampling: one distinct sampled release per round. Above a
    threshold of distinct releases (64; 8 here to keep the test light) the ledger rounds the
    multipliers down to a 0.5% grid for PLD — never below the exact composition."""
    from dp_accounting.pld import pld_privacy_accountant as pld

    from dpfl.privacy.accounting import composition as ledger_module

    monkeypatch.setattr(ledger_module, "PLD_MAX_DISTINCT_SAMPLED", 8)
    q, rounds = 0.05, 20
    zs = [1.3 - 0.003 * t for t in range(rounds)]
    ledger = _ledger(PoissonSampler(q), n=40, pld_discretization=COARSE)
    for t, z in enumerate(zs):
        ledger.record_round(t, [Release.gaussian("public", z, 1.0, None, amplifiable=True)],
                            sampling={"kind": "poisson", "sample_rate": q}, participants=[])
    cert = ledger.certify("public")
    direct = pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=COARSE)
    for z in zs:
        direct.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)))
    exact = direct.get_epsilon(1e-5)
    assert exact <= cert.epsilon_pld <= exact * 1.03
    assert any("grid" in n for n in cert.notes)


def test_renyi_filter_admits_rounds_only_within_the_budget_at_every_order() -> None:
    """Budget: two rounds of z = 1 for clients 0–3. After one round at z = 1, a second at z = 1
    fits exactly; one at z = 0.9 exceeds at every order; one at z = 0.5 for client 0 alone also
    exceeds (per client)."""
    budget, run = _ledger(AllClients(), n=4), _ledger(AllClients(), n=4)
    for t in range(2):
        budget.record_round(t, federated_round_releases(range(4), 1.0, 1.0, [0.25] * 4), sampling=AllClients(),
                            participants=range(4))
    run.record_round(0, federated_round_releases(range(4), 1.0, 1.0, [0.25] * 4), sampling=AllClients(),
                     participants=range(4))
    assert run.within_budget(budget, federated_round_releases(range(4), 1.0, 1.0, [0.25] * 4), participants=range(4))
    assert not run.within_budget(budget, federated_round_releases(range(4), 0.9, 1.0, [0.25] * 4),
                                 participants=range(4))
    assert not run.within_budget(budget, [Release.gaussian("server", 0.5, 1.0, [0])], participants=[0])
    assert run.rounds_recorded == 1  # nothing recorded by the check


def test_rdp_orders_start_near_one_so_huge_epsilons_are_tight() -> None:
    """z = 0.05 composed 100 times at δ = 1e-5: the exact ε is 20,851.99; dp_accounting's default
    orders (from 1.1) give 22,112 (6% loose); with orders from 1.01 the RDP ε is within 1%.

    100 Gaussians of multiplier z compose to one Gaussian of multiplier z / sqrt(100), whose ε
    dp_accounting computes exactly (Balle & Wang's analytic Gaussian), in milliseconds; a PLD of
    the 100-fold composition gives the same figure (20,853, pessimistic by its grid) in 40 s."""
    from dp_accounting import gaussian_mechanism

    ledger = _ledger(AllClients(), n=1)
    for t in range(100):
        ledger.record_round(t, [Release.gaussian("server", 0.05, 1.0, [0])], sampling=AllClients(), participants=[0])
    exact = gaussian_mechanism.get_epsilon_gaussian(0.05 / math.sqrt(100), 1e-5)
    assert exact == pytest.approx(20_851.99, abs=0.01)
    got = ledger.certify("server", method="rdp").epsilon
    assert exact <= got <= exact * 1.01
    assert _gauss_rdp_eps(0.05, 100) > exact * 1.05  # the default orders alone miss the 1%


def test_renyi_filter_check_with_more_new_clients_than_preallocated_rows() -> None:
    """A round naming 40 clients none of which has receipts yet (the row table grows)."""
    n = 40
    budget, run = _ledger(AllClients(), n=n), _ledger(AllClients(), n=n)
    rel = [Release.gaussian("server", 1.0, 1.0, range(n))]
    budget.record_round(0, rel, sampling=AllClients(), participants=range(n))
    assert run.within_budget(budget, rel, participants=range(n))
    assert not run.within_budget(budget, [Release.gaussian("server", 0.5, 1.0, range(n))], participants=range(n))
