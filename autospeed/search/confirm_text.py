"""The text of a confirmation (search/confirm.py): its opening line, its table, its interval line, its cost line
and one run's result."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from autospeed.outcome import REMEASURE_RUNS
from autospeed.search.confirm_fewest import ROUNDS, plan_text
from autospeed.search.confirm_stats import CONFIDENCE
from autospeed.track.export import SLOWER_THAN_GIVEN

if TYPE_CHECKING:
    from autospeed.search.confirm_stats import Candidate, ConfirmOutcome
    from autospeed.space import Confirm


def planned_runs(confirm: Confirm, candidates: int) -> str:
    """The runs a confirmation of `candidates` plans, for its progress lines: "6", "6+" (rounds may be added up to
    confirm.max_repeats) or "<=3" (a long job's, at most one a candidate)."""
    total = confirm.repeats * candidates
    if confirm.max_repeats > confirm.repeats:
        return f"{total}+"
    return f"{total}" if confirm.runs_mode == ROUNDS else f"<={candidates}"


def opening_line(candidates: list[Candidate], confirm: Confirm, confidence: float) -> str:
    """What the confirmation will train, against what, and how (`confidence`: its per-look level)."""
    repeats, given = confirm.repeats, confirm.baseline_tta_seconds
    max_repeats = max(repeats, confirm.max_repeats)
    more = (f", up to {max_repeats} while the winner is not separated (each look at {confidence:.1%}, so the "
            f"reported interval keeps {CONFIDENCE:.0%} wherever it stops)") if max_repeats > repeats else ""
    against = (f"against the baseline's given TTA, {given:g} s ({confirm.baseline_tta_note}), not re-run"
               if given is not None else "and the baseline")
    budget = confirm.max_train_seconds
    with_budget = f", a {budget:g} s train budget" if budget is not None else ""
    compiling = "" if all(c.recipe.compile == "none" for c in candidates) else (
        " compiling from an empty inductor cache of its own (confirm.compile_cache: cold)"
        if confirm.compile_cache == "cold" else " compiling from this machine's inductor cache (warm)")
    plan = (f"{repeats} interleaved repeats each{more}" if confirm.runs_mode == ROUNDS
            else plan_text(confirm.runs_mode, len(candidates)))
    return (f"\nconfirming {len(candidates) - any(c.baseline for c in candidates)} best recipe(s) {against}: "
            f"{plan}, new seeds{with_budget}, each run in a fresh process{compiling} "
            f"({planned_runs(confirm, len(candidates))} runs)")


def compute_line(outcome: ConfirmOutcome) -> str:
    """`confirmation compute: 12 runs (6 of them the compile ways), 41.3 s of train clock = 3.2 baseline runs` (the
    baseline's median TTA, measured or given)."""
    runs, n = outcome.compute_baseline_runs, sum(len(c.train_seconds) for c in outcome.runs)
    ways = sum(len(c.train_seconds) for c in outcome.compile_ways.values())
    base = f"{runs:.2f}" if runs is not None else "? (the baseline's median run missed its target:)"
    return (f"confirmation compute: {n} runs{f' ({ways} of them the compile ways)' if ways else ''}, "
            f"{outcome.compute_seconds:.1f} s of train clock = {base} baseline runs")


def summary_lines(outcome: ConfirmOutcome) -> list[str]:
    """The search's closing summary of a confirmation: the confirmed best with its speed-up (against the
    baseline's median, or its given TTA) and what confirmation cost, in baseline runs."""
    w, speedup = outcome.winner, outcome.speedup
    if w is None:
        return [compute_line(outcome)]
    given = outcome.baseline_given_seconds is not None
    runs = f"{outcome.repeats} repeats" if outcome.runs_mode == "rounds" else f"{len(w.ttas)} run"
    against = (f"the baseline's given TTA, {outcome.baseline_given_seconds:g} s" if given else
               "the baseline's median")
    lines = [f"confirmed best: {w.label}, median TTA {w.median:.2f} s (min {min(w.reached):.2f}, "
             f"max {max(w.reached):.2f}, {runs})"
             + (f", {speedup:.2f}x faster than {against} (train clock; {format_interval(outcome)})"
                if speedup else "")]
    if outcome.wall_speedup:
        lines.append(f"  on the wall to target (process start to target, fresh processes): "
                     f"{outcome.wall_speedup:.2f}x ({outcome.baseline.wall_median:.2f} s -> {w.wall_median:.2f} s)")
    return lines + [compute_line(outcome)]


def describe(result) -> str:
    tta = f"TTA {result.tta_seconds:.2f} s" if result.tta_seconds is not None else str(result.status)
    wall = getattr(result, "wall_to_target_seconds", None)
    return tta + (f", wall to target {wall:.2f} s" if wall is not None else "")


def format_interval(outcome: ConfirmOutcome) -> str:
    """'90% interval over the seeds: 4.9x to 7.9x', or why there is none."""
    low, high = outcome.speedup_interval
    if low is None or high is None:
        return outcome.interval_note or "no interval"
    high_text = f"{high:.2f}x" if math.isfinite(high) else "unbounded"
    level = f"{CONFIDENCE:.0%} interval over the seeds"
    if outcome.confidence > CONFIDENCE:
        level += f" (each look at {outcome.confidence:.1%})"
    text = f"{level}: {low:.2f}x to {high_text}"
    p_low, p_high = outcome.remeasure_interval
    if p_low is not None:
        text += (f"; a re-measurement with {REMEASURE_RUNS} fresh runs a side is predicted at {p_low:.2f}x to "
                 f"{p_high:.2f}x (90%)")
    return text


def format_confirmation(outcome: ConfirmOutcome) -> str:
    """A plain-text table: each confirmed recipe's median, min and max TTA over the repeats, and its wall."""
    base = outcome.baseline_tta_seconds
    how = (f"{outcome.repeats} interleaved repeats per recipe" if outcome.runs_mode == "rounds" else
           f"confirm.runs: {outcome.runs_mode}, each recipe at most once (one run: no interval)")
    lines = [f"confirmation: {how}, new seeds, each in a fresh process; "
             f"TTA in train-clock seconds, wall = process start to target; search TTA ~: predicted",
             f"  {'recipe':<16} {'search TTA':>10} {'median':>8} {'min':>8} {'max':>8} {'reached':>8} "
             f"{'wall':>8} {'vs base':>8}"]
    order = sorted(outcome.candidates, key=lambda c: c.median if c.median is not None else math.inf)
    fmt = lambda x: f"{x:.2f}" if x is not None else "-"  # noqa: E731
    for c in order:
        got = c.reached
        vs = (f"{base / c.median:.2f}x" if base and c.median else "-")
        mark = " <- confirmed best" if c is outcome.winner else ""
        search = fmt(c.search_tta_seconds) if c.search_predicted is None else f"~{c.search_predicted[0]:.2f}"
        if c.not_run is not None:
            lines.append(f"  {c.label[-16:]:<16} {search:>10} not run: {c.not_run}")
            continue
        lines.append(f"  {c.label[-16:]:<16} {search:>10} {fmt(c.median):>8} "
                     f"{fmt(min(got) if got else None):>8} {fmt(max(got) if got else None):>8} "
                     f"{len(got):>4}/{len(c.ttas):<3} {fmt(c.wall_median):>8} {vs:>8}{mark}")
    if outcome.baseline_given_seconds is not None:
        lines.append(f"  {'baseline':<16} {'':>10} {fmt(base):>8}  given ({outcome.baseline_note}), not re-run")
    if outcome.speedup is not None and outcome.baseline_given_seconds is not None:
        low, high = outcome.speedup_range
        spread = f", {low:.2f}x to {high:.2f}x over its runs" if low is not None else ""
        lines.append(f"  speed-up of the confirmed best: {outcome.speedup:.2f}x train clock (given baseline TTA / "
                     f"its median{spread}); {outcome.interval_note}")
        if outcome.speedup < 1:  # the baseline was not run, so it could not win: say that it would have
            lines.append(f"  {SLOWER_THAN_GIVEN}")
    elif outcome.speedup is not None:
        wall = f"; wall to target {outcome.wall_speedup:.2f}x" if outcome.wall_speedup else ""
        lines.append(f"  speed-up of the confirmed best: {outcome.speedup:.2f}x train clock (ratio of medians), "
                     f"{format_interval(outcome)}{wall}")
    return "\n".join(lines)
