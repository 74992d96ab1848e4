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
from typing import Any, Callable

import torch

from autospeed.outcome import Status, objective
from autospeed.recipe import Recipe
from autospeed.train.batch import as_trained, effective_batch, micro_batch_sizes
from autospeed.train.data import Batches, ValBatches
from autospeed.train.distributed import Replicas
from autospeed.train.environment import PeakMemory, environment
from autospeed.train.evaluate import EvaluationOutOfMemory, better, evaluate_once, is_oom
from autospeed.train.optimizers import build_optimizers, build_schedule
from autospeed.train.result import EvalEvent, TrainResult, wall_clock_origin
from autospeed.train.setup import (NOT_APPLICABLE, compile_mode, cross_entropy_loss, not_applied, pick_device,
                                   prepare_model, set_backend_knobs)
from autospeed.train.step import Clock, Stepper, autocast_only, forward_context
from autospeed.train.throughput import rates
from autospeed.workloads import Workload, load_workload

__all__ = ["EvalEvent", "TrainResult", "compile_mode", "pick_device", "train"]


def train(
    recipe: Recipe,
    workload: Workload | None = None,
    on_eval: Callable[[EvalEvent], bool | None] | None = None,
    num_threads: int | None = None,
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
    wall_start = time.perf_counter()
    before_entry_seconds, origin = wall_clock_origin()
    if num_threads:
        torch.set_num_threads(num_threads)
    workload = workload or load_workload(recipe.workload, recipe.workload_options)
    device = pick_device(recipe)
    clock = Clock(device)  # one clock over every attempt: time lost to an out-of-memory attempt is charged
    for micro in micro_batch_sizes(recipe):
        retry_seconds = clock.total
        trained = as_trained(recipe, micro)
        result, retry_smaller = _attempt(trained, workload, device, clock, on_eval, wall_start)
        result.micro_batch_retry_seconds = retry_seconds
        result.applied.update({"micro_batch_size": micro, "effective_batch": effective_batch(recipe), "lr": trained.lr})
        if not retry_smaller:
            break
    if result.wall_to_target_seconds is not None:  # measured from train() entry: move it to the origin
        result.wall_to_target_seconds += before_entry_seconds
    result.wall_clock_origin = origin
    return result


def _attempt(recipe: Recipe, workload: Workload, device: torch.device, clock: Clock,
             on_eval, wall_start: float) -> tuple[TrainResult, bool]:
    """One training run of `recipe` as trained (micro-batch and LR resolved, batch.as_trained), and
    whether it ran out of memory in a training step (where a smaller micro-batch may fit)."""
    target = recipe.resolved_target
    # Every run pays for its own compilation: without this, a reused process (a Ray
    # actor running many trials) would find the graphs of an earlier run cached in
    # memory and undercharge compiled recipes. Inductor's on-disk cache stays, as it
    # does for a user's next run on the same machine.
    torch.compiler.reset()
    torch.manual_seed(recipe.seed)  # every worker builds the same initial model
    replicas = Replicas.joined(recipe.workers)  # None for one worker: no process group at all
    # What really acted (docs/design.md "Honest figures"): workers from the process group that formed, and each
    # knob's value as it took effect, `not_applicable` where it cannot act here (setup.not_applied lists them)
    applied: dict[str, Any] = {"device": device.type, "workers": replicas.world_size if replicas else 1,
                               "ddp": replicas is not None,  # under DistributedDataParallel
                               "accumulation_steps": recipe.accumulation_steps,
                               # the default loss smooths labels; a workload's own loss decides for itself
                               "label_smoothing": recipe.label_smoothing if workload.loss is None else 0.0}
    set_backend_knobs(recipe, device, applied)
    peak = PeakMemory(device)  # this run's peak only, also in a reused process

    state = {"status": Status.NOT_REACHED, "tta": None, "best": None, "best_metrics": {}, "step": 0, "samples": 0,
             "evals": 0, "compile_seconds": 0.0, "first_step_seconds": 0.0, "error": None, "steps_per_epoch": 1,
             "clock_at_start": clock.total}
    history: list[dict[str, float]] = []
    retry_smaller = False
    try:
        train_model, eval_model = prepare_model(recipe, workload, device, applied, replicas)
        batches = Batches(recipe, workload, device, applied["channels_last"], rank=replicas.rank if replicas else 0,
                          world_size=replicas.world_size if replicas else 1)
        applied["data_loader"] = batches.applied_loader
        # the loader knobs act only on a DataLoader (not on device-resident data); pinned memory only on
        # host-to-GPU copies; prefetching and persistence only with loader worker processes
        applied["num_workers"] = 0 if batches.resident else recipe.num_workers
        applied["pin_memory"] = recipe.pin_memory and device.type == "cuda" and not batches.resident
        applied["prefetch_factor"] = recipe.prefetch_factor if applied["num_workers"] else NOT_APPLICABLE
        applied["persistent_workers"] = recipe.persistent_workers and applied["num_workers"] > 0
        state["steps_per_epoch"] = batches.steps_per_epoch
        val_batches = ValBatches(recipe, workload, device, applied["channels_last"])
        _train_loop(recipe, workload, device, train_model, eval_model, batches, val_batches,
                    clock, state, history, on_eval, wall_start, applied, peak, replicas)
    except Exception as e:  # every failure becomes a status the caller can act on
        if clock.started is not None:
            clock.stop()
        state["status"] = Status.OOM if is_oom(e) else Status.FAILED
        state["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        retry_smaller = state["status"] == Status.OOM and not isinstance(e, EvaluationOutOfMemory)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    train_seconds = clock.total
    samples_per_second = state["samples"] / train_seconds if train_seconds > 0 else 0.0
    applied.setdefault("data_loader", recipe.data_loader)
    applied.setdefault("autocast", {"bf16": "bfloat16", "fp16": "float16"}.get(recipe.precision, "none"))
    applied.setdefault("grad_scaler", recipe.precision == "fp16")
    applied["not_applied"] = not_applied(recipe, applied)  # the knobs set that did not act as set
    return TrainResult(
        status=state["status"], tta_seconds=state["tta"], target=target.model_dump(), best_value=state["best"],
        best_metrics=state["best_metrics"],
        objective=objective(state["status"], state["tta"], state["best"], target.value, recipe.max_train_seconds,
                            target.mode),
        train_seconds=train_seconds, wall_seconds=time.perf_counter() - wall_start,
        compile_seconds=state["compile_seconds"], first_step_seconds=state["first_step_seconds"],
        peak_memory_mb=peak.mb(),
        samples_per_second=samples_per_second,
        **rates(samples_per_second, workload, device, applied["workers"]),
        steps=state["step"], epochs_done=state["step"] / state["steps_per_epoch"],
        evaluations=state["evals"], applied=applied,
        environment={**environment(device), "workers": applied["workers"]},  # devices a TTA used (one each)
        error=state["error"], history=history, wall_to_target_seconds=state.get("wall_at_target"),
    ), retry_smaller


def _train_loop(recipe, workload, device, train_model, eval_model, batches, val_batches,
                clock, state, history, on_eval, wall_start, applied, peak, replicas=None) -> None:
    target = recipe.resolved_target
    optimizers = build_optimizers(recipe, train_model, applied)
    total_steps = max(1, math.ceil(recipe.epochs * batches.steps_per_epoch))
    eval_every = max(1, round(recipe.eval_every_epochs * batches.steps_per_epoch))
    schedulers = [build_schedule(recipe, o, total_steps, applied) for o in optimizers]
    loss_of = workload.loss or cross_entropy_loss(recipe.label_smoothing)
    # the knobs of one step, as a user's own loop gets them (autospeed.train.step)
    forward, attention = forward_context(recipe, device, applied)
    autocast = autocast_only(recipe, device)
    stepper = Stepper(recipe, device, applied, recipe.accumulation_steps)
    augment = None if batches.augmented_in_loader else workload.augment  # the loader's workers augmented
    applied["augment"] = "loader" if batches.augmented_in_loader else "device" if augment is not None else "none"
    k = recipe.accumulation_steps
    # Under DDP, micro-batches before the last of a step skip the gradient all-reduce (DDP's no_sync);
    # the last one averages the accumulated gradients over the workers.
    no_sync = train_model.no_sync if replicas is not None and k > 1 else None
    train_model.train()

    def forward_backward(batch) -> torch.Tensor:
        with forward():
            loss = loss_of(train_model, batch)
        stepper.backward(loss)
        return loss

    loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
    steps_since_eval, samples_since_eval, clock_at_last_eval = 0, 0, clock.total
    micro = 0
    clock.start()
    while True:
        for batch in batches.epoch():
            if augment is not None:
                batch = (augment(batch[0]), *batch[1:])
            if no_sync is not None and (micro + 1) % k:
                with no_sync():
                    loss = forward_backward(batch)
            else:
                loss = forward_backward(batch)
            loss_sum += loss.detach().float()
            micro += 1
            if micro % k:
                continue
            stepper.step(optimizers, schedulers)
            state["step"] += 1
            state["samples"] += batches.effective
            steps_since_eval += 1
            samples_since_eval += batches.effective
            if state["step"] == 1:
                # First step = compile (if any) + warm-up; synced so it is exact.
                clock.stop()
                state["first_step_seconds"] = clock.total - state["clock_at_start"]  # this attempt's
                state["compile_seconds"] = state["first_step_seconds"] if recipe.compile != "none" else 0.0
                clock.start()

            out_of_steps = state["step"] >= total_steps
            out_of_time = clock.peek() >= recipe.max_train_seconds
            if replicas is not None:  # the first worker out of budget ends the run for all
                out_of_time = replicas.any(out_of_time)
            if state["step"] % eval_every and not (out_of_steps or out_of_time):
                continue

            # ---- evaluation: off the train clock ----
            train_seconds = clock.stop()
            summed = loss_sum if replicas is None else replicas.mean(loss_sum)  # the global batch's loss
            train_loss = summed.item() / (steps_since_eval * k)
            values = evaluate_once(workload, eval_model, val_batches, autocast, attention.evaluation, replicas)
            if target.metric not in values:
                raise ValueError(f"workload {workload.name!r}: evaluate() returned {sorted(values)}, not the "
                                 f"target metric '{target.metric}'")
            state["evals"] += 1
            for name, v in values.items():
                m = workload.metrics.get(name)
                state["best_metrics"][name] = better(m.mode if m else "max", state["best_metrics"].get(name), v)
            state["best"] = state["best_metrics"][target.metric]
            reached = target.met(state["best"])
            interval = train_seconds - clock_at_last_eval
            samples_per_second = samples_since_eval / interval if interval > 0 else 0.0
            event = EvalEvent(
                step=state["step"], epoch=state["step"] / batches.steps_per_epoch, samples=state["samples"],
                train_seconds=train_seconds, wall_seconds=time.perf_counter() - wall_start,
                metrics=values, value=values[target.metric], best_value=state["best"], train_loss=train_loss,
                samples_per_second=samples_per_second,
                reached=reached, compile_seconds=state["compile_seconds"], peak_memory_mb=peak.mb(),
                objective=objective(Status.RUNNING, train_seconds if reached else None, state["best"],
                                    target.value, recipe.max_train_seconds, target.mode),
                best_metrics=dict(state["best_metrics"]),
                **rates(samples_per_second, workload, device, applied["workers"]),
            )
            history.append(event.flat())
            if not math.isfinite(train_loss):
                state["status"] = Status.DIVERGED
                state["error"] = f"train loss became {train_loss} by step {state['step']}"
                return
            if event.reached and state["tta"] is None:
                state["tta"] = train_seconds
                state["wall_at_target"] = event.wall_seconds  # since train() entry, this evaluation included
                state["status"] = Status.REACHED
            stop_requested = bool(on_eval(event)) if on_eval is not None else False
            if replicas is not None:
                stop_requested = replicas.any(stop_requested)
            if event.reached or out_of_steps or out_of_time:
                return
            if stop_requested:
                state["status"] = Status.STOPPED_EARLY
                return
            loss_sum.zero_()
            steps_since_eval, samples_since_eval, clock_at_last_eval = 0, 0, train_seconds
            clock.start()
