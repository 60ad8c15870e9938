"""The lattice releases the algorithms run under ``privacy.gaussian_noise: lattice``: their moments,
their certificates, and the low-bit distinguisher against them.

* **Moments** (10^6 draws, fixed seeds): DP-FedAvg's conditional-rounding release
  (:func:`dpfl.algorithms.dp_fedavg.lattice_calibration`) and the nearest-rounding release of UDP's
  and NbAFL's uploads (:func:`dpfl.privacy.mechanisms.lattice.nearest_lattice`), read in the input's
  units (integer/γ). Predicted: DP-FedAvg's mean is x (randomized rounding is unbiased; the
  conditioning on the norm rejects nothing at these norms) with variance (μ + f(1−f))/γ², f the
  fractional part of γx; the nearest release's mean is round(γx)/γ with variance μ/γ². Each sample
  mean is within 5 standard errors (√(var/n)) and each sample variance within 5 standard errors
  (var·√(2/n), the Skellam's excess kurtosis 1/μ being negligible) — and the noise std is at least
  the Gaussian's σ (the lattice never adds less noise), by the rounding inflation.
* **Certificates** against dp-accounting called directly on the dominating pair: the Gaussian of
  multiplier 1/(η̄·Δ2), η̄ the certified unit-shift GDP parameter of Sk(μ) (``docs/proofs/
  skellam-gdp.md``), Poisson-sampled for DP-FedAvg's broadcast (add/remove, its PLD), unsampled
  for a UDP upload (replace-one: the analytic Gaussian of the composition, and its PLD) — and
  within 1% of the floating-point Gaussian's at the same multiplier.
* **Low-bit distinguisher** (``test_low_bit_attack.py``'s machinery): against the wired UDP/NbAFL
  release drawn from ChaCha20, no test — the distinguisher included — gains more than the ledger
  certifies.
"""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.pld import pld_privacy_accountant
from test_low_bit_attack import CLIP, DELTA, KEY, SIGMA, X0, X1, empirical_epsilon, naive_release

from dpfl.algorithms.dp_fedavg import lattice_calibration
from dpfl.privacy import PrivacyLedger
from dpfl.privacy.mechanisms.lattice import PLD_MAX_VARIANCE, nearest_lattice
from dpfl.privacy.releases import Release, SkellamRelease
from dpfl.privacy.releases.skellam_gdp import MAX_VARIANCE, certified_unit_eta
from dpfl.rng import CsprngGenerator

DRAWS = 1_000_000
SE = 5.0  # standard errors allowed


def _check_moments(values: np.ndarray, mean: float, var: float) -> None:
    n = values.size
    assert abs(values.mean() - mean) <= SE * math.sqrt(var / n), (values.mean(), mean)
    assert abs(values.var() - var) <= SE * var * math.sqrt(2.0 / n), (values.var(), var)


def test_the_pld_range_the_granularity_respects_is_the_certified_one() -> None:
    assert PLD_MAX_VARIANCE == MAX_VARIANCE


def test_dp_fedavgs_lattice_release_has_the_predicted_mean_and_variance() -> None:
    dim, clip, z = DRAWS, 1.0, 1.0
    cal = lattice_calibration(dim=dim, clip_norm=clip, noise_multiplier=z, local=False)
    mech = cal.mechanism(dim, clip, z)
    assert (mech.scale, mech.variance) == (cal.scale, cal.variance) == (2.0**16, (z * cal.l2_sensitivity) ** 2)
    c = 0.7 * clip / math.sqrt(dim)  # every coordinate equal, the row's norm 0.7·S
    x = torch.full((1, dim), c, dtype=torch.float64)
    gen = torch.Generator().manual_seed(55)
    released = mech.release(x, [gen], gen)
    values = mech.values(released)[0].numpy()
    frac = c * mech.scale - math.floor(c * mech.scale)
    var = (mech.variance + frac * (1 - frac)) / mech.scale**2
    _check_moments(values, c, var)
    # never less noise than the Gaussian's (S·z), by the rounding inflation Δ2/(γS)
    std = math.sqrt(mech.variance) / mech.scale
    assert std >= clip * z and std / (clip * z) == pytest.approx(cal.rounding_inflation, rel=1e-12)
    assert cal.rounding_inflation < 1.0 + 1e-4  # d = 10^6: d/(8(γS)²) ≈ 3·10^-5


def test_the_nearest_lattice_release_has_the_predicted_mean_and_variance() -> None:
    dim, sensitivity, noise_std = DRAWS, 2e-3, 5e-3  # a UDP upload: Δℓ = 2ηC/|D|, σ from Thm 1
    mech = nearest_lattice(dim, sensitivity, noise_std)
    assert mech is not None and mech.scale * sensitivity == 2.0**17  # 100·√d = 10^5 > 2^16
    x = torch.full((1, dim), 0.3141592653589793, dtype=torch.float64)
    released = mech.release(x, [torch.Generator().manual_seed(56)])
    values = mech.values(released)[0].numpy()
    mean = round(0.3141592653589793 * mech.scale) / mech.scale
    _check_moments(values, mean, mech.variance / mech.scale**2)
    assert mech.noise_std >= noise_std and mech.noise_std / noise_std == pytest.approx(mech.rounding_inflation)
    assert mech.rounding_inflation <= 1.01  # √d/(γΔ) = 1000/131072


def _dominating_pld(mu: float, d2: float, q: float | None, rounds: int,
                    relation: dpa.NeighboringRelation) -> float:
    """dp-accounting's PLD (dpfl's grid 1e-3) of ``rounds`` Gaussian pairs of multiplier 1/(η̄·Δ2),
    Poisson-sampled at ``q`` (None: unsampled). Under REPLACE_ONE dp-accounting reads a Gaussian
    multiplier against a norm bound (the shift is 2/multiplier), so the pair whose shift is Δ2
    itself is the multiplier 2/(η̄·Δ2) there."""
    cert = certified_unit_eta(mu)
    assert cert is not None
    acc = pld_privacy_accountant.PLDAccountant(relation, value_discretization_interval=1e-3)
    units = 2.0 if relation == dpa.NeighboringRelation.REPLACE_ONE else 1.0
    gauss = dpa.GaussianDpEvent(units / (cert.eta * d2))
    acc.compose(gauss if q is None else dpa.PoissonSampledDpEvent(q, gauss), rounds)
    return float(acc.get_epsilon(DELTA))


def test_dp_fedavgs_broadcast_certificate_is_the_dominating_gaussians_pld() -> None:
    n, q, rounds, z, clip, dim = 10, 0.5, 20, 1.0, 0.5, 7850
    cal = lattice_calibration(dim=dim, clip_norm=clip, noise_multiplier=z, local=True)
    release = SkellamRelease("public", cal.variance, cal.l2_sensitivity, cal.l1_sensitivity, None,
                             amplifiable=True, lattice=True)
    ledger = PrivacyLedger(num_clients=n, sampler={"kind": "poisson", "sample_rate": q}, delta=DELTA)
    gauss = PrivacyLedger(num_clients=n, sampler={"kind": "poisson", "sample_rate": q}, delta=DELTA)
    for _ in range(rounds):
        ledger.record([release])
        gauss.record([Release.gaussian("public", clip * z, clip, None, amplifiable=True)])
    cert = ledger.certify("public")
    want = _dominating_pld(cal.variance, cal.l2_sensitivity, q, rounds, dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert cert.method == "pld" and cert.epsilon == pytest.approx(want, rel=1e-9)
    # the floating-point Gaussian at the same multiplier: within 1% (measured: +0.007%)
    assert cert.epsilon == pytest.approx(gauss.certify("public").epsilon, rel=1e-2)


def test_a_udp_uploads_certificate_is_the_dominating_gaussians_pld_under_replace_one() -> None:
    rounds, dim, sensitivity, noise_std = 30, 7850, 1e-3, 4e-3
    mech = nearest_lattice(dim, sensitivity, noise_std)
    assert mech is not None
    ledger = PrivacyLedger(num_clients=2, sampler={"kind": "all"}, delta=DELTA, relation="replace_one",
                           privacy_unit="record")
    gauss = PrivacyLedger(num_clients=2, sampler={"kind": "all"}, delta=DELTA, relation="replace_one",
                          privacy_unit="record")
    for _ in range(rounds):
        ledger.record([mech.release_record("server", (0, 1))])
        gauss.record([Release.gaussian("server", noise_std, sensitivity, [0, 1])])
    cert = ledger.certify("server")
    # unsampled Gaussians compose exactly: T pairs of multiplier 1/(η̄Δ2) are one of multiplier
    # 1/(η̄Δ2)/√T, whose ε is the analytic Gaussian's (Balle & Wang 2018) — dp-accounting's own
    eta = certified_unit_eta(mech.variance)
    assert eta is not None
    want = dpa.get_epsilon_gaussian(1.0 / (eta.eta * mech.l2_sensitivity) / math.sqrt(rounds), DELTA)
    assert cert.epsilon == pytest.approx(want, rel=1e-9)
    # and dp-accounting's PLD of the same pairs (its grid pessimistic by < 1e-6)
    grid = _dominating_pld(mech.variance, mech.l2_sensitivity, None, rounds, dpa.NeighboringRelation.REPLACE_ONE)
    assert want <= grid <= want * (1 + 1e-6)
    assert cert.epsilon == pytest.approx(gauss.certify("server").epsilon, rel=1e-2)
    # the relation is stated as the lattice release's, not a secure sum's
    assert any(note.startswith("relation: lattice release") for note in cert.notes), cert.notes


def test_a_skellam_secure_sum_is_still_refused_under_replace_one() -> None:
    from dpfl.errors import PrivacyPreconditionError

    ledger = PrivacyLedger(num_clients=2, sampler={"kind": "all"}, delta=DELTA, relation="replace_one")
    with pytest.raises(PrivacyPreconditionError, match="replace_one"):
        ledger.record([SkellamRelease("public", 1e6, 100.0, 100.0, None, amplifiable=True)])


def test_the_wired_udp_release_under_chacha_gives_no_advantage_beyond_its_certificate() -> None:
    # the release UDP and NbAFL upload: nearest rounding of γx, Sk(μ), sent as integer/γ
    mech = nearest_lattice(1, CLIP, SIGMA * CLIP)
    assert mech is not None
    ledger = PrivacyLedger(num_clients=1, sampler={"kind": "all"}, delta=DELTA, relation="replace_one")
    ledger.record([mech.release_record("server", (0,))])
    certified = ledger.certify("server").epsilon
    g = CsprngGenerator(KEY)
    n = 100_000
    out0, out1 = (mech.values(mech.release(torch.full((n, 1), x, dtype=torch.float64), [g] * n))[:, 0].numpy()
                  for x in (X0, X1))
    estimate, name = empirical_epsilon(out0, out1, mech.noise_std, seed=55)
    assert estimate < certified, (estimate, name, certified)
    # the same estimator has power against the naive floating-point release (test_low_bit_attack)
    rng = np.random.default_rng(2012)
    naive0 = naive_release(X0, rng.integers(0, 2**32, n).astype(np.float64))
    naive1 = naive_release(X1, rng.integers(0, 2**32, n).astype(np.float64))
    assert empirical_epsilon(naive0, naive1, SIGMA * CLIP, seed=55)[0] > certified


def test_a_lattice_uploads_norm_limit_is_in_the_uploaded_units() -> None:
    # NbAFL's uplink: parameters clipped to C = 1 (Δ = 2C), sent as integer/γ; the server's check
    # against forged uploads reads the limit in those units
    dim = 1000
    mech = nearest_lattice(dim, 2.0, 1.5)
    assert mech is not None
    limit = mech.release_record("server", (0,)).upload_norm_limit(dim)
    assert limit is not None
    gen = torch.Generator().manual_seed(57)
    x = torch.randn(200, dim, generator=gen, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    values = mech.values(mech.release(x, [gen] * 200))
    assert float(values.norm(dim=1).max()) <= limit < 1e6 * 1.0  # honest uploads pass, a ×10⁶ one does not
    # a secure sum's server sees residues: no limit
    assert SkellamRelease("server", 1e6, 100.0, 100.0, (0,)).upload_norm_limit(dim) is None
