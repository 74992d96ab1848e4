"""Long jobs: is a predicted TTA honest enough to rank, and does a search that ranks by it pay back?

(a) Prediction quality (`--part curves`, then `--part quality`). `curves` trains `--recipes` recipes drawn at
    random (Optuna's RandomSampler over search_spaces/long.yaml's space, plus its baseline) to the real target in
    this process, evaluating as often as a trial does, and keeps every curve in a JSON file; and, for the schedule
    problem, the first `--decaying` of them again with `schedule: cosine` over the same epochs (a schedule whose LR
    decays over the whole run). `quality` then predicts each recipe's TTA (search/curve.py, as a trial does) from
    the evaluations in the first 10%, 25% and 50% of its true TTA and gives, per cut: Spearman's rho between the
    objective a search would rank by and the true TTA, the median |log(predicted/true)|, the share with a
    prediction, and how often the 80% interval held the truth. References at the same compute (a common budget
    per recipe = the cut x the median true TTA, as a search gives every trial the same budget): the prediction,
    today's censored objective (`budget x (1 + gap)`), and the metric's value at the budget.
(b) Payback (`--part payback`, issue 43's E5): long.yaml searched by three arms (ARMS: halving from its cut as the
    space is; the flat search ranked by the metric at equal horizon; the previous predictor) at equal exploration
    compute on the train clock, over `--seeds` sampler seeds, exploration only (confirmation off); then the
    baseline and every search's winner trained to the real target in fresh processes, interleaved, `--repeats`
    each. Gives each search's exploration (trials' train clock and wall) in baseline runs and the winner's
    measured speed-up (median TTAs, train clock).

Run (from the repository root):
    python experiments/long_job.py --part curves        # ~10 min on 2 cores -> experiments/results/long_job_curves.json
    python experiments/long_job.py --part quality       # seconds -> experiments/results/long_job.md
    python experiments/long_job.py --part payback       # ~35 min -> experiments/results/long_job_payback.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    RESULTS,
    cpu_lock,
    describe_runs,
    provenance,
    quick,
    results_header,
    search_and_export,
    shown,
    time_interleaved,
    write_results,
    write_space_variant,
)

SPACE = "search_spaces/long.yaml"
CUTS = (0.1, 0.25, 0.5)
FULL_SECONDS = 90.0  # a recipe that has not met the target by then is "not reached" (its true TTA > this)


# ---------------------------------------------------------------- (a) curves
def draw_recipes(spec, count: int, seed: int) -> list[dict]:
    """The baseline and `count` random recipes of the space (Optuna's RandomSampler through the space's own
    define-by-run), as recipe dicts with the full budget."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out = [{"label": "baseline", "params": {}, "recipe": spec.recipe_for({}, baseline=True)}]
    for i in range(count):
        params = spec.suggest(study.ask())
        out.append({"label": f"r{i:02d}", "params": params, "recipe": spec.recipe_for(params)})
    return out


def run_curves(space: str, count: int, decaying: int, seed: int, out: Path, full_seconds: float) -> None:
    from autospeed.space import load_spec
    from autospeed.train.trainer import train
    from autospeed.workloads import load_workload

    spec = load_spec(space)
    drawn = draw_recipes(spec, count, seed)
    for d in drawn[1:1 + decaying]:
        drawn.append({"label": f"{d['label']}-cosine", "params": {**d["params"], "schedule": "cosine"},
                      "recipe": d["recipe"].model_copy(update={"schedule": "cosine"})})
    workload = load_workload(spec.workload, spec.workload_options)
    rows = []
    with cpu_lock(exclusive=True):
        for d in drawn:
            recipe = d["recipe"].model_copy(update={"max_train_seconds": full_seconds})
            started = time.perf_counter()
            r = train(recipe, workload, num_threads=os.cpu_count())
            rows.append({"label": d["label"], "params": d["params"], "schedule": recipe.schedule,
                         "epochs": recipe.epochs, "decay_fraction": recipe.decay_fraction, "status": r.status.value,
                         "tta_seconds": r.tta_seconds, "compile_seconds": r.compile_seconds,
                         "wall_seconds": time.perf_counter() - started,
                         "curve": [[h["train_seconds"], h["value"], h["epoch"]] for h in r.history]})
            print(f"{d['label']}: {r.status.value} TTA {r.tta_seconds} ({len(r.history)} evaluations)", flush=True)
    target = spec.resolved_target
    write_results(out, json.dumps({"provenance": provenance(), "space": space, "target": target.model_dump(),
                                   "budget_seconds": spec.budget.max_train_seconds, "full_seconds": full_seconds,
                                   "predict": spec.predict.model_dump(), "recipes": rows}, indent=1))


# ---------------------------------------------------------------- (a) quality
def _curve_until(row: dict, seconds: float) -> list[list[float]]:
    return [p for p in row["curve"] if p[0] <= seconds + 1e-9]


def search_view(row: dict, spec, seconds: float) -> dict:
    """What a trial of `row`'s recipe cut at `seconds` reports last: its search objective and prediction, the
    censored objective of today, and the metric's best value at the cut."""
    from autospeed.outcome import Status, objective
    from autospeed.recipe import Recipe
    from autospeed.search.curve import TrialCurve, cap_seconds

    points = _curve_until(row, seconds)
    recipe = spec.recipe_for(row["params"], baseline=row["label"] == "baseline")
    recipe = Recipe.model_validate({**recipe.model_dump(), "schedule": row["schedule"]})
    target = recipe.resolved_target
    best = None
    for _, v, _ in points:
        best = v if best is None or (v < best if target.mode == "min" else v > best) else best
    reached = best is not None and target.met(best)
    if reached:
        tta = next(p[0] for p in points if target.met(p[1]))
        return {"objective": tta, "censored": tta, "value": best, "prediction": None, "reached": True}
    curve = TrialCurve(recipe, {**spec.predict.model_dump(), "enabled": True}, cap_seconds(spec))
    for t, v, e in points:
        curve.add(t, v, e, row["compile_seconds"])
    fields = curve.fields(Status.NOT_REACHED, False, best) if points else {"objective": math.inf}
    censored = objective(Status.NOT_REACHED, None, best, target.value, seconds, target.mode)
    return {"objective": fields["objective"], "censored": censored, "value": best if best is not None else math.inf,
            "prediction": curve.last, "reached": False}


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def quality_lines(data: dict) -> list[str]:
    from autospeed.space import load_spec

    spec = load_spec(data["space"])
    mode = data["target"]["mode"]
    rows = [r for r in data["recipes"] if not r["label"].endswith("-cosine")]
    decaying = [r for r in data["recipes"] if r["label"].endswith("-cosine")]
    truth = lambda r: r["tta_seconds"] if r["tta_seconds"] is not None else math.inf  # noqa: E731
    reached = [r for r in rows if r["tta_seconds"] is not None]
    median_true = statistics.median(truth(r) for r in reached)
    lines = [f"Space: `{data['space']}` (target {data['target']['metric']} {'<=' if mode == 'min' else '>='} "
             f"{data['target']['value']}), {len(rows)} recipes (the baseline and {len(rows) - 1} drawn at random), "
             f"each trained in one process to the target or {data['full_seconds']:g} s: {len(reached)} reached "
             f"(true TTA {min(truth(r) for r in reached):.1f}-{max(truth(r) for r in reached):.1f} s, median "
             f"{median_true:.1f} s). Curves: `{shown(Path(RESULTS) / 'long_job_curves.json')}`, recorded at:",
             "", "```", data["provenance"], "```", "",
             "### Per recipe: predicted from the evaluations before a share of its own true TTA", "",
             "Only recipes that reached (a true TTA to cut). rho: Spearman's rank correlation between the objective "
             "a search ranks by (the predicted TTA; censored at the cap where there is no prediction) and the true "
             "TTA. |log|: median |log(predicted / true)| over the predicted. In 80%: share of true TTAs inside the "
             "80% interval.", "",
             "| cut | rho | predicted | median abs log(pred/true) | in 80% interval |", "|---|---|---|---|---|"]
    for cut in CUTS:
        views = [search_view(r, spec, cut * truth(r)) for r in reached]
        pred = [(v["prediction"], truth(r)) for v, r in zip(views, reached) if v["prediction"] and v["prediction"].ok]
        err = statistics.median(abs(math.log(p.seconds / t)) for p, t in pred) if pred else math.nan
        inside = sum(p.low_seconds <= t <= p.high_seconds for p, t in pred) / len(pred) if pred else math.nan
        rho = spearman([v["objective"] for v in views], [truth(r) for r in reached])
        lines.append(f"| {cut:.0%} of its TTA | {rho:.2f} | {len(pred)}/{len(reached)} | {err:.2f} | {inside:.2f} |")
    lines += ["", "### At the same compute: every recipe cut at one budget", "",
              "Budget = the cut x the median true TTA; all recipes, a recipe that never reached ranks last in the "
              "truth. rho of: the search's objective with predict, today's censored objective (budget x (1 + gap)), "
              "and the metric's best value at the budget (\"Is one epoch all you need?\").", "",
              "| budget | rho predicted | rho censored (today) | rho metric at budget | reached by then | predicted |",
              "|---|---|---|---|---|---|"]
    for cut in CUTS:
        budget = cut * median_true
        views = [search_view(r, spec, budget) for r in rows]
        true = [truth(r) for r in rows]
        sign = 1 if mode == "min" else -1
        rho_p = spearman([v["objective"] for v in views], true)
        rho_c = spearman([v["censored"] for v in views], true)
        rho_v = spearman([sign * v["value"] for v in views], true)
        n_pred = sum(1 for v in views if v["prediction"] is not None and v["prediction"].ok)
        lines.append(f"| {budget:.1f} s ({cut:.0%} of the median) | {rho_p:.2f} | {rho_c:.2f} | {rho_v:.2f} | "
                     f"{sum(v['reached'] for v in views)} | {n_pred} |")
    lines += ["", "### The schedule problem: a schedule that decays over the whole run, cut early", "",
              "The same recipes with `schedule: cosine` over the same epochs: the LR falls from the first step, so a "
              "trial cut at a share of the run sees a curve that understates what the decay will do. Median "
              "|log(predicted / true)| and the median signed log ratio (positive: predicted too slow) over the "
              "recipes that reached and got a prediction, per schedule family.", "",
              "| cut | family | recipes | predicted | median abs log | median signed log |",
              "|---|---|---|---|---|---|"]
    by_family = {"constant": [r for r in reached if r["schedule"] == "constant"],
                 "wsd": [r for r in reached if r["schedule"] == "wsd"],
                 "cosine": [r for r in decaying if r["tta_seconds"] is not None]}
    for cut in CUTS:
        for family, members in by_family.items():
            preds = []
            for r in members:
                v = search_view(r, spec, cut * truth(r))
                if v["prediction"] is not None and v["prediction"].ok:
                    preds.append(math.log(v["prediction"].seconds / truth(r)))
            med_abs = f"{statistics.median(abs(x) for x in preds):.2f}" if preds else "-"
            med = f"{statistics.median(preds):+.2f}" if preds else "-"
            lines.append(f"| {cut:.0%} | {family} | {len(members)} | {len(preds)} | {med_abs} | {med} |")
    cosine_true = {r["label"].removesuffix("-cosine"): truth(r) for r in decaying}
    pairs = [(truth(r), cosine_true[r["label"]]) for r in rows if r["label"] in cosine_true]
    lines += ["", "True TTA, the drawn schedule against cosine over the same epochs: " + ", ".join(
        f"{a:.1f} vs {b:.1f} s" for a, b in pairs) + "."]
    return lines


# ---------------------------------------------------------------- (b) payback
# The arms at one seed (issue 43's E5): long.yaml as it is (halving from its cut with ASHA, ranked by the censored
# objective); the metric at equal horizon (every trial the same budget, ASHA off: the flat search); the previous
# design (the same flat budget, ranked by horizon.py's predicted TTA, ending a trial whose predicted low bound is past
# the incumbent's high bound). The flat arms' budget is the halving search's own trial train seconds / its trials:
# equal exploration compute on the train clock, seed by seed.
ARMS = {"halving": [],
        "flat": ["asha.enabled=false", "predict.enabled=false", "budget.max_train_seconds={flat}",
                 "budget.trials={trials}"],
        "predict": ["asha.enabled=false", "predict.enabled=true", "predict.early_stop=true",
                    "budget.max_train_seconds={flat}", "budget.trials={trials}"]}


CAP_TRIALS = 24  # the halving arm's trial count under --cap: more than the cap lets it start
FIRST_RUNS = 5  # --cap: the baseline's fresh runs before the searches, their median the given TTA


def run_payback(space: str, seeds: list[int], repeats: int, out: Path, work: Path, cap: float | None = None) -> None:
    from autospeed.space import load_spec
    from autospeed.track import names, runs
    from autospeed.track.store import connect

    spec = load_spec(space)
    baseline = spec.recipe_for({}, baseline=True).model_copy(
        update={"max_train_seconds": spec.confirm.max_train_seconds or FULL_SECONDS})
    recipes = {"baseline": json.loads(baseline.model_dump_json(exclude_none=True))}
    capped, first, given = [], [], None  # --cap: the halving arm's exploration capped at `cap` baseline runs
    if cap is not None:
        first = time_interleaved(recipes, [600 + r for r in range(FIRST_RUNS)], work / "first")["baseline"]
        given = statistics.median(r["tta_seconds"] for r in first)
        capped = [f"budget.trials={CAP_TRIALS}", f"budget.exploration_baseline_runs={cap:g}",
                  f"confirm.baseline_tta_seconds={given:.3f}",
                  f"confirm.baseline_tta_note=median of {FIRST_RUNS} fresh baseline runs before the searches"]
        print(f"baseline first: {[r['tta_seconds'] for r in first]}, given {given:.3f} s", flush=True)
    searches = []
    for seed in seeds:
        flat = trials = None
        for arm, overrides in ARMS.items():
            name = f"long-{arm}-s{seed}"
            variant = write_space_variant(space, [f"sampler.seed={seed}", "confirm.repeats=0",
                                                  *(capped if arm == "halving" else []),
                                                  *(o.format(flat=flat, trials=trials) for o in overrides)],
                                          name, work)
            run = search_and_export(variant, work, name, exclusive=True)
            client = connect(run.tracking_uri)
            rows = runs.trial_rows(client, runs.find_parent(client, name))
            trained = sum(r.metrics.get(names.M_TRAIN_SECONDS, 0.0) for r in rows)
            if flat is None:  # the halving search sets the flat arms' budget and, capped, their count of trials
                flat, trials = round(trained / len(rows), 2), len(rows)
            best = next(r for r in runs.ranked(rows) if not r.baseline)
            budget = f"{flat:.2f}" if overrides else \
                f"ASHA rungs {spec.asha.grace_seconds:g}-{spec.budget.max_train_seconds:g}"
            searches.append({"name": name, "seed": seed, "arm": arm, "wall_seconds": run.wall_seconds,
                             "train_seconds": trained, "trial_budget": budget,
                             "winner": best.trial_id, "recipe": _recipe_yaml(client, best.run_id, spec)})
            print(f"{name}: {run.wall_seconds:.0f} s wall, {trained:.1f} s of trials' train clock, winner "
                  f"{best.trial_id}", flush=True)
    for s in searches:
        recipes.setdefault(s["name"], s["recipe"])
    timed = time_interleaved(recipes, [700 + r for r in range(repeats)], work / "timed")
    first_ttas = ", ".join(f"{x['tta_seconds']:.2f}" for x in first)
    preface = "" if cap is None else (
        f"Capped (`--cap {cap:g}`): the baseline first trained {FIRST_RUNS} times in fresh processes (TTA "
        f"{first_ttas} s), their median given to the halving arm as confirm.baseline_tta_seconds ({given:.3f} s) "
        f"with budget.exploration_baseline_runs {cap:g} and {CAP_TRIALS} trials, so the cap, not the count, ends its "
        f"exploration; the flat arms run as many trials as it did, at its train seconds / its trials each. Baseline "
        f"runs below count the interleaved baseline runs' median, measured after the searches.\n\n")
    text = payback_text(searches, timed, space, repeats, preface)
    write_results(out, text)


def _recipe_yaml(client, run_id: str, spec) -> dict:
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        data = yaml.safe_load(Path(client.download_artifacts(run_id, "recipe.yaml", tmp)).read_text())
    data["max_train_seconds"] = spec.confirm.max_train_seconds or FULL_SECONDS
    return data


def payback_text(searches: list[dict], timed: dict, space: str, repeats: int, preface: str = "") -> str:
    from autospeed.outcome import median_tta, speedup, speedup_interval

    base = timed["baseline"]
    base_tta = median_tta([r["tta_seconds"] for r in base])
    base_wall = statistics.median(r["process_wall_seconds"] for r in base)
    seeds = sorted({s["seed"] for s in searches})
    lines = [f"`{space}` searched at {len(seeds)} sampler seeds by each arm (confirmation off: exploration only): "
             "`halving`, the space as it is (ASHA from its cut, ranked by the censored objective); `flat`, ASHA off "
             "and every trial the same budget, the halving search's trial train seconds / its trials (equal compute "
             "on the train clock, seed by seed), ranked by the metric at that horizon; `predict`, the same flat "
             "budget ranked by horizon.py's predicted TTA (the previous long.yaml). Then the baseline and each "
             f"winner trained to the real target in fresh `autospeed train` processes, interleaved, {repeats} each. "
             f"One baseline run = its median process wall ({base_wall:.1f} s, start to exit) or its median TTA "
             f"({base_tta:.1f} s on the train clock).", "",
             "| seed | arm | trial budget s | trials' train clock s (baseline runs) | exploration wall s (baseline "
             "runs) | winner | winner median TTA (min-max) | speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    speed: dict[tuple[int, str], float | None] = {}
    for s in searches:
        med, lo, hi, _ = describe_runs(timed[s["name"]])
        tta = median_tta([r["tta_seconds"] for r in timed[s["name"]]])
        speed[s["seed"], s["arm"]] = base_tta / tta if tta and base_tta else None
        shown_speed = f"{speed[s['seed'], s['arm']]:.2f}x" if speed[s["seed"], s["arm"]] else "missed"
        lines.append(f"| {s['seed']} | {s['arm']} | {s['trial_budget']} | {s['train_seconds']:.1f} "
                     f"({s['train_seconds'] / base_tta:.2f}) | {s['wall_seconds']:.0f} "
                     f"({s['wall_seconds'] / base_wall:.2f}) | {s['winner']} | {med} ({lo}-{hi}) | "
                     f"{shown_speed} |")
    med, lo, hi, every = describe_runs(base)
    lines += ["", f"Baseline: median {med} s ({lo}-{hi}); every run: {every}.", ""]
    at_3x = sum(1 for seed in seeds if (speed.get((seed, "halving")) or 0) >= 3.0)
    not_worse = sum(1 for seed in seeds if (speed.get((seed, "halving")) or 0) >= (speed.get((seed, "flat")) or 0))
    # halving's winner against the flat arm's, seed by seed, on their fresh runs: how far apart the two are, beside
    # how much their runs scatter (the Mann-Whitney interval confirmation uses, autospeed.outcome)
    lines += ["Halving's winner against the flat arm's, seed by seed: the ratio of their median TTAs (above 1: "
              "halving's is faster) and its 90% interval over their fresh runs (outcome.speedup_interval, as "
              "confirmation computes a speed-up); an interval wholly below 1 is a seed where halving is worse beyond "
              "the runs' scatter.", ""]
    worse_beyond = 0
    by_arm = {(s["seed"], s["arm"]): timed[s["name"]] for s in searches}
    for seed in seeds:
        flat_runs, halving_runs = by_arm.get((seed, "flat")), by_arm.get((seed, "halving"))
        if not flat_runs or not halving_runs:
            continue
        flat_ttas = [r["tta_seconds"] for r in flat_runs]
        halving_ttas = [r["tta_seconds"] for r in halving_runs]
        ratio = speedup(median_tta(flat_ttas), median_tta(halving_ttas))
        low, high = speedup_interval(flat_ttas, halving_ttas)
        worse_beyond += high is not None and high < 1.0
        shown_ratio = f"{ratio:.2f}x" if ratio else "-"
        lines.append(f"- seed {seed}: {shown_ratio} [{f'{low:.2f}' if low else '?'}x-"
                     f"{f'{high:.2f}' if high else '?'}x]")
    lines += ["", f"Goal (issue 43, E5): the new method at least 3x in 4 of 5 seeds: {at_3x} of {len(seeds)} "
                  f"({'met' if at_3x >= 4 and len(seeds) >= 5 else 'not met'}); never worse than the metric at "
                  f"equal horizon on the same seed (speed-up at least the flat arm's): {not_worse} of {len(seeds)} "
                  f"({'met' if not_worse == len(seeds) else 'not met'}); worse beyond its runs' scatter (the interval "
                  f"above wholly below 1): {worse_beyond} of {len(seeds)} seeds."]
    return results_header("Long jobs (b): payback of halving from the cut against the flat search and the "
                          "predictor, at equal compute") + preface + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["curves", "quality", "payback"], required=True)
    parser.add_argument("--space", default=SPACE)
    parser.add_argument("--recipes", type=int, default=20, help="random recipes besides the baseline")
    parser.add_argument("--decaying", type=int, default=5, help="of them, again with schedule: cosine")
    parser.add_argument("--seed", type=int, default=1, help="RandomSampler seed of the drawn recipes (seed 0's curves, "
                        "experiments/results/long_job_curves_tuning.json, tuned the predictor: "
                        "reported figures use others)")
    parser.add_argument("--full-seconds", type=float, default=FULL_SECONDS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="payback: sampler seeds")
    parser.add_argument("--repeats", type=int, default=5, help="payback: fresh-process runs per recipe")
    parser.add_argument("--curves", default=f"{RESULTS}/long_job_curves.json")
    parser.add_argument("--cap", type=float, default=None, help="payback: cap the halving arm's exploration at this "
                        "many baseline runs (budget.exploration_baseline_runs), the baseline measured first")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.part == "curves":
        run_curves(args.space, args.recipes, args.decaying, args.seed, Path(args.curves), args.full_seconds)
    elif args.part == "quality":
        data = json.loads(Path(args.curves).read_text())
        text = results_header("Long jobs (a): is a predicted TTA honest enough to rank?") + "\n".join(
            quality_lines(data)) + "\n"
        print(text)
        write_results(args.out or f"{RESULTS}/long_job.md", text)
    else:
        if quick():
            raise SystemExit("long_job --part payback runs searches; the quick pass starts no Ray")
        with tempfile.TemporaryDirectory() as tmp:
            run_payback(args.space, args.seeds, args.repeats, Path(args.out or f"{RESULTS}/long_job_payback.md"),
                        Path(tmp), args.cap)


if __name__ == "__main__":
    main()
