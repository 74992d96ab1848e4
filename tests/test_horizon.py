"""Ranking at equal horizon (autospeed/horizon.py) and its place in a trial's reports (search/curve.py): a run's
own schedule is never extrapolated past, and no trial ranks below a worse one for lacking a prediction.
Synthetic accuracy curves, no training."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autospeed import horizon
from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.search.curve import TrialCurve
from autospeed.space_sections import Predict

TARGET = 0.975
BUDGET_SECONDS = 2.5
CAP_SECONDS = Predict(enabled=True).cap_seconds(BUDGET_SECONDS)  # 50 s
SECONDS_PER_EPOCH = 0.25
T = np.linspace(0.25, BUDGET_SECONDS, 10)  # one evaluation per epoch, 10 epochs by the budget


def accuracy(error_at_budget: float, exponent: float = 1.0) -> np.ndarray:
    """An accuracy whose error falls as t ** -exponent and is `error_at_budget` at the budget."""
    return np.clip(1.0 - error_at_budget * (T / BUDGET_SECONDS) ** -exponent, 0.0, 1.0)


def recipe(epochs: float, schedule: str = "constant") -> Recipe:
    return Recipe(workload="mnist1d", target_accuracy=TARGET, max_train_seconds=BUDGET_SECONDS, epochs=epochs,
                  schedule=schedule)


def report(values, epochs: float = 400, schedule: str = "constant", pool=None, seconds=T,
           cooled: float | None = None) -> dict:
    """The last report of a trial with these evaluations; `cooled`: the accuracy of a cooldown branch at its last."""
    c = TrialCurve(recipe(epochs, schedule), Predict(enabled=True).model_dump(), CAP_SECONDS, pool)
    for i, (s, v) in enumerate(zip(seconds, values)):
        c.add(float(s), float(v), float(s) / SECONDS_PER_EPOCH, cooldown=cooled if i == len(values) - 1 else None)
    return c.fields(Status.NOT_REACHED, False, float(max(values)))


def test_a_run_whose_schedule_ends_before_the_target_is_never_extrapolated_past_its_end():
    """Error 0.05 at 2.5 s falling as 1/t meets 0.025 at 5 s. A 16-epoch run (4 s) ends first: no TTA is given, at
    4 s or beyond, and it is censored below every trial that may reach. A 24-epoch run (6 s) is predicted at about
    5 s, and no bound of its interval lies past its end, though slower exponents of the pool would cross later."""
    values = accuracy(0.05)
    pool = [0.5, 0.7, 1.0, 1.3, 1.5]
    ends_later = report(values, epochs=24, pool=pool)
    assert ends_later["tta_source"] == "predicted", ends_later["tta_note"]
    assert ends_later["tta_predicted_seconds"] == pytest.approx(5.0, rel=0.05)
    assert ends_later["tta_predicted_high_seconds"] <= 24 * SECONDS_PER_EPOCH
    short = report(values, epochs=16, pool=pool)
    assert short["tta_source"] == "none" and "schedule ends the run" in short["tta_note"]
    assert short["tta_predicted_seconds"] is None and short["tta_predicted_high_seconds"] is None
    assert short["objective"] > CAP_SECONDS > ends_later["objective"]


def test_a_run_that_ended_inside_the_trial_is_ranked_by_that():
    """A 10-epoch run ends at the budget: measured to its end without the target, censored, whatever its curve."""
    out = report(accuracy(0.03, exponent=3.0), epochs=10)
    assert out["tta_source"] == "none" and "ended the run" in out["tta_note"]
    assert out["objective"] > CAP_SECONDS


def test_a_wsd_run_is_credited_with_its_decay_and_never_past_its_end():
    """Error 0.05 at 2.5 s falling as 1/t: a 24-epoch wsd run (6 s, decay from 4.8 s) meets 0.025 in its decay
    (the stable phase alone would meet it at 5 s, after the decay starts); under constant the same 24 epochs end
    at 6 s too, but it met the target at 5 s either way. At 0.06 the stable phase would need 6 s: constant ends
    first, wsd's decay gets there before its end."""
    values = accuracy(0.06)
    constant, wsd = report(values, epochs=24), report(values, epochs=24, schedule="wsd")
    assert constant["tta_source"] == "none"
    assert wsd["tta_source"] == "predicted", wsd["tta_note"]
    assert 24 * 0.8 * SECONDS_PER_EPOCH <= wsd["tta_predicted_seconds"] <= 24 * SECONDS_PER_EPOCH
    assert wsd["tta_predicted_high_seconds"] <= CAP_SECONDS
    assert wsd["objective"] < constant["objective"]


def test_a_wsd_trial_with_a_cooldown_branch_is_ranked_by_what_its_branch_measured():
    """The run of the test above (error 0.06 at 2.5 s, a 24-epoch wsd run): without a branch its decay is credited
    with the typical factor (0.71) and it is predicted. A branch at the cut that halved the error (factor 0.5)
    predicts an earlier crossing; one that barely helped (0.95) says its decay cannot get there by the run's end:
    censored, below both. Each note says which factor it used."""
    values = accuracy(0.06)
    typical = report(values, epochs=24, schedule="wsd")
    strong = report(values, epochs=24, schedule="wsd", cooled=1 - 0.06 * 0.5)
    weak = report(values, epochs=24, schedule="wsd", cooled=1 - 0.06 * 0.95)
    assert "typical factor" in typical["tta_note"] and "measured by" not in typical["tta_note"]
    assert strong["tta_source"] == "predicted", strong["tta_note"]
    assert "error x 0.5, measured by a cooldown branch at 2.5 s" in strong["tta_note"]
    assert strong["tta_predicted_seconds"] < typical["tta_predicted_seconds"]
    assert weak["tta_source"] == "none" and "error x 0.95, measured by a cooldown branch" in weak["tta_note"]
    assert strong["objective"] < typical["objective"] < CAP_SECONDS < weak["objective"]
    # under constant there is no decay to measure: a branch does not change its ranking
    assert report(values, epochs=24, cooled=1 - 0.06 * 0.5) == report(values, epochs=24)


def test_no_trial_ranks_below_a_worse_one_for_lacking_a_prediction():
    """A noisy, nearly flat curve (the per-curve predictor called it flat and censored it at the cap) that is
    closer to the target than a smooth one: every trial is projected with the exponent pooled over the search's
    finished trials, so the closer one ranks first."""
    rng = np.random.default_rng(3)
    noisy = 1.0 - 0.03 * (T / BUDGET_SECONDS) ** -0.05 + rng.normal(0.0, 0.003, len(T))
    smooth = accuracy(0.05)
    pool = [0.8, 1.0, 1.2, 0.9]
    a, b = report(noisy, pool=pool), report(smooth, pool=pool)
    assert 1 - max(noisy) < 1 - max(smooth)  # the noisy trial is closer to the target at the cut
    assert a["tta_source"] == "predicted", a["tta_note"]
    assert a["objective"] < b["objective"], (a["tta_note"], b["tta_note"])


def test_with_one_pooled_exponent_the_order_is_the_metric_s_at_the_cut():
    """Where no schedule intervenes, one exponent for all keeps the order of the error at the cut, whatever each
    curve's own shape."""
    pool = [1.0, 0.8, 1.2, 0.9]
    errors = [0.03, 0.035, 0.05, 0.08]
    shapes = [3.0, 0.2, 1.5, 0.5]  # each curve's own exponent: the steep ones would extrapolate fastest alone
    objectives = [report(accuracy(e, k), pool=pool)["objective"] for e, k in zip(errors, shapes)]
    assert objectives == sorted(objectives)


def test_pooled_exponent_and_its_interval():
    assert horizon.pooled([]) == horizon.Exponent(horizon.DEFAULT_EXPONENT, 0.5, 2.0, 0)
    few = horizon.pooled([0.8, None, 1.2])
    assert (few.mid, few.low, few.high, few.count) == (1.0, 0.5, 2.0, 2)
    many = horizon.pooled([0.5, 0.8, 1.0, 1.2, 2.0])
    assert many.low <= many.mid == 1.0 <= many.high and many.count == 5


def test_the_interval_holds_the_median_and_starts_at_the_cut():
    out = report(accuracy(0.05), pool=[0.5, 0.9, 1.0, 1.1, 1.5])
    low, mid, high = (out[f"tta_predicted{s}_seconds"] for s in ("_low", "", "_high"))
    assert BUDGET_SECONDS <= low <= mid <= high <= CAP_SECONDS
    assert out["objective"] == mid


def test_a_metric_without_a_bound_is_censored_not_projected():
    cut = horizon.cut_of([1.0, 2.0], [-3.0, -2.0], [1.0, 2.0], target=-1.0, mode="max", run_epochs=10)
    assert cut is None
    assert math.isinf(horizon.crossing_seconds(horizon.Cut(
        seconds=2.0, error=0.1, error_seconds=2.0, target_error=0.05, gap=0.1, run_end_seconds=3.0,
        stable_end_seconds=3.0, decays=False, ended=False, exponent=1.0), 1.0))


@pytest.mark.parametrize("decays", [False, True])
def test_a_curve_that_barely_falls_projects_its_crossing_past_the_run_instead_of_overflowing(decays):
    """A pooled exponent near 0 (curves that barely fell by the cut, as trials on a loaded machine give) puts the
    crossing astronomically far: past the run's end, censored, never an OverflowError that fails the trial."""
    cut = horizon.Cut(seconds=0.6, error=0.5, error_seconds=0.6, target_error=0.025, gap=0.5, run_end_seconds=30.0,
                      stable_end_seconds=24.0 if decays else 30.0, decays=decays, ended=False, exponent=0.001)
    assert math.isinf(horizon.crossing_seconds(cut, 0.001))
    objective, prediction = horizon.score(cut, horizon.pooled([0.001]), cap_seconds=12.0)
    assert objective == pytest.approx(12.0 * 1.5) and prediction.seconds is None


def test_before_any_curve_gives_an_exponent_a_trial_is_ranked_by_its_distance_not_projected():
    """The first trials of a search, whose own curves are too short or flat for an exponent and with no finished
    trial's to pool, get no prediction: they rank among the censored by their distance at the cut, never above a
    trial the pool projects to reach (they were projected with an assumed exponent of 1 before, and jumped above
    every censored trial: experiments/results/long_job_bench.md)."""
    flat = np.full_like(T, 0.95)  # no fall: no exponent of its own
    first = report(flat)
    assert first["tta_source"] != "predicted" and "no exponent yet" in first["tta_note"], first["tta_note"]
    closer = report(np.full_like(T, 0.96))
    assert closer["objective"] < first["objective"]  # the metric's order among them
    projected = report(accuracy(0.05), pool=[0.9, 1.0, 1.1])
    assert projected["tta_source"] == "predicted" and projected["objective"] < closer["objective"]
