"""A long-job benchmark whose truth is measured: ranking trials at 20x and 50x horizon ratios (issue 43, E2/E3).

(1) Curves (`--part curves`): `--recipes` recipes drawn at random from search_spaces/long_bench.yaml (Optuna's
    RandomSampler, experiments/long_job.py's draw), each trained `--seeds` times (seeds 0, 1, ...) in this process
    with the built-in trainer and one torch thread:
      * the full run: every evaluation (samples, validation accuracy, epoch) until STOP_ACCURACY or the recipe's
        own 30 epochs: its samples to each target are the truth;
      * the trial run, the same recipe and seed again: densely evaluated (about 24 evaluations) up to 5% of the
        fastest recipe's samples to the space's target (its median over seeds, from the full runs), with a
        cooldown branch (autospeed/train/cooldown.py, 20% of the steps so far, LR linearly to 0) at every
        evaluation, so the branch-measured decay factor is available at any cut offline.
    Truth is in samples, not seconds: the maths knobs' ranking does not depend on the clock, and the shared
    machine's clock would be noise. A trial at samples c is the trial run's evaluations up to c (the run is
    deterministic for a seed: its first evaluations are the full run's, checked and recorded as `prefix_match`).
(2) Analysis (`--part analysis`): at each target and horizon ratio (the trial = 1/20 and 1/50 of the fastest
    recipe's samples to the target), `--searches` simulated 12-trial searches (12 of the recipes in a random order,
    each trial one of its seeds at random; the truth is the median of the recipe's seeds' samples to target, inf
    where most never reach). Arms, each ranking the same trials: the metric at the cut (equal horizon: the censored
    objective `cut x (1 + gap)`), autospeed/horizon.py with the typical decay factor 0.71, horizon.py with each wsd
    trial's own cooldown branch, and the per-curve predictor of autospeed/predict.py as search/curve.py used it
    (experiments/long_job_ranking.py's arms, on samples); and the grown arms of _long_job_arms.py: successive
    halving at the flat arm's compute, and halving whose first rung is the flat cut itself (synchronous, and Ray's
    asynchronous rule ranked rung-first, by the censored objective and by horizon.py), each arm's exploration in
    x flat and in baseline runs (a baseline run: the ratio x the cut). Decision metrics: first-pick miss, median and
    90th percentile top-1 regret, top-3 within 1.1x, Spearman's rho over the reached recipes (ceiling stated), the
    reach / no-reach AUC; the goals of issue 43 stated met or not. Times nothing.

    python experiments/long_job_bench.py --part curves     # ~20 min of one core -> results/long_job_bench_curves.json
    python experiments/long_job_bench.py --part analysis   # seconds -> experiments/results/long_job_bench.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _long_job_arms as arms  # noqa: E402
import _long_job_predict as prediction  # noqa: E402
from _common import RESULTS, cpu_lock, provenance, results_header, shown, write_results  # noqa: E402

SPACE = "search_spaces/long_bench.yaml"
CURVES = f"{RESULTS}/long_job_bench_curves.json"
STOP_ACCURACY = 0.965  # full runs stop here (or at their epochs' end): truth at every target up to it
TARGETS = (0.96, 0.95, 0.965)  # the space's target first; the others a sensitivity check
RATIOS = (20, 50)  # a trial = 1/20 and 1/50 of the fastest recipe's samples to the target
TRIAL_EVALUATIONS = 24  # the trial run's evaluations up to its window (5% of the fastest recipe's samples)
COOLDOWN_FRACTION = 0.2
TRIALS = 12
FLAT, FROM_CUT, ARMS = arms.FLAT, arms.FROM_CUT, arms.ARMS


# ---------------------------------------------------------------- (1) curves
def samples_to(curve: list, target: float) -> float:
    """Samples at the first evaluation at or above `target` (inf: never)."""
    return next((p[0] for p in curve if p[1] >= target), math.inf)


def recipe_truth(per_seed: list[float]) -> float:
    """The median over seeds (inf where most never reach)."""
    return float(statistics.median(per_seed))


def full_run(recipe, workload, seed: int, stop: float) -> list[list[float]]:
    from autospeed.train.trainer import train

    r = train(recipe.model_copy(update={"seed": seed, "max_train_seconds": 1e9, "target_accuracy": stop}), workload,
              num_threads=1)
    return [[h["samples"], h["val_accuracy"], h["epoch"]] for h in r.history]


def trial_run(recipe, workload, seed: int, window: float, train_size: int) -> list[list]:
    """The recipe's start, evaluated about TRIAL_EVALUATIONS times up to `window` samples, a cooldown branch at
    each evaluation: [samples, accuracy, epoch, cooldown accuracy or None]."""
    from autospeed.train.trainer import Cooldown, train

    every = window / TRIAL_EVALUATIONS / train_size
    r = train(recipe.model_copy(update={"seed": seed, "max_train_seconds": 1e9, "eval_every_epochs": every}),
              workload, on_eval=lambda e: e.samples >= window, num_threads=1,
              cooldown=Cooldown(COOLDOWN_FRACTION, each_evaluation=True))
    return [[h["samples"], h["val_accuracy"], h["epoch"], h.get("cooldown_val_accuracy")] for h in r.history]


def run_curves(args) -> None:
    from long_job import draw_recipes

    from autospeed.space import load_spec
    from autospeed.workloads import load_workload

    spec = load_spec(SPACE)
    options = {**spec.workload_options, **({"num_samples": args.num_samples} if args.num_samples else {})}
    workload = load_workload(spec.workload, options)
    train_size = len(workload.train_y)
    drawn = draw_recipes(spec, args.recipes, args.seed)[1:]  # its baseline is not one of the space's recipes
    rows = []
    # no CPU lock: nothing is timed (samples, not seconds)
    for d in drawn:
        recipe = d["recipe"].model_copy(update={"epochs": args.epochs} if args.epochs else {})
        curves = [full_run(recipe, workload, s, args.stop) for s in range(args.seeds)]
        rows.append({"label": d["label"], "params": d["params"], "schedule": recipe.schedule,
                     "epochs": recipe.epochs, "decay_fraction": recipe.decay_fraction, "full": curves})
        print(f"{d['label']} {d['params']}: samples to {args.targets[0]} "
              f"{[samples_to(c, args.targets[0]) for c in curves]}", flush=True)
    fastest = min(recipe_truth([samples_to(c, max(args.targets)) for c in r["full"]]) for r in rows)
    if not math.isfinite(fastest):  # nothing reached (a quick pass): the window is one epoch
        fastest = 20 * train_size
    window = fastest / min(RATIOS)
    for d, row in zip(drawn, rows):
        recipe = d["recipe"].model_copy(update={"epochs": row["epochs"]})
        row["trial"] = [trial_run(recipe, workload, s, window, train_size) for s in range(args.seeds)]
        row["prefix_match"] = all(prefix_match(t, f) for t, f in zip(row["trial"], row["full"]))
        print(f"{row['label']}: trial runs to {window:.0f} samples, prefix match {row['prefix_match']}",
              flush=True)
    write_results(args.curves, json.dumps({
        "provenance": provenance(), "space": SPACE, "workload_options": options, "train_size": train_size,
        "stop_accuracy": args.stop, "seeds": args.seeds, "window_samples": window, "torch_threads": 1,
        "cooldown_fraction": COOLDOWN_FRACTION, "predict": spec.predict.model_dump(), "recipes": rows}, indent=1))


def prefix_match(trial: list, full: list) -> bool:
    """Whether the trial run's evaluations at the full run's evaluation samples measured the same accuracy."""
    at = {p[0]: p[1] for p in full}
    common = [(p[1], at[p[0]]) for p in trial if p[0] in at]
    return all(abs(a - b) < 1e-9 for a, b in common)


# ---------------------------------------------------------------- (2) analysis
def trial_row(row: dict, seed: int, cut: float) -> dict:
    """One trial of `row`'s recipe with seed `seed` cut at `cut` samples, as experiments/long_job_ranking.py's
    rows: its evaluations [samples, accuracy, epoch] up to the cut (the trial run's, then the full run's beyond
    its window), its schedule and its latest stable-phase cooldown branch (samples, accuracy, after)."""
    dense = [p for p in row["trial"][seed] if p[0] <= cut]
    last = dense[-1][0] if dense else 0
    curve = [p[:3] for p in dense] + [p for p in row["full"][seed] if last < p[0] <= cut]
    stable_epochs = row["epochs"] * (1 - row["decay_fraction"]) if row["schedule"] == "wsd" else math.inf
    branches = [p for p in dense if p[3] is not None and p[2] <= stable_epochs]
    out = {**row, "curve": curve, "compile_seconds": 0.0}
    if branches:
        out["cooldown"] = (branches[-1][0], branches[-1][1], branches[-1][3])
    return out


FIXED = ("metric", "previous")  # arms that score each trial alone (the horizon arms pool the search's exponents)


def fixed_scores(rows: list[dict], arm: str, cut: float, target: float, predict: dict, cap: float) -> list[float]:
    """The arm's objective of each trial in `rows`, alone."""
    import long_job_ranking as ranking

    if arm == "metric":
        return [ranking.metric_score(r, cut, target) for r in rows]
    return [ranking.previous_score(r, cut, target, predict, cap) for r in rows]


def horizon_scores(rows: list[dict], arm: str, order: list[int], cut: float, target: float,
                   cap: float) -> dict[int, float]:
    """index -> horizon.py's objective for the trials `rows` in the search's `order`, with each wsd trial's own
    cooldown branch ('horizon branch') or the typical factor ('horizon 0.71')."""
    import long_job_ranking as ranking

    view = rows if arm == "horizon branch" else [{k: v for k, v in r.items() if k != "cooldown"} for r in rows]
    return {i: s for i, (s, _) in ranking.horizon_scores(view, order, cut, target, cap).items()}


def assumed(rows: list[dict], order: list[int], cut: float, target: float) -> set[int]:
    """The trials of a search that horizon.py scores before any exponent exists: neither their own curve nor any
    trial before them in `order` gave one."""
    import long_job_ranking as ranking

    out, seen = set(), False
    for i in order:
        seen = seen or (ranking.horizon_cut(rows[i], cut, target).exponent or 0) > 0
        if not seen:
            out.add(i)
    return out


def effective_lr(params: dict) -> float:
    """lr x sqrt(batch / 128): the space's LR scaling, the LR a recipe's steps take."""
    return params["lr"] * math.sqrt(params["batch_size"] / 128)


def condition(data: dict, target: float, ratio: int, searches: int, seed: int) -> dict:
    import long_job_ranking as ranking

    from autospeed import horizon

    recipes = data["recipes"]
    n, seeds = len(recipes), data["seeds"]
    truth = np.array([recipe_truth([samples_to(c, target) for c in r["full"]]) for r in recipes])
    # a check: each trial scored against its recipe's other seeds only (the trial's own seed left out of the truth)
    other = np.array([[recipe_truth([samples_to(c, target) for k, c in enumerate(r["full"]) if k != s])
                       for r in recipes] for s in range(seeds)]) if seeds > 1 else np.array([truth])
    reach = np.isfinite(truth)
    fastest = float(truth.min())
    # at least every trial's first evaluation (binds only on tiny runs: the quick pass)
    cut = max(fastest / ratio, *(t[0][0] for r in recipes for t in r["trial"]))
    cap = max(r["epochs"] for r in recipes) * data["train_size"]
    trials = [[trial_row(r, s, cut) for r in recipes] for s in range(seeds)]  # [seed][recipe]
    fixed = {a: [fixed_scores(t, a, cut, target, data["predict"], cap) for t in trials] for a in FIXED}
    size = min(TRIALS, n)  # a search's trials (fewer only in the quick pass)
    plans, whole_plans = arms.plans_for(cut, size), arms.plans_for(cut, size, n)
    run = ratio * cut  # a baseline run: the job the ratio defines, the fastest recipe's samples to the target
    cplans, whole_cplans = arms.cut_plans(cut, size, cap), arms.cut_plans(cut, size, cap, n)
    at = {h: [[ranking.metric_score(trial_row(r, s, h), h, target) for r in recipes] for s in range(seeds)]
          for p in [*plans.values(), *cplans.values()] for h, _ in p}  # the metric at each rung: [seed][recipe]
    lrs = [effective_lr(r["params"]) for r in recipes]
    nine = [h for h, _ in cplans["halving from cut to 9c"]]
    cache: dict[tuple[int, int, float], dict] = {}

    def row_at(s: int, i: int, h: float) -> dict:
        if (s, i, h) not in cache:
            cache[s, i, h] = trial_row(recipes[i], s, h)
        return cache[s, i, h]

    def score_at(s: int, i: int, h: float) -> float:  # the metric at any horizon (a trial the cap stopped)
        return at[h][s][i] if h in at else ranking.metric_score(row_at(s, i, h), h, target)

    def per_seed_at(t: float) -> np.ndarray:  # [recipe][seed] samples to target t
        return np.array([[samples_to(c, t) for c in r["full"]] for r in recipes])

    draws = arms.searches(n, size, seeds, searches, seed)  # the same searches for every arm and the predictions
    per = {a: {"miss": [], "regret": [], "top3": [], "wins": 0, "losses": 0, "other": [], "spent": []} for a in ARMS}
    grew = {"leaders": [], "trend": [], "best_lr": [], "lost_first": [], "lost_flat": []}
    # horizon 0.71's first pick unlike the metric's; of those, scored by default; ASHA's first pick with the objective
    # unlike the rung-first one's
    skipped = departs = default = objective_departs = 0
    for order, picked in draws:  # each recipe's trial: one of its seeds (picked)
        rows = [trials[s][i] for i, s in enumerate(picked)]
        t = truth[order]
        if not np.isfinite(t).any():
            skipped += 1
            continue
        best = float(t.min())
        ranks, info = arms.grown(order, plans, lambda i, h: at[h][picked[i]][i], lambda i: lrs[i], ratio * cut)
        ranked_cut, cost = arms.from_cut(order, cplans, lambda i, h: at[h][picked[i]][i])
        ranks.update(ranked_cut)
        ranks[FROM_CUT[-1]] = arms.asha_horizon(order, lambda i, h: row_at(picked[i], i, h), nine,
                                           lambda i, h: at[h][picked[i]][i], target, cap)
        ranks[arms.ASHA_CAPPED], cost[arms.ASHA_CAPPED] = arms.asha_ranked(
            order, cplans["halving from cut to 9c"], 3, lambda i, h: score_at(picked[i], i, h), by_rung=False,
            cap_samples=arms.CAP_RUNS * run)
        cost.update({a: size * cut for a in (*FLAT, "halving 3", "halving 2", "halving 3 + LR trend")})
        cost["asha 3"] = info["asha_spent"]
        for a in FLAT:
            s = ({i: fixed[a][picked[i]][i] for i in order} if a in FIXED
                 else horizon_scores(rows, a, order, cut, target, cap))
            ranks[a] = sorted(order, key=lambda i: s[i])
        for a in ARMS:
            ranked = ranks[a]
            per[a]["miss"].append(not math.isfinite(truth[ranked[0]]))
            per[a]["regret"].append(truth[ranked[0]] / best)
            per[a]["top3"].append(min(truth[i] for i in ranked[:3]) <= 1.1 * best)
            per[a]["wins"] += per["metric"]["miss"][-1] > per[a]["miss"][-1]
            per[a]["losses"] += per["metric"]["miss"][-1] < per[a]["miss"][-1]
            per[a]["other"].append(not math.isfinite(other[picked[ranked[0]], ranked[0]]))
            per[a]["spent"].append(cost[a])
        for k in ("leaders", "trend"):
            grew[k].append(info[k])
        fastest_i = min(order, key=lambda i: truth[i])
        grew["best_lr"].append(lrs[fastest_i])
        grew["lost_first"].append(fastest_i not in info["second_rung"])  # halving 3 stopped it at b
        grew["lost_flat"].append(fastest_i not in ranks["metric"][:len(info["second_rung"])])
        objective_departs += ranks[arms.ASHA_CUT[1]][0] != ranks[arms.ASHA_CUT[0]][0]
        if ranks["horizon 0.71"][0] != ranks["metric"][0]:
            departs += 1
            default += ranks["horizon 0.71"][0] in assumed(rows, order, cut, target)
    out = {"target": target, "ratio": ratio, "cut": cut, "fastest": fastest, "reached": int(reach.sum()), "n": n,
           "skipped": skipped, "searches": searches, "departs": departs, "default": default,
           "objective_departs": objective_departs, "plans": plans,
           "pooled": horizon.pooled([ranking.horizon_cut(r, cut, target).exponent for r in trials[0]]).mid,
           "ceiling": ranking.spearman(truth[reach], truth[reach]) if reach.sum() > 2 else math.nan,
           "cut_plans": cplans, "run": run, "median_run": _median([t for t in truth if math.isfinite(t)]) / run,
           "leaders": np.median(grew["leaders"], axis=0).tolist() if grew["leaders"] else [],
           "trend": _median(grew["trend"]), "best_lr": _median(grew["best_lr"]),
           "lost_first": _mean(grew["lost_first"]), "lost_flat": _mean(grew["lost_flat"]),
           "loo": arms.leave_one_out(truth, fixed["metric"], at, cplans["halving from cut to 9c"], size,
                                     max(searches // 4, 1), seed),
           "prediction": prediction.condition(truth, draws, cplans["halving from cut to 9c"], at, row_at, target, cap,
                                              per_seed_at)}
    for a in ARMS:  # over all recipes, each trial's seed in turn, averaged (a grown arm: its rank over all)
        scores = []
        for s in range(seeds):
            if a in FLAT:
                w = fixed[a][s] if a in FIXED else horizon_scores(trials[s], a, list(range(n)), cut, target, cap)
                scores.append(np.array([w[i] for i in range(n)]))
            else:
                everyone, at_s = list(range(n)), (lambda i, h, s=s: at[h][s][i])
                if a == arms.ASHA_CAPPED:  # the cap scaled as the plans are, by n / trials; never started: last
                    ran = arms.asha_ranked(everyone, cplans["halving from cut to 9c"], 3,
                                           lambda i, h, s=s: score_at(s, i, h), by_rung=False,
                                           cap_samples=arms.CAP_RUNS * run * n / size)[0]
                    scores.append(np.argsort(ran + [i for i in everyone if i not in ran]).astype(float))
                    continue
                ranked = (arms.asha_horizon(everyone, lambda i, h, s=s: row_at(s, i, h), nine, at_s, target, cap)
                          if a == FROM_CUT[-1] else arms.from_cut(everyone, whole_cplans, at_s)[0][a] if a in FROM_CUT
                          else arms.grown(everyone, whole_plans, at_s, lambda i: lrs[i], ratio * cut)[0][a])
                scores.append(np.argsort(ranked).astype(float))
        done = per[a]["regret"]
        out[a] = {"miss": statistics.fmean(per[a]["miss"]) if done else math.nan,
                  "regret": ranking.rank_quantile(done, 0.5) if done else math.nan,
                  "regret90": ranking.rank_quantile(done, 0.9) if done else math.nan,
                  "top3": statistics.fmean(per[a]["top3"]) if done else math.nan,
                  "wins": per[a]["wins"], "losses": per[a]["losses"],
                  "miss_other": statistics.fmean(per[a]["other"]) if done else math.nan,
                  "flats": _mean(per[a]["spent"]) / (size * cut) if done else math.nan,  # exploration, x flat
                  "runs": _mean(per[a]["spent"]) / run if done else math.nan,  # exploration, in baseline runs
                  "rho": _mean([ranking.spearman(s[reach], truth[reach]) for s in scores]),
                  "auc": _mean([ranking.auc(list(reach), list(s)) for s in scores])}
    return out


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def _mean(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.fmean(known) if known else math.nan


def seed_spread(data: dict, target: float) -> tuple[float, int]:
    """The median over reached recipes of (max / min) samples to `target` over their seeds, and how many."""
    spreads = []
    for r in data["recipes"]:
        s = [samples_to(c, target) for c in r["full"]]
        if all(math.isfinite(x) for x in s):
            spreads.append(max(s) / min(s))
    return (statistics.median(spreads) if spreads else math.nan), len(spreads)


def branch_factors(data: dict, results: list[dict]) -> list[str]:
    """The cooldown branches' decay factors (error after / error where it branched) of the wsd trials at each cut
    of the space's target: what 'horizon branch' uses instead of 0.71."""
    out = []
    for r in [r for r in results if r["target"] == results[0]["target"]]:
        factors = []
        for row in data["recipes"]:
            for s in range(data["seeds"]):
                t = trial_row(row, s, r["cut"])
                if row["schedule"] == "wsd" and "cooldown" in t:
                    _, before, after = t["cooldown"]
                    factors.append((1 - after) / max(1 - before, 1e-12))
        if factors:
            q = statistics.quantiles(factors, n=4, method="inclusive") if len(factors) > 1 else [factors[0]] * 3
            out.append(f"- {r['ratio']}x (cut at {r['cut']:.0f} samples): {len(factors)} wsd trials' branches, "
                       f"factor median {q[1]:.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}, range {min(factors):.2f}-"
                       f"{max(factors):.2f}), against the typical 0.71.")
    return ["Cooldown branches at the space's target's cuts:", "", *out] if out else []


def lr_split(data: dict, target: float) -> str:
    """The effective LRs (lr x sqrt(batch / 128), the space's scaling) of the recipes that never reach `target`
    against those that do."""
    def eff(r: dict) -> float:
        return effective_lr(r["params"])

    never = sorted(eff(r) for r in data["recipes"] if not math.isfinite(recipe_truth([samples_to(c, target)
                                                                                     for c in r["full"]])))
    reach = sorted(eff(r) for r in data["recipes"] if eff(r) not in never)
    return (f"at {target} the {len(never)} recipes that never reach have effective LRs (lr x sqrt(batch / 128)) "
            f"{', '.join(f'{x:.3g}' for x in never)}; the {len(reach)} that reach "
            f"{reach[0]:.3g}-{reach[-1]:.3g}" if never and reach else "")


def collapses(data: dict, target: float) -> str:
    """How often the full runs of the recipes that never reach `target` fell back to chance (below 0.15) after
    having passed 0.3."""
    runs = [c for r in data["recipes"] if not math.isfinite(recipe_truth([samples_to(c, target) for c in r["full"]]))
            for c in r["full"]]
    fell = [c for c in runs if any(p[1] < 0.15 and any(q[1] > 0.3 for q in c[:k]) for k, p in enumerate(c))]
    return f"{len(fell)} of the {len(runs)} full runs of the recipes that never reach {target} fell back below 0.15 " \
        "accuracy after passing 0.3"


def run_analysis(args) -> None:
    import _long_job_report as report

    data = json.loads(Path(args.curves).read_text())
    results = []
    for target in args.targets:
        for ratio in RATIOS:
            r = condition(data, target, ratio, args.searches, args.seed)
            results.append(r)
            print(f"{target} {ratio}x: " + ", ".join(f"{a} miss {r[a]['miss']:.0%}" for a in ARMS), flush=True)
    spread, count = seed_spread(data, args.targets[0])
    n = len(data["recipes"])
    matched = sum(r["prefix_match"] for r in data["recipes"])
    head = [f"Curves: `{shown(args.curves)}` ({n} recipes drawn from `{data['space']}`, {data['seeds']} seeds each, "
            f"mnist1d {data['workload_options']}, one torch thread; its header names the commit and machine that "
            f"trained them). Truth: samples to the target, the median over seeds (inf where most seeds never reach "
            f"it within the recipe's {data['recipes'][0]['epochs']:g} epochs). Trials: the first evaluations of a "
            f"run of the same recipe and seed, cut at 1/20 or 1/50 of the fastest recipe's samples to the target; "
            f"a wsd trial's cooldown branch ({data['cooldown_fraction']:.0%} of its steps, LR to 0) at its last "
            f"evaluation before the cut gives 'horizon branch' its decay factor. The grown arms ('halving 3', "
            f"'halving 2', 'asha 3', 'halving 3 + LR trend') train the same trials to longer horizons at the same "
            f"exploration compute (plans below) and rank by the metric at each trial's last horizon; the arms 'from "
            f"cut' start every trial at the flat cut c and train the best on to 3c, 9c (27c), spending more (plans "
            f"below). Exploration is counted in baseline runs: a baseline run is the job the ratio defines, ratio x c "
            f"(the fastest recipe's samples to the target). "
            f"{args.searches} simulated searches of {TRIALS} recipes per row (seed {args.seed}, the same searches for "
            "every arm), each trial one of the recipe's seeds at random (that seed is also one of the truth's: the "
            "last column scores the first pick against the recipe's other seeds only); regret = the first pick's "
            "true samples to target / the search's best (inf: it never reaches).",
            "",
            f"Seed spread at {args.targets[0]}: the median over the {count} recipes whose seeds all reach of max/min "
            f"samples to target is {spread:.2f}x. The trial run repeated the full run's evaluations exactly for "
            f"{matched} of {n} recipes (deterministic for a seed)."]
    skipped = [r for r in results if r["skipped"]]
    notes = [f"Searches left out (no recipe among the {TRIALS} reaches): " + ", ".join(
        f"{r['target']} / {r['ratio']}x: {r['skipped']}" for r in skipped) + f" of {args.searches}."] if skipped else []
    body = [*head, "", *report.table(results), "", *notes, "", *report.plans_text(results, TRIALS), "",
            *report.lr_table(results), "", *branch_factors(data, results), "",
            *report.reading(results, lr_split(data, args.targets[0]), collapses(data, args.targets[0])), "",
            *report.goals(results), "", *prediction.section(results)]
    text = results_header("Long-job benchmark: ranking trials at 20x and 50x horizon ratios, measured truth") + \
        "\n".join(body) + "\n"
    print(text)
    write_results(args.out, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("curves", "analysis", "all"), default="all")
    parser.add_argument("--recipes", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the recipes' draw and the simulated searches")
    parser.add_argument("--stop", type=float, default=STOP_ACCURACY, help="full runs stop at this accuracy")
    parser.add_argument("--targets", type=float, nargs="+", default=TARGETS,
                        help="targets analysed, the space's first (at most --stop)")
    parser.add_argument("--epochs", type=float, default=None, help="override the space's epochs (the quick pass)")
    parser.add_argument("--num-samples", type=int, default=None, help="override mnist1d's (the quick pass)")
    parser.add_argument("--searches", type=int, default=2000, help="simulated 12-trial searches per row")
    parser.add_argument("--curves", default=CURVES)
    parser.add_argument("--out", default=f"{RESULTS}/long_job_bench.md")
    args = parser.parse_args()
    if args.part in ("curves", "all"):
        run_curves(args)
    if args.part in ("analysis", "all"):
        with cpu_lock(exclusive=False):  # offline, but it loads a core for minutes: not beside a timing benchmark
            run_analysis(args)


if __name__ == "__main__":
    main()
