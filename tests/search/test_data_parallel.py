"""Data-parallel trials (search/data_parallel.py) in a real search: Ray Tune trials that drive Ray
Train workers (gloo on CPU), tracked in MLflow as one trial each."""

from __future__ import annotations

import json

import pytest
import yaml

from .test_run import autospeed, runs_of


@pytest.fixture(scope="module")
def search(tmp_path_factory, new_store):
    """A two-trial search whose baseline trains on 2 workers and whose space weighs 1 against 2.

    Epochs, not the clock, end a trial (the budget is far above what 10 digits epochs take). A trial on
    2 workers costs about 30 s of Ray Train start-up on 2 cores, so the sampler's seed (2) is one whose
    sampled trial takes 1 worker: the baseline is the 2-worker trial. The probe is on, as by default: it skips
    a data-parallel search, saying so, instead of ending it in a probe that has no process group."""
    folder = tmp_path_factory.mktemp("data-parallel")
    space = folder / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "two-workers", "workload": "digits", "target_accuracy": 0.9,
        "budget": {"trials": 2, "max_train_seconds": 120}, "asha": {"grace_seconds": 0.2, "reduction_factor": 3},
        "sampler": {"seed": 2, "n_startup_trials": 2}, "confirm": {"top_k": 1, "repeats": 0},
        "resources": {"gpus_per_trial": 0},  # the probe on (the default): it leaves these trials alone
        # batch_size is per worker: the baseline's 2 workers x 16 make one worker's steps of 32
        "baseline": {"batch_size": 16, "lr": 0.1, "workers": 2},
        "fixed": {"epochs": 10, "eval_every_epochs": 1, "device": "cpu"},
        "space": {"workers": {"choice": [1, 2]}, "lr": {"loguniform": [0.05, 0.2]}, "batch_size": {"choice": [16]}},
    }, sort_keys=False))
    proc = autospeed("search", "--space", str(space), "--tracking-uri", new_store(folder),
                     "--storage-path", str(folder / "runs"), cwd=folder, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return folder, proc


def test_a_two_worker_trial_reaches_its_target_and_its_run_says_two_workers(search):
    folder, proc = search
    assert "probe: skipped for data-parallel trials" in proc.stdout
    trials = [r for r in runs_of(folder, "two-workers") if r.data.tags.get("autospeed.kind") == "trial"]
    assert len(trials) == 2  # one MLflow run per trial, not one per worker
    baseline = next(r for r in trials if r.data.tags["autospeed.baseline"] == "true")
    assert baseline.data.tags["autospeed.status"] == "reached"
    assert 0 < baseline.data.metrics["tta_seconds"] < 120
    assert baseline.data.metrics["best_val_accuracy"] >= 0.9
    # what ran, not what the recipe asked: the trainer's torch.distributed group had 2 processes
    assert baseline.data.params["workers"] == "2"
    assert json.loads(baseline.data.tags["autospeed.applied"])["workers"] == 2
    assert baseline.data.tags["autospeed.env.workers"] == "2"
    assert "workers=2" in proc.stdout  # the leaderboard says how many workers a TTA used
    other = next(r for r in trials if r is not baseline)
    # the sampled trial ran on the workers its recipe names, 1 or 2 (reserved per trial): its first report
    # records the size of the process group it trained in (1: none), its final one the trainer's `applied`
    assert other.data.params["workers"] in ("1", "2")
    assert other.data.tags["autospeed.env.workers"] == other.data.params["workers"]
    if "autospeed.applied" in other.data.tags:  # absent only where ASHA stopped it before its final report
        assert json.loads(other.data.tags["autospeed.applied"])["workers"] == int(other.data.params["workers"])
    assert other.data.tags["autospeed.status"] in ("reached", "not_reached", "stopped_early")
