"""Releases: what one observer saw in one round, one module per mechanism family.

Each module holds its frozen release type, how it serializes and how it is accounted; importing
this package registers every family (one line each below). Adding a mechanism is one module here
(its release type with a new ``kind``, its event, and — if dp-accounting cannot price the event —
its :func:`dpfl.privacy.accounting.registry.register_event` call), its tests, and its line here.
"""

from dpfl.privacy.releases.base import OBSERVERS, Observer, Release, release_kinds
from dpfl.privacy.releases.exact import ExactRelease
from dpfl.privacy.releases.factorization import FactorizationRelease
from dpfl.privacy.releases.federated import federated_round_releases
from dpfl.privacy.releases.gaussian import GaussianRelease
from dpfl.privacy.releases.sampled_gaussian import SampledGaussianRelease
from dpfl.privacy.releases.skellam import SkellamRelease
from dpfl.privacy.releases.tree import TreeRelease
from dpfl.privacy.releases.two_point import TwoPointRelease

__all__ = [
    "OBSERVERS",
    "ExactRelease",
    "FactorizationRelease",
    "GaussianRelease",
    "Observer",
    "Release",
    "SampledGaussianRelease",
    "SkellamRelease",
    "TreeRelease",
    "TwoPointRelease",
    "federated_round_releases",
    "release_kinds",
]
