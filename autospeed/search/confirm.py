"""Confirmation runs (DESIGN.md "Confirmation runs").

One TTA measurement is noisy, and the best of many noisy measurements is biased
low (the winner's curse). After the search, the top `confirm.top_k` reached
recipes and the baseline train `confirm.repeats` more times with new seeds,
interleaved (A B C A B C ...) so machine drift hits all alike. Winner and
speed-up are decided on medians and reported with min and max. With
`confirm.max_repeats` above `repeats`, more interleaved rounds follow while the
winner's bootstrap 90% speed-up interval overlaps the runner-up's (`separated`).

Runs happen one at a time with all cores after Ray has shut down, never in the
driver (autospeed/train/process.py says why): on a CPU in one lean process for them
all, on a GPU each in a fresh process, as a production `autospeed train` does.
Each is an MLflow child run of the search's parent with
`autospeed.kind=confirm`; the results go to the parent as the `confirm_*`
metrics and the `autospeed.confirmed_best_trial` tag that `autospeed export` reads.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from dataclasses import dataclass, field

from autospeed.track import runs as res
from autospeed.track import layout as t
from autospeed.outcome import Status, is_infeasible, median_tta, speedup_interval
from autospeed.recipe import Recipe, load_recipe
from autospeed.search._ray import stop_ray
from autospeed.space import SearchSpec
from autospeed.train.process import LeanProcess, train_in_fresh_process

SEED_OFFSET = 1000  # confirmation seeds = recipe seed + 1000 + repeat: never a seed the search used


@dataclass
class Candidate:
    """One recipe under confirmation and its repeated TTAs (None: target not reached)."""

    trial_id: str
    baseline: bool
    search_tta_seconds: float | None
    recipe: Recipe
    ttas: list[float | None] = field(default_factory=list)
    samples_per_second: list[float] = field(default_factory=list)
    carried: int = 0  # leading entries of `ttas` measured by the search (the baseline's trial), not rerun

    @property
    def label(self) -> str:
        return "baseline" if self.baseline else self.trial_id

    @property
    def median(self) -> float | None:
        """Median TTA, a run that missed the target counting as infinitely slow; None if that is the median."""
        return median_tta(self.ttas)

    @property
    def reached(self) -> list[float]:
        return [x for x in self.ttas if x is not None]


@dataclass
class ConfirmOutcome:
    candidates: list[Candidate]
    repeats: int
    winner: Candidate | None
    baseline: Candidate | None

    @property
    def speedup(self) -> float | None:
        if not self.winner or not self.baseline or not self.winner.median or not self.baseline.median:
            return None
        return self.baseline.median / self.winner.median

    @property
    def speedup_interval(self) -> tuple[float | None, float | None]:
        """Bootstrap 90% interval of the winner's speed-up over the seeds."""
        if not self.winner or not self.baseline or self.speedup is None:
            return None, None
        return speedup_interval(self.baseline.ttas, self.winner.ttas)


def _trial_recipe(client, run_id: str) -> Recipe:
    """The exact recipe a trial trained (its recipe.yaml artifact)."""
    with tempfile.TemporaryDirectory() as tmp:
        return load_recipe(client.download_artifacts(run_id, "recipe.yaml", tmp))


def pick_candidates(client, parent, top_k: int) -> list[Candidate]:
    """The top_k reached non-baseline trials by search TTA, then the baseline (if it ran).

    The baseline's trial, when it trained to its end (target reached, or missed within its own budget), is
    its first sample: it was not picked as the best of many, so it carries no winner's curse, and a repeat
    of the slowest recipe in the search is the dearest run there is. The top recipes' trials are not."""
    rows = res.trial_rows(client, parent)
    top = [r for r in res.ranked(rows) if r.reached and not r.baseline][:top_k]
    base = res.baseline_of(rows)
    chosen = top + ([base] if base is not None and not is_infeasible(base.status) else [])
    out = [Candidate(r.trial_id, r.baseline, r.tta_seconds, _trial_recipe(client, r.run_id)) for r in chosen]
    if out and out[-1].baseline and base.status in (Status.REACHED, Status.NOT_REACHED):
        out[-1].ttas, out[-1].carried = [base.tta_seconds if base.reached else None], 1
    return out


def _threads(spec: SearchSpec) -> int | None:
    if spec.resources.gpus_per_trial:
        return spec.resources.cpus_per_trial or None
    return spec.resources.cpus_per_trial or os.cpu_count()


def fresh_process_for(recipe: Recipe) -> bool:
    """Whether a confirmation run of `recipe` trains in a fresh process (on a GPU: see the module doc)."""
    from autospeed.train.trainer import pick_device

    return pick_device(recipe).type == "cuda"


def run_confirmation(client, spec: SearchSpec, parent_run_id: str, search_id: str, console=sys.stdout,
                     repeats: int | None = None, top_k: int | None = None) -> ConfirmOutcome | None:
    """Re-run the best recipes and the baseline, interleaved; log them; set the parent's confirm_* results.

    Returns None when there is nothing to confirm (repeats 0 or no reached trial).
    """
    from autospeed.search.data_parallel import train_on_workers

    repeats = spec.confirm.repeats if repeats is None else repeats
    top_k = spec.confirm.top_k if top_k is None else top_k
    if repeats <= 0:
        return None
    parent = client.get_run(parent_run_id)
    candidates = pick_candidates(client, parent, top_k)
    if not any(not c.baseline for c in candidates):
        return None
    trials_total = len(res.trial_rows(client, parent))
    stop_ray()
    threads = _threads(spec)
    max_repeats = max(repeats, spec.confirm.max_repeats)
    total = repeats * len(candidates) - sum(c.carried for c in candidates)
    more = f", up to {max_repeats} while the winner is not separated" if max_repeats > repeats else ""
    of_total = f"{total}+" if more else f"{total}"
    carried = ", the baseline's trial counting as its first" if any(c.carried for c in candidates) else ""
    print(f"\nconfirming {len(candidates) - any(c.baseline for c in candidates)} best recipe(s) and the baseline: "
          f"{repeats} interleaved repeats each{more}{carried}, new seeds ({of_total} runs)",
          file=console, flush=True)
    done = 0

    def run_round(r: int) -> None:
        nonlocal done
        for c in candidates:
            if r < c.carried:
                continue
            recipe = c.recipe.model_copy(update={"seed": c.recipe.seed + SEED_OFFSET + r})
            run_id = _start_run(client, parent, search_id, c, r, recipe, trials_total)
            if recipe.workers > 1:  # data-parallel: on Ray Train workers, as in its trial
                result = train_on_workers(recipe, cpus=threads, gpus=spec.resources.gpus_per_trial > 0)
            elif fresh_process_for(recipe):
                result = train_in_fresh_process(recipe, threads)
            else:
                result = lean.train(recipe, threads)
            t.finish_run(client, run_id, recipe, result)
            c.ttas.append(result.tta_seconds if result.status == Status.REACHED else None)
            c.samples_per_second.append(result.samples_per_second)
            done += 1
            tta = f"TTA {result.tta_seconds:.2f} s" if result.tta_seconds is not None else result.status
            print(f"  [{done}/{of_total}] confirm {c.label} (seed {recipe.seed}): {tta}", file=console, flush=True)

    try:
        with LeanProcess() as lean:
            repeats = confirm_rounds(candidates, repeats, max_repeats, run_round)
    except BaseException:  # Ctrl-C, SIGTERM, a crash: no confirm run may stay RUNNING
        _end_killed(client, parent)
        raise

    outcome = _decide(candidates, repeats)
    _log_parent(client, parent_run_id, outcome, trials_total)
    return outcome


def confirm_rounds(candidates: list[Candidate], repeats: int, max_repeats: int, run_round) -> int:
    """Run interleaved rounds (`run_round(r)` trains every candidate once): `repeats` of them, then more,
    up to `max_repeats` in all, while the winner is not separated from the runner-up. Returns the rounds run."""
    rounds = 0
    while rounds < repeats or (rounds < max_repeats and not separated(candidates)):
        run_round(rounds)
        rounds += 1
    return rounds


def separated(candidates: list[Candidate]) -> bool:
    """The winner's bootstrap 90% speed-up interval lies above the runner-up's (the baseline included, whose
    speed-up is 1 by definition): the ranking would not change with more seeds, within that confidence.
    A winner whose interval is undefined at its low end (too many missed targets) is not separated; a
    runner-up undefined at its high end is beaten. Without a baseline or a runner-up there is nothing to separate."""
    base = next((c for c in candidates if c.baseline), None)
    ranked = sorted((c for c in candidates if c.median is not None), key=lambda c: c.median)
    if base is None or base.median is None or len(ranked) < 2:
        return True
    winner_low, _ = speedup_interval(base.ttas, ranked[0].ttas)
    _, runner_up_high = speedup_interval(base.ttas, ranked[1].ttas)
    if winner_low is None:
        return False
    return runner_up_high is None or winner_low > runner_up_high


def _decide(candidates: list[Candidate], repeats: int) -> ConfirmOutcome:
    base = next((c for c in candidates if c.baseline), None)
    ranked = sorted((c for c in candidates if c.median is not None), key=lambda c: c.median)
    return ConfirmOutcome(candidates, repeats, ranked[0] if ranked else None, base)


def _start_run(client, parent, search_id: str, c: Candidate, repeat: int, recipe: Recipe, trials_total: int) -> str:
    with t.interrupts_held():
        run = client.create_run(parent.info.experiment_id, run_name=f"confirm-{c.label}-r{repeat}", tags={
            t.TAG_PARENT: parent.info.run_id, t.TAG_SEARCH_ID: search_id, t.TAG_TRIAL_ID: c.trial_id,
            t.TAG_KIND: t.KIND_CONFIRM, t.TAG_BASELINE: str(c.baseline).lower(), t.TAG_STATUS: Status.RUNNING.value,
            t.TAG_CONFIRM_REPEAT: str(repeat), t.TAG_CONFIRM_TRIALS: str(trials_total)})
        t.log_batch(client, run.info.run_id, params=t.recipe_params(recipe.training_fields()))
    return run.info.run_id


def _end_killed(client, parent) -> None:
    """Mark this search's confirm runs still RUNNING as KILLED (wherever the interrupt landed)."""
    try:
        running = client.search_runs(
            [parent.info.experiment_id], max_results=1000,
            filter_string=f"tags.`{t.TAG_PARENT}` = '{parent.info.run_id}' and tags.`{t.TAG_KIND}` = "
                          f"'{t.KIND_CONFIRM}' and attributes.status = 'RUNNING'")
        for run in running:
            t.mark_killed(client, run.info.run_id)
    except Exception as e:  # the store may be the thing that broke; the interrupt matters more
        print(f"autospeed: warning: could not mark interrupted confirmation runs KILLED ({e})", file=sys.stderr)


def _log_parent(client, parent_run_id: str, outcome: ConfirmOutcome, trials_total: int) -> None:
    w, b = outcome.winner, outcome.baseline
    values = {t.M_CONFIRM_REPEATS: outcome.repeats, t.M_CONFIRM_TRIALS: trials_total}
    if w is not None and w.reached:
        values.update({t.M_CONFIRM_MEDIAN: w.median, t.M_CONFIRM_MIN: min(w.reached), t.M_CONFIRM_MAX: max(w.reached)})
    if b is not None and b.median is not None:
        values[t.M_CONFIRM_BASELINE_MEDIAN] = b.median
    values[t.M_CONFIRM_SPEEDUP] = outcome.speedup
    values[t.M_CONFIRM_SPEEDUP_CI_LOW], values[t.M_CONFIRM_SPEEDUP_CI_HIGH] = outcome.speedup_interval
    tags = {t.TAG_CONFIRMED_BEST: w.trial_id} if w is not None else {}
    if b is not None and b.carried:
        tags[t.TAG_CONFIRM_CARRIED] = b.trial_id  # the report adds that trial's TTA to the baseline's runs
    t.log_batch(client, parent_run_id, t.metrics(values), tags=tags)
    client.log_text(parent_run_id, format_confirmation(outcome), "confirmation.txt")


def format_confirmation(outcome: ConfirmOutcome) -> str:
    """A plain-text table: each confirmed recipe's median, min and max TTA over the repeats."""
    base = outcome.baseline
    lines = [f"confirmation: {outcome.repeats} interleaved repeats per recipe, new seeds, TTA in train-clock seconds",
             f"  {'recipe':<16} {'search TTA':>10} {'median':>8} {'min':>8} {'max':>8} {'reached':>8} {'vs base':>8}"]
    order = sorted(outcome.candidates, key=lambda c: c.median if c.median is not None else math.inf)
    for c in order:
        got = c.reached
        fmt = lambda x: f"{x:.2f}" if x is not None else "-"  # noqa: E731
        vs = (f"{base.median / c.median:.2f}x" if base is not None and base.median and c.median else "-")
        mark = " <- confirmed best" if c is outcome.winner else ""
        lines.append(f"  {c.label[-16:]:<16} {fmt(c.search_tta_seconds):>10} {fmt(c.median):>8} "
                     f"{fmt(min(got) if got else None):>8} {fmt(max(got) if got else None):>8} "
                     f"{len(got):>4}/{len(c.ttas):<3} {vs:>8}{mark}")
    low, high = outcome.speedup_interval
    if outcome.speedup is not None:
        interval = (f"{low:.2f}x to {high:.2f}x" if low is not None and high is not None and math.isfinite(high)
                    else "undefined (too many missed targets)")
        lines.append(f"  speed-up of the confirmed best: {outcome.speedup:.2f}x (ratio of medians); "
                     f"bootstrap 90% interval over the seeds: {interval}")
    return "\n".join(lines)
