"""Throughput of each speed knob relative to fp32 eager, measured side by side.

One workload (`--workload mnist1d`, its 1-D CNN; `--workload lm`, the byte-level GPT; or the
GPU-scale `resnet` and `gpt`, whose baselines are fp32 eager as people write them: a DataLoader with
4 workers for the images, AdamW for the GPT, which also reports tokens/s and, on a GPU, MFU),
one knob changed at a time from the baseline (mnist1d: fp32, no compile, SGD, batch 128,
data on the device, no accumulation; lm: fp32, no compile, AdamW with torch's default
implementation, attention backend chosen by torch, batch 32).
Each run is autospeed's own trainer with two evaluations: the first after
`--steps` optimizer steps (warm-up, and compilation where asked), the second
after `--steps` more. Steady-state throughput is that second interval's
samples/s on the train clock (evaluation excluded); compile seconds are the
first step's time for compiled runs. Runs are interleaved (every variant once
per round, `--rounds` rounds) so drift on a shared machine hits all alike; each
variant's ratio is the median over rounds of (variant / baseline in the same
round). Knobs that are no-ops on a CPU (tf32, channels_last, cudnn_benchmark)
are measured too, to show they cost nothing, and `applied` is printed.

Run:
    .venv/bin/python experiments/knobs.py                       # ~3 min on 2 CPU cores
    .venv/bin/python experiments/knobs.py --rounds 5 --steps 200 --out experiments/results/knobs_cpu.md
    python experiments/knobs.py --device cuda --workload synthetic \
        --workload-options '{"num_samples": 50000, "image_size": 32, "noise": 6.0}' \
        --out experiments/results/knobs_gpu.md
    .venv/bin/python experiments/knobs.py --workload lm --out experiments/results/knobs_lm_cpu.md
    .venv/bin/python experiments/knobs.py --workload lm --device cuda --out experiments/results/knobs_lm_gpu.md

On a GPU the image workloads (mnist1d, synthetic) add the variants only a GPU can show:
the max-autotune compile modes, a pinned-memory DataLoader with workers, knobs combined.

Timing takes the exclusive CPU lock (/tmp/cpu.lock) that the other benchmarks and
searches on this machine respect, so nothing else loads the cores meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

if "--warm-compile-cache" not in sys.argv:
    # A private, empty Inductor cache: the first compiled run pays the cold compile a
    # new machine pays; later rounds hit the cache as reused trial workers do.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="knobs-inductor-")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_lock, emit_table, provenance  # noqa: E402

from autospeed.recipe import Recipe  # noqa: E402
from autospeed.train.trainer import pick_device, train  # noqa: E402
from autospeed.workloads import load_workload  # noqa: E402

BASELINES = {
    "mnist1d": dict(precision="fp32", compile="none", batch_size=128, accumulation_steps=1, data_loader="device",
                    optimizer="sgd", lr=0.01),
    "synthetic": dict(precision="fp32", compile="none", batch_size=128, accumulation_steps=1, data_loader="device",
                      optimizer="sgd", lr=0.01),
    "lm": dict(precision="fp32", compile="none", batch_size=32, accumulation_steps=1, data_loader="device",
               optimizer="adamw", optimizer_impl="default", attention="auto", lr=0.001),
    # the GPU-scale workloads' baselines as people write them: fp32, eager; images through a DataLoader with
    # workers (flips and crops in the workers)
    "resnet": dict(precision="fp32", compile="none", batch_size=128, accumulation_steps=1, data_loader="dataloader",
                   num_workers=4, optimizer="sgd", lr=0.05),
    "gpt": dict(precision="fp32", compile="none", batch_size=16, accumulation_steps=1, data_loader="device",
                optimizer="adamw", optimizer_impl="default", attention="auto", lr=0.0006),
}

# (label, recipe overrides). The baseline is measured every round; ratios are against it.
MNIST1D_VARIANTS: list[tuple[str, dict]] = [
    ("fp32 eager (baseline)", {}),
    ("precision tf32", {"precision": "tf32"}),
    ("precision bf16", {"precision": "bf16"}),
    ("precision fp16", {"precision": "fp16"}),
    ("compile default", {"compile": "default"}),
    ("compile reduce-overhead", {"compile": "reduce-overhead"}),
    ("batch 32", {"batch_size": 32}),
    ("batch 64", {"batch_size": 64}),
    ("batch 256", {"batch_size": 256}),
    ("batch 512", {"batch_size": 512}),
    ("batch 1024", {"batch_size": 1024}),
    ("batch 64 x accumulation 2", {"batch_size": 64, "accumulation_steps": 2}),
    ("batch 32 x accumulation 4", {"batch_size": 32, "accumulation_steps": 4}),
    ("batch 128 x accumulation 4", {"accumulation_steps": 4}),
    ("dataloader, 0 workers", {"data_loader": "dataloader", "num_workers": 0}),
    ("dataloader, 1 worker (persistent)", {"data_loader": "dataloader", "num_workers": 1,
                                           "persistent_workers": True}),
    ("activation_checkpointing", {"activation_checkpointing": True}),
    ("channels_last", {"channels_last": True}),
    ("cudnn_benchmark", {"cudnn_benchmark": True}),
]
LM_VARIANTS: list[tuple[str, dict]] = [
    ("fp32 eager, AdamW (baseline)", {}),
    ("precision bf16", {"precision": "bf16"}),
    ("precision tf32", {"precision": "tf32"}),
    ("compile default", {"compile": "default"}),
    ("optimizer_impl foreach", {"optimizer_impl": "foreach"}),
    ("optimizer_impl fused", {"optimizer_impl": "fused"}),
    ("optimizer muon (+ AdamW)", {"optimizer": "muon"}),
    ("attention math", {"attention": "math"}),
    ("attention flash", {"attention": "flash"}),
    ("attention efficient", {"attention": "efficient"}),
    ("attention cudnn", {"attention": "cudnn"}),
    ("bf16 + flash attention", {"precision": "bf16", "attention": "flash"}),
    ("bf16 + compile + fused AdamW", {"precision": "bf16", "compile": "default", "optimizer_impl": "fused"}),
    ("batch 64", {"batch_size": 64}),
    ("batch 128", {"batch_size": 128}),
    ("activation_checkpointing", {"activation_checkpointing": True}),
]
GPU_IMAGE_VARIANTS: list[tuple[str, dict]] = [
    ("compile max-autotune", {"compile": "max-autotune"}),
    ("compile max-autotune-no-cudagraphs", {"compile": "max-autotune-no-cudagraphs"}),
    ("batch 2048", {"batch_size": 2048}),
    ("dataloader, 2 workers, pinned memory", {"data_loader": "dataloader", "num_workers": 2, "pin_memory": True,
                                              "persistent_workers": True}),
    ("bf16 + channels_last", {"precision": "bf16", "channels_last": True}),
    ("bf16 + channels_last + compile default", {"precision": "bf16", "channels_last": True, "compile": "default"}),
    ("bf16 + channels_last + batch 512", {"precision": "bf16", "channels_last": True, "batch_size": 512}),
]
RESNET_VARIANTS: list[tuple[str, dict]] = [
    ("fp32 eager, DataLoader with 4 workers (baseline)", {}),
    ("data on the device, flips and crops on it", {"data_loader": "device"}),
    ("dataloader, pinned memory, persistent workers", {"pin_memory": True, "persistent_workers": True}),
    ("precision tf32", {"precision": "tf32"}),
    ("precision bf16", {"precision": "bf16"}),
    ("precision fp16", {"precision": "fp16"}),
    ("channels_last", {"channels_last": True}),
    ("cudnn_benchmark", {"cudnn_benchmark": True}),
    ("compile default", {"compile": "default"}),
    ("compile max-autotune-no-cudagraphs", {"compile": "max-autotune-no-cudagraphs"}),
    ("optimizer_impl fused", {"optimizer_impl": "fused"}),
    ("batch 512", {"batch_size": 512}),
    ("bf16 + channels_last + device data", {"precision": "bf16", "channels_last": True, "data_loader": "device"}),
    ("bf16 + channels_last + device data + compile + batch 512",
     {"precision": "bf16", "channels_last": True, "data_loader": "device", "compile": "default", "batch_size": 512}),
]
GPT_VARIANTS: list[tuple[str, dict]] = [
    ("fp32 eager, AdamW (baseline)", {}),
    ("precision tf32", {"precision": "tf32"}),
    ("precision bf16", {"precision": "bf16"}),
    ("bf16 + flash attention", {"precision": "bf16", "attention": "flash"}),
    ("compile default", {"compile": "default"}),
    ("optimizer_impl fused", {"optimizer_impl": "fused"}),
    ("optimizer muon (+ AdamW)", {"optimizer": "muon"}),
    ("batch 32", {"batch_size": 32}),
    ("activation_checkpointing", {"activation_checkpointing": True}),
    ("bf16 + flash + compile + fused AdamW",
     {"precision": "bf16", "attention": "flash", "compile": "default", "optimizer_impl": "fused"}),
    ("bf16 + flash + compile + fused AdamW + batch 32",
     {"precision": "bf16", "attention": "flash", "compile": "default", "optimizer_impl": "fused", "batch_size": 32}),
]
VARIANTS = {"mnist1d": MNIST1D_VARIANTS, "synthetic": MNIST1D_VARIANTS, "lm": LM_VARIANTS,
            "resnet": RESNET_VARIANTS, "gpt": GPT_VARIANTS}


def measure(recipe: Recipe, workload, steps: int) -> dict:
    """Steady-state samples/s over `steps` optimizer steps after `steps` warm-up steps."""
    steps_per_epoch = len(workload.train_x) // (recipe.batch_size * recipe.accumulation_steps)
    interval = steps / steps_per_epoch
    recipe = recipe.model_copy(update={"epochs": 2 * interval, "eval_every_epochs": interval})
    result = train(recipe, workload)
    # history[1] is the measured interval (a float rounding may add a 1-step third one).
    if result.status != "not_reached" or len(result.history) < 2:
        # A variant that fails (diverged, oom) is a finding, not a crash: the table says how it failed.
        return {"failed": f"{result.status.value} after {len(result.history)} evaluations: {result.error}"}
    return {"samples_per_second": result.history[1]["samples_per_second"],
            # where the workload counts them (a GPT): tokens/s, and MFU on a GPU of known peak
            "tokens_per_second": result.history[1].get("tokens_per_second"), "mfu": result.history[1].get("mfu"),
            "first_step_seconds": result.first_step_seconds, "compile_seconds": result.compile_seconds,
            "applied": result.applied}


def _median_of(runs: list[dict], key: str, fmt: str) -> str:
    """The median of `key` over runs that report it, formatted; '-' where none does (MFU on a CPU)."""
    values = [m[key] for m in runs if m.get(key) is not None]
    return fmt.format(statistics.median(values)) if values else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mnist1d", choices=sorted(VARIANTS), help="what to train")
    ap.add_argument("--workload-options", type=json.loads, default=None,
                    help="workload options as JSON (default for mnist1d: num_samples from --num-samples)")
    ap.add_argument("--num-samples", type=int, default=25000, help="mnist1d size (80%% train)")
    ap.add_argument("--steps", type=int, default=100, help="optimizer steps of warm-up, then of measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (every variant once per round)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--skip", nargs="*", default=[], help="skip variants whose label contains any of these")
    ap.add_argument("--warm-compile-cache", action="store_true",
                    help="use the usual Inductor cache instead of a fresh one (compile times then look warm)")
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    args = ap.parse_args()

    options = args.workload_options if args.workload_options is not None else (
        {"num_samples": args.num_samples} if args.workload == "mnist1d" else {})
    workload = load_workload(args.workload, options)  # generated/cached off the clock
    baseline_knobs = BASELINES[args.workload]
    base = Recipe(workload=args.workload, workload_options=options, target_accuracy=1.0, max_train_seconds=1e9,
                  device=args.device, seed=0, **baseline_knobs)
    device = pick_device(base)
    print(provenance(device.type, end=False), flush=True)
    all_variants = VARIANTS[args.workload] + (
        GPU_IMAGE_VARIANTS if device.type == "cuda" and args.workload in ("mnist1d", "synthetic") else [])
    variants = [(label, o) for label, o in all_variants if not any(s in label for s in args.skip)]
    runs: dict[str, list[dict]] = {label: [] for label, _ in variants}
    with cpu_lock(exclusive=True):
        measure(base, workload, args.steps)  # untimed: thread pool, allocator and caches warm for everyone
        for r in range(args.rounds):
            for label, overrides in variants:
                runs[label].append(measure(base.model_copy(update=overrides), workload, args.steps))
                m = runs[label][-1]
                if "failed" in m:
                    print(f"round {r + 1}/{args.rounds}  {label:<36} failed: {m['failed']}", flush=True)
                    continue
                print(f"round {r + 1}/{args.rounds}  {label:<36} {m['samples_per_second']:10.0f} samples/s"
                      + (f"  compile {m['compile_seconds']:.1f} s" if m["compile_seconds"] else ""), flush=True)

    baseline = runs[all_variants[0][0]]
    what = (f"{args.workload} {json.dumps(options)} ({len(workload.train_x)} train)" if args.workload != "lm"
            else f"lm (byte-level GPT, {len(workload.train_x)} training windows of {workload.train_x.shape[1]} bytes)")
    counted = workload.tokens_per_sample is not None  # tokens/s and MFU columns
    lines = [
        f"{what}, device {device.type}; "
        f"baseline {baseline_knobs}; samples/s on the train clock over {args.steps} optimizer steps after {args.steps} "
        f"warm-up steps; {args.rounds} interleaved rounds; ratio = median over rounds of variant / baseline "
        f"in the same round; compile s = first step of a compiled run (first: cold Inductor cache)",
        "",
        "| variant | samples/s (median) | vs fp32 eager | min-max ratio | first step s | compile s | not applied |"
        + (" tokens/s (median) | MFU (median) |" if counted else ""),
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |" + (" ---: | ---: |" if counted else ""),
    ]
    for label, overrides in variants:
        pairs = [(m, b) for m, b in zip(runs[label], baseline) if "failed" not in m and "failed" not in b]
        failures = [m["failed"] for m in runs[label] if "failed" in m]
        if not pairs:
            lines.append(f"| {label} | failed in every round: {failures[0]} | - | - | - | - | - |"
                         + (" - | - |" if counted else ""))
            continue
        ms = [m for m, _ in pairs]
        ratios = [m["samples_per_second"] / b["samples_per_second"] for m, b in pairs]
        compile_s = [m["compile_seconds"] for m in ms]
        # the trainer's own account of each knob the recipe set that did not act (applied["not_applied"])
        not_applied = [f"{k} {v['asked']} (ran {v['ran']})" for k, v in
                       ms[0]["applied"].get("not_applied", {}).items() if k in overrides]
        compile_text = (f"{statistics.median(compile_s):.2f} (first {compile_s[0]:.2f})"
                        if any(compile_s) else "-")
        lines.append(f"| {label} | {statistics.median(m['samples_per_second'] for m in ms):,.0f} | "
                     f"**{statistics.median(ratios):.2f}x** | {min(ratios):.2f}-{max(ratios):.2f} | "
                     f"{statistics.median(m['first_step_seconds'] for m in ms):.3f} | {compile_text} | "
                     f"{', '.join(not_applied) or '-'}"
                     f"{f'; failed {len(failures)} of {args.rounds} rounds' if failures else ''} |"
                     + (f" {_median_of(ms, 'tokens_per_second', '{:,.0f}')} | {_median_of(ms, 'mfu', '{:.1%}')} |"
                        if counted else ""))
    emit_table(f"Knob throughput relative to fp32 eager ({args.workload}, {device.type})", lines, args.out,
               device.type)


if __name__ == "__main__":
    main()
