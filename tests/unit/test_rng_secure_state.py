"""Secure mode fills the whole MT19937 state of a CPU generator from the OS CSPRNG.

torch's CPU generator keeps 32 bits of ``manual_seed``: 64-bit seeds that agree in their low 32
bits give the same stream (checked here), so independently seeded deployment streams would collide
with probability 2^-32 per pair. ``fill_state_from_os`` replaces the 624 state words.
"""

from __future__ import annotations

import torch

from dpfl.rng import SeedSequence, fill_state_from_os


def test_a_torch_cpu_seed_keeps_32_bits() -> None:
    a = torch.rand(4, generator=torch.Generator().manual_seed(5))
    b = torch.rand(4, generator=torch.Generator().manual_seed(5 + 2**32))
    assert torch.equal(a, b)


def test_filled_states_differ_even_from_the_same_seed_and_draw_correctly() -> None:
    a = fill_state_from_os(torch.Generator().manual_seed(5))
    b = fill_state_from_os(torch.Generator().manual_seed(5))
    assert not torch.equal(torch.rand(8, generator=a), torch.rand(8, generator=b))
    # the filled stream is a working MT19937: 10^6 uniforms (mean 1/2 ± 4 SE, SE = 0.289/1000) and
    # normals (std within 2%)
    u = torch.rand(10**6, generator=a, dtype=torch.float64)
    assert abs(float(u.mean()) - 0.5) < 4 * 0.2887 / 1000
    assert abs(float(u.var()) - 1 / 12) < 0.02 / 12
    z = torch.randn(10**6, generator=b, dtype=torch.float64)
    assert abs(float(z.std()) - 1) < 0.02


def test_secure_mode_fills_the_state_and_reproducible_mode_keeps_its_streams() -> None:
    s = SeedSequence.secure_mode()
    g1, g2 = s.generator(0, 1, "noise"), s.generator(0, 1, "noise")
    assert not torch.equal(g1.get_state(), g2.get_state())
    # the state words are not those manual_seed derives from the generator's own seed
    plain = torch.Generator().manual_seed(g1.initial_seed())
    assert not torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=plain))
    r = SeedSequence(7)
    assert torch.equal(torch.rand(4, generator=r.generator(2, 3, "noise")),
                       torch.rand(4, generator=torch.Generator().manual_seed(r.seed(2, 3, "noise"))))
