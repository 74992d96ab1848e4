"""The stepping of a user's loop (a part of autospeed.script.context's Context): where a step's micro-batches
end, the backward pass, clipping, the optimizer step, and when an evaluation is due.

A step's last micro-batch (`ctx.boundary`) is known whatever the batches come from:
  * `for batch in ctx.steps(loader)` / `ctx.epoch(loader)` / `ctx.steps(get_batch)` (a function that returns
    one batch): each batch out of the iterator is one micro-batch;
  * `with ctx.accumulate(model):` around each micro-batch's forward and backward (Accelerate's name): the
    block is one micro-batch, and DDP syncs gradients only in a step's last one;
  * neither (a `while True` loop with its own `get_batch`): each `ctx.backward(loss)` is one micro-batch.
`ctx.step()` then steps on the `accumulation_steps`-th; before any micro-batch it raises, naming the fix.
The train clock runs from a batch out of the iterator, or (other sources) from the training forward in
`ctx.autocast()`, `ctx.accumulate()` or `ctx.backward()`, until `ctx.paused()` or `ctx.report()`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
from typing import Any, Iterable, Iterator

import torch

from autospeed.train.data import to_device
from autospeed.train.distributed import ddp_of
from autospeed.train.step import Stepper, forward_context

LOADER, ACCUMULATE, BACKWARD = "loader", "accumulate", "backward"  # where a step's micro-batches are counted


class ReusableContext:
    """One context object the script may keep and enter again and again (`fwd = ctx.autocast()`, then `with
    fwd:` each step), as torch.autocast allows: each entry opens a fresh inner context (autocast, the attention
    backend pinned)."""

    def __init__(self, factory, on_enter):
        self._factory, self._on_enter = factory, on_enter
        self._open: list[Any] = []

    def __enter__(self):
        self._on_enter()
        inner = self._factory()
        self._open.append(inner)
        return inner.__enter__()

    def __exit__(self, *exc):
        return self._open.pop().__exit__(*exc)


class ScalerView:
    """torch.amp.GradScaler's interface over a context's stepping (Stepping.grad_scaler)."""

    def __init__(self, ctx: Stepping):
        self._ctx = ctx

    def scale(self, outputs):
        self._ctx._micro_batch()
        if self._ctx.measure is not None:  # the loop divided it by its accumulation steps: the trace's mean undoes it
            self._ctx.measure.add_loss(outputs * self._ctx.config.accumulation_steps)
        return self._ctx._stepper_for().scaler.scale(outputs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        ctx = self._ctx
        if ctx.boundary and ctx._stepper_for().scaler.is_enabled() and id(optimizer) not in ctx._unscaled:
            ctx._stepper_for().scaler.unscale_(optimizer)
            ctx._unscaled.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer, *args, **kwargs) -> None:
        self._ctx.step(optimizer)

    def update(self, new_scale=None) -> None:
        """Nothing to do: ctx.step updated the scale at the step's last micro-batch (train/step.py)."""

    def __getattr__(self, name: str):  # is_enabled, get_scale, state_dict, ...: the context's scaler
        return getattr(self._ctx._stepper_for().scaler, name)


class Stepping:
    """The stepping half of Context (its attributes are set by Context.__init__)."""

    # ---- batches ----
    def steps(self, source: Iterable | Any = None) -> Iterator[Any]:
        """The training micro-batches of the recipe's `epochs` (the whole run), on the device (channels_last
        where it acts): from a loader (default: the training loader) or a function returning one batch
        (`ctx.steps(lambda: get_batch("train"))`, endless: the run ends at its budget, its target or the
        loop's own break). Sets `ctx.boundary` on a step's last micro-batch; the train clock runs while a
        batch is out and stops when the loop leaves this iterator."""
        return self._batches(source, epochs=None)

    def epoch(self, loader: Iterable | None = None) -> Iterator[Any]:
        """One pass over the training loader (for a loop that keeps its own `for epoch in ...`): as `steps`,
        ending at the epoch's end, or earlier where the recipe's epochs run out."""
        if callable(loader) and not hasattr(loader, "__iter__"):
            raise TypeError("autospeed: ctx.epoch() takes a loader; a batch function has no epochs: loop over "
                            "ctx.steps(get_batch) instead")
        return self._batches(loader, epochs=1)

    def _batches(self, source, epochs: int | None) -> Iterator[Any]:
        source = self._train_loader if source is None else source
        if source is None:
            raise RuntimeError("autospeed: ctx.steps() has no batches: pass a loader or a batch function "
                               "(ctx.steps(loader), ctx.steps(get_batch)), or build the training loader with "
                               "ctx.dataloader(train_dataset) first")
        self._source = LOADER
        k = self.config.accumulation_steps
        if callable(source) and not hasattr(source, "__iter__"):  # a batch function: endless micro-batches
            yield from self._serve(iter(source, object()))
            return
        if len(source) == 0:  # drop_last with fewer samples than a batch: no epoch would ever take a step
            size = getattr(source, "batch_size", None)
            raise RuntimeError(f"autospeed: the training loader gives no batch: its batch_size {size} exceeds its "
                               f"{_samples(source)}; lower batch_size")
        per_epoch = max(1, len(source) // k)
        if self.steps_per_epoch is None or source is not self._train_loader:
            self.steps_per_epoch = per_epoch
        self._total_steps_or_none()  # epochs and the evaluation cadence are read here, before the first step
        self._eval_every_steps()
        sampler = getattr(source, "sampler", None)
        for _ in itertools.count() if epochs is None else range(epochs):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self._epochs_started)
            self._epochs_started += 1
            # a whole pass runs the loader to its end, as `for batch in loader` does (its sampler then draws
            # the next epoch's order from the same random state); a pass cut at whole steps stops early
            whole = per_epoch * k >= len(source)
            yield from self._serve(iter(source if whole else itertools.islice(source, per_epoch * k)))
            if self.finished or self._run_out():
                return

    def _serve(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Hand out micro-batches on the device. The fetch is on the train clock, as in the built-in trainer: a
        loader's start at each epoch (worker processes spawned again unless persistent) and each batch after a
        pause (an evaluation) are paid for. The clock stops when the loop leaves."""
        ddp = self._ddp()
        non_blocking = bool(self.applied.get("pin_memory"))
        try:
            while True:
                if not self.clock.running:
                    self.clock.start()
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                batch = self._layout(to_device(batch, self.device, non_blocking))
                self._next_micro(ddp)
                yield batch
                if self.finished or self._run_out():
                    return
        finally:  # the loop left: whatever follows (an epoch's evaluation) is off the train clock
            if self.clock.running:
                self.clock.stop()

    def _next_micro(self, ddp) -> None:
        self.boundary = self._stepper_for().next_micro_batch(ddp)  # under DDP, a step's last all-reduces
        if self.measure is not None:
            self.measure.check_stepping(self)

    def _run_out(self) -> bool:
        total = self._total_steps_or_none()
        return total is not None and self.step_count >= total

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module | None = None):
        """One micro-batch's forward and backward, for a loop whose batches come from elsewhere (Accelerate's
        `accumulate`): `ctx.boundary` is set for it, and under DDP the gradients sync only in a step's last."""
        if self._source != LOADER:
            self._source = ACCUMULATE
            self._training_work()
            self._next_micro(self._ddp())
        yield

    # ---- the forward and backward passes ----
    def autocast(self) -> ReusableContext:
        """The training forward pass's context: autocast in the recipe's precision, the attention backend
        pinned. One object, entered as often as the script likes (keep it, or call ctx.autocast() each time)."""
        if self._forward is None:
            factory, self._attention = forward_context(self.config, self.device, self.applied)
            if self._autocast_precision is not None:
                self.applied["precision"] = self._autocast_precision
            self._forward = ReusableContext(factory, self._forward_entered)
        return self._forward

    def _forward_entered(self) -> None:
        if torch.is_grad_enabled():  # a training forward (an evaluation runs under no_grad or paused)
            self._training_work()
        elif self._evaluating():  # an evaluation in the script's own loop: off the train clock, as in ctx.paused()
            self.clock.stop()

    def _evaluating(self) -> bool:
        """A forward without gradients, the model in eval mode (or none prepared), with batches not from
        ctx.steps / ctx.epoch (whose clock runs while a batch is out): the script evaluates between its steps. The
        clock starts again at the next training forward, ctx.backward or ctx.accumulate."""
        return (self.clock.running and self._source != LOADER
                and (self.module is None or not self.module.training))

    def _training_work(self) -> None:
        """Training work from a source other than ctx.steps starts the train clock (after a pause too)."""
        if self._source != LOADER and not self._paused and not self.finished and not self.clock.running:
            self.clock.start()

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward() through the fp16 gradient scaler, as the mean over the step's micro-batches. With
        batches from neither ctx.steps nor ctx.accumulate, each call is one micro-batch."""
        self._micro_batch()
        if self.measure is not None:  # a neutrality check's loss trace (autospeed.script.measure); else no sync
            self.measure.add_loss(loss)
        self._stepper_for().backward(loss)

    def _micro_batch(self) -> None:
        """A micro-batch's backward is next: counted (batches from neither ctx.steps nor ctx.accumulate)."""
        if self._source in (None, BACKWARD):
            self._source = BACKWARD
            self._training_work()
            self._next_micro(None)
        if self.step_count == 0 and not self._zeroed_between_micro:
            self._check_accumulating()

    def grad_scaler(self) -> ScalerView:
        """torch's GradScaler, driven by the context, for a loop written with one: replace only its construction
        (`scaler = ctx.grad_scaler()`) and keep `scaler.scale(loss).backward()`, `scaler.unscale_(opt)` before
        your clipping, `scaler.step(opt)`, `scaler.update()`. Enabled where the recipe's precision is fp16.
        `scale(loss)` is one micro-batch, as ctx.backward, but leaves the loss as given (such a loop divides it by
        its accumulation steps itself: read them from ctx.config.accumulation_steps); `step(opt)` is
        ctx.step(opt), stepping at a step's last micro-batch only; `update()` does nothing (ctx.step did it)."""
        return ScalerView(self)

    def _check_accumulating(self) -> None:
        """In the first step, at a micro-batch after its first: the gradients of the ones before must still be
        there. A script that zeroes them each micro-batch (its own optimizer.zero_grad()) trains every step on
        the last micro-batch alone: said once, and the result records accumulation_steps 1, what acted."""
        k = self._trained.accumulation_steps
        if k == 1 or self.module is None or (self._stepper_for().micro_batches - 1) % k == 0:
            return
        first = next((p for p in self.module.parameters() if p.requires_grad), None)
        if first is not None and (first.grad is None or not bool(first.grad.any())):
            self._zeroed_between_micro = True
            print(f"autospeed: warning: the script zeroes its gradients between the micro-batches of a step "
                  f"(accumulation_steps: {k}), so each step trains on 1/{k} of its batch; drop your own "
                  f"zero_grad() (ctx.step frees the gradients after each step)", file=sys.stderr, flush=True)

    def clip_grad_norm_(self, parameters, max_norm: float, norm_type: float = 2.0) -> torch.Tensor | None:
        """torch.nn.utils.clip_grad_norm_ on a step's last micro-batch, the fp16 gradients unscaled first
        (through every optimizer the context knows: ctx.prepare, ctx.optimizer, ctx.optimizers, ctx.step).
        Before a step's last micro-batch it does nothing and returns None: the gradients are still adding up."""
        if not self.boundary:
            return None
        scaler = self._stepper_for().scaler
        if scaler.is_enabled():
            if not self._optimizers:
                raise RuntimeError("autospeed: ctx.clip_grad_norm_() unscales fp16 gradients through their "
                                   "optimizer, and none is known yet: pass it through ctx.prepare(...) or "
                                   "ctx.optimizer(...) before clipping")
            for optimizer in self._optimizers:
                if id(optimizer) not in self._unscaled:
                    scaler.unscale_(optimizer)
                    self._unscaled.add(id(optimizer))
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    # ---- the optimizer step ----
    def step(self, optimizers=None, schedulers=None) -> bool:
        """One optimizer step at the end of a step's micro-batches (`ctx.boundary`; before it, nothing and
        False): the optimizer(s) through the fp16 scaler, gradients freed (no zero_grad of your own: it would
        drop the accumulated micro-batches), the scheduler(s) stepped. Without arguments: what ctx.prepare
        adopted. A searched schedule standing in for a scheduler given to ctx.prepare steps here whatever the
        arguments. True when it stepped."""
        if self._source is None:
            raise RuntimeError("autospeed: ctx.step() before any micro-batch: call ctx.backward(loss) for each "
                               "micro-batch (or take batches from ctx.steps(...), or wrap each in "
                               "`with ctx.accumulate(model):`) so the context knows where a step ends")
        if not self.boundary:
            return False
        given = _as_list(optimizers)
        optimizers = given or list(self._optimizers)
        schedulers = _as_list(schedulers) if schedulers is not None else [] if given else list(self._schedulers)
        schedulers += [s for s in self._searched_schedules if all(s is not t for t in schedulers)]
        for optimizer in optimizers:
            if all(optimizer is not o for o in self._optimizers):
                self._optimizers.append(optimizer)
        self._stepper_for().step(optimizers, schedulers)
        self._unscaled.clear()
        self.boundary = self._source == LOADER  # other sources: the next micro-batch begins with the next call
        self.record.stepped(self._effective, compiled=self.applied.get("compile", "none") != "none")
        if self.measure is not None:  # a probe's or a loss trace's mark: the clock to the runner, the end at the last
            self.measure.stepped(self)
        if self.step_count == 1 and self.preflight:  # every worker ends here: none waits in a collective for rank 0
            if self.side is not None:
                self.side.ask("preflight", knobs_read=sorted(self.read), defaults=self.script_defaults,
                              reseeded=self._reseeded())
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return True

    def _reseeded(self) -> int | None:
        """The seed the script gave torch itself after autospeed.init (None: it did not, or it seeded with
        ctx.config.seed): then the run's seed (a confirmation's new seeds) never reaches its initialisation."""
        seed = torch.initial_seed()
        if seed == self._seeded or ("seed" in self.read and seed == self._trained.seed):
            return None
        return seed

    def should_eval(self) -> bool:
        """True once per optimizer step that is due an evaluation (ask after ctx.step): every
        `eval_every_steps`, else every `eval_every_epochs`, and at the step where the budget or the schedule
        runs out (so the run's last standing is reported). Never in a measured run (autospeed.script.measure)."""
        if self.step_count == 0 or self._eval_checked_at == self.step_count or self.measure is not None:
            return False
        if self._source == LOADER and not self.boundary:
            return False
        self._eval_checked_at = self.step_count
        every = self._eval_every_steps()
        due = ((every is not None and self.step_count % every == 0) or self._run_out()
               or self.clock.peek() >= self.budget_seconds)
        return self.replicas.any(due) if self.replicas is not None else due

    def _eval_every_steps(self) -> int | None:
        if self.config.eval_every_steps is not None:
            return self.config.eval_every_steps
        if self.steps_per_epoch is None:
            return None
        return max(1, round(self.config.eval_every_epochs * self.steps_per_epoch))

    def _total_steps_or_none(self) -> int | None:
        """The run's length in optimizer steps: `max_steps` where the script gives it (an iteration loop), else the
        recipe's epochs of the training loader; None while neither says."""
        if self._trained.max_steps is not None:
            self.read.add("max_steps")
            return self._trained.max_steps
        if self.steps_per_epoch is None:
            return None
        return max(1, math.ceil(self.config.epochs * self.steps_per_epoch))

    # ---- internals ----
    def _stepper_for(self) -> Stepper:
        if self._stepper is None:
            # the scaler follows the precision the forward runs in; accumulation is read as a knob
            self._stepper = Stepper(self._trained, self.device, self.applied, self.config.accumulation_steps)
        return self._stepper

    def _ddp(self):
        return ddp_of(self._train_model) if self._train_model is not None else None

    def _layout(self, batch):
        if not self.applied.get("channels_last") or not isinstance(batch, (list, tuple)) or not batch:
            return batch
        x, *rest = batch
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return type(batch)((x, *rest)) if isinstance(batch, tuple) else [x, *rest]


def _samples(loader) -> str:
    """'512 samples', or 'samples' where the dataset has no length."""
    try:
        return f"{len(loader.dataset)} samples"
    except TypeError:
        return "samples"


def _as_list(x) -> list:
    """None, one object, or a list or tuple of them, as a list."""
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]
