"""Cryptographic SecAgg+ masks: Flower's ``pseudo_rand_gen`` replaced by a ChaCha20 expansion.

Flower 1.42 expands every SecAgg+ mask seed (a client's private mask seed, and the pairwise keys
two clients agree on) with ``np.random.RandomState`` seeded by a **32-bit XOR fold** of the
seed: anyone who tries the 2^32 folds recovers a mask, and MT19937 is not a cryptographic
generator. :func:`chacha_rand_gen` has the same signature and output shapes and expands the
whole seed instead: key = SHA-256(``DOMAIN`` ‖ seed), ChaCha20 keystream (all-zero nonce and
counter: a key is used for one expansion of one call; the seeds are fresh per round) read as
little-endian uint64 words, the low ``log2(num_range)`` bits of each word kept. ``num_range``
must be a power of two (dpfl's :func:`dpfl.runtime.flower.secagg.secagg_settings` always
uses one): the values are then exactly uniform on ``[0, num_range)`` (Flower's draws stop at
``num_range - 2``), which is what a one-time pad modulo ``num_range`` needs.

:func:`install` puts it in every module namespace that imported Flower's function — the
workflow (server: unmasking), the client mod (masking) and the utility module itself — and is
idempotent; :mod:`.server_app`, :mod:`.client_app` and :mod:`.transport` call it on import, so the
ServerApp process and every ClientApp process use it. Both sides must: a client masking with one
generator and a server unmasking with the other yields garbage (``decode`` then refuses it).

No torch here: the ClientApp imports this module.
"""

from __future__ import annotations

import hashlib
import importlib

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = ["DOMAIN", "PATCHED_MODULES", "chacha_rand_gen", "install", "installed", "uninstall"]

DOMAIN = b"dpfl-secaggplus-mask-v1"
"""Domain separation of the key derivation."""

PATCHED_MODULES = (
    "flwr.common.secure_aggregation.secaggplus_utils",
    "flwr.server.workflow.secure_aggregation.secaggplus_workflow",
    "flwr.client.mod.secure_aggregation.secaggplus_mod",
)
"""The modules whose ``pseudo_rand_gen`` name :func:`install` rebinds (flwr 1.42)."""

_FLOWER: dict[str, object] = {}
"""Flower's own ``pseudo_rand_gen`` of each patched module, kept by :func:`install` for :func:`uninstall`."""

_NONCE = bytes(16)  # ChaCha20 in `cryptography`: 4-byte little-endian counter + 12-byte nonce


def chacha_rand_gen(seed: bytes, num_range: int, dimensions_list: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Uniform int64 values in ``[0, num_range)`` of the given shapes, expanded from ``seed``.

    Args:
        seed: The mask seed (any length; Flower's are 32 or 44 bytes).
        num_range: The modulus; a power of two between 2 and 2**63.
        dimensions_list: One shape per output array; ``()`` gives a 0-d array.

    Returns:
        One int64 array per shape, deterministic in (seed, num_range, dimensions_list).

    Raises:
        ValueError: If ``num_range`` is not a power of two in ``[2, 2**63]``.
    """
    num_range = int(num_range)
    if num_range < 2 or num_range > 2**63 or num_range & (num_range - 1):
        raise ValueError(f"num_range={num_range} must be a power of two in [2, 2**63] for exactly uniform masks")
    key = hashlib.sha256(DOMAIN + bytes(seed)).digest()
    sizes = [int(np.prod(d, dtype=np.int64)) if len(d) else 1 for d in dimensions_list]
    total = sum(sizes)
    stream = Cipher(algorithms.ChaCha20(key, _NONCE), mode=None).encryptor().update(bytes(8 * total))
    words = np.frombuffer(stream, dtype="<u8") & np.uint64(num_range - 1)
    values = words.astype(np.int64)
    out: list[np.ndarray] = []
    at = 0
    for dims, size in zip(dimensions_list, sizes, strict=True):
        part = values[at:at + size]
        at += size
        out.append(np.array(part[0], dtype=np.int64) if len(dims) == 0 else part.reshape(dims).copy())
    return out


def installed() -> bool:
    """Whether every module of :data:`PATCHED_MODULES` uses :func:`chacha_rand_gen`."""
    return all(getattr(importlib.import_module(m), "pseudo_rand_gen", None) is chacha_rand_gen
               for m in PATCHED_MODULES)


def install() -> None:
    """Rebind ``pseudo_rand_gen`` to :func:`chacha_rand_gen` in :data:`PATCHED_MODULES` (idempotent).

    Raises:
        ImportError: If a module is missing, or it has no ``pseudo_rand_gen`` (another Flower
            version: refuse rather than mask with the weak generator).
    """
    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if not hasattr(module, "pseudo_rand_gen"):
            raise ImportError(f"{name} has no pseudo_rand_gen: this Flower version masks differently; dpfl's "
                              "cryptographic masks cannot be installed")
        if module.pseudo_rand_gen is not chacha_rand_gen:
            _FLOWER.setdefault(name, module.pseudo_rand_gen)
        module.pseudo_rand_gen = chacha_rand_gen  # type: ignore[attr-defined]


def uninstall() -> None:
    """Give the patched modules Flower's own ``pseudo_rand_gen`` back (a process that must unmask
    the sums of ClientApps that mask with Flower's generator; no-op if never installed)."""
    for name, original in _FLOWER.items():
        importlib.import_module(name).pseudo_rand_gen = original  # type: ignore[attr-defined]
