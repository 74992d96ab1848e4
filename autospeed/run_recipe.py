"""One training run of a recipe, whatever trains it: the built-in trainer (autospeed.train.trainer) or a user's own
script (`workload: script`, autospeed.script.runner), here or in a fresh process of its own.

The one place that tells the two apart, above both, so that autospeed/train/ is the trainer alone and knows nothing
of scripts. Every caller that may hold a script's recipe trains through `train` (a trial, `autospeed train`) or
`train_in_fresh_process` (every confirmation and ablation run, autospeed.train.process says why). torch only, like
the trainer: no Ray, Optuna or MLflow.
"""

from __future__ import annotations

from typing import Callable

from autospeed.recipe import Recipe
from autospeed.script.options import is_script
from autospeed.script.runner import train_script
from autospeed.train import process, trainer
from autospeed.train.process import COLD
from autospeed.train.result import EvalEvent, TrainResult
from autospeed.workloads import Workload


def train(recipe: Recipe, workload: Workload | None = None,
          on_eval: Callable[[EvalEvent], bool | None] | None = None, num_threads: int | None = None,
          cooldown: trainer.Cooldown | None = None) -> TrainResult:
    """Train `recipe` to its target, its epochs or its budget (autospeed.train.trainer.train's contract: never
    raises for a run that goes wrong). A script recipe runs its script; `workload` is then unused, and so is
    `cooldown` (the built-in trainer's cooldown branches, autospeed.train.cooldown: a script's loop has none)."""
    if is_script(recipe.workload):
        return train_script(recipe, on_eval, num_threads)
    return trainer.train(recipe, workload, on_eval, num_threads, cooldown)


def _train_here(recipe: Recipe, threads: int | None, compile_cache_to: str | None = None,
                compile_cache_from: str | None = None) -> TrainResult:
    from autospeed.workloads import load_workload_once

    if compile_cache_from is not None:  # as `autospeed train` loads a shipped cache: before anything compiles
        from autospeed.train import compile_cache

        compile_cache.load(compile_cache_from)
    result = train(recipe, load_workload_once(recipe.workload, recipe.workload_options), num_threads=threads)
    if compile_cache_to is not None and result.applied.get("compile", "none") != "none":
        from autospeed.train import compile_cache

        compile_cache.save(compile_cache_to)  # what this process compiled: this recipe's graphs only
    return result


def train_in_fresh_process(recipe: Recipe, threads: int | None, compile_cache_to: str | None = None,
                           compile_cache: str = COLD, compile_cache_from: str | None = None,
                           inductor_cache_dir: str | None = None) -> TrainResult:
    """`train(recipe)` in a new (spawned) process (autospeed.train.process.in_fresh_process): the cold start a
    production run pays is on its clock, and by default (`compile_cache="cold"`) the compile from an empty inductor
    cache a new machine pays. With `compile_cache_to`, a compiled run leaves its torch.compile cache artifacts in that
    file (the winner's is exported beside best.yaml); with `compile_cache_from`, it loads such a file first, as
    `autospeed train` loads the one shipped beside a recipe (a file torch cannot load raises
    autospeed.train.compile_cache.CacheNotLoaded). `compile_cache="warm"` with `inductor_cache_dir`: the process
    compiles from that folder (kept), else from the inherited one."""
    return process.in_fresh_process(_train_here, recipe, threads, compile_cache_to, compile_cache_from,
                                    compile_cache=compile_cache, inductor_cache_dir=inductor_cache_dir)
