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

MT19937 is not a cryptographic generator: an observer of enough of one stream's output can
reconstruct its state and predict the rest. The noise streams can instead come from ChaCha20
(:class:`CsprngGenerator`: the ChaCha20 keystream, 20 rounds, as a numpy ``BitGenerator`` from the
``randomgen`` package, so numpy's own samplers — normal, Poisson, integers, permutation — draw
from its bits), each stream under a fresh 256-bit key from ``os.urandom``. A sequence made with
``noise="chacha20"`` (``SeedSequence.secure_mode(generator="chacha20")`` in a deployment,
``SeedSequence(seed, noise="chacha20")`` for a simulation whose data batching and model stay
seeded) hands one out per stream from :meth:`SeedSequence.noise_generator`; the draws go through
:mod:`dpfl.privacy.mechanisms.draw`, which takes either kind. :meth:`SeedSequence.generator` always
returns a ``torch.Generator`` (data batching, model initialization, the audit's canaries).

This module is a leaf: it imports nothing else from dpfl except :mod:`dpfl.errors`.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from dpfl.errors import ConfigError

# Purposes are short fixed names so that two call sites never collide by accident.
PURPOSES = frozenset(
    {"sample", "batch", "noise", "server_noise", "topup", "topup_count", "init", "partition", "shuffle",
     "randomizer", "range", "misc", "rounding", "absent_shares", "coin", "share_sum", "correlated_noise"}
)


#: The purposes of streams that draw noise, sampling coins or shuffles (what
#: :meth:`SeedSequence.noise_generator` serves); the others — data batching, model initialization,
#: data partition, miscellaneous public draws — always come from :meth:`SeedSequence.generator`.
NOISE_PURPOSES = PURPOSES - {"batch", "init", "partition", "misc"}

#: The generators a sequence can draw its noise streams from (:attr:`SeedSequence.noise`).
NOISE_KINDS = ("torch", "chacha20")

#: ChaCha's rounds: 20, the cipher of RFC 8439 (randomgen also offers reduced-round variants; they
#: are refused here).
CHACHA_ROUNDS = 20


class CsprngGenerator:
    """A numpy ``Generator`` over the ChaCha20 keystream (``randomgen.ChaCha``, 20 rounds).

    Every sampler of numpy's ``Generator`` — ``standard_normal``, ``poisson``, ``random``,
    ``integers``, ``permutation`` — then draws from ChaCha20 bits; :mod:`dpfl.privacy.mechanisms.draw`
    turns its draws into torch tensors. The keystream is the RFC 8439 block function with the
    256-bit key and a 128-bit block counter starting at 0 (``tests/statistical/test_csprng.py``
    checks it against the ``cryptography`` package's ChaCha20 and the RFC's test vector).

    Args:
        key: 32 bytes (or an integer below 2^256, read little-endian like the bytes); ``None``
            (the only use outside tests) draws 256 bits from ``os.urandom``.
        rounds: must be 20.

    Raises:
        ConfigError: a key of another length or range, or another number of rounds.

    >>> g = CsprngGenerator(key=bytes(32))
    >>> g.device.type, g.kind
    ('cpu', 'chacha20')
    """

    kind: str = "chacha20"

    def __init__(self, key: bytes | int | None = None, *, rounds: int = CHACHA_ROUNDS) -> None:
        if isinstance(rounds, bool) or rounds != CHACHA_ROUNDS:
            raise ConfigError(f"ChaCha must run {CHACHA_ROUNDS} rounds (ChaCha20). Found rounds={rounds!r}.")
        if key is None:
            key = os.urandom(32)
        if isinstance(key, (bytes, bytearray)):
            if len(key) != 32:
                raise ConfigError(f"a ChaCha20 key is 32 bytes. Found {len(key)} bytes.")
            value = int.from_bytes(key, "little")
        elif isinstance(key, int) and not isinstance(key, bool):
            if not 0 <= key < 2**256:
                raise ConfigError(f"a ChaCha20 key as an integer must be in [0, 2**256). Found {key}.")
            value = key
        else:
            raise ConfigError(f"a ChaCha20 key is 32 bytes or an integer. Found {type(key).__name__}.")
        # the cipher's state is built on the first draw (randomgen's constructor costs ~70 µs, and a
        # round makes streams it never draws from), once, under a lock: two threads drawing first
        # from one generator must not each build a stream under the same key
        self._key = value
        self._numpy: np.random.Generator | None = None
        self._building = threading.Lock()

    @property
    def numpy(self) -> np.random.Generator:
        """numpy's ``Generator`` over this stream's ChaCha20 bits."""
        if self._numpy is None:
            with self._building:
                if self._numpy is None:
                    from randomgen import ChaCha  # imported on first use: most runs never draw from it

                    bits = ChaCha(key=self._key, counter=0, rounds=CHACHA_ROUNDS)
                    if int(bits.state["state"]["rounds"]) != CHACHA_ROUNDS:
                        raise ConfigError("randomgen's ChaCha did not keep 20 rounds: refusing a weaker generator.")
                    self._numpy = np.random.Generator(bits)
        return self._numpy

    @property
    def bit_generator(self) -> Any:
        """The ``randomgen.ChaCha`` bit generator (20 rounds) under this stream's key."""
        return self.numpy.bit_generator

    @property
    def device(self) -> torch.device:
        """Where the draws are made: the CPU (a draw for another device is copied there)."""
        return torch.device("cpu")

    def __repr__(self) -> str:  # never the key
        return "CsprngGenerator(ChaCha20)"


#: What a noise draw takes: a torch generator (seeded, or MT19937 filled from the OS) or ChaCha20.
NoiseGenerator = torch.Generator | CsprngGenerator


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
        noise: what :meth:`noise_generator` hands out: ``"torch"`` — the stream's torch generator
            (:meth:`generator`, seeded or OS-filled as the mode says); ``"chacha20"`` — a
            :class:`CsprngGenerator` under a fresh key from ``os.urandom`` for every stream, in
            either mode (noise is then never reproducible).

    >>> s = SeedSequence(7)
    >>> a = s.generator(0, 3, "noise").initial_seed()
    >>> a == SeedSequence(7).generator(0, 3, "noise").initial_seed()
    True
    """

    root_seed: int | None
    secure: bool = False
    noise: str = "torch"
    _issued: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if self.noise not in NOISE_KINDS:
            raise ConfigError(f"`noise` must be one of {list(NOISE_KINDS)}. Found {self.noise!r}.")
        if not self.secure:
            if self.root_seed is None or isinstance(self.root_seed, bool):
                raise ConfigError(f"`seed` must be an integer in reproducible mode. Found {self.root_seed!r}.")
            if not 0 <= int(self.root_seed) < 2**63:
                raise ConfigError(f"`seed` must be in [0, 2**63). Found {self.root_seed}.")

    @classmethod
    def secure_mode(cls, generator: Literal["mt19937", "chacha20"] = "mt19937") -> SeedSequence:
        """A sequence seeded from the OS CSPRNG; see the module docstring.

        Args:
            generator: the noise streams' generator: ``"mt19937"`` — torch's, its whole state
                filled from ``os.urandom`` (fast; not a cryptographic generator); ``"chacha20"`` —
                a :class:`CsprngGenerator` under a fresh OS key per stream.
        """
        if generator not in ("mt19937", "chacha20"):
            raise ConfigError(f"the secure noise generator must be 'mt19937' or 'chacha20'. Found {generator!r}.")
        return cls(root_seed=None, secure=True, noise="chacha20" if generator == "chacha20" else "torch")

    @property
    def reproducible_noise(self) -> bool:
        """Whether the noise streams are a function of the root seed (seeded torch generators)."""
        return not self.secure and self.noise == "torch"

    def noise_source(self) -> str:
        """One line naming the generator that draws this sequence's noise streams."""
        if self.noise == "chacha20":
            return ("chacha20: ChaCha20 (20 rounds, randomgen) under a fresh 256-bit key from os.urandom per "
                    "stream, through numpy's samplers")
        if self.secure:
            return ("mt19937-os: torch's MT19937, its whole state filled from os.urandom per stream (unpredictable "
                    "seeds; not a cryptographic generator)")
        return ("seeded: torch generators derived from the run's seed (reproducible; anyone who knows the seed "
                "can recompute the noise)")

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

    def noise_generator(
        self, round_idx: int, client: int, purpose: str, device: str | torch.device = "cpu"
    ) -> NoiseGenerator:
        """The generator of noise stream (round, client, purpose): :meth:`generator`'s torch
        generator, or with ``noise="chacha20"`` a fresh :class:`CsprngGenerator` (it draws on the
        CPU whatever ``device``; :mod:`dpfl.privacy.mechanisms.draw` copies its draws there).

        Raises:
            ConfigError: a purpose that is not a noise stream's (:data:`NOISE_PURPOSES`).
        """
        if purpose not in NOISE_PURPOSES:
            raise ConfigError(f"{purpose!r} is not a noise stream's purpose; noise purposes: {sorted(NOISE_PURPOSES)}")
        if self.noise == "chacha20":
            return CsprngGenerator()
        return self.generator(round_idx, client, purpose, device)


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
