"""Export the best reached trial of a search as a recipe with a `measured` section."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from autospeed import results as res
from autospeed import tracking as t
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
                         f"({len(rows)} trials); raise budget.max_train_seconds or lower target_accuracy and search again")
    confirmed = parent.data.tags.get("autospeed.confirmed_best_trial")
    best = next((r for r in reached if r.trial_id == confirmed), reached[0])
    base = res.baseline_of(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(best.run_id, "recipe.yaml", tmp)
        recipe = load_recipe(path)
    m = parent.data.metrics
    env = json.loads(client.get_run(best.run_id).data.tags.get(t.TAG_ENVIRONMENT, "{}"))
    measured = Measured(
        search_name=name, search_id=parent.data.tags.get(t.TAG_SEARCH_ID), trial_id=best.trial_id,
        tta_seconds=best.tta_seconds,
        tta_seconds_median=m.get(t.M_CONFIRM_MEDIAN, best.tta_seconds),
        tta_seconds_min=m.get(t.M_CONFIRM_MIN, best.tta_seconds),
        tta_seconds_max=m.get(t.M_CONFIRM_MAX, best.tta_seconds),
        repeats=int(m.get(t.M_CONFIRM_REPEATS, 1)),
        baseline_tta_seconds_median=m.get(t.M_CONFIRM_BASELINE_MEDIAN,
                                          base.tta_seconds if base and base.reached else None),
        speedup_vs_baseline=m.get(t.M_CONFIRM_SPEEDUP, res.speedup(base, best)),
        environment=env,
    )
    recipe.measured = measured
    header = (f"# Exported by autospeed from search '{name}' ({measured.search_id}), trial {best.trial_id}.\n"
              f"# TTA is train-clock seconds to target on {env.get('device_name', 'the search machine')}; "
              f"`measured` is ignored by training.\n")
    return header + recipe.to_yaml(), best


def export(client, name: str, out: str | os.PathLike) -> tuple[Path, res.TrialRow]:
    text, best = best_recipe_yaml(client, name)
    return write_atomic(out, text), best
