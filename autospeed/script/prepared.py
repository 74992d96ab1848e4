"""What `ctx.prepare(...)` hands back for a script's own objects (autospeed.script.context's Context.prepare), so
that `model, opt, loader, sched = ctx.prepare(model, opt, loader, sched)` rebinds the script's names and the
script goes on as written (Accelerate's `prepare`):

  * the model: its forward in the run's autocast, its `state_dict()` / `load_state_dict()` the script's own
    module's (no wrapper prefix: the script's checkpoint files keep their keys);
  * the loaders: the training loader is the one that shuffles, or where none does, the first one given (a CPU
    loader that does not shuffle is still the one the script trains on); it is rebuilt with the batch size and
    the loader knobs, its own shuffling, sampler order and collate_fn kept; any other is an evaluation loader,
    returned as it is;
  * the optimizer: the same object, its parameter groups kept, switched to the recipe's implementation in place,
    its groups at the script's own default lr moved to the run's peak;
  * the scheduler: under `schedule: script` the script's own, stepped by the script where it steps it (per
    epoch, per step), as with Accelerate; under a searched schedule a stand-in whose `step()` does nothing, the
    recipe's scheduler being stepped by `ctx.step()` at each optimizer step.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler

from autospeed.train.applied import NOT_APPLICABLE
from autospeed.train.step import InForwardContext


class PreparedModel(InForwardContext):
    """The training model (autocast, compile, DDP as the recipe asks) whose checkpoint is the script's module's:
    `state_dict()` and `load_state_dict()` act on the eager module, keys as the script saved them before."""

    def __init__(self, inner: torch.nn.Module, context, fp32_outputs: bool, eager: torch.nn.Module):
        super().__init__(inner, context, fp32_outputs)
        self.__dict__["_eager"] = eager  # not a submodule: its parameters are the inner model's already

    def state_dict(self, *args, **kwargs):
        return self._eager.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self._eager.load_state_dict(state_dict, strict=strict, assign=assign)


class RecipeSchedule:
    """A searched schedule standing in for the script's own scheduler: `ctx.step()` steps the recipe's scheduler
    at each optimizer step, so the script's own `sched.step()` (per epoch, say) does nothing; the rest (get_last_lr,
    state_dict, ...) is the recipe's scheduler's."""

    def __init__(self, schedule):
        self.__dict__["_schedule"] = schedule

    def step(self, *args, **kwargs) -> None:
        """Nothing: ctx.step() steps the recipe's schedule at each optimizer step."""

    def __getattr__(self, name: str):
        return getattr(self._schedule, name)


def training_loader(objects, known: bool) -> DataLoader | None:
    """Which of a `ctx.prepare` call's DataLoaders trains: the one that shuffles; where none does and no training
    loader is known yet, the first one given."""
    loaders = [o for o in objects if isinstance(o, DataLoader)]
    shuffled = next((o for o in loaders if isinstance(o.sampler, RandomSampler)), None)
    if shuffled is not None:
        return shuffled
    return loaders[0] if loaders and not known else None


def peak_for_adopted(groups: list[dict[str, Any]], script_lr: float | None, peak: float) -> bool:
    """An optimizer built before the script read `ctx.lr()`: its groups at the script's own default lr take the
    run's peak (a searched lr reaches it; run alone the same value). True when a group's lr moved."""
    if script_lr is None or peak == script_lr:
        return False
    moved = False
    for group in groups:
        if group.get("lr") == script_lr:
            group["lr"] = peak
            if "initial_lr" in group:  # a scheduler was built on it already
                group["initial_lr"] = peak
            moved = True
    return moved


def follow_moved_lr(scheduler) -> None:
    """A script's scheduler built on an optimizer whose lr the context moved (peak_for_adopted): its base LRs
    follow."""
    groups = scheduler.optimizer.param_groups
    scheduler.base_lrs = [g.get("initial_lr", g["lr"]) for g in groups]


def warn_unstepped(schedulers: list[tuple[Any, int]], steps: int, steps_per_epoch: int | None) -> None:
    """A scheduler of the script's own, given to ctx.prepare, that nothing stepped in a run past its first epoch
    (a per-epoch scheduler is stepped by then; a run that met its target within the first epoch says nothing):
    the script relied on ctx.step() to step it. Said once, with the fix."""
    if steps < 2 or steps_per_epoch is None or steps <= steps_per_epoch:
        return
    for scheduler, at_start in schedulers:
        if scheduler.last_epoch == at_start:
            print(f"autospeed: warning: your {type(scheduler).__name__} (given to ctx.prepare) was never stepped "
                  f"in {steps} optimizer steps, so its LR stayed where it began; step it where your script did "
                  f"(sched.step(), per epoch or per step: ctx.step() steps only a schedule autospeed builds), or "
                  f"pass it to ctx.step(opt, sched) to step it at each optimizer step", file=sys.stderr, flush=True)


def groups_of(params) -> list[dict[str, Any]]:
    """Parameter groups as dicts ([] for a plain iterable of parameters, passed through as given)."""
    if params is None:
        return []
    params = list(params)
    return params if params and isinstance(params[0], dict) else [{"params": params}]


def set_impl(optimizer: torch.optim.Optimizer, impl: str) -> str:
    """The optimizer switched to torch's `impl` kernels in place (its groups and defaults: what torch reads at
    each step); what acted: impl, or not_applicable for an optimizer without that switch."""
    if impl == "default":
        return impl
    if impl not in optimizer.defaults and impl not in inspect.signature(type(optimizer)).parameters:
        return NOT_APPLICABLE
    other = "foreach" if impl == "fused" else "fused"
    for settings in (optimizer.defaults, *optimizer.param_groups):
        settings[impl] = True
        if settings.get(other):
            settings[other] = False
    return impl
