"""The clock and the report of a user's loop (a part of autospeed.script.context's Context): evaluation off the
train clock (`ctx.paused()`), `ctx.report(...)` (the target, the budget, the search's stop), and the run's result
(its bookkeeping in autospeed.train.run_record, as the built-in trainer keeps it).

Run alone (`python train.py`, no autospeed around it), the script does what it did before: no target unless
its `defaults` name one (then `report(...).stop` says when it is met, the script's own early stop), no budget
unless they name `max_train_seconds`, no stop on a non-finite train loss. Run by autospeed, the recipe's
target and budget hold, and a non-finite train loss ends the run as diverged (docs/design.md "The objective").
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict
from typing import Any, NamedTuple

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.script.prepared import warn_unstepped
from autospeed.train.applied import CHECKED_KNOBS, NOT_APPLICABLE, NOT_READ, not_applied
from autospeed.train.evaluate import is_oom
from autospeed.train.result import TrainResult
from autospeed.train.setup import _SdpaWatch


class Report(NamedTuple):
    """What `ctx.report()` says: stop (and why: reached, budget, schedule, stopped, diverged) or go on."""

    stop: bool
    reason: str = ""


def metric_mode(name: str) -> str:
    """The direction of a reported metric other than the target's: lower is better for losses and errors."""
    lowered = name.lower()
    return "min" if any(w in lowered for w in ("loss", "error", "perplexity", "ppl", "mse", "mae")) else "max"


class Reporting:
    """The clock-and-report half of Context (its attributes are set by Context.__init__)."""

    @property
    def budget_seconds(self) -> float:
        """The train-clock budget: the recipe's, run by autospeed or named in the script's defaults; none
        (infinite) for a script run alone without one."""
        return self.recipe.max_train_seconds if self._has_budget else math.inf

    @contextlib.contextmanager
    def paused(self):
        """Off the train clock (evaluation, logging, checkpoints): it starts again at the next batch."""
        if self.clock.running:
            self.clock.stop()
        self._paused = True
        watch = self._watch_attention()
        try:
            with watch[0] if watch is not None else contextlib.nullcontext():
                yield
        except BaseException as e:
            self._eval_failed = is_oom(e)  # out of memory here: a smaller training micro-batch would not help
            raise
        finally:
            self._paused = False
            if watch is not None:
                self._attention_seen(*watch)

    def _watch_attention(self):
        """Until an evaluation has run the model: (a counter of scaled_dot_product_attention calls, the model's
        forward calls, the hook that counts them), as the trainer's first evaluation watches (AttentionKnob)."""
        if self._attention_decided or self.module is None:
            return None
        ran: list[int] = []
        return _SdpaWatch(), ran, self.module.register_forward_pre_hook(lambda *_: ran.append(1))

    def _attention_seen(self, watch, ran: list[int], hook) -> None:
        """A pause in which the model ran decides: no SDPA call, and the attention knob cannot act."""
        hook.remove()
        if ran:
            self._attention_decided = True
            if watch.calls == 0:
                self.applied["attention"] = NOT_APPLICABLE

    def report(self, train_loss: float | None = None, **metrics: float) -> Report:
        """One evaluation's metrics (the target's among them). Stops when the target is met, the budget or the
        schedule is spent, or the search says stop; the run's result is then recorded. Run alone without a
        target in its defaults, any metrics will do and only the schedule's end stops."""
        if self.clock.running:
            self.clock.stop()
        if self.measure is not None:  # a probe or a loss trace: its marks are its events (autospeed.script.measure)
            return Report(False)
        if self.replicas is not None:
            metrics = self.replicas.from_leader(metrics)
        target = self.recipe.resolved_target
        if target.metric not in metrics and self._has_target:
            raise ValueError(f"autospeed: ctx.report() got {sorted(metrics)}, not the target metric "
                             f"'{target.metric}'; report it (the target is {target.describe()})")
        values = {k: float(v) for k, v in metrics.items()}
        loss = math.nan if train_loss is None else float(train_loss)
        event = self.record.evaluation(values, loss)
        reached = self.record.met_target(event)
        stop = False
        if self.side is not None and self.is_main:
            stop = bool(self.side.ask("eval", event=asdict(event)).get("stop"))
        if self.replicas is not None:
            stop = self.replicas.any(stop)
        total = self._total_steps_or_none()
        diverged = not self.alone and train_loss is not None and not math.isfinite(loss)
        reason = ("reached" if reached else "diverged" if diverged
                  else "budget" if event.train_seconds >= self.budget_seconds
                  else "schedule" if total is not None and self.step_count >= total
                  else "stopped" if stop else "")
        if not reason:
            return Report(False)
        if reason == "diverged":
            self.record.diverged(loss)
        elif reason == "stopped":
            self.record.stopped_early()
        self.finish()
        return Report(True, reason)

    # ---- the end ----
    def finish(self, status: Status | None = None, error: str | None = None) -> TrainResult:
        """The run's result (sent to autospeed when it runs the script); called by `report` when it says stop,
        and at exit otherwise. Idempotent."""
        if self.finished:
            return self.result
        self.finished = True
        if self.clock.running:
            self.clock.stop()
        if status is None and self.measure is not None and self.step_count < self.measure.last:
            status, error = Status.FAILED, self.measure.ended_early(self.step_count)
        if status is not None:
            self.record.status, self.record.error = status, error
        if self.is_main:
            warn_unstepped(self._own_schedulers, self.step_count, self.steps_per_epoch)
        self.result = self._result()
        if self.side is not None and self.is_main:
            self.side.send("result", result=jsonable(self.result))
        return self.result

    def _result(self) -> TrainResult:
        applied = dict(self.applied)
        applied["knobs_read"] = sorted(self.read)
        for knob in ("optimizer", "schedule"):  # the script's own way acts where it handed autospeed nothing
            if getattr(self._trained, knob) == "script":
                applied.setdefault(knob, "script")
        for knob in CHECKED_KNOBS:  # a knob set (away from its default) that the script never read did not act
            default = Recipe.model_fields[knob].default
            if knob not in self.read and knob not in applied and getattr(self._trained, knob) != default:
                applied[knob] = NOT_READ
        applied["accumulation_steps"] = 1 if self._zeroed_between_micro else self._trained.accumulation_steps
        applied["gradients_zeroed_between_micro_batches"] = self._zeroed_between_micro
        applied["lr"] = self._trained.lr
        applied["not_applied"] = not_applied(self._trained, applied)
        if self._zeroed_between_micro:  # the leaderboard and `autospeed train` list it with the others
            applied["not_applied"]["accumulation_steps"] = {"asked": self._trained.accumulation_steps, "ran": 1}
        return self.record.result(applied)


def jsonable(result: TrainResult) -> dict[str, Any]:
    import json

    out = asdict(result)
    out["status"] = result.status.value
    return json.loads(json.dumps(out, default=str))
