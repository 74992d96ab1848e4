"""The maths-neutrality check (docs/design.md "Probe stage"): does a systems knob leave the maths alone?

A systems knob (compile, channels_last, the optimizer's implementation, a loader setting, a micro-batch at the
same effective batch, a precision) may change only how fast a step runs, or it may also change what the step
computes. The check trains the baseline's recipe for `steps` optimizer steps twice with the same seed (so the
same initial weights and the same data order), once without the knob and once with it, and records each run's
loss trace: the mean train loss over each window of `window_steps` steps. The trace's distance from the
baseline's is compared with the band: the same distance between the baseline at its own seed and at the next
seed (two reference seeds: other initial weights, another data order).

    distance(a, b) = sqrt(mean over windows of log(a_i / b_i)^2)   (relative, so the loss's scale drops out)
    neutral        = distance(knob, baseline) <= band_fraction x distance(baseline seed s, baseline seed s+1)

A neutral knob changes the trajectory less than a new seed does, so its time to target is the baseline's divided
by its throughput ratio: a prediction from measured speed, no curve extrapolated. A knob outside the band is a
maths knob: the probe does not fix it as if it were free. Nothing is assumed neutral, precisions included: bf16
and fp16 pass only when their trace stays inside the band. Why a trace of a few hundred steps: same seed and
order means a neutral knob's trace differs only by floating-point rounding (0 to a few % of the band on mnist1d,
experiments/results/neutrality.md), while a changed update (another learning rate, label smoothing) drifts from
the first windows on; a band from one pair of seeds is itself noisy, which `band_fraction` can allow for.

This module trains (torch only, through the trainer): no Ray, Optuna or MLflow. `compare` takes any trace, so a
user's script is checked through its own loop (search/probe_script.py), with a repeat of its baseline: autospeed
does not build a script's data order, so the check first shows that the seed fixes it. search/probe.py runs the
check as a Ray task with the trial's resources and records what it found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from autospeed.recipe import Recipe, Target

# The trace ends by its steps alone: no train-clock budget cuts it short on a slow or busy machine.
_NO_BUDGET_SECONDS = 1e9
# Two runs at one seed may differ (non-deterministic kernels), by at most this part of the neutrality limit
# (band_fraction x band): beyond it a neutral knob could fail by that noise alone, and the check cannot be trusted.
REPEAT_LIMIT = 0.5


@dataclass
class Neutrality:
    """One knob change checked against the baseline."""

    change: dict[str, Any]  # the knob values moved from the baseline's (a systems configuration's difference)
    distance: float  # the knob's loss trace from the baseline's, same seed (distance())
    band: float  # the baseline's trace at its seed from its trace at the next seed
    band_fraction: float  # neutral when distance <= band_fraction x band
    steps: int  # optimizer steps per trace
    error: str | None = None  # the knob's run failed (out of memory, an error): not checked, not neutral

    @property
    def neutral(self) -> bool:
        return self.error is None and self.distance <= self.band_fraction * self.band

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.change.items())

    def line(self) -> str:
        """What the probe prints: the verdict and the two numbers behind it."""
        if self.error is not None:
            return f"  neutrality: {self.label}: not checked ({self.error}): treated as a maths knob"
        ratio = self.distance / self.band if self.band > 0 else math.inf
        said = "neutral" if self.neutral else "a MATHS knob: not fixed as if it were free"
        return (f"  neutrality: {self.label}: {said} (loss trace {self.distance:.4f} from the baseline's, same seed; "
                f"band between two seeds {self.band:.4f}; {ratio:.2f} of it, limit {self.band_fraction:g}; "
                f"{self.steps} steps)")

    def record(self) -> dict[str, Any]:
        """The parent run's record of it (tag autospeed.probe_neutrality)."""
        return {"neutral": self.neutral, "distance": round(self.distance, 6), "band": round(self.band, 6),
                "band_fraction": self.band_fraction, "steps": self.steps,
                **({"error": self.error} if self.error else {})}


def distance(a: list[float], b: list[float]) -> float:
    """Root mean square of log(a_i / b_i) over the windows both traces have: 0 for identical traces, about the
    relative difference of their losses otherwise. inf when either is empty or not positive and finite."""
    pairs = list(zip(a, b))
    if not pairs or not all(math.isfinite(x) and math.isfinite(y) and x > 0 and y > 0 for x, y in pairs):
        return math.inf
    return math.sqrt(sum(math.log(x / y) ** 2 for x, y in pairs) / len(pairs))


def trace_recipe(recipe: Recipe, steps: int, window_steps: int, train_samples: int) -> Recipe:
    """`recipe` trained for exactly `steps` optimizer steps with an evaluation (a point of the trace) after every
    `window_steps`, a target it cannot meet and no budget: only the steps end it. Its maths, seed and data order
    are the recipe's own."""
    effective = recipe.workers * recipe.batch_size * recipe.accumulation_steps
    steps_per_epoch = train_samples // effective
    if steps_per_epoch < 1:
        raise ValueError(f"the effective batch {effective} exceeds the {train_samples} training samples")
    return recipe.model_copy(update={
        **never_target(recipe), "max_train_seconds": _NO_BUDGET_SECONDS,
        "epochs": steps / steps_per_epoch, "eval_every_epochs": window_steps / steps_per_epoch})


def never_target(recipe: Recipe) -> dict[str, Any]:
    """The update that gives `recipe` a target on its metric it cannot meet: only its steps end it."""
    target = recipe.resolved_target
    never = Target(metric=target.metric, mode=target.mode, value=1e300 if target.mode == "max" else -1e300)
    return {"target": never, "target_accuracy": None}


def loss_trace(recipe: Recipe, workload, threads: int | None = None) -> tuple[list[float], str | None]:
    """(the train loss of each window, the run's error or None): `recipe` as trace_recipe made it."""
    from autospeed.train.trainer import train

    events = []
    result = train(recipe, workload, on_eval=events.append, num_threads=threads)
    error = result.error if result.status.value not in ("not_reached",) else None
    return [e.train_loss for e in events], error


def check(baseline: Recipe, changes: list[dict[str, Any]], workload, *, steps: int, window_steps: int,
          band_fraction: float, train_samples: int, threads: int | None = None) -> list[Neutrality]:
    """Each change (knob -> value, applied to `baseline`) checked against the band of the baseline's two seeds:
    2 + len(changes) traces of `steps` steps of the built-in trainer. The workload's validation set is only read
    (after each window), so a tiny one costs nothing."""
    base = trace_recipe(baseline, steps, window_steps, train_samples)
    return compare(base, changes, lambda recipe: loss_trace(recipe, workload, threads), steps=steps,
                   band_fraction=band_fraction)


def compare(base: Recipe, changes: list[dict[str, Any]], trace: Callable[[Recipe], tuple[list[float], str | None]],
            *, steps: int, band_fraction: float, repeat: bool = False) -> list[Neutrality]:
    """Each change to `base` checked against the band of its two seeds, `trace(recipe)` giving a run's loss trace
    and its error. With `repeat` (a user's script, whose data order autospeed does not build), the base is traced
    again at its seed first: where that repeat differs by more than REPEAT_LIMIT of the limit, or the two seeds do
    not differ at all, the seed does not fix the run, and no change is checked (each says why)."""
    reference, error = trace(base)
    if error is not None:
        raise RuntimeError(f"the neutrality check's baseline run failed: {error}")
    other, error = trace(base.model_copy(update={"seed": base.seed + 1}))
    if error is not None:
        raise RuntimeError(f"the neutrality check's second reference seed failed: {error}")
    band = distance(other, reference)
    unfixed = _not_fixed_by_seed(base, reference, band, band_fraction, trace) if repeat else None
    out = []
    for change in changes:
        if unfixed is not None:
            out.append(Neutrality(dict(change), math.inf, band, band_fraction, steps, unfixed))
            continue
        knob = Recipe.model_validate({**base.model_dump(), **change})
        found, error = trace(knob)
        out.append(Neutrality(dict(change), distance(found, reference), band, band_fraction, steps, error))
    return out


def _not_fixed_by_seed(base: Recipe, reference: list[float], band: float, band_fraction: float,
                       trace: Callable[[Recipe], tuple[list[float], str | None]]) -> str | None:
    """Why the baseline's traces cannot anchor the check (None: they can): two seeds give the same trace (the seed
    never reaches the run), or a repeat at the base's seed differs by a good part of what a change may move."""
    if band == 0.0:
        return ("two seeds gave the same loss trace: the run's initialisation and data order do not follow the "
                "recipe's seed (seed from ctx.config.seed, build the training loader through ctx)")
    again, error = trace(base)
    if error is not None:
        raise RuntimeError(f"the neutrality check's repeat of the baseline failed: {error}")
    apart = distance(again, reference)
    if apart > REPEAT_LIMIT * band_fraction * band:
        return (f"two runs at seed {base.seed} differ by {apart:.4f}, {apart / band:.2f} of the band between two "
                f"seeds: the run's data order or initialisation does not follow the seed (seed from "
                f"ctx.config.seed, build the training loader through ctx)")
    return None


def predicted_tta_ratio(speed: float, noise: float) -> tuple[float, float, float]:
    """A neutral configuration's TTA over the baseline's, from throughput alone (same samples to target):
    (1/speed, its low, its high), the interval the probe's timing noise (speed x (1 +- noise))."""
    if math.isinf(noise):
        return 1.0 / speed, 0.0, math.inf
    return 1.0 / speed, 1.0 / (speed * (1.0 + noise)), (1.0 + noise) / speed
