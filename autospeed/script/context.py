"""The knob context a user's own training loop calls: `ctx = autospeed.init(defaults={...})`.

Run by autospeed (a trial, a confirmation run, `autospeed train --script`), the context holds the
run's recipe and reports to the runner (autospeed.train.script_channel); run on its own, it holds the
script's `defaults` and the script trains as plain PyTorch. Every helper applies the knobs exactly as
the built-in trainer does, through the same code (autospeed.train.setup, .step, .data, .optimizers):

    loader = ctx.dataloader(train_ds)              # batch_size (the micro-batch), loader workers, pin, prefetch
    model = ctx.prepare_model(model)               # device, channels_last, DDP, torch.compile; ctx.module: eager
    opt = ctx.optimizer(torch.optim.AdamW, model.parameters(), lr=ctx.lr(3e-4))   # optimizer_impl, lr_scaling
    sched = ctx.scheduler(opt)                     # schedule, warmup_fraction, decay_fraction
    for batch in ctx.steps(loader):                # epochs; starts the train clock; accumulation boundaries
        with ctx.autocast():                       # precision, attention
            loss = my_loss(model, batch)
        ctx.backward(loss)                         # fp16 scaler, mean over micro-batches, DDP no_sync
        if ctx.boundary:
            ctx.step(opt, sched)
        if ctx.should_eval():                      # eval_every_epochs, and at the budget's or schedule's end
            with ctx.paused():                     # off the train clock
                acc = evaluate(ctx.module)
            if ctx.report(val_accuracy=acc).stop:  # target met, out of budget, or the search stopped it
                break

Timing is the trainer's (DESIGN.md "What is timed"): the train clock runs from a batch of `ctx.steps`
until `ctx.paused()` or `ctx.report()`, and starts again at the next batch; compile and warm-up are
in the first step. Every knob read through `ctx.config` or a helper is recorded: a searched knob the
script never reads stops the search before it spends its budget (autospeed.train.script_run).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import math
import os
import sys
import time
from dataclasses import asdict
from typing import Any, Iterable, Iterator, NamedTuple

import torch

from autospeed.outcome import Status, objective
from autospeed.recipe import Recipe
from autospeed.script.knob_view import NOT_READ, KnobView
from autospeed.script.process import (
    device_for,
    die_with_parent,
    join_process_group,
    watch_for_crash,
)
from autospeed.train import script_channel as channel
from autospeed.train.batch import as_trained, effective_batch, lr_factor
from autospeed.train.data import dataset_length, make_loader, to_device
from autospeed.train.environment import PeakMemory, environment
from autospeed.train.evaluate import better, is_oom
from autospeed.train.optimizers import NOT_APPLICABLE, build_optimizers, build_schedule
from autospeed.train.result import (
    EvalEvent,
    TrainResult,
    process_age_seconds,
    wall_clock_origin,
)
from autospeed.train.script_options import SCRIPT
from autospeed.train.setup import (
    CHECKED_KNOBS,
    _SdpaWatch,
    autocast_dtype,
    not_applied,
    prepare_module,
    set_backend_knobs,
)
from autospeed.train.step import Clock, InForwardContext, Stepper, forward_context


class Report(NamedTuple):
    """What `ctx.report()` says: stop (and why: reached, budget, schedule, stopped, diverged) or go on."""

    stop: bool
    reason: str = ""


def _metric_mode(name: str) -> str:
    """The direction of a reported metric other than the target's: lower is better for losses and errors."""
    lowered = name.lower()
    return "min" if any(w in lowered for w in ("loss", "error", "perplexity", "ppl", "mse", "mae")) else "max"


class Context:
    """One run of a user's loop (module docstring). Build it with `autospeed.init`."""

    def __init__(self, recipe: Recipe, micro_batch: int | None = None, side: channel.ScriptSide | None = None,
                 clock_offset: float = 0.0, preflight: bool = False):
        self.wall_start = time.perf_counter()
        self._before_entry, self._origin = wall_clock_origin()
        if channel.WALL_BEFORE in os.environ:  # run by autospeed: count from its origin, the script's start-up inside
            age = process_age_seconds() or 0.0
            self._before_entry = float(os.environ[channel.WALL_BEFORE]) + age
            self._origin = os.environ.get(channel.WALL_ORIGIN, self._origin)
        self.recipe = recipe  # as the run was asked for (micro_batch_size and lr_scaling not resolved)
        micro = micro_batch_size(recipe) if micro_batch is None else micro_batch
        self._trained = as_trained(recipe, micro)
        self._effective = effective_batch(recipe)  # samples per optimizer step, all workers
        self.read: set[str] = set()
        self.config = KnobView(self._trained, self.read)  # the knobs: read them here for what no helper does
        self.side, self.preflight = side, preflight
        threads = os.environ.get("AUTOSPEED_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self.replicas = join_process_group(recipe.workers)
        self.device = device_for(recipe, self.replicas)
        torch.manual_seed(recipe.seed)
        self.applied: dict[str, Any] = {
            "device": self.device.type, "workers": self.replicas.world_size if self.replicas else 1,
            "micro_batch_size": micro, "effective_batch": effective_batch(recipe), "data_loader": "dataloader"}
        set_backend_knobs(self._trained, self.device, self.applied)
        # bf16/fp16 act only inside ctx.autocast(): recorded when it first runs (autocast), else the result says
        # the script never read it
        self._autocast_precision = self.applied.pop("precision") if autocast_dtype(self._trained.precision) else None
        self._attention_decided = False  # whether an evaluation showed if the model calls SDPA (paused)
        self._zeroed_between_micro = False  # the script zeroed gradients inside a step's micro-batches
        self.clock = Clock(self.device, clock_offset)
        self._clock_at_start = clock_offset
        self.peak = PeakMemory(self.device)
        self.module: torch.nn.Module | None = None  # the eager, unwrapped model (for EMA/SWA and evaluation)
        self.boundary = False  # True after the micro-batch that completes an optimizer step's batch
        self.step_count = self.samples = self.evaluations = 0
        self.steps_per_epoch: int | None = None
        self._train_loader = self._train_model = self._forward = self._stepper = None
        self._micro = self._epochs_started = 0
        self._eval_checked_at = -1
        self._since_eval = {"steps": 0, "samples": 0, "clock": clock_offset}
        self.best_metrics: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.status, self.tta, self.error = Status.NOT_REACHED, None, None
        self.first_step_seconds = self.compile_seconds = 0.0
        self._wall_at_target: float | None = None
        self._eval_failed = False
        self.finished = False
        self.result: TrainResult | None = None
        if side is not None:
            die_with_parent()
            watch_for_crash(self)
            side.send("started")

    # ---- identity ----
    @property
    def rank(self) -> int:
        return self.replicas.rank if self.replicas else 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that evaluates and logs (always true without data parallelism)."""
        return self.rank == 0

    # ---- building the run ----
    def dataloader(self, dataset, shuffle: bool = True, drop_last: bool | None = None, batch_size: int | None = None,
                   **kwargs) -> torch.utils.data.DataLoader:
        """torch's DataLoader with the recipe's batch_size (the micro-batch) and loader knobs (num_workers,
        pin_memory, prefetch_factor, persistent_workers), sharded over data-parallel workers. The first
        shuffled loader is the training loader: its length sets the epochs and the LR schedule. A loader for
        evaluation: `shuffle=False` (keeps the last partial batch) and its own `batch_size`."""
        config = self.config
        drop_last = shuffle if drop_last is None else drop_last
        size = config.batch_size if batch_size is None else batch_size
        pin = config.pin_memory and self.device.type == "cuda"
        sampler = None
        if self.replicas is not None and shuffle:
            from torch.utils.data import DistributedSampler

            sampler = DistributedSampler(dataset, num_replicas=self.replicas.world_size, rank=self.rank,
                                         shuffle=True, seed=self.recipe.seed, drop_last=True)
        loader = make_loader(config, dataset, size, shuffle=shuffle, drop_last=drop_last,
                             generator=torch.Generator().manual_seed(self.recipe.seed), pin=pin, sampler=sampler,
                             **kwargs)
        workers = config.num_workers
        self.read.add("prefetch_factor")  # read, and not applicable without loader workers
        self.applied.update({"num_workers": workers, "pin_memory": pin,
                             "prefetch_factor": config.prefetch_factor if workers else NOT_APPLICABLE,
                             "persistent_workers": config.persistent_workers and workers > 0})
        if shuffle and self._train_loader is None:
            dataset_length(dataset, "training dataset")
            self._train_loader = loader
            self.steps_per_epoch = max(1, len(loader) // self.config.accumulation_steps)
        return loader

    def prepare_model(self, model: torch.nn.Module, autocast: bool = True) -> torch.nn.Module:
        """Train with what this returns: `model` with the knobs applied (activation checkpointing on
        `model.checkpoint_blocks`, channels_last, DDP over data-parallel workers, torch.compile) and, unless
        `autocast=False`, its forward run in `ctx.autocast()` with floating outputs returned in fp32 (as
        Accelerate's prepare does). `model` itself is moved in place and stays the eager module (also
        `ctx.module`): evaluate, average (EMA/SWA) and save it."""
        train_model, self.module = prepare_module(model, self.config, self.device, self.applied, self.replicas)
        self._train_model = train_model
        return InForwardContext(train_model, self.autocast) if autocast else train_model

    def lr(self, base: float | None = None) -> float:
        """The peak LR: the recipe's `lr` (None), or your `base` LR; either scaled to the effective batch by
        the recipe's `lr_scaling`."""
        self.read.add("lr_scaling")
        if base is None:
            return self.config.lr  # as trained: already scaled (batch.as_trained)
        return base * lr_factor(self.recipe)

    def optimizer(self, cls: type, params: Iterable, **kwargs) -> torch.optim.Optimizer:
        """`cls(params, **kwargs)` in the recipe's `optimizer_impl` (torch's foreach or fused kernels)."""
        impl = self.config.optimizer_impl
        accepted = inspect.signature(cls).parameters
        extra = {}
        if impl != "default":
            if impl in accepted:
                extra = {impl: True}
            else:
                impl = NOT_APPLICABLE  # this optimizer has no such implementation switch
        self.applied["optimizer_impl"] = impl
        self.applied.setdefault("optimizer", cls.__name__.lower())
        return cls(params, **kwargs, **extra)

    def optimizers(self, model: torch.nn.Module | None = None) -> list[torch.optim.Optimizer]:
        """The recipe's own optimizer(s) for `model` (default: ctx.module): `optimizer` (sgd, adamw, or muon,
        which is two), `lr`, `momentum`, `weight_decay`, `optimizer_impl`, as the built-in trainer builds them."""
        self.read.add("lr_scaling")
        return build_optimizers(self.config, model if model is not None else self.module, self.applied)

    def scheduler(self, optimizer, total_steps: int | None = None):
        """torch's scheduler for the recipe's `schedule` (with warmup_fraction, decay_fraction), stepped by
        `ctx.step` once per optimizer step over `total_steps` (default: the recipe's epochs of the training
        loader). A list of optimizers gives a list of schedulers."""
        if total_steps is None:
            total_steps = self._total_steps()
        if isinstance(optimizer, (list, tuple)):
            return [build_schedule(self.config, o, total_steps, self.applied) for o in optimizer]
        return build_schedule(self.config, optimizer, total_steps, self.applied)

    def _total_steps(self) -> int:
        if self.steps_per_epoch is None:
            raise RuntimeError("autospeed: the number of steps is not known yet; build the training loader with "
                               "ctx.dataloader(train_dataset) first, or pass total_steps=")
        return max(1, math.ceil(self.config.epochs * self.steps_per_epoch))

    # ---- the loop ----
    def steps(self, loader: Iterable | None = None) -> Iterator[Any]:
        """The training micro-batches of the recipe's `epochs` (the whole run), on the device (channels_last
        where it acts). Sets `ctx.boundary` on the micro-batch that completes a step of `accumulation_steps`;
        the train clock runs while a batch is out and stops when the loop leaves this iterator."""
        return self._batches(loader, epochs=None)

    def epoch(self, loader: Iterable | None = None) -> Iterator[Any]:
        """One pass over the training loader (for a loop that keeps its own `for epoch in ...`): as `steps`,
        ending at the epoch's end, or earlier where the recipe's epochs run out."""
        return self._batches(loader, epochs=1)

    def _batches(self, loader, epochs: int | None) -> Iterator[Any]:
        loader = self._train_loader if loader is None else loader
        k = self.config.accumulation_steps
        per_epoch = max(1, len(loader) // k)
        if self.steps_per_epoch is None or loader is not self._train_loader:
            self.steps_per_epoch = per_epoch
        total = self._total_steps()
        self._eval_every = max(1, round(self.config.eval_every_epochs * self.steps_per_epoch))
        ddp = self._ddp()
        non_blocking = bool(self.applied.get("pin_memory"))
        sampler = getattr(loader, "sampler", None)
        try:
            for _ in itertools.count() if epochs is None else range(epochs):
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(self._epochs_started)
                self._epochs_started += 1
                # a whole pass runs the loader to its end, as `for batch in loader` does (its sampler then draws
                # the next epoch's order from the same random state); a pass cut at whole steps stops early
                whole = per_epoch * k >= len(loader)
                # The fetch is on the train clock, as in the built-in trainer: the loader's start at each epoch
                # (worker processes spawned again unless persistent) and each batch after a pause are paid for.
                if not self.clock.running:
                    self.clock.start()
                batches = iter(loader if whole else itertools.islice(loader, per_epoch * k))
                while True:
                    if not self.clock.running:  # after a pause (an evaluation): from the next fetch on
                        self.clock.start()
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    batch = self._layout(to_device(batch, self.device, non_blocking))
                    self._micro += 1
                    self.boundary = self._micro % k == 0
                    if ddp is not None:
                        ddp.require_backward_grad_sync = self.boundary  # what DDP's no_sync() sets
                    yield batch
                    if self.finished or self.step_count >= total:
                        return
        finally:  # the loop left: whatever follows (an epoch's evaluation) is off the train clock
            if self.clock.running:
                self.clock.stop()

    def autocast(self):
        """The training forward pass's context: autocast in the recipe's precision, the attention backend pinned."""
        if self._forward is None:
            self._forward, self._attention = forward_context(self.config, self.device, self.applied)
            if self._autocast_precision is not None:
                self.applied["precision"] = self._autocast_precision
        return self._forward()

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward() through the fp16 gradient scaler, as the mean over the step's micro-batches."""
        if self.step_count == 0 and not self._zeroed_between_micro:
            self._check_accumulating()
        self._stepper_for().backward(loss)

    def _check_accumulating(self) -> None:
        """In the first step, at a micro-batch after its first: the gradients of the ones before must still be
        there. A script that zeroes them each micro-batch (its own optimizer.zero_grad()) trains every step on
        the last micro-batch alone: said once, and the result records accumulation_steps 1, what acted."""
        k = self._trained.accumulation_steps
        if k == 1 or self.module is None or (self._micro - 1) % k == 0:
            return
        first = next((p for p in self.module.parameters() if p.requires_grad), None)
        if first is not None and (first.grad is None or not bool(first.grad.any())):
            self._zeroed_between_micro = True
            print(f"autospeed: warning: the script zeroes its gradients between the micro-batches of a step "
                  f"(accumulation_steps: {k}), so each step trains on 1/{k} of its batch; drop your own "
                  f"zero_grad() (ctx.step frees the gradients after each step)", file=sys.stderr, flush=True)

    def step(self, optimizers, schedulers=None) -> bool:
        """One optimizer step at the end of a step's micro-batches (`ctx.boundary`; before it, nothing and
        False): the optimizer(s) through the fp16 scaler, gradients freed (no zero_grad of your own: it would
        drop the accumulated micro-batches), the scheduler(s) stepped. True when it stepped."""
        if not self.boundary:
            return False
        as_list = (lambda x: [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x])
        self._stepper_for().step(as_list(optimizers), as_list(schedulers))
        self.step_count += 1
        self.samples += self._effective
        self._since_eval["steps"] += 1
        self._since_eval["samples"] += self._effective
        if self.step_count == 1:  # first step = compile (if any) + warm-up; synced so it is exact
            self.clock.stop()
            self.first_step_seconds = self.clock.total - self._clock_at_start
            self.compile_seconds = self.first_step_seconds if self.applied.get("compile", "none") != "none" else 0.0
            self.clock.start()
            if self.preflight and self.side is not None:
                self.side.ask("preflight", knobs_read=sorted(self.read))
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        return True

    def should_eval(self) -> bool:
        """True once per step that is due an evaluation: every `eval_every_epochs`, and at the step where the
        budget or the schedule runs out (so the run's last standing is reported)."""
        if not self.boundary or self._eval_checked_at == self.step_count or self.step_count == 0:
            return False
        self._eval_checked_at = self.step_count
        due = (self.step_count % self._eval_every == 0 or self.step_count >= self._total_steps()
               or self.clock.peek() >= self.recipe.max_train_seconds)
        return self.replicas.any(due) if self.replicas is not None else due

    @contextlib.contextmanager
    def paused(self):
        """Off the train clock (evaluation, logging, checkpoints): it starts again at the next batch."""
        if self.clock.running:
            self.clock.stop()
        watch = self._watch_attention()
        try:
            with watch[0] if watch is not None else contextlib.nullcontext():
                yield
        except BaseException as e:
            self._eval_failed = is_oom(e)  # out of memory here: a smaller training micro-batch would not help
            raise
        finally:
            if watch is not None:
                self._attention_seen(*watch)

    def _watch_attention(self):
        """Until an evaluation has run the model: (a counter of scaled_dot_product_attention calls, the model's
        forward calls, the hook that counts them), as the trainer's first evaluation watches (AttentionKnob)."""
        if self._attention_decided or self.module is None:
            return None
        ran: list[int] = []
        return _SdpaWatch(), ran, self.module.register_forward_pre_hook(lambda *_: ran.append(1))

    def _attention_seen(self, watch, ran: list[int], hook) -> None:
        """A pause in which the model ran decides: no SDPA call, and the attention knob cannot act."""
        hook.remove()
        if ran:
            self._attention_decided = True
            if watch.calls == 0:
                self.applied["attention"] = NOT_APPLICABLE

    def report(self, train_loss: float | None = None, **metrics: float) -> Report:
        """One evaluation's metrics (the target's among them). Stops when the target is met, the budget or the
        schedule is spent, or the search says stop; the run's result is then recorded."""
        if self.clock.running:
            self.clock.stop()
        train_seconds = self.clock.total
        if self.replicas is not None:
            metrics = self.replicas.from_leader(metrics)
        target = self.recipe.resolved_target
        if target.metric not in metrics:
            raise ValueError(f"autospeed: ctx.report() got {sorted(metrics)}, not the target metric "
                             f"'{target.metric}'; report it (the target is {target.describe()})")
        values = {k: float(v) for k, v in metrics.items()}
        for name, v in values.items():
            mode = target.mode if name == target.metric else _metric_mode(name)
            self.best_metrics[name] = better(mode, self.best_metrics.get(name), v)
        self.evaluations += 1
        best = self.best_metrics[target.metric]
        reached = target.met(best)
        interval = train_seconds - self._since_eval["clock"]
        loss = math.nan if train_loss is None else float(train_loss)
        event = EvalEvent(
            step=self.step_count, epoch=self.step_count / (self.steps_per_epoch or 1), samples=self.samples,
            train_seconds=train_seconds, wall_seconds=time.perf_counter() - self.wall_start, metrics=values,
            value=values[target.metric], best_value=best, train_loss=loss,
            samples_per_second=self._since_eval["samples"] / interval if interval > 0 else 0.0, reached=reached,
            compile_seconds=self.compile_seconds, peak_memory_mb=self.peak.mb(),
            objective=objective(Status.RUNNING, train_seconds if reached else None, best, target.value,
                                self.recipe.max_train_seconds, target.mode),
            best_metrics=dict(self.best_metrics))
        self.history.append(event.flat())
        self._since_eval = {"steps": 0, "samples": 0, "clock": train_seconds}
        if reached and self.tta is None:
            self.tta, self._wall_at_target, self.status = train_seconds, event.wall_seconds, Status.REACHED
        stop = False
        if self.side is not None and self.is_main:
            stop = bool(self.side.ask("eval", event=asdict(event)).get("stop"))
        if self.replicas is not None:
            stop = self.replicas.any(stop)
        reason = ("reached" if reached else "diverged" if train_loss is not None and not math.isfinite(loss)
                  else "budget" if train_seconds >= self.recipe.max_train_seconds
                  else "schedule" if self.steps_per_epoch and self.step_count >= self._total_steps()
                  else "stopped" if stop else "")
        if not reason:
            return Report(False)
        if reason == "diverged":
            self.status, self.error = Status.DIVERGED, f"train loss became {loss} by step {self.step_count}"
        elif reason == "stopped":
            self.status = Status.STOPPED_EARLY
        self.finish()
        return Report(True, reason)

    # ---- the end ----
    def finish(self, status: Status | None = None, error: str | None = None) -> TrainResult:
        """The run's result (sent to autospeed when it runs the script); called by `report` when it says stop,
        and at exit otherwise. Idempotent."""
        if self.finished:
            return self.result
        self.finished = True
        if self.clock.running:
            self.clock.stop()
        if status is not None:
            self.status, self.error = status, error
        self.result = self._result()
        if self.side is not None and self.is_main:
            self.side.send("result", result=_jsonable(self.result))
        return self.result

    def _result(self) -> TrainResult:
        target = self.recipe.resolved_target
        applied = dict(self.applied)
        applied["knobs_read"] = sorted(self.read)
        for knob in CHECKED_KNOBS:  # a knob set (away from its default) that the script never read did not act
            default = Recipe.model_fields[knob].default
            if knob not in self.read and knob not in applied and getattr(self._trained, knob) != default:
                applied[knob] = NOT_READ
        applied["accumulation_steps"] = 1 if self._zeroed_between_micro else self._trained.accumulation_steps
        applied["gradients_zeroed_between_micro_batches"] = self._zeroed_between_micro
        applied["lr"] = self._trained.lr
        applied["not_applied"] = not_applied(self._trained, applied)
        if self._zeroed_between_micro:  # the leaderboard and `autospeed train` list it with the others
            applied["not_applied"]["accumulation_steps"] = {"asked": self._trained.accumulation_steps, "ran": 1}
        best = self.best_metrics.get(target.metric)
        train_seconds = self.clock.total
        wall_to_target = None if self._wall_at_target is None else self._wall_at_target + self._before_entry
        return TrainResult(
            status=self.status, tta_seconds=self.tta, target=target.model_dump(), best_value=best,
            best_metrics=dict(self.best_metrics),
            objective=objective(self.status, self.tta, best, target.value, self.recipe.max_train_seconds, target.mode),
            train_seconds=train_seconds, wall_seconds=time.perf_counter() - self.wall_start,
            compile_seconds=self.compile_seconds, first_step_seconds=self.first_step_seconds,
            peak_memory_mb=self.peak.mb(),
            samples_per_second=self.samples / (train_seconds - self._clock_at_start)
            if train_seconds > self._clock_at_start else 0.0,
            steps=self.step_count, epochs_done=self.step_count / (self.steps_per_epoch or 1),
            evaluations=self.evaluations, applied=applied,
            environment={**environment(self.device), "workers": applied["workers"]}, error=self.error,
            history=self.history, wall_to_target_seconds=wall_to_target, wall_clock_origin=self._origin)

    # ---- internals ----
    def _stepper_for(self) -> Stepper:
        if self._stepper is None:
            # the scaler follows the precision the forward runs in; accumulation is read as a knob
            self._stepper = Stepper(self._trained, self.device, self.applied, self.config.accumulation_steps)
        return self._stepper

    def _ddp(self):
        from torch.nn.parallel import DistributedDataParallel

        model = getattr(self._train_model, "_orig_mod", self._train_model)  # under torch.compile
        return model if isinstance(model, DistributedDataParallel) else None

    def _layout(self, batch):
        if not self.applied.get("channels_last") or not isinstance(batch, (list, tuple)) or not batch:
            return batch
        x, *rest = batch
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return type(batch)((x, *rest)) if isinstance(batch, tuple) else [x, *rest]


def micro_batch_size(recipe: Recipe) -> int:
    """The first micro-batch a run tries (batch.micro_batch_sizes' first)."""
    from autospeed.train.batch import micro_batch_sizes

    return micro_batch_sizes(recipe)[0]


def _jsonable(result: TrainResult) -> dict[str, Any]:
    out = asdict(result)
    out["status"] = result.status.value
    return json.loads(json.dumps(out, default=str))


def init(defaults: dict[str, Any] | None = None) -> Context:
    """The knob context of this run: the recipe autospeed runs the script with, or `defaults` (recipe keys:
    batch_size, precision, compile, lr, target, max_train_seconds, ...) when the script runs on its own."""
    side = channel.ScriptSide.from_env()
    if channel.RECIPE in os.environ:
        recipe = Recipe.model_validate_json(os.environ[channel.RECIPE])
        micro = int(os.environ.get(channel.MICRO_BATCH) or micro_batch_size(recipe))
        return Context(recipe, micro, side, float(os.environ.get(channel.CLOCK_OFFSET, 0.0)),
                       preflight=bool(os.environ.get(channel.PREFLIGHT)))
    from autospeed.errors import UserError
    from autospeed.recipe import recipe_from_dict

    data = {"workload": SCRIPT, **(defaults or {})}
    try:
        recipe = recipe_from_dict(data, "autospeed.init(defaults=...)")
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    return Context(recipe)
