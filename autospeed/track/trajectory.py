"""The exported winner's expected curve (autospeed.recipe.Trajectory), read back from the search's runs for
`autospeed export`; `autospeed train` checks its live run against it (autospeed.train.on_track).

What it is made from, in order of what the search has:
  * confirmation: the winner's confirmation run whose TTA is nearest their median (its evaluations up to the
    target); expected TTA their median, its range where one more run falls, 80% (outcome.next_run_interval, the
    spread pooled over every recipe's confirmation runs and the drift between sessions added: the production run
    is one more run, in another sitting), min..max when that cannot be computed (fewer than 3 runs, a miss), none
    from one run;
  * trial: an unconfirmed winner that reached in its trial: the trial's own curve, one measurement;
  * prediction: an unconfirmed winner that did not reach: its trial's curve, then the predicted crossing of the
    target (80% interval), with the metric interpolated linearly in log seconds between the last evaluation and
    the crossing (a learning curve rises fast first, slowly later; it is a prediction and says so).
Each carries the throughput its TTA was measured at (samples per train-clock second to the target): TTA = samples to
target / samples per second, so a production run's miss splits into the maths and the machine.
"""

from __future__ import annotations

import math
import statistics

from autospeed.outcome import SESSION_LOG_SD, log_spread, next_run_interval
from autospeed.recipe import Measured, Trajectory
from autospeed.track import names
from autospeed.track.runs import child_runs

MAX_POINTS = 200  # of a curve in best.yaml: every evaluation of a long run would bloat the file
BRIDGE_POINTS = 16  # from the trial's last evaluation to a predicted crossing
RANGE_CONFIDENCE = 0.8  # a confirmed trajectory's TTA range: where the production run falls, as a prediction's 80%


def curve_of(client, run_id: str, metric: str) -> list[tuple[float, float]]:
    """(train seconds, metric) of a run's evaluations, joined on the optimizer step they were logged at."""
    seconds = {m.step: m.value for m in client.get_metric_history(run_id, names.M_TRAIN_SECONDS)}
    values = {m.step: m.value for m in client.get_metric_history(run_id, metric)}
    return sorted((seconds[s], values[s]) for s in values if s in seconds)


def throughput_to(client, run_id: str, seconds: float) -> float | None:
    """Samples per train-clock second of a run up to `seconds` (its TTA): each evaluation's window of samples (its
    samples/s, over the train seconds since the evaluation before, times those seconds), summed, over `seconds`;
    None where the run logged no samples/s (a script that counts none)."""
    clock = {m.step: m.value for m in client.get_metric_history(run_id, names.M_TRAIN_SECONDS)}
    windows = sorted((clock[m.step], m.value) for m in client.get_metric_history(run_id, names.M_SAMPLES_PER_SECOND)
                     if m.step in clock)
    samples, before = 0.0, 0.0
    for at, rate in windows:
        if at > seconds:
            break
        samples, before = samples + rate * (at - before), at
    return samples / before if samples > 0 and before > 0 else None


def thinned(points: list[tuple[float, float]], most: int = MAX_POINTS) -> list[tuple[float, float]]:
    """At most `most` points, evenly over the evaluations, the last kept (it is the one at the target)."""
    if len(points) <= most:
        return points
    step = math.ceil(len(points) / most)
    return points[::step][: most - 1] + [points[-1]]


def _confirm_runs(client, parent) -> dict[str, list]:
    """The search's finished confirmation runs (of its last confirmation, when an extended search confirmed again),
    by the trial id of the recipe each trained."""
    trials = parent.data.metrics.get(names.M_CONFIRM_TRIALS)
    groups: dict[str, list] = {}
    for run in child_runs(client, parent, names.KIND_CONFIRM, where="attributes.status = 'FINISHED'"):
        if trials is None or run.data.tags.get(names.TAG_CONFIRM_TRIALS) == str(int(trials)):
            groups.setdefault(run.data.tags.get(names.TAG_TRIAL_ID, ""), []).append(run)
    return groups


def tta_range(ttas: dict[str, list[float | None]], trial_id: str, measured: Measured
              ) -> tuple[float | None, float | None, str]:
    """A confirmed winner's TTA range for its production run and how it was made: where one more run falls, 80%
    (its runs' centre, the spread pooled over every recipe's confirmation TTAs in `ttas` (trial id -> TTAs, None
    a miss), the between-session drift added); the runs' min..max when no interval can be computed, none (None,
    None) from one run."""
    low, high = next_run_interval(ttas.get(trial_id, []), RANGE_CONFIDENCE, log_spread(ttas.values()),
                                  session_sd=SESSION_LOG_SD)
    if low is None:
        if measured.tta_seconds_min == measured.tta_seconds_max:  # one run: a range of width 0 would hold nothing
            return None, None, "one run: no range"
        return measured.tta_seconds_min, measured.tta_seconds_max, "min..max"
    return low, high, (f"range: where one more run falls, {RANGE_CONFIDENCE:.0%} (spread pooled over every "
                       f"confirmed recipe's runs, {100 * SESSION_LOG_SD:.1f}% drift between sessions added)")


def trajectory_of(client, parent, best, target, measured: Measured) -> Trajectory | None:
    """The expected curve of the exported winner `best` (a runs.TrialRow) to `target`, as `measured` says it was
    decided; None when there is nothing to draw it from."""
    kind = dict(metric=target.metric, mode=target.mode)
    if measured.confirmed:
        groups = _confirm_runs(client, parent)
        runs = [r for r in groups.get(best.trial_id, []) if r.data.metrics.get(names.M_TTA) is not None]
        if not runs or measured.tta_seconds_median is None:
            return None
        median = measured.tta_seconds_median
        run = min(runs, key=lambda r: (abs(r.data.metrics[names.M_TTA] - median), r.data.metrics[names.M_TTA]))
        points = [p for p in curve_of(client, run.info.run_id, target.metric) if p[0] <= run.data.metrics[names.M_TTA]]
        if not points:
            return None
        low, high, how = tta_range({trial: [r.data.metrics.get(names.M_TTA) for r in group]
                                    for trial, group in groups.items()}, best.trial_id, measured)
        rates = [x for x in (throughput_to(client, r.info.run_id, r.data.metrics[names.M_TTA]) for r in runs)
                 if x is not None]
        return Trajectory(source="confirmation", **kind, tta_seconds=median, tta_low_seconds=low,
                          tta_high_seconds=high, points=thinned(points),
                          samples_per_second=statistics.median(rates) if rates else None,
                          note=f"the curve of the confirmation run with the TTA nearest the median of "
                               f"{measured.repeats} (seed {run.data.params.get('seed', '?')}); TTA: their median, "
                               f"{how}")
    points = curve_of(client, best.run_id, target.metric)
    if not points:  # a run that logged no evaluation: nothing to draw a curve from
        return None
    if best.reached and best.tta_seconds:
        return Trajectory(source="trial", **kind, tta_seconds=best.tta_seconds,
                          points=thinned([p for p in points if p[0] <= best.tta_seconds]),
                          samples_per_second=throughput_to(client, best.run_id, best.tta_seconds),
                          note="the search trial's own curve, one measurement in a reused process (unconfirmed)")
    if measured.tta_predicted_seconds is None:
        return None
    crossing = measured.tta_predicted_seconds
    (last_seconds, last_value), points = points[-1], thinned(points, MAX_POINTS - BRIDGE_POINTS)
    bridge = []
    if 0 < last_seconds < crossing:
        span = math.log(crossing / last_seconds)
        for i in range(1, BRIDGE_POINTS + 1):
            s = last_seconds * math.exp(span * i / BRIDGE_POINTS)
            bridge.append((s, last_value + (target.value - last_value) * math.log(s / last_seconds) / span))
    return Trajectory(source="prediction", **kind, tta_seconds=crossing,
                      tta_low_seconds=measured.tta_predicted_low_seconds,
                      tta_high_seconds=measured.tta_predicted_high_seconds,
                      points=[p for p in points if p[0] < crossing] + bridge or [(crossing, target.value)],
                      samples_per_second=throughput_to(client, best.run_id, last_seconds),
                      note=f"PREDICTED: the trial's curve to {last_seconds:.3g} s, then interpolated linearly in log "
                           f"seconds to the predicted crossing of the target (80% interval); not measured")
