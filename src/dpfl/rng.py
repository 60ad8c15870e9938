"""Randomness: one root seed becomes an independent ``torch.Generator`` per (round, client, purpose).

Nothing in dpfl reads a global RNG. Every randomized step takes a generator made here, so the
vectorized and the sequential engine draw the same numbers, and a resumed run continues the same
streams (a stream depends only on its key, never on how many numbers other streams drew).

Reproducible mode derives a 64-bit seed from ``blake2b(root_seed, round, client, purpose)``.
Secure mode (``SeedSequence.secure()``) seeds every generator from the OS CSPRNG
(``os.urandom``) and refuses to hand out the same seed twice; it is for deployments, where a
predictable noise stream would void the privacy guarantee. A seed alone is not enough there: torch's
CPU generator (MT19937) keeps only 32 bits of ``manual_seed``, so two independently seeded streams
(two clients, two rounds) would be the same stream with probability 2^-32 per pair (the birthday
bound: about 10^-4 per round for 1,000 clients). Secure mode therefore fills the whole MT19937 state,
624 words, from ``os.urandom`` (:func:`fill_state_from_os`); CUDA generators (Philox) take 64 bits of
seed and keep them.

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
     "randomizer", "range", "misc", "rounding", "absent_shares", "coin", "share_sum", "correlated_noise"}
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
        if self.secure and gen.device.type == "cpu":
            fill_state_from_os(gen)
        return gen


_MT_OFFSET, _MT_WORDS, _STATE_BYTES = 24, 624, 5056


def fill_state_from_os(gen: torch.Generator) -> torch.Generator:
    """Fill a CPU generator's whole MT19937 state (624 32-bit words) from ``os.urandom``.

    torch's CPU generator state is ``CPUGeneratorImplState``: the seed (int64), ``left`` and
    ``seeded`` (int32 each), ``next`` (uint64), then the 624 state words stored as uint64 from byte
    24 (``left`` = 1 after ``manual_seed``: the next draw regenerates from these words). The layout
    is checked by reading the state back.

    Raises:
        ConfigError: a generator state of another size or layout (a torch that changed it).
    """
    state = gen.get_state()
    if state.numel() != _STATE_BYTES:
        raise ConfigError(f"torch's CPU generator state has {state.numel()} bytes, not {_STATE_BYTES}: secure mode "
                          "cannot fill it; refusing to fall back to a 32-bit seed.")
    words = os.urandom(4 * _MT_WORDS)
    mt = b"".join(words[i:i + 4] + b"\0\0\0\0" for i in range(0, len(words), 4))
    raw = bytearray(state.numpy().tobytes())
    raw[_MT_OFFSET:_MT_OFFSET + 8 * _MT_WORDS] = mt
    new = torch.frombuffer(raw, dtype=torch.uint8).clone()
    gen.set_state(new)
    words_at = slice(_MT_OFFSET, _MT_OFFSET + 8 * _MT_WORDS)
    if not torch.equal(gen.get_state()[words_at], new[words_at]):
        raise ConfigError("torch's CPU generator did not keep the state it was given: secure mode cannot fill it.")
    return gen


SERVER = -1  # the `client` key used for server-side streams (sampling, server noise)
