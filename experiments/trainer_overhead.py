"""What the trainer's bookkeeping costs: autospeed.train.trainer.train against a hand-written loop.

Both train the same mnist1d 1-D CNN on the same data, batch, optimizer (SGD,
Nesterov momentum, weight decay), seed and number of optimizer steps, with
fp32, no compile, the data resident on the device and one evaluation at the end
(off the clock for both). The hand loop is what a user would write in five lines:
shuffle, slice, forward, backward, step. The trainer adds its autocast and
gradient-scaler contexts (disabled in fp32), the LR scheduler, the on-device loss
sum, the budget check and the clock. Runs are interleaved (A B A B ...) so drift
on a shared machine hits both alike; the figure is the ratio of the medians of the
train-clock seconds. Goal: trainer <= 1.05x the hand loop.

Run:
    .venv/bin/python experiments/trainer_overhead.py                 # ~1-2 min on 2 CPU cores
    .venv/bin/python experiments/trainer_overhead.py --repeats 9 --batch-sizes 32 128 512
    .venv/bin/python experiments/trainer_overhead.py --out experiments/results/trainer_overhead.md

Timing takes the exclusive CPU lock (/tmp/cpu.lock) that the other benchmarks and
searches on this machine respect, so nothing else loads the cores meanwhile.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import torch
from torch import nn

from autospeed.recipe import Recipe
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_lock, emit_table, provenance  # noqa: E402

GOAL_RATIO = 1.05  # trainer train seconds / hand loop's, at most


def recipe_for(batch_size: int, epochs: float) -> Recipe:
    return Recipe(workload="mnist1d", target_accuracy=1.0, max_train_seconds=1e9, epochs=epochs,
                  eval_every_epochs=epochs, batch_size=batch_size, optimizer="sgd", lr=0.01, momentum=0.9,
                  weight_decay=5e-4, schedule="constant", precision="fp32", compile="none", device="cpu", seed=0)


def run_trainer(recipe: Recipe, workload) -> tuple[float, float, int]:
    """(train seconds, final val accuracy, optimizer steps) from autospeed's trainer."""
    result = train(recipe, workload)
    if result.status != "not_reached":
        raise RuntimeError(f"trainer run ended {result.status}: {result.error}")
    return result.train_seconds, result.best_val_accuracy, result.steps


def run_hand(recipe: Recipe, workload) -> tuple[float, float, int]:
    """The same training as a minimal PyTorch loop: (train seconds, final val accuracy, steps)."""
    torch.manual_seed(recipe.seed)
    model = workload.build_model()
    x, y = workload.train_x.contiguous(), workload.train_y
    opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum, nesterov=True,
                          weight_decay=recipe.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    b = recipe.batch_size
    steps_per_epoch = len(x) // b
    total_steps = math.ceil(recipe.epochs * steps_per_epoch)  # as the trainer counts them
    g = torch.Generator().manual_seed(recipe.seed)
    model.train()
    step = 0
    start = time.perf_counter()
    while step < total_steps:
        order = torch.randperm(len(x), generator=g)
        for i in range(steps_per_epoch):
            idx = order[i * b:(i + 1) * b]
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == total_steps:
                break
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        accuracy = (model(workload.val_x).argmax(1) == workload.val_y).float().mean().item()
    return seconds, accuracy, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-samples", type=int, default=25000, help="mnist1d size (80%% train)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--steps", type=int, default=600, help="optimizer steps per run (rounded to whole batches)")
    ap.add_argument("--repeats", type=int, default=7, help="runs of each loop per batch size (interleaved)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, all cores)")
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    workload = load_workload("mnist1d", {"num_samples": args.num_samples})  # generated/cached off the clock
    print(provenance(end=False), flush=True)
    rows = []
    with cpu_lock(exclusive=True):
        for b in args.batch_sizes:
            steps_per_epoch = len(workload.train_x) // b
            recipe = recipe_for(b, epochs=args.steps / steps_per_epoch)
            run_hand(recipe, workload), run_trainer(recipe, workload)  # warm-up: allocator, thread pool
            times = {"trainer": [], "hand": []}
            acc = {"trainer": [], "hand": []}
            steps = {}
            for _ in range(args.repeats):
                for name, fn in (("trainer", run_trainer), ("hand", run_hand)):
                    seconds, accuracy, n = fn(recipe, workload)
                    times[name].append(seconds)
                    acc[name].append(accuracy)
                    steps[name] = n
            if steps["trainer"] != steps["hand"]:
                raise RuntimeError(f"step counts differ: {steps}")
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append((b, steps["hand"], med["trainer"], min(times["trainer"]), max(times["trainer"]),
                         med["hand"], min(times["hand"]), max(times["hand"]), med["trainer"] / med["hand"],
                         statistics.median(acc["trainer"]), statistics.median(acc["hand"])))
            print(f"batch {b}: trainer {med['trainer']:.3f} s, hand {med['hand']:.3f} s, "
                  f"ratio {med['trainer'] / med['hand']:.3f}", flush=True)

    lines = [
        f"mnist1d num_samples={args.num_samples} ({len(workload.train_x)} train), fp32 eager, data on the device, "
        f"SGD Nesterov, {args.repeats} interleaved runs of each; train seconds (train clock, evaluation excluded)",
        "",
        "| batch | steps | trainer median s (min-max) | hand loop median s (min-max) | trainer / hand | "
        "val acc trainer / hand |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for b, n, tm, tmin, tmax, hm, hmin, hmax, ratio, at, ah in rows:
        lines.append(f"| {b} | {n} | {tm:.3f} ({tmin:.3f}-{tmax:.3f}) | {hm:.3f} ({hmin:.3f}-{hmax:.3f}) | "
                     f"**{ratio:.3f}x** | {at:.3f} / {ah:.3f} |")
    over = [str(b) for b, *_, ratio, _, _ in rows if ratio > GOAL_RATIO]
    differ = [str(b) for b, *_, at, ah in rows if abs(at - ah) > 1e-6]
    lines += ["", f"Goal: trainer <= {GOAL_RATIO:g}x the hand loop: "
              + (f"NOT met at batch {', '.join(over)}." if over else "met at every batch size.") + " "
              + (f"Validation accuracy differs at batch {', '.join(differ)}: the loops did not do the same work."
                 if differ else "Identical validation accuracy in both columns: the two loops did the same work, "
                                "step for step.")]
    emit_table("Trainer overhead vs a hand-written loop", lines, args.out)


if __name__ == "__main__":
    main()
