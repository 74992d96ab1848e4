"""The text of experiments/results/long_job_bench.md from experiments/long_job_bench.py's rows: the arms' table, the
halving plans, the effective LR across horizons, the reading and issue 43's goals, every figure counted from the
rows."""

from __future__ import annotations

import math

from _long_job_arms import ARMS, ASHA_CAPPED, CAP_RUNS, CUT_RUNGS, FLAT, FROM_CUT, spent
from long_job_ranking import fmt

GOALS = {20: (0.10, 1.15), 50: (0.20, 1.30)}  # first-pick miss at most, median regret at most (issue 43)


def table(results: list[dict]) -> list[str]:
    out = ["| target | ratio (cut, samples) | reach | arm | first-pick miss | median regret | 90th pct regret | "
           "top-3 within 1.1x | rho reached (ceiling) | AUC | exploration: x flat, baseline runs | "
           "first pick vs metric's "
           "(reaches where it misses / misses where it reaches) | first-pick miss, other seeds' truth |",
           "|" + "---|" * 13]
    for r in results:
        for a in ARMS:
            c = r[a]
            versus = "-" if a == "metric" else f"{c['wins']} / {c['losses']}"
            out.append(f"| {r['target']} | {r['ratio']}x ({r['cut']:.0f}) | {r['reached']}/{r['n']} | {a} | "
                       f"{fmt(c['miss'], True)} | {fmt(c['regret'])} | {fmt(c['regret90'])} | {fmt(c['top3'], True)} | "
                       f"{fmt(c['rho'])} ({fmt(r['ceiling'])}) | {fmt(c['auc'])} | {fmt(c['flats'])}, "
                       f"{fmt(c['runs'])} | {versus} | "
                       f"{fmt(c['miss_other'], True)} |")
    return out


def plans_text(results: list[dict], trials: int) -> list[str]:
    """The halving plans at the space's target, in samples, in cuts and in baseline runs."""
    out = []
    for r in [r for r in results if r["target"] == results[0]["target"]]:
        for eta, plan in r["plans"].items():
            out.append(f"- {r['ratio']}x, eta {eta}: " + ", ".join(f"{n} trials to {h:.0f}" for h, n in plan) +
                       f" samples (b = {plan[0][0] / r['cut']:.3f} cut; {spent(plan) / r['cut']:.1f} cuts in all, as "
                       f"the flat arm's {trials}).")
        for name, plan in r["cut_plans"].items():
            out.append(f"- {r['ratio']}x, '{name}': " + ", ".join(f"{n} trials to {h:.0f}" for h, n in plan) +
                       f" samples ({spent(plan) / r['cut']:.0f} cuts in all, {spent(plan) / r['run']:.2f} baseline "
                       "runs).")
    return ["Halving plans at the space's target (a survivor continues from the rung before; 'asha 3' runs on eta 3's "
            "horizons, the 'asha from cut' arms on those of 'halving from cut to 9c', one trial after another in the "
            "search's order, and spend what Ray's rule lets through):", "", *out]


def lr_table(results: list[dict]) -> list[str]:
    out = ["| target | ratio | eta 3 leader's effective LR at b, 3b, 9b (median over searches) | the trend's LR at "
           "the job's length (median) | the search's truly fastest recipe's (median) |", "|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r['target']} | {r['ratio']}x | " + ", ".join(f"{x:.3g}" for x in r["leaders"]) +
                   f" | {r['trend']:.3g} | {r['best_lr']:.3g} |")
    return out


def _span(values: list[float], pct: bool = True) -> str:
    low, high = fmt(min(values), pct), fmt(max(values), pct)
    return low if low == high else f"{low}-{high}"


def _never_worse(r: dict, a: str) -> bool:
    """Issue 43's "never worse than the metric at equal horizon": first-pick miss within 1 point, median regret no
    higher."""
    return r[a]["miss"] <= r["metric"]["miss"] + 0.01 and r[a]["regret"] <= r["metric"]["regret"] + 1e-9


def _against_metric(results: list[dict], a: str) -> str:
    """How arm `a` compares with the metric at the cut over the rows, counted."""
    n = len(results)
    lower = [r for r in results if r[a]["miss"] < r["metric"]["miss"] - 0.01]
    fewer3 = [r for r in results if r[a]["top3"] < r["metric"]["top3"] - 0.05]
    return (f"its first-pick miss is lower than the metric's in {len(lower)} of {n} rows (by row: " + ", ".join(
        f"{r['target']} {r['ratio']}x: {fmt(r[a]['miss'], True)} vs {fmt(r['metric']['miss'], True)}"
        for r in results) + f"), and it is never worse (miss and median regret) in "
        f"{sum(_never_worse(r, a) for r in results)} of {n}; its top 3 hold a recipe within 1.1x of the best in "
        f"more than 5 points fewer searches in {len(fewer3)} of {n} rows" + (" (" + ", ".join(
            f"{r['target']} {r['ratio']}x: {fmt(r[a]['top3'], True)} vs {fmt(r['metric']['top3'], True)}"
            for r in fewer3) + ")" if fewer3 else ""))


def _listed(items) -> str:
    """' (a, b)' of the items, or nothing."""
    items = list(items)
    return f" ({', '.join(items)})" if items else ""


def _by_row(results: list[dict], a: str, b: str, key: str = "miss") -> str:
    return ", ".join(f"{r['target']} {r['ratio']}x: {fmt(r[a][key], key != 'regret')} vs "
                     f"{fmt(r[b][key], key != 'regret')}" for r in results)


def from_cut(results: list[dict]) -> list[str]:
    """The reading of the arms that halve from the flat cut, counted from the rows."""
    nine, far, asha = "halving from cut to 9c", "halving from cut to 27c", "asha from cut to 9c"
    n, loo = len(results), [r for r in results if r["loo"]]
    def most(r: dict, k: int) -> str:  # the most rungs that fit in k baseline runs
        fits = [a for a in CUT_RUNGS if r[a]["runs"] <= k + 1e-9]
        if not fits:
            return f"{r['ratio']}x: none"
        a = max(fits, key=CUT_RUNGS.get)
        return f"{r['ratio']}x {a.split('cut ')[1]} ({fmt(r[a]['runs'])} runs)"

    fit = {k: [most(r, k) for r in results if r["target"] == results[0]["target"]] for k in (1, 2)}
    longer = [r for r in results if r["halving from cut to 27c"]["miss"] > r[nine]["miss"] + 0.01]
    worse = [r for r in results if r[f"{asha}, horizon.py"]["miss"] > r[asha]["miss"] + 0.01]
    return [
        f"- **Halving from the flat cut** ('{nine}': all 12 trials at the cut c, exactly the flat arm's information, "
        "the best 4 on to 3c, the best 2 on to 9c, ranked by the metric at each trial's last rung; 32 cuts, "
        f"{_span([r[nine]['flats'] for r in results], False)}x the flat arm's samples, "
        f"{_span([r[nine]['runs'] for r in results], False)} baseline runs, a baseline run being the job the ratio "
        f"defines, ratio x c): {_against_metric(results, nine)}. Its first pick can differ from the metric's only "
        "where a longer horizon changes the order; per row, the searches where it reaches and the metric's does not "
        "/ the reverse: " + ", ".join(f"{r[nine]['wins']} / {r[nine]['losses']}" for r in results) + " (rows in "
        f"table order). Median regret by row: {_by_row(results, nine, 'metric', 'regret')}; top 3 within "
        f"1.1x: {_by_row(results, nine, 'metric', 'top3')}. Scored against the "
        "trial's other seeds only (its own seed left out of the truth), its miss is "
        f"{_span([r[nine]['miss_other'] for r in results])} against the metric's "
        f"{_span([r['metric']['miss_other'] for r in results])}. With each recipe left out in turn (a quarter as many "
        "searches of the others), its miss is lower than the metric's in " + ", ".join(
            f"{sum(h < m for m, h in r['loo'])} of {len(r['loo'])}" for r in loo) + " by row, the smallest difference "
        "(the metric's miss minus its) " + ", ".join(f"{round(min(m - h for m, h in r['loo']) * 100):d}"
                                                     for r in loo) + " points; one recipe left out erases it at " +
        (", ".join(f"{r['target']} {r['ratio']}x" for r in loo if min(m - h for m, h in r["loo"]) <= 0) or "no row")
        + ".",
        "- **How many rungs**: as many as fit in 1 baseline run (eta 3; the space's target) " + ", ".join(fit[1]) +
        "; in 2 " + ", ".join(fit[2]) + ". A fourth rung ('halving from cut to 27c', the best 2 on to 27c) misses "
        f"more often than stopping at 9c in {len(longer)} of {n} rows" + _listed(
            f"{r['target']} {r['ratio']}x: {fmt(r[far]['miss'], True)} vs {fmt(r[nine]['miss'], True)}"
            for r in longer) + "; at 20x it misses least ("
        + ", ".join(f"{r['target']}: {fmt(r[far]['miss'], True)}" for r in results if r["ratio"] == 20) +
        ") but spends " + _span([r[far]["runs"] for r in results if r["ratio"] == 20], False) +
        " baseline runs, its last rung longer than the job itself. Two rungs ('to 3c') miss more than three in "
        f"{sum(r['halving from cut to 3c']['miss'] > r[nine]['miss'] + 0.01 for r in results)} of {n} rows.",
        f"- **As the product would run it**: Ray's asynchronous rule on the same rungs ('{asha}': grace c, reduction "
        "3, max_t 9c, trials one after another) lets more trials through a rung than the synchronous plan (a rung's "
        f"first trials always continue): it spends {_span([r[asha]['flats'] for r in results], False)}x the flat "
        f"arm's samples, {_span([r[asha]['runs'] for r in results], False)} baseline runs (" + ", ".join(
            f"{r['target']} {r['ratio']}x: {fmt(r[asha]['runs'])}" for r in results if r[asha]["runs"] > 2) +
        f" above 2); {_against_metric(results, asha)}. Ranked as the product ranks (autospeed/track/runs.py: the "
        "censored objective, each trial's distance to the target at its own last rung) its miss, median regret and "
        f"top 3 are the rung-first ranking's to the precision shown ('{asha}, objective'; its first pick differs in " +
        ", ".join(f"{r['objective_departs']}" for r in results) + f" of the {results[0]['searches']} searches by "
        "row): a survivor's best so far is at least what the trials stopped at its rung reached there. Ranked by "
        f"autospeed/horizon.py at each trial's own last rung (the product with predict on) it misses more often in "
        f"{len(worse)} of {n} rows" + _listed(
            f"{r['target']} {r['ratio']}x: {fmt(r[f'{asha}, horizon.py']['miss'], True)} vs "
            f"{fmt(r[asha]['miss'], True)}" for r in worse) + ": a trial stopped early is projected from its own, "
        "shorter horizon.",
        f"- **With the product's exploration cap** ('{ASHA_CAPPED}': the same rule with `budget."
        f"exploration_baseline_runs: {CAP_RUNS}`, as long.yaml's capped search runs it: no trial starts once the "
        f"trials' samples reach {CAP_RUNS} baseline runs, and the one running then stops there; ranked as the product "
        f"ranks): it spends {_span([r[ASHA_CAPPED]['runs'] for r in results], False)} baseline runs; its first-pick "
        f"miss by row {_by_row(results, ASHA_CAPPED, asha)} (capped vs uncapped); median regret "
        f"{_by_row(results, ASHA_CAPPED, asha, 'regret')}. " + _against_metric(results, ASHA_CAPPED)[0].upper()
        + _against_metric(results, ASHA_CAPPED)[1:] + ".",
    ]


def reading(results: list[dict], lr_split: str, collapses: str) -> list[str]:
    """What the rows say across conditions, counted from them."""
    def same(a: str, b: str) -> int:  # rows where two arms' decision metrics are equal (nan: no search)
        keys = ("miss", "regret", "top3")
        return sum(all(r[a][k] == r[b][k] or math.isnan(r[a][k]) and math.isnan(r[b][k]) for k in keys)
                   for r in results)

    n = len(results)
    below = [r for r in results if r["metric"]["auc"] < 0.5]
    high = [r for r in results if r["leaders"] and r["leaders"][1] > 1.25 * r["best_lr"]]
    steady = [f"{r['target']} {r['ratio']}x" for r in results if r["leaders"] and max(r["leaders"]) / min(r["leaders"])
              < 1.1 and abs(math.log(r["leaders"][-1] / r["best_lr"])) < math.log(1.1)]
    trend_worse = [r for r in results if r["halving 3 + LR trend"]["miss"] > r["halving 3"]["miss"] + 0.01]
    b = results[0]["plans"][3][0][0] / results[0]["cut"]
    out = ["## Reading", "", *from_cut(results),
           "- **Successive halving at the flat arm's exploration compute** ('halving 3': 12 trials at b = "
           f"{b:.3f} cut, the best 4 on to 3b, the best 2 on to 9b, ranked by the metric there): "
           f"{_against_metric(results, 'halving 3')}. Per row, the searches where its first pick reaches and the "
           "metric's does not / the reverse: " + ", ".join(
               f"{r['halving 3']['wins']} / {r['halving 3']['losses']}" for r in results) + " (rows in table order). "
           "What it trades: a longer last rung catches "
           f"recipes that lead early and then fall apart ({collapses}), but its first rung is shorter than the flat "
           "cut, and it stops the search's truly fastest recipe there in " + ", ".join(
               f"{fmt(r['lost_first'], True)}" for r in results) + " of the searches by row (the flat cut leaves it "
           "out of its top 4 in " + ", ".join(f"{fmt(r['lost_flat'], True)}" for r in results) + "): it picks a "
           "recipe that reaches more often, and, at 50x, a slower one.",
           f"- 'halving 2' (12, 6, 3, 2 trials at b, 2b, 4b, 8b): {_against_metric(results, 'halving 2')}.",
           "- 'asha 3' (Ray Tune's asynchronous rule, what the product's ASHA does, on eta 3's horizons, trials one "
           f"after another) spends {_span([r['asha 3']['flats'] for r in results], False)}x the flat arm's samples (a "
           f"rung's first trials always continue): {_against_metric(results, 'asha 3')}.",
           "- The effective LR across horizons (the table above): the leader's LR is within 10% at b, 3b and 9b, and "
           f"at 9b within 10% of the search's truly fastest recipe's, in {len(steady)} of {n} rows ("
           + ", ".join(steady) + "); the leader at 3b has an LR more than "
           f"1.25x the truly fastest recipe's in {len(high)} of {n} rows (" + ", ".join(
               f"{r['target']} {r['ratio']}x: {r['leaders'][1]:.3g} vs {r['best_lr']:.3g}" for r in high) +
           "): short trials preferring too high an LR. A trend fitted over b, 3b and 9b and extrapolated " +
           _span([r["ratio"] * r["cut"] / r["plans"][3][-1][0] for r in results], False) + "x further follows the "
           "leaders: 'halving 3 + LR trend' misses more often than 'halving 3' in "
           f"{len(trend_worse)} of {n} rows (" + ", ".join(
               f"{r['target']} {r['ratio']}x: {fmt(r['halving 3 + LR trend']['miss'], True)} vs "
               f"{fmt(r['halving 3']['miss'], True)}" for r in trend_worse) + "). It has no constant fitted on these "
           "curves (the trend is each search's own; the rule was written before it was scored); it is not kept: "
           "the trend says which way the leaders' LR moves, not where the job's best LR is.",
           f"- 'previous' ranks as the metric at the cut in {same('previous', 'metric')} of {n} rows (no prediction at "
           f"these cuts); 'horizon branch' as 'horizon 0.71' in {same('horizon branch', 'horizon 0.71')} of {n} and "
           f"'horizon 0.71' as the metric in {same('horizon 0.71', 'metric')} of {n}: a wsd decay at 80% of 30 "
           "epochs comes long after these cuts, and the branches measured factors near 1 (above).",
           f"- The reach / no-reach AUC is below 0.5 in {len(below)} of {n} rows for the metric: early in a run the "
           f"recipes that never reach tend to lead; {lr_split}.",
           "- Searches where horizon's first pick departs from the metric's, and of them those where the pick was a "
           "trial scored before any curve gave an exponent: " + ", ".join(
               f"{r['default']} of {r['departs']}" for r in results) + " (rows in table order).",
           "- Caveats: 20 recipes, so the 2000 searches of a row resample the same few recipes and seeds, and the "
           "differences rest on how a handful of high-LR recipes behave. A baseline run here is the fastest recipe's "
           "samples to the target: long_bench.yaml has no baseline of its own and its default recipe (SGD, batch "
           "128, lr 0.05, constant) is not among the 20 trained; any slower baseline makes every exploration cheaper "
           "in baseline runs (the median reached recipe needs " + _span([r["median_run"] for r in results], False) +
           "x the fastest's samples). The simulated ASHA compares each trial's best metric so far (the censored "
           "objective) at a rung, Ray's in the product the metric reported there, and a trial that reaches the "
           "target trains on to its rung here (it ends itself in the product: against the ASHA arms' cost); "
           "the dense trial evaluations end at 1/20 of "
           "the fastest recipe's samples to 0.965, so a rung past them (eta 3's 9b at 20x, 3c and later from the cut) "
           "is "
           "scored at the full run's "
           "last evaluation before its horizon (every 0.25 epoch, about 5,000 samples) while charged the whole "
           "horizon: against the grown arms. rho and the AUC of a grown arm rank all 20 recipes by one halving with "
           "the same horizons (each rung's size scaled by 20/12)."]
    return out


# the goals table's; every other arm ranks as one of these or misses more (the arms' table)
GOAL_ARMS = ("metric", "halving 3", "asha 3", *(a for a in FROM_CUT if not a.endswith("objective")), ASHA_CAPPED)


def goals(results: list[dict]) -> list[str]:
    """Issue 43's E2/E3 goals, each arm in each row: met or not, counted from the rows."""
    out = ["## Goals (issue 43, E2/E3), the space's target first", "",
           "First-pick miss at most 10% (20x) / 20% (50x); median regret at most 1.15 / 1.3; rho >= 0.8 over at least "
           "15 reached recipes; never worse than the metric at the cut on the same searches (miss within 1 point, "
           "median regret no higher); exploration at most 2 baseline runs. The arms that rank as the metric at the cut "
           "('horizon 0.71', 'horizon branch', 'previous'), those that miss more than 'halving 3', and ASHA's ranked "
           "by the objective (its first pick is the rung-first one's) are left out here (the table above).", "",
           "| target | ratio | arm | miss | median regret | rho over >= 15 reached | never worse than the metric | "
           "exploration <= 2 baseline runs |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if not r["searches"] - r["skipped"]:
            out.append(f"| {r['target']} | {r['ratio']}x | every arm | not measured (no search had a recipe that "
                       "reaches) | | | | |")
            continue
        miss_max, regret_max = GOALS[r["ratio"]]
        for a in GOAL_ARMS:
            c = r[a]
            marks = [(fmt(c["miss"], True), c["miss"] <= miss_max), (fmt(c["regret"]), c["regret"] <= regret_max),
                     (f"{fmt(c['rho'])} over {r['reached']}", c["rho"] >= 0.8 and r["reached"] >= 15),
                     ("-", None) if a == "metric" else ("", _never_worse(r, a)), (fmt(c["runs"]), c["runs"] <= 2)]
            cells = [text if ok is None else f"{text}{': ' if text else ''}{'met' if ok else 'NOT met'}"
                     for text, ok in marks]
            out.append(f"| {r['target']} | {r['ratio']}x | {a} | " + " | ".join(cells) + " |")

    def meeting(a: str) -> str:
        return ", ".join(f"{r['target']} {r['ratio']}x" for r in results if r["searches"] - r["skipped"]
                         and r[a]["miss"] <= GOALS[r["ratio"]][0] and r[a]["regret"] <= GOALS[r["ratio"]][1]
                         and r[a]["runs"] <= 2 and _never_worse(r, a)) or "none"

    flat = [f"{r['target']} {r['ratio']}x {a}" for r in results for a in FLAT if r[a]["miss"] <= GOALS[r["ratio"]][0]]
    out += ["", "Both the miss and the median-regret goal, never worse than the metric, within 2 baseline runs: " +
            "; ".join(f"'{a}' at {meeting(a)}" for a in GOAL_ARMS[1:]) + ". A flat arm meets the miss goal at: " +
            (", ".join(flat) or "none") + "."]
    return out
