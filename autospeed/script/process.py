"""The ties of a user's script process to autospeed (autospeed.script.context uses them): the data-parallel
group a torchrun-style start asks it to join (the script's own, where it makes one) and the device each worker
takes; dying with the process that runs it; an exception that ends the script recorded as the run's result."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

import torch

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.train.distributed import Replicas
from autospeed.train.run_record import failure
from autospeed.train.setup import pick_device


def device_for(recipe: Recipe) -> torch.device:
    """The device the script trains on: the recipe's, as the script named it (autospeed.train.setup.pick_device:
    cuda:1 stays cuda:1, mps stays mps); a data-parallel worker on CUDA takes the GPU of its LOCAL_RANK, as torchrun
    scripts do. A CUDA device with an index is made current."""
    device = pick_device(recipe)
    if device.type == "cuda" and recipe.workers > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0))))
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    return device


class WorkerGroup:
    """The run's data-parallel process group, joined at its first use. A torchrun-style script makes the group
    itself (`init_process_group()` from the environment), often after `autospeed.init`: the context then joins the
    script's group instead of making a second one, which torch refuses. Where the script makes none by then, the
    context makes it, from the same environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: autospeed's runner
    sets them as torchrun does). `scripts_own`: the script made it, so the script wraps its model in DDP itself."""

    def __init__(self, workers: int, device: torch.device):
        self.workers, self.device = workers, device
        self._replicas: Replicas | None = None
        self._joined = workers == 1  # one worker: no group (run alone under torchrun too: the script's own)
        self.scripts_own = False

    @property
    def rank(self) -> int:
        """This process's rank, read from the environment until the group is joined (so asking never joins)."""
        if not self._joined:
            return int(os.environ.get("RANK", 0))
        return self._replicas.rank if self._replicas else 0

    def replicas(self) -> Replicas | None:
        if not self._joined:
            self._replicas, self.scripts_own = join_process_group(self.workers, self.device)
            self._joined = True
        return self._replicas


def join_process_group(workers: int, device: torch.device) -> tuple[Replicas | None, bool]:
    """(this process's replicas, whether the script made the group). torchrun-style: the runner starts `workers`
    copies with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; NCCL on CUDA, gloo elsewhere."""
    import torch.distributed as dist

    scripts_own = dist.is_initialized()
    if not scripts_own:
        if "RANK" not in os.environ:
            raise RuntimeError(f"the recipe asks for workers: {workers}; run the script through autospeed "
                               f"(`autospeed train --script ...`) or torchrun, which start the workers, or set "
                               f"workers: 1")
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Replicas.joined(workers), scripts_own


def die_with_parent() -> None:
    """Linux: this process is killed when the runner dies (a trial ASHA stopped, a killed search). Where there is
    no libc prctl (not Linux), the runner's own clean-up ends it instead."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    parent = os.environ.get("AUTOSPEED_PARENT_PID")
    if parent and os.getppid() != int(parent):  # the runner died before the line above
        os._exit(1)


def watch_for_crash(ctx) -> None:
    """An exception that ends the script ends the run as failed (oom for out of memory) with its message;
    a script that returns without a stopping report ends it with the status so far (not reached)."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if not ctx.finished:
            status, error = failure(value)
            ctx.applied["oom_in_evaluation"] = status == Status.OOM and ctx._eval_failed
            ctx.finish(status, error)
        previous(kind, value, tb)

    sys.excepthook = hook
    atexit.register(lambda: ctx.finish())
