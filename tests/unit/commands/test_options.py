"""`dpfl options`: every algorithm's options from the pydantic model its builder validates with,
and docs/options.md is that reference, current."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from dpfl.algorithms.registry import algorithms
from dpfl.cli import main
from dpfl.commands.options import OPTION_MODELS, describe, markdown, option_model

DOCS = Path(__file__).resolve().parents[3] / "docs" / "options.md"


class _Seen(Exception):
    def __init__(self, model: Any, options: dict[str, Any]) -> None:
        super().__init__(model.__name__)
        self.model, self.options = model, options


def _validated_with(name: str) -> _Seen:
    """The model (and options) the builder of ``name`` passes to parse_options."""

    def spy(model: Any, options: dict[str, Any], algorithm: str) -> Any:
        raise _Seen(model, options)

    factory = algorithms()[name]
    patches = [mock.patch("dpfl.algorithms.registry.parse_options", spy)]
    module = sys.modules[factory.__module__]
    if hasattr(module, "parse_options"):
        patches.append(mock.patch.object(module, "parse_options", spy))
    # entered and left in stack order: two patches of one attribute (the builder's module may be
    # the registry itself) must restore the original, not each other's spy
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        with pytest.raises(_Seen) as seen:
            factory({}, mock.MagicMock(), mock.MagicMock())
    return seen.value


def test_every_algorithm_is_documented_with_the_model_that_validates_its_options() -> None:
    assert set(OPTION_MODELS) == set(algorithms())
    for name in algorithms():
        seen = _validated_with(name)
        model, defaults = option_model(name)
        assert seen.model is model, name
        assert seen.options == defaults, name  # e.g. dp-fedavg-blur-lus's own defaults


def test_docs_options_md_is_current() -> None:
    assert DOCS.read_text(encoding="utf-8") == markdown(), (
        "docs/options.md is stale: regenerate it with `dpfl options --markdown > docs/options.md`")


def test_options_show_type_default_constraint_description_and_nested_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "dp-fedavg"]) == 0
    out = capsys.readouterr().out
    clip = out.split("  clip_norm", 1)[1].splitlines()
    assert "float = required; > 0" in clip[0] and "L2 bound" in clip[1]
    assert "adaptive_clip.target_unclipped_quantile" in out and "secure_sum.bits" in out
    rows = {r.name: r for r in describe(*option_model("dp-fedavg-blur-lus"))}
    assert rows["blur_lambda"].default == "0.4" and rows["server_lr"].default == "1"
    assert rows["lus_sparsity"].constraints == "≥ 0, < 1"


def test_an_unknown_algorithm_is_one_line_listing_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "dp-fedavgg"]) == 2
    err = capsys.readouterr().err
    assert "unknown algorithm 'dp-fedavgg'" in err and "'dp-fedavg'" in err and len(err.splitlines()) == 1
