"""The trainer: train one recipe to its target and say, truthfully, how long it took.

Timing rules (docs/design.md "What is timed"):
  * the train clock starts right before the first training step, with data and
    model already built and on the device;
  * it includes compilation and warm-up (also recorded on their own:
    `compile_seconds`, `first_step_seconds`);
  * evaluation pauses it; `wall_seconds` counts everything;
  * on CUDA the clock is read only after `torch.cuda.synchronize()`;
  * `micro_batch_size: auto`: the train seconds of attempts that ran out of memory stay on
    the clock (the TTA pays for finding the micro-batch, as a user running `auto` would);
  * TTA = train seconds at the first evaluation that meets the target (any metric the
    workload reports, in its direction: `val_accuracy >= 0.95`, `val_loss <= 1.6`).

With `cooldown` (a wsd trial of a long-job search), the evaluation at the trial's cut (or every stable-phase
evaluation) also measures a cooldown branch of the run, off the train clock, and restores the run as it was
(autospeed.train.cooldown).

The trainer imports torch and the standard library only. Evaluations go out
through the `on_eval` callback; returning True from it stops the run (status
`stopped_early`).

A recipe with `workers: N > 1` runs in each of N processes of a torch.distributed group
(autospeed.train.distributed; Ray Train starts them): the model trains under DDP on this worker's
shard, rank 0 evaluates, and every worker sees the same evaluations and stops at the same step.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.train.applied import NOT_APPLICABLE, Applied, not_applied
from autospeed.train.batch import as_trained, effective_batch, micro_batch_sizes
from autospeed.train.cooldown import Cooldown, branch
from autospeed.train.data import Batches, ValBatches
from autospeed.train.distributed import Replicas, ddp_of
from autospeed.train.environment import PeakMemory
from autospeed.train.evaluate import EvaluationOutOfMemory, evaluate_once
from autospeed.train.optimizers import build_optimizers, build_schedule, decay_start_step
from autospeed.train.result import EvalEvent, TrainResult, wall_clock_origin
from autospeed.train.run_record import RunRecord
from autospeed.train.setup import autocast_name, cross_entropy_loss, pick_device, prepare_model, set_backend_knobs
from autospeed.train.step import Clock, Stepper, autocast_only, forward_context
from autospeed.train.throughput import rates
from autospeed.workloads import Workload, load_workload

__all__ = ["Cooldown", "EvalEvent", "TrainResult", "pick_device", "train"]

OnEval = Callable[[EvalEvent], "bool | None"]


def train(
    recipe: Recipe,
    workload: Workload | None = None,
    on_eval: OnEval | None = None,
    num_threads: int | None = None,
    cooldown: Cooldown | None = None,
) -> TrainResult:
    """Train `recipe` until it reaches its target, runs out of epochs or of budget.

    Never raises for a run that goes wrong: OOM, divergence and other errors come
    back as the result's status (with `error`), so a search can learn from them.

    `micro_batch_size: auto`: a training step that runs out of memory restarts the run from a
    clean state (model, optimizer, data order and seed as at the start) with half the
    micro-batch and twice the accumulation (batch.micro_batch_sizes). The failed attempts'
    train-clock time stays on the clock, so the TTA charges the search for a micro-batch
    (`micro_batch_retry_seconds` says how much); out of memory at the smallest micro-batch,
    or in evaluation (whose batch the micro-batch does not change), ends the run `oom`.

    `wall_to_target_seconds` counts from this process's start on its first run, else from this call
    (autospeed.train.result says which when; `wall_clock_origin` names it).
    """
    wall = (time.perf_counter(), *wall_clock_origin())  # (this call, seconds from the origin to it, its name)
    if num_threads:
        torch.set_num_threads(num_threads)
    workload = workload or load_workload(recipe.workload, recipe.workload_options)
    device = pick_device(recipe)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # cuda:N: its kernels, streams and compiled graphs on that GPU
    clock = Clock(device)  # one clock over every attempt: time lost to an out-of-memory attempt is charged
    for micro in micro_batch_sizes(recipe):
        retry_seconds = clock.total
        trained = as_trained(recipe, micro)
        result, retry_smaller = _attempt(trained, workload, device, clock, on_eval, wall, cooldown)
        result.micro_batch_retry_seconds = retry_seconds
        result.applied.update({"micro_batch_size": micro, "effective_batch": effective_batch(recipe), "lr": trained.lr})
        if not retry_smaller:
            break
    return result


def _attempt(recipe: Recipe, workload: Workload, device: torch.device, clock: Clock, on_eval: OnEval | None,
             wall: tuple[float, float, str], cooldown: Cooldown | None = None) -> tuple[TrainResult, bool]:
    """One training run of `recipe` as trained (micro-batch and LR resolved, batch.as_trained), and
    whether it ran out of memory in a training step (where a smaller micro-batch may fit)."""
    # Every run pays for its own compilation: without this, a reused process (a Ray
    # actor running many trials) would find the graphs of an earlier run cached in
    # memory and undercharge compiled recipes. Inductor's on-disk cache stays, as it
    # does for a user's next run on the same machine.
    torch.compiler.reset()
    torch.manual_seed(recipe.seed)  # every worker builds the same initial model
    replicas = Replicas.joined(recipe.workers)  # None for one worker: no process group at all
    # What really acted (docs/design.md "Honest figures"; autospeed.train.applied names each field): workers from the
    # process group that formed, and each knob's value as it took effect, `not_applicable` where it cannot act here
    applied: Applied = {"device": device.type, "workers": replicas.world_size if replicas else 1,
                        "ddp": replicas is not None,  # under DistributedDataParallel
                        "accumulation_steps": recipe.accumulation_steps,
                        # the default loss smooths labels; a workload's own loss decides for itself
                        "label_smoothing": recipe.label_smoothing if workload.loss is None else 0.0}
    set_backend_knobs(recipe, device, applied)
    record = RunRecord(recipe, device, clock, PeakMemory(device), *wall,  # this run's peak, also in a reused process
                       mode_of=lambda name: m.mode if (m := workload.metrics.get(name)) else "max",
                       rates=lambda samples_per_second: rates(samples_per_second, workload, device, applied["workers"]))
    retry_smaller = False
    try:
        _train(recipe, workload, device, replicas, applied, record, on_eval, cooldown)
    except Exception as e:  # every failure becomes a status the caller can act on
        record.failed(e)
        retry_smaller = record.status == Status.OOM and not isinstance(e, EvaluationOutOfMemory)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    applied.setdefault("data_loader", recipe.data_loader)
    applied.setdefault("autocast", autocast_name(recipe.precision))
    applied.setdefault("grad_scaler", recipe.precision == "fp16")
    applied["not_applied"] = not_applied(recipe, applied)  # the knobs set that did not act as set
    return record.result(applied), retry_smaller


def _train(recipe: Recipe, workload: Workload, device: torch.device, replicas: Replicas | None,
           applied: Applied, record: RunRecord, on_eval: OnEval | None, cooldown: Cooldown | None) -> None:
    """Build the run (model, data, optimizers, one step's knobs) and train it until an evaluation ends it."""
    train_model, eval_model = prepare_model(recipe, workload, device, applied, replicas)
    batches = _batches(recipe, workload, device, replicas, applied)
    record.steps_per_epoch = batches.steps_per_epoch
    val_batches = ValBatches(recipe, workload, device, applied["channels_last"])
    optimizers = build_optimizers(recipe, train_model, applied)
    total_steps = max(1, math.ceil(recipe.epochs * batches.steps_per_epoch))
    eval_every = max(1, round(recipe.eval_every_epochs * batches.steps_per_epoch))
    schedulers = [build_schedule(recipe, o, total_steps, applied) for o in optimizers]
    loss_of = workload.loss or cross_entropy_loss(recipe.label_smoothing)
    # the knobs of one step, as a user's own loop gets them (autospeed.train.step)
    forward, attention = forward_context(recipe, device, applied)
    autocast = autocast_only(recipe, device)  # the evaluation's
    stepper = Stepper(recipe, device, applied, recipe.accumulation_steps)
    compiled = applied["compile"] != "none"
    augment = None if batches.augmented_in_loader else workload.augment  # the loader's workers augmented
    applied["augment"] = "loader" if batches.augmented_in_loader else "device" if augment is not None else "none"
    k = recipe.accumulation_steps
    ddp = ddp_of(train_model) if k > 1 else None  # only a step's last micro-batch all-reduces (Stepper)

    def evaluate() -> dict[str, float]:
        values = evaluate_once(workload, eval_model, val_batches, autocast, attention.evaluation, replicas)
        if record.target.metric not in values:
            raise ValueError(f"workload {workload.name!r}: evaluate() returned {sorted(values)}, not the "
                             f"target metric '{record.target.metric}'")
        return values

    def backward(batch) -> torch.Tensor:
        """One micro-batch's forward and backward pass; its loss."""
        if augment is not None:
            batch = (augment(batch[0]), *batch[1:])
        with forward():
            loss = loss_of(train_model, batch)
        stepper.backward(loss)
        return loss

    decay_start = decay_start_step(recipe, total_steps)

    def cooled(values: dict[str, float], train_loss: float, cut: bool) -> dict[str, float] | None:
        """A cooldown branch's fields at this evaluation, where one is wanted (train.cooldown), else None."""
        if (cooldown is None or replicas is not None or not cooldown.wanted(record.steps, decay_start, cut)
                or not math.isfinite(train_loss) or record.target.met(values[record.target.metric])):
            return None
        out = branch(cooldown, record.steps, model=eval_model, optimizers=optimizers, stepper=stepper,
                     micro_batches=batches.branch(recipe.seed * 1_000_003 + record.steps), backward=backward,
                     evaluate=evaluate, device=device)
        if isinstance(out, str):
            applied["cooldown_failed"] = out  # the last branch that failed; the ranking then uses the typical factor
            return None
        return out

    train_model.train()
    loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
    record.clock.start()
    while True:
        for batch in batches.epoch():
            last = stepper.next_micro_batch(ddp)
            loss_sum += backward(batch).detach().float()
            if not last:
                continue
            stepper.step(optimizers, schedulers)
            record.stepped(batches.effective, compiled)
            out_of_steps = record.steps >= total_steps
            out_of_time = record.clock.peek() >= recipe.max_train_seconds
            if replicas is not None:  # the first worker out of budget ends the run for all
                out_of_time = replicas.any(out_of_time)
            if record.steps % eval_every and not (out_of_steps or out_of_time):
                continue
            # ---- evaluation: off the train clock ----
            record.clock.stop()
            summed = loss_sum if replicas is None else replicas.mean(loss_sum)  # the global batch's loss
            train_loss = summed.item() / (record.steps_since_eval * k)
            values = evaluate()
            branched = cooled(values, train_loss, cut=out_of_time and not out_of_steps)
            if _evaluation_ends_run(record, values, train_loss, replicas, on_eval, out_of_steps or out_of_time,
                                    branched):
                return
            loss_sum.zero_()
            record.clock.start()


def _batches(recipe: Recipe, workload: Workload, device: torch.device, replicas: Replicas | None,
             applied: Applied) -> Batches:
    """This worker's training batches, and the loader knobs as they act: only on a DataLoader (not on
    device-resident data); pinned memory only on host-to-GPU copies; prefetching and persistence only with
    loader worker processes."""
    batches = Batches(recipe, workload, device, applied["channels_last"], rank=replicas.rank if replicas else 0,
                      world_size=replicas.world_size if replicas else 1)
    applied["data_loader"] = batches.applied_loader
    applied["num_workers"] = 0 if batches.resident else recipe.num_workers
    applied["pin_memory"] = recipe.pin_memory and device.type == "cuda" and not batches.resident
    applied["prefetch_factor"] = recipe.prefetch_factor if applied["num_workers"] else NOT_APPLICABLE
    applied["persistent_workers"] = recipe.persistent_workers and applied["num_workers"] > 0
    return batches


def _evaluation_ends_run(record: RunRecord, values: dict[str, float], train_loss: float,
                         replicas: Replicas | None, on_eval: OnEval | None, out_of_steps_or_time: bool,
                         cooldown: dict[str, float] | None = None) -> bool:
    """One evaluation recorded (with the cooldown branch taken at it) and sent to `on_eval`; whether it ends the
    run: diverged, the target met, the steps or the budget spent, or `on_eval` asking to stop."""
    event = record.evaluation(values, train_loss, cooldown)
    if not math.isfinite(train_loss):
        record.diverged(train_loss)
        return True
    reached = record.met_target(event)
    stop_requested = bool(on_eval(event)) if on_eval is not None else False
    if replicas is not None:
        stop_requested = replicas.any(stop_requested)
    if reached or out_of_steps_or_time:
        return True
    if stop_requested:
        record.stopped_early()
    return stop_requested
