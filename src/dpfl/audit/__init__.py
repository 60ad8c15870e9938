"""Empirical privacy auditing: canary clients inserted into a real run, one-shot ε estimate.

:mod:`dpfl.audit.estimate` turns canary cosines into an ε with an interval;
:mod:`dpfl.audit.canary` wraps an algorithm so canaries pass through its clipping and noise.
"""

from dpfl.audit.estimate import EpsilonEstimate, epsilon_from_mu, estimate_epsilon, separation_mu

__all__ = ["EpsilonEstimate", "epsilon_from_mu", "estimate_epsilon", "separation_mu"]
