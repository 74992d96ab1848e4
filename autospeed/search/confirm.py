"""Confirmation runs (docs/design.md "Confirmation runs", "Honest figures").

One TTA measurement is noisy, and the best of many noisy measurements is biased
low (the winner's curse). After the search, the top `confirm.top_k` recipes that
reached or were predicted (in the leaderboard's order) and the baseline train
`confirm.repeats` more times with new seeds, interleaved (A B C A B C ...) so
machine drift hits all alike. Winner and
speed-up are decided on medians and reported with min and max and a 90% interval
(autospeed.outcome.speedup_interval, coverage checked by
experiments/interval_coverage.py; none from fewer than 3 runs a side).

Every sample is taken the way production trains: each run in a fresh process, as
`autospeed train --config best.yaml` does (its interpreter start, imports and data
loading are in its wall to target, its cold start on its train clock), after Ray has
shut down, with all cores. The baseline's search trial is not one of its samples: it
ran in a reused Ray actor, and samples taken in different conditions are never pooled.

Repeats are decided before looking: `repeats` rounds, then, with `confirm.max_repeats`
above it, more rounds while the winner's interval overlaps the runner-up's
(`separated`). Every look uses the per-look level `sequential_confidence` gives
(Bonferroni over the planned looks), so the interval reported wherever the rounds stop
still covers with at least 90%.

Long jobs: `confirm.max_train_seconds` is every confirmation and ablation run's budget (production
length); with `confirm.baseline_tta_seconds` the baseline is not re-run: the speed-up is against that
number, with the range over the winner's runs and no interval, and (`confirm.runs`, search/confirm_fewest.py)
each candidate trains at most once, only while it could still win, or only the search's best, once. The cost is
printed in baseline runs.

Each run is an MLflow child run of the search's parent with `autospeed.kind=confirm`; the
results go to the parent as the `confirm_*` metrics and the `autospeed.confirmed_best_trial`
tag that `autospeed export` reads. With `confirm.ablation`, search/ablation.py then re-times
the winner with each knob set back to the baseline's value (run.py calls it after this).
"""

from __future__ import annotations

import math
import os
import tempfile

from autospeed._ray import stop_ray
from autospeed.outcome import is_infeasible, sequential_confidence
from autospeed.recipe import Recipe, load_recipe
from autospeed.search.compile_ways import measure_compile_ways
from autospeed.search.confirm_fewest import ONE, ROUNDS, confirm_fewest
from autospeed.search.confirm_ledger import RunLedger
from autospeed.search.confirm_sample import confirm_seed, sample
from autospeed.search.confirm_stats import CONFIDENCE, Candidate, ConfirmOutcome, confirm_rounds, decide
from autospeed.search.confirm_text import describe, format_confirmation, opening_line, planned_runs
from autospeed.search.session import SearchSession
from autospeed.space import SearchSpec
from autospeed.track import names, writers
from autospeed.track import runs as res
from autospeed.track.export import (
    COMPILE_CACHE_ARTIFACT,
    exportable,
    predicting,
    production_budget_seconds,
    short_trials,
)
from autospeed.track.store import interrupts_held


def _trial_recipe(client, run_id: str) -> Recipe:
    """The exact recipe a trial trained (its recipe.yaml artifact)."""
    with tempfile.TemporaryDirectory() as tmp:
        return load_recipe(client.download_artifacts(run_id, "recipe.yaml", tmp))


def pick_candidates(client, parent, top_k: int) -> list[Candidate]:
    """The top_k non-baseline trials that reached or were predicted, in the leaderboard's order (runs.ranked:
    reached by search TTA, then by objective, a predicted TTA for a predicted trial), then the baseline (if it
    ran and could train). Under predict or a production budget (trials short by design: track.export.short_trials),
    any trial that trained, in that order (track.export.exportable): a long job's trials need not reach.

    No search measurement is a sample: the trials ran in reused Ray actors, the confirmation runs in fresh
    processes, and samples taken in different conditions are never pooled."""
    rows = res.trial_rows(client, parent)
    short = short_trials(predicting(parent), production_budget_seconds(parent))
    top = [r for r in exportable(rows, short) if not r.baseline][:top_k]
    base = res.baseline_of(rows)
    chosen = top + ([base] if base is not None and not is_infeasible(base.status) else [])
    return [Candidate(r.trial_id, r.baseline, r.tta_seconds if r.reached else None, _trial_recipe(client, r.run_id),
                      search_predicted=_predicted_of(r), run_id=r.run_id,
                      search_seconds=r.metrics.get(names.M_TRAIN_SECONDS)) for r in chosen]


def _predicted_of(r) -> tuple[float, float | None, float | None] | None:
    return (r.tta_predicted_seconds, r.tta_predicted_low_seconds, r.tta_predicted_high_seconds) if r.predicted else None


def run_confirmation(session: SearchSession, spec: SearchSpec,
                     ledger: RunLedger | None = None) -> ConfirmOutcome | None:
    """Re-run the best recipes and the baseline, interleaved, each in a fresh process; log them; set the
    parent's confirm_* results. None when there is nothing to confirm. (The ablation follows: run.py.)
    `ledger`: where the runs are written and what an earlier session finished (the search's, writing through its
    journal); None: one of its own, over the session's outbox."""
    repeats, mode = spec.confirm.repeats, spec.confirm.runs_mode  # rounds, or a long job's fewest or one
    if repeats <= 0:
        return None
    parent = session.client.get_run(session.parent_id)
    candidates, base = _to_confirm(session.client, parent, spec)
    if not any(not c.baseline for c in candidates):
        return None
    trials_total = len(res.trial_rows(session.client, parent))
    stop_ray()
    max_repeats = max(repeats, spec.confirm.max_repeats)
    confidence = sequential_confidence(repeats, max_repeats, CONFIDENCE)
    print(opening_line(candidates, spec.confirm, confidence), file=session.console, flush=True)
    of_total, done = planned_runs(spec.confirm, len(candidates)), 0
    caches = tempfile.TemporaryDirectory(prefix="autospeed-compile-cache-")  # each candidate's latest run's
    ledger = ledger if ledger is not None else RunLedger(session, trials_total)

    def run_once(r: int, i: int, c: Candidate) -> None:
        nonlocal done
        result, kept = sample(ledger, c, r, spec, compile_cache_to=_cache_file(caches.name, i, c))
        done += 1
        print(f"  [{done}/{of_total}] confirm {c.label} (seed {confirm_seed(c, r)}): {describe(result)}"
              + (" (finished before the resume: kept)" if kept else ""), file=session.console, flush=True)

    def run_round(r: int) -> None:
        for i, c in enumerate(candidates):
            run_once(r, i, c)

    with caches:
        if mode == ROUNDS:
            repeats = confirm_rounds(candidates, repeats, max_repeats, run_round, confidence)
        else:  # a long job: each candidate at most once, only while it could still win
            confirm_fewest(candidates, lambda c: run_once(0, candidates.index(c), c), mode)
            repeats = 1
        outcome = decide(candidates, repeats, confidence, baseline=base,
                         given_seconds=spec.confirm.baseline_tta_seconds, given_note=spec.confirm.baseline_tta_note)
        outcome.compile_cache, outcome.runs_mode = spec.confirm.compile_cache, mode
        _log_parent(ledger.out, session.parent_id, outcome, trials_total)
        if outcome.winner is not None:
            cache = _cache_file(caches.name, candidates.index(outcome.winner), outcome.winner)
            _log_compile_cache(ledger.out, outcome.winner, cache, session.console)
            measure_compile_ways(ledger, outcome, spec, cache, session.console)
    return outcome


def _to_confirm(client, parent, spec: SearchSpec) -> tuple[list[Candidate], Candidate | None]:
    """The candidates confirmation trains (pick_candidates; with confirm.max_train_seconds, each at that production
    budget) and the baseline's candidate, which is not among them when its TTA is given (it is not re-run; its
    recipe stays, for the ablation)."""
    candidates = pick_candidates(client, parent, 1 if spec.confirm.runs_mode == ONE else spec.confirm.top_k)
    budget = spec.confirm.max_train_seconds
    if budget is not None:  # a production run to the real target; epochs stay the recipe's
        for c in candidates:
            c.recipe = c.recipe.model_copy(update={"max_train_seconds": budget})
    base = next((c for c in candidates if c.baseline), None)
    if spec.confirm.baseline_tta_seconds is not None:  # known from production: not re-run
        candidates = [c for c in candidates if not c.baseline]
    return candidates, base


def _cache_file(folder: str, index: int, c: Candidate) -> str | None:
    """Where candidate `index`'s runs leave their compile cache (each run overwrites the last); None for a recipe
    that does not compile."""
    if c.recipe.compile == "none":
        return None
    return os.path.join(folder, str(index), COMPILE_CACHE_ARTIFACT)


def _log_compile_cache(out, winner: Candidate, path: str | None, console) -> None:
    """The confirmed winner's compile cache (its last confirmation run's) as an artifact of its trial run, where
    `autospeed export` finds it and writes it beside best.yaml."""
    if path is None or winner.run_id is None or not os.path.exists(path):
        return
    with interrupts_held():
        out.log_artifact(winner.run_id, path)
    print(f"compile cache of the confirmed best: {os.path.getsize(path) / 1e6:.1f} MB of torch.compile artifacts "
          f"from its last confirmation run, logged on its trial run (autospeed export writes it beside the recipe)",
          file=console, flush=True)


def _log_parent(out, parent_run_id: str, outcome: ConfirmOutcome, trials_total: int) -> None:
    w, b = outcome.winner, outcome.baseline
    values = {names.M_CONFIRM_REPEATS: outcome.repeats, names.M_CONFIRM_TRIALS: trials_total,
              names.M_CONFIRM_CONFIDENCE: outcome.confidence}
    if w is not None and w.reached:
        values.update({names.M_CONFIRM_MEDIAN: w.median, names.M_CONFIRM_MIN: min(w.reached),
                       names.M_CONFIRM_MAX: max(w.reached), names.M_CONFIRM_WALL_MEDIAN: w.wall_median})
    given = outcome.baseline_given_seconds is not None
    if given:
        values[names.M_CONFIRM_BASELINE_MEDIAN] = outcome.baseline_given_seconds
    elif b is not None and b.median is not None:
        values[names.M_CONFIRM_BASELINE_MEDIAN] = b.median
        values[names.M_CONFIRM_BASELINE_WALL_MEDIAN] = b.wall_median
    values.update(outcome.compute_metrics)
    values[names.M_CONFIRM_SPEEDUP] = outcome.speedup
    values[names.M_CONFIRM_WALL_SPEEDUP] = outcome.wall_speedup
    low, high = outcome.speedup_interval  # absent (None) with too few runs: no interval is printed then
    values[names.M_CONFIRM_SPEEDUP_CI_LOW] = low
    values[names.M_CONFIRM_SPEEDUP_CI_HIGH] = high if high is None or math.isfinite(high) else None
    values[names.M_CONFIRM_REMEASURE_LOW], values[names.M_CONFIRM_REMEASURE_HIGH] = outcome.remeasure_interval
    tags = {names.TAG_CONFIRMED_BEST: w.trial_id} if w is not None else {}
    tags[names.TAG_CONFIRM_BASELINE_SOURCE] = names.BASELINE_GIVEN if given else names.BASELINE_MEASURED
    tags[names.TAG_CONFIRM_COMPILE_CACHE] = outcome.compile_cache
    if given:
        tags[names.TAG_CONFIRM_BASELINE_NOTE] = outcome.baseline_note[:5000]
    writers.log_batch(out, parent_run_id, writers.metrics(values), tags=tags)
    out.log_text(parent_run_id, format_confirmation(outcome), "confirmation.txt")
