"""The text of a confirmation (autospeed/search/confirm_text.py): the opening line that says what will train and
how many runs, which the progress lines count against."""

from __future__ import annotations

from autospeed.outcome import sequential_confidence
from autospeed.recipe import Recipe
from autospeed.search.confirm_stats import Candidate
from autospeed.search.confirm_text import opening_line, planned_runs
from autospeed.space import Confirm


def candidates(compile_: str = "none") -> list[Candidate]:
    return [Candidate("t1", False, None, Recipe(compile=compile_)), Candidate("t2", False, None, Recipe()),
            Candidate("base", True, None, Recipe())]


def test_rounds_say_their_runs_and_that_more_may_follow_at_the_stricter_level():
    fixed, adaptive = Confirm(repeats=3), Confirm(repeats=3, max_repeats=7)
    assert planned_runs(fixed, 3) == "9" and planned_runs(adaptive, 3) == "9+"
    assert planned_runs(Confirm(repeats=3, max_repeats=3), 3) == "9"  # no round above repeats: none added
    line = opening_line(candidates(), fixed, 0.9)
    assert line == ("\nconfirming 2 best recipe(s) and the baseline: 3 interleaved repeats each, new seeds, each run "
                    "in a fresh process (9 runs)")
    line = opening_line(candidates("default"), adaptive, sequential_confidence(3, 7))
    assert "3 interleaved repeats each, up to 7 while the winner is not separated (each look at 98.0%, so the " \
           "reported interval keeps 90% wherever it stops)" in line
    assert "compiling from an empty inductor cache of its own (confirm.compile_cache: cold) (9+ runs)" in line


def test_a_long_job_says_its_given_baseline_and_at_most_one_run_a_candidate():
    confirm = Confirm(max_train_seconds=600, baseline_tta_seconds=3600, baseline_tta_note="prod, 8 GPUs")
    runs = candidates()[:2]  # the baseline is not re-run
    assert planned_runs(confirm, len(runs)) == "<=2"
    line = opening_line(runs, confirm, 0.9)
    assert line.startswith("\nconfirming 2 best recipe(s) against the baseline's given TTA, 3600 s (prod, 8 GPUs), "
                           "not re-run: at most 2 run(s) (confirm.runs: fewest)")
    assert line.endswith(", new seeds, a 600 s train budget, each run in a fresh process (<=2 runs)")
