"""DP-SGD's step noise std z·C/(q·n) (Abadi et al. 2016, Alg. 1) by hand, and its bad inputs."""

from __future__ import annotations

import pytest

from dpfl.errors import ConfigError
from dpfl.privacy.calibration import dp_sgd_step_noise_std


def test_hand_values() -> None:
    # z = 1.1, C = 0.5, q = 0.05, n = 400: expected batch 20, sum noise 0.55 → 0.0275 per coordinate
    assert dp_sgd_step_noise_std(1.1, 0.5, 0.05, 400) == pytest.approx(0.0275, rel=1e-12)
    assert dp_sgd_step_noise_std(0.0, 0.5, 1.0, 10) == 0.0


@pytest.mark.parametrize(("args", "name"), [((-1.0, 1.0, 0.1, 10), "noise_multiplier"),
                                            ((1.0, 0.0, 0.1, 10), "clip_norm"),
                                            ((1.0, 1.0, 1.5, 10), "sample_rate"),
                                            ((1.0, 1.0, 0.1, 0), "num_samples")])
def test_bad_values_are_named(args: tuple, name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        dp_sgd_step_noise_std(*args)
