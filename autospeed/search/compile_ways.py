"""A compiled winner's compile, the two other ways production pays it (docs/design.md "Compile cost as production
pays it"), measured after its confirmation.

Confirmation trains the winner one way (`confirm.compile_cache`: cold, an empty inductor cache, as a new machine
pays; or warm). What the user's `autospeed train --config best.yaml` pays depends on where it runs: on a new machine
it loads the compile cache exported beside the recipe (new_machine_shipped_cache); on the search's machine, or any
that compiled the recipe before, it finds the graphs in its inductor cache (same_machine_warm). So the winner trains
`repeats` more times each way it was not confirmed in, interleaved, with the seeds of its confirmation rounds (the
ways differ only in the compile), each in a fresh process:

* new_machine_shipped_cache: a new empty inductor folder, the cache the export ships (the winner's last
  confirmation run's) loaded into it before anything compiles, as `autospeed train` loads it.
* same_machine_warm: the folder the round's first run left, reused: every graph of the recipe is found there.
* new_machine (when confirmation ran warm): a new empty inductor folder.

Cost: about `repeats` runs of the winner per way, the warm ones without most of their compile (on 2 CPU cores an
MLP's TTA is 15.84 s cold, 14.34 s with the shipped cache, 3.71 s warm: experiments/results/cold_start_cache_cpu.md).
Not measured, and said: a long job (`confirm.runs` fewest or one: each run is a production-length job), data-parallel
workers and scripts (they ship no cache), `confirm.compile_ways: false`. Each run is an MLflow child run of kind
`compile_way` (tag autospeed.compile_way), kept by the ledger like confirmation's: a resume trains only what is
missing. `autospeed export` reads them (track/export.py compile_costs).
"""

from __future__ import annotations

import os
import tempfile

from autospeed.run_recipe import train_in_fresh_process
from autospeed.script.options import is_script
from autospeed.search.confirm_fewest import ROUNDS
from autospeed.search.confirm_sample import confirm_seed, cpu_threads, sample
from autospeed.search.confirm_stats import Candidate, ConfirmOutcome
from autospeed.search.confirm_text import describe
from autospeed.space import SearchSpec
from autospeed.track import names, writers
from autospeed.train.compile_cache import CacheNotLoaded

NEW_MACHINE, SHIPPED, WARM = "new_machine", "new_machine_shipped_cache", "same_machine_warm"
CONFIRMED_WAY = {names.COMPILE_CACHE_COLD: NEW_MACHINE, names.COMPILE_CACHE_WARM: WARM}
SAID = {NEW_MACHINE: "on an empty inductor cache (a new machine)",
        SHIPPED: "on an empty inductor cache with the exported compile cache loaded (a new machine, as `autospeed "
                 "train` of the export runs there)",
        WARM: "on an inductor cache this recipe compiled into before (the same machine, warm)"}


def not_measured_why(outcome: ConfirmOutcome, spec: SearchSpec, cache_file: str | None) -> str | None:
    """Why the other ways are not measured for this outcome (one phrase), None when they are."""
    w = outcome.winner
    if w is None or w.recipe.compile == "none":
        return "the winner does not compile"
    if not spec.confirm.compile_ways:
        return "confirm.compile_ways: false"
    if outcome.runs_mode != ROUNDS:
        return f"confirm.runs {outcome.runs_mode}: each run is a production-length job"
    if w.recipe.workers > 1 or is_script(w.recipe.workload):
        return "data-parallel workers and scripts ship no compile cache"
    if cache_file is None or not os.path.exists(cache_file):
        return "its confirmation runs left no compile cache"
    return None


def measure_compile_ways(ledger, outcome: ConfirmOutcome, spec: SearchSpec, cache_file: str | None,
                         console) -> dict[str, Candidate]:
    """Train the confirmed winner `outcome.repeats` times each way it was not confirmed in (module doc), logged as
    `compile_way` runs; {way: a Candidate holding that way's runs}, also `outcome.compile_ways`, whose train clock
    is then logged in the parent's confirmation compute. Nothing (and one line saying why) where the ways are not
    measured."""
    why = not_measured_why(outcome, spec, cache_file)
    if why is not None:
        if outcome.winner is not None and outcome.winner.recipe.compile != "none":
            print(f"compile ways: only the confirmation's measured ({why})", file=console, flush=True)
        return {}
    outcome.compile_ways = _measure(ledger, outcome, spec, cache_file, console)
    writers.log_batch(ledger.out, ledger.session.parent_id, writers.metrics(outcome.compute_metrics))
    return outcome.compile_ways


def _measure(ledger, outcome: ConfirmOutcome, spec: SearchSpec, cache_file: str, console) -> dict[str, Candidate]:
    """measure_compile_ways's runs, trained or kept: {way: a Candidate holding them}."""
    w, confirmed = outcome.winner, CONFIRMED_WAY[outcome.compile_cache]
    ways = [way for way in (NEW_MACHINE, SHIPPED, WARM) if way != confirmed]  # WARM last: it reuses a folder
    total = outcome.repeats * len(ways)
    print(f"compile ways: the winner trains {outcome.repeats} more times each "
          + " and ".join(f"{way} ({SAID[way]})" for way in ways)
          + f", interleaved, its confirmation's seeds, each in a fresh process ({total} runs)",
          file=console, flush=True)
    runs = {way: Candidate(w.trial_id, w.baseline, None, w.recipe, name=f"{w.label} {way}", run_id=w.run_id)
            for way in ways}
    done = 0
    with tempfile.TemporaryDirectory(prefix="autospeed-compile-ways-") as folders:
        warm_folder, filled = os.path.join(folders, "warm"), False

        def train(way: str, recipe):
            nonlocal filled
            if way == WARM and not filled:  # a resume kept the runs that filled it: fill it, untimed
                train(SHIPPED if SHIPPED in ways else NEW_MACHINE, recipe)
            folder = warm_folder if way == WARM or not filled else tempfile.mkdtemp(dir=folders)
            filled = True
            return train_in_fresh_process(recipe, cpu_threads(spec), compile_cache="warm", inductor_cache_dir=folder,
                                          compile_cache_from=cache_file if way == SHIPPED else None)

        for r in range(outcome.repeats):
            for way in ways:
                try:
                    result, kept = sample(ledger, runs[way], r, spec, way=way,
                                          train=lambda recipe, way=way: train(way, recipe))
                except CacheNotLoaded as e:  # made by this torch a moment ago: said, the search goes on
                    print(f"compile ways: stopped, the exported compile cache did not load ({e})", file=console,
                          flush=True)
                    return runs
                done += 1
                print(f"  [{done}/{total}] {way} (seed {confirm_seed(w, r)}): {describe(result)}"
                      + (" (finished before the resume: kept)" if kept else ""), file=console, flush=True)
    return runs
