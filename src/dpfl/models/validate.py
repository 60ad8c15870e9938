"""Which models dpfl can train privately: every problem is listed at once, each with its fix.

dpfl trains, clips, noises, aggregates and exports a model's *parameters* only; the engines run
the model with ``torch.func.functional_call`` on per-client parameters. A layer fits that when
its output for one sample depends only on that sample and the parameters, and when it keeps no
state between calls. :func:`check_model` refuses the layers that do not:

* **BatchNorm** (``nn.BatchNorm1d/2d/3d``, their lazy variants, ``nn.SyncBatchNorm``): in
  training its batch statistics mix the samples of a batch, so one sample's gradient depends on
  the others — a per-sample clip then no longer bounds one record's influence, and record-level
  DP (DP-SGD, 000's UDP) is void; and its running mean and variance are buffers updated from the
  client's data in ``forward``: un-noised statistics of client data that would leave the client
  with the model. Fix: ``nn.GroupNorm`` (or ``nn.LayerNorm``), which normalizes each sample on
  its own and holds no buffers; its affine parameters match BatchNorm's one for one.
* **InstanceNorm with ``track_running_stats=True``**: per-sample normalization, but the running
  statistics are the same un-noised data statistics. Fix: ``track_running_stats=False``.
* **Any other persistent buffer**: state that is neither trained, aggregated nor exported, so it
  would silently differ between clients and the server. Fix: a parameter, a plain attribute, or a
  non-persistent buffer (``register_buffer(name, t, persistent=False)``) for a constant.

The idea of collecting every offending layer with its fix follows opacus' module validators; the
code is dpfl's own. This module imports only torch and :mod:`dpfl.errors`.
"""

from __future__ import annotations

from torch import nn

from dpfl.errors import ConfigError

__all__ = ["check_model", "model_problems"]

_BATCH_NORM_WHY = (
    "its batch statistics mix the samples of a batch (a per-sample clip no longer bounds one "
    "record's influence: record-level DP is void) and its running statistics are un-noised "
    "statistics of the client's data that would leave the client"
)


def _groups(channels: int) -> int:
    """The largest number of groups <= 32 (Wu & He's default) that divides ``channels``."""
    return max(g for g in range(1, min(32, channels) + 1) if channels % g == 0)


def model_problems(module: nn.Module) -> list[str]:
    """One line per offending layer of ``module`` (empty if dpfl can train it)."""
    problems: list[str] = []
    for name, layer in module.named_modules():
        where = f"`{name}`" if name else "the model itself"
        kind = type(layer).__name__
        if (isinstance(layer, nn.modules.batchnorm._NormBase)
                and not isinstance(layer, nn.modules.instancenorm._InstanceNorm)):
            channels = int(getattr(layer, "num_features", 0) or 0)
            fix = f"nn.GroupNorm({_groups(channels)}, {channels})" if channels else "nn.GroupNorm(num_groups, channels)"
            problems.append(
                f"{where} ({kind}): BatchNorm is not supported: {_BATCH_NORM_WHY}. Fix: replace it by "
                f"{fix} (or nn.LayerNorm), which normalizes each sample on its own."
            )
            continue
        if isinstance(layer, nn.modules.instancenorm._InstanceNorm) and layer.track_running_stats:
            problems.append(
                f"{where} ({kind}): track_running_stats=True keeps running statistics of the client's "
                "data, un-noised, in buffers. Fix: track_running_stats=False."
            )
            continue
        persistent = [
            b for b, _ in layer.named_buffers(recurse=False) if b not in layer._non_persistent_buffers_set
        ]
        if persistent:
            problems.append(
                f"{where} ({kind}) holds buffer(s) {persistent}: dpfl trains, aggregates and exports "
                "parameters only, so buffers would differ between clients and the server. Fix: make "
                "them parameters, or constants (a plain attribute or register_buffer(..., persistent=False))."
            )
    return problems


def check_model(module: nn.Module) -> None:
    """Raise ConfigError listing every layer of ``module`` dpfl cannot train, each with its fix.

    >>> import torch.nn as nn
    >>> check_model(nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4)))  # fine: no output
    >>> check_model(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpfl.errors.ConfigError: the model has 1 layer dpfl cannot train: `1` (BatchNorm2d): ...
    """
    problems = model_problems(module)
    if problems:
        layers = "layer" if len(problems) == 1 else "layers"
        raise ConfigError(f"the model has {len(problems)} {layers} dpfl cannot train: " + "; ".join(problems))
