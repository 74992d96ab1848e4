"""A trial's evaluation curve and what it predicts (docs/design.md "Long jobs: predicted time to target").

With `predict: {enabled: true}`, every report of a trial that has not reached its target carries the
prediction from its curve so far (autospeed.predict), and its `objective` becomes the predicted TTA:
  * predicted: the median crossing, at least the train seconds already spent without reaching (it had not
    met the target by then), at most the cap (`predict.max_seconds`);
  * no prediction (flat, noisy, diverging, too few points): censored as without predict, with the cap as its
    budget (`cap x (1 + gap)`), so it ranks above every predicted trial and below none that reached;
  * infeasible: 3 x the cap.
Without predict, reports are as before and carry `tta_source` only.

The trial horizon and the schedule agree (docs/design-differences.md): the fit uses only the evaluations
before the schedule starts to decay (`wsd`'s last `decay_fraction`; never, for `constant`), and a crossing
after the recipe's last epoch is no prediction: its schedule would end the run first.
"""

from __future__ import annotations

from typing import Any

from autospeed.outcome import INFEASIBLE_FACTOR, Status, is_infeasible, objective
from autospeed.predict import Prediction, none, predict_tta
from autospeed.track.layout import TTA_MEASURED, TTA_NONE, TTA_NOTE_PREDICT_OFF

PREDICTION_KEYS = ("tta_predicted_seconds", "tta_predicted_low_seconds", "tta_predicted_high_seconds")


class TrialCurve:
    """The (train seconds, target metric) points of one trial and its prediction after each."""

    def __init__(self, recipe, predict: dict[str, Any] | None, cap_seconds: float, seed: int = 0):
        self.recipe = recipe
        self.predict = predict if predict and predict.get("enabled") else None
        self.cap_seconds = cap_seconds
        self.seed = seed
        self.seconds: list[float] = []
        self.values: list[float] = []
        self.epochs: list[float] = []
        self.offset_seconds = 0.0
        self.last: Prediction | None = None

    def add(self, train_seconds: float, value: float, epoch: float, compile_seconds: float = 0.0) -> None:
        self.seconds.append(train_seconds)
        self.values.append(value)
        self.epochs.append(epoch)
        self.offset_seconds = compile_seconds

    def prediction(self) -> Prediction:
        """The prediction from the points so far that lie before the schedule decays."""
        p = self.predict
        stable_epochs = self.recipe.epochs * (1 - self.recipe.decay_fraction) if self.recipe.schedule == "wsd" \
            else self.recipe.epochs
        kept = [i for i, e in enumerate(self.epochs) if e <= stable_epochs + 1e-9]
        if not kept:
            return none("no evaluation before the schedule decays")
        seconds_per_epoch = self.seconds[-1] / self.epochs[-1] if self.epochs[-1] > 0 else None
        horizon = self.recipe.epochs * seconds_per_epoch if seconds_per_epoch else None
        target = self.recipe.resolved_target
        return predict_tta([self.seconds[i] for i in kept], [self.values[i] for i in kept], target.value, target.mode,
                           min_points=p["min_evaluations"], max_interval_ratio=p["max_interval_ratio"],
                           offset_seconds=self.offset_seconds, horizon_seconds=horizon,
                           max_seconds=self.cap_seconds, seed=self.seed)

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
        else:
            self.last = self.prediction()
            score = objective(Status.NOT_REACHED, None, best_value, target.value, self.cap_seconds, target.mode)
        out = {"tta_source": self.last.source, "tta_note": self.last.note, **dict.fromkeys(PREDICTION_KEYS)}
        if self.last.ok:
            spent = self.seconds[-1] if self.seconds else 0.0
            score = min(max(self.last.seconds, spent), self.cap_seconds)
            out.update(zip(PREDICTION_KEYS, (self.last.seconds, self.last.low_seconds, self.last.high_seconds)))
        return {**out, "objective": score}

    def stop_early(self, incumbent_high_seconds: float | None) -> bool:
        """predict.early_stop: this trial's predicted low bound is above the incumbent's high bound."""
        return (self.predict is not None and bool(self.predict.get("early_stop")) and incumbent_high_seconds is not None
                and self.last is not None and self.last.ok and self.last.low_seconds > incumbent_high_seconds)


def cap_seconds(spec) -> float:
    """The cap on a predicted TTA, and the budget a trial without a prediction is censored at."""
    return spec.predict.cap_seconds(spec.budget.max_train_seconds)
