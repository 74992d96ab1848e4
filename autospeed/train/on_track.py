"""The production run is the last confirmation (docs/design.md "The production run is the last confirmation").

An exported winner carries its expected curve (`measured.trajectory`, autospeed.recipe.Trajectory: from its
confirmation runs, its search trial, or a prediction). `autospeed train` compares its live curve with it at 10%,
25% and 50% of the expected TTA and says, one line each, whether the run is on track, behind or ahead, and at the
end where the measured TTA fell against it.

The comparison is in time, the unit of the TTA: at the first evaluation past a checkpoint, the live run's best
metric so far is looked up on the expected curve's best so far, and `pace` = the live train seconds / the seconds
the expected curve took to reach the same value (1.5: the live run took 1.5x as long). On track means pace inside
the expectation's own range (its TTA's low and high over its TTA: where one more confirmation run falls, 80%,
or the 80% interval of a prediction), widened to at least 0.9-1.1 so that one run's timing noise is not called a trend.
Each check's pace and, at the end, a reached run's TTA over the prediction are split in two (TTA = samples to
target / samples per second): the run's samples over the prediction's at the same metric value (the maths: this
seed and data order) and its throughput over the prediction's (the systems: this machine, its load, its settings),
where the trajectory carries its throughput and the run counts its samples. At 10% of a long job a user then knows
whether to look at the machine or at the recipe.
Standard library only: the trainer's side of the boundary.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import TextIO

CHECKPOINTS = (0.10, 0.25, 0.50)  # of the expected TTA
MIN_BAND = 0.10  # on track at least within 0.9x-1.1x of the expected pace
ON_TRACK, BEHIND, AHEAD = "on track", "behind its prediction", "ahead of its prediction"
SOURCES = {"confirmation": "its confirmation runs", "trial": "its one search trial",
           "prediction": "the search's extrapolation"}


@dataclass
class Check:
    """One comparison: at `train_seconds` (the first evaluation past `fraction` x the expected TTA) the live best
    was `value`; the expected curve reached it at `expected_seconds`; pace = train_seconds / expected_seconds."""

    fraction: float
    checkpoint_seconds: float
    train_seconds: float
    value: float
    expected_seconds: float
    pace: float
    verdict: str
    ended_before: bool = False  # the run ended (target or budget) before this checkpoint: checked at its end
    # pace's two halves (pace = samples_over_prediction / throughput_over_prediction), where both sides count samples:
    # the live samples so far over the samples the prediction had trained by expected_seconds, and the live
    # samples/s so far over the prediction's
    samples_over_prediction: float | None = None
    throughput_over_prediction: float | None = None


def _better(mode: str, a: float, b: float) -> bool:
    return a >= b if mode == "max" else a <= b


class OnTrack:
    """Checks a live run against an exported Trajectory; `update` per evaluation, `finish` once at the end."""

    def __init__(self, trajectory, stream: TextIO = sys.stdout, say=None):
        self.trajectory = trajectory
        self.say = say or (lambda line: print(line, file=stream, flush=True))
        tta = trajectory.tta_seconds
        low = trajectory.tta_low_seconds if trajectory.tta_low_seconds is not None else tta
        high = trajectory.tta_high_seconds if trajectory.tta_high_seconds is not None else tta
        self.band = (min(1 - MIN_BAND, low / tta), max(1 + MIN_BAND, high / tta))
        self.pending = [f * tta for f in CHECKPOINTS]
        self.checks: list[Check] = []
        self._envelope = self._best_so_far(trajectory.points, trajectory.mode)
        self._last = None  # the last evaluation: (train seconds, best value)
        self._samples: dict[float, int] = {}  # train seconds -> samples trained by then, at each evaluation

    @staticmethod
    def _best_so_far(points, mode: str) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for seconds, value in points:
            best = value if not out or _better(mode, value, out[-1][1]) else out[-1][1]
            out.append((seconds, best))
        return out

    def expected_seconds(self, value: float) -> float:
        """When the expected curve's best so far first reached `value` (linear between points); its first point's
        time if it started better, its TTA if it never got there (both bounds: the pace is then at least / at
        most what it says)."""
        mode, env = self.trajectory.mode, self._envelope
        if _better(mode, env[0][1], value):
            return env[0][0]
        for (t0, v0), (t1, v1) in zip(env, env[1:]):
            if _better(mode, v1, value):
                return t0 + (t1 - t0) * (value - v0) / (v1 - v0) if v1 != v0 else t1
        return self.trajectory.tta_seconds

    def verdict(self, pace: float) -> str:
        return BEHIND if pace > self.band[1] else AHEAD if pace < self.band[0] else ON_TRACK

    def update(self, event) -> None:
        """One live evaluation (the trainer's EvalEvent: train_seconds, best_value)."""
        if event.best_value is None or event.best_value != event.best_value:  # a script's without the metric: NaN
            return
        self._last = (event.train_seconds, event.best_value)
        self._samples[event.train_seconds] = getattr(event, "samples", 0) or 0
        while self.pending and event.train_seconds >= self.pending[0]:
            self._check(self.pending.pop(0), ended_before=False)

    def watching(self, on_eval):
        """The trainer's `on_eval` that also checks each evaluation (after `on_eval`, which may stop the run)."""
        def both(event):
            stop = on_eval(event)
            self.update(event)
            return stop
        return both

    def replay(self, history: list[dict]) -> None:
        """Check a finished run's evaluations (data-parallel workers: their evaluations happened elsewhere)."""
        for row in history:
            self.update(SimpleNamespace(train_seconds=row["train_seconds"], best_value=row["best_value"],
                                        samples=row.get("samples", 0)))

    def _check(self, checkpoint: float, ended_before: bool) -> None:
        seconds, value = self._last
        expected = self.expected_seconds(value)
        pace = seconds / expected if expected > 0 else float("inf")
        halves = self._halves(self._samples.get(seconds, 0), seconds, expected) or (None, None)
        check = Check(checkpoint / self.trajectory.tta_seconds, checkpoint, seconds, value, expected, pace,
                      self.verdict(pace), ended_before, *halves)
        self.checks.append(check)
        self.say(self._line(check))

    def _expected_text(self) -> str:
        t = self.trajectory
        inside = (f" [{t.tta_low_seconds:.3g}-{t.tta_high_seconds:.3g}]"
                  if t.tta_low_seconds is not None and t.tta_high_seconds is not None else "")
        return f"~{t.tta_seconds:.3g} s{inside} (predicted from {SOURCES[t.source]})"

    def _line(self, c: Check) -> str:
        t = self.trajectory
        when = (f"the run ended at {c.train_seconds:.2f} s, before it, with {t.metric} {c.value:.4g}" if c.ended_before
                else f"{t.metric} {c.value:.4g} at {c.train_seconds:.2f} s")
        return (f"prediction check at {c.fraction:.0%} of the predicted TTA ~{t.tta_seconds:.3g} s "
                f"({c.checkpoint_seconds:.2f} s): {when}, which the prediction had reached by "
                f"{c.expected_seconds:.2f} s: pace {c.pace:.2f}x, {c.verdict} (on track: {self.band[0]:.2f}x-"
                f"{self.band[1]:.2f}x)"
                + (f"; samples {c.samples_over_prediction:.2f}x, throughput {c.throughput_over_prediction:.2f}x the "
                   f"prediction's" if c.samples_over_prediction is not None else ""))

    def finish(self, tta_seconds: float | None, train_seconds: float) -> dict:
        """The checkpoints the run ended before, checked at its end; the measured TTA against the prediction,
        said in one line. Returns the record for the JSON result and the MLflow run."""
        if self._last is not None:
            for checkpoint in self.pending:
                self._check(checkpoint, ended_before=True)
        self.pending = []
        t = self.trajectory
        ratio = tta_seconds / t.tta_seconds if tta_seconds is not None else None
        split = self._split(tta_seconds) if ratio is not None else {}
        if ratio is not None:
            verdict = self.verdict(ratio)
            self.say(f"measured TTA {tta_seconds:.2f} s against the predicted {self._expected_text()}: "
                     f"{ratio:.2f}x the prediction, {verdict} (on track: {self.band[0]:.2f}x-{self.band[1]:.2f}x)")
            if split:
                self.say(f"  = samples to target {split['samples_to_target']:,.0f} against ~"
                         f"{split['predicted_samples_to_target']:,.0f} ({split['samples_over_prediction']:.2f}x: the "
                         f"maths, this seed and data order) / throughput {split['samples_per_second']:,.0f} samples/s "
                         f"against {t.samples_per_second:,.0f} ({split['throughput_over_prediction']:.2f}x: the "
                         f"systems, this machine and its load)")
        else:
            verdict = BEHIND if train_seconds > t.tta_seconds * self.band[1] else "not reached"
            self.say(f"target not reached in {train_seconds:.2f} s of train clock against the predicted "
                     f"{self._expected_text()}: {verdict}")
        return {"source": t.source, "note": t.note, "predicted_tta_seconds": t.tta_seconds,
                "predicted_tta_low_seconds": t.tta_low_seconds, "predicted_tta_high_seconds": t.tta_high_seconds,
                "on_track_band": list(self.band), "checks": [asdict(c) for c in self.checks],
                "measured_tta_seconds": tta_seconds, "tta_over_prediction": ratio, "verdict": verdict,
                "predicted_samples_per_second": t.samples_per_second, **split}

    def _split(self, tta_seconds: float) -> dict:
        """TTA over the prediction as samples to target over the prediction's, divided by throughput over the
        prediction's; empty where either side has no count (a trajectory without a throughput, a run without
        samples)."""
        seen = [at for at in self._samples if at <= tta_seconds]  # the evaluation that met the target
        samples = self._samples[max(seen)] if seen else 0
        t = self.trajectory
        halves = self._halves(samples, tta_seconds, t.tta_seconds)
        if halves is None:
            return {}
        return {"samples_to_target": samples, "predicted_samples_to_target": t.tta_seconds * t.samples_per_second,
                "samples_per_second": samples / tta_seconds, "samples_over_prediction": halves[0],
                "throughput_over_prediction": halves[1]}

    def _halves(self, samples: int, seconds: float, expected_seconds: float) -> tuple[float, float] | None:
        """seconds / expected_seconds (a check's pace, the end's TTA ratio) as its two halves: the run's `samples`
        by `seconds` over the samples the prediction had trained by `expected_seconds`, and the run's samples/s over
        the prediction's. None without both counts (a trajectory without a throughput, a run without samples)."""
        rate = self.trajectory.samples_per_second
        if not rate or samples <= 0 or seconds <= 0 or expected_seconds <= 0:
            return None
        return samples / (expected_seconds * rate), samples / seconds / rate


def on_track_for(recipe, stream: TextIO) -> OnTrack | None:
    """The checker of an exported recipe that carries a trajectory (None for any other recipe)."""
    trajectory = recipe.measured.trajectory if recipe.measured is not None else None
    if trajectory is None:
        return None
    if trajectory.metric != recipe.resolved_target.metric:  # a hand-edited target: a curve of another metric
        print(f"note: measured.trajectory is a curve of {trajectory.metric}, the target is "
              f"{recipe.resolved_target.metric}: not compared", file=stream)
        return None
    print(f"checking this run against its predicted curve at {', '.join(f'{f:.0%}' for f in CHECKPOINTS)} of the "
          f"predicted TTA ~{trajectory.tta_seconds:.3g} s ({trajectory.note})", file=stream, flush=True)
    return OnTrack(trajectory, stream)
