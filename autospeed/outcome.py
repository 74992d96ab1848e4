"""What a run's outcome means: its status, the censored objective, medians and speed-ups.

Defined once here and imported by every writer (trainer adapter, tracking, search)
and reader (runs, export, report), so a status or an objective is decided in one place.
Standard library only.
"""

from __future__ import annotations

import math
import random
import statistics
from enum import Enum
from typing import Iterable, Sequence


class Status(str, Enum):
    """`autospeed.status` of a run (DESIGN.md "Tracking layout")."""

    RUNNING = "running"
    REACHED = "reached"
    NOT_REACHED = "not_reached"  # budget or epochs ran out
    STOPPED_EARLY = "stopped_early"  # ASHA (or on_eval) stopped it
    OOM = "oom"
    DIVERGED = "diverged"
    FAILED = "failed"
    KILLED = "killed"  # its process was interrupted or died

    def __str__(self) -> str:
        return self.value

    @property
    def infeasible(self) -> bool:
        """The recipe cannot train here: the sampler sees 3x the budget, MLflow a FAILED run."""
        return self in INFEASIBLE


INFEASIBLE = frozenset({Status.OOM, Status.DIVERGED, Status.FAILED})
INFEASIBLE_FACTOR = 3.0  # objective of an infeasible trial, in budgets


def is_infeasible(status: str | Status) -> bool:
    return Status(status) in INFEASIBLE


def objective(status: str | Status, tta_seconds: float | None, best_value: float | None, target_value: float,
              max_train_seconds: float, mode: str = "max") -> float:
    """The censored objective Optuna minimises (DESIGN.md "The objective Optuna sees").

    reached: the TTA; not (yet) reached: `max_train_seconds x (1 + gap)`, gap being the
    relative distance of the best metric value from the target in the metric's direction
    (so strictly above every reached TTA, and lower the closer the run came);
    infeasible: 3 x max_train_seconds. Valid as a final value at any moment of a run.
    """
    if is_infeasible(status):
        return INFEASIBLE_FACTOR * max_train_seconds
    if tta_seconds is not None:
        return float(tta_seconds)
    return max_train_seconds * (1.0 + gap(best_value, target_value, mode))


def ended_by_scheduler(best_value: float | None, target_value: float, train_seconds: float,
                       max_train_seconds: float, mode: str = "max") -> Status:
    """Status of a trial that the scheduler ended before the trainer's own final report."""
    if best_value is not None and gap(best_value, target_value, mode) == 0.0:
        # ASHA's max_t ended it on the very evaluation that reached the target (the trainer
        # stops there too): that evaluation's train clock is the TTA.
        return Status.REACHED
    if train_seconds >= max_train_seconds:
        return Status.NOT_REACHED  # ASHA's max_t ended it at the budget, a moment before the trainer would
    return Status.STOPPED_EARLY  # ASHA stopped it at a rung


def gap(best_value: float | None, target_value: float, mode: str = "max") -> float:
    """Relative distance of `best_value` from the target in the metric's direction: 0 when met, at most 1
    (so a trial that never evaluated, or got nowhere, is censored at 2 x the budget, below infeasible)."""
    if best_value is None or not math.isfinite(best_value):
        return 1.0
    scale = abs(target_value) or 1.0  # a target of 0 (a perfect loss): the absolute distance
    if mode == "max":
        return min(1.0, max(0.0, target_value - best_value) / scale)
    return min(1.0, max(0.0, best_value - target_value) / scale)


def median_tta(ttas: Iterable[float | None]) -> float | None:
    """Median TTA over repeats, a run that missed the target counting as infinitely slow.

    None when there are no runs or when the median itself is a miss."""
    values = [math.inf if x is None else float(x) for x in ttas]
    if not values:
        return None
    m = statistics.median(values)
    return m if math.isfinite(m) else None


def speedup(baseline_tta: float | None, tta: float | None) -> float | None:
    """baseline / candidate TTA; None unless both reached."""
    if baseline_tta is None or tta is None or tta <= 0:
        return None
    return baseline_tta / tta


def speedup_interval(baseline_ttas: Sequence[float | None], ttas: Sequence[float | None],
                     confidence: float = 0.9, resamples: int = 10_000,
                     seed: int = 0) -> tuple[float | None, float | None]:
    """Bootstrap interval of the ratio of median TTAs (baseline / candidate) over seeds.

    Each side's repeats are resampled with replacement on their own (the seeds are
    independent draws); a missed target counts as infinitely slow. Returns the
    (low, high) percentiles; None for a bound whose resampled ratio is undefined
    (the candidate's median a miss) and inf where the baseline's median is a miss.
    """
    if not baseline_ttas or not ttas:
        return None, None
    rng = random.Random(seed)
    base = [math.inf if x is None else float(x) for x in baseline_ttas]
    cand = [math.inf if x is None else float(x) for x in ttas]
    ratios = []
    for _ in range(resamples):
        b = statistics.median(rng.choices(base, k=len(base)))
        c = statistics.median(rng.choices(cand, k=len(cand)))
        ratios.append(math.nan if math.isinf(c) else b / c)
    ratios.sort(key=lambda r: -math.inf if math.isnan(r) else r)  # a candidate miss is the worst ratio
    tail = (1.0 - confidence) / 2.0

    def at(q: float) -> float | None:
        r = ratios[min(len(ratios) - 1, max(0, int(q * len(ratios))))]
        return None if math.isnan(r) else r

    return at(tail), at(1.0 - tail)
