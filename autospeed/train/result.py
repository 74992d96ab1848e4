"""What a training run reports: one event per evaluation, one result at the end
(docs/design.md "Result of one training run"), and where its wall to target counts from.

`wall_to_target_seconds` (docs/design.md "Honest figures"): seconds from the origin below to the end of
the evaluation that met the target; start-up, data, compile and evaluations included.
  * `process start` (the OS's start time of this process, so the interpreter's start and every import
    count): for the first `train()` of a process that is not a Ray process and not interactive. That is
    a fresh `autospeed train`, a user's script, and confirmation's fresh processes
    (autospeed.train.process).
  * `train() entry`: for every later `train()` of the process, for any `train()` while Ray is initialized
    (trials in Ray actors, data-parallel workers, anything in a search's driver), in an interactive
    session, and where the OS does not tell the process's start time. There the process's start says
    nothing about this run.
`wall_clock_origin` in the result says which one a run used.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from autospeed.outcome import Status
from autospeed.train.applied import Applied


@dataclass
class EvalEvent:
    """One evaluation, as sent to `on_eval`. Seconds are on the train clock."""

    step: int  # optimizer steps so far
    epoch: float
    samples: int  # training samples seen so far
    train_seconds: float
    wall_seconds: float
    metrics: dict[str, float]  # this evaluation: every metric the workload reports (val_accuracy, val_loss, ...)
    value: float  # this evaluation's value of the target metric
    best_value: float  # best value of the target metric so far, in its direction
    train_loss: float  # mean over the steps since the previous evaluation
    samples_per_second: float  # over the steps since the previous evaluation
    reached: bool  # best_value meets the target
    compile_seconds: float  # so far (all of it is in the first step)
    peak_memory_mb: float | None  # so far (None where it cannot be measured per run)
    objective: float  # the censored objective if the run ended now (outcome.objective)
    best_metrics: dict[str, float] = field(default_factory=dict)  # best of each metric so far, in its direction
    # over the same steps as samples_per_second, where the workload counts them (autospeed.train.throughput)
    tokens_per_second: float | None = None
    mfu: float | None = None  # model FLOPs utilisation: a fraction of the device's dense bf16 peak
    # a cooldown branch taken at this evaluation (autospeed.train.cooldown): cooldown_<metric>, cooldown_steps,
    # cooldown_seconds; empty without one
    cooldown: dict[str, float] = field(default_factory=dict)

    @property
    def val_accuracy(self) -> float | None:
        return self.metrics.get("val_accuracy")

    @property
    def best_val_accuracy(self) -> float | None:
        return self.best_metrics.get("val_accuracy")

    def flat(self) -> dict[str, float]:
        """One history row: the scalars and every metric at the top level."""
        row = {k: v for k, v in asdict(self).items() if k not in ("metrics", "best_metrics", "reached", "cooldown")
               and not (k in ("tokens_per_second", "mfu") and v is None)}  # counted by some workloads only
        return {**row, **self.metrics, **{f"best_{k}": v for k, v in self.best_metrics.items()}, **self.cooldown}


@dataclass
class TrainResult:
    """The result object of docs/design.md "Result of one training run"."""

    status: Status
    tta_seconds: float | None
    target: dict[str, Any]  # {metric, mode, value}
    best_value: float | None  # best value of the target metric, in its direction
    best_metrics: dict[str, float]  # best of every metric the workload reports, each in its direction
    objective: float  # the censored objective of this outcome (outcome.objective)
    train_seconds: float
    wall_seconds: float
    compile_seconds: float
    first_step_seconds: float
    peak_memory_mb: float | None  # this run's peak (None where it cannot be measured per run)
    samples_per_second: float
    steps: int
    epochs_done: float
    evaluations: int
    applied: Applied
    environment: dict[str, Any]
    error: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    # train-clock seconds of attempts that ran out of memory before the micro-batch that fit (in every time above)
    micro_batch_retry_seconds: float = 0.0
    # seconds from `wall_clock_origin` to the end of the evaluation that met the target (None unless reached)
    wall_to_target_seconds: float | None = None
    wall_clock_origin: str = "train() entry"  # PROCESS_START or TRAIN_ENTRY (module docstring)
    # a user's script that failed: the last lines of its stderr (autospeed.script.runner)
    stderr_tail: str | None = None
    # over the whole train clock, like samples_per_second, where the workload counts them (autospeed.train.throughput)
    tokens_per_second: float | None = None
    mfu: float | None = None  # model FLOPs utilisation: a fraction of the device's dense bf16 peak

    @property
    def best_val_accuracy(self) -> float | None:
        return self.best_metrics.get("val_accuracy")

    @property
    def cooldown_seconds(self) -> float:
        """Seconds its cooldown branches took (autospeed.train.cooldown): in wall_seconds, off the train clock."""
        from autospeed.track.names import M_COOLDOWN_SECONDS

        return sum(row.get(M_COOLDOWN_SECONDS, 0.0) for row in self.history)

    def to_dict(self) -> dict[str, Any]:
        """The result object: the best of each metric as `best_<metric>` (best_val_accuracy, best_val_loss, ...)."""
        out = {k: v for k, v in asdict(self).items() if k != "best_metrics"}
        out.update({f"best_{k}": v for k, v in self.best_metrics.items()})
        out["status"] = self.status.value
        return out


PROCESS_START, TRAIN_ENTRY = "process start", "train() entry"
_trained_in_this_process = False


def process_age_seconds() -> float | None:
    """Seconds since the OS started this process, or None where it cannot tell.

    Linux: /proc/self/stat's start time (clock ticks since boot, 10 ms steps) against CLOCK_BOOTTIME, the
    clock it is counted on. Elsewhere psutil's create_time() where psutil is installed (it comes with Ray)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):  # not Linux: ask psutil
        return _psutil_process_age_seconds()


def _psutil_process_age_seconds() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return time.time() - psutil.Process().create_time()


def _long_lived() -> bool:
    """A process whose start says nothing about a run in it: a Ray process or an interactive session."""
    ray = sys.modules.get("ray")
    in_ray = ray is not None and getattr(ray, "is_initialized", lambda: False)()
    return in_ray or hasattr(sys, "ps1") or bool(sys.flags.interactive) or "IPython" in sys.modules


def wall_clock_origin() -> tuple[float, str]:
    """At `train()` entry: seconds from the wall clock's origin to now, and which origin it is (module
    docstring: process start for a process's first run where that means something, else train() entry)."""
    global _trained_in_this_process
    first, _trained_in_this_process = not _trained_in_this_process, True
    age = process_age_seconds() if first and not _long_lived() else None
    return (age, PROCESS_START) if age is not None and age >= 0 else (0.0, TRAIN_ENTRY)
