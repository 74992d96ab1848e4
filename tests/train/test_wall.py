"""Wall to target (process start, or train() entry, to the evaluation that met the target) and the cached
data that keeps `autospeed train`'s start-up short."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from autospeed.recipe import Recipe
from autospeed.run_recipe import train_in_fresh_process
from autospeed.train.result import PROCESS_START, TRAIN_ENTRY
from autospeed.train.trainer import train
from autospeed.workloads import CACHE_ENV, load_workload

# Digits reaches 0.95 in 2-3 epochs, in well under a second.
REACHES = dict(workload="digits", target_accuracy=0.95, max_train_seconds=30, epochs=5, eval_every_epochs=1,
               batch_size=32, lr=0.1, seed=0)


def test_a_reached_run_reports_its_wall_to_target_and_a_missed_one_none():
    digits = load_workload("digits")
    reached = train(Recipe(**REACHES), digits)
    missed = train(Recipe(**{**REACHES, "target_accuracy": 1.0, "epochs": 1}), digits)

    assert reached.status == "reached"
    assert reached.wall_to_target_seconds >= reached.tta_seconds
    assert reached.to_dict()["wall_to_target_seconds"] == reached.wall_to_target_seconds
    assert reached.wall_clock_origin in (PROCESS_START, TRAIN_ENTRY)
    assert missed.status == "not_reached" and missed.wall_to_target_seconds is None
    assert missed.to_dict()["wall_to_target_seconds"] is None


# A fresh process that reads its own age (interpreter start and imports) before its first train(), then trains
# twice: the first run's wall to target counts from the process's start (so that age is in it), the second's
# from its train() call.
TWO_RUNS = f"""
import json
from autospeed.recipe import Recipe
from autospeed.train.result import process_age_seconds
from autospeed.train.trainer import train
recipe = Recipe(**{REACHES!r})
age_before_train = process_age_seconds()
runs = [train(recipe), train(recipe)]
print(json.dumps([age_before_train, *[{{k: r.to_dict()[k] for k in ("status", "tta_seconds", "wall_seconds",
                                                                 "wall_to_target_seconds", "wall_clock_origin")}}
                                      for r in runs]]))
"""


def test_a_fresh_process_counts_its_first_run_from_its_start_and_later_runs_from_train():
    done = subprocess.run([sys.executable, "-c", TWO_RUNS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    age_before_train, first, second = json.loads(done.stdout)

    assert first["status"] == second["status"] == "reached"
    assert first["wall_clock_origin"] == PROCESS_START
    # the interpreter start and the imports came before train(): in the wall to target, not in the run's own wall
    assert age_before_train > 0
    assert first["wall_to_target_seconds"] >= first["tta_seconds"] + age_before_train
    assert second["wall_clock_origin"] == TRAIN_ENTRY
    assert second["tta_seconds"] <= second["wall_to_target_seconds"] <= second["wall_seconds"]


def test_a_confirmation_fresh_process_counts_from_its_start():
    result = train_in_fresh_process(Recipe(**REACHES), 1)

    assert result.status == "reached" and result.wall_clock_origin == PROCESS_START
    # its interpreter start and imports came before train(): in the wall to target, not in the run's own wall
    assert result.wall_to_target_seconds > result.wall_seconds >= result.tta_seconds


# ---------------------------------------------------------------- cached generated data
@pytest.mark.parametrize("name, options", [("synthetic", {"num_samples": 40, "image_size": 4, "num_classes": 2}),
                                           ("digits", {"seed": 3})])
def test_generated_data_are_cached_on_disk_and_read_back_not_generated_again(name, options, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    first = load_workload(name, options)
    folders = [p for p in tmp_path.iterdir() if p.name.startswith(f"{name}-")]
    assert len(folders) == 1 and (folders[0] / "manifest.json").exists() and (folders[0] / "x.npy").exists()

    again = load_workload(name, options)
    for key in ("train_x", "train_y", "val_x", "val_y"):
        assert torch.equal(getattr(again, key), getattr(first, key))

    # the next load reads the file: what is on disk is what it gets (generating again would give `first`)
    cached = np.load(folders[0] / "x.npy")
    np.save(folders[0] / "x.npy", np.zeros_like(cached))
    assert torch.count_nonzero(load_workload(name, options).train_x) == 0
    assert torch.count_nonzero(first.train_x) > 0  # a copy of its own, not a view of the file


def test_other_options_are_another_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    small = {"num_samples": 40, "image_size": 4, "num_classes": 2}
    a = load_workload("synthetic", small)
    b = load_workload("synthetic", {**small, "seed": 1})

    assert not torch.equal(a.train_x, b.train_x)
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("synthetic-")]) == 2
