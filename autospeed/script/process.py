"""The ties of a user's script process to autospeed (autospeed.script.context uses them): the data-parallel
group a torchrun-style start asks it to join and the device each worker takes; dying with the process that
runs it; an exception that ends the script recorded as the run's result."""

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


def device_for(recipe: Recipe, replicas: Replicas | None) -> torch.device:
    device = pick_device(recipe)
    if device.type == "cuda" and replicas is not None:
        local = int(os.environ.get("LOCAL_RANK", replicas.rank))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return device


def join_process_group(workers: int) -> Replicas | None:
    """torchrun-style: the runner starts `workers` copies with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."""
    if workers == 1:
        return None
    import torch.distributed as dist

    if not dist.is_initialized():
        if "RANK" not in os.environ:
            raise RuntimeError(f"the recipe asks for workers: {workers}; run the script through autospeed "
                               f"(`autospeed train --script ...`) or torchrun, which start the workers, or set "
                               f"workers: 1")
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("AUTOSPEED_DEVICE") != "cpu" else "gloo"
        dist.init_process_group(backend=backend)
    return Replicas.joined(workers)


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
