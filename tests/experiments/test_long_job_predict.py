"""experiments/_long_job_predict.py: the winner's prediction is horizon.py's (exact on a power-law curve, dragged
later by a shallower pool), a trial that reached is measured, not predicted, and the goal's figures count a
reaching pick without a prediction as a miss and a never-reaching pick with one as a miss."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import _long_job_arms as arms  # noqa: E402
import _long_job_predict as prediction  # noqa: E402


def power_law_row(exponent: float = 1.0) -> dict:
    """A trial row (long_job_bench.trial_row's keys) whose error is 0.5 x (samples / 100) ** -exponent, evaluated
    every 100 samples, 1000 samples an epoch, 30 epochs, constant LR."""
    curve = [[s, 1 - 0.5 * (s / 100) ** -exponent, s / 1000] for s in range(100, 2001, 100)]
    return {"curve": curve, "epochs": 30.0, "schedule": "constant", "decay_fraction": 0.0, "compile_seconds": 0.0}


def test_the_winners_prediction_is_horizon_pys_own_power_law_and_a_shallow_pool_drags_it_later():
    row = power_law_row()
    # error 0.01 (accuracy 0.99) at 0.5 x (s / 100) ** -1 = 0.01: s = 5000
    samples, low, high = prediction.predict(row, 2000, [], 0.99, cap=1e6)
    assert samples == pytest.approx(5000, rel=1e-6)
    assert low <= samples <= high
    pooled = prediction.predict(row, 2000, [0.5, 0.5, 0.5], 0.99, cap=1e6)[0]
    assert pooled > 2 * samples  # the pool's median exponent (0.5) and not the winner's own (1)
    assert prediction.predict(row, 2000, [], 0.9, cap=1e6) == (500, 500, 500)  # reached at 500: measured


def test_a_prediction_past_the_runs_end_is_none():
    assert prediction.predict(power_law_row(), 2000, [0.05, 0.05, 0.05, 0.05], 0.99, cap=1e6) is None


def test_the_goals_figures_count_a_missing_prediction_and_a_predicted_never_as_misses():
    rows = [{"truth": 100.0, "p": (110.0, 90.0, 120.0)}, {"truth": 100.0, "p": (200.0, 150.0, 250.0)},
            {"truth": 100.0, "p": None}, {"truth": math.inf, "p": (300.0, 200.0, 400.0)},
            {"truth": math.inf, "p": None}]
    c = prediction.stats(rows, "p")
    assert (c["reach"], c["given"], c["never"], c["never_predicted"]) == (3, 2, 2, 1)
    assert c["error"] == pytest.approx(math.log(2))  # |log| 0.095, 0.69, inf: the median is log 2
    assert c["error_given"] == pytest.approx((math.log(1.1) + math.log(2)) / 2)
    assert c["coverage"] == pytest.approx(1 / 3) and c["coverage_given"] == pytest.approx(1 / 2)
    assert prediction.met(c, 20) == (False, False)


@pytest.mark.parametrize("arm", prediction.PICK_ARMS)
def test_the_first_pick_and_each_trials_last_rung(arm):
    plan = arms.cut_plan(3, 1.0, 12, 3, 100.0)  # 12 at 1, 4 at 3, 2 at 9
    winner, last = prediction.last_rungs(arm, list(range(12)), plan, lambda i, h: float(i))  # 0 best everywhere
    assert winner == 0 and last[0] == 9.0
    assert last[11] == 1.0
