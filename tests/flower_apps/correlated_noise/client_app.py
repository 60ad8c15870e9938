"""correlated_noise: the ClientApp — message_dp's, unchanged (it trains and returns its model; the
server clips the update and adds the noise)."""

from __future__ import annotations

from flower_apps.message_dp.client_app import app

__all__ = ["app"]
