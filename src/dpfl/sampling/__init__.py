"""dpfl.sampling: client samplers that also describe their own accounting event."""

from dpfl.sampling.clients import (
    AllClients,
    ClientSampler,
    FixedSizeSampler,
    PoissonSampler,
    sampler_from_description,
)

__all__ = [
    "AllClients",
    "ClientSampler",
    "FixedSizeSampler",
    "PoissonSampler",
    "sampler_from_description",
]
