"""Long jobs: which ranking of trials cut at the budget picks the fastest recipe? Decision metrics, offline.

Three rankings of the same trials, on the committed curves (long_job_curves.json, held out; long_job_curves
_tuning.json, the curves the previous predictor and this ranking were designed on), each recipe cut at the trial
budget as a search cuts it:
  * previous: the per-curve predictor of autospeed/predict.py (predict_tta, as search/curve.py called it before
    autospeed/horizon.py: only the evaluations before a wsd decay, no crossing past the run's end, a trial without
    a prediction censored at the cap);
  * metric at the cut: the censored objective of a search without predict, `budget x (1 + gap)` ("Is one epoch
    all you need?"): the simple ranking every predictor must beat;
  * horizon: autospeed/horizon.py as a search runs it: trials in the search's order, each pooling the exponents
    of the trials before it with its own.
Decision metrics over `--searches` simulated 12-trial searches (12 of the 21 recipes, drawn in a random order;
the baseline among them only when drawn; a search in which no recipe reaches is left out, and counted):
first-pick miss (the top-ranked recipe never reaches the target), top-1 regret (its true TTA over the search's
best; inf for a miss), top-3 within 1.1x of the search's best (confirmation re-runs the top few). Over all 21
recipes: Spearman's rho over the recipes that reach (its ceiling is 1; n is small and said), rho over all recipes
with its ceiling (the recipes that never reach tie in the truth), and the AUC of the score for reach / no reach.
For horizon's predicted TTAs of the recipes that reach: median |log(predicted / true)| and how often the 80%
interval holds the truth. Targets below long.yaml's 0.975 (which sits at the model's ceiling) are a
sensitivity check: more recipes reach. The truth is one seed per recipe on a noisy clock (issue 43). Times nothing.

    python experiments/long_job_ranking.py     # seconds -> experiments/results/long_job_ranking.md
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
from _common import RESULTS, results_header, shown, write_results  # noqa: E402

FILES = (f"{RESULTS}/long_job_curves.json", f"{RESULTS}/long_job_curves_tuning.json")
TARGETS = (0.975, 0.97, 0.965)
BUDGETS = (2.5, 1.25)  # long.yaml's trial budget, and half of it (about 1/20 of the baseline's TTA)
TRIALS = 12
METHODS = ("previous", "metric", "horizon")


def recipes_of(data: dict, target: float) -> list[dict]:
    """The drawn schedule's recipes (not the cosine re-runs), each with its true TTA at `target` (inf: never)."""
    rows = [r for r in data["recipes"] if not r["label"].endswith("-cosine")]
    return [{**r, "true": next((p[0] for p in r["curve"] if p[1] >= target), math.inf)} for r in rows]


def cut_points(row: dict, budget: float) -> list[list[float]]:
    return [p for p in row["curve"] if p[0] <= budget + 1e-9]


def reached_seconds(points: list, target: float) -> float | None:
    return next((p[0] for p in points if p[1] >= target), None)


def decay_epochs(row: dict) -> float:
    return row["epochs"] * row["decay_fraction"] if row["schedule"] == "wsd" else 0.0


def metric_score(row: dict, budget: float, target: float) -> float:
    from autospeed.outcome import Status, objective

    points = cut_points(row, budget)
    hit = reached_seconds(points, target)
    best = max(p[1] for p in points) if points else None
    return hit if hit is not None else objective(Status.NOT_REACHED, None, best, target, budget, "max")


def previous_score(row: dict, budget: float, target: float, predict: dict, cap: float) -> float:
    """The objective search/curve.py gave before autospeed/horizon.py (git show be55909~1:autospeed/search/curve.py)."""
    from autospeed.outcome import Status, objective
    from autospeed.predict import predict_tta

    points = cut_points(row, budget)
    hit = reached_seconds(points, target)
    if hit is not None:
        return hit
    best = max(p[1] for p in points) if points else None
    stable = row["epochs"] - decay_epochs(row)
    kept = [p for p in points if p[2] <= stable + 1e-9]
    if not kept:
        return objective(Status.NOT_REACHED, None, best, target, cap, "max")
    horizon = row["epochs"] * points[-1][0] / points[-1][2]
    p = predict_tta([q[0] for q in kept], [q[1] for q in kept], target, "max", min_points=predict["min_evaluations"],
                    max_interval_ratio=predict["max_interval_ratio"], offset_seconds=row["compile_seconds"],
                    horizon_seconds=horizon, max_seconds=cap)
    if p.ok:
        return min(max(p.seconds, points[-1][0]), cap)
    return objective(Status.NOT_REACHED, None, best, target, cap, "max")


def horizon_cut(row: dict, budget: float, target: float):
    from autospeed import horizon

    points = cut_points(row, budget)
    return horizon.cut_of([p[0] for p in points], [p[1] for p in points], [p[2] for p in points], target=target,
                          mode="max", run_epochs=row["epochs"], decay_epochs=decay_epochs(row),
                          offset_seconds=row["compile_seconds"], cooldown=row.get("cooldown"))


def horizon_scores(rows: list[dict], order: list[int], budget: float, target: float, cap: float) -> dict[int, tuple]:
    """index -> (objective, prediction or None) for the recipes in `order`, each pooling the exponents of the
    ones before it (the search's ledger) with its own."""
    from autospeed import horizon

    out, pool = {}, []
    for i in order:
        points = cut_points(rows[i], budget)
        hit = reached_seconds(points, target)
        cut = horizon_cut(rows[i], budget, target)
        if hit is not None:
            out[i] = (hit, None)
        else:
            score, prediction = horizon.score(cut, horizon.pooled([*pool, cut.exponent]), cap)
            out[i] = (score, prediction if prediction.ok else None)
        pool.append(cut.exponent)
    return out


def rank_quantile(values: list[float], q: float) -> float:
    """The value at rank ceil(q x n) of the sorted values (no interpolation: a regret may be inf)."""
    ordered = sorted(values)
    return float(ordered[max(math.ceil(q * len(ordered)) - 1, 0)])


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) > 2 else math.nan


def auc(reached: list[bool], scores: list[float]) -> float:
    """P(a recipe that reaches scores below one that does not), ties half."""
    pos = [s for r, s in zip(reached, scores) if r]
    neg = [s for r, s in zip(reached, scores) if not r]
    if not pos or not neg:
        return math.nan
    return sum((p < n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def condition(rows: list[dict], budget: float, target: float, predict: dict, cap: float, searches: int,
              seed: int) -> dict:
    """Every method's decision metrics for one (curves, target, budget)."""
    n = len(rows)
    true = np.array([r["true"] for r in rows])
    fixed = {"previous": [previous_score(r, budget, target, predict, cap) for r in rows],
             "metric": [metric_score(r, budget, target) for r in rows]}
    rng = np.random.default_rng(seed)
    per = {m: {"miss": [], "regret": [], "top3": []} for m in METHODS}
    skipped = 0
    for _ in range(searches):
        order = [int(i) for i in rng.permutation(n)[:TRIALS]]
        t = true[order]
        if not np.isfinite(t).any():
            skipped += 1
            continue
        best = float(t.min())
        h = horizon_scores(rows, order, budget, target, cap)
        for m in METHODS:
            score = (lambda i: h[i][0]) if m == "horizon" else (lambda i, s=fixed[m]: s[i])  # noqa: E731
            ranked = sorted(order, key=score)  # stable: ties keep the search's order
            per[m]["miss"].append(not math.isfinite(true[ranked[0]]))
            per[m]["regret"].append(true[ranked[0]] / best)
            per[m]["top3"].append(min(true[i] for i in ranked[:3]) <= 1.1 * best)
    whole = horizon_scores(rows, list(range(n)), budget, target, cap)
    scores = {**fixed, "horizon": [whole[i][0] for i in range(n)]}
    reach = np.isfinite(true)
    ceiling = spearman(np.where(reach, true, 1e9), np.where(reach, true, 1e9 + np.arange(n)))
    out = {"reached": int(reach.sum()), "skipped": skipped, "searches": searches, "ceiling_all": ceiling}
    for m in METHODS:
        s = np.array(scores[m])
        regret = per[m]["regret"]
        out[m] = {"miss": statistics.fmean(per[m]["miss"]), "regret": rank_quantile(regret, 0.5),
                  "regret90": rank_quantile(regret, 0.9), "top3": statistics.fmean(per[m]["top3"]),
                  "rho_reached": spearman(s[reach], true[reach]), "rho_all": spearman(s, np.where(reach, true, 1e9)),
                  "auc": auc(list(reach), list(s))}
    predicted = [(whole[i][1], true[i]) for i in range(n) if reach[i] and whole[i][1] is not None]
    out["horizon_predicted"] = len(predicted)
    out["horizon_log"] = statistics.median(abs(math.log(p.seconds / t)) for p, t in predicted) if predicted else None
    out["horizon_inside"] = (sum(p.low_seconds <= t <= p.high_seconds for p, t in predicted) / len(predicted)
                             if predicted else None)
    return out


def fmt(x: float, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if pct:
        return f"{x:.0%}"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def lines_for(results: list[dict]) -> list[str]:
    out = ["| curves | target | budget | reach | method | first-pick miss | median regret | 90th pct regret | "
           "top-3 within 1.1x | rho reached | rho all (ceiling) | AUC |", "|" + "---|" * 12]
    for r in results:
        for m in METHODS:
            c = r[m]
            out.append(f"| {r['file']} | {r['target']} | {r['budget']:g} s | {r['reached']}/21 | {m} | "
                       f"{fmt(c['miss'], True)} | {fmt(c['regret'])} | {fmt(c['regret90'])} | {fmt(c['top3'], True)} | "
                       f"{fmt(c['rho_reached'])} | {fmt(c['rho_all'])} ({fmt(r['ceiling_all'])}) | {fmt(c['auc'])} |")
    out += ["", "Horizon's predicted TTAs of the recipes that reach (all 21 pooled):", "",
            "| curves | target | budget | predicted / reach | median abs log(pred/true) | in 80% interval |",
            "|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r['file']} | {r['target']} | {r['budget']:g} s | {r['horizon_predicted']}/{r['reached']} | "
                   f"{fmt(r['horizon_log'])} | {fmt(r['horizon_inside'], True)} |")
    skipped = {(r["file"], r["target"], r["budget"]): r["skipped"] for r in results if r["skipped"]}
    if skipped:
        out += ["", "Searches left out (no recipe among the 12 reaches): " + ", ".join(
            f"{f} at {t} / {b:g} s: {n}" for (f, t, b), n in skipped.items()) + f" of {results[0]['searches']}."]
    return out


def reading(results: list[dict]) -> list[str]:
    """The comparison the issue asks for, counted from the rows: horizon against the metric at the cut (never
    worse?) and against the previous predictor, per budget; what no ranking can show here."""
    out = ["## Reading", ""]
    for budget in BUDGETS:
        rows = [r for r in results if r["budget"] == budget]
        for other in ("metric", "previous"):
            worse = [r for r in rows if r["horizon"]["miss"] > r[other]["miss"] + 0.01]
            out.append(f"- {budget:g} s: horizon's first-pick miss is within 1 point of or below {other}'s in "
                       f"{len(rows) - len(worse)} of {len(rows)} conditions" + ("; worse in " + ", ".join(
                           f"{r['file']} at {r['target']} ({r['horizon']['miss']:.0%} vs {r[other]['miss']:.0%})"
                           for r in worse) if worse else "") + ".")
    out += ["- Goals of issue 43 (E2/E3: miss <= 10% at 20x, median regret <= 1.15x, rho >= 0.8 over >= 15 reached "
            "recipes) cannot be shown on these curves: 3-11 of 21 recipes reach, one seed each; rho over the "
            "reached recipes rests on 3-11 points, and at long.yaml's 0.975 on the held-out curves every ranking "
            "misses in a fifth to a half of the searches.",
            "- Horizon's 80% intervals hold the truth less often than 80% (the table above): they come from the "
            "spread of the trials' exponents only, not from the noise of the error at the cut or of the truth.",
            "- The tuning curves were seen while designing horizon (the pooled exponent, the 0.71 decay factor): "
            "its figures there are not evidence; the held-out ones are, with the caveats above."]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--searches", type=int, default=2000, help="simulated 12-trial searches per condition")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=f"{RESULTS}/long_job_ranking.md")
    args = parser.parse_args()
    from autospeed.space_sections import Predict

    results = []
    for path in FILES:
        data = json.loads(Path(path).read_text())
        predict = data["predict"]
        for target in TARGETS:
            rows = recipes_of(data, target)
            for budget in BUDGETS:
                cap = Predict(**{**predict, "enabled": True}).cap_seconds(budget)
                r = condition(rows, budget, target, predict, cap, args.searches, args.seed)
                results.append({**r, "file": Path(path).stem.removeprefix("long_job_curves").strip("_") or "held-out",
                                "target": target, "budget": budget})
                print(f"{path} {target} {budget}: " + ", ".join(
                    f"{m} miss {r[m]['miss']:.0%}" for m in METHODS), flush=True)
    head = (f"Curves: `{shown(FILES[0])}` (held-out) and `{shown(FILES[1])}` (tuning: the previous predictor and "
            f"this ranking were designed after seeing it), 21 recipes each (the baseline and 20 drawn from long.yaml's "
            f"space), one seed each. {args.searches} simulated searches of {TRIALS} recipes per row "
            f"(seed {args.seed}); "
            "regret = the first pick's true TTA / the search's best (inf: it never reaches).")
    text = results_header("Long jobs: ranking trials at equal horizon, decision metrics") + "\n".join(
        [head, "", *lines_for(results), "", *reading(results)]) + "\n"
    print(text)
    write_results(args.out, text)


if __name__ == "__main__":
    main()
