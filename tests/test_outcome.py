"""Statuses, the censored objective, medians and speed-up intervals (outcome.py)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from autospeed.outcome import (
    INFEASIBLE,
    MIN_RUNS_FOR_INTERVAL,
    Status,
    attainable_confidence,
    ended_by_scheduler,
    interval_note,
    median_tta,
    objective,
    sequential_confidence,
    speedup,
    speedup_interval,
)

BUDGET, TARGET = 3.0, 0.95


def test_objective_orders_reached_not_reached_infeasible():
    reached = [objective(Status.REACHED, tta, 0.96, TARGET, BUDGET) for tta in (0.1, 2.9, 3.0)]
    not_reached = [objective(Status.NOT_REACHED, None, acc, TARGET, BUDGET) for acc in (0.949, 0.5, 0.0)]
    infeasible = [objective(s, None, 0.9, TARGET, BUDGET) for s in ("oom", "diverged", "failed")]
    assert reached == [0.1, 2.9, 3.0]
    assert max(reached) < min(not_reached) <= max(not_reached) < min(infeasible)
    assert not_reached[0] < not_reached[1] < not_reached[2]  # closer to target is better
    assert infeasible == [3 * BUDGET] * 3


def test_a_running_trial_objective_is_valid_as_a_final_value():
    assert objective(Status.RUNNING, None, 0.5, TARGET, BUDGET) == objective(Status.STOPPED_EARLY, None, 0.5,
                                                                             TARGET, BUDGET)
    assert objective(Status.RUNNING, 1.2, 0.96, TARGET, BUDGET) == 1.2


def test_min_mode_objective_is_better_the_closer_the_loss():
    far = objective(Status.NOT_REACHED, None, 3.0, 1.6, BUDGET, mode="min")
    near = objective(Status.NOT_REACHED, None, 1.7, 1.6, BUDGET, mode="min")
    assert BUDGET < near < far


def test_statuses_are_strings_users_and_mlflow_see():
    assert Status("reached") is Status.REACHED and str(Status.OOM) == "oom" and Status.OOM == "oom"
    assert {s.value for s in INFEASIBLE} == {"oom", "diverged", "failed"}
    assert Status.DIVERGED.infeasible and not Status.STOPPED_EARLY.infeasible


@pytest.mark.parametrize("best, seconds, want", [
    (0.96, 1.0, Status.REACHED),  # ended by max_t on its reaching evaluation
    (0.90, 3.0, Status.NOT_REACHED),  # at the budget
    (0.50, 1.0, Status.STOPPED_EARLY),  # at a rung
])
def test_status_of_a_trial_the_scheduler_ended(best, seconds, want):
    assert ended_by_scheduler(best, TARGET, seconds, BUDGET) is want


def test_median_counts_a_miss_as_slowest():
    assert median_tta([8.0, None, 9.0]) == 9.0
    assert median_tta([None, None, 3.0]) is None
    assert median_tta([]) is None


def test_speedup_interval_brackets_the_ratio_of_medians_and_narrows_with_less_spread():
    base, fast = [8.0, 9.0, 10.0, 8.5, 9.5, 9.0, 8.8], [2.0, 2.2, 1.9, 2.1, 2.0, 2.3, 2.05]
    low, high = speedup_interval(base, fast)
    assert low <= speedup(9.0, 2.05) <= high
    assert 3.5 < low < high < 5.5
    noisy_low, noisy_high = speedup_interval(base, [1.0, 4.0, 2.0, 3.5, 1.5, 2.05, 5.0])
    assert noisy_high - noisy_low > high - low
    assert speedup_interval(base, fast) == (low, high)  # no resampling: the same numbers every time


def test_the_90_percent_interval_is_the_exact_mann_whitney_one():
    # 3 and 3 runs: [min, max] of the 9 ratios b_i / c_j, coverage exactly 1 - 2/20 = 0.90 under a scale shift
    assert speedup_interval([8.0, 9.0, 12.0], [2.0, 3.0, 4.0]) == (8.0 / 4.0, 12.0 / 2.0)
    # 5 and 5: P(U <= 4) = 12/252, so the 5th smallest and 5th largest of the 25 ratios (coverage 0.905):
    # smallest 10/5, 11/5, 12/5, 10/4, 13/5; largest 14/1, 13/1, 12/1, 11/1, 10/1
    assert speedup_interval([10.0, 11.0, 12.0, 13.0, 14.0], [1.0, 2.0, 3.0, 4.0, 5.0]) == (13.0 / 5.0, 10.0)
    assert attainable_confidence(3, 3) == pytest.approx(0.9) and attainable_confidence(5, 5) > 0.99


def test_fewer_than_three_runs_a_side_give_no_interval_and_say_why():
    assert MIN_RUNS_FOR_INTERVAL == 3
    for base, cand in (([8.0, 9.0], [2.0, 3.0]), ([8.0, 9.0, 10.0], [2.0, 3.0]), ([8.0], [2.0, 3.0, 4.0])):
        assert speedup_interval(base, cand) == (None, None)
        assert "too few repeats for an interval" in interval_note(base, cand)
    assert interval_note([8.0, 9.0, 10.0], [2.0, 3.0, 4.0]) is None
    # 95% is out of reach at 3 and 3 runs (at most 90%): no interval, rather than [min, max] under a false label
    assert speedup_interval([8.0, 9.0, 10.0], [2.0, 3.0, 4.0], 0.95) == (None, None)
    assert "too few repeats for an interval" in interval_note([8.0, 9.0, 10.0], [2.0, 3.0, 4.0], 0.95)


def test_speedup_interval_with_misses():
    low, high = speedup_interval([None, None, None], [1.0, 1.0, 1.0])
    assert low == high == math.inf  # the baseline never reached: unbounded
    assert speedup_interval([5.0, 5.0, 5.0], [None, None, None]) == (None, None)
    assert "missed targets" in interval_note([5.0, 5.0, 5.0], [None, None, None])
    assert speedup_interval([8.0, 9.0, 12.0], [2.0, None, 4.0]) == (None, 12.0 / 2.0)  # may be anything down to 0
    assert speedup_interval([8.0, None, 12.0], [2.0, 3.0, 4.0]) == (8.0 / 4.0, math.inf)
    assert speedup_interval([None] * 3, [2.0, None, 4.0]) == (None, math.inf)  # two misses: no claim either way


def _coverage(n: int, confidence: float, experiments: int = 400, seed: int = 7) -> tuple[float, float]:
    """(coverage of the true speed-up 2, share of intervals with both ends), log-normal TTAs (log sd 0.2, about
    noise.md's seed-to-seed CV) on each side; an undefined end claims nothing, so it covers."""
    rng = random.Random(seed)
    covered = defined = 0
    for _ in range(experiments):
        base = [rng.lognormvariate(math.log(10.0), 0.2) for _ in range(n)]
        cand = [rng.lognormvariate(math.log(5.0), 0.2) for _ in range(n)]
        low, high = speedup_interval(base, cand, confidence)
        covered += (low is None or low <= 2.0) and (high is None or 2.0 <= high)
        defined += low is not None and high is not None
    return covered / experiments, defined / experiments


@pytest.mark.parametrize("n, confidence", [(3, 0.90), (5, 0.90), (7, 0.90), (5, 0.98)])
def test_the_interval_covers_the_true_speedup_as_often_as_it_claims(n, confidence):
    # The bootstrap this replaced gave, on these draws, [min, max] at 3 runs whatever the level asked (0.92 at a
    # claimed 98% per look); at 2 runs a side, 0.68.
    coverage, defined = _coverage(n, confidence)
    assert defined == 1.0  # attainable levels, no misses: always an interval
    assert coverage >= confidence - 0.05


def test_an_unattainable_level_gives_no_interval_rather_than_a_narrower_one():
    coverage, defined = _coverage(3, 0.98)
    assert defined == 0.0 and coverage == 1.0


def test_sequential_level_keeps_the_reported_interval_at_its_confidence():
    assert sequential_confidence(3, 7, 0.9) == pytest.approx(0.98)  # 5 looks, 2% each
    assert sequential_confidence(3, 3, 0.9) == pytest.approx(0.9)  # one look: no correction
    assert sequential_confidence(5, 4, 0.9) == pytest.approx(0.9)
    assert speedup_interval([8.0, 9.0, 10.0, 11.0], [2.0, 3.0, 4.0, 5.0], sequential_confidence(3, 7)) == (None, None)


def test_objective_orders_min_mode_trials_reached_then_closest_loss_then_infeasible():
    target = 1.6  # val_loss <= 1.6 nats
    reached = [objective(Status.REACHED, tta, 1.5, target, BUDGET, mode="min") for tta in (0.5, 2.9)]
    short = [objective(Status.STOPPED_EARLY, None, loss, target, BUDGET, mode="min") for loss in (1.61, 2.0, 5.0)]
    never = objective(Status.NOT_REACHED, None, None, target, BUDGET, mode="min")  # no evaluation at all
    infeasible = objective(Status.DIVERGED, None, math.nan, target, BUDGET, mode="min")
    assert reached == [0.5, 2.9]
    assert max(reached) < BUDGET < short[0] < short[1] < short[2] <= never < infeasible
    assert ended_by_scheduler(1.55, target, 1.0, BUDGET, mode="min") is Status.REACHED
    assert ended_by_scheduler(1.65, target, 1.0, BUDGET, mode="min") is Status.STOPPED_EARLY


def test_a_re_measurement_falls_in_the_predicted_range_9_times_in_10_not_in_the_interval_for_the_truth():
    """The issue's goal from a user's side: the ratio of medians of 7 new fresh runs a side lies inside the
    printed re-measurement range at least ~9 times in 10 (log-normal TTAs at noise.md's spread, 400 seeded
    experiments, 5 runs a side measured), while the interval for the true speed-up holds it far less often."""
    import random

    from autospeed.outcome import remeasure_interval

    rng = random.Random(3)
    draw = lambda median, k: [median * math.exp(rng.gauss(0.0, 0.2)) for _ in range(k)]  # noqa: E731
    inside_range = inside_interval = 0
    for _ in range(400):
        base, cand = draw(15.0, 5), draw(3.0, 5)
        again = statistics.median(draw(15.0, 7)) / statistics.median(draw(3.0, 7))
        low, high = remeasure_interval(base, cand, runs_a_side=7)
        inside_range += low <= again <= high
        low, high = speedup_interval(base, cand)
        inside_interval += low <= again <= high
    assert inside_range / 400 >= 0.86
    assert inside_interval / 400 <= 0.84


def test_no_re_measurement_range_from_too_few_runs_or_a_missed_target():
    from autospeed.outcome import remeasure_interval

    assert remeasure_interval([10.0, 11.0], [2.0, 2.1, 2.2]) == (None, None)
    assert remeasure_interval([10.0, None, 11.0], [2.0, 2.1, 2.2]) == (None, None)
    low, high = remeasure_interval([10.0, 11.0, 12.0], [2.0, 2.2, 2.1])
    assert low < 11.0 / 2.1 < high


def test_one_more_run_falls_inside_the_next_run_interval_nine_times_in_ten():
    """From 3 runs (a confirmation's default, log-normal TTAs with a 20% spread), a fourth run lands inside the
    90% next-run interval about 90% of the time: what a user re-measuring one way of the compile sees."""
    import random

    from autospeed.outcome import next_run_interval

    rng = random.Random(5)
    draw = lambda: 15.0 * math.exp(rng.gauss(0.0, 0.2))  # noqa: E731
    inside = 0
    for _ in range(2000):
        low, high = next_run_interval([draw(), draw(), draw()])
        inside += low <= draw() <= high
    assert 0.88 <= inside / 2000 <= 0.92, inside / 2000


def test_a_run_in_a_later_session_falls_inside_the_interval_only_with_the_between_session_term():
    """3 runs trained in one sitting share that sitting's drift (log-normal, sd 3%) over a 2% run-to-run spread; the
    user's run comes in another sitting. Without the between-session term the interval, from the sitting's spread
    alone, holds that run far less than 9 times in 10; with it, about 9 in 10."""
    import random

    from autospeed.outcome import next_run_interval

    rng = random.Random(7)
    sitting = lambda: 8.0 * math.exp(rng.gauss(0.0, 0.03))  # noqa: E731
    inside = {0.0: 0, 0.03: 0}
    for _ in range(2000):
        centre = sitting()
        runs = [centre * math.exp(rng.gauss(0.0, 0.02)) for _ in range(3)]
        later = sitting() * math.exp(rng.gauss(0.0, 0.02))
        for session_sd in inside:
            low, high = next_run_interval(runs, session_sd=session_sd)
            inside[session_sd] += low <= later <= high
    assert inside[0.0] / 2000 < 0.80, inside
    assert 0.87 <= inside[0.03] / 2000 <= 0.94, inside


def test_the_between_session_term_adds_in_quadrature_with_welch_satterthwaite_degrees_of_freedom():
    from autospeed.outcome import next_run_interval

    # QUIET: s = 0.01 with 2 df, n = 3; a 2% session term, once for the runs' sitting and once for the next run's:
    # u^2 = 0.01^2 x 4/3 + 2 x 0.02^2 = 9.333e-4 (7x the within part), df = 2 x 7^2 = 98; t(0.95, 98) = 1.660551
    half = 1.660551 * math.sqrt(0.01 ** 2 * 4 / 3 + 2 * 0.02 ** 2)
    assert next_run_interval(QUIET, session_sd=0.02) == pytest.approx((10.0 * math.exp(-half),
                                                                       10.0 * math.exp(half)), rel=1e-5)


def test_no_next_run_interval_from_too_few_runs_or_a_missed_target():
    from autospeed.outcome import next_run_interval

    assert next_run_interval([10.0, 11.0]) == (None, None)
    assert next_run_interval([10.0, None, 11.0]) == (None, None)
    low, high = next_run_interval([10.0, 11.0, 12.0])
    assert low < 10.0 and 12.0 < high


# three groups of runs on one machine, their log deviations known: s^2 = (2 x 0.01^2 + 2 x 0.05^2 + 4 x 0.03^2) / 7
QUIET = [10.0 * math.exp(d) for d in (-0.01, 0.0, 0.01)]  # 3 runs within 2%: alone, a too-narrow spread
NOISY = [2.0 * math.exp(d) for d in (-0.05, 0.0, 0.05)]
FOUR = [5.0 * math.exp(d) for d in (-0.03, 0.03, -0.03, 0.03)]
T95 = {2: 2.919986, 7: 1.894579}  # Student t quantiles at 0.95, from a printed table


def test_the_next_run_interval_pools_the_spread_of_every_group_with_df_the_sum_of_n_minus_one():
    from autospeed.outcome import log_spread, next_run_interval

    spread = log_spread([QUIET, NOISY, FOUR])
    assert spread.df == 2 + 2 + 3
    assert spread.sd == pytest.approx(math.sqrt((2 * 0.01 ** 2 + 2 * 0.05 ** 2 + 4 * 0.03 ** 2) / 7))
    half = T95[7] * spread.sd * math.sqrt(1 + 1 / 3)  # 0.0776 on the log scale: about +-8%
    assert next_run_interval(QUIET, spread=spread) == pytest.approx((10.0 * math.exp(-half), 10.0 * math.exp(half)))
    half = T95[7] * spread.sd * math.sqrt(1 + 1 / 4)  # the same spread, n = 4
    assert next_run_interval(FOUR, spread=spread) == pytest.approx((5.0 * math.exp(-half), 5.0 * math.exp(half)))


def test_one_group_alone_gives_its_own_spread_with_n_minus_one_df():
    from autospeed.outcome import LogSpread, log_spread, next_run_interval

    assert log_spread([QUIET]) == LogSpread(pytest.approx(0.01), 2)
    half = T95[2] * 0.01 * math.sqrt(1 + 1 / 3)
    assert next_run_interval(QUIET) == pytest.approx((10.0 * math.exp(-half), 10.0 * math.exp(half)))


def test_a_group_with_a_missed_target_has_no_interval_and_adds_nothing_to_the_pool():
    from autospeed.outcome import log_spread, next_run_interval

    missed = [3.0, None, 3.3]
    spread = log_spread([QUIET, NOISY, FOUR, missed, [4.0]])  # a single run: no spread either
    assert spread == log_spread([QUIET, NOISY, FOUR])
    assert next_run_interval(missed, spread=spread) == (None, None)
    assert log_spread([missed, [0.0, 0.0, 0.0]]) is None  # nothing to pool (eager runs' compile seconds are 0)


def test_one_more_run_falls_inside_the_pooled_interval_nine_times_in_ten():
    """3 ways of 3 runs each with one spread (20%): a fourth run of the first lands inside its 90% interval from
    the pooled spread about 90% of the time (t with 6 df, not 2)."""
    from autospeed.outcome import log_spread, next_run_interval

    rng = random.Random(7)
    draw = lambda median: median * math.exp(rng.gauss(0.0, 0.2))  # noqa: E731
    inside = 0
    for _ in range(2000):
        groups = [[draw(m) for _ in range(3)] for m in (15.0, 8.0, 1.0)]
        low, high = next_run_interval(groups[0], spread=log_spread(groups))
        inside += low <= draw(15.0) <= high
    assert 0.88 <= inside / 2000 <= 0.92, inside / 2000


def test_the_re_measurement_range_takes_the_pooled_spread():
    """var = s^2 (c(3)/3 + c(3)/3 + 2 c(7)/7) with c(3) = 1.344, c(7) = 1.465 (n x the variance of a median of n
    normal draws), t with the pool's 7 df; without a spread given, the two sides' pooled (4 df)."""
    from autospeed.outcome import log_spread, remeasure_interval

    spread = log_spread([QUIET, NOISY, FOUR])
    half = T95[7] * spread.sd * math.sqrt(2 * 1.344 / 3 + 2 * 1.465 / 7)
    assert remeasure_interval(QUIET, NOISY, 7, 0.9, spread) == pytest.approx((5.0 * math.exp(-half),
                                                                               5.0 * math.exp(half)), rel=1e-4)
    sd = math.sqrt((2 * 0.01 ** 2 + 2 * 0.05 ** 2) / 4)
    half = 2.131847 * sd * math.sqrt(2 * 1.344 / 3 + 2 * 1.465 / 7)  # t(0.95, 4)
    assert remeasure_interval(QUIET, NOISY, 7) == pytest.approx((5.0 * math.exp(-half), 5.0 * math.exp(half)),
                                                                rel=1e-4)
