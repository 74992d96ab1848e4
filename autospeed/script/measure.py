"""A measured run of a user's loop: the probe's timing and the maths-neutrality check's loss trace (docs/design.md
"Probe stage"), through the script's own steps.

The search asks for one by the channel's MEASURE variable (autospeed.script.channel): `marks`, the optimizer steps
at which the context reads the train clock (stopped, so synced on a GPU) and sends it to the runner as an
evaluation event with no metrics (its step, samples and train seconds, and with `loss` the mean train loss of
ctx.backward over the steps since the previous mark); the run ends at the last mark (the context sends its result
and the process exits, as the preflight does after its first step). In a measured run the script's own evaluations
are not asked for (`ctx.should_eval()` is False) and its reports are not sent: its evaluation may cost more than
the steps timed. The loss is summed on the device and read once per mark: a run that is not measured keeps no
loss and adds no sync. A loop that never calls ctx.step() cannot be measured: its 65th micro-batch without a step
(MICRO_BATCHES_PER_STEP_AT_MOST), or its end before the last mark, is the run's error, said in one line.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import asdict
from typing import Any

import torch

from autospeed.script import channel

# a loop that accumulates on its own (not through ctx.config.accumulation_steps, 1 in a probe) calls ctx.step() after
# its own count of micro-batches: up to this many pass before a measured run says that it never calls it
MICRO_BATCHES_PER_STEP_AT_MOST = 64
NEVER_STEPPED = ("autospeed: the script's loop never called ctx.step(), so its optimizer steps cannot be counted or "
                 "timed; call ctx.step(opt) where it steps its optimizer")


class Measure:
    """What a measured run sends (module docstring); one per context, None for every other run."""

    def __init__(self, marks: list[int], loss: bool):
        self.marks, self.loss = sorted(set(marks)), loss
        self._sum: torch.Tensor | None = None  # the losses since the previous mark, on the device
        self._count = 0

    @classmethod
    def from_env(cls) -> Measure | None:
        if channel.MEASURE not in os.environ:
            return None
        asked: dict[str, Any] = json.loads(os.environ[channel.MEASURE])
        return cls([int(m) for m in asked["marks"]], bool(asked.get("loss")))

    @property
    def last(self) -> int:
        return self.marks[-1]

    def add_loss(self, loss: torch.Tensor) -> None:
        """One micro-batch's loss (as the step's mean counts it), kept only when the trace asks for it."""
        if not self.loss:
            return
        value = loss.detach().float()
        self._sum = value if self._sum is None else self._sum + value
        self._count += 1

    def check_stepping(self, ctx) -> None:
        """At each micro-batch: more micro-batches than any one step takes and still no optimizer step means the
        loop never calls ctx.step(), which counts the steps measured."""
        most = max(MICRO_BATCHES_PER_STEP_AT_MOST, ctx.config.accumulation_steps)
        if ctx.step_count == 0 and ctx._stepper_for().micro_batches > most:
            raise RuntimeError(NEVER_STEPPED)

    def stepped(self, ctx) -> None:
        """After each optimizer step: at a mark, the clock and the loss go to the runner; at the last, the run ends."""
        if ctx.step_count not in self.marks:
            return
        if ctx.clock.running:
            ctx.clock.stop()  # synced: the steps so far are on the clock, done
        loss = math.nan if self._sum is None else float(self._sum.item()) / self._count
        self._sum, self._count = None, 0
        event = ctx.record.evaluation({}, loss)
        if ctx.side is not None:
            ctx.side.ask("eval", event=asdict(event))
        if ctx.step_count == self.last:
            ctx.finish()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def ended_early(self, steps: int) -> str:
        """The error of a measured run whose script ended before the last mark."""
        if steps == 0:
            return NEVER_STEPPED
        return (f"the script ended after {steps} optimizer steps, before the {self.last} this measurement needs "
                f"(its own step count or data ran out: give it more steps, or lower probe.warmup_steps + "
                f"probe.steps / probe.neutrality.steps)")

