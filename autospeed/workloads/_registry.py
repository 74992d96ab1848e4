"""Find a workload by built-in name or `package.module:factory` and build it."""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any, Callable

from autospeed.errors import UserError
from autospeed.workloads import _builtin, _gpt, _lm, _vision
from autospeed.workloads._memory_limit import MAX_MICRO_BATCH, check_memory_limit, with_memory_limit
from autospeed.workloads.base import CLASSIFICATION_METRICS, Metric, Workload

BUILTIN: dict[str, Callable[..., Workload]] = {
    "mnist1d": _builtin.mnist1d,
    "digits": _builtin.digits,
    "cifar10": _builtin.cifar10,
    "synthetic": _builtin.synthetic,
    "lm": _lm.lm,
    "resnet": _vision.resnet,
    "gpt": _gpt.gpt,
}
# What each built-in's evaluation reports, known without building it (so `validate` can check a target).
BUILTIN_METRICS: dict[str, dict[str, Metric]] = {
    **{name: CLASSIFICATION_METRICS for name in ("mnist1d", "digits", "cifar10", "synthetic")},
    "lm": _lm.LM_METRICS,
    "resnet": CLASSIFICATION_METRICS,
    "gpt": _gpt.GPT_METRICS,
}


def offered_metrics(spec: str) -> dict[str, Metric] | None:
    """The metrics a workload reports where known without building it (built-ins); None for a plugin."""
    return BUILTIN_METRICS.get(spec)


def describe() -> list[tuple[str, str]]:
    """(name, one-line description) of each built-in workload: its docstring's first paragraph, joined."""
    return [(name, " ".join(line.strip() for line in inspect.getdoc(f).split("\n\n")[0].splitlines()))
            for name, f in BUILTIN.items()]


def resolve_factory(spec: str) -> Callable[..., Workload]:
    """The factory for a built-in name or a `package.module:factory` plugin path."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if ":" not in spec:
        raise UserError(f"workload: unknown workload '{spec}'; use one of {', '.join(BUILTIN)} "
                        f"or a plugin as 'package.module:factory' (`autospeed workloads` lists them)")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # a plugin is user code: any import error is bad input
        raise UserError(f"workload: plugin module '{module_name}' does not import ({type(e).__name__}: {e}); "
                        f"check the name and that its folder is on PYTHONPATH") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UserError(f"workload: '{module_name}' has no callable '{attr}'; point at the factory function "
                        f"that returns an autospeed.workloads.Workload")
    return factory


def check_options(spec: str, options: dict[str, Any]) -> None:
    """Reject workload_options the factory does not take, before anything runs."""
    check_memory_limit(options)
    options = {k: v for k, v in options.items() if k != MAX_MICRO_BATCH}
    factory = resolve_factory(spec)
    params = inspect.signature(factory).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in options:
        if key not in params:
            raise UserError(f"workload_options.{key}: unknown option for workload '{spec}'; "
                            f"allowed: {', '.join(params) or 'none'}")


_LAST: dict[str, Workload] = {}  # this process's last workload, by name and options (load_workload_once)


def load_workload_once(spec: str, options: dict[str, Any] | None = None) -> Workload | None:
    """`load_workload`, kept for this process's next call with the same name and options: a process that
    trains one workload again and again (a Ray trial actor, a probe worker, confirmation's process) loads
    it once. Only the last one is kept."""
    if spec == "script":  # a user's own script is no Workload: it runs as a process (autospeed.script.runner)
        return None
    key = json.dumps([spec, options or {}], sort_keys=True)
    if key not in _LAST:
        _LAST.clear()
        _LAST[key] = load_workload(spec, options)
    return _LAST[key]


def load_workload(spec: str, options: dict[str, Any] | None = None) -> Workload:
    options = dict(options or {})
    check_options(spec, options)
    limit = options.pop(MAX_MICRO_BATCH, None)
    workload = resolve_factory(spec)(**options)
    if not isinstance(workload, Workload):
        raise UserError(f"workload: '{spec}' returned {type(workload).__name__}, not an "
                        f"autospeed.workloads.Workload; return one from the factory")
    return workload if limit is None else with_memory_limit(workload, limit)
