"""The worst client's tightest certificate is found without pricing every history: it must equal
the exhaustive maximum (ε, method and notes) on random ledgers."""

from __future__ import annotations

import random

from dpfl.privacy.accounting.ledger import PrivacyLedger
from dpfl.privacy.releases import Release
from dpfl.sampling import PoissonSampler


def test_pruned_search_equals_the_exhaustive_maximum() -> None:
    rng = random.Random(0)
    for _ in range(25):
        n = rng.randint(3, 30)
        led = PrivacyLedger(num_clients=n, sampler=PoissonSampler(0.3), delta=1e-5, relation="add_remove",
                            privacy_unit="client")
        for t in range(rng.randint(1, 6)):
            parts = sorted(rng.sample(range(n), rng.randint(1, n)))
            rel = [Release.gaussian("server", rng.uniform(0.3, 3.0), 1.0, [c]) for c in parts]
            led.record_round(t, rel, sampling=led.sampling, participants=parts)
        st = led._state["server"]
        candidates = [led._certificate("server", c, "best") for c in st.ids]
        exhaustive = max(candidates, key=lambda c: c.epsilon)
        pruned = led.certify("server", None, "best")
        assert pruned.epsilon == exhaustive.epsilon
        assert (pruned.method, pruned.notes) == (exhaustive.method, exhaustive.notes)
