"""A trial's evaluation curve and its score at equal horizon (docs/design.md "Long jobs: predicted time to target").

With `predict: {enabled: true}`, every report of a trial that has not reached its target carries its score at
equal horizon (autospeed.horizon): the error at the cut projected with an exponent pooled over the search's
finished trials and this one, under the recipe's own schedule (where it ends the run; a wsd decay), and its
`objective` becomes:
  * predicted (the crossing comes before the run's end): the median crossing, at least the train seconds already
    spent without reaching, at most the cap (`predict.max_seconds`);
  * its schedule ends the run first (measured, or projected): censored as without predict, with the cap as its
    budget (`cap x (1 + gap)`): below every trial that may reach, ordered by the distance from the target;
  * infeasible: 3 x the cap.
Every trial with an evaluation gets one of the first two: no trial ranks below another for lacking a prediction.
Without predict, reports are as before and carry `tta_source` only.
"""

from __future__ import annotations

from typing import Any

from autospeed import horizon
from autospeed.outcome import INFEASIBLE_FACTOR, Status, is_infeasible, objective
from autospeed.predict import Prediction, none
from autospeed.track.names import TTA_MEASURED, TTA_NONE, TTA_NOTE_PREDICT_OFF

PREDICTION_KEYS = ("tta_predicted_seconds", "tta_predicted_low_seconds", "tta_predicted_high_seconds")
EXPONENT_KEY = horizon.EXPONENT_KEY


class TrialCurve:
    """The (train seconds, target metric) points of one trial and its prediction after each."""

    def __init__(self, recipe, predict: dict[str, Any] | None, cap_seconds: float,
                 pool: list[float] | None = None):
        """`pool`: the exponents of the search's trials finished before this one (from the ledger)."""
        self.recipe = recipe
        self.predict = predict if predict and predict.get("enabled") else None
        self.cap_seconds = cap_seconds
        self.pool = list(pool or [])
        self.cut: horizon.Cut | None = None
        self.seconds: list[float] = []
        self.values: list[float] = []
        self.epochs: list[float] = []
        self.offset_seconds = 0.0
        self.last: Prediction | None = None
        self.cooldown: tuple[float, float, float] | None = None  # the latest branch: (seconds, value, after it)

    def add(self, train_seconds: float, value: float, epoch: float, compile_seconds: float = 0.0,
            cooldown: float | None = None) -> None:
        """One evaluation; `cooldown`: the target metric after a cooldown branch taken at it (train.cooldown)."""
        self.seconds.append(train_seconds)
        self.values.append(value)
        self.epochs.append(epoch)
        self.offset_seconds = compile_seconds
        if cooldown is not None:
            self.cooldown = (train_seconds, value, cooldown)

    def score(self) -> tuple[float, Prediction]:
        """(objective, prediction) at equal horizon from the points so far (autospeed.horizon); sets `cut`."""
        r, target = self.recipe, self.recipe.resolved_target
        decay = r.epochs * r.decay_fraction if r.schedule == "wsd" else 0.0
        self.cut = horizon.cut_of(self.seconds, self.values, self.epochs, target=target.value, mode=target.mode,
                                  run_epochs=r.epochs, decay_epochs=decay, offset_seconds=self.offset_seconds,
                                  cooldown=self.cooldown)
        if self.cut is None:
            best = next((v for v in self.values if v == v), None)
            return (objective(Status.NOT_REACHED, None, best, target.value, self.cap_seconds, target.mode),
                    none("no finite evaluation of a metric with a bound (an accuracy, a non-negative loss)"))
        exponent = horizon.pooled([*self.pool, self.cut.exponent])
        return horizon.score(self.cut, exponent, self.cap_seconds)

    def fields(self, status: Status | str, reached: bool, best_value: float | None,
               tta_seconds: float | None = None) -> dict[str, Any]:
        """What a report carries: `tta_source`, `tta_note`, the predicted seconds (None unless predicted) and,
        under predict, the objective. Without predict: `tta_source` only (the trainer's objective stands)."""
        if reached:
            return {"tta_source": TTA_MEASURED, "tta_note": "", **dict.fromkeys(PREDICTION_KEYS),
                    **({"objective": float(tta_seconds)} if self.predict and tta_seconds is not None else {})}
        if self.predict is None:
            return {"tta_source": TTA_NONE, "tta_note": TTA_NOTE_PREDICT_OFF, **dict.fromkeys(PREDICTION_KEYS)}
        target = self.recipe.resolved_target
        if is_infeasible(status):
            self.last = none(f"the run ended {Status(status).value}")
            score = INFEASIBLE_FACTOR * self.cap_seconds
        elif not self.seconds:
            self.last = none("no evaluation yet")
            score = objective(Status.NOT_REACHED, None, best_value, target.value, self.cap_seconds, target.mode)
        else:
            score, self.last = self.score()
        out = {"tta_source": self.last.source, "tta_note": self.last.note, **dict.fromkeys(PREDICTION_KEYS),
               EXPONENT_KEY: self.cut.exponent if self.cut is not None else None}
        if self.last.ok:
            out.update(zip(PREDICTION_KEYS, (self.last.seconds, self.last.low_seconds, self.last.high_seconds)))
        return {**out, "objective": score}

    def stop_early(self, incumbent_high_seconds: float | None) -> bool:
        """predict.early_stop: this trial's predicted low bound is above the incumbent's high bound."""
        return (self.predict is not None and bool(self.predict.get("early_stop")) and incumbent_high_seconds is not None
                and self.last is not None and self.last.ok and self.last.low_seconds > incumbent_high_seconds)


def cap_seconds(spec) -> float:
    """The cap on a predicted TTA, and the budget a trial without a prediction is censored at."""
    return spec.predict.cap_seconds(spec.budget.max_train_seconds)
