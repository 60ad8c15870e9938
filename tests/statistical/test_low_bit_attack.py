"""The low-order-bit attack on floating-point Gaussian noise, and the lattice release that stops it.

Mironov 2012 ("On significance of the least significant bits for differential privacy") showed
that a floating-point implementation of a continuous mechanism leaks its input through the set
of values it can output: y = x + σ·Z with Z a float sample takes values in a sparse set that
depends on x, so one output often belongs to the set of one input and not of its neighbour's.

The sampler attacked here is the textbook one, not torch's: Z = Φ⁻¹(U) with U a 32-bit uniform,
(k + ½)/2^32 (the inverse-CDF construction whose float support Mironov's argument counts), and
y = x + σ·Z in float64. torch's CPU sampler draws Box–Muller pairs from two 53-bit uniforms; the
same support test would need, for every output, a search over pairs of such uniforms, which is not
practical as a test — this file says nothing about how far torch's own sampler is from ideal. The
distinguisher inverts the sampler: for a candidate input x it recomputes the (at most seven)
outputs nearest y that x could have produced and asks whether y is exactly one of them.

Then the same distinguisher, and every threshold test on the value, against
:class:`dpfl.privacy.mechanisms.lattice.LatticeGaussian` drawn from ChaCha20 under a fixed key:
from N releases per input, each test's true- and false-positive rates get Clopper–Pearson
intervals (Bonferroni over the tests, 95% jointly), and the empirical ε lower bound
max ln((TPR_low − δ)/FPR_high) must stay below the ε dpfl's ledger certifies for that release.
The same estimator on the naive release exceeds that certificate, so the comparison has power.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from scipy.special import ndtr, ndtri
from scipy.stats import beta as beta_dist

from dpfl.privacy import PrivacyLedger
from dpfl.privacy.mechanisms.lattice import LatticeGaussian
from dpfl.rng import CsprngGenerator

GRID = 2.0**32  # the textbook sampler's uniforms: (k + 1/2)/2^32, k a 32-bit integer
SIGMA = 1.0  # noise multiplier: std σ·S (naive), σ·Δ2/γ ≈ σ·S (lattice)
CLIP = 1.0  # S: the sensitivity of the neighbouring pair (x0 = 0 is the zero-out neighbour of x1)
X0, X1 = 0.0, 0.95  # neighbouring inputs; 0.95 is not dyadic
DELTA = 1e-5
CONFIDENCE = 0.95  # joint, over all the tests of one estimate
N = 100_000  # releases per input
KEY = bytes.fromhex("8b1e6f0d2c4a5e7f9a0b3c5d7e9f1a2b4c6d8e0f1a3b5c7d9e0f2a4b6c8d0e1f")


def naive_release(x: float | np.ndarray, k: np.ndarray) -> np.ndarray:
    """The textbook sampler: x + σ·Φ⁻¹((k + ½)/2^32) in float64."""
    return x + SIGMA * CLIP * ndtri((k + 0.5) / GRID)


def in_support(y: np.ndarray, x: float) -> np.ndarray:
    """Whether each y is exactly an output the naive sampler can produce from input x."""
    k0 = np.floor(ndtr((y - x) / (SIGMA * CLIP)) * GRID - 0.5)
    hit = np.zeros(y.shape, dtype=bool)
    for offset in range(-3, 4):
        k = np.clip(k0 + offset, 0.0, GRID - 1)
        hit |= naive_release(x, k) == y
    return hit


def distinguisher(y: np.ndarray, coins: np.ndarray) -> np.ndarray:
    """Guess 1 (x1) when y is in x1's support only, 0 when in x0's only, else the coin."""
    s0, s1 = in_support(y, X0), in_support(y, X1)
    return np.where(s1 & ~s0, 1, np.where(s0 & ~s1, 0, coins))


def _tests(out0: np.ndarray, out1: np.ndarray, coins0: np.ndarray, coins1: np.ndarray,
           scale: float) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(name, says-x1 under x1, says-x1 under x0) — and the complements, which say x0 — for the
    thresholds fixed in advance (in units of the noise std) and for the distinguisher."""
    grid = np.arange(-4.0, 5.01, 0.25) * scale
    for c in grid:
        yield f"y >= {c:.3g}", out1 >= c, out0 >= c
    d1, d0 = distinguisher(out1, coins1) == 1, distinguisher(out0, coins0) == 1
    yield "low-bit distinguisher", d1, d0


def empirical_epsilon(out0: np.ndarray, out1: np.ndarray, scale: float, seed: int) -> tuple[float, str]:
    """The largest ε lower bound over the tests (each test and its complement, both directions),
    with Clopper–Pearson bounds at CONFIDENCE jointly (Bonferroni over every bound used)."""
    rng = np.random.default_rng(seed)
    coins0, coins1 = rng.integers(0, 2, out0.size), rng.integers(0, 2, out1.size)
    tests = list(_tests(out0, out1, coins0, coins1, scale))
    # each test gives two directed tests (it and its complement), each using two one-sided bounds
    alpha = (1 - CONFIDENCE) / (4 * len(tests))
    best, best_name = 0.0, "none"
    for name, says1_under1, says1_under0 in tests:
        n1, n0 = says1_under1.size, says1_under0.size
        for label, tp, n_tp, fp, n_fp in (
                (name, int(says1_under1.sum()), n1, int(says1_under0.sum()), n0),
                (f"not ({name})", n0 - int(says1_under0.sum()), n0, n1 - int(says1_under1.sum()), n1)):
            tpr_low = beta_dist.ppf(alpha, tp, n_tp - tp + 1) if tp > 0 else 0.0
            fpr_high = beta_dist.ppf(1 - alpha, fp + 1, n_fp - fp) if fp < n_fp else 1.0
            if tpr_low > DELTA:
                eps = math.log((tpr_low - DELTA) / fpr_high)
                if eps > best:
                    best, best_name = eps, label
    return best, best_name


def _certificate(mech: LatticeGaussian) -> float:
    ledger = PrivacyLedger(num_clients=1, sampler={"kind": "all"}, delta=DELTA, pld_every=0)
    ledger.record([mech.release_record("server", (0,))])
    return ledger.certify("server").epsilon


def test_the_low_bit_distinguisher_tells_neighbours_apart_from_one_naive_release() -> None:
    rng = np.random.default_rng(2012)
    trials = 2000
    secret = rng.integers(0, 2, trials)
    k = rng.integers(0, 2**32, trials).astype(np.float64)
    y = naive_release(np.where(secret == 1, X1, X0), k)
    accuracy = float(np.mean(distinguisher(y, rng.integers(0, 2, trials)) == secret))
    assert accuracy >= 0.99, accuracy


def test_the_lattice_release_under_chacha_gives_no_advantage_beyond_its_certificate() -> None:
    mech = LatticeGaussian(dim=1, clip_norm=CLIP, noise_multiplier=SIGMA, scale=1024.0)
    certified = _certificate(mech)
    # the certificate prices Sk(μ) with μ = (σ·Δ2)² on an integer query of sensitivity Δ2
    assert mech.release_record().variance == mech.variance == (SIGMA * mech.l2_sensitivity) ** 2
    g = CsprngGenerator(KEY)
    outs = []
    for x in (X0, X1):
        ints = mech.release(torch.full((N, 1), x, dtype=torch.float64), [g] * N, g)
        outs.append(mech.values(ints)[:, 0].numpy())
    out0, out1 = outs
    std = math.sqrt(mech.variance) / mech.scale
    # the released noise has the priced variance (x0 = 0 rounds to 0 exactly): within 4 standard errors
    mu = mech.variance / mech.scale**2
    assert abs(float(out0.var()) - mu) < 4 * math.sqrt((2 * mu * mu + mu / mech.scale**2) / N)
    # the naive sampler's support never holds a lattice value here: the distinguisher only guesses
    assert not in_support(out0, X0).any() and not in_support(out1, X1).any()
    eps, which = empirical_epsilon(out0, out1, std, seed=1)
    assert eps < certified, (eps, which, certified)
    # the estimator has power: on the naive release it finds more than the certificate allows
    rng = np.random.default_rng(2013)
    naive0 = naive_release(X0, rng.integers(0, 2**32, N).astype(np.float64))
    naive1 = naive_release(X1, rng.integers(0, 2**32, N).astype(np.float64))
    eps_naive, which_naive = empirical_epsilon(naive0, naive1, SIGMA * CLIP, seed=2)
    assert which_naive.endswith("low-bit distinguisher") and eps_naive > certified, (eps_naive, certified)
