"""One training step's knobs, implemented once for the built-in trainer and for a user's own loop
(autospeed.script.context): the train clock, the forward pass's context (autocast in the recipe's
precision, the attention backend pinned), the backward pass (fp16 gradient scaling, the mean over
accumulated micro-batches) and the optimizer step (scaler, zero_grad, the LR schedules). torch only.

The hot path pays only for the knobs in use: no autocast context in fp32/tf32 and no loss division
without accumulation (experiments/trainer_overhead.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

from autospeed.train.applied import Applied
from autospeed.train.setup import AttentionKnob, autocast_dtype, autocast_name


class Clock:
    """Train clock: runs only while training; syncs CUDA before every reading. `total` may start above
    zero (train seconds an earlier out-of-memory attempt already spent)."""

    def __init__(self, device: torch.device, total: float = 0.0):
        self.device = device
        self.total = total
        self.started: float | None = None

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the run's GPU (cuda:N), not the current one
        elif self.device.type == "mps":
            torch.mps.synchronize()
        return time.perf_counter()

    @property
    def running(self) -> bool:
        return self.started is not None

    def start(self) -> None:
        self.started = self._now()

    def stop(self) -> float:
        self.total += self._now() - self.started
        self.started = None
        return self.total

    def peek(self) -> float:
        """Approximate running total without a sync (for the budget check each step)."""
        return self.total + (time.perf_counter() - self.started if self.started is not None else 0.0)


def forward_context(recipe, device: torch.device, applied: Applied) -> tuple[Callable, AttentionKnob]:
    """The training forward pass's context factory: autocast in the recipe's precision (nothing in fp32/tf32)
    with the recipe's attention backend pinned (nothing for `auto`); and the attention knob, whose
    `evaluation()` context the evaluation uses."""
    dtype = autocast_dtype(recipe.precision)
    attention = AttentionKnob(recipe, device, dtype, applied)
    applied["autocast"] = autocast_name(recipe.precision)
    if dtype is None and not attention.pinned:
        return contextlib.nullcontext, attention
    if not attention.pinned:
        return (lambda: torch.autocast(device.type, dtype=dtype)), attention

    @contextlib.contextmanager
    def both():
        with (torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()), \
                attention():
            yield

    return both, attention


def autocast_only(recipe, device: torch.device) -> Callable:
    """Autocast in the recipe's precision alone (the evaluation's; nothing in fp32/tf32)."""
    dtype = autocast_dtype(recipe.precision)
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)


class Stepper:
    """The backward pass and the optimizer step of a recipe trained in micro-batches of `accumulation`."""

    def __init__(self, recipe, device: torch.device, applied: Applied, accumulation: int):
        self.scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
        applied["grad_scaler"] = recipe.precision == "fp16"
        self.k = accumulation
        self.micro_batches = 0  # counted by next_micro_batch

    def next_micro_batch(self, ddp=None) -> bool:
        """Count the micro-batch about to run; True when it is its step's last. Under DDP only that one
        all-reduces the gradients (what DDP's no_sync() sets): the ones before accumulate locally. Accumulation
        under data parallelism this one way, in the trainer and in a user's script alike."""
        self.micro_batches += 1
        last = self.micro_batches % self.k == 0
        if ddp is not None:
            ddp.require_backward_grad_sync = last
        return last

    def backward(self, loss: torch.Tensor) -> None:
        """Mean over micro-batches: k passes of B give the same update as one of B*k."""
        self.scaler.scale(loss / self.k if self.k > 1 else loss).backward()

    def step(self, optimizers, schedulers=()) -> None:
        """Every optimizer steps (through the scaler), gradients are freed, then every schedule steps."""
        for optimizer in optimizers:
            self.scaler.step(optimizer)
        self.scaler.update()
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        for scheduler in schedulers:
            scheduler.step()


class InForwardContext(torch.nn.Module):
    """The training model with its forward run in the run's forward context (autocast, attention); floating
    outputs come back in fp32. A wrapper, not a patch: `model` itself (and an EMA/SWA copy of it) stays as is."""

    def __init__(self, inner: torch.nn.Module, context, fp32_outputs: bool = True):
        super().__init__()
        self.inner = inner
        self._context = context
        self._fp32_outputs = fp32_outputs  # False: outputs as autocast left them (no fp32 copy of big logits)

    def forward(self, *args, **kwargs):
        with self._context():
            out = self.inner(*args, **kwargs)
        return _to_fp32(out) if self._fp32_outputs else out

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:  # the model's own attributes and methods
            return getattr(self.inner, name)


def _to_fp32(out):
    if isinstance(out, torch.Tensor):
        return out.float() if out.dtype in (torch.float16, torch.bfloat16) else out
    if isinstance(out, (list, tuple)):
        return type(out)(_to_fp32(o) for o in out)
    if isinstance(out, dict):
        return {k: _to_fp32(v) for k, v in out.items()}
    return out
