"""The search-space file: one validated schema and the Optuna define-by-run space. Its sections beside the
knobs (budget, asha, confirm, probe, predict, ...) are in space_sections.py.

A trial's recipe is built in layers: the file's workload/target/budget, then
`fixed`, then either `baseline` (trial 0) or the sampled parameters. Every layer
is validated as a Recipe on load, so an impossible value fails before Ray starts.
"""

from __future__ import annotations

import os
from typing import Any

import pydantic
from pydantic import ConfigDict, Field, model_validator

from autospeed.errors import UserError
from autospeed.recipe import KNOB_FIELDS, Recipe, Target, target_from
from autospeed.script.options import check_script_options, is_script
from autospeed.space_sections import Asha, Budget, Confirm, Predict, Probe, Resources, Sampler, Strict, Tracking
from autospeed.validation import key_path, offered_metrics_note, raise_user_error
from autospeed.workloads import check_options, check_target, offered_metrics
from autospeed.yamlio import load_yaml

# Recipe fields the file sets at the top level, not per parameter.
_TOP_LEVEL = ("workload", "workload_options", "target_accuracy", "target", "max_train_seconds")
SEARCHABLE = tuple(f for f in KNOB_FIELDS if f not in _TOP_LEVEL)
# The baseline may also set its own budget: a slow baseline needs room to reach the target.
BASELINE_KEYS = SEARCHABLE + ("max_train_seconds",)


_KINDS = ("choice", "uniform", "loguniform", "int")


class Param(Strict):
    """One searched knob: exactly one of choice / uniform / loguniform / int, and an optional `when`."""

    # `int` is the file's key; the attribute is `int_` because a field named `int` would shadow
    # the builtin inside this class's own annotations (every `int: [a, b]` range was rejected).
    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)

    choice: list[Any] | None = None
    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    int_: tuple[int, int] | None = Field(None, alias="int")
    log: bool = False  # for `int`: sample on a log scale
    when: dict[str, list[Any]] | None = None  # sample only when these parameters take one of these values

    @model_validator(mode="after")
    def _one_kind(self) -> "Param":
        kinds = [k for k in _KINDS if self.bounds(k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of choice, uniform, loguniform, int (got {kinds or 'none'})")
        if self.choice is not None and not self.choice:
            raise ValueError("empty choice list; give at least one value")
        for kind in ("uniform", "loguniform", "int"):
            bounds = self.bounds(kind)
            if bounds is not None and not bounds[0] < bounds[1]:
                raise ValueError(f"`low < high` must hold, but got (low={bounds[0]}, high={bounds[1]}); swap or widen")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise ValueError(f"loguniform needs low > 0, got {self.loguniform[0]}; use uniform or a positive low")
        if self.int_ is not None and self.log and self.int_[0] <= 0:
            raise ValueError(f"a log int range needs low >= 1, got {self.int_[0]}")
        return self

    def bounds(self, kind: str) -> Any:
        """The value given for `kind` (the choice list or the range), None if not this kind."""
        return self.int_ if kind == "int" else getattr(self, kind)

    def kind(self) -> str:
        return next(k for k in _KINDS if self.bounds(k) is not None)

    def edge_values(self) -> list[Any]:
        """Values that must all be valid for the knob: every choice, or both bounds."""
        return list(self.bounds(self.kind()))


class SearchSpec(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    workload: str = "mnist1d"
    workload_options: dict[str, Any] = Field(default_factory=dict)
    # exactly one of the two; `target_accuracy: x` is short for {metric: val_accuracy, mode: max, value: x}
    target_accuracy: float | None = Field(None, gt=0, le=1)
    target: Target | None = None
    budget: Budget = Field(default_factory=Budget)
    asha: Asha = Field(default_factory=Asha)
    sampler: Sampler = Field(default_factory=Sampler)
    confirm: Confirm = Field(default_factory=Confirm)
    probe: Probe = Field(default_factory=Probe)
    predict: Predict = Field(default_factory=Predict)
    resources: Resources = Field(default_factory=Resources)
    tracking: Tracking = Field(default_factory=Tracking)
    baseline: dict[str, Any] = Field(default_factory=dict)  # BASELINE_KEYS: the knobs, and its own budget
    fixed: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, Param]
    max_consecutive_errors: int = Field(5, ge=1)  # same error this many trials in a row stops the search
    # Not a file key: the search's preflight fills it (autospeed.script.preflight) with what a user's script gave
    # `autospeed.init(defaults=...)`, its own ways included (schedule and optimizer `script`): the base of the
    # baseline and of every trial, under the file's layers. And the folder the search started from, where every
    # run of the script starts (a Ray trial's own folder is elsewhere).
    script_defaults: dict[str, Any] = Field(default_factory=dict)
    script_workdir: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> "SearchSpec":
        if (self.target is None) == (self.target_accuracy is None):
            raise ValueError("give exactly one of target_accuracy (e.g. 0.95) or target "
                             "(e.g. {metric: val_loss, mode: min, value: 1.6})")
        return self

    @property
    def resolved_target(self) -> Target:
        return target_from(self.target, self.target_accuracy)

    # ---- recipes ----
    def base(self) -> dict[str, Any]:
        """The layer under `fixed`: a script's own defaults (its knobs only: the file sets the target, the budget
        and the workers), then the file's workload, target, budget and workers."""
        target = ({"target": self.target.model_dump()} if self.target is not None
                  else {"target_accuracy": self.target_accuracy})
        own = {k: v for k, v in self.script_defaults.items() if k in SEARCHABLE and k != "workers"}
        return {**own, "workload": self.workload, "workload_options": self.workload_options, **target,
                "max_train_seconds": self.budget.max_train_seconds, "workers": self.resources.workers_per_trial}

    def most_workers(self) -> tuple[int, str]:
        """(the most workers any trial can use, the key path that asks for them): the trial resources
        a search must be able to place."""
        asks = [(self.resources.workers_per_trial, "resources.workers_per_trial")]
        for section in ("fixed", "baseline"):
            if "workers" in getattr(self, section):
                asks.append((getattr(self, section)["workers"], f"{section}.workers"))
        if "workers" in self.space:
            p = self.space["workers"]
            asks.append((max(p.edge_values()), f"space.workers.{p.kind()}"))
        return max(asks, key=lambda a: a[0])

    def recipe_for(self, params: dict[str, Any], baseline: bool = False) -> Recipe:
        layers = {**self.base(), **self.fixed, **(self.baseline if baseline else params)}
        return Recipe.model_validate(layers)

    # ---- Optuna define-by-run ----
    def define_by_run(self, trial) -> dict[str, Any] | None:
        """Sample one trial's parameters. Trial 0 of the study is the baseline and samples nothing."""
        if trial.number == 0:
            trial.set_user_attr("baseline", True)
            return {"baseline": True}
        self.suggest(trial)
        return {"baseline": False}

    def suggest(self, trial) -> dict[str, Any]:
        """Sample every parameter of `space` whose `when` holds on an Optuna trial; returns them."""
        chosen: dict[str, Any] = {}
        for name, p in self.space.items():
            if p.when and not all(chosen.get(k) in values for k, values in p.when.items()):
                continue
            kind = p.kind()
            if kind == "choice":
                chosen[name] = trial.suggest_categorical(name, p.choice)
            elif kind == "uniform":
                chosen[name] = trial.suggest_float(name, *p.uniform)
            elif kind == "loguniform":
                chosen[name] = trial.suggest_float(name, *p.loguniform, log=True)
            else:
                chosen[name] = trial.suggest_int(name, *p.int_, log=p.log)
        return chosen


def _check_layers(spec: SearchSpec, source: str) -> None:
    """Every knob value the search could use must make a valid recipe."""
    for section, allowed in (("fixed", SEARCHABLE), ("baseline", BASELINE_KEYS)):
        for key in getattr(spec, section):
            if key not in allowed:
                _unknown_knob(source, f"{section}.{key}", key)
    for key in spec.space:
        if key not in SEARCHABLE:
            _unknown_knob(source, f"space.{key}", key)
    _validate_recipe(source, "fixed", {**spec.base(), **spec.fixed}, only=tuple(spec.fixed))
    _validate_recipe(source, "baseline", {**spec.base(), **spec.fixed, **spec.baseline})
    names = list(spec.space)
    for name, p in spec.space.items():
        for i, value in enumerate(p.edge_values()):
            where = f"space.{name}.{p.kind()}[{i}]"
            _validate_recipe(source, where, {**spec.base(), **spec.fixed, name: value}, only=name)
        for parent, values in (p.when or {}).items():
            if parent not in spec.space or names.index(parent) > names.index(name):
                raise UserError(f"{source}: key 'space.{name}.when.{parent}': must name a parameter listed "
                                f"before '{name}' in space; move it up or fix the name")
            parent_choices = spec.space[parent].choice
            if parent_choices is None:
                raise UserError(f"{source}: key 'space.{name}.when.{parent}': conditions need a `choice` "
                                f"parameter, '{parent}' is {spec.space[parent].kind()}")
            for v in values:
                if v not in parent_choices:
                    raise UserError(f"{source}: key 'space.{name}.when.{parent}': {v!r} is not one of "
                                    f"{parent_choices}; use one of those")


# Schedules whose LR falls from the first step over the whole `epochs`: a trial cut at its budget is mid-decay,
# and its curve understates what the decay will do (experiments/results/long_job.md measures by how much).
DECAYING_SCHEDULES = ("cosine", "linear", "onecycle")


def _check_predict(spec: SearchSpec, source: str) -> None:
    """With predict on, a trial's curve must be the first part of the run it predicts: no schedule that decays
    over the whole run (docs/design.md "Long jobs"; docs/design-differences.md)."""
    if not spec.predict.enabled:
        return
    fix = ("with predict on, a trial's curve must be the start of its full run; use constant or wsd (its LR does "
           "not depend on the run's length until the last decay_fraction), see docs/design-differences.md")
    layers = [("fixed.schedule", spec.fixed.get("schedule"))]
    if "max_train_seconds" not in spec.baseline:  # a baseline on its own budget is measured, not predicted
        layers.append(("baseline.schedule", spec.baseline.get("schedule")))
    for path, value in layers:
        if value in DECAYING_SCHEDULES:
            raise UserError(f"{source}: key '{path}': '{value}' decays over the whole run; {fix}")
    param = spec.space.get("schedule")
    for value in (param.choice or []) if param is not None else []:
        if value in DECAYING_SCHEDULES:
            raise UserError(f"{source}: key 'space.schedule.choice': '{value}' decays over the whole run; {fix}")


def _check_exploration_cap(spec: SearchSpec, source: str) -> None:
    """A cap in baseline runs needs the baseline run's length before the trials start."""
    if spec.budget.exploration_baseline_runs is not None and spec.confirm.baseline_tta_seconds is None:
        raise UserError(f"{source}: key 'budget.exploration_baseline_runs': the cap counts baseline runs, so the "
                        f"search needs the baseline's TTA before its trials: set confirm.baseline_tta_seconds (your "
                        f"baseline's train-clock seconds to the target, with baseline_tta_note), or drop the key")


def _unknown_knob(source: str, path: str, key: str) -> None:
    import difflib

    guess = difflib.get_close_matches(key, SEARCHABLE, n=1)
    hint = f"did you mean '{guess[0]}'?" if guess else "see docs/knobs.md for every recipe field"
    if key == "max_train_seconds":
        hint = "the trials' budget is budget.max_train_seconds; only baseline may set its own"
    raise UserError(f"{source}: unknown knob '{path}'; {hint}")


def _validate_recipe(source: str, where: str, fields: dict[str, Any],
                     only: str | tuple[str, ...] | None = None) -> None:
    """Raise the first problem of `fields` as a recipe; with `only`, just problems of those fields
    (a tuple: each named `where.field`, as for the `fixed` section)."""
    try:
        Recipe.model_validate(fields)
    except pydantic.ValidationError as e:
        errors = e.errors(include_url=False)
        if only is not None:
            names = (only,) if isinstance(only, str) else only
            errors = [err for err in errors if err["loc"] and err["loc"][0] in names]
            if not errors:
                return  # a cross-field rule that another sampled value may satisfy; checked per trial
            if isinstance(only, tuple):
                where = f"{where}.{errors[0]['loc'][0]}"
        first = errors[0]
        msg = first["msg"].removeprefix("Value error, ")
        field = key_path(first["loc"]) or "(recipe)"
        raise UserError(f"{source}: key '{where}': {field}: {msg} (got {first.get('input')!r})") from None


def spec_from_dict(data: Any, source: str) -> SearchSpec:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a search-space file must be a mapping, got {type(data).__name__}")
    for key in ("script_defaults", "script_workdir"):
        if key in data:
            raise UserError(f"{source}: key '{key}': not a file key (the search reads it from the script itself); "
                            f"set a knob of the baseline and every trial under fixed:, or give it in the "
                            f"script's autospeed.init(defaults=...)")
    try:
        spec = SearchSpec.model_validate(data)
    except pydantic.ValidationError as e:
        raise_user_error(e, source, SearchSpec, offered_metrics_note(data))
        raise
    _check_layers(spec, source)
    _check_predict(spec, source)
    _check_exploration_cap(spec, source)
    conflict = spec.confirm.file_conflict()
    if conflict:
        raise UserError(f"{source}: key 'confirm': {conflict}")
    most, asked_by = spec.most_workers()
    if most > 1 and spec.resources.gpus_per_trial > 1:
        raise UserError(f"{source}: key 'resources.gpus_per_trial': each data-parallel worker takes one GPU and "
                        f"'{asked_by}' asks for {most} workers; set gpus_per_trial: 1 (a trial then holds one "
                        f"GPU per worker) or 0 (CPU workers)")
    # a user's script: its metrics are known when it reports (docs/design.md "User scripts")
    if is_script(spec.workload):
        check_script_options(spec.workload_options, f"{source}: workload_options")
        return spec
    try:
        check_options(spec.workload, spec.workload_options)
        metrics = offered_metrics(spec.workload)  # a plugin's are checked once it is built (search preflight)
        if metrics is not None:
            check_target(spec.resolved_target, metrics, spec.workload, shorthand=spec.target is None)
    except UserError as e:  # the workload layer does not know which file named it
        raise UserError(f"{source}: {e}") from None
    return spec


def load_spec(path: str | os.PathLike) -> SearchSpec:
    return spec_from_dict(load_yaml(path), str(path))


def with_script(spec: SearchSpec, script: str | None, args: list[str]) -> SearchSpec:
    """The spec with `--script SCRIPT -- ARGS` as its workload (docs/design.md "User scripts"); unchanged without."""
    if script is None:
        if args:
            raise UserError(f"arguments after -- ({' '.join(args)}) are for a script; give it with --script train.py")
        return spec
    from autospeed.script.options import SCRIPT, script_options

    # nothing after --: the file's own arguments stand, as `autospeed train --script` keeps the recipe's
    mine = spec.workload_options if is_script(spec.workload) else {}
    options = {**mine, **script_options(script, args or mine.get("args", []))}
    check_script_options(options, "--script")
    return spec.model_copy(update={"workload": SCRIPT, "workload_options": options})
