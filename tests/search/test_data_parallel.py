"""Data-parallel trials (search/data_parallel.py) in a real search: Ray Tune trials that drive Ray
Train workers (gloo on CPU), tracked in MLflow as one trial each."""

from __future__ import annotations

import json

import pytest
import yaml

from .test_run import autospeed, client_for, runs_of

EPOCHS = 30  # every trial's; evaluated after each


@pytest.fixture(scope="module")
def search(tmp_path_factory, new_store):
    """A three-trial search whose space weighs 1 worker against 2.

    The baseline (lr 0.1, one worker) reaches the target; the sampled trials' LR (1e-5) cannot move the model in
    their epochs, so ASHA stops both at their first evaluation: its one rung (the next would be past the budget)
    compares each trial's first evaluation with the earlier ones', the baseline's far above. The sampler's seed (0)
    makes trial 1 a 2-worker trial and trial 2 a 1-worker one; trial 2 needs the cores trial 1's workers held.
    Epochs and ASHA, not the clock, end the trials (the budget is far above what they take). A trial on 2 workers
    costs about 30 s of Ray Train start-up on 2 cores: one such trial, which every data-parallel check reads (a
    2-worker run reaching its target is tests/test_cli_train.py's, through the same trainer and Ray Train). The
    probe is on, as by default: it skips a data-parallel search, saying so, instead of ending it in a probe that
    has no process group."""
    folder = tmp_path_factory.mktemp("data-parallel")
    space = folder / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "two-workers", "workload": "digits", "target_accuracy": 0.9,
        "budget": {"trials": 3, "max_train_seconds": 120},
        "asha": {"grace_seconds": 0.01, "reduction_factor": 100000},  # one rung: 0.01 s x 100000 > the budget
        "sampler": {"seed": 0, "n_startup_trials": 3}, "confirm": {"top_k": 1, "repeats": 0},
        "resources": {"gpus_per_trial": 0},  # the probe on (the default): it leaves these trials alone
        "baseline": {"batch_size": 32, "lr": 0.1, "workers": 1},
        # epochs to spare: a stopped 2-worker trial trains on until its workers read the stop file
        "fixed": {"epochs": EPOCHS, "eval_every_epochs": 1, "device": "cpu"},
        "space": {"workers": {"choice": [1, 2]}, "lr": {"loguniform": [1e-5, 2e-5]}, "batch_size": {"choice": [16]}},
    }, sort_keys=False))
    proc = autospeed("search", "--space", str(space), "--tracking-uri", new_store(folder),
                     "--storage-path", str(folder / "runs"), cwd=folder, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return folder, proc


def _trials(folder):
    """The search's trial runs in the order they ran (one at a time: a CPU search's trial takes every core)."""
    trials = [r for r in runs_of(folder, "two-workers") if r.data.tags.get("autospeed.kind") == "trial"]
    return sorted(trials, key=lambda r: r.info.start_time)


def test_a_two_worker_trial_is_one_run_that_says_two_workers_beside_one_worker_trials(search):
    folder, proc = search
    assert "probe: skipped for data-parallel trials" in proc.stdout
    trials = _trials(folder)
    assert len(trials) == 3  # one MLflow run per trial, not one per worker
    baseline, two_workers, _ = trials
    assert baseline.data.tags["autospeed.baseline"] == "true"
    assert baseline.data.tags["autospeed.status"] == "reached"
    assert 0 < baseline.data.metrics["tta_seconds"] < 120
    assert baseline.data.metrics["best_val_accuracy"] >= 0.9
    # each trial ran on the workers its recipe names (reserved per trial): what ran, not what the recipe asked: its
    # first report records the size of the process group it trained in (1: none)
    assert [r.data.params["workers"] for r in trials] == ["1", "2", "1"]
    for run in trials:
        assert run.data.tags["autospeed.env.workers"] == run.data.params["workers"]
    assert json.loads(two_workers.data.tags["autospeed.applied"])["workers"] == 2
    assert "workers=2" in proc.stdout  # the leaderboard says how many workers a trial used


def test_asha_stops_a_two_worker_trial_as_it_stops_a_one_worker_one_and_the_next_trial_gets_its_cores(search):
    """The 2-worker trial, far below the baseline at ASHA's rung, is stopped there: its workers end the run at a
    following evaluation, and its MLflow run ends as the 1-worker trial's that Tune stopped: `stopped_early`,
    FINISHED, inside the budget and short of its epochs (left alone, it ends `not_reached` after all 30). The
    1-worker trial after it could only start once the 2-worker trial's workers had given their cores back: the
    search finishing all three trials says they did."""
    folder, _ = search
    _, two_workers, one_worker = _trials(folder)
    for stopped in (two_workers, one_worker):
        assert stopped.data.tags["autospeed.status"] == "stopped_early"
        assert stopped.info.status == "FINISHED"
        assert stopped.data.metrics["train_seconds"] < 120
        assert stopped.data.metrics["best_val_accuracy"] < 0.9
        assert len(client_for(folder).get_metric_history(stopped.info.run_id, "train_seconds")) < EPOCHS
    assert two_workers.data.params["workers"] == "2"
    # it ended on its own, with the trainer's final report: what really acted is recorded
    assert json.loads(two_workers.data.tags["autospeed.applied"])["workers"] == 2
