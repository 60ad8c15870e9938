"""NbAFL's convergence bounds as calculators: 003 Theorem 2 (eq. 17) and Theorem 3 (eq. 23).

Theorem 2 (all N clients, T aggregations, protection level ε):

    E{F(w̃^(T)) − F(w*)} <= P^T Θ + (κ1·T/ε + κ0·T²/ε²)(1 − P^T)                    (eq. 17)

with λ0 = ρ/2, λ1 = 1/μ + ρB/μ, λ2 = −1/μ + ρB/μ² + ρB²/(2μ²) (eq. 13–14), P = 1 + 2lλ2,
κ1 = λ1βc/(m(1−P))·sqrt(2/(Nπ)), κ0 = λ0c²/(m²(1−P)N) (eq. 18–19), c = sqrt(2 ln(1.25/δ)).

Theorem 3 (K of N clients per round):

    E{F(ṽ^(T)) − F(w*)} <= Q^T Θ + (1 − Q^T)/(1 − Q) · ( cα1β·sqrt(2/π) / (−mK ln a)
                                                        + c²α0 / (m²K² ln² a) )       (eq. 23)

with a = 1 − N/K + (N/K)e^{−ε/T}, Q = 1 + (2l/μ²)(ρB²/2 + ρB + ρB²/K + 2ρB²/√K + μB/√K − μ),
α0 = 2ρK/N + ρ, α1 = 1 + 2ρB/μ + 2ρB√K/(μN) (eq. 24–25). The bound exists only where a > 0,
i.e. T > −ε/ln(1 − K/N) (eq. 69); elsewhere it is reported as undefined.

Reading notes, stated so that a user can judge the numbers:

* Both bounds need 0 < P < 1 (resp. 0 < Q < 1): μ must make λ2 < 0 (α2 < 0), i.e.
  μ > ρB + ρB²/2 for Theorem 2. Otherwise :class:`dpfl.errors.ConfigError`.
* Eq. 17 is derived for T > L·sqrt(N) (Theorem 1's σ_D > 0). For T <= L·sqrt(N) eq. 16 gives
  σ_A = cLΔs_U/(sqrt(N)ε), which is eq. 17's noise term with T replaced by L·sqrt(N); the
  calculator does that when ``exposures`` is given (``exposures=None`` evaluates eq. 17 as
  printed for every T; ``exposures="T"`` means L = T, every upload exposed).
* The paper's step from eq. 61 to eq. 62 drops the factor 2C of Δs_D = 2C/(mN) (the printed κ1,
  κ0 correspond to 2C = 1) and treats the noise as one coordinate. ``clip_norm=C`` restores the
  factor (κ1 × 2C, κ0 × (2C)²); ``None`` (default) evaluates the printed equations.

Estimating the constants from a run (:func:`estimate_constants`, from stored per-round metrics
of an NbAFL run — preferably a non-private one, ``epsilon: null``):

* Θ = F(w⁰) − F(w*): first recorded test loss minus the smallest recorded one (an
  under-estimate: the first record is after one round, and F(w*) is at most the minimum seen);
* P: least-squares slope of log(loss_t − min loss) against t over the rounds before the minimum
  (the paper's recursion gives gap_t ≈ P^t Θ without noise); pass it as ``contraction``;
* β (Lipschitz constant of F, bounds ‖∇F‖): the largest mean local update norm divided by
  lr × local steps (one local epoch of SGD moves about lr·steps·‖∇F_i‖);
* B (dissimilarity, Lemma 2: E‖∇F_i‖² <= B²‖∇F‖²): sqrt(mean_i ‖Δ_i‖² / ‖mean_i Δ_i‖²) of the
  local updates, the largest over rounds;
* μ, m, N, K, δ: read from the run's config.

Not estimated (inputs): ρ (smoothness) and l (the Polyak–Łojasiewicz constant) separately —
the stored metrics hold no curvature information; with ``contraction`` given they are needed
only through λ1 = (1 + ρB)/μ and λ0 = ρ/2.

Imports: :mod:`dpfl.privacy.calibration` (c and eq. 22's log argument), :mod:`dpfl.errors` and
the standard library only — pure calculators, never the store or a CLI; ``dpfl bound nbafl`` lives
in :mod:`dpfl.commands.bound_nbafl`.

References:
    003_c42e3eb46a620b42.txt, Lemma 3 (eq. 12–16), Theorem 2 (eq. 17–20), Theorem 3
    (eq. 23–26), Appendix E (eq. 57–62) and G (eq. 93–101).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dpfl.errors import ConfigError
from dpfl.privacy.calibration import classical_gaussian_constant, nbafl_k_random_log_argument

__all__ = [
    "BoundCurve",
    "NbaflConstants",
    "estimate_constants",
    "theorem2_bound",
    "theorem2_curve",
    "theorem3_bound",
    "theorem3_curve",
]


def _pos(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"`{name}` must be a finite number > 0. Found {value!r}.")
    return float(value)


def _pos_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    return value


@dataclass(frozen=True)
class NbaflConstants:
    """The constants of 003 Assumption 1 and Lemma 2.

    Attributes:
        rho: ρ, smoothness of every F_i (Assumption 1.5).
        beta: β, Lipschitz constant of F_i (Assumption 1.4; also bounds ‖∇F‖).
        pl: l, the Polyak–Łojasiewicz constant (Assumption 1.2).
        dissimilarity: B >= 1 (Lemma 2).
        mu: μ of the proximal term.
        theta: Θ = F(w⁰) − F(w*) (Assumption 1.3).
        contraction: P (Thm 2) or Q (Thm 3) given directly (e.g. estimated from a run); ``None``
            computes it from l, ρ, B, μ.
    """

    rho: float
    beta: float
    pl: float
    dissimilarity: float
    mu: float
    theta: float
    contraction: float | None = None

    def __post_init__(self) -> None:
        for name in ("rho", "beta", "pl", "mu", "theta"):
            _pos(name, getattr(self, name))
        if not (isinstance(self.dissimilarity, (int, float)) and self.dissimilarity >= 1):
            raise ConfigError(f"`dissimilarity` (B) must be >= 1 (003 eq. 37). Found {self.dissimilarity!r}.")
        if self.contraction is not None and not 0 < self.contraction < 1:
            raise ConfigError(f"`contraction` must be in (0, 1). Found {self.contraction!r}.")

    def lambdas(self) -> tuple[float, float, float]:
        """(λ0, λ1, λ2) of eq. 13–14."""
        rho, b, mu = self.rho, self.dissimilarity, self.mu
        return rho / 2.0, 1.0 / mu + rho * b / mu, -1.0 / mu + rho * b / mu**2 + rho * b * b / (2.0 * mu**2)

    def p_factor(self) -> float:
        """P = 1 + 2lλ2 (eq. 18), or the given contraction; must lie in (0, 1)."""
        if self.contraction is not None:
            return self.contraction
        p = 1.0 + 2.0 * self.pl * self.lambdas()[2]
        if not 0 < p < 1:
            raise ConfigError(
                f"003 Thm 2 needs 0 < P = 1 + 2*l*lambda2 < 1; found P = {p:.6g} (l = {self.pl:g}, "
                f"lambda2 = {self.lambdas()[2]:.6g}). Choose mu > rho*B + rho*B^2/2 = "
                f"{self.rho * self.dissimilarity * (1 + self.dissimilarity / 2):.6g} and l small enough, "
                "or give `contraction` directly.")
        return p

    def q_factor(self, sampled: int) -> float:
        """Q of eq. 24 for K scheduled clients, or the given contraction; must lie in (0, 1)."""
        if self.contraction is not None:
            return self.contraction
        rho, b, mu, k = self.rho, self.dissimilarity, self.mu, float(sampled)
        alpha2 = (rho * b * b / 2 + rho * b + rho * b * b / k + 2 * rho * b * b / math.sqrt(k)
                  + mu * b / math.sqrt(k) - mu) / mu**2
        q = 1.0 + 2.0 * self.pl * alpha2
        if not 0 < q < 1:
            raise ConfigError(
                f"003 Thm 3 needs 0 < Q < 1 (eq. 24, alpha2 < 0); found Q = {q:.6g} at K = {sampled} "
                f"(alpha2 = {alpha2:.6g}). Increase mu or give `contraction` directly.")
        return q


Exposures = int | Literal["T"] | None


def _noise_rounds(rounds: int, exposures: Exposures, clients: int) -> float:
    """T in eq. 17's noise term, or L·sqrt(N) where eq. 16's second branch applies."""
    if exposures is None:
        return float(rounds)
    ell = rounds if exposures == "T" else _pos_int("exposures", exposures)
    return max(float(rounds), ell * math.sqrt(clients))


def theorem2_bound(
    rounds: int, epsilon: float, delta: float, clients: int, min_samples: int, constants: NbaflConstants,
    *, exposures: Exposures = None, clip_norm: float | None = None,
) -> float:
    """The right-hand side of 003 eq. 17 at T = ``rounds``.

    >>> k = NbaflConstants(rho=1.0, beta=1.0, pl=0.1, dissimilarity=1.0, mu=3.0, theta=2.0)
    >>> round(theorem2_bound(1, 1e9, 0.01, 50, 600, k), 6)  # no noise: P Θ
    1.933333
    """
    t = _pos_int("rounds", rounds)
    eps = _pos("epsilon", epsilon)
    n = _pos_int("clients", clients)
    m = _pos_int("min_samples", min_samples)
    c = classical_gaussian_constant(delta)
    scale = 1.0 if clip_norm is None else 2.0 * _pos("clip_norm", clip_norm)
    lam0, lam1, _ = constants.lambdas()
    p = constants.p_factor()
    kappa1 = scale * lam1 * constants.beta * c / (m * (1 - p)) * math.sqrt(2.0 / (n * math.pi))
    kappa0 = scale * scale * lam0 * c * c / (m * m * (1 - p) * n)
    tn = _noise_rounds(t, exposures, n)
    return p**t * constants.theta + (kappa1 * tn / eps + kappa0 * tn * tn / eps**2) * (1 - p**t)


def theorem3_bound(
    rounds: int, epsilon: float, delta: float, clients: int, sampled: int, min_samples: int,
    constants: NbaflConstants, *, clip_norm: float | None = None,
) -> float:
    """The right-hand side of 003 eq. 23 at T = ``rounds``; NaN where eq. 22's log is undefined."""
    t = _pos_int("rounds", rounds)
    eps = _pos("epsilon", epsilon)
    n = _pos_int("clients", clients)
    k = _pos_int("sampled", sampled)
    if k > n:
        raise ConfigError(f"`sampled` (K = {k}) must not exceed `clients` (N = {n}).")
    m = _pos_int("min_samples", min_samples)
    c = classical_gaussian_constant(delta)
    scale = 1.0 if clip_norm is None else 2.0 * _pos("clip_norm", clip_norm)
    arg = nbafl_k_random_log_argument(eps, n, k, t)
    if not arg > 0:
        return math.nan
    log_a = math.log(arg)
    if log_a == 0:
        return math.nan
    rho, b, mu = constants.rho, constants.dissimilarity, constants.mu
    alpha0 = 2 * rho * k / n + rho
    alpha1 = 1 + 2 * rho * b / mu + 2 * rho * b * math.sqrt(k) / (mu * n)
    q = constants.q_factor(k)
    noise = (scale * c * alpha1 * constants.beta * math.sqrt(2 / math.pi) / (-m * k * log_a)
             + scale * scale * c * c * alpha0 / (m * m * k * k * log_a * log_a))
    return q**t * constants.theta + (1 - q**t) / (1 - q) * noise


@dataclass(frozen=True)
class BoundCurve:
    """A bound evaluated at T = 1..t_max, and its minimizing T (over the T where it is defined)."""

    epsilon: float
    rounds: list[int]
    values: list[float]
    best_rounds: int | None
    best_value: float | None


def _curve(epsilon: float, values: list[float]) -> BoundCurve:
    ts = list(range(1, len(values) + 1))
    finite = [(v, t) for t, v in zip(ts, values, strict=True) if math.isfinite(v)]
    if not finite:
        return BoundCurve(epsilon, ts, values, None, None)
    v, t = min(finite)
    return BoundCurve(epsilon, ts, values, t, v)


def theorem2_curve(t_max: int, epsilon: float, delta: float, clients: int, min_samples: int,
                   constants: NbaflConstants, **kw: Any) -> BoundCurve:
    """Eq. 17 for T = 1..t_max and its argmin."""
    return _curve(epsilon, [theorem2_bound(t, epsilon, delta, clients, min_samples, constants, **kw)
                            for t in range(1, _pos_int("t_max", t_max) + 1)])


def theorem3_curve(t_max: int, epsilon: float, delta: float, clients: int, sampled: int, min_samples: int,
                   constants: NbaflConstants, **kw: Any) -> BoundCurve:
    """Eq. 23 for T = 1..t_max and its argmin (where defined)."""
    return _curve(epsilon, [theorem3_bound(t, epsilon, delta, clients, sampled, min_samples, constants, **kw)
                            for t in range(1, _pos_int("t_max", t_max) + 1)])


# --------------------------------------------------------------------------- estimation


def estimate_constants(rows: Sequence[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """Estimate what the stored metrics of an NbAFL run allow (see the module docstring).

    Args:
        rows: the run's per-round metrics (``RunStore.rounds``), in round order.
        config: the run's config (``RunRecord.config``).

    Returns:
        ``{"theta", "contraction", "beta", "dissimilarity", "mu", "min_samples", "clients",
        "sampled", "delta", "not_estimated", "how"}`` — a value is ``None`` when the metrics do
        not allow it.
    """
    losses = [float(r["test_loss"]) for r in rows if r.get("test_loss") is not None]
    out: dict[str, Any] = {"theta": None, "contraction": None, "beta": None, "dissimilarity": None}
    how: dict[str, str] = {}
    if len(losses) >= 2:
        low = min(losses)
        i_min = losses.index(low)
        out["theta"] = losses[0] - low if losses[0] > low else None
        how["theta"] = "first recorded test loss - smallest recorded test loss (under-estimate)"
        gaps = [(t, math.log(v - low)) for t, v in enumerate(losses[:i_min]) if v - low > 1e-12]
        if len(gaps) >= 2:
            tbar = sum(t for t, _ in gaps) / len(gaps)
            ybar = sum(y for _, y in gaps) / len(gaps)
            slope = (sum((t - tbar) * (y - ybar) for t, y in gaps)
                     / sum((t - tbar) ** 2 for t, _ in gaps))
            p = math.exp(slope)
            out["contraction"] = p if 0 < p < 1 else None
            how["contraction"] = "exp(slope) of log(test loss - min) against the round, before the minimum"
    algo = config.get("algorithm", {}).get("options", {})
    local = config.get("local", {})
    lr = float(local.get("lr", 0.0) or 0.0)
    upd = [r for r in rows if r.get("update_sq_norm_mean") is not None]
    if upd and lr > 0:
        steps = max(float(r.get("local_steps", 1) or 1) for r in upd)
        out["beta"] = max(math.sqrt(float(r["update_sq_norm_mean"])) for r in upd) / (lr * steps)
        how["beta"] = "max over rounds of sqrt(mean_i |Delta_i|^2) / (lr x local steps)"
        ratios = [float(r["update_sq_norm_mean"]) / float(r["mean_update_sq_norm"])
                  for r in upd if float(r.get("mean_update_sq_norm") or 0) > 0]
        if ratios:
            out["dissimilarity"] = max(1.0, math.sqrt(max(ratios)))
            how["dissimilarity"] = "max over rounds of sqrt(mean_i |Delta_i|^2 / |mean_i Delta_i|^2)"
    part = config.get("partition", {})
    samp = config.get("sampling", {})
    out.update({
        "mu": algo.get("prox_mu"),
        "clients": part.get("num_clients"),
        "sampled": samp.get("clients_per_round") if samp.get("kind") == "fixed" else part.get("num_clients"),
        "min_samples": min(int(r["min_samples"]) for r in rows if r.get("min_samples")) if any(
            r.get("min_samples") for r in rows) else part.get("samples_per_client"),
        "delta": config.get("privacy", {}).get("delta"),
        "not_estimated": ["rho", "pl"],
        "how": how,
    })
    return out
