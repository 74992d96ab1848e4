"""Data-parallel training inside one run: this process's place among the run's workers.

A recipe with `workers: N` trains on N processes that Ray Train's TorchTrainer starts with a
torch.distributed process group already set up (gloo on CPU, NCCL on GPUs). Every worker holds
the same model; DistributedDataParallel averages the gradients, so N workers of micro-batch B
make the same update as one worker with batch N x B (for models without batch-dependent
layers). Rank 0 evaluates and its train clock is the run's. The workers agree on every decision
that ends the run (budget, target, divergence), so none is left waiting in a collective the
others have left. torch only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Replicas:
    """This process's rank among `world_size` workers, and a gloo group for host-side agreement
    (None: the default group, already gloo on CPU)."""

    rank: int
    world_size: int
    host_group: Any = None

    @classmethod
    def joined(cls, workers: int) -> "Replicas | None":
        """The process group this process is in, for a recipe of `workers` workers; None for one
        worker (no process group, the plain single-process path) unless the process is in a group of
        one (one Ray Train worker: DDP over its group of one, how experiments/gpu_checks.sh checks NCCL
        DDP on a single GPU)."""
        in_group = dist.is_available() and dist.is_initialized()
        if workers == 1 and not (in_group and dist.get_world_size() == 1):
            return None
        if not in_group:
            raise RuntimeError(f"the recipe asks for workers: {workers} but this process is in no torch.distributed "
                               f"process group; train it with `autospeed train`, which starts the workers through "
                               f"Ray Train, or set workers: 1")
        if dist.get_world_size() != workers:
            raise RuntimeError(f"the recipe asks for workers: {workers} but the process group has "
                               f"{dist.get_world_size()} processes")
        # NCCL reduces device tensors only; budget and evaluation agreement is host-side: a gloo group
        # agrees on them without waiting for the GPU.
        host_group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return cls(dist.get_rank(), dist.get_world_size(), host_group)

    @property
    def leader(self) -> bool:
        """Rank 0: it evaluates, and its clock and reports are the run's."""
        return self.rank == 0

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """The model under DDP: gradients averaged over the workers in the backward pass."""
        return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)

    def any(self, flag: bool) -> bool:
        """True on every worker when it is true on any (e.g. one worker's clock ran out of budget)."""
        box = torch.tensor([int(flag)])
        dist.all_reduce(box, op=dist.ReduceOp.MAX, group=self.host_group)
        return bool(box.item())

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of `value` over the workers (summed in place, on the value's own device)."""
        dist.all_reduce(value)
        return value / self.world_size

    def from_leader(self, obj: Any) -> Any:
        """Rank 0's `obj` on every worker (what the others pass is ignored)."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.host_group)
        return box[0]


def ddp_of(model: nn.Module) -> DistributedDataParallel | None:
    """The DistributedDataParallel module a training model is (also under torch.compile, which wraps it), or None.
    Its `require_backward_grad_sync` (what DDP's no_sync() sets) says whether the next micro-batch's backward
    all-reduces the gradients: only a step's last one need, under accumulation."""
    model = getattr(model, "_orig_mod", model)
    return model if isinstance(model, DistributedDataParallel) else None
