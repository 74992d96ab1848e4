"""The knob context a user's own training loop calls: `ctx = autospeed.init(defaults={...})`.

Run by autospeed (a trial, a confirmation run, `autospeed train --script`), the context holds the
run's recipe and reports to the runner (autospeed.script.channel); run on its own, it holds the
script's `defaults` and the script trains as plain PyTorch: no target and no budget unless the defaults
name them. Under a search the script's `defaults` are the base of the baseline and of every trial
(autospeed.script.preflight captures them), and each knob keeps the script's own way unless the space
searches it: `schedule: script` (its scheduler or LR function), `optimizer: script` (its own optimizer).
Every helper applies the knobs exactly as the built-in trainer does, through the same code
(autospeed.train.setup, .step, .data, .optimizers); names follow Accelerate's where the job is the same:

    model, opt, loader, sched = ctx.prepare(model, opt, loader, sched)  # Accelerate's prepare: the knobs
    for batch in ctx.steps(loader):                # epochs; starts the train clock; accumulation boundaries
        with ctx.autocast():                       # precision, attention (one reusable object)
            loss = my_loss(model, batch)
        ctx.backward(loss)                         # fp16 scaler, mean over micro-batches, DDP no_sync
        ctx.clip_grad_norm_(model.parameters(), 1.0)   # fp16 gradients unscaled first
        ctx.step()                                 # at a step's last micro-batch: optimizer, zero_grad, scheduler
        if ctx.should_eval():                      # eval_every_steps / eval_every_epochs, and at the end
            with ctx.paused():                     # off the train clock
                acc = evaluate(ctx.module)
            if ctx.report(val_accuracy=acc).stop:  # target met, out of budget, or the search stopped it
                break

The stepping (micro-batches from any source, backward, clipping, the step, the evaluation cadence) is
autospeed.script.stepping; the clock, `report` and the run's result are autospeed.script.reporting. Every
knob read through `ctx.config` or a helper is recorded: a searched knob the script never reads stops the
search before it spends its budget (autospeed.script.preflight).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterable

import torch

from autospeed.recipe import Recipe
from autospeed.script import channel
from autospeed.script.knob_view import KnobView
from autospeed.script.measure import Measure
from autospeed.script.options import SCRIPT
from autospeed.script.prepared import (
    PreparedModel,
    RecipeSchedule,
    follow_moved_lr,
    groups_of,
    peak_for_adopted,
    set_impl,
    training_loader,
)
from autospeed.script.process import WorkerGroup, device_for, die_with_parent, watch_for_crash
from autospeed.script.reporting import Report, Reporting, metric_mode  # noqa: F401 (Report: the public name)
from autospeed.script.stepping import Stepping
from autospeed.train.applied import NOT_APPLICABLE, Applied
from autospeed.train.batch import as_trained, effective_batch, lr_factor
from autospeed.train.data import dataset_length, make_loader
from autospeed.train.environment import PeakMemory
from autospeed.train.optimizers import build_optimizers, build_schedule
from autospeed.train.result import process_age_seconds, wall_clock_origin
from autospeed.train.run_record import RunRecord
from autospeed.train.setup import autocast_dtype, prepare_module, set_backend_knobs
from autospeed.train.step import Clock

# A script's own way for each knob it does not give: its own LR schedule and its own optimizer
SCRIPT_OWN = {"schedule": "script", "optimizer": "script"}
_TARGET_KEYS = ("target", "target_accuracy")
# the preflight seeds torch with this, so that a script that seeds torch itself after autospeed.init shows
PREFLIGHT_SEED = 2_147_483_629
_current: Context | None = None  # the run's context (autospeed.context())


class Context(Stepping, Reporting):
    """One run of a user's loop (module docstring). Build it with `autospeed.init`."""

    def __init__(self, recipe: Recipe, micro_batch: int | None = None, side: channel.ScriptSide | None = None,
                 clock_offset: float = 0.0, preflight: bool = False, alone: bool = False,
                 script_defaults: dict[str, Any] | None = None, explicit: set[str] | None = None):
        wall_start = time.perf_counter()
        before_entry, origin = wall_clock_origin()
        if channel.WALL_BEFORE in os.environ:  # run by autospeed: count from its origin, the script's start-up inside
            age = process_age_seconds() or 0.0
            before_entry = float(os.environ[channel.WALL_BEFORE]) + age
            origin = os.environ.get(channel.WALL_ORIGIN, origin)
        self.recipe = recipe  # as the run was asked for (micro_batch_size and lr_scaling not resolved)
        # run alone (no autospeed around it): the script's own target and budget only, no stop on NaN
        self.alone = alone
        self.script_defaults = dict(script_defaults or {})  # what the script gave autospeed.init, its own ways
        # the recipe keys someone set (the script's defaults, the search's layers); None: all (a trial's recipe).
        # A key no one set is the script's own where it has one (its DataLoader's batch size in ctx.prepare)
        self._explicit = explicit
        self._has_target = not alone or any(k in self.script_defaults for k in _TARGET_KEYS)
        self._has_budget = not alone or "max_train_seconds" in self.script_defaults
        micro = micro_batch_size(recipe) if micro_batch is None else micro_batch
        self._trained = as_trained(recipe, micro)
        self._effective = effective_batch(recipe)  # samples per optimizer step, all workers
        self.read: set[str] = set()
        self.config = KnobView(self._trained, self.read)  # the knobs: read them here for what no helper does
        self.side, self.preflight, self.measure = side, preflight, Measure.from_env()  # measure: probe, loss trace
        threads = os.environ.get("AUTOSPEED_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self.device = device_for(recipe)
        self._group = WorkerGroup(recipe.workers, self.device)  # joined at first use: the script may make it itself
        # the preflight: a seed no script picks, so a reseed after init shows (stepping.Stepping._check_seed)
        self._seeded = PREFLIGHT_SEED if preflight and recipe.seed != PREFLIGHT_SEED else recipe.seed
        torch.manual_seed(self._seeded)
        self.applied: Applied = {
            "device": self.device.type, "workers": recipe.workers,  # the group, once joined, has as many
            "micro_batch_size": micro, "effective_batch": effective_batch(recipe), "data_loader": "dataloader"}
        set_backend_knobs(self._trained, self.device, self.applied)
        # bf16/fp16 act only inside ctx.autocast(): recorded when it first runs (autocast), else the result says
        # the script never read it
        self._autocast_precision = self.applied.pop("precision") if autocast_dtype(self._trained.precision) else None
        self._attention_decided = False  # whether an evaluation showed if the model calls SDPA (paused)
        self._zeroed_between_micro = False  # the script zeroed gradients inside a step's micro-batches
        self.clock = Clock(self.device, clock_offset)
        target = recipe.resolved_target
        # the steps, evaluations, status and result, kept as the built-in trainer keeps them
        self.record = RunRecord(recipe, self.device, self.clock, PeakMemory(self.device), wall_start, before_entry,
                                origin, has_target=self._has_target,
                                mode_of=lambda name: target.mode if name == target.metric else metric_mode(name))
        self.module: torch.nn.Module | None = None  # the eager, unwrapped model (for EMA/SWA and evaluation)
        self.boundary = False  # True after the micro-batch that completes an optimizer step's batch
        self._train_loader = self._train_model = self._forward = self._stepper = self._lr_curve = None
        self._source: str | None = None  # where micro-batches are counted (stepping.LOADER, ACCUMULATE, BACKWARD)
        self._optimizers: list[torch.optim.Optimizer] = []  # every optimizer the context knows (clipping, step)
        self._schedulers: list[Any] = []  # the schedulers ctx.step() steps (ctx.scheduler, a searched schedule)
        self._searched_schedules: list[Any] = []  # the recipe's, for schedulers given to ctx.prepare: ctx.step's
        self._own_schedulers: list[tuple[Any, int]] = []  # the script's own, given to ctx.prepare (and their start)
        self._lr_moved: set[int] = set()  # optimizers whose lr the context set to the run's peak (peak_for_adopted)
        self._unscaled: set[int] = set()  # optimizers whose fp16 gradients this step are unscaled already
        self._epochs_started = 0
        self._paused = False
        self._eval_checked_at = -1
        self._eval_failed = False
        self.finished = False
        self.result = None
        global _current
        _current = self
        if side is not None:
            die_with_parent()
            watch_for_crash(self)
            side.send("started")

    # ---- identity ----
    @property
    def rank(self) -> int:
        return self._group.rank

    @property
    def replicas(self):
        """This process's place among the data-parallel workers (None: one worker); joins the group on first use."""
        return self._group.replicas()

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that evaluates and logs (always true without data parallelism)."""
        return self.rank == 0

    # ---- the run so far (its record) ----
    @property
    def step_count(self) -> int:
        """Optimizer steps taken so far."""
        return self.record.steps

    @property
    def best_metrics(self) -> dict[str, float]:
        """The best value of each reported metric so far, in its direction."""
        return self.record.best_metrics

    @property
    def steps_per_epoch(self) -> int | None:
        """Optimizer steps in an epoch of the training loader; None until one says."""
        return self.record.steps_per_epoch

    @steps_per_epoch.setter
    def steps_per_epoch(self, steps: int) -> None:
        self.record.steps_per_epoch = steps

    # ---- building the run ----
    def prepare(self, *objects):
        """Accelerate's `prepare`: each object with its knobs, in the order given (one object: it alone), to rebind
        the script's own names (autospeed.script.prepared). A module: `prepare_model` (its state_dict the
        script's); an optimizer: `optimizer(opt)` (adopted); the training DataLoader (the one that shuffles, or
        where none does, the first given): rebuilt by `dataloader` on its dataset, its shuffling and collate_fn
        kept (any other loader, for evaluation, as is); an LR scheduler: under `schedule: script` the script's
        own, stepped by the script where it steps it; under a searched schedule the recipe's, stepped by
        `ctx.step()`. `ctx.step()` steps the adopted optimizers."""
        train = training_loader(objects, known=self._train_loader is not None)
        out = []
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                out.append(self.prepare_model(obj))
            elif isinstance(obj, torch.optim.Optimizer):
                out.append(self.optimizer(obj))
            elif isinstance(obj, torch.utils.data.DataLoader):
                out.append(self._adopt_loader(obj) if obj is train else obj)
            elif isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
                out.append(self._adopt_scheduler(obj))
            else:
                raise TypeError(f"autospeed: ctx.prepare() takes modules, optimizers, DataLoaders and LR "
                                f"schedulers, got {type(obj).__name__}")
        return out[0] if len(out) == 1 else tuple(out)

    def _adopt_loader(self, loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
        """The training loader rebuilt with the loader knobs on its dataset, its shuffling (and the random source
        of its order), drop_last and collate_fn kept, at the recipe's batch size, or its own where no one set one
        (then its own is a default of the script's, the base of a search)."""
        own = loader.batch_size
        self.script_defaults.setdefault("batch_size", own)
        size = None if self._explicit is None or "batch_size" in self._explicit else own
        if size is not None:  # the samples an optimizer step sees, at the loader's own batch size
            workers = self.replicas.world_size if self.replicas else 1
            self._effective = own * self._trained.accumulation_steps * workers
        shuffled = isinstance(loader.sampler, torch.utils.data.RandomSampler)
        return self.dataloader(loader.dataset, shuffle=shuffled, drop_last=loader.drop_last, batch_size=size,
                               collate_fn=loader.collate_fn, train=True, generator=loader.generator)

    def _adopt_scheduler(self, scheduler):
        """The script's own scheduler under `schedule: script` (the script steps it); the recipe's, stepped by
        ctx.step(), behind a stand-in whose step() does nothing, under a searched schedule."""
        if id(scheduler.optimizer) in self._lr_moved:
            follow_moved_lr(scheduler)
        if self.config.schedule == "script":
            self.applied.update({"schedule": "script", "warmup_fraction": NOT_APPLICABLE})
            self._own_schedulers.append((scheduler, scheduler.last_epoch))
            return scheduler
        schedule = build_schedule(self.config, scheduler.optimizer, self._total_steps(), self.applied)
        self._searched_schedules.append(schedule)
        return RecipeSchedule(schedule)

    def dataloader(self, dataset, shuffle: bool = True, drop_last: bool | None = None, batch_size: int | None = None,
                   train: bool | None = None, generator: torch.Generator | None = None,
                   **kwargs) -> torch.utils.data.DataLoader:
        """torch's DataLoader with the recipe's batch_size (the micro-batch) and loader knobs (num_workers,
        pin_memory, prefetch_factor, persistent_workers), sharded over data-parallel workers. The first
        training loader (`train`, default: `shuffle`) sets the epochs and the LR schedule by its length. A loader
        for evaluation: `shuffle=False` (keeps the last partial batch) and its own `batch_size`. `generator`: the
        shuffle's random source (default: one seeded with the recipe's seed)."""
        train = shuffle if train is None else train
        config = self.config
        drop_last = shuffle if drop_last is None else drop_last
        size = config.batch_size if batch_size is None else batch_size
        pin = config.pin_memory and self.device.type == "cuda"
        sampler = None
        if self.replicas is not None and train:
            from torch.utils.data import DistributedSampler

            sampler = DistributedSampler(dataset, num_replicas=self.replicas.world_size, rank=self.rank,
                                         shuffle=shuffle, seed=self.recipe.seed, drop_last=True)
        if generator is None:
            generator = torch.Generator().manual_seed(self.recipe.seed)
        loader = make_loader(config, dataset, size, shuffle=shuffle, drop_last=drop_last, generator=generator,
                             pin=pin, sampler=sampler, **kwargs)
        workers = config.num_workers
        self.read.add("prefetch_factor")  # read, and not applicable without loader workers
        self.applied.update({"num_workers": workers, "pin_memory": pin,
                             "prefetch_factor": config.prefetch_factor if workers else NOT_APPLICABLE,
                             "persistent_workers": config.persistent_workers and workers > 0})
        if train and self._train_loader is None:
            dataset_length(dataset, "training dataset")
            self._train_loader = loader
            self.steps_per_epoch = max(1, len(loader) // self.config.accumulation_steps)
        return loader

    def prepare_model(self, model: torch.nn.Module, autocast: bool = True, fp32_outputs: bool = True
                      ) -> torch.nn.Module:
        """Train with what this returns: `model` with the knobs applied (activation checkpointing on
        `model.checkpoint_blocks`, channels_last, DDP over data-parallel workers, torch.compile) and, unless
        `autocast=False`, its forward run in `ctx.autocast()` with floating outputs returned in fp32 (as
        Accelerate's prepare does; `fp32_outputs=False`: as autocast left them, no fp32 copy of a large model's
        logits). `model` itself is moved in place and stays the eager module (also `ctx.module`): evaluate,
        average (EMA/SWA) and save it; or rebind `model` to what this returns: its `state_dict()` is `model`'s."""
        replicas = self.replicas  # a group the script made itself: the script wraps its DDP (or passed it in)
        train_model, self.module = prepare_module(model, self.config, self.device, self.applied,
                                                  None if self._group.scripts_own else replicas)
        self._train_model = train_model
        return PreparedModel(train_model, self.autocast, fp32_outputs, model) if autocast else train_model

    def lr(self, base: float | None = None) -> float:
        """The peak LR: the recipe's `lr` (None), or your `base` LR; either scaled to the effective batch by
        the recipe's `lr_scaling`. Read your peak here (`learning_rate = ctx.lr()`, your default given as
        `defaults=dict(lr=...)`) and your own LR function and optimizer follow a searched `lr`."""
        self.read.add("lr_scaling")
        if base is None:
            return self.config.lr  # as trained: already scaled (batch.as_trained)
        return base * lr_factor(self.recipe)

    def lr_at(self, step: int, own, total_steps: int | None = None) -> float:
        """The LR at optimizer step `step`: under `schedule: script` (the script's default) your own LR
        function's `own(step)`; under a searched schedule, the recipe's (peak `ctx.lr()`, over `total_steps`,
        default the recipe's epochs of the training loader). For a loop that sets `group["lr"]` itself."""
        if self.config.schedule == "script":
            self.applied["schedule"] = "script"
            return float(own(step))
        if self._lr_curve is None or self._lr_curve.step > step:
            self._lr_curve = _LrCurve(self, total_steps)
        return self._lr_curve.at(step)

    def optimizer(self, cls, params: Iterable | None = None, **kwargs) -> torch.optim.Optimizer:
        """Your optimizer in the recipe's `optimizer_impl` (torch's foreach or fused kernels): `cls(params,
        **kwargs)`, or one built elsewhere (`ctx.optimizer(model.configure_optimizers(...))`), adopted with its
        parameter groups (those at the lr your defaults give take `ctx.lr()`: a searched lr reaches an optimizer
        built before it was read). Where the space searches `optimizer`, the recipe's (sgd, adamw) is built on the
        same parameter groups instead, each keeping its own weight_decay and lr."""
        adopted = isinstance(cls, torch.optim.Optimizer)
        groups = groups_of(cls.param_groups if adopted else params)
        script_lr = self.script_defaults.get("lr")
        if adopted and script_lr is not None and peak_for_adopted(groups, script_lr, self.lr()):
            self._lr_moved.add(id(cls))
        if self.config.optimizer != "script":
            optimizer = self._recipe_optimizer(groups, kwargs.get("lr"))
        elif isinstance(cls, torch.optim.Optimizer):
            optimizer = cls
            self.applied["optimizer_class"] = type(cls).__name__
        else:
            optimizer = cls(params if not groups else groups, **kwargs)
            self.applied["optimizer_class"] = cls.__name__
        if self.config.optimizer == "script":
            self.applied["optimizer"] = "script"
        self.applied["optimizer_impl"] = set_impl(optimizer, self.config.optimizer_impl)
        self._optimizers.append(optimizer)
        return optimizer

    def _recipe_optimizer(self, groups: list[dict[str, Any]], lr: float | None) -> torch.optim.Optimizer:
        c = self.config
        if c.optimizer == "sgd":
            cls, kwargs = torch.optim.SGD, dict(momentum=c.momentum, nesterov=c.momentum > 0)
        elif c.optimizer == "adamw":
            cls, kwargs = torch.optim.AdamW, dict(betas=(c.momentum, 0.999))
        else:
            raise ValueError(f"autospeed: optimizer {c.optimizer} builds its own parameter split; for it, build "
                             f"with ctx.optimizers(model), or search sgd and adamw only")
        keep = ("params", "weight_decay", "lr")
        groups = [{k: v for k, v in g.items() if k in keep} for g in groups]
        self.applied.update({"optimizer": c.optimizer, "momentum": c.momentum})
        return cls(groups, lr=c.lr if lr is None else lr, weight_decay=c.weight_decay, **kwargs)

    def optimizers(self, model: torch.nn.Module | None = None) -> list[torch.optim.Optimizer]:
        """The recipe's own optimizer(s) for `model` (default: ctx.module): `optimizer` (sgd, adamw, or muon,
        which is two; `script` here means the recipe default, sgd), `lr`, `momentum`, `weight_decay`,
        `optimizer_impl`, as the built-in trainer builds them."""
        self.read.add("lr_scaling")
        recipe = self.config
        if recipe.optimizer == "script":  # the script asks autospeed for one: the recipe's default
            self.read.update(("momentum", "weight_decay", "optimizer_impl", "lr"))
            recipe = self._trained.model_copy(update={"optimizer": Recipe.model_fields["optimizer"].default})
        built = build_optimizers(recipe, model if model is not None else self.module, self.applied)
        self._optimizers.extend(built)
        return built

    def scheduler(self, optimizer, total_steps: int | None = None, own=None):
        """torch's scheduler for the recipe's `schedule` (with warmup_fraction, decay_fraction), stepped by
        `ctx.step` once per optimizer step over `total_steps` (default: the recipe's epochs of the training
        loader). `schedule: script` (a script's default) keeps your own scheduler `own` (none: a constant LR).
        A list of optimizers gives a list of schedulers."""
        if isinstance(optimizer, (list, tuple)):
            return [self.scheduler(o, total_steps) for o in optimizer]
        if self.config.schedule == "script":
            self.applied.update({"schedule": "script", "warmup_fraction": NOT_APPLICABLE})
            built = own if own is not None else torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0,
                                                                                     total_iters=0)
        else:
            built = build_schedule(self.config, optimizer, self._total_steps(total_steps), self.applied)
        self._schedulers.append(built)
        return built

    def _total_steps(self, total_steps: int | None = None) -> int:
        if total_steps is not None:
            return total_steps
        total = self._total_steps_or_none()
        if total is None:
            raise RuntimeError(f"autospeed: schedule {self.config.schedule} spans the run's steps, unknown yet; "
                               f"build the training loader with ctx.dataloader(train_dataset) first, or pass "
                               f"total_steps=")
        return total


class _LrCurve:
    """The recipe's LR schedule as a function of the step, for a loop that sets its LR itself (ctx.lr_at): torch's
    scheduler on a one-parameter optimizer, stepped forward as the loop's step grows."""

    def __init__(self, ctx: Context, total_steps: int | None):
        self.optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=ctx.lr())
        self.schedule = build_schedule(ctx.config, self.optimizer, ctx._total_steps(total_steps), ctx.applied)
        self.step = 0

    def at(self, step: int) -> float:
        while self.step < step:
            self.optimizer.step()  # no gradient: nothing moves, but torch sees the order it expects
            self.schedule.step()
            self.step += 1
        return float(self.optimizer.param_groups[0]["lr"])


def micro_batch_size(recipe: Recipe) -> int:
    """The first micro-batch a run tries (batch.micro_batch_sizes' first)."""
    from autospeed.train.batch import micro_batch_sizes

    return micro_batch_sizes(recipe)[0]


def script_recipe(defaults: dict[str, Any], layers: dict[str, Any] | None = None, source: str = "") -> Recipe:
    """The recipe of a script's run: its own ways (SCRIPT_OWN), its `defaults`, then `layers` (what autospeed
    sets over them: the search's workload, target, budget and fixed knobs)."""
    from autospeed.recipe import recipe_from_dict

    layers = layers or {}
    if any(k in layers for k in _TARGET_KEYS):  # the search's target replaces the script's own
        defaults = {k: v for k, v in defaults.items() if k not in _TARGET_KEYS}
    return recipe_from_dict({"workload": SCRIPT, **SCRIPT_OWN, **defaults, **layers},
                            source or "autospeed.init(defaults=...)")


def init(defaults: dict[str, Any] | None = None) -> Context:
    """The knob context of this run: the recipe autospeed runs the script with, or `defaults` (recipe keys:
    batch_size, precision, compile, lr, target, max_train_seconds, ...) when the script runs on its own."""
    from autospeed.errors import UserError

    side = channel.ScriptSide.from_env()
    given = {**SCRIPT_OWN, **(defaults or {})}
    try:
        if channel.LAYERS in os.environ:  # the search's preflight: the script's defaults under the space's layers
            layers = json.loads(os.environ[channel.LAYERS])
            recipe = script_recipe(defaults or {}, layers)
            return Context(recipe, None, side, preflight=bool(os.environ.get(channel.PREFLIGHT)),
                           script_defaults=given, explicit={*given, *layers})
        if channel.RECIPE in os.environ:
            recipe = Recipe.model_validate_json(os.environ[channel.RECIPE])
            micro = int(os.environ.get(channel.MICRO_BATCH) or micro_batch_size(recipe))
            return Context(recipe, micro, side, float(os.environ.get(channel.CLOCK_OFFSET, 0.0)),
                           preflight=bool(os.environ.get(channel.PREFLIGHT)), script_defaults=given)
        recipe = script_recipe(defaults or {})
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    return Context(recipe, alone=True, script_defaults=given, explicit=set(given))


def context() -> Context:
    """The run's context, from anywhere in the script (a `train()` function, a callback): what
    `autospeed.init(...)` returned."""
    if _current is None:
        raise RuntimeError("autospeed: autospeed.context() before autospeed.init(...): call "
                           "ctx = autospeed.init(defaults=dict(...)) once, at the script's start")
    return _current
