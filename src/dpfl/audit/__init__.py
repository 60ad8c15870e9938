"""Empirical privacy auditing: canary clients inserted into a real run, one-shot ε estimate.

:mod:`dpfl.audit.estimate` turns canary cosines into an ε with an interval;
:mod:`dpfl.audit.canary` wraps an algorithm so canaries pass through its clipping and noise;
:mod:`dpfl.audit.reach` says how large an ε the audit could show at all (the same audit with the
noise removed) and gives the verdict: violation, consistent or inconclusive.
"""

from dpfl.audit.estimate import EpsilonEstimate, epsilon_from_mu, estimate_epsilon, separation_mu
from dpfl.audit.reach import reach_cap, reach_mu, verdict

__all__ = ["EpsilonEstimate", "epsilon_from_mu", "estimate_epsilon", "reach_cap", "reach_mu", "separation_mu",
           "verdict"]
