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
import sys
import tempfile
from dataclasses import dataclass, field

from autospeed.outcome import (
    REMEASURE_RUNS,
    Status,
    interval_note,
    is_infeasible,
    median_tta,
    remeasure_interval,
    sequential_confidence,
    speedup_interval,
)
from autospeed.recipe import Recipe, load_recipe
from autospeed.run_recipe import train_in_fresh_process
from autospeed.script.options import is_script
from autospeed.search._ray import stop_ray
from autospeed.search.confirm_fewest import ONE, ROUNDS, confirm_fewest, plan_text
from autospeed.search.confirm_ledger import RunLedger
from autospeed.search.confirm_text import CONFIDENCE, compute_line, describe, format_confirmation, format_interval  # noqa: F401
from autospeed.space import SearchSpec
from autospeed.track import layout
from autospeed.track import runs as res
from autospeed.track.export import COMPILE_CACHE_ARTIFACT, exportable, predicting

SEED_OFFSET = 1000  # confirmation seeds = recipe seed + 1000 + repeat: never a seed the search used


@dataclass
class Candidate:
    """One recipe under confirmation and its repeated runs (TTA None: target not reached)."""

    trial_id: str
    baseline: bool
    search_tta_seconds: float | None
    recipe: Recipe
    ttas: list[float | None] = field(default_factory=list)
    walls: list[float | None] = field(default_factory=list)  # wall to target: process start to the target
    samples_per_second: list[float] = field(default_factory=list)
    name: str | None = None  # shown instead of the trial id (ablation: "without batch_size")
    train_seconds: list[float] = field(default_factory=list)  # train clock of each run: what it cost
    # (seconds, low, high) of a trial that did not reach but was predicted (autospeed.predict)
    search_predicted: tuple[float, float | None, float | None] | None = None
    run_id: str | None = None  # the trial's MLflow run: a compiled winner's compile cache is logged on it
    search_seconds: float | None = None  # train seconds its trial spent (search/confirm_fewest.py's bound)
    not_run: str | None = None  # confirm.runs fewest or one: why it was not trained

    @property
    def label(self) -> str:
        return self.name or ("baseline" if self.baseline else self.trial_id)

    @property
    def median(self) -> float | None:
        """Median TTA, a run that missed the target counting as infinitely slow; None if that is the median."""
        return median_tta(self.ttas)

    @property
    def wall_median(self) -> float | None:
        return median_tta(self.walls)

    @property
    def reached(self) -> list[float]:
        return [x for x in self.ttas if x is not None]

    def record(self, result) -> None:
        reached = result.status == Status.REACHED
        self.ttas.append(result.tta_seconds if reached else None)
        self.walls.append(getattr(result, "wall_to_target_seconds", None) if reached else None)
        self.samples_per_second.append(result.samples_per_second)
        self.train_seconds.append(result.train_seconds)


@dataclass
class ConfirmOutcome:
    candidates: list[Candidate]
    repeats: int
    winner: Candidate | None
    baseline: Candidate | None
    confidence: float = CONFIDENCE  # per-look level of the intervals (sequential repeats: above 0.9)
    ablation: list = field(default_factory=list)  # ablation.Ablated, when confirm.ablation ran
    ablation_interrupted: bool = False
    # confirm.baseline_tta_seconds: the baseline's TTA given, not re-run (`baseline` then only holds its recipe)
    baseline_given_seconds: float | None = None
    baseline_note: str = ""
    compile_cache: str = layout.COMPILE_CACHE_COLD  # confirm.compile_cache: the inductor cache every run compiled from
    runs_mode: str = ROUNDS  # confirm.runs as it applied: rounds, fewest or one (search/confirm_fewest.py)

    @property
    def baseline_tta_seconds(self) -> float | None:
        """The baseline's median TTA: the given number, else its confirmation runs' median."""
        if self.baseline_given_seconds is not None:
            return self.baseline_given_seconds
        return self.baseline.median if self.baseline is not None else None

    @property
    def speedup(self) -> float | None:
        base = self.baseline_tta_seconds
        if not self.winner or not self.winner.median or not base:
            return None
        return base / self.winner.median

    @property
    def speedup_range(self) -> tuple[float | None, float | None]:
        """Given baseline: given / the winner's slowest reached run .. given / its fastest (no interval)."""
        given, w = self.baseline_given_seconds, self.winner
        return (given / max(w.reached), given / min(w.reached)) if given and w and w.reached else (None, None)

    @property
    def wall_speedup(self) -> float | None:
        """The same ratio on wall to target (process start to target): what a production process sees."""
        if self.baseline_given_seconds is not None:  # a given train-clock TTA says nothing of the wall
            return None
        if not self.winner or not self.baseline or not self.winner.wall_median or not self.baseline.wall_median:
            return None
        return self.baseline.wall_median / self.winner.wall_median

    @property
    def speedup_interval(self) -> tuple[float | None, float | None]:
        """90% interval of the winner's speed-up over the seeds (None, None with too few runs, or a given
        baseline)."""
        if not self.winner or not self.baseline or self.speedup is None or self.baseline_given_seconds is not None:
            return None, None
        return speedup_interval(self.baseline.ttas, self.winner.ttas, self.confidence)

    @property
    def remeasure_interval(self) -> tuple[float | None, float | None]:
        """Predicted range of the speed-up a user measures again with 7 fresh runs a side (a prediction)."""
        if not self.winner or not self.baseline or self.speedup is None or self.baseline_given_seconds is not None:
            return None, None
        return remeasure_interval(self.baseline.ttas, self.winner.ttas, REMEASURE_RUNS, CONFIDENCE)

    @property
    def interval_note(self) -> str | None:
        """Why there is no interval (a given baseline, too few repeats, too many missed targets), else None."""
        if self.baseline_given_seconds is not None:
            return f"baseline TTA given ({self.baseline_note}), not measured here: no interval"
        if not self.winner or not self.baseline:
            return None
        return interval_note(self.baseline.ttas, self.winner.ttas, self.confidence)

    @property
    def compute_seconds(self) -> float:
        """Train-clock seconds of every confirmation run (missed targets at their whole budget)."""
        return sum(sum(c.train_seconds) for c in self.candidates)

    @property
    def compute_baseline_runs(self) -> float | None:
        """compute_seconds in baseline runs (/ the baseline's median TTA, measured or given)."""
        return self.compute_seconds / self.baseline_tta_seconds if self.baseline_tta_seconds else None


def _trial_recipe(client, run_id: str) -> Recipe:
    """The exact recipe a trial trained (its recipe.yaml artifact)."""
    with tempfile.TemporaryDirectory() as tmp:
        return load_recipe(client.download_artifacts(run_id, "recipe.yaml", tmp))


def pick_candidates(client, parent, top_k: int) -> list[Candidate]:
    """The top_k non-baseline trials that reached or were predicted, in the leaderboard's order (runs.ranked:
    reached by search TTA, then by objective, a predicted TTA for a predicted trial), then the baseline (if it
    ran and could train). Under predict, any trial that trained, in that order (track.export.exportable).

    No search measurement is a sample: the trials ran in reused Ray actors, the confirmation runs in fresh
    processes, and samples taken in different conditions are never pooled."""
    rows = res.trial_rows(client, parent)
    top = [r for r in exportable(rows, predicting(parent)) if not r.baseline][:top_k]
    base = res.baseline_of(rows)
    chosen = top + ([base] if base is not None and not is_infeasible(base.status) else [])
    return [Candidate(r.trial_id, r.baseline, r.tta_seconds if r.reached else None, _trial_recipe(client, r.run_id),
                      search_predicted=_predicted_of(r), run_id=r.run_id,
                      search_seconds=r.metrics.get(layout.M_TRAIN_SECONDS)) for r in chosen]


def _predicted_of(r) -> tuple[float, float | None, float | None] | None:
    return (r.tta_predicted_seconds, r.tta_predicted_low_seconds, r.tta_predicted_high_seconds) if r.predicted else None


def _threads(spec: SearchSpec) -> int | None:
    if spec.resources.gpus_per_trial:
        return spec.resources.cpus_per_trial or None
    return spec.resources.cpus_per_trial or os.cpu_count()


def train_like_production(recipe: Recipe, spec: SearchSpec, compile_cache_to: str | None = None):
    """One confirmation or ablation run: in a fresh process (data-parallel: on Ray Train workers, as in its
    trial), never in this driver, compiling from a new empty inductor cache unless `confirm.compile_cache: warm`.
    `compile_cache_to`: where a compiled run in a fresh process leaves its torch.compile cache
    (autospeed.train.compile_cache; none from data-parallel workers)."""
    from autospeed.search.data_parallel import train_on_workers

    threads = _threads(spec)
    if recipe.workers > 1 and not is_script(recipe.workload):  # a script starts its own workers
        return train_on_workers(recipe, cpus=threads, gpus=spec.resources.gpus_per_trial > 0,
                                compile_cache=spec.confirm.compile_cache)
    return train_in_fresh_process(recipe, threads, compile_cache_to, compile_cache=spec.confirm.compile_cache)


def run_confirmation(client, spec: SearchSpec, parent_run_id: str, search_id: str, console=sys.stdout,
                     repeats: int | None = None, top_k: int | None = None,
                     ledger: RunLedger | None = None) -> ConfirmOutcome | None:
    """Re-run the best recipes and the baseline, interleaved, each in a fresh process; log them; set the
    parent's confirm_* results. None when there is nothing to confirm. (The ablation follows: run.py.)
    `ledger`: where the runs are written and what an earlier session finished (the search's, writing through its
    journal); None: one of its own, writing straight to the store."""
    repeats = spec.confirm.repeats if repeats is None else repeats
    mode = spec.confirm.runs_mode  # rounds, or a long job's fewest or one (search/confirm_fewest.py)
    top_k = 1 if mode == ONE else spec.confirm.top_k if top_k is None else top_k
    if repeats <= 0:
        return None
    parent = client.get_run(parent_run_id)
    candidates = pick_candidates(client, parent, top_k)
    if not any(not c.baseline for c in candidates):
        return None
    budget, given = spec.confirm.max_train_seconds, spec.confirm.baseline_tta_seconds
    if budget is not None:  # a production run to the real target; epochs stay the recipe's
        for c in candidates:
            c.recipe = c.recipe.model_copy(update={"max_train_seconds": budget})
    base = next((c for c in candidates if c.baseline), None)
    if given is not None:  # known from production: not re-run (its recipe stays, for the ablation)
        candidates = [c for c in candidates if not c.baseline]
    trials_total = len(res.trial_rows(client, parent))
    stop_ray()
    max_repeats = max(repeats, spec.confirm.max_repeats)
    confidence = sequential_confidence(repeats, max_repeats, CONFIDENCE)
    total = repeats * len(candidates)
    more = (f", up to {max_repeats} while the winner is not separated (each look at {confidence:.1%}, so the "
            f"reported interval keeps {CONFIDENCE:.0%} wherever it stops)") if max_repeats > repeats else ""
    of_total = f"{total}+" if more else f"{total}" if mode == ROUNDS else f"<={len(candidates)}"
    against = (f"against the baseline's given TTA, {given:g} s ({spec.confirm.baseline_tta_note}), not re-run"
               if given is not None else "and the baseline")
    with_budget = f", a {budget:g} s train budget" if budget is not None else ""
    compiling = "" if all(c.recipe.compile == "none" for c in candidates) else (
        " compiling from an empty inductor cache of its own (confirm.compile_cache: cold)"
        if spec.confirm.compile_cache == "cold" else " compiling from this machine's inductor cache (warm)")
    plan = (f"{repeats} interleaved repeats each{more}" if mode == ROUNDS else plan_text(mode, len(candidates)))
    print(f"\nconfirming {len(candidates) - any(c.baseline for c in candidates)} best recipe(s) {against}: "
          f"{plan}, new seeds{with_budget}, each run in a fresh process{compiling} ({of_total} runs)",
          file=console, flush=True)
    done = 0
    caches = tempfile.TemporaryDirectory(prefix="autospeed-compile-cache-")  # each candidate's latest run's
    if ledger is None:
        ledger = RunLedger(client, parent, search_id, trials_total, console=console)

    def run_once(r: int, i: int, c: Candidate) -> None:
        nonlocal done
        seed = c.recipe.seed + SEED_OFFSET + r
        kept = result = ledger.kept_result(layout.KIND_CONFIRM, c.trial_id, r)
        if kept is not None:
            c.record(kept)
        else:
            ledger.watch("confirmation")
            result = train_and_log(ledger, c, r, seed, layout.KIND_CONFIRM, spec,
                                   compile_cache_to=_cache_file(caches.name, i, c))
        done += 1
        print(f"  [{done}/{of_total}] confirm {c.label} (seed {seed}): {describe(result)}"
              + (" (finished before the resume: kept)" if kept is not None else ""), file=console, flush=True)

    def run_round(r: int) -> None:
        for i, c in enumerate(candidates):
            run_once(r, i, c)

    with caches:
        if mode == ROUNDS:
            repeats = confirm_rounds(candidates, repeats, max_repeats, run_round, confidence)
        else:  # a long job: each candidate at most once, only while it could still win
            confirm_fewest(candidates, lambda c: run_once(0, candidates.index(c), c), mode)
            repeats = 1
        outcome = _decide(candidates, repeats, confidence, baseline=base, given_seconds=given,
                          given_note=spec.confirm.baseline_tta_note)
        outcome.compile_cache, outcome.runs_mode = spec.confirm.compile_cache, mode
        _log_parent(ledger.out, parent_run_id, outcome, trials_total)
        if outcome.winner is not None:
            cache = _cache_file(caches.name, candidates.index(outcome.winner), outcome.winner)
            _log_compile_cache(ledger.out, outcome.winner, cache, console)
            from autospeed.search.compile_ways import measure_compile_ways  # it imports this module

            measure_compile_ways(ledger, outcome, spec, cache, console)
    return outcome


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
    with layout.interrupts_held():
        out.log_artifact(winner.run_id, path)
    print(f"compile cache of the confirmed best: {os.path.getsize(path) / 1e6:.1f} MB of torch.compile artifacts "
          f"from its last confirmation run, logged on its trial run (autospeed export writes it beside the recipe)",
          file=console, flush=True)


def confirm_rounds(candidates: list[Candidate], repeats: int, max_repeats: int, run_round,
                   confidence: float = CONFIDENCE) -> int:
    """Run interleaved rounds (`run_round(r)` trains every candidate once): `repeats` of them, then more,
    up to `max_repeats` in all, while the winner is not separated from the runner-up at `confidence` per
    look (sequential_confidence). Returns the rounds run."""
    rounds = 0
    while rounds < repeats or (rounds < max_repeats and not separated(candidates, confidence)):
        run_round(rounds)
        rounds += 1
    return rounds


def separated(candidates: list[Candidate], confidence: float = CONFIDENCE) -> bool:
    """The winner's speed-up interval lies above the runner-up's (the baseline included, whose speed-up is
    1 by definition): the ranking would not change with more seeds, within that confidence. A winner whose
    interval is undefined at its low end (too few runs, too many missed targets) is not separated; a
    runner-up undefined at its high end is beaten. Without a baseline or a runner-up there is nothing to
    separate."""
    base = next((c for c in candidates if c.baseline), None)
    ranked = sorted((c for c in candidates if c.median is not None), key=lambda c: c.median)
    if len(ranked) < 2:
        return True
    if base is None:  # a given (or no) baseline: the winner against the runner-up itself
        winner_low, _ = speedup_interval(ranked[1].ttas, ranked[0].ttas, confidence)
        return winner_low is not None and winner_low > 1.0
    if base.median is None:
        return True
    winner_low, _ = speedup_interval(base.ttas, ranked[0].ttas, confidence)
    if ranked[1] is base:
        return winner_low is not None and winner_low > 1.0
    _, runner_up_high = speedup_interval(base.ttas, ranked[1].ttas, confidence)
    if winner_low is None:
        return False
    return runner_up_high is None or winner_low > runner_up_high


def _decide(candidates: list[Candidate], repeats: int, confidence: float = CONFIDENCE, *,
            baseline: Candidate | None = None, given_seconds: float | None = None,
            given_note: str = "") -> ConfirmOutcome:
    """The winner on medians among the candidates run (the baseline may win when it ran). `baseline`: its
    candidate when it was not run (a given TTA), else found among `candidates`."""
    base = next((c for c in candidates if c.baseline), baseline)
    ranked = sorted((c for c in candidates if c.median is not None), key=lambda c: c.median)  # the baseline may win
    return ConfirmOutcome(candidates, repeats, ranked[0] if ranked else None, base, confidence,
                          baseline_given_seconds=given_seconds, baseline_note=given_note)


def train_and_log(ledger: RunLedger, c: Candidate, repeat: int, seed: int, kind: str, spec: SearchSpec,
                  tags: dict[str, str] | None = None, compile_cache_to: str | None = None, train=None):
    """One confirmation or ablation run of `c` with `seed`: its MLflow child run of `kind` opened, the recipe
    trained like production (or by `train(recipe)`), the run finished and the result recorded on `c`. Returns the
    result. Interrupted (Ctrl-C, SIGTERM, a crash), its run is closed KILLED: none stays RUNNING."""
    recipe = c.recipe.model_copy(update={"seed": seed})
    run_id = None
    try:
        with layout.interrupts_held():
            run_id = ledger.open_run(kind, c, repeat, recipe, tags)
        result = train(recipe) if train is not None else train_like_production(recipe, spec, compile_cache_to)
    except BaseException:
        if run_id is not None:
            layout.mark_killed(ledger.out, run_id)
        raise
    layout.finish_run(ledger.out, run_id, recipe, result)
    c.record(result)
    return result


def _log_parent(out, parent_run_id: str, outcome: ConfirmOutcome, trials_total: int) -> None:
    w, b = outcome.winner, outcome.baseline
    values = {layout.M_CONFIRM_REPEATS: outcome.repeats, layout.M_CONFIRM_TRIALS: trials_total,
              layout.M_CONFIRM_CONFIDENCE: outcome.confidence}
    if w is not None and w.reached:
        values.update({layout.M_CONFIRM_MEDIAN: w.median, layout.M_CONFIRM_MIN: min(w.reached),
                       layout.M_CONFIRM_MAX: max(w.reached), layout.M_CONFIRM_WALL_MEDIAN: w.wall_median})
    given = outcome.baseline_given_seconds is not None
    if given:
        values[layout.M_CONFIRM_BASELINE_MEDIAN] = outcome.baseline_given_seconds
    elif b is not None and b.median is not None:
        values[layout.M_CONFIRM_BASELINE_MEDIAN] = b.median
        values[layout.M_CONFIRM_BASELINE_WALL_MEDIAN] = b.wall_median
    values[layout.M_CONFIRM_COMPUTE_SECONDS] = outcome.compute_seconds
    values[layout.M_CONFIRM_COMPUTE_BASELINE_RUNS] = outcome.compute_baseline_runs
    values[layout.M_CONFIRM_SPEEDUP] = outcome.speedup
    values[layout.M_CONFIRM_WALL_SPEEDUP] = outcome.wall_speedup
    low, high = outcome.speedup_interval  # absent (None) with too few runs: no interval is printed then
    values[layout.M_CONFIRM_SPEEDUP_CI_LOW] = low
    values[layout.M_CONFIRM_SPEEDUP_CI_HIGH] = high if high is None or math.isfinite(high) else None
    values[layout.M_CONFIRM_REMEASURE_LOW], values[layout.M_CONFIRM_REMEASURE_HIGH] = outcome.remeasure_interval
    tags = {layout.TAG_CONFIRMED_BEST: w.trial_id} if w is not None else {}
    tags[layout.TAG_CONFIRM_BASELINE_SOURCE] = layout.BASELINE_GIVEN if given else layout.BASELINE_MEASURED
    tags[layout.TAG_CONFIRM_COMPILE_CACHE] = outcome.compile_cache
    if given:
        tags[layout.TAG_CONFIRM_BASELINE_NOTE] = outcome.baseline_note[:5000]
    layout.log_batch(out, parent_run_id, layout.metrics(values), tags=tags)
    out.log_text(parent_run_id, format_confirmation(outcome), "confirmation.txt")
