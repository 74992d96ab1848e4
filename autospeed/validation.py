"""Turn pydantic validation errors into the one-line messages users see."""

from __future__ import annotations

import difflib
from typing import Any

import pydantic

from autospeed.errors import UserError


def key_path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p.startswith("function-")))


def _allowed_keys(model: type[pydantic.BaseModel], loc: tuple) -> list[str]:
    """Field names of the (nested) model that owns loc's last key."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        candidates = [a for a in getattr(annotation, "__args__", (annotation,)) if hasattr(a, "model_fields")]
        if not candidates:
            return []
        current = candidates[0]
    return list(getattr(current, "model_fields", {}))


def raise_user_error(err: pydantic.ValidationError, source: str, model: type[pydantic.BaseModel]) -> None:
    """Raise a UserError for the first problem in err: file, key path, value, fix."""
    first = err.errors(include_url=False)[0]
    loc = first["loc"]
    path = key_path(loc) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc)
        guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean '{guess[0]}'?" if guess else f"allowed keys: {', '.join(allowed)}"
        raise UserError(f"{source}: unknown key '{path}'; {hint}")
    if kind == "missing":
        raise UserError(f"{source}: missing required key '{path}'; add it")
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    value = first.get("input")
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    raise UserError(f"{source}: key '{path}': {msg}{shown}")
