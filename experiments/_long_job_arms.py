"""Arms of experiments/long_job_bench.py whose trials grow: successive halving over trial lengths at the flat arm's
exploration compute (issue 43: "horizons that grow, b, 3b, 9b"), Ray Tune's asynchronous rule (what the product's
ASHA does on the train clock) on the same horizons, the effective LR's trend across those horizons, and successive
halving whose first rung is the flat cut itself (its exploration stated in baseline runs by the caller), and Ray's
rule from the cut stopped by the product's exploration cap.

Every arm here ranks by the metric at the cut (long_job_ranking.metric_score: samples at the target where the trial
reached it, else the censored `horizon x (1 + gap)`), each trial at the horizon it was trained to (asha_horizon: by
autospeed/horizon.py there); what differs from the flat arm is only which trials train how far. Samples stand for
compute: a trial that continues from rung k to rung k + 1 costs the samples between them (it is not restarted)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

FLAT = ("metric", "horizon 0.71", "horizon branch", "previous")  # long_job_bench.py's: every trial cut at one horizon
KEEP = 2  # halving stops at the rung where at most this many remain: the last comparison is between two
ETAS = (3, 2)


def searches(n: int, size: int, seeds: int, count: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """long_job_bench.py's simulated searches: `count` of (the order of `size` of the `n` recipes, each recipe's
    trial seed among `seeds`), drawn with numpy's generator seeded `seed`."""
    rng = np.random.default_rng(seed)
    return [([int(i) for i in rng.permutation(n)[:size]], [int(s) for s in rng.integers(seeds, size=n)])
            for _ in range(count)]


def halving_plan(eta: int, cut_samples: float, trials: int) -> list[tuple[float, int]]:
    """[(horizon in samples, trials trained to it)] of successive halving: `trials` at b, the top ceil(n / eta)
    of each rung on to eta times its horizon, until at most KEEP remain; b such that the samples spent equal the
    flat arm's `trials x cut_samples`. eta 3, 12 trials: 12 at b, 4 at 3b, 2 at 9b, b = 12 cut / 32."""
    sizes = [trials]
    while sizes[-1] > KEEP:
        sizes.append(math.ceil(sizes[-1] / eta))
    units = sum(n * (eta ** k - (eta ** (k - 1) if k else 0)) for k, n in enumerate(sizes))  # samples / b
    b = trials * cut_samples / units
    return [(b * eta ** k, n) for k, n in enumerate(sizes)]


def spent(plan: Sequence[tuple[float, int]]) -> float:
    """Samples a halving plan spends (each survivor continues from the rung before)."""
    return sum(n * (h - (plan[k - 1][0] if k else 0.0)) for k, (h, n) in enumerate(plan))


def cut_plan(eta: int, cut_samples: float, trials: int, rungs: int, end_samples: float) -> list[tuple[float, int]]:
    """[(horizon in samples, trials trained to it)] of successive halving from the flat cut: all `trials` at the cut
    (exactly the flat arm's information), the top ceil(n / eta) on to eta times the horizon until KEEP remain, then
    those KEEP on to eta times further, `rungs` horizons in all (fewer where they would pass `end_samples`, the
    recipes' own end, or one trial is left). eta 3, 12 trials, 3 rungs: 12 at the cut, 4 at 3 cuts, 2 at 9."""
    plan = [(min(cut_samples, end_samples), trials)]
    while len(plan) < rungs and plan[-1][0] < end_samples and plan[-1][1] >= KEEP:
        h, n = plan[-1]
        plan.append((min(h * eta, end_samples), max(math.ceil(n / eta), KEEP)))
    return plan


def halving_ranked(order: Sequence[int], plan: Sequence[tuple[float, int]],
                   score: Callable[[int, float], float]) -> tuple[list[int], list[list[int]]]:
    """Synchronous successive halving of the trials `order` (ties keep the search's order): the ranking (the last
    rung's trials by their score there, then those each earlier rung dropped, by their score at it) and each rung's
    trials, best first."""
    alive, dropped, rungs = list(order), [], []
    for k, (h, _) in enumerate(plan):
        alive = sorted(alive, key=lambda i: score(i, h))
        rungs.append(alive)
        going_on = plan[k + 1][1] if k + 1 < len(plan) else len(alive)  # how many the next rung trains
        dropped = alive[going_on:] + dropped
        alive = alive[:going_on]
    return alive + dropped, rungs


def asha_horizons(order: Sequence[int], horizons: Sequence[float], eta: int, score: Callable[[int, float], float],
                  cap_samples: float = math.inf) -> dict[int, float]:
    """Ray Tune's ASHA (ray.tune.schedulers.AsyncHyperBandScheduler's rung rule) on `horizons`, trials one at a time
    in the search's order: a trial continues past a rung while its score is no worse than the rung's cutoff so far
    (the (1 - 1/eta) quantile of the rung's recorded rewards, interpolated as numpy's percentile; the first trial
    at a rung always continues), and stops at the last horizon (max_t). With `cap_samples`, the product's
    `budget.exploration_baseline_runs` (autospeed/search/tuner.py): no trial starts once the trials' samples reach
    it, and the trial running when they do ends there (the product stops it at its next evaluation), so fewer
    trials than `order` may run. Trial that ran -> the horizon it ended at, in samples."""
    recorded: list[list[float]] = [[] for _ in horizons]
    ended: dict[int, float] = {}
    total = 0.0
    for i in order:
        if total >= cap_samples:
            break
        done = 0.0
        for k, h in enumerate(horizons):
            if total + h - done >= cap_samples:  # the cap falls inside this rung: the trial ends there
                ended[i], total = done + cap_samples - total, cap_samples
                break
            total, done = total + h - done, h
            reward = -score(i, h)  # Ray compares rewards, higher better
            cutoff = np.percentile(recorded[k], (1 - 1 / eta) * 100) if recorded[k] else None
            recorded[k].append(reward)
            if k == len(horizons) - 1 or (cutoff is not None and reward < cutoff):
                ended[i] = h
                break
    return ended


def asha_rungs(order: Sequence[int], horizons: Sequence[float], eta: int,
               score: Callable[[int, float], float]) -> dict[int, int]:
    """asha_horizons without a cap: trial -> the index of its last horizon."""
    return {i: list(horizons).index(h) for i, h in asha_horizons(order, horizons, eta, score).items()}


def asha_ranked(order: Sequence[int], plan: Sequence[tuple[float, int]], eta: int,
                score: Callable[[int, float], float], by_rung: bool = True,
                cap_samples: float = math.inf) -> tuple[list[int], float]:
    """ASHA (asha_horizons, with its cap) on the halving plan's horizons: the ranking of the trials that ran
    (furthest horizon first, by the score there; `by_rung` False: as the product ranks, autospeed/track/runs.py
    ranked: reached trials by their samples to target, then the rest by their distance to the target at their own
    last horizon, whatever its length) and the samples it spent (not fixed: it depends on the order). `score(i, h)`
    at any horizon where a cap may end a trial between rungs."""
    ended = asha_horizons(order, [h for h, _ in plan], eta, score, cap_samples)

    def product(i: int) -> tuple[bool, float]:  # the censored objective's order: h x (1 + gap) >= h unless reached
        h = ended[i]
        s = score(i, h)
        return (False, s) if s < h else (True, s / h)

    ranked = sorted(ended, key=lambda i: (-ended[i], score(i, ended[i])) if by_rung else product(i))
    return ranked, sum(ended.values())


def lr_trend(rungs: Sequence[Sequence[int]], plan: Sequence[tuple[float, int]], lr: Callable[[int], float],
             job_samples: float) -> tuple[list[float], float]:
    """The effective LR of each rung's leader, and the trend's LR at the job's length: a least-squares line of
    log(leader's LR) on log(horizon) over the rungs, extrapolated to `job_samples`."""
    leaders = [lr(r[0]) for r in rungs]
    if len(rungs) < 2:  # one rung (two trials or fewer): no trend
        return leaders, leaders[0]
    x = np.log([h for h, _ in plan])
    slope, intercept = np.polyfit(x, np.log(leaders), 1)
    return leaders, float(math.exp(intercept + slope * math.log(job_samples)))


def trend_ranked(ranked: Sequence[int], rungs: Sequence[Sequence[int]], lr: Callable[[int], float],
                 trend_lr: float) -> list[int]:
    """The trials that passed the first rung, by how far their effective LR is from the trend's (in log; ties keep
    the halving's order), then the rest in the halving's order. No constant fitted: the trend is the search's own."""
    passed = set(rungs[1]) if len(rungs) > 1 else set(ranked)
    first = sorted([i for i in ranked if i in passed], key=lambda i: abs(math.log(lr(i) / trend_lr)))
    return first + [i for i in ranked if i not in passed]


GROWN = ("halving 3", "halving 2", "asha 3", "halving 3 + LR trend")
CUT_RUNGS = {"halving from cut to 3c": 2, "halving from cut to 9c": 3, "halving from cut to 27c": 4}  # c: the cut
# Ray's rule on the 9c plan's rungs, ranked furthest rung first, as the product's censored objective ranks, and by
# autospeed/horizon.py at each trial's own last horizon (long_job_bench.py: the product with predict on)
ASHA_CUT = ("asha from cut to 9c", "asha from cut to 9c, objective", "asha from cut to 9c, horizon.py")
FROM_CUT = (*CUT_RUNGS, *ASHA_CUT)
CAP_RUNS = 2  # issue 43's exploration budget, in baseline runs: long.yaml's `budget.exploration_baseline_runs`
ASHA_CAPPED = "asha from cut to 9c, capped"  # Ray's rule on the 9c rungs, the product's exploration cap on
ARMS = (*FLAT, *GROWN, *FROM_CUT, ASHA_CAPPED)


def plans_for(cut_samples: float, trials: int, n: int | None = None) -> dict[int, list[tuple[float, int]]]:
    """eta -> the halving plan of `trials` at the flat arm's compute; with `n`, the same horizons for n trials
    (each rung's size scaled by n / trials: a ranking of every recipe, for rho and the AUC)."""
    plans = {eta: halving_plan(eta, cut_samples, trials) for eta in ETAS}
    if n is None:
        return plans
    return {eta: [(h, math.ceil(k * n / trials)) for h, k in p] for eta, p in plans.items()}


def grown(order: Sequence[int], plans: dict[int, list[tuple[float, int]]], score: Callable[[int, float], float],
          lr: Callable[[int], float], job_samples: float) -> tuple[dict[str, list[int]], dict]:
    """Each GROWN arm's ranking of the trials `order`; and what ASHA spent, the leaders' LRs and the trend's, and
    the trials eta 3's halving trained past its first rung."""
    out, rungs3 = {}, []
    for eta in ETAS:
        out[f"halving {eta}"], rungs = halving_ranked(order, plans[eta], score)
        rungs3 = rungs if eta == 3 else rungs3
    out["asha 3"], asha_spent = asha_ranked(order, plans[3], 3, score)
    leaders, trend = lr_trend(rungs3, plans[3], lr, job_samples)
    out["halving 3 + LR trend"] = trend_ranked(out["halving 3"], rungs3, lr, trend)
    return out, {"asha_spent": asha_spent, "leaders": leaders, "trend": trend,
                 "second_rung": rungs3[min(1, len(rungs3) - 1)]}


def cut_plans(cut_samples: float, trials: int, end_samples: float,
              n: int | None = None) -> dict[str, list[tuple[float, int]]]:
    """CUT_RUNGS' arm -> eta 3's plan from the flat cut; with `n`, the same horizons for n trials (as plans_for)."""
    plans = {a: cut_plan(3, cut_samples, trials, k, end_samples) for a, k in CUT_RUNGS.items()}
    if n is None:
        return plans
    return {a: [(h, math.ceil(m * n / trials)) for h, m in p] for a, p in plans.items()}


def from_cut(order: Sequence[int], plans: dict[str, list[tuple[float, int]]],
             score: Callable[[int, float], float]) -> tuple[dict[str, list[int]], dict[str, float]]:
    """Each FROM_CUT arm's ranking of the trials `order` (synchronous halving on its plan; Ray's asynchronous rule on
    the 9c plan's horizons, trials one after another, ranked furthest rung first or as the product ranks), and the
    samples each spent."""
    out = {a: halving_ranked(order, plan, score)[0] for a, plan in plans.items()}
    cost = {a: spent(plan) for a, plan in plans.items()}
    for a in ASHA_CUT[:2]:
        out[a], cost[a] = asha_ranked(order, plans["halving from cut to 9c"], 3, score, by_rung=a == ASHA_CUT[0])
    cost[ASHA_CUT[2]] = cost[ASHA_CUT[0]]  # the same trials to the same rungs: ranked by the caller
    return out, cost


def at_horizon(row: dict, h: float, pool: list[float | None], target: float, cap: float):
    """A trial cut at `h` as autospeed/horizon.py sees it: (the samples it reached the target at, else None;
    horizon.py's (score, prediction) pooling `pool` with the trial's own exponent, None where it reached; that
    exponent)."""
    import long_job_ranking as ranking

    from autospeed import horizon

    hit = ranking.reached_seconds(ranking.cut_points(row, h), target)
    cut = ranking.horizon_cut(row, h, target)
    scored = None if hit is not None else horizon.score(cut, horizon.pooled([*pool, cut.exponent]), cap)
    return hit, scored, cut.exponent


def asha_horizon(order: list[int], row_at, horizons: list[float], score, target: float, cap: float) -> list[int]:
    """The trials `order` after ASHA's rule from the cut (asha_horizons on `horizons`), ranked by
    autospeed/horizon.py each at its own last horizon (at_horizon), pooling the exponents in the search's order: the
    product with predict on. `row_at(i, h)`: trial i's row cut at h."""
    last, out, pool = asha_horizons(order, horizons, 3, score), {}, []
    for i in order:
        hit, scored, exponent = at_horizon(row_at(i, last[i]), last[i], pool, target, cap)
        out[i] = hit if hit is not None else scored[0]
        pool.append(exponent)
    return sorted(order, key=out.__getitem__)


def leave_one_out(truth: np.ndarray, metric: list[list[float]], at: dict, plan: list[tuple[float, int]],
                  trials: int, searches: int, seed: int) -> list[tuple[float, float]]:
    """With each recipe left out in turn: (the metric at the cut's first-pick miss, halving's) over `searches`
    simulated searches of the others. `metric[seed][recipe]` the flat score, `at[horizon][seed][recipe]` the
    metric at a rung. Whether one recipe carries the difference."""
    n, seeds = len(truth), len(metric)
    out = []
    for j in range(n):
        rest = [i for i in range(n) if i != j]
        rng = np.random.default_rng(seed)
        miss = {"metric": [], "halving": []}
        for _ in range(searches):
            order = [rest[int(k)] for k in rng.permutation(len(rest))[:trials]]
            picked = {i: int(rng.integers(seeds)) for i in order}
            if not np.isfinite(truth[order]).any():
                continue
            flat = min(order, key=lambda i: metric[picked[i]][i])
            grown_first = halving_ranked(order, plan, lambda i, h: at[h][picked[i]][i])[0][0]
            miss["metric"].append(not math.isfinite(truth[flat]))
            miss["halving"].append(not math.isfinite(truth[grown_first]))
        if miss["metric"]:  # else no search of the others had a recipe that reaches
            out.append((float(np.mean(miss["metric"])), float(np.mean(miss["halving"]))))
    return out
