"""dpfl.sampling: client samplers that also describe their own accounting event."""

from dpfl.sampling.clients import (
    AllClients,
    ClientSampler,
    FixedSizeSampler,
    PoissonSampler,
    sampler_from_description,
)
from dpfl.sampling.schemas import (
    AvailabilitySampler,
    CyclicPoissonSampler,
    MinSeparationSampler,
    ScheduleSampler,
)

__all__ = [
    "AllClients",
    "AvailabilitySampler",
    "CyclicPoissonSampler",
    "MinSeparationSampler",
    "ScheduleSampler",
    "ClientSampler",
    "FixedSizeSampler",
    "PoissonSampler",
    "sampler_from_description",
]
