"""The trainer: train one recipe to its target and say, truthfully, how long it took.

Timing rules (DESIGN.md "What is timed"):
  * the train clock starts right before the first training step, with data and
    model already built and on the device;
  * it includes compilation and warm-up (also recorded on their own:
    `compile_seconds`, `first_step_seconds`);
  * evaluation pauses it; `wall_seconds` counts everything;
  * on CUDA the clock is read only after `torch.cuda.synchronize()`;
  * TTA = train seconds at the first evaluation with accuracy >= target.

The trainer imports torch and the standard library only. Evaluations go out
through the `on_eval` callback; returning True from it stops the run (status
`stopped_early`).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from autospeed.environment import PeakMemory, environment
from autospeed.outcome import Status, objective
from autospeed.recipe import Recipe
from autospeed.workloads import Workload, load_workload

EVAL_BATCH_SIZE = 1024


@dataclass
class EvalEvent:
    """One evaluation, as sent to `on_eval`. Seconds are on the train clock."""

    step: int  # optimizer steps so far
    epoch: float
    samples: int  # training samples seen so far
    train_seconds: float
    wall_seconds: float
    val_accuracy: float
    best_val_accuracy: float
    train_loss: float  # mean over the steps since the previous evaluation
    samples_per_second: float  # over the steps since the previous evaluation
    reached: bool  # best_val_accuracy >= target
    compile_seconds: float  # so far (all of it is in the first step)
    peak_memory_mb: float | None  # so far (None where it cannot be measured per run)
    objective: float  # the censored objective if the run ended now (outcome.objective)


@dataclass
class TrainResult:
    """The result object of DESIGN.md "Result of one training run"."""

    status: Status
    tta_seconds: float | None
    best_val_accuracy: float
    objective: float  # the censored objective of this outcome (outcome.objective)
    train_seconds: float
    wall_seconds: float
    compile_seconds: float
    first_step_seconds: float
    peak_memory_mb: float | None  # this run's peak (None where it cannot be measured per run)
    samples_per_second: float
    steps: int
    epochs_done: float
    evaluations: int
    applied: dict[str, Any]
    environment: dict[str, Any]
    error: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}


class _Checkpointed(nn.Module):
    """Recompute this block's activations in the backward pass."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.inner, x, use_reentrant=False)


class _Clock:
    """Train clock: runs only while training; syncs CUDA before every reading."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.total = 0.0
        self.started: float | None = None

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self) -> None:
        self.started = self._now()

    def stop(self) -> float:
        self.total += self._now() - self.started
        self.started = None
        return self.total

    def peek(self) -> float:
        """Approximate running total without a sync (for the budget check each step)."""
        return self.total + (time.perf_counter() - self.started if self.started is not None else 0.0)


def pick_device(recipe: Recipe) -> torch.device:
    if recipe.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("recipe asks for device: cuda but no CUDA device is visible")
    if recipe.device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def _set_backend_knobs(recipe: Recipe, device: torch.device, applied: dict[str, Any]) -> None:
    cuda = device.type == "cuda"
    if cuda:
        tf32 = recipe.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = recipe.cudnn_benchmark
    applied["tf32"] = cuda and recipe.precision == "tf32"
    applied["cudnn_benchmark"] = cuda and recipe.cudnn_benchmark


def _autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def build_optimizer(recipe: Recipe, model: nn.Module) -> torch.optim.Optimizer:
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                               nesterov=recipe.momentum > 0, weight_decay=recipe.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(recipe.momentum, 0.999),
                             weight_decay=recipe.weight_decay)


def build_schedule(recipe: Recipe, optimizer: torch.optim.Optimizer, total_steps: int):
    """torch's own schedulers, stepped once per optimizer step over `total_steps`."""
    sched = torch.optim.lr_scheduler
    if recipe.schedule == "onecycle":
        return sched.OneCycleLR(optimizer, max_lr=recipe.lr, total_steps=max(total_steps, 2))
    warmup = int(recipe.warmup_fraction * total_steps)
    rest = max(total_steps - warmup, 1)
    main = {
        "constant": lambda: sched.ConstantLR(optimizer, factor=1.0, total_iters=0),
        "cosine": lambda: sched.CosineAnnealingLR(optimizer, T_max=rest),
        "linear": lambda: sched.LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=rest),
    }[recipe.schedule]()
    if warmup == 0:
        return main
    ramp = sched.LinearLR(optimizer, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup)
    return sched.SequentialLR(optimizer, [ramp, main], milestones=[warmup])


# Compile modes that capture CUDA graphs, and the same mode without them. CUDA graphs cannot accumulate
# gradients over micro-batches: the first micro-batch's gradients are outputs of the backward graph, which
# its next replay overwrites ("accessing tensor output of CUDAGraphs that has been overwritten by a
# subsequent run", pytorch/pytorch#169545, seen on an H100 with torch 2.11). With accumulation on CUDA the
# trainer compiles without CUDA graphs and records the mode it used in `applied["compile"]`.
_WITHOUT_CUDA_GRAPHS = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def compile_mode(recipe: Recipe, device: torch.device) -> str:
    """The torch.compile mode the trainer uses for `recipe` on `device` ("none": eager)."""
    if device.type == "cuda" and recipe.accumulation_steps > 1:
        return _WITHOUT_CUDA_GRAPHS.get(recipe.compile, recipe.compile)
    return recipe.compile


def prepare_model(recipe: Recipe, workload: Workload, device: torch.device, applied: dict[str, Any]):
    """Build the model with the knobs applied; return (model for training, model for eval)."""
    model = workload.build_model()
    blocks = getattr(model, "checkpoint_blocks", None)
    applied["activation_checkpointing"] = bool(recipe.activation_checkpointing and blocks is not None)
    if applied["activation_checkpointing"]:
        for name, block in list(blocks.named_children()):
            setattr(blocks, name, _Checkpointed(block))
    channels_last = recipe.channels_last and workload.images and device.type == "cuda"
    model = model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    applied["channels_last"] = channels_last
    mode = compile_mode(recipe, device)
    train_model = model if mode == "none" else torch.compile(model, mode=mode)
    applied["compile"] = mode
    # Evaluation runs the eager module (same parameters): off the train clock, and
    # it spares the compiled graph a recompile for eval mode and odd batch sizes.
    return train_model, model


class _Batches:
    """Yields training micro-batches on the device, one epoch at a time.

    `device` keeps the whole dataset on the device and slices shuffled batches
    there; `dataloader` uses torch's DataLoader with the recipe's worker knobs.
    Both drop the last incomplete effective batch, so every optimizer step sees
    batch_size x accumulation_steps samples.
    """

    def __init__(self, recipe: Recipe, workload: Workload, device: torch.device, channels_last: bool):
        self.recipe, self.device, self.channels_last = recipe, device, channels_last
        self.effective = recipe.batch_size * recipe.accumulation_steps
        self.n = len(workload.train_x)
        if self.effective > self.n:
            raise ValueError(f"batch_size x accumulation_steps = {self.effective} exceeds the "
                             f"{self.n} training samples; lower batch_size or accumulation_steps")
        self.steps_per_epoch = self.n // self.effective
        self.generator = torch.Generator().manual_seed(recipe.seed)
        self.non_blocking = recipe.pin_memory and device.type == "cuda"  # pinned host memory copies async
        if recipe.data_loader == "device":
            self.x, self.y = workload.train_x.to(device), workload.train_y.to(device)
        else:
            dataset = torch.utils.data.TensorDataset(workload.train_x, workload.train_y)
            workers = recipe.num_workers
            self.loader = torch.utils.data.DataLoader(
                dataset, batch_size=recipe.batch_size, shuffle=True, drop_last=True, generator=self.generator,
                num_workers=workers, pin_memory=self.non_blocking,
                prefetch_factor=recipe.prefetch_factor if workers > 0 else None,
                persistent_workers=recipe.persistent_workers and workers > 0)

    def _layout(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def epoch(self):
        usable = self.steps_per_epoch * self.effective
        if self.recipe.data_loader == "device":
            order = torch.randperm(self.n, generator=self.generator)[:usable].to(self.device)
            for start in range(0, usable, self.recipe.batch_size):
                idx = order[start:start + self.recipe.batch_size]
                yield self._layout(self.x[idx]), self.y[idx]  # already on the device: no copy per step
        else:
            for i, (x, y) in enumerate(self.loader):
                if i * self.recipe.batch_size >= usable:
                    break
                yield (self._layout(x.to(self.device, non_blocking=self.non_blocking)),
                       y.to(self.device, non_blocking=self.non_blocking))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast_dtype, channels_last: bool) -> float:
    """Top-1 accuracy on (x, y), both already on the device."""
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, len(x), EVAL_BATCH_SIZE):
        xb = x[start:start + EVAL_BATCH_SIZE]
        if channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(xb)
        correct += (logits.argmax(1) == y[start:start + EVAL_BATCH_SIZE]).sum()
    model.train(was_training)
    return correct.item() / len(x)


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def train(
    recipe: Recipe,
    workload: Workload | None = None,
    on_eval: Callable[[EvalEvent], bool | None] | None = None,
    num_threads: int | None = None,
) -> TrainResult:
    """Train `recipe` until it reaches its target, runs out of epochs or of budget.

    Never raises for a run that goes wrong: OOM, divergence and other errors come
    back as the result's status (with `error`), so a search can learn from them.
    """
    wall_start = time.perf_counter()
    if num_threads:
        torch.set_num_threads(num_threads)
    workload = workload or load_workload(recipe.workload, recipe.workload_options)
    # Every run pays for its own compilation: without this, a reused process (a Ray
    # actor running many trials) would find the graphs of an earlier run cached in
    # memory and undercharge compiled recipes. Inductor's on-disk cache stays, as it
    # does for a user's next run on the same machine.
    torch.compiler.reset()
    torch.manual_seed(recipe.seed)
    device = pick_device(recipe)
    applied: dict[str, Any] = {"device": device.type, "precision": recipe.precision,
                               "data_loader": recipe.data_loader, "accumulation_steps": recipe.accumulation_steps,
                               # pinned memory only helps host-to-GPU copies; onecycle has its own warm-up
                               "pin_memory": recipe.pin_memory and recipe.data_loader == "dataloader"
                               and device.type == "cuda",
                               "warmup_fraction": 0.0 if recipe.schedule == "onecycle" else recipe.warmup_fraction}
    _set_backend_knobs(recipe, device, applied)
    peak = PeakMemory(device)  # this run's peak only, also in a reused process

    state = {"status": Status.NOT_REACHED, "tta": None, "best": 0.0, "step": 0, "samples": 0, "evals": 0,
             "compile_seconds": 0.0, "first_step_seconds": 0.0, "error": None, "steps_per_epoch": 1}
    history: list[dict[str, float]] = []
    clock = _Clock(device)
    try:
        train_model, eval_model = prepare_model(recipe, workload, device, applied)
        batches = _Batches(recipe, workload, device, applied["channels_last"])
        state["steps_per_epoch"] = batches.steps_per_epoch
        val_x, val_y = workload.val_x.to(device), workload.val_y.to(device)
        _train_loop(recipe, workload, device, train_model, eval_model, batches, val_x, val_y,
                    clock, state, history, on_eval, wall_start, applied, peak)
    except Exception as e:  # every failure becomes a status the caller can act on
        if clock.started is not None:
            clock.stop()
        state["status"] = Status.OOM if _is_oom(e) else Status.FAILED
        state["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if device.type == "cuda":
            torch.cuda.empty_cache()

    train_seconds = clock.total
    applied["autocast"] = {"bf16": "bfloat16", "fp16": "float16"}.get(recipe.precision, "none")
    applied["grad_scaler"] = recipe.precision == "fp16"
    return TrainResult(
        status=state["status"], tta_seconds=state["tta"], best_val_accuracy=state["best"],
        objective=objective(state["status"], state["tta"], state["best"], recipe.target_accuracy,
                            recipe.max_train_seconds),
        train_seconds=train_seconds, wall_seconds=time.perf_counter() - wall_start,
        compile_seconds=state["compile_seconds"], first_step_seconds=state["first_step_seconds"],
        peak_memory_mb=peak.mb(),
        samples_per_second=state["samples"] / train_seconds if train_seconds > 0 else 0.0,
        steps=state["step"], epochs_done=state["step"] / state["steps_per_epoch"],
        evaluations=state["evals"], applied=applied, environment=environment(device),
        error=state["error"], history=history,
    )


def _train_loop(recipe, workload, device, train_model, eval_model, batches, val_x, val_y,
                clock, state, history, on_eval, wall_start, applied, peak) -> None:
    autocast_dtype = _autocast_dtype(recipe.precision)
    optimizer = build_optimizer(recipe, train_model)
    total_steps = max(1, math.ceil(recipe.epochs * batches.steps_per_epoch))
    eval_every = max(1, round(recipe.eval_every_epochs * batches.steps_per_epoch))
    scheduler = build_schedule(recipe, optimizer, total_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    loss_fn = nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
    k = recipe.accumulation_steps
    # The hot loop pays only for the knobs in use: no autocast context in fp32/tf32
    # and no loss division without accumulation (experiments/trainer_overhead.py).
    if autocast_dtype is None:
        autocast = contextlib.nullcontext
    else:
        def autocast():
            return torch.autocast(device.type, dtype=autocast_dtype)
    train_model.train()

    loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
    steps_since_eval, samples_since_eval, clock_at_last_eval = 0, 0, 0.0
    micro = 0
    clock.start()
    while True:
        for x, y in batches.epoch():
            if workload.augment is not None:
                x = workload.augment(x)
            with autocast():
                loss = loss_fn(train_model(x), y)
            # Mean over micro-batches: k steps of B give the same update as one of B*k.
            scaler.scale(loss / k if k > 1 else loss).backward()
            loss_sum += loss.detach().float()
            micro += 1
            if micro % k:
                continue
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            state["step"] += 1
            state["samples"] += batches.effective
            steps_since_eval += 1
            samples_since_eval += batches.effective
            if state["step"] == 1:
                # First step = compile (if any) + warm-up; synced so it is exact.
                clock.stop()
                state["first_step_seconds"] = clock.total
                state["compile_seconds"] = clock.total if recipe.compile != "none" else 0.0
                clock.start()

            out_of_steps = state["step"] >= total_steps
            out_of_time = clock.peek() >= recipe.max_train_seconds
            if state["step"] % eval_every and not (out_of_steps or out_of_time):
                continue

            # ---- evaluation: off the train clock ----
            train_seconds = clock.stop()
            train_loss = loss_sum.item() / (steps_since_eval * k)
            accuracy = evaluate(eval_model, val_x, val_y, autocast_dtype, applied["channels_last"])
            state["evals"] += 1
            state["best"] = max(state["best"], accuracy)
            interval = train_seconds - clock_at_last_eval
            event = EvalEvent(
                step=state["step"], epoch=state["step"] / batches.steps_per_epoch, samples=state["samples"],
                train_seconds=train_seconds, wall_seconds=time.perf_counter() - wall_start,
                val_accuracy=accuracy, best_val_accuracy=state["best"], train_loss=train_loss,
                samples_per_second=samples_since_eval / interval if interval > 0 else 0.0,
                reached=state["best"] >= recipe.target_accuracy,
                compile_seconds=state["compile_seconds"], peak_memory_mb=peak.mb(),
                objective=objective(Status.RUNNING, train_seconds if state["best"] >= recipe.target_accuracy else None,
                                    state["best"], recipe.target_accuracy, recipe.max_train_seconds),
            )
            history.append({k_: v for k_, v in asdict(event).items() if k_ != "reached"})
            if not math.isfinite(train_loss):
                state["status"] = Status.DIVERGED
                state["error"] = f"train loss became {train_loss} by step {state['step']}"
                return
            if event.reached and state["tta"] is None:
                state["tta"] = train_seconds
                state["status"] = Status.REACHED
            stop_requested = bool(on_eval(event)) if on_eval is not None else False
            if event.reached or out_of_steps or out_of_time:
                return
            if stop_requested:
                state["status"] = Status.STOPPED_EARLY
                return
            loss_sum.zero_()
            steps_since_eval, samples_since_eval, clock_at_last_eval = 0, 0, train_seconds
            clock.start()
