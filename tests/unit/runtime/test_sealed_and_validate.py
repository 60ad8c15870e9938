"""Sealed reports for the shuffler, and the server's checks on uploads."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("cryptography")

from dpfl.runtime.sealed import ShufflerKey, open_and_mix, seal, sealed_length  # noqa: E402
from dpfl.runtime.validate import check_upload  # noqa: E402


def _reports(k: int = 5, p: int = 64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k, p, generator=g)


def test_only_the_shuffler_can_open_a_report_and_it_hides_the_values() -> None:
    key, other = ShufflerKey.generate(), ShufflerKey.generate()
    x = _reports(1)[0]
    blob = seal(x, key.public, round_idx=3)
    assert len(blob) == sealed_length(64)
    assert x.numpy().astype("<f4").tobytes()[:16] not in blob  # no plaintext run of 4 values
    mixed, rejected = open_and_mix([blob], key, 3, 64)
    assert rejected == [] and mixed is not None
    assert torch.equal(mixed.support[:, 0], x)
    assert open_and_mix([blob], other, 3, 64) == (None, [0])        # wrong key
    assert open_and_mix([blob], key, 4, 64) == (None, [0])          # replayed into another round
    tampered = bytearray(blob)
    tampered[50] ^= 1
    assert open_and_mix([bytes(tampered)], key, 3, 64) == (None, [0])
    assert open_and_mix([blob[:-1]], key, 3, 64) == (None, [0])     # wrong length


def test_the_shuffler_output_carries_no_client_identity_or_order() -> None:
    key = ShufflerKey.generate()
    x = _reports(6)
    blobs = [seal(row, key.public, 0) for row in x]
    mixed, _ = open_and_mix(blobs, key, 0, 64)
    # any assignment of reports to clients and any arrival order: bit-identical output
    for perm in (torch.randperm(6, generator=torch.Generator().manual_seed(s)) for s in range(5)):
        again, _ = open_and_mix([seal(x[i], key.public, 0) for i in perm.tolist()], key, 0, 64)
        assert torch.equal(again.support, mixed.support) and torch.equal(again.counts, mixed.counts)
    # per id, the multiset of the reported values and nothing else
    assert torch.equal(mixed.support, torch.sort(x.t(), dim=1).values)


def test_the_shuffler_drops_non_finite_reports_by_position() -> None:
    key = ShufflerKey.generate()
    x = _reports(3)
    x[1, 7] = float("nan")
    mixed, rejected = open_and_mix([seal(r, key.public, 0) for r in x], key, 0, 64)
    assert rejected == [1] and mixed.support.shape == (64, 2)


@pytest.mark.parametrize(
    ("vector", "samples", "declared", "reason"),
    [
        (torch.zeros(9), 10, {"noise_std": 0.5}, "vector of shape (9,)"),
        (torch.zeros(10, dtype=torch.int64), 10, {"noise_std": 0.5}, "dtype torch.int64"),
        (torch.tensor([0.0] * 9 + [float("inf")]), 10, {"noise_std": 0.5}, "1 non-finite entries"),
        (torch.zeros(10), 11, {"noise_std": 0.5}, "declares 11 samples"),
        (torch.zeros(10), 10, {"noise_std": 0.25}, "declares noise_std = 0.25, the plan is 0.5"),
        (torch.zeros(10), 10, {}, "does not declare `noise_std`"),
        (torch.zeros(10), 10, {"noise_std": 0.5, "other": float("nan")}, "non-finite other"),
    ],
)
def test_bad_uploads_are_rejected_with_the_client_and_the_reason(vector, samples, declared, reason) -> None:
    bad = check_upload(4, vector, samples, declared, num_params=10, expected_samples=10, plan={"noise_std": 0.5})
    assert bad is not None and bad.client == 4 and reason in bad.reason
    assert "client 4" in bad.message(0)


def test_a_good_upload_passes() -> None:
    assert check_upload(0, torch.zeros(10), 10, {"noise_std": 0.5 * (1 + 1e-12)}, num_params=10, expected_samples=10,
                        plan={"noise_std": 0.5}) is None


def test_norm_check_rejects_a_scaled_upload_and_passes_clipped_noised_ones() -> None:
    """A vector clipped to C = 1 plus N(0, σ²I), σ = 0.05, P = 10_000: 200 seeded draws all pass
    (a false rejection has probability ≤ exp(−72) each); the same vector ×10⁶ is rejected."""
    from dpfl.runtime.validate import upload_norm_limit

    p, clip, std = 10_000, 1.0, 0.05
    limit = upload_norm_limit(clip, std, p)
    assert limit == pytest.approx(1.0 + 0.05 * (100 + 12))
    g = torch.Generator().manual_seed(7)
    for _ in range(200):
        x = torch.randn(p, generator=g)
        x = x / x.norm() * clip + std * torch.randn(p, generator=g)
        assert check_upload(0, x, 10, {}, num_params=p, expected_samples=10, plan={}, norm_limit=limit) is None
    bad = check_upload(3, x * 1e6, 10, {}, num_params=p, expected_samples=10, plan={}, norm_limit=limit)
    assert bad is not None and "L2 norm" in bad.reason and "client 3" in bad.message(0)
    # no limit declared (unclipped or two-point uploads): no norm check
    assert check_upload(3, x * 1e6, 10, {}, num_params=p, expected_samples=10, plan={}) is None
