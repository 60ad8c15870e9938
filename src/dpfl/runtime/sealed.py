"""Sealed reports for split & shuffle across processes (001 §3.3, Algorithm 3).

A client seals its randomized report for the *shuffler*, and the server only relays the sealed
bytes: X25519 key agreement with a fresh ephemeral key per report, HKDF-SHA256, AES-256-GCM with
the round as associated data (a report cannot be replayed into another round). Every report of
a round has the same length (P float32 values), so the length reveals nothing either. Built on
the ``cryptography`` package (a Flower dependency); nothing here is home-made cryptography.

The shuffler (:func:`open_and_mix`) opens the reports, drops the ones that are malformed, and
hands back per parameter id the multiset of reported values
(:class:`dpfl.server.shuffle.IdMultisets`: values sorted per id, no client ids, no order).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from dpfl.errors import ConfigError
from dpfl.server.shuffle import IdMultisets, Shuffler

__all__ = ["ShufflerKey", "open_and_mix", "seal", "sealed_length"]

_INFO = b"dpfl split-and-shuffle report v1"
_RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def _aead_key(shared: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(shared)


def _aad(round_idx: int, num_params: int) -> bytes:
    return f"round={int(round_idx)};params={int(num_params)}".encode()


def sealed_length(num_params: int) -> int:
    """Bytes of one sealed report: ephemeral key (32) + nonce (12) + P float32 + tag (16)."""
    return 32 + 12 + 4 * int(num_params) + 16


@dataclass
class ShufflerKey:
    """The shuffler's key pair (kept on the shuffler's node; only ``public`` leaves it)."""

    private: X25519PrivateKey

    @classmethod
    def generate(cls) -> ShufflerKey:
        return cls(X25519PrivateKey.generate())

    @classmethod
    def from_bytes(cls, raw: bytes) -> ShufflerKey:
        return cls(X25519PrivateKey.from_private_bytes(raw))

    def to_bytes(self) -> bytes:
        return self.private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                          serialization.NoEncryption())

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes(*_RAW)


def seal(report: torch.Tensor, shuffler_public: bytes, round_idx: int) -> bytes:
    """Seal one client's report [P] (sent as float32) for the shuffler."""
    if report.dim() != 1:
        raise ConfigError(f"a report is one flat vector [P]; got shape {tuple(report.shape)}")
    eph = X25519PrivateKey.generate()
    key = _aead_key(eph.exchange(X25519PublicKey.from_public_bytes(shuffler_public)))
    nonce = os.urandom(12)
    payload = np.ascontiguousarray(report.detach().cpu().numpy(), dtype="<f4").tobytes()
    ct = AESGCM(key).encrypt(nonce, payload, _aad(round_idx, report.numel()))
    return eph.public_key().public_bytes(*_RAW) + nonce + ct


def _open(blob: bytes, key: ShufflerKey, round_idx: int, num_params: int) -> torch.Tensor | None:
    if len(blob) != sealed_length(num_params):
        return None
    eph, nonce, ct = blob[:32], blob[32:44], blob[44:]
    try:
        shared = key.private.exchange(X25519PublicKey.from_public_bytes(eph))
        payload = AESGCM(_aead_key(shared)).decrypt(nonce, ct, _aad(round_idx, num_params))
    except (InvalidTag, ValueError):
        return None
    values = torch.from_numpy(np.frombuffer(payload, dtype="<f4").copy())
    if not bool(torch.isfinite(values).all()):
        return None
    return values


def open_and_mix(
    blobs: list[bytes], key: ShufflerKey, round_idx: int, num_params: int
) -> tuple[IdMultisets | None, list[int]]:
    """The shuffler's work: open every report, reject the bad ones (by position in ``blobs``),
    and return per id the multiset of the valid reports' values (None if none is valid)."""
    rows, rejected = [], []
    for i, blob in enumerate(blobs):
        values = _open(blob, key, round_idx, num_params)
        if values is None:
            rejected.append(i)
        else:
            rows.append(values)
    if not rows:
        return None, rejected
    return Shuffler.shuffle_stacked(torch.stack(rows)), rejected
