"""Where a number was measured (environment.py): per-run peak memory."""

from __future__ import annotations

import torch

from autospeed.recipe import Recipe
from autospeed.train.environment import PeakMemory, threads_as_measured
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

BIG_MB = 768


def _touch_and_free_big_buffer() -> None:
    big = torch.ones(BIG_MB * 2**20 // 4)  # float32: BIG_MB of resident memory
    assert float(big[-1]) == 1.0
    del big


def test_peak_memory_is_this_runs_not_the_process_lifetime_high_water_mark():
    """A reused Ray actor or a confirmation run must not inherit an earlier run's peak."""
    digits = load_workload("digits", {})
    recipe = Recipe(workload="digits", target_accuracy=0.99, max_train_seconds=1, epochs=1)
    first = PeakMemory(torch.device("cpu"))
    _touch_and_free_big_buffer()
    lifetime_peak = first.mb()
    assert lifetime_peak is not None and lifetime_peak >= BIG_MB  # what the process once held
    result = train(recipe, digits)
    assert result.peak_memory_mb is not None
    assert result.peak_memory_mb < lifetime_peak - BIG_MB / 2


def test_a_measured_recipe_trains_with_its_measurements_threads_only_where_that_cannot_oversubscribe(monkeypatch):
    """`autospeed train` of an export (cli.cmd_train): the threads its confirmation used, on a machine with as many
    CPUs; torch's default on another machine, on a GPU, for a recipe never measured, or under the user's own
    OMP_NUM_THREADS (each then named by `differences`)."""
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cpu, here = torch.device("cpu"), os.cpu_count()
    assert threads_as_measured({"cpu_count": here, "torch_threads": 1}, cpu) == 1
    assert threads_as_measured({"cpu_count": here + 62, "torch_threads": here + 62}, cpu) is None
    assert threads_as_measured({"cpu_count": here, "torch_threads": 1}, torch.device("cuda")) is None
    assert threads_as_measured(None, cpu) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads_as_measured({"cpu_count": here, "torch_threads": here}, cpu) is None
