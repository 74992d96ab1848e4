"""One run's record, kept the same way for the built-in trainer (autospeed.train.trainer) and a user's own loop
(autospeed.script.context): the steps and samples on the train clock, the first step's seconds, each evaluation
as an EvalEvent (the bests, the TTA, the history), the status and the TrainResult at the end.

Timing (docs/design.md "What is timed"): the clock is the caller's (it runs only while training); the first
optimizer step (compile, if any, and warm-up) is timed on its own with the clock synced; an evaluation reads the
clock stopped; samples per second are over this run's own train seconds (`clock_at_start` on: an earlier
out-of-memory attempt's seconds stay on the clock, not in the rate). TTA is the train seconds at the first
evaluation that meets the target; its wall to target counts from the run's wall-clock origin
(autospeed.train.result). torch only.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from autospeed.outcome import Status, objective
from autospeed.recipe import Recipe
from autospeed.train.applied import Applied
from autospeed.train.environment import PeakMemory, environment
from autospeed.train.evaluate import better, is_oom
from autospeed.train.result import TRAIN_ENTRY, EvalEvent, TrainResult
from autospeed.train.step import Clock


def failure(error: BaseException) -> tuple[Status, str]:
    """The status and the one-line error of a run that `error` ended: `oom` for out of memory, else `failed`."""
    text = str(error).strip()
    return (Status.OOM if is_oom(error) else Status.FAILED,
            f"{type(error).__name__}: {text.splitlines()[0] if text else ''}")


class RunRecord:
    """The bookkeeping of one training run (module docstring). `mode_of(metric)`: the direction of a reported
    metric ("max" or "min"); `rates(samples_per_second)`: the tokens/s and MFU fields where the workload counts
    them (autospeed.train.throughput); `has_target`: False for a script run alone without one (nothing reaches)."""

    def __init__(self, recipe: Recipe, device: torch.device, clock: Clock, peak: PeakMemory, wall_start: float,
                 before_entry_seconds: float = 0.0, origin: str = TRAIN_ENTRY, *, has_target: bool = True,
                 mode_of: Callable[[str], str] = lambda metric: "max",
                 rates: Callable[[float], dict[str, Any]] = lambda samples_per_second: {}):
        self.target = recipe.resolved_target
        self.max_train_seconds = recipe.max_train_seconds
        self.device, self.clock, self.peak = device, clock, peak
        self.clock_at_start = clock.total  # train seconds earlier attempts of the run spent
        self.wall_start = wall_start  # perf_counter() at the run's start (train() entry, the context's creation)
        self.before_entry_seconds, self.origin = before_entry_seconds, origin  # from the wall clock's origin to it
        self.has_target, self.mode_of, self.rates = has_target, mode_of, rates
        self.status, self.tta_seconds, self.error = Status.NOT_REACHED, None, None
        self.steps = self.samples = self.evaluations = 0
        self.steps_per_epoch: int | None = None  # optimizer steps in an epoch, once the training data says
        self.first_step_seconds = self.compile_seconds = 0.0
        self.best_metrics: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.wall_at_target: float | None = None  # seconds from wall_start to the end of the evaluation that met it
        self.steps_since_eval = self.samples_since_eval = 0
        self._clock_at_last_eval = clock.total

    def epochs_done(self) -> float:
        """Epochs trained so far; 0.0 while no training data has said how long an epoch is (a user's script with
        batches of its own and no max_steps): steps are never counted as epochs."""
        return self.steps / self.steps_per_epoch if self.steps_per_epoch else 0.0

    # ---- training ----
    def stepped(self, samples: int, compiled: bool) -> None:
        """One optimizer step of `samples` examples (all workers). The first one (compile if `compiled`, and
        warm-up) is timed on its own, the clock synced so it is exact."""
        self.steps += 1
        self.samples += samples
        self.steps_since_eval += 1
        self.samples_since_eval += samples
        if self.steps == 1 and self.clock.running:
            self.clock.stop()
            self.first_step_seconds = self.clock.total - self.clock_at_start
            self.compile_seconds = self.first_step_seconds if compiled else 0.0
            self.clock.start()

    # ---- evaluations (the clock stopped) ----
    def evaluation(self, metrics: dict[str, float], train_loss: float,
                   cooldown: dict[str, float] | None = None) -> EvalEvent:
        """One evaluation's metrics and the mean train loss since the last: the bests, the count, the event as
        `on_eval` gets it (kept in the history). The TTA is the caller's to take (`met_target`): a run may
        end as diverged at this same evaluation. `cooldown`: a cooldown branch's fields (train.cooldown), not in
        the bests: the run itself never trained that way."""
        target, train_seconds = self.target, self.clock.total
        for name, value in metrics.items():
            self.best_metrics[name] = better(self.mode_of(name), self.best_metrics.get(name), value)
        self.evaluations += 1
        best = self.best_metrics.get(target.metric)
        reached = self.has_target and best is not None and target.met(best)
        interval = train_seconds - self._clock_at_last_eval
        samples_per_second = self.samples_since_eval / interval if interval > 0 else 0.0
        event = EvalEvent(
            step=self.steps, epoch=self.epochs_done(), samples=self.samples,
            train_seconds=train_seconds, wall_seconds=time.perf_counter() - self.wall_start, metrics=metrics,
            value=metrics.get(target.metric, math.nan), best_value=math.nan if best is None else best,
            train_loss=train_loss, samples_per_second=samples_per_second, reached=reached,
            compile_seconds=self.compile_seconds, peak_memory_mb=self.peak.mb(),
            objective=objective(Status.RUNNING, train_seconds if reached else None, best, target.value,
                                self.max_train_seconds, target.mode),
            best_metrics=dict(self.best_metrics), **self.rates(samples_per_second), cooldown=dict(cooldown or {}))
        self.history.append(event.flat())
        self.steps_since_eval = self.samples_since_eval = 0
        self._clock_at_last_eval = train_seconds
        return event

    def met_target(self, event: EvalEvent) -> bool:
        """Whether `event` meets the target; the first one that does sets the TTA and the status `reached`."""
        if event.reached and self.tta_seconds is None:
            self.tta_seconds, self.wall_at_target, self.status = event.train_seconds, event.wall_seconds, Status.REACHED
        return event.reached

    # ---- the end ----
    def diverged(self, train_loss: float) -> None:
        self.status, self.error = Status.DIVERGED, f"train loss became {train_loss} by step {self.steps}"

    def stopped_early(self) -> None:
        """The caller's `on_eval` (ASHA, a stop file, a prediction) asked to stop."""
        self.status = Status.STOPPED_EARLY

    def failed(self, error: BaseException) -> None:
        """`error` ended the run (failure says how); the clock stops where it was."""
        if self.clock.running:
            self.clock.stop()
        self.status, self.error = failure(error)

    def result(self, applied: Applied) -> TrainResult:
        """The run's result (docs/design.md "Result of one training run") with `applied`, what acted."""
        target, train_seconds = self.target, self.clock.total
        run_seconds = train_seconds - self.clock_at_start
        samples_per_second = self.samples / run_seconds if run_seconds > 0 else 0.0
        best = self.best_metrics.get(target.metric)
        wall_to_target = None if self.wall_at_target is None else self.wall_at_target + self.before_entry_seconds
        return TrainResult(
            status=self.status, tta_seconds=self.tta_seconds, target=target.model_dump(), best_value=best,
            best_metrics=dict(self.best_metrics),
            objective=objective(self.status, self.tta_seconds, best, target.value, self.max_train_seconds,
                                target.mode),
            train_seconds=train_seconds, wall_seconds=time.perf_counter() - self.wall_start,
            compile_seconds=self.compile_seconds, first_step_seconds=self.first_step_seconds,
            peak_memory_mb=self.peak.mb(), samples_per_second=samples_per_second, **self.rates(samples_per_second),
            steps=self.steps, epochs_done=self.epochs_done(), evaluations=self.evaluations,
            applied=applied,
            environment={**environment(self.device), "workers": applied["workers"]},  # the devices a TTA used
            error=self.error, history=self.history, wall_to_target_seconds=wall_to_target,
            wall_clock_origin=self.origin)
