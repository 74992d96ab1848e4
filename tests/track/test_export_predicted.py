"""`autospeed export` of a long job's search (docs/design.md "Long jobs: predicted time to target"): an
unconfirmed export of a trial that only has a predicted TTA says `tta_source: predicted` with the interval and
never writes the prediction as `tta_seconds`; the printed line marks it (`~412 s [300-560]`); the recipe
carries the search's production budget (confirm.max_train_seconds). No training: the search is written into
a fresh MLflow store with track/names.py's names."""

from __future__ import annotations

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autospeed.errors import RunFailure
from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.search.parent import flatten as _flatten
from autospeed.space import SearchSpec
from autospeed.track import names, writers
from autospeed.track.export import best_recipe_yaml

SPEC = SearchSpec.model_validate({
    "name": "long", "workload": "digits", "target_accuracy": 0.9, "budget": {"trials": 3, "max_train_seconds": 3},
    "predict": {"enabled": True}, "confirm": {"repeats": 0, "max_train_seconds": 600},
    "space": {"lr": {"loguniform": [0.01, 0.1]}}})


def make_search(client, trials: list[dict]) -> None:
    """A finished, unconfirmed search: its parent (params as run.py logs them) and trial runs."""
    exp = client.create_experiment(SPEC.name)
    parent = client.create_run(exp, tags={names.TAG_KIND: names.KIND_SEARCH, names.TAG_SEARCH_ID: "s1"})
    flat = _flatten(SPEC.model_dump(mode="json"))
    writers.log_batch(client, parent.info.run_id, params={k: str(v) for k, v in flat.items() if v is not None})
    for trial in trials:
        reached = trial.get("tta") is not None
        run = client.create_run(exp, tags={
            names.TAG_PARENT: parent.info.run_id, names.TAG_KIND: names.KIND_TRIAL, names.TAG_TRIAL_ID: trial["id"],
            names.TAG_BASELINE: str(trial.get("baseline", False)).lower(),
            names.TAG_STATUS: (Status.REACHED if reached else Status.NOT_REACHED).value,
            names.TAG_TTA_SOURCE: names.TTA_MEASURED if reached
            else names.TTA_PREDICTED if "predicted" in trial else names.TTA_NONE})
        values = {names.M_OBJECTIVE: trial["objective"], names.M_TTA: trial.get("tta")}
        if "predicted" in trial:
            (values[names.M_TTA_PREDICTED], values[names.M_TTA_PREDICTED_LOW],
             values[names.M_TTA_PREDICTED_HIGH]) = trial["predicted"]
        writers.log_batch(client, run.info.run_id, writers.metrics(values))
        recipe = Recipe(workload="digits", target_accuracy=0.9, max_train_seconds=3, lr=trial["lr"])
        client.log_text(run.info.run_id, recipe.to_yaml(), "recipe.yaml")
        client.set_terminated(run.info.run_id)


BASELINE = {"id": "base", "baseline": True, "objective": 60.0, "lr": 0.05}  # censored: no prediction
PREDICTED = [{"id": "p_slow", "objective": 900.0, "predicted": (900.0, 700.0, 1300.0), "lr": 0.02},
             {"id": "p_fast", "objective": 412.0, "predicted": (412.0, 300.0, 560.0), "lr": 0.1}]


@pytest.fixture
def store(tmp_path, new_store) -> str:
    return new_store(tmp_path / "store")


def test_unconfirmed_export_of_a_predicted_best_says_predicted_and_carries_the_interval(store, tmp_path,
                                                                                      cli_in_process):
    make_search(MlflowClient(store), [BASELINE, *PREDICTED])
    out = tmp_path / "best.yaml"
    proc = cli_in_process("export", "--name", "long", "--tracking-uri", store, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(out.read_text())
    measured = data["measured"]
    assert measured["trial_id"] == "p_fast" and data["lr"] == 0.1
    assert measured["tta_source"] == "predicted" and measured["confirmed"] is False
    assert (measured["tta_predicted_seconds"], measured["tta_predicted_low_seconds"],
            measured["tta_predicted_high_seconds"]) == (412.0, 300.0, 560.0)
    assert "tta_seconds" not in measured  # that name stays for measurements
    assert data["max_train_seconds"] == 600  # the production budget, not the trial's 3 s
    assert "PREDICTED" in out.read_text().splitlines()[1]
    assert "TTA predicted, not measured: ~412 s [300-560]" in proc.stdout


def test_a_reached_trial_exports_as_measured_before_any_prediction(store):
    reached = {"id": "r", "objective": 2.5, "tta": 2.5, "lr": 0.08}
    make_search(MlflowClient(store), [BASELINE, *PREDICTED, reached])
    text, best = best_recipe_yaml(MlflowClient(store), "long")
    measured = yaml.safe_load(text)["measured"]
    assert best.trial_id == "r" and measured["tta_source"] == "measured" and measured["tta_seconds"] == 2.5
    assert "tta_predicted_seconds" not in measured


def test_a_search_with_neither_a_reached_nor_a_predicted_trial_has_nothing_to_export(store):
    make_search(MlflowClient(store), [BASELINE])
    with pytest.raises(RunFailure, match="no trial that reached its target or has a predicted TTA"):
        best_recipe_yaml(MlflowClient(store), "long")
