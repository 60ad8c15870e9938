"""Every paper's noise calibration: one pure function per formula, floats in, float out.

Each function implements one numbered formula of one paper (file in ``shared/papers/``) exactly
as printed, validates its inputs at the boundary (:class:`~dpfl.errors.ConfigError`, naming the
parameter, the rule and the value), raises :class:`~dpfl.errors.PrivacyPreconditionError` when
the formula cannot apply (an exhausted budget, the log of a negative number), and emits a
:class:`~dpfl.privacy.notices.FormulaRangeWarning` when it is evaluated outside the range its
proof covers. Nothing here decides whether a paper's claim is *true*: the certified epsilon of
the noise actually added comes from ``dpfl.privacy.accounting``. The exact single-release
reference is the analytic Gaussian mechanism (Balle & Wang 2018, :mod:`.gaussian`).

Symbols keep the paper's letter only inside docstrings; names carry units and roles
(``noise_std`` is a standard deviation in parameter units, ``noise_multiplier`` is a standard
deviation divided by a sensitivity, ``epsilon_nats`` is an ε-MI-DP budget in nats).

One module per paper system (:mod:`.udp`, :mod:`.nbafl`, :mod:`.midp`, :mod:`.dp_fedavg`) and
one for the Gaussian mechanism (:mod:`.gaussian`); this package's namespace holds every function.
The package imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.privacy.notices`.
"""

from dpfl.privacy.calibration.dp_fedavg import (
    combined_noise_multiplier,
    dp_sgd_step_noise_std,
    dpfedavg_client_noise_std,
    skellam_share_variance,
    skellam_sum_variance,
    skellam_unsubtracted_variance,
    update_noise_multiplier,
)
from dpfl.privacy.calibration.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_noise_std,
    classical_gaussian_constant,
    classical_gaussian_noise_std,
)
from dpfl.privacy.calibration.midp import (
    midp_client_noise_std,
    midp_server_noise_std,
    pmidp_aggregation_weights,
    pmidp_client_noise_std,
)
from dpfl.privacy.calibration.nbafl import (
    nbafl_downlink_noise_std,
    nbafl_downlink_noise_std_k_random,
    nbafl_k_random_log_argument,
    nbafl_uplink_noise_std,
    nbafl_uplink_sensitivity,
)
from dpfl.privacy.calibration.udp import (
    udp_max_proven_epsilon,
    udp_noise_std,
    udp_noise_std_after_change,
    udp_sensitivity,
)

__all__ = [
    "analytic_gaussian_delta",
    "combined_noise_multiplier",
    "dp_sgd_step_noise_std",
    "update_noise_multiplier",
    "analytic_gaussian_noise_std",
    "classical_gaussian_constant",
    "classical_gaussian_noise_std",
    "dpfedavg_client_noise_std",
    "midp_client_noise_std",
    "midp_server_noise_std",
    "nbafl_downlink_noise_std",
    "nbafl_downlink_noise_std_k_random",
    "nbafl_k_random_log_argument",
    "nbafl_uplink_noise_std",
    "nbafl_uplink_sensitivity",
    "pmidp_aggregation_weights",
    "pmidp_client_noise_std",
    "skellam_share_variance",
    "skellam_sum_variance",
    "skellam_unsubtracted_variance",
    "udp_max_proven_epsilon",
    "udp_noise_std",
    "udp_noise_std_after_change",
    "udp_sensitivity",
]
