"""Ranking at equal horizon: one score for every trial of a long job, from what its trial measured at the budget
and what its own schedule says (docs/design.md "Long jobs: predicted time to target"; issue 43). numpy only.

Every trial of a search is cut at the same horizon (its budget). What the cut measures: the metric's best value,
the seconds per epoch (so where the recipe's own schedule ends the run, `run_end_seconds`, and where a `wsd`
schedule starts its decay), and the exponent at which the distance to the metric's bound (an accuracy's 1, a
loss's 0) fell over the curve's later half. From that, one projection with an exponent pooled over the search's
trials (the median of theirs and this one's; its quartiles give the interval):

    error(t) = error(cut) x (t / cut) ** -exponent          (the stable phase: constant, or wsd before its decay)
    wsd's decay: the error at the decay's start x the decay factor by the run's end

The decay factor is measured where the trial measured it: a cooldown branch (autospeed.train.cooldown) taken from
its stable phase gives its error after the cooldown over its error where it branched; without one, the typical
COOLDOWN_ERROR_FACTOR. The ranking's note says which.

  * the crossing comes before the run's end: a predicted TTA, shown as one (`~12 s [9-20]`), never as a
    measurement; the objective is its median, at least the seconds already spent, at most the cap;
  * the run's own schedule ends first (measured: the trial ran its last epoch; or projected): no TTA past the
    run's end is ever given; the objective is censored at the cap (`cap x (1 + gap)`), below every trial that may
    reach and ordered by its distance from the target.

With one exponent for all, the projection keeps the order of the metric at the cut among trials whose schedules
do not intervene: the ranking departs from "the metric at equal horizon" only where a schedule ends a run or a
decay is still to come. Per-curve extrapolations (autospeed/predict.py) did not beat that metric on the
committed curves; this ranking is measured against both in experiments/results/long_job_ranking.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from autospeed.predict import Prediction, none

# A wsd decay divides the distance to the bound by about 1.4: the best error after the decay over the error of the
# last 3 stable evaluations had a median of 0.71 over 15 runs (0.48-0.83; ../shared/research/long-jobs.md, from
# experiments/results/long_job_curves*.json). The fallback for a trial without a cooldown branch of its own.
COOLDOWN_ERROR_FACTOR = 0.71
EXPONENT_KEY = "error_exponent"  # a trial's own exponent, in its reports and the search's ledger, for later trials
# the pool's exponent when neither this trial's curve nor any finished trial gives one: its interval's centre only;
# score() projects nothing from it (a trial is then ranked by its distance at the cut, as a censored one)
DEFAULT_EXPONENT = 1.0
TAIL_FROM = 0.5  # the exponent is fitted to the evaluations after this share of the cut's seconds
MIN_TAIL_POINTS = 3
MIN_POOL_FOR_QUARTILES = 4  # fewer exponents: the interval spans half to twice the median
MAX_LOG_GROWTH = 700.0  # exp() of more overflows a float: a crossing that far is past any run's end


@dataclass(frozen=True)
class Cut:
    """What one trial measured at its horizon. Seconds are train seconds; errors are distances to the metric's
    bound (an accuracy's 1 - value, a non-negative loss as it is)."""

    seconds: float  # the cut: the train seconds of the last evaluation
    error: float  # the best error at the cut, in the stable phase (before a wsd decay)
    error_seconds: float  # where the stable phase's evaluations end: the cut, or the decay's start
    target_error: float
    gap: float  # outcome.gap of the best value at the cut (the censored objective's)
    run_end_seconds: float  # where the recipe's own schedule ends the run (epochs x measured seconds per epoch)
    stable_end_seconds: float  # where its decay starts (= run_end_seconds without one)
    decays: bool  # a wsd schedule, whose decay is still to come or under way
    ended: bool  # the trial ran the recipe's last epoch: its whole run is measured
    exponent: float | None  # this curve's own, None where its tail cannot give one
    offset_seconds: float = 0.0  # train seconds before learning starts (compile, first step)
    # a wsd trial's cooldown branch (autospeed.train.cooldown): its error over the error where it branched, and
    # the train seconds where it branched; None without one
    cooldown_factor: float | None = None
    cooldown_at_seconds: float | None = None

    @property
    def decay_factor(self) -> float:
        """What the decay multiplies the error by: measured by the trial's own cooldown branch, else typical."""
        return self.cooldown_factor if self.cooldown_factor is not None else COOLDOWN_ERROR_FACTOR

    def decay_text(self) -> str:
        if self.cooldown_factor is None:
            return f"error x {COOLDOWN_ERROR_FACTOR}, the typical factor: no cooldown branch measured"
        return f"error x {self.cooldown_factor:.2g}, measured by a cooldown branch at {self.cooldown_at_seconds:.3g} s"


@dataclass(frozen=True)
class Exponent:
    """The pooled exponent of a search and its interval (quartiles of the trials')."""

    mid: float
    low: float
    high: float
    count: int  # how many trials' exponents it pools (0: DEFAULT_EXPONENT)


def bound_of(values: Sequence[float], mode: str) -> float | None:
    """The best value the metric can take: a maximised metric seen in [0, 1] (an accuracy) cannot pass 1, a
    minimised one seen non-negative (a loss) cannot go below 0; None where the values say nothing."""
    if mode == "max" and all(0.0 <= v <= 1.0 for v in values):
        return 1.0
    if mode == "min" and all(v >= 0.0 for v in values):
        return 0.0
    return None


def cut_of(seconds: Sequence[float], values: Sequence[float], epochs: Sequence[float], *, target: float, mode: str,
           run_epochs: float, decay_epochs: float = 0.0, offset_seconds: float = 0.0,
           cooldown: tuple[float, float, float] | None = None) -> Cut | None:
    """The cut of a trial from its evaluations (train seconds, target metric, epoch), in order. `run_epochs`: the
    recipe's epochs (its schedule's end); `decay_epochs`: how many of them a wsd decay takes (0: none);
    `cooldown`: its latest cooldown branch (train seconds and the metric where it branched, the metric after it).
    None where the metric has no bound, or no evaluation is finite."""
    points = [(s, v, e) for s, v, e in zip(seconds, values, epochs) if math.isfinite(v)]
    bound = bound_of([v for _, v, _ in points] + [target], mode)
    if not points or bound is None:
        return None
    err = (lambda v: bound - v) if mode == "max" else (lambda v: v - bound)  # noqa: E731
    stable_epochs = run_epochs - decay_epochs
    stable = [(s, max(err(v), 1e-12)) for s, v, e in points if e <= stable_epochs + 1e-9] or \
             [(points[0][0], max(err(points[0][1]), 1e-12))]
    last_s, last_e = points[-1][0], points[-1][2]
    per_epoch = (last_s - offset_seconds) / last_e if last_e > 0 else math.inf
    best = max(v for _, v, _ in points) if mode == "max" else min(v for _, v, _ in points)
    from autospeed.outcome import gap

    factor = None
    if cooldown is not None and decay_epochs > 0 and all(math.isfinite(v) for v in cooldown):
        at_seconds, before, after = cooldown
        factor = max(err(after), 1e-12) / max(err(before), 1e-12)
    return Cut(seconds=last_s, error=min(e for _, e in stable), error_seconds=stable[-1][0],
               target_error=max(err(target), 1e-12), gap=gap(best, target, mode),
               run_end_seconds=offset_seconds + run_epochs * per_epoch,
               stable_end_seconds=offset_seconds + stable_epochs * per_epoch, decays=decay_epochs > 0,
               ended=last_e >= run_epochs - 1e-9, exponent=local_exponent(stable, offset_seconds),
               offset_seconds=offset_seconds, cooldown_factor=factor,
               cooldown_at_seconds=cooldown[0] if factor is not None else None)


def local_exponent(points: Sequence[tuple[float, float]], offset_seconds: float = 0.0) -> float | None:
    """-slope of log(error) on log(seconds) over the later half of (seconds, error) points; None where fewer than
    MIN_TAIL_POINTS lie there or the error does not fall."""
    last = points[-1][0] - offset_seconds if points else 0.0
    tail = [(s - offset_seconds, e) for s, e in points if s - offset_seconds >= TAIL_FROM * last and s > offset_seconds]
    if len(tail) < MIN_TAIL_POINTS:
        return None
    xs = [math.log(s) for s, _ in tail]
    ys = [math.log(e) for _, e in tail]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return -slope if slope < 0 else None


def pooled(exponents: Sequence[float | None]) -> Exponent:
    """The median of the trials' exponents and their quartiles (half to twice the median with fewer than
    MIN_POOL_FOR_QUARTILES); DEFAULT_EXPONENT where there is none."""
    known = sorted(x for x in exponents if x is not None and math.isfinite(x) and x > 0)
    if not known:
        return Exponent(DEFAULT_EXPONENT, DEFAULT_EXPONENT / 2, DEFAULT_EXPONENT * 2, 0)
    mid = statistics.median(known)
    if len(known) < MIN_POOL_FOR_QUARTILES:
        return Exponent(mid, mid / 2, mid * 2, len(known))
    q1, _, q3 = statistics.quantiles(known, n=4, method="inclusive")
    return Exponent(mid, min(q1, mid), max(q3, mid), len(known))


def crossing_seconds(cut: Cut, exponent: float) -> float:
    """Train seconds at which the projected error meets the target under the recipe's own schedule; inf where the
    run ends first."""
    x = max(cut.error_seconds - cut.offset_seconds, 1e-9)
    stable_end = cut.stable_end_seconds - cut.offset_seconds
    run_end = cut.run_end_seconds - cut.offset_seconds
    # in logs: an exponent near 0 (a curve that barely fell) puts the crossing past any float, not an OverflowError
    growth = math.log(max(cut.error, cut.target_error) / cut.target_error) / exponent
    t = x * math.exp(growth) if growth < MAX_LOG_GROWTH else math.inf
    if t <= stable_end:
        return t + cut.offset_seconds
    if not cut.decays:
        return math.inf  # its schedule ends the run before the crossing
    start = cut.error * (max(stable_end, x) / x) ** -exponent  # the error as the decay starts
    factor = cut.decay_factor
    if factor >= 1.0 or start * factor > cut.target_error:  # a measured cooldown may not help at all
        return math.inf
    # log-linear through the decay, from its start to the run's end
    share = math.log(start / cut.target_error) / math.log(1.0 / factor)
    return stable_end + (run_end - stable_end) * share + cut.offset_seconds


def score(cut: Cut, exponent: Exponent, cap_seconds: float) -> tuple[float, Prediction]:
    """(objective seconds, prediction) of a trial that has not reached, at equal horizon (module docstring)."""
    from_pool = f"exponent {exponent.mid:.2g} pooled over {exponent.count} trials"
    censored = cap_seconds * (1.0 + cut.gap)
    if not exponent.count:  # nothing measured gives an exponent yet: ranked by its distance at the cut, as censored
        return censored, none("no exponent yet (neither its curve nor a finished trial's gave one): ranked by its "
                              "distance to the target at the cut")
    if cut.ended:
        return censored, none(f"its schedule ended the run at {cut.run_end_seconds:.3g} s before the target")
    mid = crossing_seconds(cut, exponent.mid)
    if not math.isfinite(mid):
        decay = f"; wsd decay {cut.decay_text()}" if cut.decays else ""
        return censored, none(f"its schedule ends the run at ~{cut.run_end_seconds:.3g} s, before the projected "
                              f"crossing ({from_pool}{decay})")
    if mid > cap_seconds:
        return censored, none(f"past the cap: ~{mid:.3g} s is above {cap_seconds:.3g} s ({from_pool})")
    low = crossing_seconds(cut, exponent.high)  # the faster fall gives the earlier crossing
    slow = crossing_seconds(cut, exponent.low)
    # never past the run's end: at the slow end of the interval the run may end first (said so)
    high = min(slow, cut.run_end_seconds, cap_seconds)
    low, mid = max(low, cut.seconds), max(mid, cut.seconds)  # it had not met the target by the cut
    note = f"projected from the error at {cut.seconds:.3g} s, {from_pool}" + \
        (f", with the wsd decay ({cut.decay_text()})" if cut.decays else "") + \
        ("; at the interval's slow end its schedule ends the run first" if not math.isfinite(slow) else "")
    return min(mid, cap_seconds), Prediction(mid, low, max(high, mid), note)
