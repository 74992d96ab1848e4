"""One confirmation, ablation or compile-way run, the way production trains it: the round's seed, a fresh process (or
Ray Train workers for a data-parallel recipe), and its MLflow child run opened before and finished after, through
the search's run ledger (search/confirm_ledger.py), which keeps what an earlier session finished.
search/confirm.py, search/ablation.py and search/compile_ways.py each take their samples here.
"""

from __future__ import annotations

import os

from autospeed.recipe import Recipe
from autospeed.run_recipe import train_in_fresh_process
from autospeed.script.options import is_script
from autospeed.search.confirm_ledger import NO_KNOB, RunLedger
from autospeed.search.confirm_stats import Candidate
from autospeed.space import SearchSpec
from autospeed.track import names, writers
from autospeed.track.store import interrupts_held

SEED_OFFSET = 1000  # confirmation seeds = recipe seed + 1000 + repeat: never a seed the search used


def cpu_threads(spec: SearchSpec) -> int | None:
    """torch threads of a run in a fresh process: the trial's CPUs, else every core (on a GPU: torch's default)."""
    if spec.resources.gpus_per_trial:
        return spec.resources.cpus_per_trial or None
    return spec.resources.cpus_per_trial or os.cpu_count()


def train_like_production(recipe: Recipe, spec: SearchSpec, compile_cache_to: str | None = None):
    """One confirmation or ablation run: in a fresh process (data-parallel: on Ray Train workers, as in its
    trial), never in this driver, compiling from a new empty inductor cache unless `confirm.compile_cache: warm`.
    `compile_cache_to`: where a compiled run in a fresh process leaves its torch.compile cache
    (autospeed.train.compile_cache; none from data-parallel workers)."""
    from autospeed.parallel.launch import train_on_workers

    threads = cpu_threads(spec)
    if recipe.workers > 1 and not is_script(recipe.workload):  # a script starts its own workers
        return train_on_workers(recipe, cpus=threads, gpus=spec.resources.gpus_per_trial > 0,
                                compile_cache=spec.confirm.compile_cache)
    return train_in_fresh_process(recipe, threads, compile_cache_to, compile_cache=spec.confirm.compile_cache)


def confirm_seed(c: Candidate, round_: int) -> int:
    """The seed of `c`'s run in `round_`: the same in every candidate's and every ablated variant's run of a round."""
    return c.recipe.seed + SEED_OFFSET + round_


def sample(ledger: RunLedger, c: Candidate, round_: int, spec: SearchSpec, knob: str | None = None,
           compile_cache_to: str | None = None, way: str | None = None, train=None) -> tuple[object, bool]:
    """Candidate `c`'s sample of `round_`, recorded on `c`: the finished run an earlier session left (kept), else a
    run trained now with the round's seed, like production: a confirmation run, with `knob` an ablation run of
    that knob ("none": its reference), or with `way` a compile way's run (search/compile_ways.py, trained by
    `train(recipe)`), its MLflow child run opened first and finished after. Interrupted (Ctrl-C, SIGTERM, a crash),
    that run is closed KILLED: none stays RUNNING. Returns the result and whether it was kept."""
    if way is not None:
        kind, key, tags, stage = names.KIND_COMPILE_WAY, way, {names.TAG_COMPILE_WAY: way}, "the compile ways"
    elif knob is not None:
        kind, key, tags, stage = names.KIND_ABLATION, knob, {names.TAG_ABLATION_KNOB: knob}, "the ablation"
    else:
        kind, key, tags, stage = names.KIND_CONFIRM, NO_KNOB, None, "confirmation"
    kept = ledger.kept_result(kind, c.trial_id, round_, key)
    if kept is not None:
        c.record(kept)
        return kept, True
    ledger.watch(stage)
    recipe = c.recipe.model_copy(update={"seed": confirm_seed(c, round_)})
    run_id = None
    try:
        with interrupts_held():
            run_id = ledger.open_run(kind, c, round_, recipe, tags)
        result = train(recipe) if train is not None else train_like_production(recipe, spec, compile_cache_to)
    except BaseException:
        if run_id is not None:
            writers.mark_killed(ledger.out, run_id)
        raise
    writers.finish_run(ledger.out, run_id, recipe, result)
    c.record(result)
    return result, False
