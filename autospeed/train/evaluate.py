"""Evaluation, off the train clock: every metric the workload reports, in eval mode without
gradients; under data parallelism rank 0 evaluates and every worker gets its values."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from autospeed.workloads import Workload


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def evaluate_classifier(model: nn.Module, batches) -> dict[str, float]:
    """The default evaluation: top-1 `val_accuracy` and mean cross-entropy `val_loss` (nats per example)."""
    correct = loss_sum = None
    count = 0
    for x, y in batches:
        logits = model(x)
        hits = (logits.argmax(1) == y).sum()
        nats = F.cross_entropy(logits.float(), y, reduction="sum")
        correct = hits if correct is None else correct + hits  # summed on the device: one sync at the end
        loss_sum = nats if loss_sum is None else loss_sum + nats
        count += len(y)
    return {"val_accuracy": correct.item() / count, "val_loss": loss_sum.item() / count}


class EvaluationOutOfMemory(RuntimeError):
    """Out of memory in evaluation: a smaller training micro-batch would not help."""


def _evaluate(workload: Workload, eval_model: nn.Module, val_batches, autocast, attention) -> dict[str, float]:
    """Every metric the workload reports, in eval mode without gradients, off the train clock."""
    evaluate = workload.evaluate or evaluate_classifier
    was_training = eval_model.training
    eval_model.eval()
    try:
        with torch.no_grad(), autocast(), attention():
            values = {k: float(v) for k, v in dict(evaluate(eval_model, val_batches)).items()}
    except Exception as e:
        if is_oom(e):
            raise EvaluationOutOfMemory(f"out of memory in evaluation: {e}") from e
        raise
    finally:
        eval_model.train(was_training)
    missing = [k for k in workload.metrics if k not in values]
    if missing:
        raise ValueError(f"workload {workload.name!r}: evaluate() returned {sorted(values)} but the workload's "
                         f"metrics also name {missing}; return every metric it declares")
    return values


def better(mode: str, a: float | None, b: float) -> float:
    if a is None or not math.isfinite(a):
        return b
    if not math.isfinite(b):
        return a
    return max(a, b) if mode == "max" else min(a, b)


def evaluate_once(workload, eval_model, val_batches, autocast, attention, replicas) -> dict[str, float]:
    """Every metric the workload reports: evaluated by rank 0 alone and handed to every worker (its
    failure too), so all workers decide the same."""
    if replicas is None:
        return _evaluate(workload, eval_model, val_batches, autocast, attention)
    values: dict[str, float] | Exception | None = None
    if replicas.leader:
        try:
            values = _evaluate(workload, eval_model, val_batches, autocast, attention)
        except Exception as e:  # the other workers must not wait for values that never come
            values = e
    values = replicas.from_leader(values)
    if isinstance(values, Exception):
        raise values
    return values
