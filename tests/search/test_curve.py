"""A trial's curve and what its reports carry (autospeed/search/curve.py): the tta_source, the prediction and the
objective Optuna ranks by, under predict and without it. Synthetic curves, no training."""

from __future__ import annotations

import numpy as np
import pytest

from autospeed.outcome import Status, objective
from autospeed.recipe import Recipe
from autospeed.search.curve import PREDICTION_KEYS, TrialCurve
from autospeed.space_sections import Predict

TARGET = {"metric": "val_loss", "mode": "min", "value": 1.7}
BUDGET_SECONDS = 25.0
CAP_SECONDS = Predict(enabled=True).cap_seconds(BUDGET_SECONDS)  # 20 x the budget
SECONDS_PER_EPOCH = 2.5
# loss 1.5 + 2 t^-0.5 meets 1.7 at 100 s; a trial sees its first 25 s (10 of 50 epochs)
T = np.linspace(1.0, BUDGET_SECONDS, 20)
LOSS = 1.5 + 2.0 * T ** -0.5 + np.random.default_rng(0).normal(0.0, 0.01, len(T))
FLAT = 1.9 + np.random.default_rng(1).normal(0.0, 0.01, len(T))


def recipe(**fields) -> Recipe:
    return Recipe(workload="lm", target=TARGET, max_train_seconds=BUDGET_SECONDS, epochs=50, **fields)


def predict(**fields) -> dict:
    return Predict(enabled=True, **fields).model_dump()


ON = object()


def curve_of(values, rec=None, pred=ON, cap=CAP_SECONDS, seconds=T, compile_seconds=0.0) -> TrialCurve:
    c = TrialCurve(rec or recipe(), predict() if pred is ON else pred, cap)
    for s, v in zip(seconds, values):
        c.add(float(s), float(v), float(s) / SECONDS_PER_EPOCH, compile_seconds=compile_seconds)
    return c


def not_reached(c: TrialCurve) -> dict:
    return c.fields(Status.NOT_REACHED, False, float(min(c.values)))


@pytest.mark.parametrize("off", [None, {}, Predict().model_dump()], ids=["none", "empty", "enabled-false"])
def test_without_predict_a_report_carries_tta_source_only(off):
    c = curve_of(LOSS, pred=off)
    out = not_reached(c)
    assert out["tta_source"] == "none" and "objective" not in out
    assert all(out[k] is None for k in PREDICTION_KEYS)
    reached = c.fields(Status.REACHED, True, 1.69, tta_seconds=24.0)
    assert reached["tta_source"] == "measured" and "objective" not in reached


def test_a_reached_trial_is_measured_and_its_objective_is_its_tta():
    out = curve_of(LOSS).fields(Status.REACHED, True, 1.69, tta_seconds=24.0)
    assert out["tta_source"] == "measured" and out["objective"] == 24.0
    assert all(out[k] is None for k in PREDICTION_KEYS)


def test_a_predicted_trial_ranks_by_its_predicted_tta():
    c = curve_of(LOSS)
    out = not_reached(c)
    p = c.last
    assert out["tta_source"] == "predicted", out["tta_note"]
    assert out["tta_note"] == p.note
    assert (out["tta_predicted_seconds"], out["tta_predicted_low_seconds"], out["tta_predicted_high_seconds"]) == (
        p.seconds, p.low_seconds, p.high_seconds)
    assert T[-1] <= p.seconds <= CAP_SECONDS
    assert out["objective"] == p.seconds


def test_a_predicted_tta_is_capped():
    """A crossing past the cap is no prediction ("past the cap"): censored at the cap, so never ranked below it."""
    assert not_reached(curve_of(LOSS))["objective"] == pytest.approx(100, rel=0.3)  # the curve predicts ~100 s
    cap = 60.0
    c = curve_of(LOSS, cap=cap)
    out = not_reached(c)
    assert out["tta_source"] == "none" and "past the cap" in out["tta_note"]
    assert out["objective"] > cap


def test_a_predicted_tta_is_at_least_the_seconds_already_spent():
    """Seconds before learning starts (compile) are kept out of the fit; the prediction is never below the
    train seconds at which the trial had not yet reached."""
    base = not_reached(curve_of(LOSS))
    c = curve_of(LOSS, seconds=T + 5.0, compile_seconds=5.0)
    out = not_reached(c)
    assert out["tta_source"] == "predicted", out["tta_note"]
    assert out["objective"] == pytest.approx(base["objective"] + 5.0)
    assert out["objective"] >= c.seconds[-1]


def test_a_flat_trial_is_censored_at_the_cap_above_every_predicted_trial():
    """A flat curve is projected like any other: it does not meet the target before its schedule ends the run."""
    flat = curve_of(FLAT)
    out = not_reached(flat)
    assert out["tta_source"] == "none" and "before the projected crossing" in out["tta_note"]
    assert all(out[k] is None for k in PREDICTION_KEYS)
    best = float(min(FLAT))
    assert out["objective"] == objective(Status.NOT_REACHED, None, best, TARGET["value"], CAP_SECONDS, "min")
    assert out["objective"] > CAP_SECONDS  # cap x (1 + gap), gap > 0
    predicted = [not_reached(curve_of(LOSS, cap=cap))["objective"] for cap in (60.0, CAP_SECONDS)]
    assert all(out["objective"] > p for p in predicted)


@pytest.mark.parametrize("status", [Status.DIVERGED, Status.OOM, Status.FAILED])
def test_an_infeasible_trial_scores_three_caps(status):
    out = curve_of(LOSS).fields(status, False, float(min(LOSS)))
    assert out["tta_source"] == "none" and status.value in out["tta_note"]
    assert out["objective"] == 3 * CAP_SECONDS


def test_a_wsd_trial_fits_only_the_evaluations_before_its_decay():
    """wsd over 50 epochs with decay_fraction 0.8 decays after epoch 10 (25 s). Evaluations in the decay drop
    sharply (the LR falling); the prediction must be the one from the stable part alone."""
    rec = recipe(schedule="wsd", decay_fraction=0.8)
    decay_seconds = np.linspace(26.0, 40.0, 8)
    decay_loss = np.linspace(1.88, 1.75, 8)  # far below where the stable curve goes, still above the target
    stable = curve_of(LOSS, rec=rec)
    full = curve_of(np.r_[LOSS, decay_loss], rec=rec, seconds=np.r_[T, decay_seconds])
    # the horizon (the run's end, 50 epochs) is the same: seconds per epoch do not change
    a, b = not_reached(stable), not_reached(full)
    assert a["tta_source"] == "predicted", a["tta_note"]
    assert (a["tta_predicted_seconds"], a["tta_predicted_low_seconds"], a["tta_predicted_high_seconds"]) == (
        b["tta_predicted_seconds"], b["tta_predicted_low_seconds"], b["tta_predicted_high_seconds"])
    # under constant the same points are all fitted, and the sharp drop moves the prediction
    constant = curve_of(np.r_[LOSS, decay_loss], rec=recipe(), seconds=np.r_[T, decay_seconds])
    c = not_reached(constant)
    assert c["tta_predicted_seconds"] != a["tta_predicted_seconds"]


def test_a_crossing_after_the_recipe_s_last_epoch_is_no_prediction():
    """Its schedule would end the run first: 12 epochs of 2.5 s end it at 30 s, before the ~90 s crossing."""
    rec = Recipe(workload="lm", target=TARGET, max_train_seconds=BUDGET_SECONDS, epochs=12)
    out = not_reached(curve_of(LOSS, rec=rec))
    assert out["tta_source"] == "none" and "schedule ends the run" in out["tta_note"]
    assert out["objective"] > CAP_SECONDS


def early(**fields) -> TrialCurve:
    c = curve_of(LOSS, pred=predict(**fields))
    not_reached(c)
    assert c.last.ok, c.last.note
    return c


def test_stop_early_only_when_on_and_the_low_bound_is_above_the_incumbent_s_high_bound():
    c = early(early_stop=True)
    low = c.last.low_seconds
    assert c.stop_early(low - 1.0)
    assert not c.stop_early(low + 1.0)
    assert not c.stop_early(None)  # no incumbent yet
    assert not early(early_stop=False).stop_early(low - 1.0)
    flat = curve_of(FLAT, pred=predict(early_stop=True))
    not_reached(flat)
    assert not flat.stop_early(0.0)  # no prediction: nothing to stop on
    fresh = curve_of(LOSS, pred=predict(early_stop=True))
    assert not fresh.stop_early(0.0)  # no report yet
