"""What a workload is: a model factory, data, and optionally its own loss and evaluation.

A workload factory takes keyword options (the recipe's `workload_options`) and
returns a `Workload` (docs/design.md "Workload contract"). Data come either as CPU tensors
(`train_x/train_y/val_x/val_y`, which the `device` loader keeps resident on the device)
or as `torch.utils.data.Dataset`s (`train_dataset/val_dataset`, map-style or iterable,
read through torch's DataLoader with the recipe's loader knobs). A batch is whatever the
DataLoader collates (an `(x, y)` pair for tensors), moved to the device.

`loss(model, batch) -> scalar tensor` defaults to cross-entropy of `model(x)` against `y`;
`evaluate(model, val_batches) -> {metric: value}` defaults to `val_accuracy` and `val_loss`.
`metrics` names every metric `evaluate` returns with its direction (and range), so a
target can name any of them. Models that support activation checkpointing expose their
checkpointable blocks as `model.checkpoint_blocks` (an nn.Sequential or nn.ModuleList).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn


@dataclass(frozen=True)
class Metric:
    """A validation metric's direction and the values it can take (a target outside is impossible)."""

    mode: str  # "max": higher is better; "min": lower is better
    low: float = -math.inf
    high: float = math.inf

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ValueError(f"metric mode must be 'max' or 'min', got {self.mode!r}")


# What the default evaluation reports for a classifier.
CLASSIFICATION_METRICS: dict[str, Metric] = {
    "val_accuracy": Metric("max", 0.0, 1.0),  # top-1, a fraction
    "val_loss": Metric("min", 0.0),  # mean cross-entropy, nats per example
}
# Keys a trial's report uses for its own numbers: a workload's metric may not take them.
RESERVED_NAMES = frozenset({"step", "epoch", "samples", "train_seconds", "wall_seconds", "train_loss",
                            "samples_per_second", "objective", "value", "best_value", "compile_seconds",
                            "peak_memory_mb", "status", "tta_seconds", "final", "error"})


@dataclass
class Workload:
    # (the first seven in the order of earlier releases, so positional plugins keep working)
    name: str
    train_x: torch.Tensor | None = None
    train_y: torch.Tensor | None = None  # int64 class labels (for the default loss)
    val_x: torch.Tensor | None = None
    val_y: torch.Tensor | None = None
    build_model: Callable[[], nn.Module] | None = None  # required
    num_classes: int | None = None
    # Applied to each training micro-batch's inputs on the training device, e.g. flips and crops.
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None
    # True for 4-D image inputs, where channels_last can apply.
    images: bool = False
    # torch Datasets (map-style or iterable) instead of the tensors above.
    train_dataset: torch.utils.data.Dataset | None = None
    val_dataset: torch.utils.data.Dataset | None = None
    # loss(model, batch) -> scalar tensor; None: cross-entropy of model(x) against y.
    loss: Callable[[nn.Module, Any], torch.Tensor] | None = None
    # evaluate(model, val_batches) -> {metric: value}; None: val_accuracy and val_loss.
    evaluate: Callable[[nn.Module, Iterable[Any]], Mapping[str, float]] | None = None
    # Every metric `evaluate` reports: name -> Metric (or just "max"/"min").
    metrics: dict[str, Metric | str] = field(default_factory=lambda: dict(CLASSIFICATION_METRICS))
    # Samples per batch the trainer reads validation data in.
    eval_batch_size: int = 1024
    # Throughput in the workload's own units: tokens in one training sample (a GPT's context), so a run
    # reports tokens/s; the model FLOPs of one training sample, forward and backward (6 x parameters x
    # tokens plus attention, as nanoGPT and PaLM count them), so a run on a GPU of known peak reports MFU.
    tokens_per_sample: int | None = None
    train_flops_per_sample: float | None = None
    # A per-sample (C, H, W) -> (C, H, W) transform (e.g. random crop and flip) for a tensor workload read
    # through a DataLoader (`data_loader: dataloader`): it runs in the loader's worker processes, as people
    # write augmentation, and `augment` is then not applied on the device. Must pickle (no lambdas) for workers.
    loader_augment: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if not callable(self.build_model):
            raise ValueError(f"workload {self.name!r}: build_model must be a function returning the nn.Module")
        tensors = [t is not None for t in (self.train_x, self.train_y, self.val_x, self.val_y)]
        datasets = [d is not None for d in (self.train_dataset, self.val_dataset)]
        if any(datasets) and any(tensors):
            raise ValueError(f"workload {self.name!r}: give tensors (train_x, train_y, val_x, val_y) or datasets "
                             f"(train_dataset, val_dataset), not both")
        if any(datasets) and not all(datasets):
            raise ValueError(f"workload {self.name!r}: give both train_dataset and val_dataset")
        if any(datasets) and self.loader_augment is not None:
            raise ValueError(f"workload {self.name!r}: loader_augment is for tensor data; a Dataset applies "
                             f"its own transforms in __getitem__")
        if not any(datasets):
            if not all(tensors):
                raise ValueError(f"workload {self.name!r}: give train_x, train_y, val_x and val_y "
                                 f"(or train_dataset and val_dataset)")
            if len(self.train_x) != len(self.train_y) or len(self.val_x) != len(self.val_y):
                raise ValueError(f"workload {self.name!r}: inputs and labels differ in length")
            if len(self.train_x) == 0 or len(self.val_x) == 0:
                raise ValueError(f"workload {self.name!r}: empty train or validation set")
        self.metrics = {k: (Metric(v) if isinstance(v, str) else v) for k, v in self.metrics.items()}
        if not self.metrics:
            raise ValueError(f"workload {self.name!r}: `metrics` names no metric; name what evaluate() returns")
        clash = sorted(set(self.metrics) & RESERVED_NAMES)
        if clash:
            raise ValueError(f"workload {self.name!r}: metric names {clash} are reserved for autospeed's own "
                             f"numbers; rename them (e.g. val_{clash[0]})")

    @property
    def uses_datasets(self) -> bool:
        return self.train_dataset is not None


def check_target(target, metrics: Mapping[str, Metric], workload: str, shorthand: bool = False) -> None:
    """Raise UserError unless `target` (a recipe.Target) names one of `metrics`, in its direction,
    at a value the metric can take. `shorthand`: the file said `target_accuracy`."""
    from autospeed.errors import UserError

    offered = ", ".join(f"{k} ({m.mode})" for k, m in metrics.items())
    key = "target_accuracy" if shorthand else "target.metric"
    m = metrics.get(target.metric)
    if m is None:
        raise UserError(f"key '{key}': workload '{workload}' does not report {target.metric}; it offers: {offered}"
                        + ("; use target: {metric, mode, value} with one of them" if shorthand else ""))
    if m.mode != target.mode:
        raise UserError(f"key 'target.mode': {target.metric} is better when {'higher' if m.mode == 'max' else 'lower'}"
                        f", so its mode is '{m.mode}', got '{target.mode}'; set mode: {m.mode} "
                        f"(workload '{workload}' offers: {offered})")
    worst, best = (m.low, m.high) if m.mode == "max" else (m.high, m.low)
    beyond_best = target.value > m.high if m.mode == "max" else target.value < m.low
    at_or_beyond_worst = target.value <= m.low if m.mode == "max" else target.value >= m.high
    if beyond_best or at_or_beyond_worst:
        why = "can never be met" if beyond_best else "is met by any run"
        raise UserError(f"key '{'target_accuracy' if shorthand else 'target.value'}': {target.metric} takes values "
                        f"in [{m.low:g}, {m.high:g}], so a target of {target.value:g} {why}; pick a value between "
                        f"{worst:g} and {best:g} (workload '{workload}' offers: {offered})")
