"""UDP's convergence bound as a calculator: 000 Theorem 2 (eq. 22).

    E{F(w^T)} − F(w*) <= A^T (F(w⁰) − F(w*))
                         + (1 − A^T) ( κ0·T·K/U² · Σ_i ln(1/δ_i)/ε_i²  +  κ1·U(U − K)/(K(U − 1)) )

with A = 1 − 2μη + μη²L, κ0 = L²Δℓ²/μ, κ1 = η²L²ε̄/(2μ) (000 eq. 22, repeated as eq. 59).
Inputs (the paper's Assumption 1): L (smoothness), μ (Polyak–Łojasiewicz constant), η (learning
rate, η <= 1/L), ε̄ (mean gradient divergence E{ε_i}, eq. 53), Δℓ (sensitivity, eq. 13: 2ηC/|D_i|),
U, K, the per-client (ε_i, δ_i), and the initial gap F(w⁰) − F(w*). The first term falls with T,
the noise term grows linearly in T (Theorem 1's σ² ∝ T): Theorem 3's interior optimum.

Reading notes:

* The bound needs 0 < A < 1; with η <= 1/L this holds whenever 2μη − μη²L < 1 (checked:
  :class:`dpfl.errors.ConfigError` otherwise). ``contraction`` gives A directly.
* For K = U the sampling term vanishes. Eq. 58 writes the noise term with q·t/U, eq. 59 with
  T·K/U²; they agree (q = K/U).

Estimating the constants from a run (:func:`estimate_constants`, from the stored per-round test
losses and the config of a UDP run — a low-noise or non-private run fits A best):

* gap = F(w⁰) − F(w*): the first recorded test loss minus the smallest one (an under-estimate);
* A: least-squares slope of log(loss_t − min loss) against t over the rounds before the minimum
  (eq. 57 without noise: gap_t ≈ A^t·gap);
* μ from A given L and η: μ = (1 − A)/(η(2 − ηL)) (inverting A = 1 − 2μη + μη²L);
* Δℓ, η, U, K, ε, δ: from the run's config (Δℓ = 2ηC/|D_i| with the smallest |D_i|).

Not estimated (inputs): L (curvature — the stored metrics hold none; ηL <= 1 is assumed by the
paper, so L = 1/η is the largest admissible value) and ε̄ (needs per-client gradients).

Pure calculators: this module imports only :mod:`dpfl.errors`, :mod:`dpfl.privacy.calibration`
and the standard library, never the store or a CLI; ``dpfl bound udp`` lives in
:mod:`dpfl.commands.bound_udp`.

References:
    000_3304bf6f36c753f8.txt, Assumption 1, Theorem 2 (eq. 22), Theorem 3, Appendix B (eq. 57–59).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpfl.errors import ConfigError
from dpfl.privacy.calibration import udp_sensitivity

__all__ = ["BoundCurve", "UdpConstants", "estimate_constants", "theorem2_bound", "theorem2_curve"]


@dataclass(frozen=True)
class UdpConstants:
    """The constants of 000 Theorem 2 (see the module docstring)."""

    smoothness: float  # L
    pl: float  # μ
    lr: float  # η
    divergence: float  # ε̄
    sensitivity: float  # Δℓ
    clients: int  # U
    sampled: int  # K
    gap: float  # F(w⁰) − F(w*)
    contraction: float | None = None  # A, overrides 1 − 2μη + μη²L

    def check(self) -> None:
        for name in ("smoothness", "pl", "lr", "sensitivity"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"`{name}` must be a finite number > 0. Found {v!r}.")
        for name in ("divergence", "gap"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"`{name}` must be a finite number >= 0. Found {v!r}.")
        if not (isinstance(self.clients, int) and self.clients >= 2):
            raise ConfigError(f"`clients` (U) must be an integer >= 2. Found {self.clients!r}.")
        if not (isinstance(self.sampled, int) and 1 <= self.sampled <= self.clients):
            raise ConfigError(f"`sampled` (K) must be an integer in [1, U = {self.clients}]. Found {self.sampled!r}.")
        a = self.a
        if not 0.0 < a < 1.0:
            raise ConfigError(
                f"the contraction A = 1 - 2*mu*eta + mu*eta^2*L must lie in (0, 1); found A = {a:.6g} "
                f"(mu = {self.pl:g}, eta = {self.lr:g}, L = {self.smoothness:g}). Theorem 2 assumes eta <= 1/L."
            )

    @property
    def a(self) -> float:
        if self.contraction is not None:
            return float(self.contraction)
        return 1.0 - 2.0 * self.pl * self.lr + self.pl * self.lr**2 * self.smoothness

    @property
    def kappa0(self) -> float:
        return self.smoothness**2 * self.sensitivity**2 / self.pl

    @property
    def kappa1(self) -> float:
        return self.lr**2 * self.smoothness**2 * self.divergence / (2.0 * self.pl)


def _privacy_sum(epsilons: Sequence[float], deltas: Sequence[float], clients: int) -> float:
    """Σ_i ln(1/δ_i)/ε_i² over the U clients (one value is broadcast to all)."""
    eps = list(epsilons) * clients if len(epsilons) == 1 else list(epsilons)
    dl = list(deltas) * clients if len(deltas) == 1 else list(deltas)
    if len(eps) != clients or len(dl) != clients:
        raise ConfigError(f"give one epsilon/delta or exactly U = {clients}. Found {len(eps)} and {len(dl)}.")
    for e in eps:
        if not (math.isfinite(e) and e > 0):
            raise ConfigError(f"every epsilon must be > 0. Found {e!r}.")
    for d in dl:
        if not 0.0 < d < 1.0:
            raise ConfigError(f"every delta must be in (0, 1). Found {d!r}.")
    return math.fsum(math.log(1.0 / d) / e**2 for e, d in zip(eps, dl, strict=True))


def theorem2_bound(c: UdpConstants, rounds: int, epsilons: Sequence[float], deltas: Sequence[float]) -> float:
    """The right-hand side of 000 eq. 22 after ``rounds`` = T rounds.

    >>> c = UdpConstants(1.0, 0.1, 0.5, 0.0, 1e-3, 50, 50, 2.0)
    >>> round(theorem2_bound(c, 0, [8.0], [1e-3]), 6)  # T = 0: the initial gap
    2.0
    """
    c.check()
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ConfigError(f"`rounds` must be an integer >= 0. Found {rounds!r}.")
    u, k = c.clients, c.sampled
    at = c.a**rounds
    noise = c.kappa0 * rounds * k / u**2 * _privacy_sum(epsilons, deltas, u)
    sampling = c.kappa1 * u * (u - k) / (k * (u - 1))
    return at * c.gap + (1.0 - at) * (noise + sampling)


@dataclass(frozen=True)
class BoundCurve:
    """eq. 22 for T = 1..t_max at one privacy level, with its minimizing T."""

    epsilon: list[float]
    rounds: list[int]
    bound: list[float]
    best_rounds: int
    best_bound: float


def theorem2_curve(c: UdpConstants, epsilons: Sequence[float], deltas: Sequence[float], t_max: int) -> BoundCurve:
    """The bound against T = 1..t_max and its argmin."""
    if isinstance(t_max, bool) or not isinstance(t_max, int) or t_max < 1:
        raise ConfigError(f"`t_max` must be a positive integer. Found {t_max!r}.")
    ts = list(range(1, t_max + 1))
    vals = [theorem2_bound(c, t, epsilons, deltas) for t in ts]
    k = min(range(len(vals)), key=lambda i: vals[i])
    return BoundCurve(list(epsilons), ts, vals, ts[k], vals[k])


def estimate_constants(
    losses: Sequence[float | None], config: dict[str, Any], *, smoothness: float | None = None
) -> dict[str, Any]:
    """Constants of eq. 22 estimated from a UDP run (see the module docstring).

    Args:
        losses: the run's test loss per round (round order).
        config: the run's stored config (``RunConfig.model_dump()``).
        smoothness: L; default 1/η (the largest value Assumption 1.4 allows).

    Returns:
        ``{"gap", "contraction", "pl", "smoothness", "lr", "sensitivity", "clients", "sampled",
        "epsilon", "delta", "notes"}``.
    """
    vals = [float(x) for x in losses if x is not None and math.isfinite(float(x))]
    if len(vals) < 3:
        raise ConfigError(f"need at least 3 recorded test losses to estimate constants. Found {len(vals)}.")
    lo = min(vals)
    k_min = vals.index(lo)
    gap = vals[0] - lo
    pts = [(t, math.log(v - lo)) for t, v in enumerate(vals[:k_min]) if v - lo > 1e-12]
    if len(pts) >= 2:
        mt = sum(t for t, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        num = sum((t - mt) * (y - my) for t, y in pts)
        den = sum((t - mt) ** 2 for t, _ in pts)
        a = min(max(math.exp(num / den), 1e-6), 1 - 1e-6)
    else:
        a = 0.5
    lr = float(config["local"]["lr"])
    ell = float(smoothness) if smoothness is not None else 1.0 / lr
    mu = (1.0 - a) / (lr * (2.0 - lr * ell))
    opts = config["algorithm"]["options"]
    part = config["partition"]
    n_min = int(min(part["sizes"])) if part.get("sizes") else int(part.get("samples_per_client") or 1)
    if part.get("group_sizes"):
        n_min = int(min(part["group_sizes"]))
    clients = int(part["num_clients"])
    samp = config.get("sampling", {})
    sampled = int(samp.get("clients_per_round") or clients) if samp.get("kind") == "fixed" else clients
    eps = opts.get("epsilon")
    delta = opts.get("delta") or config["privacy"]["delta"]
    return {
        "gap": gap, "contraction": a, "pl": mu, "smoothness": ell, "lr": lr,
        "sensitivity": udp_sensitivity(lr, float(opts["clip_norm"]), n_min),
        "clients": clients, "sampled": sampled,
        "epsilon": eps if isinstance(eps, list) else [float(eps)],
        "delta": delta if isinstance(delta, list) else [float(delta)],
        "notes": [
            f"gap = first minus smallest recorded test loss ({vals[0]:.4g} - {lo:.4g})",
            f"A = {a:.4g} from the log-linear decay before the minimum (round {k_min})",
            f"L = {ell:g} ({'given' if smoothness is not None else '1/eta, assumed'}); mu = (1 - A)/(eta (2 - eta L))",
            "divergence (epsilon-bar) not estimated: pass --divergence (0 ignores the sampling term)",
        ],
    }
