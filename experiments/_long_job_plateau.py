"""Predictors of the long-job winner's samples to target whose error may flatten towards a floor (issue 43: "predicts
the winner's production TTA within 25%"), offline, for experiments/_long_job_predict.py.

_long_job_predict.py's power laws run to the bound (accuracy 1) and came out too fast where the target sits near the
model's ceiling. These see what the search saw too (the winner's curve to its last rung, the curves of the other
trials trained to that rung, the survivors) and project:
  * 'plateau, own': err(s) = floor + b s^-alpha, least squares on log(err), fitted to the winner's evaluations over
    the later half of its last rung (horizon.py's window; three parameters, so at least MIN_POINTS evaluations);
  * 'plateau, shared floor': the same fitted jointly to the survivors, one floor for all (the ceiling is the model's
    and the data's, not the recipe's), b and alpha each trial's own (DPL's idea: pool what the trials share);
  * 'power law since the cut': err = b s^-alpha over the winner's evaluations from its first rung on (a window 9x
    long at 9c, where horizon.py's is 2x), no floor;
  * 'slope between rungs': the survivors' median log-log slope of the best error between the rung before the
    winner's and the winner's (3c -> 9c), projected from the winner's best error at its rung, no floor.
The interval, the same for every predictor here: production trains another seed, so the 80% interval is the
prediction times exp(-w) to exp(w), w the 80th percentile of |log(a recipe's median / one seed's samples to the
target)| over the recipes whose seeds all reach it, the winner's recipe left out (seed_band; leave one recipe out: no
constant here is tuned on the recipe it predicts). It holds the seeds' spread only, not the fit's own error.
No predictor knows the job's length; the rungs end long before any wsd decay."""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np

PREDICTORS = ("plateau, own", "plateau, shared floor", "power law since the cut", "slope between rungs")
MIN_POINTS = 4  # a three-parameter fit and one evaluation to spare
TAIL_FROM = 0.5  # the plateau fits' window: the later half of the rung, as autospeed/horizon.py's exponent
SINCE = 1 / 9  # the power law's window: from a ninth of the rung (the first rung of a winner at 9c) on
BAND = 0.8  # the 80% interval: the seeds' spread's 80th percentile either way
SHIFTS = (-0.01, -0.005, -0.0025, 0.0, 0.0025, 0.005)  # the target moved, the fits kept (_long_job_predict.moved)


def errors(row: dict, h: float, start: float = 0.0) -> list[tuple[float, float]]:
    """(samples, 1 - accuracy) of a trial row's evaluations in [start, h] (the error floored at 1e-6 for logs)."""
    return [(p[0], max(1 - p[1], 1e-6)) for p in row["curve"] if start <= p[0] <= h]


def fit(curves: Sequence[Sequence[tuple[float, float]]], floor: bool = True) -> tuple[float, list[tuple[float, float]]]:
    """(the floor, each curve's (log b, alpha)) of err_k(s) = floor + b_k s^-alpha_k fitted jointly to `curves`
    (samples, error), least squares on log(err); floor 0 without `floor`. scipy's bounded least squares from each
    curve's log-log line, the floor starting at a third of the smallest error."""
    from scipy.optimize import least_squares

    logs = [(np.log([s for s, _ in c]), np.log([e for _, e in c])) for c in curves]
    lowest = min(e for c in curves for _, e in c)
    x0, lo, hi = ([lowest / 3], [0.0], [0.999 * lowest]) if floor else ([], [], [])
    for x, y in logs:
        slope, intercept = np.polyfit(x, y, 1) if len(x) > 1 else (-1.0, y[0] + x[0])
        x0 += [float(intercept), float(min(max(-slope, 0.05), 5.0))]
        lo += [-50.0, 0.05]
        hi += [50.0, 5.0]

    def residuals(theta: np.ndarray) -> np.ndarray:
        base, rest = (theta[0], theta[1:]) if floor else (0.0, theta)
        return np.concatenate([np.log(base + np.exp(rest[2 * k] - rest[2 * k + 1] * x)) - y
                               for k, (x, y) in enumerate(logs)])

    theta = least_squares(residuals, x0, bounds=(lo, hi)).x
    base, rest = (float(theta[0]), theta[1:]) if floor else (0.0, theta)
    return base, [(float(rest[2 * k]), float(rest[2 * k + 1])) for k in range(len(logs))]


def crossing(floor: float, log_b: float, alpha: float, target_error: float) -> float:
    """Samples at which floor + b s^-alpha meets `target_error`; inf where the floor is at or above it."""
    if floor >= target_error:
        return math.inf
    growth = (log_b - math.log(target_error - floor)) / alpha
    return math.exp(growth) if growth < 700 else math.inf


def seed_band(per_seed: np.ndarray, recipe: int) -> tuple[float, float]:
    """(-w, w) in log: w the BAND-th percentile of |log(recipe median / one seed's samples to target)| over the recipes
    other than `recipe` whose seeds all reach (`per_seed[recipe][seed]`, inf: never): how far production's seed lands
    from the one trial the prediction extrapolates, either way (the winner's own seed may be a fast one or a slow
    one). (0, 0) where no other recipe has every seed reach."""
    logs = [abs(math.log(statistics.median(r) / s)) for k, r in enumerate(per_seed)
            if k != recipe and np.isfinite(r).all() for s in r]
    w = float(np.quantile(logs, BAND)) if logs else 0.0
    return -w, w


def floors(cuts: Sequence[tuple[dict, float]], target: float) -> dict[str, int]:
    """How many of the distinct picks `cuts` (a row cut at its rung, the rung) 'plateau, own' fitted a floor of 0 (a
    power law to the bound), one at or above the target's error (no crossing), one between, and too few evaluations
    for."""
    out = {"zero": 0, "above": 0, "between": 0, "none": 0}
    for row, rung in cuts:
        tail = errors(row, rung, TAIL_FROM * rung)
        floor = fit([tail])[0] if len(tail) >= MIN_POINTS else None
        out["none" if floor is None else "zero" if floor < 1e-4 else "above" if floor >= 1 - target else "between"] += 1
    return out


def best_error(row: dict, h: float) -> float:
    return min(e for _, e in errors(row, h))


def projections(winner: dict, survivors: Sequence[dict], rung: float, previous: float | None,
                target: float) -> dict[str, float]:
    """Each predictor's samples to `target` (inf: no crossing) for the winner row cut at `rung`, with the other
    trials trained to that rung (`survivors`, cut there) and the rung before it (`previous`; None: none)."""
    te = max(1 - target, 1e-6)
    out = dict.fromkeys(PREDICTORS, math.inf)
    tail = errors(winner, rung, TAIL_FROM * rung)
    if len(tail) >= MIN_POINTS:
        floor, [(log_b, alpha)] = fit([tail])
        out[PREDICTORS[0]] = crossing(floor, log_b, alpha, te)
        others = [t for t in (errors(r, rung, TAIL_FROM * rung) for r in survivors) if len(t) >= MIN_POINTS]
        floor, params = fit([tail, *others])
        out[PREDICTORS[1]] = crossing(floor, *params[0], te)
    since = errors(winner, rung, SINCE * rung)
    if len(since) >= MIN_POINTS:
        _, [(log_b, alpha)] = fit([since], floor=False)
        out[PREDICTORS[2]] = crossing(0.0, log_b, alpha, te)
    if previous is not None:
        slopes = [math.log(best_error(r, previous) / best_error(r, rung)) / math.log(rung / previous)
                  for r in (winner, *survivors)]
        slope = statistics.median(slopes)
        e = best_error(winner, rung)
        out[PREDICTORS[3]] = rung * (e / te) ** (1 / slope) if slope > 0 else math.inf
    return out


def predict_all(winner: dict, survivors: Sequence[dict], rung: float, previous: float | None, target: float,
                cap: float, band: tuple[float, float]) -> dict[str, tuple[float, float, float] | None]:
    """Predictor -> (samples, low, high) of the winner (None: no crossing before the cap); the samples it reached at
    where it reached the target by its rung (a measurement, for every predictor)."""
    hit = next((p[0] for p in winner["curve"] if p[0] <= rung and p[1] >= target), None)
    if hit is not None:
        return dict.fromkeys(PREDICTORS, (hit, hit, hit))
    out: dict[str, tuple[float, float, float] | None] = {}
    for name, mid in projections(winner, survivors, rung, previous, target).items():
        mid = max(mid, rung)  # it had not reached by its rung
        out[name] = (mid, max(mid * math.exp(band[0]), rung), mid * math.exp(band[1])) if mid <= cap else None
    return out


def reading(results: list[dict], met_goal, goals: dict[int, float]) -> list[str]:
    """What the rows say of these predictors, counted from them; `met_goal(figures, ratio)` the goal's test,
    `goals[ratio]` its median |log|."""
    def rows(ratio: int) -> list[tuple[float, str, dict]]:
        return [(r["target"], k, c) for r in results if r["ratio"] == ratio
                for k, c in r["prediction"]["arms"]["halving from cut to 9c"].items() if k in PREDICTORS]

    def figures(ratio: int) -> str:
        return "; ".join(f"'{k}' at {t}: {c['error']:.2f}, {c['coverage']:.0%}, "
                         f"{c['given'] / max(c['reach'], 1):.0%} given" for t, k, c in rows(ratio))

    space = results[0]["target"]
    held = {k: [t for t, k2, c in rows(20) if k2 == k and all(met_goal(c, 20))] for k in PREDICTORS}
    met_space = [k for k, ts in held.items() if space in ts]
    return [
        "- **Curves that may flatten (experiments/_long_job_plateau.py)**, halving's first pick, as median |log| (goal "
        "0.22 at 20x, 0.30 at 50x), interval holding (goal 70-90%), share of reaching picks given a prediction: at 20x "
        + figures(20) + ". At 50x: " + figures(50) + ".",
        f"- At the space's target ({space}) and 20x, "
        + (", ".join(f"'{k}'" for k in met_space) + " met both figures" if met_space else "none met both figures")
        + "; per predictor, the 20x targets where both hold: "
        + "; ".join(f"'{k}': {', '.join(str(t) for t in ts) or 'none'}" for k, ts in held.items()) + ".",
        *[moved_text(r, goals[20]) for r in results if r["ratio"] == 20 and r["target"] == space],
        "- **What the seeds alone leave**: a prediction exact for the first pick's own seed (its trial's seed trained "
        "to the target) against the truth (the median of 3 seeds) scores a median |log| of " + "; ".join(
            f"{r['target']} {r['ratio']}x: {r['prediction']['seeds']['halving from cut to 9c']['error']:.2f}"
            for r in results) + " (halving; goal 0.22 at 20x, 0.30 at 50x): the room any curve model has left."]


def moved_text(r: dict, goal: float) -> str:
    """'plateau, own' at one row, the same fits projected to targets moved by SHIFTS (halving's first pick)."""
    by, f = r["prediction"]["moved"]["halving from cut to 9c"], r["prediction"]["floors"]["halving from cut to 9c"]
    met = [s for s, c in by.items() if c["error"] <= goal and 0.7 <= c["coverage"] <= 0.9]
    return (f"- **The same fits, the target moved** ('plateau, own', halving's first pick, fitted to the curves as the "
            f"search at {r['target']} and {r['ratio']}x trained them, projected to a nearby target, the truth that "
            "target's; median |log|, interval holding, share given): " + "; ".join(
                f"{r['target'] + s:.4g}: {c['error']:.2f}, {c['coverage']:.0%}, "
                f"{c['given'] / max(c['reach'], 1):.0%}" for s, c in by.items())
            + f". Both figures hold at {len(met)} of {len(by)} targets"
            + (": " + ", ".join(f"{r['target'] + s:.4g}" for s in met) if met else "")
            + ". Of its {distinct} distinct (recipe, seed) first picks, {zero} fitted a floor of 0 (a power law to "
            "the bound), {above} one at or above the target's error (no crossing: no prediction), {between} one "
            "between, {none} too few evaluations".format(distinct=sum(f.values()), **f)
            + (": the floor is fitted to the few evaluations in the later half of a 9-cut rung, where the curves are "
               "not yet near it, and a goal met at some targets of the same curves and not at others is not a "
               "prediction the product can show." if len(met) < len(by) else "."))
