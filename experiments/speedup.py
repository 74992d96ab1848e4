"""Speed-up of the searched recipe over the baseline, measured side by side.

    python experiments/speedup.py                        # search fast.yaml on CPU, then measure
    python experiments/speedup.py --best best.yaml       # measure an exported recipe

Baseline = the search-space file's `baseline` recipe. Both recipes train
`--repeats` times each, interleaved (B W B W ...), with seeds the search never
used; the budget is raised so the baseline reaches the target too (a censored
baseline would flatter the ratio). Reports median TTA (train clock), min, max
and the ratio of medians. Timing runs hold /tmp/cpu.lock exclusively.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_lock, machine_header  # noqa: E402

from autospeed.recipe import load_recipe  # noqa: E402
from autospeed.space import load_spec  # noqa: E402
from autospeed.trainer import train  # noqa: E402
from autospeed.workloads import load_workload  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def search(space: Path, trials: int | None, work: Path) -> Path:
    """Run `autospeed search` (shared CPU lock: a search, not a benchmark) and export its best recipe."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "autospeed", "search", "--space", str(space), "--tracking-uri", uri,
           "--storage-path", str(work / "runs"), "--name", "speedup-exp"]
    if trials:
        cmd += ["--trials", str(trials)]
    with cpu_lock(exclusive=False):
        subprocess.run(cmd, check=True)
    best = work / "best.yaml"
    subprocess.run([sys.executable, "-m", "autospeed", "export", "--name", "speedup-exp", "--tracking-uri", uri,
                    "--out", str(best)], check=True)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", default=str(ROOT / "search_spaces" / "fast.yaml"))
    p.add_argument("--best", help="exported recipe; default: run the search first")
    p.add_argument("--trials", type=int, help="search trials (default: the file's budget.trials)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget-seconds", type=float, default=60.0, help="train-clock budget for the timed runs")
    p.add_argument("--target", type=float, help="override target_accuracy of both recipes (default: the file's)")
    p.add_argument("--work", default="/tmp/autospeed-speedup")
    p.add_argument("--out", default=str(RESULTS / "speedup.md"))
    args = p.parse_args()

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    spec = load_spec(args.space)
    best_path = Path(args.best) if args.best else search(Path(args.space), args.trials, work)
    best = load_recipe(best_path)
    baseline = spec.recipe_for({}, baseline=True)
    recipes = {"baseline": baseline, "best": best.model_copy(update={"measured": None})}
    workload = load_workload(spec.workload, spec.workload_options)

    ttas: dict[str, list[float | None]] = {k: [] for k in recipes}
    with cpu_lock(exclusive=True):
        for r in range(args.repeats):
            for name, recipe in recipes.items():
                run = recipe.model_copy(update={"seed": 500 + r, "max_train_seconds": args.budget_seconds,
                                                "epochs": max(recipe.epochs, 60.0),
                                                "target_accuracy": args.target or recipe.target_accuracy})
                res = train(run, workload)
                ttas[name].append(res.tta_seconds)
                print(f"repeat {r} {name}: {res.status} TTA {res.tta_seconds} s, "
                      f"{res.samples_per_second:.0f} samples/s", flush=True)

    def med(xs):
        vals = [x if x is not None else float("inf") for x in xs]
        return statistics.median(vals)

    mb, mw = med(ttas["baseline"]), med(ttas["best"])
    ratio = mb / mw if mw else float("nan")
    censored = not all(x is not None for x in ttas["baseline"])
    if censored and mw and mw != float("inf"):
        # a missed target counts as the whole budget: the ratio becomes a lower bound
        lower = statistics.median([x if x is not None else args.budget_seconds for x in ttas["baseline"]]) / mw
    knobs = {k: getattr(best, k) for k in ("batch_size", "accumulation_steps", "optimizer", "lr", "schedule",
                                           "warmup_fraction", "precision", "compile")}
    fmt = lambda xs: ", ".join(f"{x:.2f}" if x is not None else "miss" for x in xs)  # noqa: E731
    text = f"""# Speed-up of the searched recipe over the baseline ({spec.workload}, CPU)

{machine_header()}
Command: `python experiments/speedup.py{' --best ' + str(args.best) if args.best else ''}{' --trials ' + str(args.trials) if args.trials else ''}{' --target ' + str(args.target) if args.target else ''} --budget-seconds {args.budget_seconds:g} --repeats {args.repeats}`
Space: `{Path(args.space).name}`, target accuracy {args.target or spec.target_accuracy}; recipe measured: `{best_path}`
Timed runs: {args.repeats} interleaved repeats each, seeds 500..{500 + args.repeats - 1} (never used by the search),
budget {args.budget_seconds:g} s train clock, epochs >= 60 so the baseline can reach the target.
TTA = train-clock seconds to the first evaluation at or above target.

| recipe | median TTA s | min | max | runs |
| --- | ---: | ---: | ---: | --- |
| baseline | {mb:.2f} | {min(x for x in ttas['baseline'] if x is not None) if any(ttas['baseline']) else float('nan'):.2f} | {max(x for x in ttas['baseline'] if x is not None) if any(ttas['baseline']) else float('nan'):.2f} | {fmt(ttas['baseline'])} |
| searched best | {mw:.2f} | {min(x for x in ttas['best'] if x is not None) if any(ttas['best']) else float('nan'):.2f} | {max(x for x in ttas['best'] if x is not None) if any(ttas['best']) else float('nan'):.2f} | {fmt(ttas['best'])} |

**Speed-up (ratio of medians): {ratio:.2f}x** (goal >= 2x on mnist1d: {'met' if ratio >= 2 else 'NOT met'}).
{f'''Baseline runs that missed the target within {args.budget_seconds:g} s are censored ("miss"); counting a miss as the whole budget gives a lower bound of **>= {lower:.1f}x**.''' if censored and mw != float("inf") else ''}

Baseline: `{json.dumps({k: getattr(baseline, k) for k in knobs})}`
Searched best: `{json.dumps(knobs)}`
"""
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
