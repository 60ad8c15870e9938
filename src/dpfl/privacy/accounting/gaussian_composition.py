"""The exact accountant of compositions of unsampled Gaussian mechanisms (closed form, no grid).

This module imports nothing from dpfl.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting as dpa
from dp_accounting import dp_event as dpe
from dp_accounting import privacy_accountant as dpa_pa
from scipy import stats

__all__ = ["GaussianCompositionAccountant"]


class GaussianCompositionAccountant(dpa_pa.PrivacyAccountant):
    """Exact accountant for compositions of *unsampled* Gaussian mechanisms.

    k Gaussian releases with noise multipliers z_i (noise std / shift) compose to one Gaussian
    mechanism with multiplier 1/sqrt(Σ 1/z_i²); its exact ε(δ) is the analytic Gaussian
    (``dp_accounting.get_epsilon_gaussian``). This is the privacy loss distribution of the
    composition in closed form — no grid, so it stays exact and instant for very small noise.
    Under replace-one the multiplier is taken relative to the replace-one sensitivity (the shift),
    so the relation does not change the numbers.

    References:
        Balle & Wang 2018 (analytic Gaussian, eq. 6); Dong, Roth, Su 2019 (Gaussian DP
        composition).
    """

    def __init__(
        self, neighboring_relation: dpa.NeighboringRelation = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    ) -> None:
        super().__init__(neighboring_relation)
        self._inverse_square_sum = 0.0
        self._non_private = False

    def _maybe_compose(self, event: dpe.DpEvent, count: int, do_compose: bool) -> Any:
        if isinstance(event, dpa.NoOpDpEvent):
            return None
        if isinstance(event, dpa.NonPrivateDpEvent):
            if do_compose:
                self._non_private = True
            return None
        if isinstance(event, dpa.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dpa.ComposedDpEvent):
            for e in event.events:
                err = self._maybe_compose(e, count, do_compose)
                if err is not None:
                    return err
            return None
        if isinstance(event, dpa.GaussianDpEvent):
            if do_compose:
                if event.noise_multiplier == 0:
                    self._non_private = True
                else:
                    self._inverse_square_sum += count / event.noise_multiplier**2
            return None
        return self.CompositionErrorDetails(
            invalid_event=event, error_message="only unsampled Gaussian compositions are supported"
        )

    @property
    def effective_noise_multiplier(self) -> float:
        """1/sqrt(Σ 1/z_i²) of the composition so far (inf when nothing was released)."""
        if self._non_private:
            return 0.0
        if self._inverse_square_sum == 0:
            return math.inf
        return 1.0 / math.sqrt(self._inverse_square_sum)

    def get_epsilon(self, target_delta: float) -> float:
        z = self.effective_noise_multiplier
        if z == 0:
            return math.inf
        if math.isinf(z):
            return 0.0
        return float(dpa.get_epsilon_gaussian(z, target_delta))

    def get_delta(self, target_epsilon: float) -> float:
        z = self.effective_noise_multiplier
        if z == 0:
            return 1.0
        if math.isinf(z):
            return 0.0
        # Balle & Wang 2018, Thm 8: δ(ε) = Φ(1/(2z) − εz) − e^ε Φ(−1/(2z) − εz), in log space.
        a = stats.norm.logcdf(1.0 / (2.0 * z) - target_epsilon * z)
        b = target_epsilon + stats.norm.logcdf(-1.0 / (2.0 * z) - target_epsilon * z)
        return float(math.exp(a) * -math.expm1(b - a)) if b < a else 0.0
