"""Privacy mechanisms on a stacked cohort ``[K, ...]`` with explicit generators.

Bound sensitivity, then randomize — two steps, so one mechanism serves local DP, central DP and
clip-on-client / noise-on-server: :mod:`.clipping` bounds (whole-vector L2 clip, the sensitivity
it enforces); :mod:`.gaussian` and :mod:`.two_point` randomize (the two-point randomizer states
its event, ``two_point_event``; a Gaussian release's event is
:func:`dpfl.privacy.accounting.events.gaussian_event`, the one definition); :mod:`.log_range` is a
DP agreement on per-layer
ranges (noisy log2 max|w| reports, ``log_range_event``); :mod:`.integer` is secure aggregation's
integer pipeline and :mod:`.lattice` the floating-point-safe release built on it (integers plus
Skellam noise). Nothing here reads a global RNG: every draw goes through :mod:`.draw`, from a
``torch.Generator`` or a ChaCha20 :class:`dpfl.rng.CsprngGenerator`; secure seeding is
``dpfl.rng.SeedSequence.secure_mode()`` (``secure_mode("chacha20")`` for ChaCha20 noise).

This package imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.rng`.
"""

from dpfl.privacy.mechanisms.clipping import (
    clip_by_l2_norm,
    clipped_sensitivity,
    per_client_l2_norms,
)
from dpfl.privacy.mechanisms.gaussian import (
    add_gaussian_noise,
    add_gaussian_noise_per_client,
)
from dpfl.privacy.mechanisms.log_range import (
    agree_log_ranges,
    layer_log_max_abs,
    log_range_event,
    log_range_reports,
    log_range_sensitivity,
)
from dpfl.privacy.mechanisms.two_point import (
    two_point_event,
    two_point_flip_probability,
    two_point_probability_high,
    two_point_randomize,
    two_point_randomize_per_client,
    two_point_realized_epsilon,
    two_point_release_event,
    two_point_values,
)

__all__ = [
    "add_gaussian_noise",
    "add_gaussian_noise_per_client",
    "agree_log_ranges",
    "clip_by_l2_norm",
    "clipped_sensitivity",
    "layer_log_max_abs",
    "log_range_event",
    "log_range_reports",
    "log_range_sensitivity",
    "per_client_l2_norms",
    "two_point_event",
    "two_point_flip_probability",
    "two_point_probability_high",
    "two_point_randomize",
    "two_point_randomize_per_client",
    "two_point_realized_epsilon",
    "two_point_release_event",
    "two_point_values",
]
