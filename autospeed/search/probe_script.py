"""The probe and the maths-neutrality check of a user's script (docs/design.md "Probe stage"), through its own loop.

A script owns its training step, so it is timed by running it: each probe is a fresh process of the script
(autospeed.script.runner.train_script, as a trial runs it, in the folder the search started from), its recipe the
trials' for that configuration, maths and batch size, asked to measure (autospeed.script.measure): the context
sends the train clock at the end of warm-up (step `probe.warmup_steps`) and at step `warmup_steps + steps`, and
the run ends there. The script's own evaluations are not asked for and its length (epochs, max_steps) is raised to
at least the probe's steps, so neither changes what the timed steps cost. A fresh process pays its one-time costs
(imports, first allocations, the first step's compile) before the warm-up ends, which is why a script needs no
untimed probe first. A batch size the script's loader cannot give (more than its samples) fails in the script with
the reason, which the probe record keeps.

The neutrality check's traces are the script's own too: the mean of the losses it gives ctx.backward over each
window of `window_steps` steps, same seed (the context seeds torch and the loaders it builds with the recipe's
seed). A script whose data order or initialisation does not follow that seed (its own generator seeded from the
clock, numpy's unseeded random, a reseed of its own) cannot be checked: the baseline is traced twice at one seed,
and where the two differ, or the two seeds' traces do not, each change is reported not checked, with why, and
left to the trials as a maths knob (search/neutrality.py `compare`).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from autospeed.recipe import Recipe
from autospeed.search.neutrality import Neutrality, compare, never_target
from autospeed.space import SearchSpec
from autospeed.train.result import EvalEvent, TrainResult

Run = Callable[[dict[str, Any], int], tuple[TrainResult, list[EvalEvent]]]


def measured_recipe(recipe: Recipe, steps: int) -> Recipe:
    """`recipe` with a target it cannot meet and at least `steps` optimizer steps of length (epochs, and max_steps
    where the script's run counts steps): only the measurement's last mark ends it."""
    update: dict[str, Any] = {**never_target(recipe), "epochs": max(recipe.epochs, float(steps))}
    if recipe.max_steps is not None:
        update["max_steps"] = max(recipe.max_steps, steps)
    return recipe.model_copy(update=update)


def _run_measured(recipe: Recipe, marks: list[int], loss: bool, threads: int | None,
                  workdir: str | None) -> tuple[TrainResult, list[EvalEvent]]:
    """The script run once, measured at `marks` (its events, in order) in the folder the search started from."""
    from autospeed.script import channel
    from autospeed.script.runner import train_script

    if workdir:  # as a trial's: a Ray worker's own folder is not the script's
        os.environ[channel.WORKDIR] = workdir
    events: list[EvalEvent] = []
    result = train_script(recipe, events.append, threads, measure={"marks": marks, "loss": loss})
    return result, events


def script_probe(spec: SearchSpec, config: dict[str, Any], threads: int | None) -> Run:
    """run(maths, batch_size) -> (the script's result, its two marks): one probe of `config` (search/probe.py)."""
    from autospeed.search.probe_decide import _active

    warmup, steps = spec.probe.warmup_steps, spec.probe.steps
    marks = [m for m in (warmup, warmup + steps) if m > 0]

    def run(maths: dict[str, Any], batch_size: int) -> tuple[TrainResult, list[EvalEvent]]:
        trial = spec.recipe_for({**_active(spec, {**maths, **config}), "batch_size": batch_size})
        probe = measured_recipe(trial, warmup + steps).model_copy(update={
            "accumulation_steps": 1, "micro_batch_size": None})  # micro-batch = batch, as for a built-in
        return _run_measured(probe, marks, False, threads, spec.script_workdir)

    return run


def script_neutrality(spec: SearchSpec, baseline: Recipe, changes: list[dict[str, Any]],
                      threads: int | None) -> list[Neutrality]:
    """Each change checked through the script's own loss trace (module docstring); the baseline traced twice at
    its seed to show its data order follows the seed."""
    s = spec.probe.neutrality
    marks = sorted({*range(s.window_steps, s.steps + 1, s.window_steps), s.steps})

    def trace(recipe: Recipe) -> tuple[list[float], str | None]:
        result, events = _run_measured(measured_recipe(recipe, s.steps), marks, True, threads, spec.script_workdir)
        return [e.train_loss for e in events], result.error

    return compare(baseline, changes, trace, steps=s.steps, band_fraction=s.band_fraction, repeat=True)
