"""Errors and warnings of the Python API that are dpfl's own, with the valid values (issue item 4).
Each test fails on the code before the change named in its docstring."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import dpfl
from dpfl.errors import ConfigError


def _data(shape: tuple[int, ...] = (8,), n: int = 60) -> dpfl.FederatedData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(n, *shape, generator=g), torch.randint(0, 3, (n,), generator=g)
    return dpfl.FederatedData.from_tensors(x[:48], y[:48], x[48:], y[48:], num_classes=3,
                                           partition={"kind": "iid", "num_clients": 4})


def test_federated_data_repr_is_a_summary_without_tensors() -> None:
    """Before: the dataclass repr printed every tensor."""
    text = repr(_data())
    assert text == ("FederatedData('user-data': 4 clients (kind='iid', num_clients=4), 48 training and 12 test "
                    "samples, input shape (8,) float32, 3 classes)")
    assert "tensor" not in text


def test_certified_epsilon_names_the_valid_observers() -> None:
    """Before: ``certified_epsilon("Server")`` raised a bare ``KeyError: 'Server'``."""
    res = dpfl.train(nn.Linear(8, 3), _data(), "dp-fedavg", options={"noise_multiplier": 1.0, "clip_norm": 1.0},
                     rounds=1, store=None, progress=False, notice=None, engine="sequential")
    assert res.certified_epsilon("Server") == res.certified_epsilon("server")  # any case
    with pytest.raises(ConfigError, match=r"`observer` must be one of 'server', 'public' .*Found 'srv'"):
        res.certified_epsilon("srv")
    plain = dpfl.train(nn.Linear(8, 3), _data(), "fedavg", rounds=1, store=None, progress=False, notice=None,
                       engine="sequential")
    assert plain.certified_epsilon("public") is None
    with pytest.raises(ConfigError, match="must be one of 'server', 'public'"):
        plain.certified_epsilon("clients")


def test_both_noise_settings_is_one_line_naming_both_options_and_values() -> None:
    """Before: "algorithm 'dp-fedavg': ``: Value error, give exactly one of ..." (the library's text)."""
    with pytest.raises(ConfigError) as err:
        dpfl.train(nn.Linear(8, 3), _data(), "dp-fedavg", rounds=1, store=None, progress=False, notice=None,
                   options={"noise_multiplier": 1.0, "target_epsilon": 3.0, "clip_norm": 1.0})
    assert str(err.value) == (
        "algorithm 'dp-fedavg': give exactly one of `noise_multiplier` (σ itself) and `target_epsilon` (σ "
        "calibrated to the paper's ε). Found both (noise_multiplier=1.0, target_epsilon=3.0).")


def test_channels_last_inputs_report_the_model_failure_first(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: "engine: sequential (the vectorized engine cannot train Sequential: ..." was printed
    before the real error."""
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    with pytest.raises(ConfigError, match=r"fails on inputs of shape \(2, 8, 8, 1\).*channels-last.*permute"):
        dpfl.train(model, _data((8, 8, 1)), "fedavg", rounds=1, store=None, progress=False)
    assert "engine" not in capsys.readouterr().out


def test_a_model_returning_probabilities_is_warned_about_once() -> None:
    """Before: a model ending in softmax trained silently."""
    model = nn.Sequential(nn.Linear(8, 3), nn.Softmax(dim=1))
    heard: list[str] = []
    dpfl.train(model, _data(), "fedavg", rounds=1, store=None, progress=False, notice=heard.append,
               engine="sequential")
    said = [m for m in heard if "returns probabilities" in m]
    assert len(said) == 1 and "drop the final softmax" in said[0], heard
    with warnings.catch_warnings(record=True) as caught:  # notice=None: a UserWarning
        warnings.simplefilter("always")
        dpfl.train(model, _data(), "fedavg", rounds=1, store=None, progress=False, notice=None, engine="sequential")
    assert sum("returns probabilities" in str(w.message) for w in caught) == 1
    # logits and log-probabilities (log_softmax of them is themselves: the same loss) are not warned about
    for last in (nn.Identity(), nn.LogSoftmax(dim=1)):
        heard.clear()
        dpfl.train(nn.Sequential(nn.Linear(8, 3), last), _data(), "fedavg", rounds=1, store=None, progress=False,
                   notice=heard.append, engine="sequential")
        assert not any("probabilities" in m for m in heard), heard
