"""What a training run reports: one event per evaluation, one result at the end
(DESIGN.md "Result of one training run")."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autospeed.outcome import Status


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

    @property
    def val_accuracy(self) -> float | None:
        return self.metrics.get("val_accuracy")

    @property
    def best_val_accuracy(self) -> float | None:
        return self.best_metrics.get("val_accuracy")

    def flat(self) -> dict[str, float]:
        """One history row: the scalars and every metric at the top level."""
        row = {k: v for k, v in asdict(self).items() if k not in ("metrics", "best_metrics", "reached")}
        return {**row, **self.metrics, **{f"best_{k}": v for k, v in self.best_metrics.items()}}


@dataclass
class TrainResult:
    """The result object of DESIGN.md "Result of one training run"."""

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
    applied: dict[str, Any]
    environment: dict[str, Any]
    error: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    # train-clock seconds of attempts that ran out of memory before the micro-batch that fit (in every time above)
    micro_batch_retry_seconds: float = 0.0

    @property
    def best_val_accuracy(self) -> float | None:
        return self.best_metrics.get("val_accuracy")

    def to_dict(self) -> dict[str, Any]:
        """The result object: the best of each metric as `best_<metric>` (best_val_accuracy, best_val_loss, ...)."""
        out = {k: v for k, v in asdict(self).items() if k != "best_metrics"}
        out.update({f"best_{k}": v for k, v in self.best_metrics.items()})
        out["status"] = self.status.value
        return out
