"""Export the best reached trial of a search as a recipe with a `measured` section."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from autospeed.track import runs as res
from autospeed.track import layout as t
from autospeed.errors import RunFailure
from autospeed.recipe import Measured, load_recipe
from autospeed.yamlio import write_atomic


def best_recipe_yaml(client, name: str, search_id: str | None = None) -> tuple[str, res.TrialRow]:
    """(best.yaml text, the winning trial) for search `search_id`, else the latest search named `name`."""
    parent = res.find_parent(client, name, search_id)
    rows = res.trial_rows(client, parent)
    reached = [r for r in res.ranked(rows) if r.reached]
    if not reached:
        raise RunFailure(f"search '{name}' has no trial that reached its target "
                         f"({len(rows)} trials); raise budget.max_train_seconds or loosen the target and search again")
    confirmed_trial = parent.data.tags.get(t.TAG_CONFIRMED_BEST)
    best = next((r for r in reached if r.trial_id == confirmed_trial), reached[0])
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe(client.download_artifacts(best.run_id, "recipe.yaml", tmp))
    env = json.loads(client.get_run(best.run_id).data.tags.get(t.TAG_ENVIRONMENT, "{}"))
    measured = Measured(search_name=name, search_id=parent.data.tags.get(t.TAG_SEARCH_ID), trial_id=best.trial_id,
                        tta_seconds=best.tta_seconds, environment=env)
    m = parent.data.metrics
    if confirmed_trial == best.trial_id and t.M_CONFIRM_MEDIAN in m:
        # Only confirmation runs give medians: the one search measurement of the best of many
        # trials is the number most biased low (the winner's curse), so it is never written as one.
        measured.confirmed = True
        measured.tta_seconds_median = m[t.M_CONFIRM_MEDIAN]
        measured.tta_seconds_min, measured.tta_seconds_max = m.get(t.M_CONFIRM_MIN), m.get(t.M_CONFIRM_MAX)
        measured.repeats = int(m[t.M_CONFIRM_REPEATS])
        measured.baseline_tta_seconds_median = m.get(t.M_CONFIRM_BASELINE_MEDIAN)
        measured.speedup_vs_baseline = m.get(t.M_CONFIRM_SPEEDUP)
        measured.speedup_ci_low = m.get(t.M_CONFIRM_SPEEDUP_CI_LOW)
        measured.speedup_ci_high = m.get(t.M_CONFIRM_SPEEDUP_CI_HIGH)
        measured.remeasure_speedup_low = m.get(t.M_CONFIRM_REMEASURE_LOW)
        measured.remeasure_speedup_high = m.get(t.M_CONFIRM_REMEASURE_HIGH)
        measured.wall_to_target_seconds_median = m.get(t.M_CONFIRM_WALL_MEDIAN)
        measured.baseline_wall_to_target_seconds_median = m.get(t.M_CONFIRM_BASELINE_WALL_MEDIAN)
        measured.wall_speedup_vs_baseline = m.get(t.M_CONFIRM_WALL_SPEEDUP)
        _add_ablation(measured, parent.data.tags.get(t.TAG_ABLATION))
    recipe.measured = measured
    how = (f"median of {measured.repeats} confirmation runs with new seeds, each in a fresh process"
           if measured.confirmed else
           "one search measurement, unconfirmed (set confirm.repeats >= 3 for medians, a speed-up and its interval)")
    header = (f"# Exported by autospeed from search '{name}' ({measured.search_id}), trial {best.trial_id}.\n"
              f"# TTA is train-clock seconds to {recipe.resolved_target.describe()} on "
              f"{f'{recipe.workers} data-parallel workers (one device each) on ' if recipe.workers > 1 else ''}"
              f"{env.get('device_name', 'the search machine')}, "
              f"{how}; `measured` is ignored by training.\n")
    return header + recipe.to_yaml(), best


def _add_ablation(measured: Measured, tag: str | None) -> None:
    """measured.ablation from the parent's ablation tag (search/ablation.py): knob -> speed-up lost."""
    if not tag:
        return
    record = json.loads(tag)
    measured.ablation = {k: v["speedup_lost"] if v["speedup_lost"] is not None else v["speedup_lost_at_least"]
                         for k, v in record.items() if (v["speedup_lost"] or v["speedup_lost_at_least"]) is not None}
    measured.ablation_at_least = [k for k, v in record.items() if v["speedup_lost_at_least"] is not None] or None


def speedup_lines(measured: Measured | None) -> list[str]:
    """What `autospeed export` prints about the speed-up: train clock with its interval, and wall."""
    if measured is None or not measured.confirmed or measured.speedup_vs_baseline is None:
        return []
    if measured.speedup_ci_low is not None and measured.speedup_ci_high is not None:
        interval = f", 90% interval {measured.speedup_ci_low:.2f}x to {measured.speedup_ci_high:.2f}x"
    elif measured.speedup_ci_low is not None:
        interval = f", 90% interval from {measured.speedup_ci_low:.2f}x (unbounded above)"
    else:
        interval = f", no interval: {'too few repeats for an interval' if (measured.repeats or 0) < 3 else 'too many missed targets'}"
    lines = [f"speed-up over the baseline: {measured.speedup_vs_baseline:.2f}x on the train clock "
             f"(median of {measured.repeats} fresh-process runs each{interval})"]
    if measured.remeasure_speedup_low is not None and measured.remeasure_speedup_high is not None:
        lines.append(f"  predicted: a re-measurement with 7 fresh runs a side falls at "
                     f"{measured.remeasure_speedup_low:.2f}x to {measured.remeasure_speedup_high:.2f}x (90%)")
    if measured.wall_speedup_vs_baseline is not None:
        lines.append(f"speed-up over the baseline: {measured.wall_speedup_vs_baseline:.2f}x on the wall to target "
                     f"(process start to target: {measured.baseline_wall_to_target_seconds_median:.2f} s -> "
                     f"{measured.wall_to_target_seconds_median:.2f} s)")
    if measured.ablation:
        parts = [f"{k} {'>=' if k in (measured.ablation_at_least or []) else ''}{v:.2f}x"
                 for k, v in sorted(measured.ablation.items(), key=lambda kv: -kv[1])]
        lines.append("speed-up lost without each knob (ablation): " + ", ".join(parts))
    return lines


def export(client, name: str, out: str | os.PathLike) -> tuple[Path, res.TrialRow]:
    text, best = best_recipe_yaml(client, name)
    return write_atomic(out, text), best
