"""001's two-point LDP randomizer (eq. 2) on a stacked cohort, for any range [c − r, c + r].

For w ∈ [c − r, c + r] the output is one of two values,

    c + r·(e^ε + 1)/(e^ε − 1)  with probability  ((w − c)(e^ε − 1) + r(e^ε + 1)) / (2r(e^ε + 1)),
    c − r·(e^ε + 1)/(e^ε − 1)  otherwise,

i.e. c ± r·coth(ε/2) with P(high) = 1/2 + (w − c)·tanh(ε/2)/(2r). It is unbiased (001 Lemma 2)
and ε-LDP per weight (001 Theorem 1): P(high) ranges over [1/(e^ε + 1), e^ε/(e^ε + 1)], whose
end ratio is exactly e^ε. Values outside the range are first clipped into it (and counted);
the output is then unbiased for the clipped value.

Exactness in floating point. The coin is ``u < P(high)`` with u uniform on the float64 grid
{k·2^-53} (``torch.rand(..., dtype=torch.float64)``), so a probability p is realized as
⌈p·2^53⌉/2^53. P(high) is computed in float64 and then clamped to [p_f, 1 − p_f], where p_f is
1/(e^ε + 1) rounded *up* onto that grid (:func:`two_point_flip_probability`). Every realized
output probability is therefore in [p_f, 1 − p_f], and the realized mechanism is ε'-LDP with
ε' = ln((1 − p_f)/p_f) <= ε exactly (:func:`two_point_realized_epsilon`) — even for large ε,
where a float32 coin would realize a
probability of 0 and break the guarantee. The clamp moves P(high) by at most one grid step
(bias <= r·coth(ε/2)·2^-52).

Streams. :func:`two_point_randomize` draws one ``torch.rand(x.shape, generator=generator,
dtype=torch.float64)``; :func:`two_point_randomize_per_client` gives row k exactly what
:func:`two_point_randomize` gives for ``x[k:k+1]`` with ``generators[k]`` (the uniforms are
``torch.rand(x[k:k+1].shape, generator=generators[k], dtype=torch.float64)``).

DP event. Any two-valued mechanism whose P(high) stays in [p_f, 1 − p_f] is a post-processing
of binary randomized response with flip probability p_f, and the range ends attain it; so
:func:`two_point_event` is ``RandomizedResponseDpEvent(noise_parameter=2·p_f, num_buckets=2)``,
to be accounted under the REPLACE_ONE relation (local DP: any input against any other).

The uniforms come from :func:`dpfl.privacy.mechanisms.draw.rand`: the torch call above for a torch
generator; for a ChaCha20 :class:`~dpfl.rng.CsprngGenerator`, numpy's float64 ``random``, on the
same 2^-53 grid (so the same exactness argument holds).

This module imports nothing from dpfl except :mod:`dpfl.errors`, :mod:`dpfl.rng` and its sibling
``draw``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting
import torch
from torch import Tensor

from dpfl.errors import ConfigError
from dpfl.privacy.mechanisms.draw import rand
from dpfl.rng import NoiseGenerator

__all__ = [
    "two_point_event",
    "two_point_flip_probability",
    "two_point_probability_high",
    "two_point_randomize",
    "two_point_randomize_per_client",
    "two_point_realized_epsilon",
    "two_point_release_event",
    "two_point_values",
]

_GRID = 2.0**53  # torch.rand(float64) returns multiples of 2^-53 in [0, 1)


def _epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise ConfigError(f"`epsilon` must be a float. Found {epsilon!r}.")
    eps = float(epsilon)
    if not (eps > 0 and math.isfinite(eps)):
        raise ConfigError(f"`epsilon` must be finite and > 0. Found {epsilon!r}.")
    return eps


def two_point_flip_probability(epsilon: float) -> float:
    """The realized probability p_f of the less likely output at a range end.

    1/(e^ε + 1) rounded up onto the 2^-53 grid (with a margin of a few ulps for the rounding of
    the exponential), so that ln((1 − p_f)/p_f) <= ε. For ε above ≈ 36.7 the grid floor 2^-53
    applies and the realized per-weight ε' is ≈ 36.7 < ε.

    Args:
        epsilon: ε > 0.

    Returns:
        p_f in (0, 1/2).

    Raises:
        ConfigError: ε is so small (< ~1e-14) that 1/2 − p_f is not representable.

    References:
        001_8ad797a147f2b989.txt, eq. 2 (P(low) at w = c + r).
    """
    eps = _epsilon(epsilon)
    tail = math.exp(-eps)
    exact = tail / (1.0 + tail)  # = 1/(e^ε + 1): relative error of a few ulps, no overflow
    grid = math.ceil(exact * _GRID * (1.0 + 8.0 * 2.0**-52))
    p_f = max(grid, 1) / _GRID
    if not p_f < 0.5:
        raise ConfigError(
            f"`epsilon` = {eps!r} is too small for a float64 coin: the flip probability rounds to "
            "1/2. Use epsilon >= 1e-12."
        )
    return p_f


def two_point_realized_epsilon(epsilon: float) -> float:
    """ε' = ln((1 − p_f)/p_f) <= ε, the per-weight ε the float64 coin realizes exactly."""
    p_f = two_point_flip_probability(epsilon)
    return math.log1p(-p_f) - math.log(p_f)


def _as_range(center: float | Tensor, radius: float | Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """center and radius as float64 tensors that broadcast to x (not expanded); radius > 0."""
    tensors = []
    for name, value in (("center", center), ("radius", radius)):
        if isinstance(value, Tensor):
            t = value.to(device=x.device, dtype=torch.float64)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            t = torch.tensor(float(value), dtype=torch.float64, device=x.device)
        else:
            raise ConfigError(f"`{name}` must be a float or a tensor. Found {value!r}.")
        try:
            fits = torch.broadcast_shapes(t.shape, x.shape) == x.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ConfigError(
                f"`{name}` of shape {tuple(t.shape)} does not broadcast to x of shape {tuple(x.shape)}."
            )
        tensors.append(t)
    c, r = tensors
    if not bool(torch.isfinite(c).all()):
        raise ConfigError("`center` must be finite.")
    ok = torch.isfinite(r) & (r > 0)
    if not bool(ok.all()):
        raise ConfigError(f"`radius` must be finite and > 0. Found {r[~ok][:5].tolist()}.")
    return c, r


def two_point_values(
    center: float | Tensor, radius: float | Tensor, epsilon: float
) -> tuple[float | Tensor, float | Tensor]:
    """The two outputs c − r·(e^ε+1)/(e^ε−1) and c + r·(e^ε+1)/(e^ε−1) (= c ∓ r·coth(ε/2)).

    Args:
        center: c (float or tensor).
        radius: r > 0 (float or tensor).
        epsilon: ε > 0.

    Returns:
        ``(low, high)``.

    References:
        001_8ad797a147f2b989.txt, eq. 2.
    """
    half_width = radius / math.tanh(0.5 * _epsilon(epsilon))
    return center - half_width, center + half_width


def two_point_probability_high(
    x: Tensor, center: float | Tensor, radius: float | Tensor, epsilon: float
) -> Tensor:
    """P(output = high) for each entry, exactly as :func:`two_point_randomize` realizes it.

    P = 1/2 + (w − c)·tanh(ε/2)/(2r) for w clipped into [c − r, c + r] — algebraically eq. 2's
    ((w − c)(e^ε − 1) + r(e^ε + 1))/(2r(e^ε + 1)) — computed in float64 and clamped to
    [p_f, 1 − p_f] (:func:`two_point_flip_probability`).

    Args:
        x: any floating tensor.
        center: c, float or tensor broadcastable to x.
        radius: r > 0, float or tensor broadcastable to x.
        epsilon: ε > 0.

    Returns:
        a float64 tensor of x's shape.

    References:
        001_8ad797a147f2b989.txt, eq. 2.
    """
    return _probability_and_count(x, center, radius, epsilon)[0]


def _probability_and_count(
    x: Tensor, center: float | Tensor, radius: float | Tensor, epsilon: float
) -> tuple[Tensor, int, Tensor, Tensor]:
    eps = _epsilon(epsilon)
    if not x.is_floating_point():
        raise ConfigError(f"`x` must be a floating-point tensor. Found dtype {x.dtype}.")
    if bool(torch.isnan(x).any()):
        raise ConfigError(
            "`x` contains NaN: a NaN weight has no place in the range [c - r, c + r]."
        )
    c, r = _as_range(center, radius, x)
    p_f = two_point_flip_probability(eps)
    w = x.to(torch.float64, copy=True)
    low_end, high_end = c - r, c + r
    outside = int(torch.count_nonzero((w < low_end) | (w > high_end)))
    torch.clamp(w, min=low_end, max=high_end, out=w)
    p = w.sub_(c).mul_(math.tanh(0.5 * eps) / 2.0).div_(r).add_(0.5)
    return p.clamp_(p_f, 1.0 - p_f), outside, c, r


def two_point_randomize(
    x: Tensor,
    center: float | Tensor,
    radius: float | Tensor,
    epsilon: float,
    generator: NoiseGenerator,
) -> tuple[Tensor, int]:
    """Randomize every entry of x with 001's two-point mechanism (eq. 2), vectorized.

    Entries outside [c − r, c + r] are clipped into it first and counted. One call handles
    millions of weights with no Python loop: one float64 uniform per entry.

    Args:
        x: a floating tensor ``[K, ...]`` (any shape works).
        center: c, a float or a tensor broadcastable to x (e.g. per-layer ranges expanded over
            the flattened parameters, or per-client ``[K, 1]``).
        radius: r > 0, same broadcasting.
        epsilon: the per-weight ε > 0.
        generator: the only source of randomness.

    Returns:
        ``(randomized, num_clipped)``: a tensor of x's shape and dtype holding only the two
        values of :func:`two_point_values`, and the number of entries that were outside the
        range.

    References:
        001_8ad797a147f2b989.txt, eq. 2, Algorithm 2, Theorem 1, Lemma 2.
    """
    p, outside, c, r = _probability_and_count(x, center, radius, epsilon)
    u = rand(x.shape, generator, dtype=torch.float64).to(x.device)
    high = torch.lt(u, p)
    del u, p
    half_width = r / math.tanh(0.5 * epsilon)
    result = torch.where(high, (c + half_width).to(x.dtype), (c - half_width).to(x.dtype))
    return result, outside


def two_point_randomize_per_client(
    x: Tensor,
    center: float | Tensor,
    radius: float | Tensor,
    epsilon: float,
    generators: Sequence[NoiseGenerator],
) -> tuple[Tensor, int]:
    """Like :func:`two_point_randomize`, but row k uses ``generators[k]``.

    Row k of the result equals ``two_point_randomize(x[k:k+1], c_k, r_k, epsilon,
    generators[k])`` with c and r broadcast to x and sliced the same way — what a sequential
    engine computes for client k alone.

    Args:
        x: a floating tensor ``[K, ...]``.
        center: c, broadcastable to x.
        radius: r > 0, broadcastable to x.
        epsilon: ε > 0.
        generators: K generators, one per client row.

    Returns:
        ``(randomized, num_clipped)`` over the whole cohort.

    References:
        001_8ad797a147f2b989.txt, eq. 2.
    """
    if x.dim() < 1 or len(generators) != x.shape[0]:
        raise ConfigError(
            f"`generators` must hold one generator per client row of x [K, ...]. Found "
            f"{len(generators)} for shape {tuple(x.shape)}."
        )
    c, r = (torch.broadcast_to(t, x.shape) for t in _as_range(center, radius, x))
    rows = []
    total = 0
    for k, gen in enumerate(generators):
        row, clipped = two_point_randomize(x[k : k + 1], c[k : k + 1], r[k : k + 1], epsilon, gen)
        rows.append(row)
        total += clipped
    return torch.cat(rows, dim=0), total


def two_point_event(epsilon: float) -> dp_accounting.DpEvent:
    """The DP event of randomizing one weight: binary randomized response.

    ``RandomizedResponseDpEvent(noise_parameter=2·p_f, num_buckets=2)`` — keep the input bit
    with probability 1 − p_f, flip with p_f — is pure ε'-DP with ε' = ln((1 − p_f)/p_f) <= ε
    (see the module docstring). Account for it under ``NeighboringRelation.REPLACE_ONE``; the
    RDP and PLD accountants of dp-accounting 0.6.0 both support it there.

    Args:
        epsilon: the per-weight ε.

    Returns:
        the event.

    References:
        001_8ad797a147f2b989.txt, Theorem 1; dp_accounting ``RandomizedResponseDpEvent``.
    """
    return dp_accounting.RandomizedResponseDpEvent(
        noise_parameter=2.0 * two_point_flip_probability(epsilon), num_buckets=2
    )


def two_point_release_event(epsilon: float, num_weights: int) -> dp_accounting.DpEvent:
    """The DP event of one client's upload of d randomized weights: d-fold composition.

    Without a trusted shuffler the server links the d weights of an upload, so one upload is
    the composition of d randomized responses (d·ε-LDP as pure DP; an (ε, δ) accountant may
    give less at δ > 0).

    Caution: dp-accounting 0.6.0's ``PLDAccountant`` composes a ``RandomizedResponseDpEvent``
    once and ignores the count (of a ``SelfComposedDpEvent`` or of ``compose(event, count)``),
    so it reports ε instead of d·ε for this event. Account for it with the RDP accountant, or
    build ``privacy_loss_distribution.from_randomized_response(...).self_compose(d)`` directly.

    Args:
        epsilon: the per-weight ε.
        num_weights: d >= 1.

    Returns:
        ``SelfComposedDpEvent(two_point_event(epsilon), d)``.

    References:
        001_8ad797a147f2b989.txt, §4.2 ("the privacy budget of LDP will grow to Tdε").
    """
    if isinstance(num_weights, bool) or not isinstance(num_weights, int) or num_weights < 1:
        raise ConfigError(f"`num_weights` must be a positive integer. Found {num_weights!r}.")
    return dp_accounting.SelfComposedDpEvent(two_point_event(epsilon), num_weights)
