"""001's two-point randomizer: exact privacy ratio, empirical output frequencies and
unbiasedness over 10^6 draws, including the range ends and out-of-range inputs.

Flake budget. Each empirical check is two-sided at 4 standard errors (false alarm 6.3e-5 under
a fresh seed); there are 3 ε × 7 inputs × 2 checks = 42 of them, so a correct implementation
would fail under a random seed with probability < 3e-3. The seeds are fixed, so the module is
deterministic for a given torch version.
"""

from __future__ import annotations

import math

import pytest
import torch

from dpfl.privacy.mechanisms import (
    two_point_flip_probability,
    two_point_probability_high,
    two_point_randomize,
    two_point_values,
)

N = 1_000_000
CENTER, RADIUS = 0.1, 0.075  # 001 §5 uses r = 0.075 (MNIST); a non-zero c exercises the shift
# range ends, interior points, and two inputs outside [c − r, c + r]
INPUTS = [
    CENTER - RADIUS,
    CENTER - RADIUS / 2,
    CENTER,
    CENTER + 0.3 * RADIUS,
    CENTER + RADIUS,
    CENTER - 3 * RADIUS,
    CENTER + 2 * RADIUS,
]


def _clip(w: float) -> float:
    return min(max(w, CENTER - RADIUS), CENTER + RADIUS)


def _eq2_probability_high(w: float, eps: float) -> float:
    """001 eq. 2 as printed: ((w − c)(e^ε − 1) + r(e^ε + 1)) / (2r(e^ε + 1))."""
    e = math.exp(eps)
    return ((w - CENTER) * (e - 1) + RADIUS * (e + 1)) / (2 * RADIUS * (e + 1))


@pytest.mark.parametrize("eps", [0.01, 0.1, 1.0, 5.0, 10.0, 30.0])
def test_exact_probability_ratio_is_at_most_e_to_the_epsilon(eps: float) -> None:
    grid = torch.linspace(CENTER - 2 * RADIUS, CENTER + 2 * RADIUS, 4001, dtype=torch.float64)
    p_high = two_point_probability_high(grid, CENTER, RADIUS, eps)
    for p in (p_high, 1.0 - p_high):  # both outputs
        ratio = (p.max() / p.min()).item()
        # The realized extremes are 1 − p_f and p_f with p_f >= 1/(e^ε + 1), so the ratio is at
        # most e^ε; 4 ulps allow for rounding the division and exp() in this check itself.
        assert ratio <= math.exp(eps) * (1 + 4 * 2.0**-52)
        # ... and it is attained at the range ends (no needless extra noise), up to rounding p_f
        # up onto the float64 coin's grid (one step 2^-53) and rounding (w − c)/r at the end
        # points (one more step): relative 2·2^-53/p_f (2e-15 at ε = 1, 2.4e-3 at ε = 30),
        # always towards more privacy.
        exact_p_f = 1 / (math.exp(eps) + 1)
        assert ratio == pytest.approx(math.exp(eps), rel=2 * 2.0**-53 / exact_p_f + 1e-12)
    # Every probability lies in [p_f, 1 − p_f].
    p_f = two_point_flip_probability(eps)
    assert p_high.min().item() >= p_f and p_high.max().item() <= 1 - p_f
    # It is eq. 2 as printed, for inputs in range; out-of-range inputs get their clipped value's.
    for w in INPUTS:
        value = two_point_probability_high(
            torch.tensor([w], dtype=torch.float64), CENTER, RADIUS, eps
        )
        assert value.item() == pytest.approx(
            _eq2_probability_high(_clip(w), eps), rel=1e-12, abs=1e-15
        )


@pytest.mark.parametrize("eps", [0.5, 1.0, 5.0])
def test_frequencies_and_unbiasedness_over_a_million_draws(eps: float) -> None:
    x = torch.tensor(INPUTS, dtype=torch.float32)[:, None].expand(len(INPUTS), N)
    gen = torch.Generator().manual_seed(int(eps * 1000))
    out, num_clipped = two_point_randomize(x, CENTER, RADIUS, eps, gen)
    assert num_clipped == 2 * N  # the last two rows are outside the range
    low, high = two_point_values(CENTER, RADIUS, eps)
    low32, high32 = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
    # The output takes exactly the two values.
    assert torch.all((out == low32) | (out == high32))
    half_width = RADIUS / math.tanh(eps / 2)  # r·(e^ε + 1)/(e^ε − 1)
    for row, w in enumerate(INPUTS):
        p = _eq2_probability_high(_clip(w), eps)
        # Frequency of the high value: binomial, SE = sqrt(p(1 − p)/n).
        freq = (out[row] == high32).double().mean().item()
        assert abs(freq - p) <= 4 * math.sqrt(p * (1 - p) / N)
        # Unbiased for the clipped input: the output is c ± r·coth(ε/2), so its std is
        # 2·r·coth(ε/2)·sqrt(p(1 − p)) and the mean's SE is that over sqrt(n).
        mean = out[row].double().mean().item()
        se = 2 * half_width * math.sqrt(p * (1 - p)) / math.sqrt(N)
        assert abs(mean - _clip(w)) <= 4 * se
