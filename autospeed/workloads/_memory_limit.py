"""The simulated memory limit: workload option `max_micro_batch`, which every workload takes (built-in or
plugin; the factory never sees it). A training forward pass over the limit raises torch.OutOfMemoryError, as
a full GPU would, so a search on a CPU can contain batch sizes that do not fit (docs/knobs.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from autospeed.errors import UserError
from autospeed.workloads.base import Workload

MAX_MICRO_BATCH = "max_micro_batch"


def check_memory_limit(options: dict[str, Any]) -> None:
    """Reject a `max_micro_batch` that is not a whole number of samples >= 1."""
    limit = options.get(MAX_MICRO_BATCH)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise UserError(f"workload_options.{MAX_MICRO_BATCH}: must be an int >= 1 (samples per training forward "
                        f"pass that fit in the simulated memory), got {limit!r}")


def with_memory_limit(workload: Workload, max_micro_batch: int) -> Workload:
    """The workload with a simulated memory limit (workload option `max_micro_batch`): its model raises
    torch.OutOfMemoryError, as a full GPU would, on a training forward pass of more than `max_micro_batch`
    samples. Lets a search on a CPU contain batch sizes that do not fit; evaluation is not limited."""
    build = workload.build_model

    def too_big(module: nn.Module, args: tuple) -> None:
        samples = args[0].shape[0] if args and isinstance(args[0], torch.Tensor) else 0
        if module.training and torch.is_grad_enabled() and samples > max_micro_batch:
            raise torch.OutOfMemoryError(f"simulated out of memory: a training pass of {samples} samples, "
                                         f"room for {max_micro_batch} (workload option max_micro_batch)")

    def build_limited() -> nn.Module:
        model = build()
        model.register_forward_pre_hook(too_big)
        return model

    return dataclasses.replace(workload, build_model=build_limited)

