"""A cooldown branch: what a run of this length would reach had its LR decayed now (docs/design.md "Long jobs";
issue 43; Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations").

A wsd trial cut at its budget is still in its stable phase: its metric there says little of what its decay would
give. At the cut (and, with `each_evaluation`, at every stable-phase evaluation) the trainer branches:

  1. a snapshot of the model's weights and buffers, every optimizer's state and LR, the fp16 gradient scaler and
     the RNG (torch's fork_rng);
  2. `fraction` x the optimizer steps so far, the LR falling linearly from where it is to 0 (the first step at the
     current LR, the last at 1/n of it: torch's LinearLR to 0), on micro-batches in an order of the branch's own
     (train.data.Batches.branch: the run's own order is not drawn from);
  3. one evaluation: every metric the workload reports (`cooldown_<metric>`), with `cooldown_steps` and
     `cooldown_seconds` (the branch's seconds, snapshot and evaluation included, off the train clock: exploration
     cost, in the trial's wall seconds, never in its TTA);
  4. the snapshot restored: the trial goes on with the same weights, optimizer state, schedule, RNG and data order
     as without the branch (tests/train/test_cooldown.py checks its curve bit for bit).

A branch that fails (out of memory, any error) is restored the same way and leaves no measurement: the trial then
ranks with the typical decay factor (autospeed.horizon). One worker only: under data parallelism every worker
would have to branch in step. torch only (the metric names from autospeed.track.names, which imports nothing).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from autospeed.track.names import M_COOLDOWN_PREFIX as PREFIX
from autospeed.track.names import M_COOLDOWN_SECONDS as SECONDS
from autospeed.track.names import M_COOLDOWN_STEPS as STEPS
from autospeed.train.run_record import failure
from autospeed.train.step import Clock, Stepper


@dataclass(frozen=True)
class Cooldown:
    """When a trial branches and for how long (the space file's `predict.cooldown_*`)."""

    fraction: float  # of the optimizer steps so far: the branch's length
    each_evaluation: bool = False  # else at the cut only (the evaluation that ends the run on its budget)

    def wanted(self, steps: int, decay_start_step: int, cut: bool) -> bool:
        """Whether to branch at an evaluation after `steps`: in the stable phase, at the cut or at every one."""
        return self.fraction > 0 and 0 < steps < decay_start_step and (cut or self.each_evaluation)

    def steps(self, steps_so_far: int) -> int:
        return max(1, round(self.fraction * steps_so_far))


class _Snapshot:
    """The trained state a branch changes: weights and buffers, optimizer states (their LRs included), the gradient
    scaler. Copies, restored in place through torch's own load_state_dict."""

    def __init__(self, model: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer], stepper: Stepper):
        self.model, self.optimizers, self.scaler = model, optimizers, stepper.scaler
        self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.states = [copy.deepcopy(o.state_dict()) for o in optimizers]
        self.scale = self.scaler.state_dict()

    def restore(self) -> None:
        self.model.load_state_dict(self.weights)
        for optimizer, state in zip(self.optimizers, self.states):
            optimizer.load_state_dict(state)
            optimizer.zero_grad(set_to_none=True)
        if self.scale:  # empty when the scaler is off (not fp16)
            self.scaler.load_state_dict(self.scale)


def branch(cooldown: Cooldown, steps_so_far: int, *, model: torch.nn.Module,
           optimizers: Sequence[torch.optim.Optimizer], stepper: Stepper, micro_batches: Iterator[Any],
           backward: Callable[[Any], torch.Tensor], evaluate: Callable[[], dict[str, float]],
           device: torch.device) -> dict[str, float] | str:
    """One cooldown branch from the run's present state (module docstring), the run restored after it. `model`: the
    module whose state_dict holds every trained tensor; `backward(batch)`: one micro-batch's forward and backward
    pass as the run does it; `evaluate()`: the run's evaluation. Returns the branch's fields (cooldown_<metric>,
    cooldown_steps, cooldown_seconds), or the error that ended it, as one line."""
    n = cooldown.steps(steps_so_far)
    clock = Clock(device)
    clock.start()
    snapshot = _Snapshot(model, optimizers, stepper)
    peaks = [[group["lr"] for group in o.param_groups] for o in optimizers]
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for i in range(n):
                for optimizer, lrs in zip(optimizers, peaks):
                    for group, lr in zip(optimizer.param_groups, lrs):
                        group["lr"] = lr * (1.0 - i / n)
                for _ in range(stepper.k):
                    backward(next(micro_batches))
                stepper.step(optimizers)  # no schedule steps: the run's own are untouched
            values = evaluate()
        return {**{f"{PREFIX}{k}": v for k, v in values.items()}, STEPS: float(n), SECONDS: clock.stop()}
    except Exception as e:  # a measurement that failed leaves the run as it was, and says why
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return failure(e)[1][:200]
    finally:
        snapshot.restore()

