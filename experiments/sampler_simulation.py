"""Replay the search's samplers over search_efficiency's ground truth: how often does each find the best recipe?

    python experiments/sampler_simulation.py [--seeds 60] [--trials 40]
           [--truth experiments/results/search_efficiency.json] [--out experiments/results/sampler_simulation.md]

No training. Each trial's objective is looked up in the ground-truth table that
experiments/search_efficiency.py measured (its .json: per recipe of its 48-recipe space
and the baseline, the median TTA over same-seed repeats): noise-free, no ASHA, no
confirmation. One Optuna study per sampler and seed, asked through the space's own
define-by-run function (`SearchSpec.define_by_run`: trial 0 is the baseline and samples
nothing), with the search's start-up trial count. Objective: the recipe's true TTA; a
recipe that never reaches the target gets the censored objective with the unknown gap
at its maximum, 2 x the budget (TPE only ranks trials, so any constant above the budget
orders them alike). A seed finds the recipe when one of its trials samples a recipe whose
true TTA is within 10% of the best.

Samplers: TPE as the search builds it (multivariate, group=True); multivariate TPE
without group (what the search used before: the baseline's empty trial makes it fall
back to sampling each knob on its own); random.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import warnings
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, emit_table, shown  # noqa: E402
from search_efficiency import BASE, GRID, key  # noqa: E402

from autospeed.space import spec_from_dict  # noqa: E402

WITHIN = 1.10  # "found": true TTA within 10% of the best


def samplers(seed: int, startup: int) -> dict[str, optuna.samplers.BaseSampler]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return {
            "TPE, multivariate, group=True (the search's)":
                optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, group=True),
            "TPE, multivariate, no group (before the fix)":
                optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True),
            "random": optuna.samplers.RandomSampler(seed=seed),
        }


def replay(spec, sampler, truth: dict[str, float], trials: int, good: float) -> tuple[int | None, int]:
    """(1-based trial number of the first recipe within `good`, or None; distinct recipes tried)."""
    budget = spec.budget.max_train_seconds
    study = optuna.create_study(direction="minimize", sampler=sampler)
    found, tried = None, set()
    for number in range(trials):
        trial = study.ask()
        baseline = spec.define_by_run(trial)["baseline"]
        k = key(BASE["baseline"] if baseline else trial.params)
        tta = truth[k]
        study.tell(trial, tta if math.isfinite(tta) else 2 * budget)
        if not baseline:
            tried.add(k)
            if found is None and tta <= good:
                found = number + 1
    return found, len(tried)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=60)
    p.add_argument("--trials", type=int, default=40, help="trials per study, the baseline (trial 0) included")
    p.add_argument("--truth", default=str(RESULTS / "search_efficiency.json"),
                   help="search_efficiency.py's .json (its `truth`: median TTA per recipe)")
    p.add_argument("--out", help="also write the results as Markdown to this file")
    args = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    saved = json.loads(Path(args.truth).read_text())  # json reads Infinity
    truth = saved["truth"]
    taken = saved.get("meta", {}).get("provenance", "").splitlines()[:1]  # the commit it was measured at
    grid = {k: v for k, v in truth.items() if k != key(BASE["baseline"])}
    good = WITHIN * min(grid.values())
    near = sorted(k for k, v in grid.items() if v <= good)
    spec = spec_from_dict({**BASE, "name": "sampler-simulation"}, "search_efficiency.BASE")
    startup = spec.sampler.n_startup_trials

    results: dict[str, list[tuple[int | None, int]]] = {}
    for seed in range(args.seeds):
        for label, sampler in samplers(seed, startup).items():
            results.setdefault(label, []).append(replay(spec, sampler, truth, args.trials, good))
        print(f"seed {seed}: " + ", ".join(f"{label.split(' (')[0]} {r[-1][0]}" for label, r in results.items()),
              flush=True)

    lines = [
        f"Ground truth: `{shown(args.truth)}` (search_efficiency.py's measurements"
        f"{', ' + taken[0] if taken else ''}); space {json.dumps(GRID)} "
        f"({len(grid)} recipes), best true TTA {min(grid.values()):.2f} s, within {100 * (WITHIN - 1):.0f}% "
        f"({good:.2f} s): {', '.join(near)}. {sum(math.isinf(v) for v in grid.values())} recipes never reach the "
        f"target (objective {2 * spec.budget.max_train_seconds:g}). {args.seeds} sampler seeds, {args.trials} "
        f"trials per study (trial 0 the baseline), {startup} random start-up trials for TPE; noise-free, no ASHA.",
        "",
        "| sampler | seeds that found it | trials to find it (median over those) | distinct recipes tried "
        "per study (median) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, runs in results.items():
        found = [f for f, _ in runs if f is not None]
        lines.append(f"| {label} | {len(found)}/{len(runs)} | "
                     f"{format(statistics.median(found), 'g') if found else '-'} | "
                     f"{statistics.median(n for _, n in runs):g} |")
    emit_table("Sampler simulation over search_efficiency's ground truth", lines, args.out)


if __name__ == "__main__":
    main()
