"""Confirmation a long job can afford (autospeed/search/confirm_fewest.py, `confirm.runs`): with the baseline's
TTA given, each candidate trains at most once and only while its search bound leaves it a chance to beat the
fastest TTA measured so far; `runs: one` trains the search's best once; the closing summary says what it cost in
baseline runs. The rule is checked on Candidates with chosen results, the wiring on real fresh-process runs."""

from __future__ import annotations

import io

import pytest
from mlflow.tracking import MlflowClient

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.search.confirm import run_confirmation
from autospeed.search.confirm_fewest import FEWEST, ONE, confirm_fewest, search_bound_seconds
from autospeed.search.confirm_stats import Candidate, decide
from autospeed.search.confirm_text import format_confirmation, summary_lines
from autospeed.search.session import SearchSession
from autospeed.search.storage import SearchDir
from autospeed.track import names
from autospeed.track.export import SLOWER_THAN_GIVEN

from .test_confirm_long import NONE_REACHED, PRODUCTION_SECONDS, confirm_runs, long_spec, make_search


class _Result:
    """What Candidate.record reads of a TrainResult."""

    def __init__(self, tta: float | None, train_seconds: float):
        self.status = Status.REACHED if tta is not None else Status.NOT_REACHED
        self.tta_seconds, self.train_seconds, self.samples_per_second = tta, train_seconds, 100.0


def candidates() -> list[Candidate]:
    """The leaderboard's top 3: two predicted (80% intervals), one that reached in its trial."""
    return [Candidate("a", False, None, Recipe(), search_predicted=(30.0, 20.0, 45.0), search_seconds=2.0),
            Candidate("b", False, None, Recipe(), search_predicted=(40.0, 35.0, 60.0), search_seconds=2.0),
            Candidate("c", False, 50.0, Recipe())]


def run(measured: dict[str, float | None], mode: str = FEWEST) -> tuple[list[Candidate], list[str]]:
    """Confirm candidates() as `mode` says, each run measuring `measured[trial id]`; the order they trained in."""
    trained: list[str] = []
    cands = candidates()

    def train_once(c: Candidate) -> None:
        trained.append(c.trial_id)
        tta = measured[c.trial_id]
        c.record(_Result(tta, tta if tta is not None else PRODUCTION_SECONDS))

    confirm_fewest(cands, train_once, mode)
    return cands, trained


def test_bounds_are_the_least_tta_the_search_leaves():
    a, b, c = candidates()
    assert [search_bound_seconds(x) for x in (a, b, c)] == [20.0, 35.0, 50.0]
    late = Candidate("late", False, None, Recipe(), search_predicted=(30.0, 20.0, 45.0), search_seconds=25.0)
    assert search_bound_seconds(late) == 25.0  # it trained 25 s without reaching: never faster than that
    assert search_bound_seconds(Candidate("flat", False, None, Recipe())) == 0.0  # nothing known: must run


def test_one_run_decides_when_no_other_candidate_could_beat_it():
    cands, trained = run({"a": 33.0, "b": 30.0, "c": 20.0})
    assert trained == ["a"]  # b's bound 35 s and c's 50 s are above a's 33 s
    assert "its search bound 35.00 s >= the fastest measured TTA 33.00 s" in cands[1].not_run
    outcome = decide(cands, 1, given_seconds=100.0, given_note="prod")
    assert outcome.winner.trial_id == "a" and outcome.speedup == pytest.approx(100.0 / 33.0)
    assert "not run: its search bound 50.00 s" in format_confirmation(outcome)


def test_a_candidate_whose_bound_is_below_the_fastest_run_is_trained_and_may_win():
    cands, trained = run({"a": 38.0, "b": 36.0, "c": 20.0})
    assert trained == ["a", "b"]  # b's bound 35 s < 38 s; then c's 50 s > 36 s
    assert decide(cands, 1).winner.trial_id == "b"
    _, trained = run({"a": None, "b": 60.0, "c": 20.0})  # a missed its target: b, then c (50 s < 60 s) run
    assert trained == ["a", "b", "c"]


def test_runs_one_trains_the_searchs_best_once_whatever_it_measures():
    cands, trained = run({"a": 90.0, "b": 1.0, "c": 1.0}, ONE)
    assert trained == ["a"] and cands[1].not_run == "runs: one (the search's best only)"


def test_a_long_jobs_confirmation_trains_few_runs_and_its_summary_counts_them_in_baseline_runs(tmp_path, new_store):
    """Real runs, each in a fresh process: `fewest` trains `fast` (digits reaches 0.9 in well under its bound,
    the low end 20 s of its prediction), skips `slow` (bound 60 s) and trains `flat` (its trial gave no bound);
    `one` trains only `fast`. The closing summary gives the speed-up against the given TTA and the cost."""
    client = MlflowClient(new_store(tmp_path / "store"))
    for mode, expected in ((FEWEST, ["fast", "flat"]), (ONE, ["fast"])):
        spec = long_spec(f"long-{mode}", runs=mode, max_train_seconds=PRODUCTION_SECONDS, baseline_tta_seconds=50.0,
                         baseline_tta_note="production run, 2 cores")
        parent = make_search(client, spec, NONE_REACHED)
        console = io.StringIO()
        outcome = run_confirmation(SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), console), spec)

        runs = confirm_runs(client, parent)
        assert sorted(r.data.tags[names.TAG_TRIAL_ID] for r in runs) == expected, console.getvalue()
        assert all(r.data.tags[names.TAG_CONFIRM_REPEAT] == "0" for r in runs)
        assert f"(<={1 if mode == ONE else 3} runs)" in console.getvalue()
        spent = sum(r.data.metrics[names.M_TRAIN_SECONDS] for r in runs)
        lines = summary_lines(outcome)
        assert lines[0].startswith("confirmed best: fast") and "faster than the baseline's given TTA, 50 s" in lines[0]
        assert "(min " in lines[0] and ", 1 run)" in lines[0]
        assert lines[-1] == (f"confirmation compute: {len(expected)} runs, {spent:.1f} s of train clock = "
                             f"{spent / 50.0:.2f} baseline runs")
        assert client.get_run(parent.info.run_id).data.metrics[names.M_CONFIRM_REPEATS] == 1
        assert SLOWER_THAN_GIVEN not in format_confirmation(outcome)
    # the same winner against a given TTA it does not beat: the baseline, not run, could not win; the summary says so
    outcome.baseline_given_seconds = outcome.winner.median / 2
    assert format_confirmation(outcome).splitlines()[-1] == f"  {SLOWER_THAN_GIVEN}"
