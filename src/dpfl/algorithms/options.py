"""Every algorithm's options are a strict pydantic model; this validates them with errors that name
the option, the rule and the value. A module of its own so that the algorithm modules and the
registry that builds them both import it (the registry imports the algorithms, never the reverse).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from dpfl.errors import ConfigError

__all__ = ["parse_options"]


def parse_options(model: type[BaseModel], options: dict[str, Any], algorithm: str) -> Any:
    """Validate ``algorithm.options`` with the algorithm's own strict schema."""
    try:
        return model.model_validate(options)
    except ValidationError as err:
        parts = []
        for e in err.errors():
            loc = ".".join(str(x) for x in e["loc"])
            if e["type"] == "extra_forbidden":
                parts.append(f"unknown option `{loc}` (valid: {sorted(model.model_fields)})")
            elif e["type"] == "missing":
                parts.append(f"missing option `{loc}`")
            else:
                parts.append(f"`{loc}`: {e['msg']} (got {e.get('input')!r})")
        raise ConfigError(f"algorithm {algorithm!r}: " + "; ".join(parts)) from None
