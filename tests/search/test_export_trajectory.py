"""The export carries the winner's predicted trajectory (autospeed/track/trajectory.py): the curve of its
confirmation run when confirmed, its trial's curve when it reached unconfirmed, and the trial's curve extended to
the predicted crossing when only predicted; each labelled as what it is. The searches are written into a fresh
MLflow store as in tests/search/test_confirm_long.py; the confirmation run is real (digits, a fresh process)."""

from __future__ import annotations

import io

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autospeed.outcome import SESSION_LOG_SD, log_spread, next_run_interval
from autospeed.recipe import Measured, load_recipe
from autospeed.search.confirm import run_confirmation
from autospeed.search.session import SearchSession
from autospeed.search.storage import SearchDir
from autospeed.track import names, writers
from autospeed.track.export import best_recipe_yaml
from autospeed.track.trajectory import curve_of, tta_range

from .test_confirm_long import NONE_REACHED, PRODUCTION_SECONDS, confirm_runs, long_spec, make_search

TRIAL_CURVE = [(0.5, 0.40), (1.0, 0.55), (1.5, 0.62), (2.0, 0.66)]  # (train seconds, val_accuracy) of a trial


def log_curve(client, run_id: str, curve) -> None:
    for step, (seconds, value) in enumerate(curve, start=1):
        writers.log_batch(client, run_id,
                         writers.metrics({names.M_TRAIN_SECONDS: seconds, "val_accuracy": value}, step=step))


def trial_run_id(client, parent, trial_id: str) -> str:
    runs = client.search_runs([parent.info.experiment_id], f"tags.`{names.TAG_TRIAL_ID}` = '{trial_id}'")
    return runs[0].info.run_id


@pytest.fixture
def client(tmp_path, new_store) -> MlflowClient:
    return MlflowClient(new_store(tmp_path / "store"))


def exported(client, name: str, tmp_path):
    text, _ = best_recipe_yaml(client, name, "s1")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return load_recipe(path), text


def test_an_unconfirmed_predicted_winner_carries_its_trial_curve_extended_to_the_predicted_crossing(client, tmp_path):
    parent = make_search(client, long_spec("predicted"), NONE_REACHED)
    log_curve(client, trial_run_id(client, parent, "fast"), TRIAL_CURVE)
    recipe, text = exported(client, "predicted", tmp_path)
    traj = recipe.measured.trajectory
    assert traj.source == "prediction" and traj.note.startswith("PREDICTED")
    assert (traj.tta_seconds, traj.tta_low_seconds, traj.tta_high_seconds) == (30.0, 20.0, 45.0)
    assert traj.points[:4] == TRIAL_CURVE  # measured, then the bridge: rising to the target at the crossing
    assert traj.points[-1] == pytest.approx((30.0, 0.9))
    assert all(b[1] > a[1] for a, b in zip(traj.points[3:], traj.points[4:]))
    assert "measured.trajectory: its PREDICTED curve (prediction)" in text


def test_an_unconfirmed_reached_winner_carries_its_trials_curve_to_its_tta(client, tmp_path):
    reached = [{"id": "base", "baseline": True, "objective": 500.0},
               {"id": "hit", "objective": 1.5, "tta": 1.5, "recipe": {"lr": 0.1}}]
    parent = make_search(client, long_spec("reached"), reached)
    log_curve(client, trial_run_id(client, parent, "hit"), [(0.5, 0.5), (1.0, 0.8), (1.5, 0.91)])
    traj = exported(client, "reached", tmp_path)[0].measured.trajectory
    assert traj.source == "trial" and "one measurement" in traj.note and traj.tta_seconds == 1.5
    assert traj.points == [(0.5, 0.5), (1.0, 0.8), (1.5, 0.91)] and traj.tta_low_seconds is None


def test_a_confirmed_winner_carries_the_curve_of_its_confirmation_run(client, tmp_path):
    spec = long_spec("confirmed", runs="one", max_train_seconds=PRODUCTION_SECONDS, baseline_tta_seconds=50.0,
                     baseline_tta_note="production run, 2 cores")
    parent = make_search(client, spec, NONE_REACHED)
    log_curve(client, trial_run_id(client, parent, "fast"), TRIAL_CURVE)  # not what a confirmed export draws
    run_confirmation(SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), io.StringIO()), spec)
    (run,) = confirm_runs(client, parent)
    recipe, _ = exported(client, "confirmed", tmp_path)
    traj = recipe.measured.trajectory
    tta = run.data.metrics[names.M_TTA]
    assert traj.source == "confirmation" and "seed 1000" in traj.note
    assert traj.tta_seconds == tta and traj.tta_low_seconds is traj.tta_high_seconds is None  # one run: no range
    assert "one run: no range" in traj.note
    assert [tuple(p) for p in traj.points] == curve_of(client, run.info.run_id, "val_accuracy")
    assert traj.points[-1][0] == tta and traj.points[-1][1] >= 0.9
    # its throughput to the target: the confirmation run's samples to target (about its steps x batch) over its TTA
    steps = max(m.step for m in client.get_metric_history(run.info.run_id, names.M_TRAIN_SECONDS) if m.value <= tta)
    assert traj.samples_per_second * tta == pytest.approx(steps * recipe.batch_size, rel=0.05)
    assert yaml.safe_load((tmp_path / "confirmed.yaml").read_text())["measured"]["trajectory"]["metric"] == \
        "val_accuracy"


def test_a_confirmed_winners_range_is_where_the_production_run_falls_not_its_runs_min_to_max():
    ttas = {"w": [1.0, 1.1, 1.3], "base": [6.0, 6.6, 6.3], "other": [2.0, 2.4, None]}
    measured = Measured(search_name="s", search_id="1", trial_id="w", tta_seconds=1.1, confirmed=True,
                        tta_seconds_median=1.1, tta_seconds_min=1.0, tta_seconds_max=1.3, repeats=3)
    low, high, how = tta_range(ttas, "w", measured)
    # 3 runs' min..max holds one more run half the time; an 80% interval is wider on both sides
    assert low < 1.0 and high > 1.3 and "80%" in how
    assert (low, high) == next_run_interval([1.0, 1.1, 1.3], 0.8, log_spread([[1.0, 1.1, 1.3], [6.0, 6.6, 6.3]]),
                                            session_sd=SESSION_LOG_SD)  # the miss says nothing of the spread
    ttas["w"] = [1.0, None, 1.3]  # a run that missed: the centre is not known, the runs' own range stands
    assert tta_range(ttas, "w", measured) == (1.0, 1.3, "min..max")
