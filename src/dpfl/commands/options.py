"""`dpfl options [ALGORITHM] [--markdown]`: every algorithm's options, read from the pydantic model
that validates them (type, default, constraints, description).

``docs/options.md`` is this command's ``--markdown`` output for all algorithms (a test checks it is
current: regenerate it with ``dpfl options --markdown > docs/options.md``).
"""

from __future__ import annotations

import argparse
import importlib
import types
import typing
from dataclasses import dataclass
from typing import Any

# algorithm name -> (module, options model, defaults the algorithm's builder sets before validating);
# the models live in dpfl.algorithms.options, which imports neither torch nor the accountant.
# A test checks that every registered algorithm is listed here.
OPTION_MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "fedavg": ("dpfl.algorithms.options", "FedAvgOptions", {}),
    "dp-fedavg": ("dpfl.algorithms.options", "DpFedAvgOptions", {}),
    "dp-fedavg-blur-lus": ("dpfl.algorithms.options", "DpFedAvgOptions", {"blur_lambda": 0.4, "lus_sparsity": 0.7}),
    "dp-sgd-fedavg": ("dpfl.algorithms.options", "DpSgdOptions", {}),
    "dp-ftrl": ("dpfl.algorithms.options", "DpFtrlOptions", {}),
    "udp": ("dpfl.algorithms.options", "UdpOptions", {}),
    "udp-crd": ("dpfl.algorithms.options", "UdpCrdOptions", {}),
    "udp-lei": ("dpfl.algorithms.options", "UdpLeiOptions", {}),
    "nbafl": ("dpfl.algorithms.options", "NbAflOptions", {}),
    "ldp-fl": ("dpfl.algorithms.options", "LdpFlOptions", {}),
    "midp-server": ("dpfl.algorithms.options", "MidpOptions", {}),
    "midp-client": ("dpfl.algorithms.options", "MidpOptions", {}),
    "pmidp-fl": ("dpfl.algorithms.options", "PmidpOptions", {}),
}

_BOUNDS = (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"), ("min_length", "length ≥"),
           ("max_length", "length ≤"))


@dataclass(frozen=True)
class OptionDoc:
    """One option of an algorithm, as documented."""

    name: str  # dotted for a nested option: ``adaptive_clip.learning_rate``
    type: str
    default: str  # "required" when there is none
    constraints: str
    description: str


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def type_text(tp: Any) -> str:
    """A type annotation as a reader writes it in YAML terms: ``float | None``, ``'local' | 'central'``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin in (list, tuple, set, dict):
        inner = ", ".join("..." if a is Ellipsis else type_text(a) for a in args)
        return f"{origin.__name__}[{inner}]" if inner else origin.__name__
    if _is_model(tp):
        return "mapping (below)"
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _default_text(field: Any, override: Any = ...) -> str:
    from pydantic_core import PydanticUndefined

    if override is not ...:
        value = override
    elif field.default_factory is not None:
        value = field.default_factory()
        if _is_model(type(value)):
            return "(defaults below)"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _constraints(field: Any) -> str:
    parts = []
    for meta in field.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(parts)


def _nested_model(tp: Any) -> Any:
    if _is_model(tp):
        return tp
    for arg in typing.get_args(tp):
        if _is_model(arg):
            return arg
    return None


def describe(model: Any, defaults: dict[str, Any] | None = None, prefix: str = "") -> list[OptionDoc]:
    """Every option of the pydantic ``model`` (nested option mappings flattened as ``a.b``)."""
    out: list[OptionDoc] = []
    nested: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        override = (defaults or {}).get(name, ...)
        out.append(OptionDoc(prefix + name, type_text(field.annotation), _default_text(field, override),
                             _constraints(field), " ".join((field.description or "").split())))
        sub = _nested_model(field.annotation)
        if sub is not None:
            nested.append((prefix + name + ".", sub))
    for sub_prefix, sub in nested:
        out += describe(sub, None, sub_prefix)
    return out


def option_model(algorithm: str) -> tuple[Any, dict[str, Any]]:
    """The options model of ``algorithm`` and the defaults its builder sets.

    Raises:
        ConfigError: an unknown algorithm name (listing the valid ones).
    """
    from dpfl.errors import ConfigError

    if algorithm not in OPTION_MODELS:
        raise ConfigError(f"unknown algorithm {algorithm!r}; valid: {sorted(OPTION_MODELS)}")
    module, cls, defaults = OPTION_MODELS[algorithm]
    return getattr(importlib.import_module(module), cls), defaults


def _summary(model: Any, algorithm: str = "", defaults: dict[str, Any] | None = None) -> str:
    doc = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "`")
    if defaults:
        doc += f" `{algorithm}` sets " + ", ".join(f"`{k}` = {v}" for k, v in defaults.items()) + " by default."
    return doc


def text(algorithm: str) -> str:
    """The plain-text reference of one algorithm's options."""
    model, defaults = option_model(algorithm)
    rows = describe(model, defaults)
    summary = _summary(model, algorithm, defaults)
    lines = [f"{algorithm}: {summary}" if summary else algorithm]
    width = max(len(r.name) for r in rows) if rows else 0
    for r in rows:
        extra = f"; {r.constraints}" if r.constraints else ""
        lines.append(f"  {r.name:<{width}}  {r.type} = {r.default}{extra}")
        if r.description:
            lines.append(f"  {'':<{width}}    {r.description}")
    if not rows:
        lines.append("  (no options)")
    return "\n".join(lines)


def _cell(value: str) -> str:
    return value.replace("|", "\\|") if value else ""


def markdown(algorithms: list[str] | None = None) -> str:
    """The Markdown reference (``docs/options.md``)."""
    names = algorithms or list(OPTION_MODELS)
    out = ["# Algorithm options", "",
           "Generated by `dpfl options --markdown` from the pydantic models that validate `algorithm.options`",
           "(do not edit by hand; `tests/unit/commands/test_options.py` checks it is current). In a config:",
           "`algorithm: {name: NAME, options: {...}}`; in Python: `dpfl.train(..., algorithm=NAME, options={...})`.",
           "Unknown options are errors. `dpfl options NAME` prints the same in a terminal.", ""]
    for name in names:
        model, defaults = option_model(name)
        out += [f"## {name}", ""]
        if _summary(model, name, defaults):
            out += [_summary(model, name, defaults), ""]
        rows = describe(model, defaults)
        if not rows:
            out += ["No options.", ""]
            continue
        out += ["| option | type | default | constraints | description |", "|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| `{r.name}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.constraints)} | "
                       f"{_cell(r.description)} |")
        out.append("")
    return "\n".join(out)


def _options(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown([args.algorithm] if args.algorithm else None), end="")
        return 0
    names = [args.algorithm] if args.algorithm else list(OPTION_MODELS)
    print("\n\n".join(text(n) for n in names))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "options", help="the options of every algorithm (or one): type, default, constraints, description",
        description="Read from the pydantic models that validate `algorithm.options` in a config and "
                    "`options=` in dpfl.train. docs/options.md is the --markdown output.")
    p.add_argument("algorithm", nargs="?", metavar="ALGORITHM", help="one algorithm (default: all)")
    p.add_argument("--markdown", action="store_true", help="Markdown tables (docs/options.md)")
    p.set_defaults(func=_options)
