"""Boundary checks shared by the model builders; every failure is a ConfigError naming the value."""

from __future__ import annotations

import math

from dpfl.errors import ConfigError


def positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int ≥ 1 (bools rejected), else raise ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`{name}` must be a positive integer. Found {value!r}.")
    return value


def non_negative_float(name: str, value: object) -> float:
    """Return ``float(value)`` if it is a finite real ≥ 0 (bools rejected), else raise ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"`{name}` must be a non-negative number. Found {value!r}.")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"`{name}` must be a finite non-negative number. Found {value!r}.")
    return float(value)


def boolean(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool, else raise ConfigError."""
    if not isinstance(value, bool):
        raise ConfigError(f"`{name}` must be true or false. Found {value!r}.")
    return value


def choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ConfigError listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"`{name}` must be one of {list(choices)}. Found {value!r}.")
    return value


def image_shape(model: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """Return ``(C, H, W)`` if ``input_shape`` has three dimensions, else raise ConfigError."""
    if len(input_shape) != 3:
        raise ConfigError(
            f"model {model!r} needs an image `input_shape` (channels, height, width). "
            f"Found {input_shape!r}."
        )
    channels, height, width = input_shape
    return channels, height, width


def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Spatial size after a convolution or pooling (floor mode, dilation 1)."""
    return (size + 2 * padding - kernel) // stride + 1


def spatial_at_least_one(model: str, input_shape: tuple[int, ...], sizes: tuple[int, int]) -> None:
    """Raise ConfigError if the feature map shrank to nothing."""
    if min(sizes) < 1:
        raise ConfigError(
            f"`input_shape` {input_shape!r} is too small for model {model!r}: its feature map "
            f"would shrink to {sizes[0]}x{sizes[1]}."
        )
