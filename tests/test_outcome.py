"""Statuses, the censored objective, medians and speed-up intervals (outcome.py)."""

from __future__ import annotations

import math

import pytest

from autospeed.outcome import (INFEASIBLE, Status, ended_by_scheduler, median_tta, objective, speedup,
                               speedup_interval)

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
    assert speedup_interval(base, fast) == (low, high)  # seeded: the same numbers every time


def test_speedup_interval_with_misses():
    low, high = speedup_interval([None, None, None], [1.0, 1.0, 1.0])
    assert low == high == math.inf  # the baseline never reached: unbounded
    assert speedup_interval([5.0, 5.0], [None, None]) == (None, None)


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
