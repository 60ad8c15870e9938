"""What each certificate is conditional on: "ex-ante" (amplified over the secret schedule, or no
client sampling) or "given-cohorts" (charged at the cohorts drawn), and the amplification note
only where something was amplified."""

from __future__ import annotations

from dpfl.privacy.accounting.certify import Certificate
from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release, federated_round_releases

AMPLIFIED_NOTE = "broadcast releases amplified by the secret client sample"


def _ledger(sampling: dict, n: int = 10) -> PrivacyLedger:
    return PrivacyLedger(num_clients=n, sampler=sampling, delta=1e-5, relation="add_remove",
                         privacy_unit="client", pld_every=0)


def test_poisson_amplified_broadcast_is_ex_ante_and_the_server_is_given_the_cohorts() -> None:
    sampling = {"kind": "poisson", "sample_rate": 0.3}
    led = _ledger(sampling)
    for t, ids in enumerate([[0, 1, 2], [3], []]):
        rels = federated_round_releases(ids, 2.0, 1.0, [1 / 3] * len(ids), amplifiable=True) if ids else []
        rels = [r for r in rels if r.observer == "server"]
        rels.append(Release.gaussian("public", 2.0 / 3, 1.0 / 3, None, amplifiable=True))
        led.record_round(t, rels, sampling=sampling, participants=ids)
    public, server = led.certify("public", method="rdp"), led.certify("server", method="rdp")
    assert public.basis == "ex-ante" and AMPLIFIED_NOTE in public.notes
    assert server.basis == "given-cohorts" and AMPLIFIED_NOTE not in server.notes
    # the JSON form keeps it
    assert Certificate.from_dict(server.to_dict()).basis == "given-cohorts"
    assert "given the cohorts drawn" in server.basis_text


def test_per_participant_broadcast_under_sampling_is_given_the_cohorts_and_not_amplified() -> None:
    sampling = {"kind": "fixed_size", "num_sampled": 2}
    led = _ledger(sampling, n=4)
    # unequal weights: the public is charged per participant (never amplified)
    rels = federated_round_releases([0, 1], [1.0, 1.0], 1.0, [0.2, 0.8], per_client_public=True)
    led.record_round(0, rels, sampling=sampling, participants=[0, 1])
    public = led.certify("public", method="best")
    assert public.basis == "given-cohorts"
    assert AMPLIFIED_NOTE not in public.notes
    # a client never drawn has nothing charged: its 0 holds only for the cohorts drawn (another
    # draw would have charged it), so it is conditional too
    never = led.certify("public", client_id=3, method="rdp")
    assert never.epsilon == 0.0 and never.basis == "given-cohorts"


def test_an_observer_charged_nothing_because_every_cohort_was_empty_is_given_the_cohorts() -> None:
    # `dpfl account default --set partition.num_clients=2 --set rounds=1 --set privacy.participation=visible`
    # drew an empty cohort: the server saw no upload (0), which another draw would not give
    sampling = {"kind": "poisson", "sample_rate": 0.2}
    led = _ledger(sampling, n=2)
    led.record_round(0, [Release.gaussian("public", 2.0, 1.0, None, amplifiable=True)], sampling=sampling,
                     participants=[])
    server, public = led.certify("server", method="rdp"), led.certify("public", method="rdp")
    assert server.epsilon == 0.0 and server.basis == "given-cohorts"
    assert public.epsilon > 0 and public.basis == "ex-ante"


def test_without_sampling_a_round_emptied_by_dropouts_leaves_a_zero_given_the_cohorts() -> None:
    sampling = {"kind": "all"}
    led = _ledger(sampling, n=3)
    led.record_round(0, [], sampling=sampling, participants=[])  # nobody arrived
    server = led.certify("server", method="rdp")
    assert server.epsilon == 0.0 and server.basis == "given-cohorts"


def test_without_client_sampling_every_figure_is_ex_ante() -> None:
    sampling = {"kind": "all"}
    led = _ledger(sampling, n=3)
    rels = federated_round_releases([0, 1, 2], [1.0, 2.0, 1.0], 1.0, [0.2, 0.3, 0.5], per_client_public=True)
    led.record_round(0, rels, sampling=sampling, participants=[0, 1, 2])
    for obs in ("server", "public"):
        cert = led.certify(obs, method="rdp")  # type: ignore[arg-type]
        assert cert.basis == "ex-ante"
        assert AMPLIFIED_NOTE not in cert.notes


def test_old_records_without_a_basis_say_so() -> None:
    data = _ledger({"kind": "all"}).certify("public", method="rdp").to_dict()
    del data["basis"]
    assert Certificate.from_dict(data).basis_text == "basis not recorded"


def test_fixed_size_sample_under_add_remove_is_not_amplified_and_says_nothing_of_it() -> None:
    # dp-accounting cannot price sampling without replacement under add/remove: the broadcast is
    # certified without the amplification, so the note must not claim it (the figure is ex ante:
    # every client is charged the broadcast every round, whatever the sample)
    sampling = {"kind": "fixed_size", "num_sampled": 2}
    led = _ledger(sampling, n=4)
    for t in range(3):
        led.record_round(t, [Release.gaussian("public", 1.0, 1.0, None, amplifiable=True)],
                         sampling=sampling, participants=[0, 1])
    public = led.certify("public", method="rdp")
    assert AMPLIFIED_NOTE not in public.notes
    assert public.basis == "ex-ante"


def test_all_clients_with_dropouts_is_given_the_arrivals() -> None:
    sampling = {"kind": "all"}
    led = _ledger(sampling, n=3)
    rels = federated_round_releases([0, 2], 1.0, 1.0, [0.5, 0.5], per_client_public=True)
    led.record_round(0, rels, sampling=sampling, participants=[0, 2])  # client 1's upload never arrived
    assert led.certify("server", method="rdp").basis == "given-cohorts"
    # and a replayed ledger says the same
    assert PrivacyLedger.from_dict(led.to_dict()).certify("server", method="rdp").basis == "given-cohorts"


def test_periodic_certificates_under_a_filter_are_spent_not_certified() -> None:
    from dpfl.rounds.gate import entry_metrics

    entry = {"certified_rdp": {"server": 1.0, "public": 0.5}, "certified": {"server": {"epsilon": 1.0}},
             "spent": True}
    metrics: dict = {}
    entry_metrics(metrics, entry, None)
    assert "certified" not in metrics and "epsilon_certified_rdp" not in metrics
    assert metrics["spent_certificates"] == entry["certified"] and metrics["epsilon_spent"] == 1.0
