"""What a run's outcome means: its status, the censored objective, medians and speed-ups.

Defined once here and imported by every writer (trainer adapter, tracking, search)
and reader (runs, export, report), so a status or an objective is decided in one place.
Standard library only.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Sequence


class Status(str, Enum):
    """`autospeed.status` of a run (docs/design.md "Tracking layout")."""

    RUNNING = "running"
    REACHED = "reached"
    NOT_REACHED = "not_reached"  # budget or epochs ran out
    STOPPED_EARLY = "stopped_early"  # ASHA (or on_eval) stopped it
    OOM = "oom"
    DIVERGED = "diverged"
    FAILED = "failed"
    KILLED = "killed"  # its process was interrupted or died

    def __str__(self) -> str:
        return self.value

    @property
    def infeasible(self) -> bool:
        """The recipe cannot train here: the sampler sees 3x the budget, MLflow a FAILED run."""
        return self in INFEASIBLE


INFEASIBLE = frozenset({Status.OOM, Status.DIVERGED, Status.FAILED})
INFEASIBLE_FACTOR = 3.0  # objective of an infeasible trial, in budgets


def is_infeasible(status: str | Status) -> bool:
    return Status(status) in INFEASIBLE


def objective(status: str | Status, tta_seconds: float | None, best_value: float | None, target_value: float,
              max_train_seconds: float, mode: str = "max") -> float:
    """The censored objective Optuna minimises (docs/design.md "The objective Optuna sees").

    reached: the TTA; not (yet) reached: `max_train_seconds x (1 + gap)`, gap being the
    relative distance of the best metric value from the target in the metric's direction
    (so strictly above every reached TTA, and lower the closer the run came);
    infeasible: 3 x max_train_seconds. Valid as a final value at any moment of a run.
    """
    if is_infeasible(status):
        return INFEASIBLE_FACTOR * max_train_seconds
    if tta_seconds is not None:
        return float(tta_seconds)
    return max_train_seconds * (1.0 + gap(best_value, target_value, mode))


def ended_by_scheduler(best_value: float | None, target_value: float, train_seconds: float,
                       max_train_seconds: float, mode: str = "max") -> Status:
    """Status of a trial that the scheduler ended before the trainer's own final report."""
    if best_value is not None and gap(best_value, target_value, mode) == 0.0:
        # ASHA's max_t ended it on the very evaluation that reached the target (the trainer
        # stops there too): that evaluation's train clock is the TTA.
        return Status.REACHED
    if train_seconds >= max_train_seconds:
        return Status.NOT_REACHED  # ASHA's max_t ended it at the budget, a moment before the trainer would
    return Status.STOPPED_EARLY  # ASHA stopped it at a rung


def gap(best_value: float | None, target_value: float, mode: str = "max") -> float:
    """Relative distance of `best_value` from the target in the metric's direction: 0 when met, at most 1
    (so a trial that never evaluated, or got nowhere, is censored at 2 x the budget, below infeasible)."""
    if best_value is None or not math.isfinite(best_value):
        return 1.0
    scale = abs(target_value) or 1.0  # a target of 0 (a perfect loss): the absolute distance
    if mode == "max":
        return min(1.0, max(0.0, target_value - best_value) / scale)
    return min(1.0, max(0.0, best_value - target_value) / scale)


def median_tta(ttas: Iterable[float | None]) -> float | None:
    """Median TTA over repeats, a run that missed the target counting as infinitely slow.

    None when there are no runs or when the median itself is a miss."""
    values = [math.inf if x is None else float(x) for x in ttas]
    if not values:
        return None
    m = statistics.median(values)
    return m if math.isfinite(m) else None


def speedup(baseline_tta: float | None, tta: float | None) -> float | None:
    """baseline / candidate TTA; None unless both reached."""
    if baseline_tta is None or tta is None or tta <= 0:
        return None
    return baseline_tta / tta


MIN_RUNS_FOR_INTERVAL = 3  # fewer runs on either side: no interval ("too few repeats for an interval")
# How far a run's seconds drift between sessions on one machine, as the sd of their logs, beyond the spread inside
# one sitting: a compiled recipe's fresh processes in 8 sessions a minute apart, 3.4% (7 df) beside 2.2% inside a
# session, measured on a 2-core CPU (experiments/results/session_drift.md). The between-session term of the export's
# next-run intervals (next_run_interval).
SESSION_LOG_SD = 0.034


@dataclass(frozen=True)
class LogSpread:
    """Run-to-run noise on the log scale: the standard deviation of log values, estimated with `df` degrees of
    freedom."""

    sd: float
    df: int


def log_spread(groups: Iterable[Sequence[float | None]]) -> LogSpread | None:
    """The within-group spread of the logs of `groups` of repeated runs, pooled: s^2 = sum over groups of
    sum (log x - the group's mean log)^2 / df, df = sum (n_i - 1). One group: its own standard deviation, n - 1.

    A group with a missing or non-positive value (a missed target, a run that did not compile) says nothing of the
    spread and is left out, as is a single run (n - 1 = 0); None when no group is left.

    Why pooling is sound: runs a confirmation trains on one machine, interleaved round by round, each in a fresh
    process, meet the same sources of noise (other processes, memory and cache state, clock speed, the loader's
    scheduling). These scale a run's seconds, so they add about the same variance to every run's log seconds
    whatever its recipe or compile way, and one estimate from all groups is steadier than each group's own: 3 runs
    give s with 2 degrees of freedom, below a third of the true spread one time in 10 (chi-square, 2 df; 3 nearly
    equal compiles on a new machine gave too narrow an interval: experiments/results/compile_costs_cpu.md).
    The pooling assumes one relative noise for every group; quantities whose noise differs are pooled apart: TTA
    with TTA (training to a target, its crossing quantised by evaluations), compile seconds with compile seconds
    (the first step alone; the same runs, so not independent of their TTAs either)."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) < 2 or any(x is None or x <= 0 for x in values):
            continue
        logs = [math.log(x) for x in values]
        centre = statistics.fmean(logs)
        squares += sum((x - centre) ** 2 for x in logs)
        df += len(logs) - 1
    return LogSpread(math.sqrt(squares / df), df) if df else None


def next_run_interval(values: Sequence[float | None], confidence: float = 0.9, spread: LogSpread | None = None,
                      session_sd: float = 0.0) -> tuple[float | None, float | None]:
    """Where one more run's value (a TTA, a compile's seconds) falls with probability `confidence`, from these
    runs' values: a prediction interval for log-normal values, exp(mean +- t(df) u) of their logs, with
    u^2 = s^2 (1 + 1/n), the Student t quantile because s is estimated. `spread`: s and df pooled over every group
    of runs trained beside these (log_spread, which says why that is sound); None: these runs' own (s their
    standard deviation, df n - 1). (None, None) with fewer than MIN_RUNS_FOR_INTERVAL runs, any missing value (a
    missed target: the runs' centre is not known then) or no spread.

    `session_sd`: the drift of a run's log value between sessions on one machine (SESSION_LOG_SD), which runs
    trained in one sitting cannot show: it moves them together. Added as a component known from other
    measurements (the GUM's "Type B"), twice: the runs' centre carries its own sitting's drift and the next run
    another's, u^2 = s^2 (1 + 1/n) + 2 session_sd^2, the t quantile at the Welch-Satterthwaite degrees of freedom
    df u^4 / (s^2 (1 + 1/n))^2 (the known term adds none of its own)."""
    from scipy.stats import t as student_t

    if len(values) < MIN_RUNS_FOR_INTERVAL or any(x is None or x <= 0 for x in values):
        return None, None
    spread = spread if spread is not None else log_spread([values])
    if spread is None:
        return None, None
    n = len(values)
    within = spread.sd ** 2 * (1.0 + 1.0 / n)
    total = within + 2.0 * session_sd ** 2
    df = spread.df * total ** 2 / within ** 2 if within > 0 else math.inf
    half = student_t.ppf(0.5 + confidence / 2.0, df) * math.sqrt(total)
    centre = statistics.fmean(math.log(x) for x in values)
    return math.exp(centre - half), math.exp(centre + half)


@functools.cache
def _mann_whitney_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) equally likely orderings of n + m exchangeable values give the Mann-Whitney
    count U = u (pairs with the first sample's value above the second's), for u = 0 .. n*m: the exact null
    distribution, by the recurrence on whether the largest value belongs to the first sample or the second."""
    if n == 0 or m == 0:
        return (1,)
    with_first = _mann_whitney_counts(n - 1, m)  # the largest is the first sample's: it beats all m -> U += m
    with_second = _mann_whitney_counts(n, m - 1)
    counts = [0] * (n * m + 1)
    for u, c in enumerate(with_first):
        counts[u + m] += c
    for u, c in enumerate(with_second):
        counts[u] += c
    return tuple(counts)


def _order_index(n: int, m: int, confidence: float) -> int | None:
    """The largest k such that [k-th smallest, k-th largest] of the n*m pairwise ratios covers a scale shift
    with probability >= `confidence` (that probability is 1 - 2 P(U <= k-1) under the exact null); None when
    not even [min, max] does (the level is not attainable with n and m runs)."""
    counts = _mann_whitney_counts(n, m)
    total = math.comb(n + m, n)
    allowed = (1.0 - confidence) / 2.0 * total * (1.0 + 1e-9)  # 1 - 0.9 is 0.0999..98 in floating point
    k, below = 0, 0
    while k < len(counts) and below + counts[k] <= allowed:
        below += counts[k]
        k += 1
    return k if k >= 1 and 2 * k <= n * m + 1 else None


def attainable_confidence(n: int, m: int) -> float:
    """The highest confidence a speed-up interval can have from n and m runs: that of [min, max] of the
    pairwise ratios, 1 - 2 / C(n+m, n) (0.90 at 3 and 3, 0.971 at 4 and 4, 0.992 at 5 and 5)."""
    return 1.0 - 2.0 / math.comb(n + m, n) if min(n, m) > 0 else 0.0


def _pair_ratio(b: float, c: float, both_missed: float) -> float:
    """b / c for TTAs where a miss is inf: a baseline miss is an infinite speed-up, a candidate miss zero,
    and two misses `both_missed` (unknown: the caller takes the end least favourable to its bound)."""
    if math.isinf(b) and math.isinf(c):
        return both_missed
    if math.isinf(c):
        return 0.0
    return math.inf if math.isinf(b) or c <= 0 else b / c


def speedup_interval(baseline_ttas: Sequence[float | None], ttas: Sequence[float | None],
                     confidence: float = 0.9) -> tuple[float | None, float | None]:
    """Distribution-free interval of the speed-up, baseline / candidate median TTA, over seeds.

    The Mann-Whitney (Hodges-Lehmann) interval for a shift on the log scale: of the n*m pairwise
    ratios b_i / c_j, the k-th smallest to the k-th largest, k from the exact Mann-Whitney null
    distribution. When the candidate's TTAs are the baseline's divided by a speed-up s (the two
    distributions alike up to scale, whatever their shape), it covers s with probability >=
    `confidence` for every n; at 3 and 3 runs the 90% interval is [min, max] of the 9 ratios, with
    coverage exactly 0.90. A missed target counts as infinitely slow: a baseline miss makes a ratio
    inf, a candidate miss 0, two misses count as 0 for the low end and inf for the high end. Coverage
    under skewed, unequal and missing TTAs: experiments/results/interval_coverage.md.

    Returns (low, high): (None, None) with fewer than MIN_RUNS_FOR_INTERVAL runs on either side or
    when `confidence` is not attainable with these counts (attainable_confidence); low None when it
    falls on a candidate's miss (the speed-up may be anything down to 0), high None when it does too
    (the candidate misses more often than not), high inf when it falls on a baseline miss (unbounded).
    interval_note says why in one line.
    """
    base = [math.inf if x is None else float(x) for x in baseline_ttas]
    cand = [math.inf if x is None else float(x) for x in ttas]
    if min(len(base), len(cand)) < MIN_RUNS_FOR_INTERVAL:
        return None, None
    k = _order_index(len(base), len(cand), confidence)
    if k is None:
        return None, None
    low = sorted(_pair_ratio(b, c, 0.0) for b in base for c in cand)[k - 1]
    high = sorted(_pair_ratio(b, c, math.inf) for b in base for c in cand)[-k]
    return (low if low > 0.0 else None), (high if high > 0.0 else None)


def interval_note(baseline_ttas: Sequence[float | None], ttas: Sequence[float | None],
                  confidence: float = 0.9) -> str | None:
    """One line saying why speedup_interval has no end (or only one) to print; None when both are defined."""
    n, m = len(baseline_ttas), len(ttas)
    if min(n, m) < MIN_RUNS_FOR_INTERVAL:
        return (f"too few repeats for an interval ({n} baseline and {m} candidate runs; it needs "
                f"{MIN_RUNS_FOR_INTERVAL} a side)")
    if _order_index(n, m, confidence) is None:
        return (f"too few repeats for an interval at {confidence:.1%} ({n} and {m} runs attain at most "
                f"{attainable_confidence(n, m):.1%})")
    low, high = speedup_interval(baseline_ttas, ttas, confidence)
    if low is None or high is None:
        return f"interval undefined: too many missed targets ({sum(x is None for x in ttas)} of {m} candidate runs)"
    return None


def sequential_confidence(repeats: int, max_repeats: int, confidence: float = 0.9) -> float:
    """The per-look level for confirmation's adaptive repeats, so the interval it reports keeps `confidence`.

    Confirmation looks after round `repeats`, `repeats` + 1, ..., `max_repeats` (L = max_repeats - repeats
    + 1 planned looks) and stops at the first look whose intervals separate the winner. Each look's
    interval misses the true speed-up with probability <= (1 - confidence) / L (Bonferroni), so whatever
    look the rule stops at, the reported interval misses with probability <= 1 - confidence: the error
    rate stated, for any stopping rule based on these looks (e.g. 10% over 5 looks, 2% each, for
    repeats 3 and max_repeats 7). At small n so high a level may be unattainable (98% needs 5 runs a
    side): that look's interval is undefined, so "not separated", and the rounds go on. With
    max_repeats <= repeats there is one look: `confidence` itself.
    """
    looks = max(1, max_repeats - repeats + 1)
    return 1.0 - (1.0 - confidence) / looks


# n x the variance of the median of n standard normal draws (simulated, 400,000 draws each; pi/2 beyond)
_MEDIAN_VARIANCE = {3: 1.344, 4: 1.192, 5: 1.439, 6: 1.287, 7: 1.465, 8: 1.350, 9: 1.501, 10: 1.376, 11: 1.505,
                    12: 1.411, 13: 1.517, 14: 1.434, 15: 1.527}
REMEASURE_RUNS = 7  # the re-measurement the prediction is for: 7 fresh runs a side (experiments/speedup.py's)


def remeasure_interval(baseline_ttas: Sequence[float | None], ttas: Sequence[float | None],
                       runs_a_side: int = REMEASURE_RUNS, confidence: float = 0.9,
                       spread: LogSpread | None = None) -> tuple[float | None, float | None]:
    """Predicted range of the speed-up a user measures again: the ratio of medians of `runs_a_side` new
    fresh runs a side falls inside it with probability `confidence`. A prediction, not a measurement.

    speedup_interval covers the true speed-up; a re-measurement has its own noise on top, so it falls
    inside that interval less often (73-84% at 7 a side, experiments/results/interval_coverage.md). This
    range adds it: on the log scale, the ratio of medians now and then differ by the noise of four
    medians, var = s^2 (c(n)/n + c(m)/m + 2 c(r)/r) with s the log-TTA standard deviation and c(k) k times the
    variance of a median of k normal draws; a Student t quantile with s's degrees of freedom accounts for s being
    estimated. `spread`: s pooled over every group of runs the confirmation trained (log_spread: the same
    machine's noise, the other candidates' runs included); None: over these two sides. Its coverage under
    log-normal TTAs is checked beside the interval's by the same simulation. (None, None) with fewer than 3 runs
    a side or any missed target on either side (then their medians' spread is not known).
    """
    from scipy.stats import t as student_t

    if min(len(baseline_ttas), len(ttas)) < MIN_RUNS_FOR_INTERVAL or any(x is None or x <= 0 for x in
                                                                         [*baseline_ttas, *ttas]):
        return None, None
    spread = spread if spread is not None else log_spread([baseline_ttas, ttas])
    n, m, r = len(baseline_ttas), len(ttas), runs_a_side
    c = lambda k: _MEDIAN_VARIANCE.get(k, math.pi / 2)  # noqa: E731
    half = student_t.ppf(0.5 + confidence / 2.0, spread.df) * spread.sd * math.sqrt(c(n) / n + c(m) / m
                                                                                     + 2.0 * c(r) / r)
    centre = math.log(statistics.median(baseline_ttas)) - math.log(statistics.median(ttas))
    return math.exp(centre - half), math.exp(centre + half)
