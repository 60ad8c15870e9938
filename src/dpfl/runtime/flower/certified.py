"""Moved to :mod:`dpfl.runtime.flowerapps.certified` (dpfl inside a user's Flower app); this path
stays importable for apps written against it."""

from dpfl.runtime.flowerapps.certified import (
    CertifiedLegacyStrategy,
    CertifiedStrategy,
    FlowerDp,
    RoundCertifier,
    read_flower_dp,
)

__all__ = ["CertifiedLegacyStrategy", "CertifiedStrategy", "FlowerDp", "RoundCertifier", "read_flower_dp"]
