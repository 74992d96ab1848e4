"""One run's record (autospeed.train.run_record), as the built-in trainer and a user's script both keep it: the
status, the TTA, the evaluations and the rates a user reads in the result. The train clock is set by hand (it is
the caller's), so every figure is exact."""

from __future__ import annotations

import math
import time

import pytest
import torch

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.train.environment import PeakMemory
from autospeed.train.run_record import RunRecord, failure
from autospeed.train.step import Clock

CPU = torch.device("cpu")
RECIPE = Recipe(workload="digits", target_accuracy=0.9, max_train_seconds=60)


def _record(clock_seconds: float = 0.0, **kwargs) -> RunRecord:
    clock = Clock(CPU, clock_seconds)
    return RunRecord(RECIPE, CPU, clock, PeakMemory(CPU), wall_start=time.perf_counter(), **kwargs)


def _train_then_evaluate(record: RunRecord, train_seconds: float, accuracy: float, steps: int = 1,
                         samples_per_step: int = 32):
    """`steps` optimizer steps that take the clock to `train_seconds`, then an evaluation of `accuracy`."""
    for _ in range(steps):
        record.stepped(samples_per_step, compiled=False)
    record.clock.total = train_seconds
    return record.evaluation({"val_accuracy": accuracy, "val_loss": 1.0 - accuracy}, train_loss=0.5)


def test_the_first_evaluation_that_meets_the_target_is_the_tta_and_later_ones_do_not_move_it():
    record = _record(mode_of=lambda metric: "min" if metric.endswith("loss") else "max")
    for seconds, accuracy in ((10.0, 0.5), (20.0, 0.92), (30.0, 0.97)):
        record.met_target(_train_then_evaluate(record, seconds, accuracy))

    result = record.result({"workers": 1})

    assert result.status == Status.REACHED
    assert result.tta_seconds == 20.0 and result.objective == 20.0
    assert result.evaluations == 3 and len(result.history) == 3
    assert result.best_value == 0.97 and result.best_metrics["val_loss"] == pytest.approx(0.03)  # each its way
    assert [row["train_seconds"] for row in result.history] == [10.0, 20.0, 30.0]


def test_a_run_that_never_meets_its_target_has_no_tta_and_a_censored_objective_above_its_budget():
    record = _record()
    record.met_target(_train_then_evaluate(record, 10.0, 0.5))

    result = record.result({"workers": 1})

    assert result.status == Status.NOT_REACHED and result.tta_seconds is None
    assert result.objective > RECIPE.max_train_seconds
    assert result.wall_to_target_seconds is None


def test_a_script_run_alone_without_a_target_never_reaches_whatever_it_reports():
    record = _record(has_target=False)
    event = _train_then_evaluate(record, 5.0, 0.99)

    assert not record.met_target(event) and record.result({"workers": 1}).status == Status.NOT_REACHED


def test_each_evaluation_gives_the_rate_since_the_last_and_the_result_the_rate_of_the_whole_run():
    record = _record()
    first = _train_then_evaluate(record, 10.0, 0.5, steps=10)  # 320 samples in 10 s
    second = _train_then_evaluate(record, 12.0, 0.6, steps=20)  # 640 samples in 2 s

    assert first.samples_per_second == 32.0 and second.samples_per_second == 320.0
    assert record.result({"workers": 1}).samples_per_second == 960 / 12.0


def test_an_earlier_out_of_memory_attempts_seconds_stay_on_the_clock_but_not_in_the_rate_or_the_first_step():
    """`micro_batch_size: auto`: the attempt that fit starts with the failed ones' 100 s on its clock."""
    record = _record(clock_seconds=100.0)
    record.clock.start()
    record.stepped(32, compiled=True)  # the first step: compile and warm-up, timed on its own
    first_step = record.first_step_seconds
    record.clock.stop()
    event = _train_then_evaluate(record, 110.0, 0.95, steps=9)
    record.met_target(event)

    result = record.result({"workers": 1})

    assert 0 <= first_step < 100 and result.compile_seconds == first_step
    assert result.tta_seconds == 110.0 and result.train_seconds == 110.0
    assert result.samples_per_second == 320 / 10.0
    assert event.samples_per_second == 320 / 10.0


def test_the_wall_to_target_counts_from_the_runs_wall_clock_origin():
    record = _record(before_entry_seconds=4.0, origin="process start")
    record.met_target(_train_then_evaluate(record, 10.0, 0.95))

    result = record.result({"workers": 1})

    assert result.wall_to_target_seconds == pytest.approx(4.0 + record.wall_at_target)
    assert result.wall_clock_origin == "process start"


def test_a_diverged_run_says_by_which_step_and_an_out_of_memory_one_says_oom():
    record = _record()
    _train_then_evaluate(record, 1.0, 0.1, steps=3)
    record.diverged(math.nan)
    diverged = record.result({"workers": 1})
    assert diverged.status == Status.DIVERGED and diverged.error == "train loss became nan by step 3"
    assert diverged.objective == 3 * RECIPE.max_train_seconds

    assert failure(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB\nmore")) == (
        Status.OOM, "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert failure(ValueError("bad shape")) == (Status.FAILED, "ValueError: bad shape")
