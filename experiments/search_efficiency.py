"""How much training compute each search strategy needs to find a near-best recipe.

    python experiments/search_efficiency.py [--seeds 5] [--trials 12]

1. Ground truth: every recipe of a small discrete space (digits) is trained once
   (seed 0, the seed the searches use too), CPU lock held exclusively.
2. Real searches through autospeed.search.run_search (Ray Tune + Optuna + MLflow):
   TPE+ASHA, TPE without ASHA, random sampling without ASHA; several search seeds.
3. Compute to find = sum of trial train-clock seconds, in trial start order, up to
   and including the first trial that *reached the target in the search* with a
   recipe whose true TTA is within 10% of the best true TTA.
Writes experiments/results/search_efficiency.{md,png,json}.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_lock, machine  # noqa: E402

from autospeed import tracking as t  # noqa: E402
from autospeed.search import run_search  # noqa: E402
from autospeed.space import spec_from_dict  # noqa: E402
from autospeed.trainer import train  # noqa: E402
from autospeed.workloads import load_workload  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
GRID = {"batch_size": [16, 32, 64, 128], "lr": [0.01, 0.03, 0.1, 0.3], "schedule": ["constant", "onecycle"]}
BASE = {
    "workload": "digits", "target_accuracy": 0.95,
    "budget": {"trials": 12, "max_train_seconds": 4},
    "asha": {"grace_seconds": 0.3, "reduction_factor": 3},
    "sampler": {"seed": 0, "n_startup_trials": 4},
    "confirm": {"repeats": 0},
    "resources": {"gpus_per_trial": 0},
    "baseline": {"batch_size": 16, "lr": 0.01, "schedule": "constant"},
    "fixed": {"epochs": 40, "eval_every_epochs": 1, "optimizer": "sgd"},
    "space": {k: {"choice": v} for k, v in GRID.items()},
}
METHODS = {"tpe+asha": ("tpe", True), "tpe": ("tpe", False), "random": ("random", False)}


def key(params: dict) -> tuple:
    return (int(float(params["batch_size"])), float(params["lr"]), str(params["schedule"]))


def ground_truth(spec) -> dict[tuple, float]:
    workload = load_workload(spec.workload, spec.workload_options)
    truth = {}
    with cpu_lock(exclusive=True):
        for values in itertools.product(*GRID.values()):
            params = dict(zip(GRID, values))
            r = train(spec.recipe_for(params), workload)
            truth[key(params)] = r.tta_seconds if r.tta_seconds is not None else math.inf
            print(f"truth {params}: {r.status} {r.tta_seconds}", flush=True)
    return truth


def one_search(method: str, seed: int, trials: int, work: Path, truth: dict, good: float) -> dict:
    kind, asha = METHODS[method]
    data = json.loads(json.dumps(BASE))
    data["name"] = f"eff-{method.replace('+', '-')}-{seed}"
    data["sampler"]["kind"] = kind
    data["asha"]["enabled"] = asha
    spec = spec_from_dict(data, "search_efficiency")
    uri = f"sqlite:///{work / 'mlflow.db'}"
    with cpu_lock(exclusive=False):
        out = run_search(spec, json.dumps(data), "space.json", trials=trials, tracking_uri=uri,
                         storage_path=str(work / "runs"), seed=seed, console=open("/dev/null", "w"))
    rows = sorted(out.rows, key=lambda r: r.start_ms)
    compute, curve, found_at, best_true = 0.0, [], None, math.inf
    for r in rows:
        compute += r.metrics.get(t.M_TRAIN_SECONDS, 0.0)
        true = truth.get(key(r.params), math.inf) if not r.baseline else truth[key(BASE["baseline"])]
        if r.reached:
            best_true = min(best_true, true)
            if found_at is None and true <= good:
                found_at = compute
        curve.append((compute, best_true))
    return {"method": method, "seed": seed, "compute_to_find": found_at, "total_compute": compute,
            "curve": curve, "trials": len(rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--work", default="/tmp/autospeed-efficiency")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data = json.loads(json.dumps(BASE))
    data["name"] = "eff-truth"
    spec = spec_from_dict(data, "search_efficiency")
    truth = ground_truth(spec)
    best = min(truth.values())
    good = 1.1 * best
    n_good = sum(v <= good for v in truth.values())
    runs = [one_search(m, s, args.trials, work, truth, good) for s in range(args.seeds) for m in METHODS]
    for r in runs:
        print(f"{r['method']:>9} seed {r['seed']}: found at {r['compute_to_find']} s of {r['total_compute']:.1f} s",
              flush=True)

    def med(method):  # a search that never found one counts as its whole compute, censored (marked)
        xs = [r["compute_to_find"] if r["compute_to_find"] is not None else math.inf
              for r in runs if r["method"] == method]
        return statistics.median(xs)

    meds = {m: med(m) for m in METHODS}
    ratio = meds["tpe+asha"] / meds["random"] if math.isfinite(meds["random"]) else float("nan")
    (RESULTS / "search_efficiency.json").write_text(json.dumps(
        {"truth": {str(k): v for k, v in truth.items()}, "runs": runs}, indent=1, default=str))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"tpe+asha": "tab:blue", "tpe": "tab:orange", "random": "tab:gray"}
    for r in runs:
        xs = [c for c, b in r["curve"] if math.isfinite(b)]
        ys = [b for c, b in r["curve"] if math.isfinite(b)]
        ax.step(xs, ys, where="post", color=colors[r["method"]], alpha=0.6,
                label=r["method"] if r["seed"] == 0 else None)
    ax.axhline(good, ls="--", color="k", lw=0.8, label="within 10% of best true TTA")
    ax.set_xlabel("compute: sum of trial train-clock seconds")
    ax.set_ylabel("best found recipe's true TTA (s)")
    ax.set_title(f"digits, {len(truth)} recipes, {args.seeds} search seeds each")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "search_efficiency.png", dpi=120)

    fmt = lambda x: f"{x:.1f}" if x is not None and math.isfinite(x) else "not found"  # noqa: E731
    lines = ["# Search efficiency: compute to find a near-best recipe (digits, CPU)", "",
             f"Machine: {machine()}", f"Date: {time.strftime('%Y-%m-%d %H:%M')}",
             f"Command: `python experiments/search_efficiency.py --seeds {args.seeds} --trials {args.trials}`",
             f"Total runtime: {time.perf_counter() - t0:.0f} s", "",
             f"Space: {json.dumps(GRID)} ({len(truth)} recipes), SGD, target {BASE['target_accuracy']}, "
             f"budget {BASE['budget']['max_train_seconds']} s per trial, {args.trials} trials per search "
             f"(trial 0 is the baseline).",
             f"Ground truth: each recipe trained once (seed 0, as in the searches), exclusive CPU lock. "
             f"Best true TTA {best:.2f} s; {n_good} of {len(truth)} recipes are within 10% ({good:.2f} s); "
             f"{sum(math.isinf(v) for v in truth.values())} never reach the target in the budget.",
             "Compute to find = sum of trial train seconds, in start order, up to the first trial that reached "
             "the target in the search with a recipe within 10% of the best true TTA.", "",
             "| method | " + " | ".join(f"seed {s}" for s in range(args.seeds)) + " | median |",
             "| --- |" + " ---: |" * (args.seeds + 1)]
    for m in METHODS:
        per = [fmt(r["compute_to_find"]) for r in runs if r["method"] == m]
        lines.append(f"| {m} | " + " | ".join(per) + f" | {fmt(meds[m])} |")
    verdict = "met" if math.isfinite(ratio) and ratio <= 1 / 3 else "NOT met"
    lines += ["", f"**TPE+ASHA / random (medians): {ratio:.2f}** (goal <= 0.33: {verdict}).",
              "Random search runs without ASHA (plain random search). 'not found' counts as infinite compute "
              "in the median.", "", "![best found vs compute](search_efficiency.png)"]
    (RESULTS / "search_efficiency.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
