"""dpfl: differentially private federated learning with two epsilons per run."""

from dpfl.errors import ConfigError, DataFormatError, DpflError, PrivacyPreconditionError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataFormatError",
    "DpflError",
    "PrivacyPreconditionError",
    "__version__",
]
