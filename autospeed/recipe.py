"""The recipe: every setting of one training run, one validated schema.

A recipe lives in YAML on disk. Unknown keys, wrong types and impossible values
are rejected on load with one line naming the file and key path.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autospeed.errors import UserError
from autospeed.validation import offered_metrics_note, raise_user_error
from autospeed.yamlio import dump_yaml, load_yaml

Precision = Literal["fp32", "tf32", "bf16", "fp16"]
SCRIPT_WORKLOAD = "script"  # autospeed.script.options.SCRIPT: a user's own training script
CompileMode = Literal["none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, validate_assignment=True)


class Target(_Strict):
    """The validation metric value that counts as trained: `metric` `mode`-wards of `value`
    (max: metric >= value, min: metric <= value). Which metrics exist is the workload's to say."""

    metric: str = Field(min_length=1)  # a metric the workload's evaluation reports, e.g. val_loss
    mode: Literal["max", "min"]  # max: higher is better (accuracy); min: lower is better (loss)
    value: float

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    def met(self, value: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return value >= self.value if self.mode == "max" else value <= self.value

    def describe(self) -> str:
        """`val_loss <= 1.6`: the target as a person reads it."""
        return f"{self.metric} {'>=' if self.mode == 'max' else '<='} {self.value:g}"


ACCURACY = "val_accuracy"
DEFAULT_TARGET_ACCURACY = 0.95


def target_from(target: Target | None, target_accuracy: float | None) -> Target:
    """The target a file means: `target`, or the `target_accuracy` shorthand, or the default."""
    if target is not None:
        return target
    value = DEFAULT_TARGET_ACCURACY if target_accuracy is None else target_accuracy
    return Target(metric=ACCURACY, mode="max", value=value)


class LrScaling(_Strict):
    """`lr` is the peak LR at `reference_batch` examples; a run uses lr x f(effective batch / reference_batch),
    f = 1 (none), the ratio (linear) or its square root (sqrt): airbench's "lr per 1024 examples"."""

    rule: Literal["none", "linear", "sqrt"] = "none"
    reference_batch: int | None = Field(None, ge=1)  # examples per optimizer step at which `lr` is the peak LR

    @model_validator(mode="after")
    def _reference_given(self) -> "LrScaling":
        if self.rule != "none" and self.reference_batch is None:
            raise ValueError(f"rule {self.rule} needs reference_batch: the effective batch (examples per step) "
                             f"at which lr is the peak LR, e.g. the baseline's batch_size")
        return self


CompileWay = Literal["new_machine", "new_machine_shipped_cache", "same_machine_warm"]


class CompileCost(_Strict):
    """What one way of paying the compile cost, over the confirmation runs that trained that way (train clock)."""

    compile_seconds_median: float  # the first step, compile included
    tta_seconds_median: float | None = None  # None: no run reached the target
    runs: int
    # where one more run trained that way falls, 90% (outcome.next_run_interval: a prediction around these runs'
    # centre, with the spread pooled over every group of runs the confirmation trained); absent with fewer than 3
    # runs or, for the TTA, a missed target
    compile_seconds_low: float | None = None
    compile_seconds_high: float | None = None
    tta_seconds_low: float | None = None
    tta_seconds_high: float | None = None


class Trajectory(_Strict):
    """The exported winner's expected curve: the target metric against train seconds up to its expected TTA. A
    prediction for the production run, whatever it was made from (`source`): `autospeed train` compares its live
    curve with it (autospeed.train.on_track)."""

    # confirmation: the curve of the winner's confirmation run with the median TTA (TTA: their median; range: where
    # one more run falls, 80%, or min..max with fewer than 3 runs);
    # trial: the search trial's own curve, one measurement in a reused process; prediction: the trial's curve
    # extrapolated to the predicted crossing (80% interval), interpolated linearly in log seconds between
    source: Literal["confirmation", "trial", "prediction"]
    note: str  # the same, in words
    metric: str
    mode: Literal["max", "min"]
    tta_seconds: float = Field(gt=0)  # the expected TTA, train clock
    tta_low_seconds: float | None = None
    tta_high_seconds: float | None = None
    points: list[tuple[float, float]]  # (train seconds, metric value), in time order, ending at the expected TTA
    # TTA = samples to target (the maths) / samples per second (the systems): the throughput the expected TTA was
    # measured at (the median over the confirmation runs, each its samples to target over its TTA; the trial's
    # own otherwise), so that `autospeed train` can say which half a production run's miss came from
    samples_per_second: float | None = Field(default=None, gt=0)

    @field_validator("points")
    @classmethod
    def _points(cls, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        if not points:
            raise ValueError("needs at least one (train seconds, value) point")
        if any(b[0] < a[0] for a, b in zip(points, points[1:])):
            raise ValueError("train seconds must not decrease from one point to the next")
        return points


class Measured(_Strict):
    """What the search measured for an exported recipe. Training ignores it."""

    model_config = ConfigDict(extra="allow")  # forward-compatible: newer exporters may add fields

    search_name: str | None = None
    search_id: str | None = None
    trial_id: str | None = None
    tta_seconds: float | None = None  # the trial's one search measurement (train clock); never a prediction
    # measured: confirmation runs or the trial reached the target; predicted: an unconfirmed export of a trial
    # that did not reach, ranked by where its curve would meet the target (autospeed.predict), then with:
    tta_source: Literal["measured", "predicted"] | None = None
    tta_predicted_seconds: float | None = None  # 80% interval: low .. high
    tta_predicted_low_seconds: float | None = None
    tta_predicted_high_seconds: float | None = None
    confirmed: bool = False  # true only when confirmation runs decided the winner; then:
    tta_seconds_median: float | None = None  # over `repeats` confirmation runs with new seeds
    tta_seconds_min: float | None = None
    tta_seconds_max: float | None = None
    repeats: int | None = None
    baseline_tta_seconds_median: float | None = None
    # given: confirm.baseline_tta_seconds (not re-run here; baseline_tta_note says where it came from), so the
    # speed-up has no interval; measured: the baseline's own confirmation runs
    baseline_tta_source: Literal["measured", "given"] | None = None
    baseline_tta_note: str | None = None
    speedup_vs_baseline: float | None = None  # ratio of median TTAs (train clock)
    # 90% interval over the seeds (outcome.speedup_interval); absent with fewer than 3 runs a side
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    # predicted (not measured): where the speed-up of a re-measurement with 7 fresh runs a side falls, 90%
    remeasure_speedup_low: float | None = None
    remeasure_speedup_high: float | None = None
    # process start to the evaluation that met the target (start-up, data, compile, evaluations included),
    # medians over the same fresh-process confirmation runs
    wall_to_target_seconds_median: float | None = None
    baseline_wall_to_target_seconds_median: float | None = None
    wall_speedup_vs_baseline: float | None = None
    # confirm.ablation: knob -> speed-up lost when the winner trains with it set back to the baseline's value
    # (a lower bound for the knobs listed in ablation_at_least: set back, the runs missed the target)
    ablation: dict[str, float] | None = None
    ablation_at_least: list[str] | None = None
    environment: dict[str, Any] | None = None
    # torch.compile's cache artifacts of the winner (its last confirmation run's), a file beside this recipe:
    # `autospeed train` loads it before compiling (autospeed.train.compile_cache); absent for a recipe that does
    # not compile or was not confirmed
    compile_cache: str | None = None
    # a user's script (workload: script): the knobs of this recipe that are the script's own, its
    # autospeed.init(defaults=...) kept as they were (its own schedule and optimizer among them, `script`)
    script_own: list[str] | None = None
    # the inductor cache the confirmation runs compiled from, so the compile cost the TTAs and speed-up above
    # include: cold (an empty one per run, as production pays on a new machine) or warm (the search machine's
    # shared one: a new machine pays more); absent when not confirmed
    compile_cache_state: Literal["cold", "warm"] | None = None
    # a compiled winner's compile three ways (docs/design.md "Compile cost as production pays it"): new_machine (an
    # empty inductor cache), new_machine_shipped_cache (empty, with measured.compile_cache loaded), same_machine_warm
    # (the search machine's cache); each a CompileCost from the confirmation runs that trained that way, or "not
    # measured". The confirmed TTAs and speed-up include the way compile_cache_state names (cold: new_machine)
    compile_costs: dict[CompileWay, CompileCost | Literal["not measured"]] | None = None
    # the winner's expected curve, which `autospeed train` checks its live run against (a prediction, always)
    trajectory: Trajectory | None = None


class Recipe(_Strict):
    """One training run. Field docs give units; docs/design.md "Recipe: the knobs"."""

    workload: str = "mnist1d"
    workload_options: dict[str, Any] = Field(default_factory=dict)
    # Exactly one of: `target_accuracy: x` (shorthand for {metric: val_accuracy, mode: max, value: x})
    # or `target: {metric, mode, value}`; neither means target_accuracy 0.95. `resolved_target` reads both.
    target_accuracy: float | None = Field(None, gt=0, le=1)
    target: Target | None = None
    max_train_seconds: float = Field(60.0, gt=0)  # budget on the train clock
    epochs: float = Field(10.0, gt=0)  # schedule length; the run also ends here
    eval_every_epochs: float = Field(0.5, gt=0)
    # a user's script (workload: script) only: evaluate every this many optimizer steps instead (an iteration
    # loop's `eval_interval`); None: every eval_every_epochs
    eval_every_steps: int | None = Field(None, ge=1)
    # a user's script only: the run's length in optimizer steps (an iteration loop's own `max_iters`, read as
    # ctx.config.max_steps), the schedule's end instead of `epochs`; None: `epochs` of the training loader
    max_steps: int | None = Field(None, ge=1)
    seed: int = 0
    # auto (CUDA where visible, else the CPU), cpu, cuda, cuda:N (that GPU; data-parallel workers each take their own),
    # mps: torch's own device strings, so a script's `device` reaches the run as it wrote it
    device: str = "auto"

    batch_size: int = Field(128, ge=1)  # samples per forward pass per worker, unless micro_batch_size splits it
    accumulation_steps: int = Field(1, ge=1)  # effective batch = workers x batch_size x accumulation_steps
    # None: batch_size per pass. An int: passes of that many samples (it must divide batch_size), more
    # accumulation, same effective batch. auto: batch_size, halved on out-of-memory (batch.py).
    micro_batch_size: int | Literal["auto"] | None = None
    lr_scaling: LrScaling = Field(default_factory=LrScaling)  # scales lr to the effective batch
    # Data-parallel workers (torch DDP through Ray Train, one GPU each on GPUs). batch_size stays the
    # micro-batch of ONE worker: an optimizer step sees workers x batch_size x accumulation_steps samples.
    workers: int = Field(1, ge=1)
    # muon: torch.optim.Muon on the 2-D hidden weights, AdamW on the rest (optimizers.py)
    # script (workload: script only): the optimizer the script builds itself, with its own arguments
    optimizer: Literal["sgd", "adamw", "muon", "script"] = "sgd"
    optimizer_impl: Literal["default", "foreach", "fused"] = "default"  # torch's implementations
    lr: float = Field(0.05, gt=0)  # peak learning rate
    momentum: float = Field(0.9, ge=0, lt=1)  # SGD momentum (Nesterov), AdamW beta1
    weight_decay: float = Field(5e-4, ge=0)
    # script (workload: script only): the script's own LR schedule (its scheduler or LR function), `lr`
    # scaling its peak (autospeed.script: ctx.scheduler(own=...), ctx.lr_at)
    schedule: Literal["constant", "cosine", "onecycle", "linear", "wsd", "script"] = "constant"
    warmup_fraction: float = Field(0.0, ge=0, lt=1)  # of all steps; onecycle ignores it
    # wsd (warmup-stable-decay): the LR falls linearly to 0 over this last fraction of the steps; before it, the
    # LR does not depend on the schedule's length (what a long job's trial needs: docs/design.md "Long jobs")
    decay_fraction: float = Field(0.2, gt=0, le=1)
    label_smoothing: float = Field(0.0, ge=0, lt=1)

    precision: Precision = "fp32"
    compile: CompileMode = "none"
    channels_last: bool = False
    data_loader: Literal["device", "dataloader"] = "device"
    num_workers: int = Field(0, ge=0)
    pin_memory: bool = False
    prefetch_factor: int = Field(2, ge=1)
    persistent_workers: bool = False
    cudnn_benchmark: bool = False
    activation_checkpointing: bool = False
    # torch.nn.attention.sdpa_kernel backend for models that call scaled_dot_product_attention
    attention: Literal["auto", "flash", "efficient", "cudnn", "math"] = "auto"

    measured: Measured | None = None  # written by `autospeed export`; ignored by training

    @model_validator(mode="before")
    @classmethod
    def _script_keeps_its_own(cls, data: Any) -> Any:
        """A user's script keeps its own LR schedule and optimizer unless the recipe names others (docs/design.md
        round 4: the script as written is the baseline)."""
        if isinstance(data, dict) and data.get("workload") == SCRIPT_WORKLOAD:
            return {"schedule": "script", "optimizer": "script", **data}
        return data

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value in ("auto", "cpu", "cuda", "mps") or re.fullmatch(r"cuda:[0-9]+", value):
            return value
        raise ValueError("must be auto, cpu, cuda, cuda:N (a GPU's index, e.g. cuda:1) or mps")

    @field_validator("micro_batch_size", mode="before")
    @classmethod
    def _micro_batch(cls, value: Any) -> Any:
        if value is None or value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("must be auto or an int >= 1 (samples per forward pass)")

    @model_validator(mode="after")
    def _consistent(self) -> "Recipe":
        if self.target is not None and self.target_accuracy is not None:
            raise ValueError("give either target_accuracy or target, not both; target_accuracy: x is short for "
                             "target: {metric: val_accuracy, mode: max, value: x}")
        if self.workload != SCRIPT_WORKLOAD:
            for key, value in (("schedule", self.schedule), ("optimizer", self.optimizer)):
                if value == "script":
                    raise ValueError(f"{key} 'script' keeps a user script's own {key} (workload: script); this "
                                     f"recipe trains workload {self.workload!r}: pick another {key}")
            if self.eval_every_steps is not None:
                raise ValueError("eval_every_steps is for a user's script (workload: script); use eval_every_epochs")
            if self.max_steps is not None:
                raise ValueError("max_steps is for a user's script (workload: script); use epochs")
        if self.eval_every_epochs > self.epochs:
            raise ValueError(
                f"eval_every_epochs ({self.eval_every_epochs}) must be <= epochs ({self.epochs}); lower it"
            )
        if self.schedule == "wsd" and self.warmup_fraction + self.decay_fraction > 1:
            raise ValueError(f"warmup_fraction ({self.warmup_fraction}) + decay_fraction ({self.decay_fraction}) "
                             f"must be <= 1 for schedule wsd; lower one of them")
        micro = self.micro_batch_size
        if isinstance(micro, int) and micro < self.batch_size and self.batch_size % micro:
            raise ValueError(f"micro_batch_size ({micro}) must divide batch_size ({self.batch_size}); use a divisor "
                             f"of it, or auto")
        if self.persistent_workers and self.num_workers == 0:
            raise ValueError("persistent_workers needs num_workers >= 1; set num_workers or drop persistent_workers")
        return self

    @property
    def resolved_target(self) -> Target:
        """The target this recipe trains to (the `target_accuracy` shorthand resolved)."""
        return target_from(self.target, self.target_accuracy)

    def training_fields(self) -> dict[str, Any]:
        """Every field that affects training (everything but `measured`)."""
        return self.model_dump(exclude={"measured"})

    def to_yaml(self) -> str:
        return dump_yaml(self.model_dump(exclude_none=True))


KNOB_FIELDS = tuple(f for f in Recipe.model_fields if f != "measured")


def recipe_from_dict(data: Any, source: str) -> Recipe:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a recipe must be a mapping of keys to values, got {type(data).__name__}")
    try:
        return Recipe.model_validate(data)
    except pydantic.ValidationError as e:
        raise_user_error(e, source, Recipe, offered_metrics_note(data))
        raise  # unreachable: raise_user_error always raises


def load_recipe(path: str | os.PathLike) -> Recipe:
    return recipe_from_dict(load_yaml(path), str(path))
