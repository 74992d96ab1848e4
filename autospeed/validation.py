"""Turn pydantic validation errors into the one-line messages users see."""

from __future__ import annotations

import difflib
import typing
from typing import Any, Callable

import pydantic

from autospeed.errors import UserError


def key_path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p.startswith("function-")))


def _allowed_keys(model: type[pydantic.BaseModel], loc: tuple) -> list[str]:
    """Field names of the (nested) model that owns loc's last key, through dict[str, Model] fields too."""

    def resolve(annotation: Any) -> Any:  # Optional[Model] / Model | dict -> the model or dict part
        if typing.get_origin(annotation) is dict or hasattr(annotation, "model_fields"):
            return annotation
        return next((resolve(a) for a in typing.get_args(annotation)
                     if typing.get_origin(a) is dict or hasattr(a, "model_fields")), None)

    current: Any = model
    for part in loc[:-1]:
        if typing.get_origin(current) is dict:  # `part` is a user's key; go to the value type
            current = resolve(typing.get_args(current)[1])
        elif getattr(current, "model_fields", None) and part in current.model_fields:
            current = resolve(current.model_fields[part].annotation)
        else:
            return []
    return list(getattr(current, "model_fields", {}))


def raise_user_error(err: pydantic.ValidationError, source: str, model: type[pydantic.BaseModel],
                     context: Callable[[tuple], str | None] | None = None) -> None:
    """Raise a UserError for the first problem in err: file, key path, value, fix.
    `context(loc)` may add what the file's other keys imply (e.g. the metrics its workload offers)."""
    first = err.errors(include_url=False)[0]
    loc = first["loc"]
    more = context(loc) if context is not None else None
    if more:
        raise UserError(_message(first, source, model) + f"; {more}")
    raise UserError(_message(first, source, model))


def _message(first: dict, source: str, model: type[pydantic.BaseModel]) -> str:
    loc = first["loc"]
    path = key_path(loc) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc)
        guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean '{guess[0]}'?" if guess else f"allowed keys: {', '.join(allowed)}"
        return f"{source}: unknown key '{path}'; {hint}"
    if kind == "missing":
        return f"{source}: missing required key '{path}'; add it"
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    value = first.get("input")
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    return f"{source}: key '{path}': {msg}{shown}"


def offered_metrics_note(data: Any) -> Callable[[tuple], str | None]:
    """For a problem under `target`: the metrics the file's workload offers (built-ins; a plugin's
    are its Workload's `metrics`)."""

    def note(loc: tuple) -> str | None:
        if not loc or loc[0] != "target":
            return None
        from autospeed.workloads import offered_metrics

        workload = data.get("workload", "mnist1d") if isinstance(data, dict) else "mnist1d"
        metrics = offered_metrics(str(workload))
        if metrics is None:
            return f"workload '{workload}' offers the metrics its Workload's `metrics` names"
        return f"workload '{workload}' offers: {', '.join(f'{k} ({m.mode})' for k, m in metrics.items())}"

    return note
