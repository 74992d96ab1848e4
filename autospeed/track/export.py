"""Export the best trial of a search as a recipe with a `measured` section: the confirmed winner, else the
first trial that reached or was predicted (docs/design.md "Long jobs": a prediction is marked as one, never written
as `tta_seconds`), with the search's production budget (confirm.max_train_seconds) when it set one."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from autospeed.errors import RunFailure
from autospeed.outcome import SESSION_LOG_SD, LogSpread, is_infeasible, log_spread, median_tta, next_run_interval
from autospeed.recipe import CompileCost, Measured, load_recipe
from autospeed.track import names
from autospeed.track import runs as res
from autospeed.track.trajectory import trajectory_of
from autospeed.yamlio import atomic_path, write_atomic

# The confirmed winner's torch.compile cache artifacts, an artifact of its trial run (search/confirm.py), and the
# file `autospeed export` writes beside the recipe: best.yaml -> best.compile-cache.bin
COMPILE_CACHE_ARTIFACT = "compile-cache.bin"
COMPILE_CACHE_SUFFIX = ".compile-cache.bin"
# the three ways production pays a compile (docs/design.md "Compile cost as production pays it"), as printed; the
# confirmation's inductor cache (confirm.compile_cache) says which one its runs measured
COMPILE_WAYS = {"new_machine": "a new machine", "new_machine_shipped_cache": "a new machine with the shipped cache",
                "same_machine_warm": "the search machine, warm"}
_WAY_OF_STATE = {names.COMPILE_CACHE_COLD: "new_machine", names.COMPILE_CACHE_WARM: "same_machine_warm"}
NOT_MEASURED = "not measured"


# said of a long job's confirmed best that is slower than the baseline's given TTA (the baseline is not re-run there,
# so it cannot win as it does in rounds): by the confirmation's summary and the export
SLOWER_THAN_GIVEN = ("slower than the baseline's given TTA: no searched recipe beat it here; keep the baseline "
                     "(the job as it runs now)")


def exportable(rows: list[res.TrialRow], short: bool = False) -> list[res.TrialRow]:
    """The trials that reached or were predicted, in the leaderboard's order (runs.ranked: reached by TTA first,
    then by objective, which for a predicted trial is its predicted TTA). `short` (a search whose trials are short
    of the target by design: short_trials): every trial that trained, in that order, for confirmation to measure;
    the censored objective ranks the ones without a prediction."""
    if short:
        return [r for r in res.ranked(rows) if r.status not in ("running",) and not is_infeasible(r.status)]
    return [r for r in res.ranked(rows) if r.reached or r.predicted]


def predicting(parent) -> bool:
    """Whether the search ran with predict on (its parent's `predict.enabled` param)."""
    return parent.data.params.get("predict.enabled") == "True"


def short_trials(predict: bool, production_budget: float | None) -> bool:
    """Whether a search's trials are short of the target by design, so that confirmation, not the trials, measures
    its candidates: predict on (the trials are extrapolated), or a production budget (confirm.max_train_seconds:
    a long job's confirmation trains the best trials on to the target, reached in their trials or not)."""
    return predict or production_budget is not None


def production_budget_seconds(parent) -> float | None:
    """confirm.max_train_seconds of the search (a long job's production budget), from the parent's params."""
    value = parent.data.params.get("confirm.max_train_seconds")
    return float(value) if value not in (None, "", "None") else None


def compile_cache_beside(recipe_path: str | os.PathLike) -> Path:
    """Where an exported recipe's compile cache goes: best.yaml -> best.compile-cache.bin, in the same folder."""
    path = Path(recipe_path)
    return path.with_name(path.stem + COMPILE_CACHE_SUFFIX)


def fetch_compile_cache(client, run_id: str, dest: str | os.PathLike) -> bool:
    """Copy the trial run's compile cache artifact to `dest` (atomically); False (nothing written) when the run
    has none."""
    if COMPILE_CACHE_ARTIFACT not in {a.path for a in client.list_artifacts(run_id)}:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        got = client.download_artifacts(run_id, COMPILE_CACHE_ARTIFACT, tmp)
        with atomic_path(dest) as part:
            shutil.copyfile(got, part)
    return True


def script_own(parent, recipe) -> list[str] | None:
    """The knobs of a script's recipe that are the script's own: its defaults (the parent's `script_defaults.*`
    params, read by the search's preflight) that the recipe keeps. None for a built-in workload."""
    from autospeed.space import SEARCHABLE  # the knobs a script's defaults give a search (not target, budget)

    prefix = "script_defaults."
    own = {k[len(prefix):]: v for k, v in parent.data.params.items() if k.startswith(prefix)}
    if not own:
        return None
    return sorted(k for k, v in own.items() if k in SEARCHABLE and _same(getattr(recipe, k), v))


def _same(value: Any, param: str) -> bool:
    """A recipe value against its MLflow param text (`20` for an epochs of 20.0)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(param) == float(value)
        except ValueError:
            return False
    return str(value) == param


def best_recipe_yaml(client, name: str, search_id: str | None = None,
                     compile_cache: str | os.PathLike | None = None) -> tuple[str, res.TrialRow]:
    """(best.yaml text, the winning trial) for search `search_id`, else the latest search named `name`: the
    confirmed winner, else the first trial that reached or was predicted. With `compile_cache` (the path the
    recipe will have beside it), a compiled winner's cache is written there and named in `measured`."""
    parent = res.find_parent(client, name, search_id)
    rows = res.trial_rows(client, parent)
    confirmed_trial = parent.data.tags.get(names.TAG_CONFIRMED_BEST)
    m = parent.data.metrics
    confirmed = confirmed_trial is not None and names.M_CONFIRM_MEDIAN in m
    # a confirmed winner may be the baseline, whose short trial neither reached nor was predicted
    best = next((r for r in rows if r.trial_id == confirmed_trial and not r.duplicate_of), None) if confirmed else None
    if best is None:
        confirmed = False
        order = exportable(rows)
        if not order:
            raise RunFailure(f"search '{name}' has no trial that reached its target or has a predicted TTA "
                             f"({len(rows)} trials); raise budget.max_train_seconds, loosen the target or set "
                             f"predict: {{enabled: true}}, and search again")
        best = order[0]
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe(client.download_artifacts(best.run_id, "recipe.yaml", tmp))
    trial_budget = recipe.max_train_seconds
    budget = production_budget_seconds(parent)
    if budget is not None:  # what the confirmation runs trained with: the job's, not the trial's few seconds
        recipe.max_train_seconds = budget
    env = json.loads(client.get_run(best.run_id).data.tags.get(names.TAG_ENVIRONMENT, "{}"))
    measured = Measured(search_name=name, search_id=parent.data.tags.get(names.TAG_SEARCH_ID), trial_id=best.trial_id,
                        tta_seconds=best.tta_seconds if best.reached else None, environment=env)
    if confirmed:
        # Only confirmation runs give medians: the one search measurement of the best of many
        # trials is the number most biased low (the winner's curse), so it is never written as one.
        measured.confirmed = True
        measured.tta_source = names.TTA_MEASURED
        measured.tta_seconds_median = m[names.M_CONFIRM_MEDIAN]
        measured.tta_seconds_min, measured.tta_seconds_max = m.get(names.M_CONFIRM_MIN), m.get(names.M_CONFIRM_MAX)
        measured.repeats = int(m[names.M_CONFIRM_REPEATS])
        measured.baseline_tta_seconds_median = m.get(names.M_CONFIRM_BASELINE_MEDIAN)
        measured.baseline_tta_source = parent.data.tags.get(names.TAG_CONFIRM_BASELINE_SOURCE)
        measured.baseline_tta_note = parent.data.tags.get(names.TAG_CONFIRM_BASELINE_NOTE)
        measured.speedup_vs_baseline = m.get(names.M_CONFIRM_SPEEDUP)
        measured.speedup_ci_low = m.get(names.M_CONFIRM_SPEEDUP_CI_LOW)
        measured.speedup_ci_high = m.get(names.M_CONFIRM_SPEEDUP_CI_HIGH)
        measured.remeasure_speedup_low = m.get(names.M_CONFIRM_REMEASURE_LOW)
        measured.remeasure_speedup_high = m.get(names.M_CONFIRM_REMEASURE_HIGH)
        measured.wall_to_target_seconds_median = m.get(names.M_CONFIRM_WALL_MEDIAN)
        measured.baseline_wall_to_target_seconds_median = m.get(names.M_CONFIRM_BASELINE_WALL_MEDIAN)
        measured.wall_speedup_vs_baseline = m.get(names.M_CONFIRM_WALL_SPEEDUP)
        # a search confirmed before the tag existed compiled from the machine's shared (warm) folder
        measured.compile_cache_state = parent.data.tags.get(names.TAG_CONFIRM_COMPILE_CACHE, names.COMPILE_CACHE_WARM)
        if recipe.compile != "none":
            measured.compile_costs = compile_costs(client, parent, best.trial_id, measured.compile_cache_state)
        _add_ablation(measured, parent.data.tags.get(names.TAG_ABLATION))
    elif best.reached:
        measured.tta_source = names.TTA_MEASURED
    else:  # a prediction, never written as tta_seconds
        measured.tta_source = names.TTA_PREDICTED
        measured.tta_predicted_seconds = best.tta_predicted_seconds
        measured.tta_predicted_low_seconds = best.tta_predicted_low_seconds
        measured.tta_predicted_high_seconds = best.tta_predicted_high_seconds
    if compile_cache is not None and recipe.compile != "none" and fetch_compile_cache(client, best.run_id,
                                                                                       compile_cache):
        measured.compile_cache = Path(compile_cache).name  # beside the recipe: it moves with it
    measured.script_own = script_own(parent, recipe)
    # the curve `autospeed train` checks its run against (track/trajectory.py; a prediction, whatever its source)
    measured.trajectory = trajectory_of(client, parent, best, recipe.resolved_target, measured)
    recipe.measured = measured
    if measured.confirmed:
        how = f"median of {measured.repeats} confirmation runs with new seeds, each in a fresh process"
    elif measured.tta_source == names.TTA_PREDICTED:
        how = ("PREDICTED from the trial's curve (80% interval), not measured: unconfirmed (set confirm.repeats "
               ">= 3 for production runs to the target)")
    else:
        how = ("one search measurement, unconfirmed (set confirm.repeats >= 3 for medians, a speed-up and its "
               "interval)")
    budget_note = (f"# max_train_seconds is confirm.max_train_seconds ({budget:g} s, the production budget; the "
                   f"trial had {trial_budget:g} s).\n" if budget is not None else "")
    header = (f"# Exported by autospeed from search '{name}' ({measured.search_id}), trial {best.trial_id}.\n"
              f"# TTA is train-clock seconds to {recipe.resolved_target.describe()} on "
              f"{f'{recipe.workers} data-parallel workers (one device each) on ' if recipe.workers > 1 else ''}"
              f"{env.get('device_name', 'the search machine')}, "
              f"{how}; `measured` is ignored by training.\n{budget_note}{_compile_note(measured, recipe)}"
              + ("# measured.compile_cache: torch.compile's cache artifacts of this recipe (a confirmation run's), "
                 "loaded by `autospeed train` before it compiles.\n" if measured.compile_cache else "")
              + (f"# measured.trajectory: its PREDICTED curve ({measured.trajectory.source}), which `autospeed "
                 f"train` checks the run against at 10%, 25% and 50% of the predicted TTA.\n"
                 if measured.trajectory else ""))
    return header + recipe.to_yaml(), best


def compile_costs(client, parent, trial_id: str, state: str) -> dict[str, CompileCost | str]:
    """A compiled winner's compile, three ways: the way its confirmation runs trained (`state`: cold is a new
    machine, warm the search machine's cache) and the ways its `compile_way` runs trained after them
    (search/compile_ways.py), each the medians over its runs (a run that missed the target counts as infinitely
    slow, as in the confirmed median) and where one more run falls, 90% (outcome.next_run_interval, its spread
    pooled over every group of runs the confirmation trained: each candidate's, the baseline's, each way's, and the
    drift between sessions, outcome.SESSION_LOG_SD, added: the user's run comes in another sitting);
    "not measured" for a way no run trained, never a guess."""
    trials = parent.data.metrics.get(names.M_CONFIRM_TRIALS)  # an extended search confirmed again: the last one's runs

    def finished(kind: str, tags: dict[str, str]) -> list:
        runs = res.child_runs(client, parent, kind, tags, where=res.ENDED)
        return [r for r in runs if names.TAG_STATUS in r.data.tags and names.M_COMPILE_SECONDS in r.data.metrics
                and (trials is None or r.data.tags.get(names.TAG_CONFIRM_TRIALS) == str(int(trials)))]

    groups: dict[tuple[str, str], list] = {}  # each candidate's confirmation runs, each compile way's runs
    for run in finished(names.KIND_CONFIRM, {}):
        groups.setdefault((names.KIND_CONFIRM, run.data.tags.get(names.TAG_TRIAL_ID, "")), []).append(run)
    for run in finished(names.KIND_COMPILE_WAY, {names.TAG_TRIAL_ID: trial_id}):
        groups.setdefault((names.KIND_COMPILE_WAY, run.data.tags[names.TAG_COMPILE_WAY]), []).append(run)
    spreads = tuple(log_spread([[r.data.metrics.get(m) for r in runs] for runs in groups.values()])
                    for m in (names.M_COMPILE_SECONDS, names.M_TTA))  # compile seconds with their own kind
    costs: dict[str, CompileCost | str] = dict.fromkeys(COMPILE_WAYS, NOT_MEASURED)
    for way in COMPILE_WAYS:
        runs = groups.get((names.KIND_CONFIRM, trial_id) if way == _WAY_OF_STATE[state]
                          else (names.KIND_COMPILE_WAY, way))
        if runs:
            costs[way] = _cost(runs, *spreads)
    return costs


def _cost(runs: list, compile_spread: LogSpread | None, tta_spread: LogSpread | None) -> CompileCost:
    """One way's CompileCost from its finished runs and the confirmation's pooled spreads."""
    compiles = [r.data.metrics[names.M_COMPILE_SECONDS] for r in runs]
    ttas = [r.data.metrics.get(names.M_TTA) for r in runs]  # absent: the run missed the target
    (compile_low, compile_high), (tta_low, tta_high) = (
        next_run_interval(compiles, spread=compile_spread, session_sd=SESSION_LOG_SD),
        next_run_interval(ttas, spread=tta_spread, session_sd=SESSION_LOG_SD))
    return CompileCost(compile_seconds_median=statistics.median(compiles), tta_seconds_median=median_tta(ttas),
                       runs=len(runs), compile_seconds_low=compile_low, compile_seconds_high=compile_high,
                       tta_seconds_low=tta_low, tta_seconds_high=tta_high)


def compile_lines(measured: Measured | None) -> list[str]:
    """What `autospeed export` prints about a compiled winner's compile: each of the three ways, measured or not,
    and the one the confirmed TTAs and speed-up include."""
    if measured is None or not measured.compile_costs:
        return []
    used = _WAY_OF_STATE.get(measured.compile_cache_state or "")
    lines = ["compile cost (train clock, medians of the confirmation runs; [where one more run falls, 90%, a "
             f"{100 * SESSION_LOG_SD:.1f}% drift between sessions included, measured on a CPU]), three ways:"]
    for way, label in COMPILE_WAYS.items():
        cost = measured.compile_costs.get(way, NOT_MEASURED)
        if isinstance(cost, CompileCost):
            tta = f"{cost.tta_seconds_median:.2f} s" if cost.tta_seconds_median is not None else "target missed"
            compiled = _next(cost.compile_seconds_low, cost.compile_seconds_high)
            shown = (f"compile (first step) {cost.compile_seconds_median:.2f} s{compiled}, "
                     f"TTA {tta}{_next(cost.tta_seconds_low, cost.tta_seconds_high)} ({cost.runs} runs)")
        else:
            shown = cost
        lines.append(f"  {label}: {shown}" + ("  <- the speed-up includes this" if way == used else ""))
    return lines


def _next(low: float | None, high: float | None) -> str:
    """Where one more run falls, 90%, as printed beside a median ("" when unknown)."""
    return f" [next run {low:.2f}-{high:.2f} s]" if low is not None and high is not None else ""


def _compile_note(measured: Measured, recipe) -> str:
    """The header line saying which compile cost a compiled recipe's confirmed TTAs and speed-up include."""
    if not measured.confirmed or recipe.compile == "none":
        return ""
    if measured.compile_cache_state == names.COMPILE_CACHE_COLD:
        return ("# compile: cold. Each confirmation run compiled from an empty inductor cache, as on a new machine; "
                "TTA and speed-up include that compile (measured.compile_cache_state).\n")
    return ("# compile: WARM. The confirmation runs compiled from the search machine's inductor cache, where "
            "earlier runs' graphs were found: a new machine pays more compile than TTA and speed-up include "
            "(measured.compile_cache_state; confirm.compile_cache: cold measures it).\n")


def _add_ablation(measured: Measured, tag: str | None) -> None:
    """measured.ablation from the parent's ablation tag (search/ablation.py): knob -> speed-up lost."""
    if not tag:
        return
    record = json.loads(tag)
    measured.ablation = {k: v["speedup_lost"] if v["speedup_lost"] is not None else v["speedup_lost_at_least"]
                         for k, v in record.items() if (v["speedup_lost"] or v["speedup_lost_at_least"]) is not None}
    measured.ablation_at_least = [k for k, v in record.items() if v["speedup_lost_at_least"] is not None] or None


def speedup_lines(measured: Measured | None) -> list[str]:
    """What `autospeed export` prints about the TTA and speed-up: train clock with its interval (or the given
    baseline's range), wall; a prediction marked as one (`~412 s [300-560]`)."""
    if measured is None:
        return []
    if measured.tta_source == "predicted" and measured.tta_predicted_seconds is not None:
        from autospeed.predict import format_predicted

        shown = format_predicted(measured.tta_predicted_seconds, measured.tta_predicted_low_seconds,
                                 measured.tta_predicted_high_seconds)
        return [f"TTA predicted, not measured: {shown} (80% interval; unconfirmed: set confirm.repeats >= 3 for "
                f"production runs to the target and a measured speed-up)"]
    if not measured.confirmed or measured.speedup_vs_baseline is None:
        return []
    if measured.baseline_tta_source == "given":
        base = measured.baseline_tta_seconds_median
        lo, hi = measured.tta_seconds_max, measured.tta_seconds_min
        spread = f"; {base / lo:.2f}x to {base / hi:.2f}x over its runs" if lo and hi else ""
        lines = [f"speed-up over the baseline: {measured.speedup_vs_baseline:.2f}x on the train clock (median of "
                 f"{measured.repeats} fresh-process runs of the winner against the baseline TTA given, {base:g} s "
                 f"({measured.baseline_tta_note}), not measured here{spread}; no interval)"]
        if measured.speedup_vs_baseline < 1:
            lines.append(f"  {SLOWER_THAN_GIVEN}")
        return lines + _ablation_lines(measured)
    if measured.speedup_ci_low is not None and measured.speedup_ci_high is not None:
        interval = f", 90% interval {measured.speedup_ci_low:.2f}x to {measured.speedup_ci_high:.2f}x"
    elif measured.speedup_ci_low is not None:
        interval = f", 90% interval from {measured.speedup_ci_low:.2f}x (unbounded above)"
    else:
        why = "too few repeats for an interval" if (measured.repeats or 0) < 3 else "too many missed targets"
        interval = f", no interval: {why}"
    lines = [f"speed-up over the baseline: {measured.speedup_vs_baseline:.2f}x on the train clock "
             f"(median of {measured.repeats} fresh-process runs each{interval})"]
    if measured.remeasure_speedup_low is not None and measured.remeasure_speedup_high is not None:
        lines.append(f"  predicted: a re-measurement with 7 fresh runs a side falls at "
                     f"{measured.remeasure_speedup_low:.2f}x to {measured.remeasure_speedup_high:.2f}x (90%)")
    if measured.wall_speedup_vs_baseline is not None:
        lines.append(f"speed-up over the baseline: {measured.wall_speedup_vs_baseline:.2f}x on the wall to target "
                     f"(process start to target: {measured.baseline_wall_to_target_seconds_median:.2f} s -> "
                     f"{measured.wall_to_target_seconds_median:.2f} s)")
    return lines + _ablation_lines(measured)


def _ablation_lines(measured: Measured) -> list[str]:
    if not measured.ablation:
        return []
    parts = [f"{k} {'>=' if k in (measured.ablation_at_least or []) else ''}{v:.2f}x"
             for k, v in sorted(measured.ablation.items(), key=lambda kv: -kv[1])]
    return ["speed-up lost without each knob (ablation): " + ", ".join(parts)]


def export(client, name: str, out: str | os.PathLike, search_id: str | None = None) -> tuple[Path, res.TrialRow]:
    """Write best.yaml to `out` and, for a compiled winner whose trial run holds a compile cache, the cache beside
    it first (best.compile-cache.bin), so the recipe never names a file not yet there."""
    text, best = best_recipe_yaml(client, name, search_id, compile_cache=compile_cache_beside(out))
    return write_atomic(out, text), best
