"""Data-parallel scaling of one recipe: TTA and samples/s with 1 and N workers, side by side.

The same recipe runs with `workers: 1` (autospeed's ordinary single-process trainer, all cores or
one GPU) and with `workers: N` (Ray Train workers under torch DDP: gloo splitting the same cores on
CPU, NCCL with one GPU per worker), interleaved (1, N, 1, N, ... with a new seed per repeat) so
drift on a shared machine hits all alike. Weak scaling by default: every worker keeps the recipe's
micro-batch, so N workers train with N times the global batch (`--strong`: the global batch stays,
each worker takes 1/N of it). Reported per worker count, as medians over the repeats:
  - TTA (train clock of rank 0, docs/design.md "What is timed") and TTA ratio = TTA(1) / TTA(N);
  - samples/s over the whole run on the train clock (all workers' samples, first step included);
  - scaling efficiency = samples/s(N) / (N x samples/s(1)): 1.0 is perfect, and the speed-up per
    device a user pays for. On CPU the N workers share the one worker's cores, so there "per
    device" means per process on the same cores and efficiency near 1/N is expected.
Ray's start-up and the Train workers' start are off the clock (wall time is not reported).

Run:
    .venv/bin/python experiments/scaling.py --workload digits --repeats 1              # smoke, ~2 min
    .venv/bin/python experiments/scaling.py --repeats 5 --out experiments/results/scaling_cpu.md
    python experiments/scaling.py --device cuda --workers 1 2 --workload synthetic \
        --workload-options '{"num_samples": 50000, "image_size": 32}' --out experiments/results/gpu/scaling_gpu.md

Timing takes the exclusive CPU lock (/tmp/cpu.lock) that the other benchmarks and searches on
this machine respect.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_lock, emit_table, provenance  # noqa: E402

from autospeed import _ray  # noqa: E402
from autospeed.parallel.launch import train_on_workers  # noqa: E402
from autospeed.recipe import Recipe  # noqa: E402
from autospeed.train.trainer import pick_device, train  # noqa: E402
from autospeed.workloads import load_workload  # noqa: E402


def run_once(recipe: Recipe, workers: int, strong: bool, cpus: int, gpus: bool) -> dict:
    """One run of `recipe` on `workers` workers: TTA, samples/s and status."""
    batch = recipe.batch_size // workers if strong else recipe.batch_size
    recipe = recipe.model_copy(update={"workers": workers, "batch_size": batch})
    if workers == 1:
        result = train(recipe, num_threads=None if gpus else cpus)
    else:
        result = train_on_workers(recipe, cpus=cpus, gpus=gpus)
    return {"tta_seconds": result.tta_seconds, "samples_per_second": result.samples_per_second,
            "status": str(result.status), "error": result.error}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mnist1d", help="built-in workload or package.module:factory")
    ap.add_argument("--workload-options", type=json.loads, default=None,
                    help="workload options as JSON (default for mnist1d: {\"num_samples\": 25000})")
    ap.add_argument("--target-accuracy", type=float, default=0.9)
    ap.add_argument("--batch-size", type=int, default=64, help="micro-batch per worker (--strong: global batch)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--epochs", type=float, default=20)
    ap.add_argument("--max-train-seconds", type=float, default=120)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (1 is the reference)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats, a new seed each")
    ap.add_argument("--strong", action="store_true", help="keep the global batch (each worker takes 1/N)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    args = ap.parse_args()
    if 1 not in args.workers:
        ap.error("--workers must include 1, the reference")

    options = args.workload_options if args.workload_options is not None else (
        {"num_samples": 25000} if args.workload == "mnist1d" else {})
    load_workload(args.workload, options)  # generated/cached off the clock, before any worker starts
    base = Recipe(workload=args.workload, workload_options=options, target_accuracy=args.target_accuracy,
                  max_train_seconds=args.max_train_seconds, epochs=args.epochs, eval_every_epochs=0.5,
                  batch_size=args.batch_size, lr=args.lr, device=args.device)
    device = pick_device(base)
    gpus = device.type == "cuda"
    cpus = os.cpu_count() or 1
    print(provenance(device.type, end=False), flush=True)
    ray_needed = any(n > 1 for n in args.workers)  # `--workers 1` alone (a smoke run) trains without Ray
    if ray_needed:
        _ray.quiet_ray()
        _ray.start_ray(None, verbose=False)  # once: the workers of every run start inside it, off the clock
    runs: dict[int, list[dict]] = {n: [] for n in args.workers}
    try:
        with cpu_lock(exclusive=True):
            for r in range(args.repeats):
                for n in args.workers:
                    m = run_once(base.model_copy(update={"seed": r}), n, args.strong, cpus, gpus)
                    runs[n].append(m)
                    tta = f"{m['tta_seconds']:.2f} s" if m["tta_seconds"] is not None else m["status"]
                    print(f"repeat {r + 1}/{args.repeats}  {n} worker(s)  TTA {tta}  "
                          f"{m['samples_per_second']:,.0f} samples/s" + (f"  {m['error']}" if m["error"] else ""),
                          flush=True)
    finally:
        if ray_needed:
            _ray.stop_ray()

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    one_tta = median(m["tta_seconds"] for m in runs[1])
    one_rate = median(m["samples_per_second"] for m in runs[1])
    unit = "GPU" if gpus else f"process sharing {cpus} CPU cores"
    lines = [
        f"{args.workload} {json.dumps(options)}, target val_accuracy >= {args.target_accuracy}, lr {args.lr}, "
        f"{'global' if args.strong else 'per-worker'} batch {args.batch_size}, device {device.type} "
        f"(a worker = one {unit}); {args.repeats} interleaved repeats (seed = repeat); medians; TTA on rank 0's "
        f"train clock; samples/s = all workers' samples / train seconds (first step included); "
        f"efficiency = samples/s(N) / (N x samples/s(1)); TTA ratio = TTA(1) / TTA(N)",
        "",
        "| workers | reached | TTA s (median) | TTA ratio vs 1 | samples/s (median) | scaling efficiency |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in args.workers:
        ms = runs[n]
        tta, rate = median(m["tta_seconds"] for m in ms), median(m["samples_per_second"] for m in ms)
        reached = sum(m["status"] == "reached" for m in ms)
        ratio = f"**{one_tta / tta:.2f}x**" if tta and one_tta else "-"
        efficiency = f"{rate / (n * one_rate):.2f}" if rate and one_rate else "-"
        lines.append(f"| {n} | {reached}/{len(ms)} | {f'{tta:.2f}' if tta else '-'} | {ratio} | "
                     f"{rate:,.0f} | {efficiency} |")
    emit_table(f"Data-parallel scaling ({args.workload}, {device.type})", lines, args.out, device.type)


if __name__ == "__main__":
    main()
