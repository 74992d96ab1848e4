"""Where a number was measured (environment.py): per-run peak memory."""

from __future__ import annotations

import torch

from autospeed.recipe import Recipe
from autospeed.train.environment import PeakMemory
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
