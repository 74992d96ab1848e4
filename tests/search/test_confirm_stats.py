"""The statistics of a confirmation (autospeed/search/confirm_stats.py): the winner decided on medians, a median
that a majority of missed targets leaves undefined, and the rounds added while the winner is not separated."""

from __future__ import annotations

import pytest

from autospeed.outcome import sequential_confidence
from autospeed.recipe import Recipe
from autospeed.search.confirm_stats import Candidate, confirm_rounds, decide, separated


def _cand(trial_id: str, ttas, baseline=False) -> Candidate:
    return Candidate(trial_id, baseline, None, Recipe(), ttas=list(ttas))


def test_winner_decided_on_median_not_best_single_run():
    lucky = _cand("lucky", [1.0, 5.0, 5.0])  # best single run, worse median
    steady = _cand("steady", [2.0, 2.1, 2.2])
    base = _cand("base", [8.0, None, 9.0], baseline=True)  # one miss counts as slowest
    out = decide([lucky, steady, base], 3)
    assert out.winner is steady
    assert base.median == 9.0
    assert out.speedup == pytest.approx(9.0 / 2.1)


def test_median_missing_when_most_runs_miss_target():
    c = _cand("x", [None, None, 3.0])
    assert c.median is None and c.reached == [3.0]


def test_rounds_are_added_while_the_winner_overlaps_the_runner_up_up_to_max_repeats():
    """Two recipes whose TTAs alternate so that neither's speed-up interval ever separates: the
    confirmation adds interleaved rounds up to max_repeats, then stops."""
    a, b, base = _cand("a", []), _cand("b", []), _cand("base", [], baseline=True)
    ttas = {"a": [2.0, 3.0], "b": [3.0, 2.0], "base": [8.0, 8.0]}  # per round parity: a and b swap places
    order = []

    def run_round(r: int) -> None:
        for c in (a, b, base):
            c.ttas.append(ttas[c.trial_id][r % 2])
            order.append(c.trial_id)

    level = sequential_confidence(3, 7)
    assert confirm_rounds([a, b, base], repeats=3, max_repeats=7, run_round=run_round, confidence=level) == 7
    assert order == ["a", "b", "base"] * 7  # interleaved, every round


def test_rounds_stop_at_the_first_look_where_the_winner_separates_at_the_sequential_level():
    """Looks after `repeats` rounds use the stricter per-look level (Bonferroni over the planned looks):
    the rounds stop at the first look where the winner's interval, at that level, clears the runner-up's,
    never earlier (at the plain 90% level they would stop sooner: optional stopping)."""
    fast, slow, base = _cand("fast", []), _cand("slow", []), _cand("base", [], baseline=True)
    ttas = {"fast": [1.0, 1.1, 1.05], "slow": [4.0, 4.2, 4.1], "base": [8.0, 8.4, 8.2]}

    def run_round(r: int) -> None:
        for c in (fast, slow, base):
            c.ttas.append(ttas[c.trial_id][r % 3])

    level = sequential_confidence(3, 7)
    assert level > 0.9
    rounds = confirm_rounds([fast, slow, base], repeats=3, max_repeats=7, run_round=run_round, confidence=level)
    assert 3 <= rounds < 7 and separated([fast, slow, base], level)
    cut = [_cand(c.trial_id, c.ttas[:rounds - 1], c.baseline) for c in (fast, slow, base)]
    assert rounds == 3 or not separated(cut, level)  # the look before did not separate


def test_the_re_measurement_range_pools_the_spread_of_every_candidates_runs():
    """The runner-up's noisy runs widen the winner's predicted re-measurement: one machine's noise, estimated from
    all 9 runs (6 df) rather than the baseline's and the winner's 2 x 3 nearly equal ones; a runner-up that
    missed a target adds nothing to it."""
    from autospeed.outcome import log_spread, remeasure_interval

    winner, base = _cand("w", [2.0, 2.02, 1.98]), _cand("base", [8.0, 8.1, 7.9], baseline=True)
    noisy = _cand("noisy", [3.0, 3.6, 2.5])
    low, high = decide([winner, noisy, base], 3).remeasure_interval
    assert (low, high) == remeasure_interval(base.ttas, winner.ttas, 7, 0.9,
                                             log_spread([winner.ttas, noisy.ttas, base.ttas]))
    narrow_low, narrow_high = remeasure_interval(base.ttas, winner.ttas, 7)
    assert low < narrow_low and narrow_high < high
    missed = _cand("missed", [3.0, None, 2.5])
    assert decide([winner, missed, base], 3).remeasure_interval == (narrow_low, narrow_high)
