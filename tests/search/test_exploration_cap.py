"""budget.exploration_baseline_runs: a cap on the whole exploration in baseline runs (the given baseline TTA). Once
the trials' train clock, summed, reaches it, the running trial ends at its next report, no new trial starts, the
search ends normally with the trials it has, and its count becomes those (a resume trains no more). One real search
(Ray, Optuna, MLflow) on digits."""

from __future__ import annotations

import json

import pytest

from autospeed.errors import UserError
from autospeed.search.storage import SearchDir
from autospeed.search.trials import _exploration_budget
from autospeed.space import spec_from_dict
from tests.search.test_run import autospeed, runs_of, write_space

BASELINE_TTA_SECONDS = 1.0
CAP_RUNS = 1.0  # 1 s of train clock in all: about 3 of the 8 trials below
TRIAL_SECONDS = 0.4
FILE = {"name": "s", "workload": "digits", "target_accuracy": 0.9, "space": {"lr": {"loguniform": [0.01, 0.1]}}}


def test_a_capped_search_starts_no_trial_once_the_trials_spent_the_cap_and_ends_as_finished(tmp_path, new_store):
    space = write_space(
        tmp_path, name="capped", target_accuracy=0.999,  # out of reach: every trial trains its whole budget
        budget={"trials": 8, "max_train_seconds": TRIAL_SECONDS, "exploration_baseline_runs": CAP_RUNS},
        asha={"enabled": False}, sampler={"kind": "random", "seed": 0}, probe={"enabled": False},
        confirm={"top_k": 1, "repeats": 0, "baseline_tta_seconds": BASELINE_TTA_SECONDS,
                 "baseline_tta_note": "given by this test"},
        fixed={"epochs": 100, "eval_every_epochs": 0.2})
    search = autospeed("search", "--space", str(space), "--tracking-uri", new_store(tmp_path), "--storage-path",
                       str(tmp_path / "runs"), cwd=tmp_path)
    assert search.returncode == 0, search.stderr  # a spent budget is a search that finished, not one interrupted
    said = [line for line in search.stdout.splitlines() if line.startswith("exploration budget spent")]
    assert len(said) == 1, search.stdout
    trials = [r for r in runs_of(tmp_path, "capped") if r.data.tags["autospeed.kind"] == "trial"]
    assert 1 < len(trials) < 8 and f"no new trial after {len(trials)} trials of 8" in said[0]
    trials.sort(key=lambda r: r.info.start_time)
    seconds = [r.data.metrics["train_seconds"] for r in trials]
    cap = CAP_RUNS * BASELINE_TTA_SECONDS
    assert sum(seconds) >= cap  # spent when the search stopped starting trials
    assert sum(seconds[:-1]) < cap  # and the last one started while some was left
    # the budget ended the last one at the report that spent it, before its own budget
    assert seconds[-1] < TRIAL_SECONDS and trials[-1].data.tags["autospeed.status"] == "stopped_early"
    state = json.loads(next((tmp_path / "runs").rglob("autospeed_search.state")).read_text())
    assert state["trials"] == len(trials)  # what a resume counts: every trial finished, none to add


def test_a_resumed_search_counts_what_its_finished_trials_spent(tmp_path):
    search_dir = SearchDir(tmp_path)
    (tmp_path / "finished").mkdir()
    for trial_id, history in (("a", [[0.2, 0.5], [0.4, 0.6]]), ("b", [[0.3, 0.4]]), ("c", [])):
        (tmp_path / "finished" / f"{trial_id}.json").write_text(json.dumps({"history": history}))
    spec = spec_from_dict({**FILE, "budget": {"exploration_baseline_runs": 2},
                           "confirm": {"baseline_tta_seconds": 0.5, "baseline_tta_note": "test"}}, "space.yaml")
    budget = _exploration_budget(spec, type("Session", (), {"search_dir": search_dir})())
    assert budget.cap_seconds == 1.0 and budget.spent_seconds == pytest.approx(0.7) and not budget.spent()
    budget.record("d", {"train_seconds": 0.3})
    assert budget.spent()


def test_a_cap_without_the_baseline_tta_is_refused_naming_the_key():
    with pytest.raises(UserError, match=r"space.yaml: key 'budget.exploration_baseline_runs'.*baseline_tta_seconds"):
        spec_from_dict({**FILE, "budget": {"exploration_baseline_runs": 2}}, "space.yaml")
