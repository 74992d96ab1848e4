"""Confirmation of a long job (docs/design.md "Long jobs: predicted time to target", issue 27 "Confirmation
stays measured"): trials that only have a predicted TTA are confirmed; every confirmation run trains with
confirm.max_train_seconds (the production budget), which best.yaml carries; a baseline TTA given by the user
is not re-run, and the speed-up against it claims no interval; the cost is printed in baseline runs.

The searches are written into a fresh MLflow store with track/names.py's names, as the search's callback writes
them; the confirmation runs are real: tiny digits recipes, each in a fresh process."""

from __future__ import annotations

import io
import math
import re

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autospeed.outcome import Status
from autospeed.recipe import Recipe, load_recipe
from autospeed.search.confirm import pick_candidates, run_confirmation
from autospeed.search.confirm_stats import Candidate, decide
from autospeed.search.confirm_text import compute_line
from autospeed.search.parent import flatten as _flatten
from autospeed.search.run import _has_best, _report_exploration
from autospeed.search.session import SearchSession
from autospeed.search.storage import SearchDir
from autospeed.space import SearchSpec
from autospeed.track import names, writers
from autospeed.track import runs as res
from autospeed.track.export import best_recipe_yaml

# Digits reaches 0.9 in about a tenth of a second of training; a trial's budget of 0.02 s never does, so a
# confirmation run that reaches trained with confirm.max_train_seconds, not the trial's budget.
TRIAL_BUDGET_SECONDS, PRODUCTION_SECONDS = 0.02, 60.0
DIGITS = dict(workload="digits", target_accuracy=0.9, max_train_seconds=TRIAL_BUDGET_SECONDS, epochs=30,
              eval_every_epochs=1, batch_size=32, device="cpu")


def long_spec(name: str, **confirm) -> SearchSpec:
    return SearchSpec.model_validate({
        "name": name, "workload": "digits", "target_accuracy": 0.9,
        "budget": {"trials": 3, "max_train_seconds": TRIAL_BUDGET_SECONDS}, "predict": {"enabled": True},
        "confirm": confirm, "resources": {"gpus_per_trial": 0, "cpus_per_trial": 1},
        "space": {"lr": {"loguniform": [0.01, 0.1]}}})


def make_search(client, spec: SearchSpec, trials: list[dict]):
    """A finished search's parent (its params as run.py logs them) and trial runs, none reached unless said."""
    exp = client.create_experiment(spec.name)
    parent = client.create_run(exp, run_name="search-s1",
                               tags={names.TAG_KIND: names.KIND_SEARCH, names.TAG_SEARCH_ID: "s1"})
    flat = _flatten(spec.model_dump(mode="json"))
    writers.log_batch(client, parent.info.run_id, params={k: str(v) for k, v in flat.items() if v is not None})
    for trial in trials:
        source = (names.TTA_MEASURED if trial.get("tta")
                  else names.TTA_PREDICTED if trial.get("predicted") else names.TTA_NONE)
        run = client.create_run(exp, tags={
            names.TAG_PARENT: parent.info.run_id, names.TAG_SEARCH_ID: "s1", names.TAG_KIND: names.KIND_TRIAL,
            names.TAG_TRIAL_ID: trial["id"], names.TAG_BASELINE: str(trial.get("baseline", False)).lower(),
            names.TAG_STATUS: (Status.REACHED if trial.get("tta") else Status.NOT_REACHED).value,
            names.TAG_TTA_SOURCE: source})
        values = {names.M_OBJECTIVE: trial["objective"], names.M_TTA: trial.get("tta")}
        if trial.get("predicted"):
            (values[names.M_TTA_PREDICTED], values[names.M_TTA_PREDICTED_LOW],
             values[names.M_TTA_PREDICTED_HIGH]) = trial["predicted"]
        writers.log_batch(client, run.info.run_id, writers.metrics(values))
        client.log_text(run.info.run_id, Recipe(**{**DIGITS, **trial.get("recipe", {})}).to_yaml(), "recipe.yaml")
        client.set_terminated(run.info.run_id)
    return client.get_run(parent.info.run_id)


# A search in which no trial reached its target within its budget: two have a predicted TTA, one's curve
# was flat (no prediction, censored above the cap), the baseline's too.
NONE_REACHED = [
    {"id": "base", "baseline": True, "objective": 500.0, "recipe": {"lr": 0.05}},
    {"id": "slow", "objective": 80.0, "predicted": (80.0, 60.0, 110.0), "recipe": {"lr": 0.02}},
    {"id": "flat", "objective": 400.0, "recipe": {"lr": 0.01}},
    {"id": "fast", "objective": 30.0, "predicted": (30.0, 20.0, 45.0), "recipe": {"lr": 0.1}},
]


@pytest.fixture
def store(tmp_path, new_store) -> str:
    """A fresh MLflow store (tests/conftest.py: a copy of an empty SQLite store)."""
    return new_store(tmp_path / "store")


def confirm_runs(client, parent) -> list:
    return [r for r in res.child_runs(client, parent) if r.data.tags.get(names.TAG_KIND) == names.KIND_CONFIRM]


def test_candidates_include_predicted_trials_when_none_reached(store):
    client = MlflowClient(store)
    parent = make_search(client, long_spec("picks"), NONE_REACHED)
    rows = res.trial_rows(client, parent)
    assert not any(r.reached for r in rows) and _has_best(rows, long_spec("picks"))  # run.py confirms, exports it
    picked = pick_candidates(client, parent, top_k=3)
    # by predicted TTA (the leaderboard's order); under predict the flat curve follows, censored at the cap below
    # every predicted trial; the baseline last
    assert [c.trial_id for c in picked] == ["fast", "slow", "flat", "base"]
    assert [c.trial_id for c in pick_candidates(client, parent, top_k=2)] == ["fast", "slow", "base"]
    assert picked[0].search_predicted == (30.0, 20.0, 45.0) and picked[0].search_tta_seconds is None
    assert picked[0].recipe.lr == 0.1
    assert [c.trial_id for c in pick_candidates(client, parent, top_k=1)] == ["fast", "base"]
    flat_only = [trial for trial in NONE_REACHED if "predicted" not in trial]
    other = make_search(client, long_spec("nothing"), flat_only)
    plain = long_spec("nothing").model_copy(update={"predict": long_spec("x").predict.model_copy(
        update={"enabled": False})})
    assert not _has_best(res.trial_rows(client, other), plain)  # without predict: nothing reached or predicted
    assert _has_best(res.trial_rows(client, other), long_spec("nothing"))  # under predict: confirmation measures


def test_a_long_jobs_trials_that_never_reach_are_confirmed_by_their_rank_with_a_production_budget(store):
    """predict off, no trial reached in its few seconds, and confirm.max_train_seconds (a production budget): the
    trials are short by design, so the best by the censored objective at equal horizon are confirmation's
    candidates, trained on to the target; without the budget there is nothing to confirm."""
    client = MlflowClient(store)
    spec = long_spec("censored", top_k=2, repeats=1, max_train_seconds=PRODUCTION_SECONDS)
    spec = spec.model_copy(update={"predict": spec.predict.model_copy(update={"enabled": False})})
    unpredicted = [{k: v for k, v in trial.items() if k != "predicted"} for trial in NONE_REACHED]
    parent = make_search(client, spec, unpredicted)
    rows = res.trial_rows(client, parent)
    assert not any(r.reached or r.predicted for r in rows) and _has_best(rows, spec)
    # by the censored objective: fast (30), slow (80), flat (400); the baseline last
    assert [c.trial_id for c in pick_candidates(client, parent, top_k=2)] == ["fast", "slow", "base"]
    no_budget = spec.model_copy(update={"confirm": spec.confirm.model_copy(update={"max_train_seconds": None})})
    assert not _has_best(rows, no_budget)
    bare = make_search(client, no_budget.model_copy(update={"name": "bare"}), unpredicted)
    assert [c.trial_id for c in pick_candidates(client, bare, top_k=2)] == ["base"]


def test_confirmation_trains_with_the_production_budget_and_best_yaml_carries_it(store, tmp_path):
    """The winner and the baseline both train with confirm.max_train_seconds (their trials' 0.02 s would never
    reach); epochs stay the recipe's; the parent gets what confirmation cost, in baseline runs."""
    client = MlflowClient(store)
    spec = long_spec("budget", top_k=1, repeats=1, max_train_seconds=PRODUCTION_SECONDS)
    parent = make_search(client, spec, NONE_REACHED)
    console = io.StringIO()
    outcome = run_confirmation(SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), console), spec)

    runs = confirm_runs(client, parent)
    assert sorted(r.data.tags[names.TAG_TRIAL_ID] for r in runs) == ["base", "fast"]
    for run in runs:
        assert float(run.data.params["max_train_seconds"]) == PRODUCTION_SECONDS
        assert float(run.data.params["epochs"]) == 30
        assert run.data.tags[names.TAG_STATUS] == Status.REACHED.value
    assert f"{PRODUCTION_SECONDS:g} s train budget" in console.getvalue()

    m = client.get_run(parent.info.run_id).data.metrics
    spent = sum(r.data.metrics[names.M_TRAIN_SECONDS] for r in runs)
    assert m[names.M_CONFIRM_COMPUTE_SECONDS] == pytest.approx(spent, rel=1e-6)
    assert m[names.M_CONFIRM_COMPUTE_BASELINE_RUNS] == pytest.approx(spent / outcome.baseline.median, rel=1e-6)
    assert compute_line(outcome) == (f"confirmation compute: 2 runs, {spent:.1f} s of train clock = "
                                     f"{spent / outcome.baseline.median:.2f} baseline runs")

    text, best = best_recipe_yaml(client, "budget", "s1")
    data = yaml.safe_load(text)
    assert data["max_train_seconds"] == PRODUCTION_SECONDS and data["epochs"] == 30
    assert data["measured"]["confirmed"] is True and data["measured"]["tta_source"] == "measured"
    assert data["measured"]["baseline_tta_source"] == "measured"
    assert best.trial_id == data["measured"]["trial_id"] == outcome.winner.trial_id
    assert "confirm.max_train_seconds (60 s, the production budget; the trial had 0.02 s)" in text


def test_a_given_baseline_tta_is_not_rerun_and_its_speedup_claims_no_interval(store, tmp_path, cli_in_process):
    client = MlflowClient(store)
    note = "production run 2026-11-20, 2 cores"
    spec = long_spec("given", top_k=1, repeats=1, max_train_seconds=PRODUCTION_SECONDS, baseline_tta_seconds=50.0,
                     baseline_tta_note=note)
    parent = make_search(client, spec, NONE_REACHED)
    console = io.StringIO()
    outcome = run_confirmation(SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), console), spec)

    (run,) = confirm_runs(client, parent)  # the winner only: the baseline is not trained again
    assert run.data.tags[names.TAG_TRIAL_ID] == "fast" and run.data.tags[names.TAG_BASELINE] == "false"
    assert "baseline's given TTA, 50 s (production run 2026-11-20, 2 cores), not re-run" in console.getvalue()
    winner_tta = run.data.metrics[names.M_TTA]
    assert outcome.speedup == pytest.approx(50.0 / winner_tta)
    assert outcome.speedup_interval == (None, None)
    assert outcome.interval_note == f"baseline TTA given ({note}), not measured here: no interval"
    parent_now = client.get_run(parent.info.run_id)
    m, tags = parent_now.data.metrics, parent_now.data.tags
    assert m[names.M_CONFIRM_BASELINE_MEDIAN] == 50.0
    assert m[names.M_CONFIRM_SPEEDUP] == pytest.approx(50.0 / winner_tta)
    assert names.M_CONFIRM_SPEEDUP_CI_LOW not in m and names.M_CONFIRM_BASELINE_WALL_MEDIAN not in m
    assert (tags[names.TAG_CONFIRM_BASELINE_SOURCE], tags[names.TAG_CONFIRM_BASELINE_NOTE]) == ("given", note)
    spent = run.data.metrics[names.M_TRAIN_SECONDS]
    assert m[names.M_CONFIRM_COMPUTE_BASELINE_RUNS] == pytest.approx(spent / 50.0, rel=1e-6)
    assert compute_line(outcome).endswith(f"= {spent / 50.0:.2f} baseline runs")

    out = tmp_path / "best.yaml"
    proc = cli_in_process("export", "--name", "given", "--tracking-uri", store,
                          "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    measured = load_recipe(out).measured
    assert (measured.baseline_tta_source, measured.baseline_tta_note) == ("given", note)
    assert measured.speedup_vs_baseline == pytest.approx(50.0 / winner_tta)
    assert measured.speedup_ci_low is None and measured.wall_speedup_vs_baseline is None
    assert "against the baseline TTA given, 50 s (production run 2026-11-20, 2 cores), not measured here" in proc.stdout
    assert "no interval" in proc.stdout and "90% interval" not in proc.stdout


def test_given_baseline_speedup_is_a_range_over_the_winners_runs_never_an_interval():
    """Even with 3 runs of the winner (enough for an interval against a measured baseline), a given baseline
    gives its ratio of medians and the range given/max .. given/min, no interval; the compute line counts
    every run's train clock in given baseline runs, a compiled winner's compile-way runs included."""
    winner = Candidate("w", False, None, Recipe(), ttas=[2.0, 2.5, 4.0], train_seconds=[2.0, 2.5, 4.0])
    measured_base = Candidate("b", True, None, Recipe(), ttas=[10.0, 11.0, 12.0], train_seconds=[10.0, 11.0, 12.0])
    assert decide([winner, measured_base], 3).speedup_interval[0] is not None
    given = decide([winner], 3, baseline=measured_base, given_seconds=10.0, given_note="prod")
    assert given.winner is winner and given.speedup == pytest.approx(4.0)
    assert given.speedup_range == pytest.approx((2.5, 5.0))
    assert given.speedup_interval == (None, None) and given.remeasure_interval == (None, None)
    assert "given (prod), not measured here: no interval" in given.interval_note
    assert compute_line(given) == "confirmation compute: 3 runs, 8.5 s of train clock = 0.85 baseline runs"
    both = decide([winner, measured_base], 3)
    assert compute_line(both) == "confirmation compute: 6 runs, 41.5 s of train clock = 3.77 baseline runs"
    both.compile_ways = {"new_machine_shipped_cache": Candidate("w", False, None, Recipe(), ttas=[1.0, 1.2, 1.1],
                                                                train_seconds=[1.0, 1.2, 1.1])}
    assert compute_line(both) == ("confirmation compute: 9 runs (3 of them the compile ways), 44.8 s of train clock "
                                  "= 4.07 baseline runs")


def test_exploration_is_reported_in_baseline_runs_once_the_baseline_tta_is_known(store, tmp_path):
    client = MlflowClient(store)
    parent = make_search(client, long_spec("explore"), [])
    parent_id = parent.info.run_id
    console = io.StringIO()
    session = SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), console)
    _report_exploration(long_spec("explore"), session, 25.0)
    assert console.getvalue() == ""  # no baseline TTA yet: nothing to count in
    client.log_metric(parent_id, names.M_CONFIRM_BASELINE_MEDIAN, 4.0)  # train clock: not what a wall is counted in
    client.log_metric(parent_id, names.M_CONFIRM_BASELINE_WALL_MEDIAN, 10.0)
    _report_exploration(long_spec("explore"), session, 25.0)
    assert console.getvalue().strip() == ("exploration: 25.0 s wall (probe and trials) = 2.50 baseline runs "
                                          "(its median wall to target, 10.0 s)")
    assert client.get_run(parent_id).data.metrics[names.M_EXPLORATION_BASELINE_RUNS] == pytest.approx(2.5)
    given = long_spec("explore-given", baseline_tta_seconds=50.0, baseline_tta_note="prod")
    parent = make_search(client, given, [])  # a given baseline is not run: no wall measured
    parent_id, console = parent.info.run_id, io.StringIO()
    _report_exploration(given, SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), console), 25.0)
    assert re.search(r"= 0\.50 baseline runs \(its given TTA, 50\.0 s\)$", console.getvalue().strip())
    assert math.isclose(client.get_run(parent_id).data.metrics[names.M_EXPLORATION_BASELINE_RUNS], 0.5)
