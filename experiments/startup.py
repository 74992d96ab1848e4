"""Start-up of `autospeed train`: its wall to target against its TTA, beside `python -c "import torch"`.

    python experiments/startup.py [--recipe experiments/results/speedup_best.yaml] [--repeats 5] [--no-warm-up]
                                  [--out FILE]

Times, interleaved in fresh processes (one untimed warm-up of each first: the page cache and the dataset
cache filled, as on a user's second run), --repeats times each:
  * `python -c "import torch"`: the floor every PyTorch program pays;
  * `python -c "import torch; torch.optim.SGD(...)"`: the same plus one optimizer, whose construction imports
    torch._dynamo (torch.optim's methods are wrapped in torch._disable_dynamo); every training script pays it;
  * `python -m autospeed train --config RECIPE --json --no-track`: process wall, and from its JSON the TTA
    (train clock) and `wall_to_target_seconds` (process start to the end of the evaluation that met the target).
Overhead = wall to target - TTA: interpreter, imports, recipe, data, model, evaluations. It splits into
`before train()` (wall to target - the run's own wall: interpreter, imports, recipe, data) and `in train(),
off the clock` (the run's wall - TTA: model, optimizer, evaluations). The goal (issue 26): the median
overhead at most the median `import torch` + 1 s, on the same machine, side by side. Exclusive CPU lock.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, cpu_lock, provenance, quick, results_header, shown, write_results  # noqa: E402

GOAL_SLACK_SECONDS = 1.0  # overhead allowed above `import torch` (issue 26)
IMPORT_TORCH = [sys.executable, "-c", "import torch"]
TORCH_OPTIMIZER = [sys.executable, "-c", "import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)])"]


def process_seconds(argv: list[str], cwd: Path) -> tuple[float, str]:
    """(seconds from start to exit, stdout) of one fresh process; SystemExit if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"`{' '.join(argv)}` exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def train_once(recipe: Path, cwd: Path) -> dict:
    """One `autospeed train --json --no-track` process: its result, with `process_wall_seconds`. A run
    that misses its target (exit 1) still has its result."""
    argv = [sys.executable, "-m", "autospeed", "train", "--config", str(recipe), "--json", "--no-track"]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    try:
        return {**json.loads(proc.stdout), "process_wall_seconds": seconds}
    except json.JSONDecodeError:
        raise SystemExit(f"`autospeed train --config {recipe}` exited {proc.returncode} without a result:\n"
                         f"{proc.stderr[-2000:]}") from None


def cell(seconds: float | None) -> str:
    return f"{seconds:.2f}" if seconds is not None else "-"


def overhead(run: dict) -> float:
    """Wall to target - TTA: what the run spent off the train clock before its target."""
    return run["wall_to_target_seconds"] - run["tta_seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default=str(RESULTS / "speedup_best.yaml"),
                    help="recipe to train (default: fast.yaml's exported winner, speedup.py's speedup_best.yaml)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each command, interleaved")
    ap.add_argument("--no-warm-up", action="store_true", help="skip the untimed warm-up (the quick pass)")
    ap.add_argument("--out", default=str(RESULTS / "startup.md"))
    args = ap.parse_args()
    recipe = Path(args.recipe).resolve()
    print(provenance(end=False), flush=True)

    torch_seconds: list[float] = []
    optimizer_seconds: list[float] = []
    runs: list[dict] = []
    with cpu_lock(exclusive=True), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not args.no_warm_up:  # untimed: page cache, dataset cache
            process_seconds(IMPORT_TORCH, work)
            process_seconds(TORCH_OPTIMIZER, work)
            train_once(recipe, work)
        for i in range(args.repeats):
            torch_seconds.append(process_seconds(IMPORT_TORCH, work)[0])
            optimizer_seconds.append(process_seconds(TORCH_OPTIMIZER, work)[0])
            runs.append(train_once(recipe, work))
            r = runs[-1]
            print(f"  #{i + 1}: import torch {torch_seconds[-1]:.2f} s, + optimizer {optimizer_seconds[-1]:.2f} s; "
                  f"train: process {r['process_wall_seconds']:.2f} s, {r['status']}, TTA {cell(r['tta_seconds'])} s, "
                  f"wall to target {cell(r['wall_to_target_seconds'])} s", flush=True)

    lines = [f"Recipe: `{shown(recipe)}`, trained by `python -m autospeed train --config RECIPE --json --no-track` "
             f"({args.repeats} fresh processes, the recipe's own seed every time), interleaved with "
             f"`python -c \"import torch\"` and `python -c \"import torch; torch.optim.SGD(...)\"`, "
             f"{'without warm-up' if args.no_warm_up else 'after one untimed warm-up of each'}; "
             f"CPU lock held {'shared (quick pass)' if quick() else 'exclusively'}. Seconds; wall to target counts "
             f"from the process's start (its `wall_clock_origin`) to the end of the evaluation that met the target, "
             f"TTA on the train clock; the `python -c` columns are whole processes, Python's exit included.", "",
             "| run | import torch | + optimizer | process wall | TTA | wall to target | overhead (wall to target "
             "- TTA) | before train() | in train(), off the clock | evaluations |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    reached = [r for r in runs if r["wall_to_target_seconds"] is not None]
    for i, (t, o, r) in enumerate(zip(torch_seconds, optimizer_seconds, runs), 1):
        if r["wall_to_target_seconds"] is None:
            lines.append(f"| {i} | {t:.2f} | {o:.2f} | {r['process_wall_seconds']:.2f} | {r['status']} | - | - | - | "
                         f"- | {r['evaluations']} |")
            continue
        lines.append(f"| {i} | {t:.2f} | {o:.2f} | {r['process_wall_seconds']:.2f} | {r['tta_seconds']:.2f} | "
                     f"{r['wall_to_target_seconds']:.2f} | {overhead(r):.2f} | "
                     f"{r['wall_to_target_seconds'] - r['wall_seconds']:.2f} | "
                     f"{r['wall_seconds'] - r['tta_seconds']:.2f} | {r['evaluations']} |")
    median_torch, median_optimizer = statistics.median(torch_seconds), statistics.median(optimizer_seconds)
    limit = median_torch + GOAL_SLACK_SECONDS
    lines.append("")
    if reached:
        median_overhead = statistics.median(overhead(r) for r in reached)
        lines.append(f"Median overhead {median_overhead:.2f} s ({len(reached)} runs that reached the target) against "
                     f"median `import torch` {median_torch:.2f} s + {GOAL_SLACK_SECONDS:g} s = {limit:.2f} s: goal "
                     f"{'met' if median_overhead <= limit else 'NOT met'} (overhead - import torch = "
                     f"{median_overhead - median_torch:.2f} s).")
    else:
        lines.append("No run reached the target: no overhead to judge.")
    lines += ["", f"`import torch` plus one optimizer takes {median_optimizer:.2f} s (median), "
                  f"{median_optimizer - median_torch:.2f} s more than `import torch`: torch.optim's first call imports "
                  f"torch._dynamo, which every PyTorch script that trains with torch.optim pays."
                  + (f" Median overhead - that: {median_overhead - median_optimizer:.2f} s." if reached else "")]
    if reached:
        after = statistics.median(r["process_wall_seconds"] - r["wall_to_target_seconds"] for r in reached)
        lines += ["", f"Process wall - wall to target (the JSON printed and the process's exit): median {after:.2f} s."]
    text = results_header("Start-up of `autospeed train`: wall to target against TTA (CPU)") + "\n".join(lines) + "\n"
    print("\n" + text)
    write_results(args.out, text)
    print(f"wrote {shown(args.out)}")


if __name__ == "__main__":
    main()
