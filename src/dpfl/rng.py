"""Randomness: one root seed becomes an independent ``torch.Generator`` per (round, client, purpose).

Nothing in dpfl reads a global RNG. Every randomized step takes a generator made here, so the
vectorized and the sequential engine draw the same numbers, and a resumed run continues the same
streams (a stream depends only on its key, never on how many numbers other streams drew).

Reproducible mode derives a 64-bit seed from ``blake2b(root_seed, round, client, purpose)``.
Secure mode (``SeedSequence.secure()``) seeds every generator from the OS CSPRNG
(``os.urandom``) and refuses to hand out the same seed twice; it is for deployments, where a
predictable noise stream would void the privacy guarantee.

This module is a leaf: it imports nothing else from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass, field

import torch

from dpfl.errors import ConfigError

# Purposes are short fixed names so that two call sites never collide by accident.
PURPOSES = frozenset(
    {"sample", "batch", "noise", "server_noise", "topup", "topup_count", "init", "partition", "shuffle",
     "randomizer", "range", "misc", "rounding", "absent_shares", "coin", "share_sum"}
)


def _derive(root_seed: int, round_idx: int, client: int, purpose: str) -> int:
    payload = struct.pack("<qqq", root_seed, round_idx, client) + purpose.encode()
    digest = hashlib.blake2b(payload, digest_size=8).digest()
    # torch.Generator.manual_seed takes a non-negative int below 2**64.
    return int.from_bytes(digest, "little")


@dataclass
class SeedSequence:
    """Makes generators keyed by (round, client, purpose).

    Args:
        root_seed: the run's seed; ``None`` only together with ``secure=True``.
        secure: seed from ``os.urandom`` and never reuse a seed.

    >>> s = SeedSequence(7)
    >>> a = s.generator(0, 3, "noise").initial_seed()
    >>> a == SeedSequence(7).generator(0, 3, "noise").initial_seed()
    True
    """

    root_seed: int | None
    secure: bool = False
    _issued: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if not self.secure:
            if self.root_seed is None or isinstance(self.root_seed, bool):
                raise ConfigError(f"`seed` must be an integer in reproducible mode. Found {self.root_seed!r}.")
            if not 0 <= int(self.root_seed) < 2**63:
                raise ConfigError(f"`seed` must be in [0, 2**63). Found {self.root_seed}.")

    @classmethod
    def secure_mode(cls) -> SeedSequence:
        """A sequence seeded from the OS CSPRNG; see the module docstring."""
        return cls(root_seed=None, secure=True)

    def seed(self, round_idx: int, client: int, purpose: str) -> int:
        """The 64-bit seed of stream (round, client, purpose)."""
        if purpose not in PURPOSES:
            raise ConfigError(f"unknown RNG purpose {purpose!r}; valid: {sorted(PURPOSES)}")
        if self.secure:
            while True:
                value = int.from_bytes(os.urandom(8), "little")
                if value not in self._issued:
                    self._issued.add(value)
                    return value
        assert self.root_seed is not None  # checked in __post_init__
        return _derive(int(self.root_seed), int(round_idx), int(client), purpose)

    def generator(
        self, round_idx: int, client: int, purpose: str, device: str | torch.device = "cpu"
    ) -> torch.Generator:
        """A fresh generator for stream (round, client, purpose)."""
        gen = torch.Generator(device=device)
        gen.manual_seed(self.seed(round_idx, client, purpose))
        return gen


SERVER = -1  # the `client` key used for server-side streams (sampling, server noise)
