"""Split & shuffle: the server side sees per-id multisets only — no client ids, no order."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from dpfl.errors import ConfigError
from dpfl.server.shuffle import ClientReports, IdMultisets, Shuffler, mean_by_id, split


def _two_point_cohort(k: int, p: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low = -torch.rand(p, generator=g) - 0.1
    high = torch.rand(p, generator=g) + 0.1
    pick = torch.rand(k, p, generator=g) < 0.3
    return torch.where(pick, high, low), low, high


def test_server_input_type_carries_no_client_ids_or_order() -> None:
    # The only fields of the server-side input are the per-id support and multiplicities.
    assert {f.name for f in dataclasses.fields(IdMultisets)} == {"support", "counts"}
    # The server-side function takes exactly one argument, typed IdMultisets.
    params = list(inspect.signature(mean_by_id).parameters.values())
    assert len(params) == 1 and params[0].annotation in (IdMultisets, "IdMultisets")


def test_two_point_multisets_do_not_depend_on_who_sent_what() -> None:
    values, low, high = _two_point_cohort(k=7, p=50, seed=1)
    a = Shuffler.shuffle_two_point(values, low, high)
    # Permute the clients, and independently re-assign each id's reports among clients.
    g = torch.Generator().manual_seed(2)
    permuted = values[torch.randperm(7, generator=g)]
    scrambled = torch.stack([permuted[torch.randperm(7, generator=g), j] for j in range(50)], dim=1)
    b = Shuffler.shuffle_two_point(scrambled, low, high)
    assert torch.equal(a.support, b.support) and torch.equal(a.counts, b.counts)
    assert torch.equal(a.counts[:, 1], (values == high).sum(0))
    assert torch.equal(a.num_reports(), torch.full((50,), 7))
    assert torch.equal(mean_by_id(a), mean_by_id(b))


def test_tuple_shuffle_is_canonical_for_any_arrival_order_and_client_order() -> None:
    g = torch.Generator().manual_seed(3)
    stacked = torch.randn(5, 40, generator=g)
    reports = [split(row) for row in stacked]
    a = Shuffler.shuffle(reports, 40, torch.Generator().manual_seed(10))
    # Other client order, each client's tuples in another order, another shuffler seed.
    rev = []
    for r in reversed(reports):
        perm = torch.randperm(40, generator=g)
        rev.append(ClientReports(r.ids[perm], r.values[perm]))
    b = Shuffler.shuffle(rev, 40, torch.Generator().manual_seed(11))
    assert torch.equal(a.support, b.support) and torch.equal(a.counts, b.counts)
    c = Shuffler.shuffle_stacked(stacked)
    assert torch.equal(a.support, c.support) and torch.equal(a.counts, c.counts)
    torch.testing.assert_close(mean_by_id(a), stacked.mean(0), rtol=0, atol=1e-6)


def test_tuple_shuffle_with_unequal_report_counts_pads_with_zero_counts() -> None:
    r1 = ClientReports(torch.tensor([0, 1, 1]), torch.tensor([2.0, 5.0, 1.0]))
    r2 = ClientReports(torch.tensor([0]), torch.tensor([4.0]))
    ms = Shuffler.shuffle([r1, r2], 3, torch.Generator().manual_seed(0))
    assert ms.num_reports().tolist() == [2, 2, 0]
    assert ms.support[1].tolist() == [1.0, 5.0]
    with pytest.raises(ConfigError, match=r"ids \[2\] received no report"):
        mean_by_id(ms)
    ms2 = Shuffler.shuffle([r1, r2], 2, torch.Generator().manual_seed(0))
    assert mean_by_id(ms2).tolist() == [3.0, 3.0]


def test_server_refuses_client_ordered_input() -> None:
    stacked = torch.randn(3, 4)
    with pytest.raises(ConfigError, match="IdMultisets"):
        mean_by_id(stacked)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="IdMultisets"):
        mean_by_id(split(stacked[0]))  # type: ignore[arg-type]


def test_two_point_shuffle_rejects_values_outside_the_codebook() -> None:
    values, low, high = _two_point_cohort(k=4, p=6, seed=4)
    values[2, 3] = 0.0
    with pytest.raises(ConfigError, match=r"ids \[3\] received reports that are neither"):
        Shuffler.shuffle_two_point(values, low, high)
    with pytest.raises(ConfigError, match="must exceed"):
        Shuffler.shuffle_two_point(values, high, low)


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="equal length"):
        ClientReports(torch.arange(3), torch.zeros(2))
    with pytest.raises(ConfigError, match=r"\[0, 2\)"):
        Shuffler.shuffle([split(torch.zeros(3))], 2, torch.Generator())
    with pytest.raises(ConfigError, match="flat model"):
        split(torch.zeros(2, 2))
