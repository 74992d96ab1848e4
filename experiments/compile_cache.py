"""Cold start with and without the shipped compile cache: a compiled recipe's `autospeed train` in fresh processes.

    python experiments/compile_cache.py [--device cpu|cuda] [--config RECIPE] [--runs 5] [--out FILE]

1. The cache is made as a search makes it: one run of the recipe in a fresh process (the confirmation's
   autospeed.train.process), which saves torch.compile's cache artifacts after its run; the recipe is written
   with `measured.compile_cache` naming the file beside it, as `autospeed export` writes best.yaml.
2. Then `autospeed train --config best.yaml --json --no-track` runs in fresh processes, interleaved, same seeds:
   `without`: --no-compile-cache; `with`: the shipped cache loaded. Each of these processes gets its own empty
   TORCHINDUCTOR_CACHE_DIR: a new machine, so no run finds what an earlier one compiled here (inductor's local
   cache, /tmp/torchinductor_<user>, would otherwise serve every run after the first).
   `local warm` (for scale, not a new machine): the cache-making run's own inductor folder, reused, as a second
   run on the search's machine finds it.
Reported: medians of first-step (compile included), compile, TTA (train clock) and wall-to-target seconds (process
start to the target), and the ratio without / with. The `with` runs' graph hits are torch's own counters.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_lock, emit_table, provenance, shown  # noqa: E402

from autospeed.recipe import Measured, Recipe, load_recipe  # noqa: E402
from autospeed.run_recipe import train_in_fresh_process  # noqa: E402

# speedup_best.yaml's searched recipe (experiments/results/speedup_best.yaml) with torch.compile, and a budget that
# holds a CPU compile (10-20 s on 2 cores)
DEFAULT = Recipe(workload="mnist1d", workload_options={"num_samples": 25000}, target_accuracy=0.95,
                 max_train_seconds=120, epochs=20, eval_every_epochs=0.5, batch_size=256,
                 lr_scaling={"rule": "sqrt", "reference_batch": 128}, optimizer="adamw", lr=0.018,
                 schedule="linear", warmup_fraction=0.2, compile="default")
CACHE_FILE = "best.compile-cache.bin"
# the shipped cache's hits ("compile cache: 2 of 2 ...") or this machine's inductor cache's ("compile: 0 of 2 ...")
HITS = re.compile(r"compile(?: cache)?: (\d+) of (\d+) compiled graphs found in")
SIDES = ("without", "with", "local warm")
METRICS = (("first_step_seconds", "first step s (compile included)"), ("compile_seconds", "compile s"),
           ("tta_seconds", "TTA s (train clock)"), ("wall_to_target_seconds", "wall to target s (process start)"),
           ("process_seconds", "process s (start to exit)"))


def fresh_train(config: Path, inductor_dir: Path, use_cache: bool) -> dict:
    """One `autospeed train` process with its own inductor cache folder: its JSON result, graph hits and process
    wall seconds."""
    cmd = [sys.executable, "-m", "autospeed", "train", "--config", str(config), "--json", "--no-track"]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir)}
    start = time.perf_counter()
    proc = subprocess.run(cmd + ([] if use_cache else ["--no-compile-cache"]), env=env, capture_output=True,
                          text=True, cwd=config.parent)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout)
    hits = HITS.search(proc.stderr)
    result["graph_hits"] = f"{hits[1]}/{hits[2]}" if hits else "-"
    result["process_seconds"] = wall
    if use_cache and "compile cache: loaded" not in proc.stderr:
        raise SystemExit(f"the shipped cache did not load:\n{proc.stderr[-2000:]}")
    return result


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if len(values) == len(runs) else None  # a missed target: no median


def cell(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "missed"


SET_HERE = " (set here: the recipe does not compile)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--config", help="a compiled recipe (default: speedup_best.yaml's with compile: default)")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per side, interleaved")
    ap.add_argument("--seed-base", type=int, default=500)
    ap.add_argument("--work", help="folder for the recipe, caches and inductor folders (default: a temporary one)")
    ap.add_argument("--compile", default="default",
                    help="the compile mode for a --config recipe that does not compile (default: default)")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"which of {', '.join(SIDES)} to run, comma-separated")
    ap.add_argument("--out")
    args = ap.parse_args()
    sides = [s for s in SIDES if s in args.sides.split(",")]

    recipe = load_recipe(args.config) if args.config else DEFAULT
    # a winner that does not compile ships no cache: measure what one would buy, compiled with --compile
    compiled_here = recipe.compile == "none"
    if compiled_here:
        recipe = recipe.model_copy(update={"compile": args.compile})
    recipe = recipe.model_copy(update={"device": args.device, "measured": Measured(compile_cache=CACHE_FILE)})
    work = Path(args.work or tempfile.mkdtemp(prefix="autospeed-compile-cache-"))
    work.mkdir(parents=True, exist_ok=True)
    print(provenance(args.device, end=False), flush=True)

    with cpu_lock(exclusive=True):
        search_machine = work / "search-machine-inductor"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(search_machine)  # the spawned process inherits it
        made = train_in_fresh_process(recipe.model_copy(update={"measured": None}), None,
                                      compile_cache_to=str(work / CACHE_FILE), compile_cache="warm")
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]
        cache_mb = (work / CACHE_FILE).stat().st_size / 1e6
        print(f"cache made by a fresh process: {cache_mb:.2f} MB, its own first step "
              f"{made.first_step_seconds:.2f} s", flush=True)
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for i in range(args.runs):
            seed = args.seed_base + i
            config = work / f"best-seed{seed}.yaml"  # beside the cache file, which it names
            config.write_text(recipe.model_copy(update={"seed": seed}).to_yaml())
            for side in sides:
                inductor = search_machine if side == "local warm" else work / f"new-machine-{side}-{i}"
                r = fresh_train(config, inductor, use_cache=side == "with")
                runs[side].append(r)
                print(f"run {i + 1} seed {seed} {side}: {r['status']}, first step {r['first_step_seconds']:.2f} s, "
                      f"TTA {r['tta_seconds']}, wall to target {r['wall_to_target_seconds']}, "
                      f"graph hits {r['graph_hits']}", flush=True)

    lines = [f"Recipe: {shown(args.config) if args.config else 'speedup_best.yaml with compile: default'} "
             f"({recipe.workload}, compile {recipe.compile}{SET_HERE if compiled_here else ''}, "
             f"target {recipe.resolved_target.describe()}, device "
             f"{args.device}); cache {cache_mb:.2f} MB of torch.compile artifacts from one fresh-process run. "
             f"{args.runs} fresh `autospeed train` processes per side, interleaved, seeds {args.seed_base}.."
             f"{args.seed_base + args.runs - 1}; `without` and `with` each start on an empty TORCHINDUCTOR_CACHE_DIR "
             f"(a new machine); `local warm` reuses the cache-making run's folder (the same machine, for scale).", "",
             "| median over runs | without cache | with shipped cache | without / with | local warm |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for key, label in METRICS:
        without, with_, warm = (median(runs[side], key) if side in runs else None for side in SIDES)
        ratio = f"{without / with_:.2f}x" if without and with_ else "-"
        lines.append(f"| {label} | {cell(without)} | {cell(with_)} | {ratio} | "
                     f"{cell(warm) if 'local warm' in runs else 'not run'} |")
    lines += ["", "| run | side | status | first step s | compile s | TTA s | wall to target s | graph hits |",
              "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for i in range(args.runs):
        for side in sides:
            r = runs[side][i]
            lines.append(f"| {i + 1} | {side} | {r['status']} | {r['first_step_seconds']:.2f} | "
                         f"{r['compile_seconds']:.2f} | {cell(r['tta_seconds'])} | "
                         f"{cell(r['wall_to_target_seconds'])} | {r['graph_hits']} |")
    emit_table(f"Compile cache shipped with a recipe: cold start with and without it ({args.device})", lines,
               args.out, args.device)


if __name__ == "__main__":  # the cache-making run spawns a process that imports this module
    main()
