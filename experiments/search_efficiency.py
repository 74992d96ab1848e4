"""How much training compute each search strategy needs to find a near-best recipe.

    python experiments/search_efficiency.py [--space maths|systems] [--seeds 5] [--trials 40]
           [--truth-repeats 2] [--work DIR] [--out experiments/results/search_efficiency.md]

1. Ground truth: every recipe of a small discrete mnist1d space (48 recipes) plus the
   baseline is trained --truth-repeats times with seed 0 (the seed every search trial
   uses, so the only difference between repeats is timing noise), CPU lock held
   exclusively; a recipe's true TTA is the median of its repeats. Cached in
   <work>/truth.json, so a rerun only measures what is missing (the results say how
   many runs came from the cache; start from an empty --work to measure all of it).
2. Real searches through autospeed.search.run_search (Ray Tune + Optuna + MLflow):
   TPE+ASHA (the product's default), TPE without ASHA, and random sampling without
   ASHA (plain random search), --seeds sampler seeds each, --trials trials per search
   (trial 0 is the baseline in every search).
3. Compute to find = sum of trial train-clock seconds, in trial start order, up to and
   including the first trial that reached the target *in the search* with a recipe
   whose true TTA is within 10% of the best true TTA. A trial ASHA stopped early
   costs what it trained before the stop and finds nothing.
Writes --out and, beside it, a .png (best found vs compute) and a .json (every run, read
back by --report-only and by experiments/sampler_simulation.py).

--space systems (issue 12): the space adds a maths-neutral systems knob (data_loader: device or
a DataLoader) and batch sizes above a simulated memory limit (workload option max_micro_batch
256: a training pass of more than 256 samples raises torch.OutOfMemoryError). Methods: `new`
(the product's default: probe + TPE + ASHA; the probe fixes data_loader and gives the batch
sizes that do not fit a micro-batch), `today` (TPE + ASHA, probe off: 512 and 1024 are
out-of-memory trials, as before micro-batching) and `random` (random sampling, probe and ASHA
off). A recipe's true TTA is trained as the product trains it: batch sizes above the limit in
micro-batches of 256. The probe stage's whole wall time (the parent run's `probe_seconds`)
counts as compute before the first trial. `max_consecutive_errors` is raised so that a run of
out-of-memory trials does not end a search early. Writes search_efficiency_systems.md/.png/.json.
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
from _common import RESULTS, cpu_lock, provenance, results_header, shown, write_results  # noqa: E402

from autospeed.search import run_search  # noqa: E402
from autospeed.space import spec_from_dict  # noqa: E402
from autospeed.track import names  # noqa: E402
from autospeed.track.store import connect  # noqa: E402
from autospeed.train.trainer import train  # noqa: E402
from autospeed.workloads import load_workload  # noqa: E402

GRID = {
    "batch_size": [64, 128, 256, 512],
    "optimizer": ["sgd", "adamw"],
    "lr": [0.003, 0.01, 0.03],
    "schedule": ["constant", "onecycle"],
}
BASE = {
    "workload": "mnist1d", "workload_options": {"num_samples": 25000}, "target_accuracy": 0.95,
    "budget": {"trials": 20, "max_train_seconds": 10},
    "asha": {"grace_seconds": 1.0, "reduction_factor": 3},
    "sampler": {"seed": 0, "n_startup_trials": 5},
    "confirm": {"repeats": 0},
    "resources": {"gpus_per_trial": 0},
    "baseline": {"batch_size": 32, "optimizer": "sgd", "lr": 0.01, "schedule": "constant"},
    "fixed": {"epochs": 20, "eval_every_epochs": 0.25},
    "space": {k: {"choice": v} for k, v in GRID.items()},
}
BASE["probe"] = {"enabled": False}  # measured before the probe stage existed; a method turns it on
METHODS = {"tpe+asha": ("tpe", True), "tpe": ("tpe", False), "random": ("random", False)}  # (sampler, ASHA)
PROBED: set[str] = set()  # methods whose searches run the probe stage
COLORS = {"tpe+asha": "tab:blue", "tpe": "tab:orange", "random": "tab:gray", "new": "tab:blue",
          "today": "tab:orange"}
REFERENCE, CHALLENGER, GOAL = "random", "tpe+asha", 1 / 3  # the verdict: CHALLENGER / REFERENCE <= GOAL

MEMORY_LIMIT = 256  # --space systems: samples one training pass may hold (workload option max_micro_batch)
SYSTEMS_GRID = {
    "batch_size": [256, 512, 1024],  # 512 and 1024 do not fit in one pass
    "optimizer": ["sgd", "adamw"],
    "lr": [0.01, 0.03],
    "schedule": ["constant", "onecycle"],
    "data_loader": ["device", "dataloader"],  # maths-neutral: the DataLoader only costs time (knobs_cpu.md)
}
SYSTEMS_BASE = {
    **BASE, "workload_options": {"num_samples": 25000, "max_micro_batch": MEMORY_LIMIT},
    "budget": {"trials": 15, "max_train_seconds": 10},
    # every sampled trial runs: 5 out-of-memory trials in a row would stop `today` and `random` (the
    # product's guard against a broken set-up), which would end those searches, not measure them
    "max_consecutive_errors": 1000,
    "probe": {"enabled": False, "warmup_steps": 3, "steps": 20, "max_configs": 4},
    # what a user writes by hand: a DataLoader, a small batch, SGD at a constant LR
    "baseline": {"batch_size": 32, "optimizer": "sgd", "lr": 0.01, "schedule": "constant",
                 "data_loader": "dataloader"},
    "space": {k: {"choice": v} for k, v in SYSTEMS_GRID.items()},
}


def use_systems_space() -> None:
    """Switch the module's space, methods and verdict to --space systems (module-level, as the helpers
    and experiments/sampler_simulation.py read GRID, BASE and METHODS)."""
    global GRID, BASE, METHODS, REFERENCE, CHALLENGER, GOAL
    GRID, BASE = SYSTEMS_GRID, SYSTEMS_BASE
    METHODS = {"new": ("tpe", True), "today": ("tpe", True), "random": ("random", False)}
    PROBED.add("new")
    REFERENCE, CHALLENGER, GOAL = "random", "new", 1 / 5


def key(params: dict) -> str:
    k = f"bs={int(float(params['batch_size']))} {params['optimizer']} lr={float(params['lr']):g} {params['schedule']}"
    return f"{k} {params['data_loader']}" if "data_loader" in GRID else k


def fits_in_memory(params: dict) -> bool:
    """--space systems: a training pass of the recipe's batch size fits under the simulated memory limit."""
    limit = BASE["workload_options"].get("max_micro_batch")
    return not limit or int(params["batch_size"]) <= limit


def truth_params(params: dict) -> dict:
    """A recipe as its true TTA is measured: above the memory limit in micro-batches, as the probe sets."""
    if not fits_in_memory(params):
        return {**params, "micro_batch_size": BASE["workload_options"]["max_micro_batch"]}
    return params


def ground_truth(spec, repeats: int, cache: Path) -> tuple[dict[str, list[float]], int]:
    """({recipe key: [TTA seconds per repeat, inf when not reached in the budget]}, runs trained now, the
    rest read from `cache`); baseline included."""
    runs: dict[str, list[float]] = json.loads(cache.read_text()) if cache.exists() else {}
    trained = 0
    todo = [dict(zip(GRID, v)) for v in itertools.product(*GRID.values())] + [dict(BASE["baseline"])]
    workload = load_workload(spec.workload, spec.workload_options)
    with cpu_lock(exclusive=True):
        for rep in range(repeats):  # repeats interleaved: a slow spell hits every recipe alike
            for params in todo:
                k = key(params)
                if len(runs.setdefault(k, [])) > rep:
                    continue
                r = train(spec.recipe_for(truth_params(params)), workload)
                runs[k].append(r.tta_seconds if r.tta_seconds is not None else math.inf)
                trained += 1
                cache.write_text(json.dumps(runs, indent=1))
                print(f"truth {rep} {k}: {r.status} {r.tta_seconds}", flush=True)
    return runs, trained


def one_search(method: str, seed: int, trials: int, work: Path, truth: dict[str, float], good: float) -> dict:
    kind, asha = METHODS[method]
    data = json.loads(json.dumps(BASE))
    data["name"] = f"eff-{method.replace('+', '-')}-{seed}"
    data["sampler"]["kind"] = kind
    data["asha"]["enabled"] = asha
    data["probe"]["enabled"] = method in PROBED
    spec = spec_from_dict(data, "search_efficiency")
    uri = f"sqlite:///{work / 'mlflow.db'}"
    with cpu_lock(exclusive=False), open("/dev/null", "w") as quiet:
        out = run_search(spec, json.dumps(data), "space.json", trials=trials, tracking_uri=uri,
                         storage_path=str(work / "runs"), seed=seed, console=quiet)
    rows = sorted(out.rows, key=lambda r: r.start_ms)
    probe_seconds = connect(uri).get_run(out.parent_run_id).data.metrics.get(names.M_PROBE_SECONDS, 0.0)
    compute, curve, found_at, best_true = probe_seconds, [], None, math.inf
    for r in rows:
        compute += r.metrics.get(names.M_TRAIN_SECONDS, 0.0)
        true = truth[key(BASE["baseline"] if r.baseline else r.params)]
        if r.reached:
            best_true = min(best_true, true)
            if found_at is None and true <= good:
                found_at = compute
        curve.append((compute, best_true))
    stopped = sum(r.status == "stopped_early" and not r.duplicate_of for r in rows)
    repeats = sum(bool(r.duplicate_of) for r in rows)
    oom = sum(r.status == "oom" for r in rows)
    return {"method": method, "seed": seed, "compute_to_find": found_at, "total_compute": compute,
            "probe_seconds": probe_seconds, "oom": oom,
            "curve": curve, "trials": len(rows), "stopped_early": stopped, "repeats": repeats,
            "wall_seconds": out.wall_seconds,
            "recipes": [key(BASE["baseline"] if r.baseline else r.params) for r in rows]}


def median_curve(runs: list[dict], xs: list[float]) -> list[float]:
    """Median over seeds of the best true TTA found by compute x (inf until something is found)."""
    def at(run, x):
        best = math.inf
        for c, b in run["curve"]:
            if c <= x:
                best = b
        return best
    return [statistics.median(at(r, x) for r in runs) for x in xs]


def censored_median(runs: list[dict]) -> tuple[float, bool]:
    """(median compute to find, exact?) over seeds. A search that never found one needed more than it
    spent (its total compute), so with such seeds the median is a lower bound unless it lands on a found one."""
    values = sorted((r["compute_to_find"], True) if r["compute_to_find"] is not None else (r["total_compute"], False)
                    for r in runs)
    mid = values[len(values) // 2] if len(values) % 2 else None
    if mid is not None:
        # exact when the middle value is a found one and no censored value lies below it
        exact = mid[1] and all(found for v, found in values if v <= mid[0])
        return mid[0], exact
    lo, hi = values[len(values) // 2 - 1], values[len(values) // 2]
    return (lo[0] + hi[0]) / 2, all(found for v, found in values if v <= hi[0])


def simulated_random(grid_truth: dict[str, float], first_trial_seconds: float, good: float, trials: int, *,
                     searches: int, seed: int = 0) -> tuple[float, float]:
    """Random search without a trial limit, simulated from the measured ground truth: (median compute to find,
    median total compute of a search of `trials` trials, to check the model against the real searches').

    The real random searches stop after --trials trials, so where they found nothing their compute to find is
    only a lower bound. Here every search draws recipes uniformly (as Optuna's RandomSampler does over the grid)
    until it draws a near-best one it can train: the baseline first (`first_trial_seconds`), then each draw costs
    what it costs in a random search (ASHA and probe off): its true TTA when it reaches the target, else the whole
    budget, and nothing when its batch size is above the memory limit (out of memory at its first step: without the
    probe nothing is micro-batched), which also means it can never be the one found; a recipe drawn again costs
    nothing (a search takes its first result)."""
    import random

    rng = random.Random(seed)
    budget = BASE["budget"]["max_train_seconds"]
    recipes = [dict(zip(GRID, v)) for v in itertools.product(*GRID.values())]

    def cost(params: dict) -> float:  # a first draw: its TTA, the budget when it misses, 0 when out of memory
        return min(grid_truth[key(params)], budget) if fits_in_memory(params) else 0.0

    def draws():  # (recipe, what it costs): a recipe drawn again takes its first result, as in a search
        seen: set[str] = set()
        while True:
            params = rng.choice(recipes)
            yield params, 0.0 if key(params) in seen else cost(params)
            seen.add(key(params))

    finds = []
    for _ in range(searches):
        compute = first_trial_seconds
        for params, seconds in draws():
            compute += seconds
            if fits_in_memory(params) and grid_truth[key(params)] <= good:
                break
        finds.append(compute)
    totals = [first_trial_seconds + sum(seconds for _, (_, seconds) in zip(range(trials - 1), draws()))
              for _ in range(searches)]
    return statistics.median(finds), statistics.median(totals)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", choices=["maths", "systems"], default="maths",
                   help="maths: the 48-recipe maths space, TPE+ASHA vs TPE vs random; systems: with a systems "
                        "knob and batch sizes above a memory limit, new (probe) vs today vs random")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--truth-repeats", type=int, default=2)
    p.add_argument("--work", help="ground-truth cache and search folders (default: /tmp/autospeed-efficiency, "
                   "/tmp/autospeed-efficiency-systems with --space systems)")
    p.add_argument("--out", help="results file; the .png and .json go beside it (default: "
                   "experiments/results/search_efficiency.md, search_efficiency_systems.md with --space systems)")
    p.add_argument("--simulated-searches", type=int, default=20000,
                   help="random searches simulated over the ground truth (the uncensored reference)")
    p.add_argument("--report-only", action="store_true", help="redraw the results from the .json beside --out "
                   "(or --saved)")
    p.add_argument("--saved", help="with --report-only: the .json to redraw from (default: beside --out)")
    p.add_argument("--truth-cache", help="the ground-truth cache to read and extend (default: <work>/truth.json); "
                   "another run's cache makes both runs' ground truth the same")
    args = p.parse_args()
    if args.space == "systems":
        use_systems_space()
    out = Path(args.out or RESULTS / ("search_efficiency.md" if args.space == "maths" else
                                      "search_efficiency_systems.md"))
    saved_json = Path(args.saved) if args.saved and args.report_only else out.with_suffix(".json")
    work = Path(args.work or "/tmp/autospeed-efficiency" + ("-systems" if args.space == "systems" else ""))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(provenance(end=False), flush=True)
    if args.report_only:
        saved = json.loads(saved_json.read_text())
        truth_runs, runs, meta = saved["truth_runs"], saved["runs"], saved.get("meta", {})  # json reads Infinity
    else:
        data = json.loads(json.dumps(BASE))
        data["name"] = "eff-truth"
        spec = spec_from_dict(data, "search_efficiency")
        cache = Path(args.truth_cache) if args.truth_cache else work / "truth.json"
        truth_runs, trained = ground_truth(spec, args.truth_repeats, cache)
        meta = {"truth_seconds": time.perf_counter() - t0, "truth_runs_trained": trained, "truth_cache": str(cache)}
    truth = {k: statistics.median(v[:args.truth_repeats]) for k, v in truth_runs.items()}
    grid_truth = {k: v for k, v in truth.items() if k != key(BASE["baseline"])}
    best = min(grid_truth.values())
    good = 1.1 * best
    near = sorted((v, k) for k, v in grid_truth.items() if v <= good)

    if not args.report_only:
        runs = []
        for s in range(args.seeds):
            for m in METHODS:
                runs.append(one_search(m, s, args.trials, work, truth, good))
                r = runs[-1]
                print(f"{m:>9} seed {s}: found at {r['compute_to_find']} s of {r['total_compute']:.1f} s, "
                      f"{r['stopped_early']} stopped early, wall {r['wall_seconds']:.0f} s", flush=True)
        meta["total_seconds"] = time.perf_counter() - t0
        meta["provenance"] = provenance()  # when the measurements ended: the load average at start and end
        write_results(saved_json, json.dumps(
            {"meta": meta, "truth_runs": truth_runs, "truth": truth, "good_seconds": good, "runs": runs},
            indent=1, default=str))

    meds = {m: censored_median([r for r in runs if r["method"] == m]) for m in METHODS}
    (ta, ta_exact), (rnd, rnd_exact) = meds[CHALLENGER], meds[REFERENCE]
    if ta_exact and rnd_exact:
        ratio_text, met = f"{ta / rnd:.2f}", ta / rnd <= GOAL
    elif ta_exact:  # the reference's median is only a lower bound, so the ratio is an upper bound
        ratio_text, met = f"< {ta / rnd:.2f}", ta / rnd <= GOAL
    else:
        ratio_text, met = f"undetermined ({CHALLENGER}'s median search did not find one)", False

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    x_max = max(r["total_compute"] for r in runs)
    xs = [x_max * i / 400 for i in range(401)]
    for m in METHODS:
        mine = [r for r in runs if r["method"] == m]
        for r in mine:
            cx = [c for c, b in r["curve"] if math.isfinite(b)]
            cy = [b for c, b in r["curve"] if math.isfinite(b)]
            ax.step(cx, cy, where="post", color=COLORS[m], alpha=0.25, lw=0.8)
        xm = [x for x in xs if x <= max(r["total_compute"] for r in mine)]  # no line past the searches' end
        ys = median_curve(mine, xm)
        ax.step(xm, [y if math.isfinite(y) else float("nan") for y in ys], where="post", color=COLORS[m], lw=2.2,
                label=f"{m} (median of {len(mine)} seeds)")
    ax.axhline(good, ls="--", color="k", lw=0.8, label=f"within 10% of the best true TTA ({good:.2f} s)")
    ax.set_xlabel("compute: sum of trial train-clock seconds")
    ax.set_ylabel("true TTA of the best recipe found so far (s)")
    ax.set_title(f"mnist1d ({args.space} space), {len(grid_truth)} recipes, {args.trials} trials per search; "
                 "thin lines: single seeds", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out.with_suffix(".png"), dpi=120)

    fmt = lambda x: f"{x:.1f}" if x is not None and math.isfinite(x) else "-"  # noqa: E731
    n_never = sum(math.isinf(v) for v in grid_truth.values())
    seeds = sorted({r["seed"] for r in runs})
    n_truth = sum(min(len(v), args.truth_repeats) for v in truth_runs.values())
    lines = []
    if args.report_only:
        lines += [f"Redrawn from `{shown(saved_json)}`, whose measurements were taken by:", "", "```",
                  meta.get("provenance", meta.get("header", "(not recorded)")), "```", ""]
    else:
        lines += [f"Every run, read back by `--report-only` and by experiments/sampler_simulation.py: "
                  f"`{saved_json.name}` beside this file.", ""]
    lines += [
        f"Total runtime: {meta.get('total_seconds', 0):.0f} s, of which ground truth "
        f"{meta.get('truth_seconds', 0):.0f} s" + (
            f" ({meta['truth_runs_trained']} of {n_truth} ground-truth runs trained then, the rest read from the "
            f"cache {meta['truth_cache']})." if "truth_runs_trained" in meta else
            " (how many ground-truth runs came from a cache was not recorded)."),
        "",
        f"Space: {json.dumps(GRID)} ({len(grid_truth)} recipes); fp32, eager; workload options "
        f"{json.dumps(BASE['workload_options'])}" + (
            f" (a training pass of more than {MEMORY_LIMIT} samples is out of memory; true TTAs of larger batch "
            f"sizes are trained in micro-batches of {MEMORY_LIMIT})" if "max_micro_batch" in BASE["workload_options"]
            else "") + "; target "
        f"{BASE['target_accuracy']}, budget {BASE['budget']['max_train_seconds']} s of train clock per trial, "
        f"{BASE['fixed']['epochs']} epochs for the schedules, evaluation every {BASE['fixed']['eval_every_epochs']} "
        f"epoch; ASHA grace {BASE['asha']['grace_seconds']} s, reduction factor {BASE['asha']['reduction_factor']}; "
        f"TPE with {BASE['sampler']['n_startup_trials']} random start-up trials. Methods (sampler, ASHA, probe): " +
        "; ".join(f"{m}: {k}, ASHA {'on' if a else 'off'}, probe {'on' if m in PROBED else 'off'}"
                  for m, (k, a) in METHODS.items()) + ". Trial 0 of every search is the "
        f"baseline ({key(BASE['baseline'])}, true TTA {fmt(truth[key(BASE['baseline'])])} s), and its compute "
        f"counts for every method.", "",
        f"Ground truth: every recipe trained {args.truth_repeats}x with seed 0 (as in the searches), "
        f"interleaved, exclusive CPU lock, median taken. Best true TTA {best:.2f} s; {len(near)} of "
        f"{len(grid_truth)} recipes within 10% ({good:.2f} s): " + "; ".join(f"{k} {v:.2f} s" for v, k in near) +
        f". {n_never} recipes never reach the target in the budget. Ranked:", "",
        "| true TTA s | recipe | runs |", "| ---: | --- | --- |"]
    for k, v in sorted(grid_truth.items(), key=lambda kv: kv[1])[:12]:
        f2 = lambda x: f"{x:.2f}" if math.isfinite(x) else "miss"  # noqa: E731
        lines.append(f"| {f2(v)} | {k} | {', '.join(f2(x) for x in truth_runs[k][:args.truth_repeats])} |")
    lines += [
        "",
        "Compute to find = sum of trial train seconds, in start order, up to the first trial that reached the "
        "target in the search with a recipe within 10% of the best true TTA. A search that never found one "
        "needed more than everything it spent: shown as `> total`, and counted as that lower bound in the "
        "median, which then is a lower bound too (`>`).", "",
        "| method | " + " | ".join(f"seed {s}" for s in seeds) + " | median | found | total compute per "
        "search (median) | of which probe (median) | stopped early per search (median) | out-of-memory trials "
        "per search (median) | repeated recipes per search (median) |",
        "| --- |" + " ---: |" * (len(seeds) + 7)]
    for m in METHODS:
        mine = [r for r in runs if r["method"] == m]
        cells = [fmt(r["compute_to_find"]) if r["compute_to_find"] is not None else f"> {r['total_compute']:.1f}"
                 for r in mine]
        value, exact = meds[m]
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {'' if exact else '> '}{value:.1f} | "
                     f"{sum(r['compute_to_find'] is not None for r in mine)}/{len(mine)} | "
                     f"{statistics.median(r['total_compute'] for r in mine):.1f} | "
                     f"{statistics.median(r.get('probe_seconds', 0) for r in mine):.1f} | "
                     f"{statistics.median(r['stopped_early'] for r in mine):g} | "
                     f"{statistics.median(r.get('oom', 0) for r in mine):g} | "
                     f"{statistics.median(r.get('repeats', 0) for r in mine):g} |")
    lines += ["", f"**{CHALLENGER} / {REFERENCE}, compute to find (medians over seeds): {ratio_text}** "
              f"(goal <= {GOAL:.2f}: {'met' if met else 'NOT met'}).", ""]
    if METHODS[REFERENCE] == ("random", False) and ta_exact:
        # The real random searches' median is censored: read the reference uncensored from the ground truth.
        ref_runs = [r for r in runs if r["method"] == REFERENCE]
        n_trials = int(statistics.median(r["trials"] for r in ref_runs))
        first = min(truth[key(BASE["baseline"])], BASE["budget"]["max_train_seconds"])  # the baseline trial
        searches = args.simulated_searches
        sim_find, sim_total = simulated_random(grid_truth, first, good, n_trials, searches=searches)
        probe_med = statistics.median(r.get("probe_seconds", 0) for r in runs if r["method"] == CHALLENGER)
        lines += [
            f"Random search run until it finds one, simulated from the ground truth (`simulated_random`: "
            f"{searches:,} searches, each draw costing its true TTA, the budget when it misses, nothing when out of "
            f"memory or drawn before): median compute to find **{sim_find:.1f} s**. "
            f"Check of the model: a simulated {n_trials}-trial random "
            f"search spends {sim_total:.1f} s (median), the real ones above "
            f"{statistics.median(r['total_compute'] for r in ref_runs):.1f} s.", "",
            f"**{CHALLENGER} / {REFERENCE} (simulated, uncensored): {ta / sim_find:.2f}** "
            f"(goal <= {GOAL:.2f}: {'met' if ta / sim_find <= GOAL else 'NOT met'}).", "",
            f"Floor: every method's first trial is the baseline ({first:.1f} s of train clock here) and "
            f"{CHALLENGER}'s probe takes {probe_med:.1f} s (median) before its first sampled trial: "
            f"{first + probe_med:.1f} s, already {(first + probe_med) / sim_find:.2f} of random's simulated median "
            f"before {CHALLENGER} has trained a single sampled recipe.", ""]
    # The same read at a looser bar (within 20%), from the best-found curves: how robust the verdict is.
    loose = 1.2 * best
    looser = {}
    for m in METHODS:
        mine = [{**r, "compute_to_find": next((c for c, b in r["curve"] if b <= loose), None)}
                for r in runs if r["method"] == m]
        looser[m] = censored_median(mine)
        cells = [fmt(r["compute_to_find"]) if r["compute_to_find"] is not None else f"> {r['total_compute']:.1f}"
                 for r in mine]
        lines.append(f"- within 20% ({loose:.2f} s), {m}: " + ", ".join(cells) +
                     f"; median {'' if looser[m][1] else '> '}{looser[m][0]:.1f}")
    (la, la_exact), (lr_, lr_exact) = looser[CHALLENGER], looser[REFERENCE]
    if la_exact:
        lines.append(f"- within 20%: {CHALLENGER} / {REFERENCE} = {'' if lr_exact else '< '}{la / lr_:.2f}")
    xs_read = [15, 30, 60, 90]
    lines += ["", "Median over seeds of the best recipe's true TTA found by a compute budget "
              f"({', '.join(f'{x} s' for x in xs_read)}):", ""]
    for m in METHODS:
        ys = median_curve([r for r in runs if r["method"] == m], xs_read)
        lines.append(f"- {m}: " + ", ".join(f"{y:.2f} s" if math.isfinite(y) else "none yet" for y in ys))
    lines += ["", f"![best found vs compute]({out.with_suffix('.png').name})"]
    text = results_header(f"Search efficiency: compute to find a near-best recipe (mnist1d, {args.space} space, "
                          "CPU)") + \
        "\n".join(lines) + "\n"
    write_results(out, text)
    print(text)


if __name__ == "__main__":
    main()
