"""The noise a run chose, and whether it swamps the signal (simulation only).

A private algorithm with one noise multiplier (DP-FedAvg, DP-FTRL, dp-sgd-fedavg: its
``calibration().noise_multiplier``) shows it wherever its ε is shown — calibrated from
``algorithm.options.target_epsilon`` or given. For the algorithms whose server divides one noisy
sum by a public denominator m (DP-FedAvg, DP-FTRL), each round's metrics also hold the
**noise-to-signal ratio** of the mean the server steps with:

    noise_to_signal = (σ·C/m) / (s/√d),   s = min(update_norm_mean, C)·k/m

σ·C/m is the per-coordinate noise std of the mean (DP-FedAvg: the update's share z_Δ of σ; DP-FTRL:
the std of one round's noise before its correlation, a nominal figure), C the round's clip norm, k
the uploads aggregated and d the model's size. s bounds the norm of the mean clipped update from
above (the triangle inequality, and the mean of min(‖Δ_k‖, C) is at most min(mean ‖Δ_k‖, C)), so
the ratio is a lower bound: the noise is at least that many times the signal per coordinate. It
is measured in simulation only (``update_norm_mean`` is the experimenter's view; a deployment's
clients never send their norms) and nothing new is sent by a client.

Above :data:`SWAMPED_RATIO` in a round among the first :data:`SWAMPED_ROUNDS` the run stores and
prints one notice (kind ``noise-swamps-signal``).
"""

from __future__ import annotations

import math
from typing import Any

SWAMPED_RATIO = 10.0
"""The noise-to-signal ratio above which a run is warned. The signal of T rounds adds up linearly
(T·s) while their independent noise adds up as a random walk (√T·r·s): at a ratio r the noise
outweighs the drift until T = r² rounds — 100 rounds at r = 10, as many as most runs have — and
every single step is at least 10 times longer than the server step the learning rate was tuned for
(the default main job has r ≈ 1.7; MNIST runs with r > 10 diverge or stay near chance)."""

SWAMPED_ROUNDS = 5
"""The first rounds whose ratio is checked (later rounds have smaller updates near convergence,
which is not the noise's fault)."""


def noise_multiplier(algorithm: Any) -> float | None:
    """The algorithm's one noise multiplier (its calibration's), None when it has none."""
    try:
        cal = algorithm.calibration()
    except (AttributeError, NotImplementedError):
        return None
    z = getattr(cal, "noise_multiplier", None)
    return None if z is None else float(z)


def calibrated_from(algorithm: Any) -> float | None:
    """``algorithm.options.target_epsilon`` when the multiplier was calibrated from it, else None."""
    options = getattr(algorithm, "options", None)
    target = getattr(options, "target_epsilon", None)
    if target is None or getattr(options, "noise_multiplier", None) is not None:
        return None
    return float(target)


def _mean_noise_multiplier(algorithm: Any) -> tuple[float, float] | None:
    """(σ of the mean's noise over the clip norm, the public denominator m), for an algorithm whose
    server divides one noisy sum by m; None for any other."""
    cal = None
    try:
        cal = algorithm.calibration()
    except (AttributeError, NotImplementedError):
        return None
    m = getattr(cal, "denominator", None)
    if m is None or not m > 0:
        return None
    z = getattr(cal, "update_multiplier", None)
    if z is None:
        z = getattr(cal, "noise_multiplier", None)
    return None if z is None else (float(z), float(m))


def noise_to_signal(algorithm: Any, metrics: dict[str, Any], num_params: int) -> dict[str, float] | None:
    """The round's ``noise_std`` (per coordinate of the mean), ``update_scale`` (bound on the mean
    clipped update's per-coordinate scale) and their ``noise_to_signal`` ratio (see the module);
    None when the round's metrics do not measure them."""
    found = _mean_noise_multiplier(algorithm)
    norm, clip, k = metrics.get("update_norm_mean"), metrics.get("clip_norm"), metrics.get("clients")
    if found is None or norm is None or clip is None or not k or metrics.get("arrived") == 0 or num_params <= 0:
        return None
    z, m = found
    k = int(metrics.get("arrived", k))
    noise = z * float(clip) / m
    scale = min(float(norm), float(clip)) * k / m / math.sqrt(num_params)
    ratio = math.inf if scale == 0 else noise / scale
    return {"noise_std": noise, "update_scale": scale, "noise_to_signal": ratio}


def swamped_notice(t: int, found: dict[str, float], z: float | None) -> str:
    """The one-line notice of a round whose noise swamps the signal."""
    mult = "" if z is None else f" (noise multiplier {z:.4g})"
    return (f"round {t + 1}: the noise swamps the signal: per coordinate of the aggregated update the noise std "
            f"is {found['noise_std']:.3g}{mult}, at least {found['noise_to_signal']:.3g} times the update's scale "
            f"{found['update_scale']:.3g} (threshold {SWAMPED_RATIO:g}); expect little learning or divergence — "
            "sample more clients per round (the noise of the mean falls as 1/m), lower the noise or the model "
            "size, or raise the clip norm if most updates are clipped")


def noise_record(algorithm: Any, history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a run's final record says of its noise (``final["noise"]``): the multiplier, the
    target it was calibrated from, and the first rounds' noise and update scale (their medians)."""
    z = noise_multiplier(algorithm)
    if z is None:
        return None
    out: dict[str, Any] = {"noise_multiplier": z}
    target = calibrated_from(algorithm)
    if target is not None:
        out["calibrated_from_target_epsilon"] = target
    first = [h for h in history if "noise_to_signal" in h][:SWAMPED_ROUNDS]
    if first:
        for key in ("noise_std", "update_scale", "noise_to_signal"):
            vals = sorted(float(h[key]) for h in first)
            out[key] = vals[len(vals) // 2]
        out["measured_rounds"] = len(first)
    return out


def noise_line(noise: dict[str, Any] | None) -> str | None:
    """``final["noise"]`` in one line for humans (None without one)."""
    if not noise:
        return None
    text = f"noise multiplier {noise['noise_multiplier']:.4g}"
    if noise.get("calibrated_from_target_epsilon") is not None:
        text += f" (calibrated from algorithm.options.target_epsilon = {noise['calibrated_from_target_epsilon']:g})"
    if "noise_to_signal" in noise:
        ratio = noise["noise_to_signal"]
        text += (f"; per coordinate of the aggregated update: noise std {noise['noise_std']:.3g} vs update scale "
                 f"<= {noise['update_scale']:.3g}, noise/signal >= {ratio:.3g} (median of the first "
                 f"{noise['measured_rounds']} rounds")
        text += f"; above {SWAMPED_RATIO:g}: the noise swamps the signal)" if ratio > SWAMPED_RATIO else ")"
    return text
