"""The statistics of a confirmation (search/confirm.py runs it): each candidate's repeated runs and their medians,
the winner decided on medians, the speed-up with its 90% interval and the prediction of a re-measurement, and the
rule that adds rounds while the winner is not separated (docs/design.md "Confirmation runs", "Honest figures").

The intervals are autospeed.outcome's (speedup_interval, remeasure_interval, sequential_confidence); this module
holds what a confirmation decides from them, reads nothing and writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from autospeed.outcome import (
    REMEASURE_RUNS,
    Status,
    interval_note,
    log_spread,
    median_tta,
    remeasure_interval,
    speedup_interval,
)
from autospeed.recipe import Recipe
from autospeed.search.confirm_fewest import ROUNDS
from autospeed.track import names

CONFIDENCE = 0.9  # of every printed speed-up interval


@dataclass
class Candidate:
    """One recipe under confirmation and its repeated runs (TTA None: target not reached)."""

    trial_id: str
    baseline: bool
    search_tta_seconds: float | None
    recipe: Recipe
    ttas: list[float | None] = field(default_factory=list)
    walls: list[float | None] = field(default_factory=list)  # wall to target: process start to the target
    samples_per_second: list[float] = field(default_factory=list)
    name: str | None = None  # shown instead of the trial id (ablation: "without batch_size")
    train_seconds: list[float] = field(default_factory=list)  # train clock of each run: what it cost
    # (seconds, low, high) of a trial that did not reach but was predicted (autospeed.predict)
    search_predicted: tuple[float, float | None, float | None] | None = None
    run_id: str | None = None  # the trial's MLflow run: a compiled winner's compile cache is logged on it
    search_seconds: float | None = None  # train seconds its trial spent (search/confirm_fewest.py's bound)
    not_run: str | None = None  # confirm.runs fewest or one: why it was not trained

    @property
    def label(self) -> str:
        return self.name or ("baseline" if self.baseline else self.trial_id)

    @property
    def median(self) -> float | None:
        """Median TTA, a run that missed the target counting as infinitely slow; None if that is the median."""
        return median_tta(self.ttas)

    @property
    def wall_median(self) -> float | None:
        return median_tta(self.walls)

    @property
    def reached(self) -> list[float]:
        return [x for x in self.ttas if x is not None]

    def record(self, result) -> None:
        reached = result.status == Status.REACHED
        self.ttas.append(result.tta_seconds if reached else None)
        self.walls.append(getattr(result, "wall_to_target_seconds", None) if reached else None)
        self.samples_per_second.append(result.samples_per_second)
        self.train_seconds.append(result.train_seconds)


@dataclass
class ConfirmOutcome:
    candidates: list[Candidate]
    repeats: int
    winner: Candidate | None
    baseline: Candidate | None
    confidence: float = CONFIDENCE  # per-look level of the intervals (sequential repeats: above 0.9)
    ablation: list = field(default_factory=list)  # ablation.Ablated, when confirm.ablation ran
    ablation_interrupted: bool = False
    # confirm.baseline_tta_seconds: the baseline's TTA given, not re-run (`baseline` then only holds its recipe)
    baseline_given_seconds: float | None = None
    baseline_note: str = ""
    compile_cache: str = names.COMPILE_CACHE_COLD  # confirm.compile_cache: the inductor cache every run compiled from
    runs_mode: str = ROUNDS  # confirm.runs as it applied: rounds, fewest or one (search/confirm_fewest.py)
    # a compiled winner's runs the other ways production pays its compile (search/compile_ways.py), by way
    compile_ways: dict[str, Candidate] = field(default_factory=dict)

    @property
    def baseline_tta_seconds(self) -> float | None:
        """The baseline's median TTA: the given number, else its confirmation runs' median."""
        if self.baseline_given_seconds is not None:
            return self.baseline_given_seconds
        return self.baseline.median if self.baseline is not None else None

    @property
    def speedup(self) -> float | None:
        base = self.baseline_tta_seconds
        if not self.winner or not self.winner.median or not base:
            return None
        return base / self.winner.median

    @property
    def speedup_range(self) -> tuple[float | None, float | None]:
        """Given baseline: given / the winner's slowest reached run .. given / its fastest (no interval)."""
        given, w = self.baseline_given_seconds, self.winner
        return (given / max(w.reached), given / min(w.reached)) if given and w and w.reached else (None, None)

    @property
    def wall_speedup(self) -> float | None:
        """The same ratio on wall to target (process start to target): what a production process sees."""
        if self.baseline_given_seconds is not None:  # a given train-clock TTA says nothing of the wall
            return None
        if not self.winner or not self.baseline or not self.winner.wall_median or not self.baseline.wall_median:
            return None
        return self.baseline.wall_median / self.winner.wall_median

    @property
    def speedup_interval(self) -> tuple[float | None, float | None]:
        """90% interval of the winner's speed-up over the seeds (None, None with too few runs, or a given
        baseline)."""
        if not self.winner or not self.baseline or self.speedup is None or self.baseline_given_seconds is not None:
            return None, None
        return speedup_interval(self.baseline.ttas, self.winner.ttas, self.confidence)

    @property
    def remeasure_interval(self) -> tuple[float | None, float | None]:
        """Predicted range of the speed-up a user measures again with 7 fresh runs a side (a prediction), its
        log-TTA spread pooled over every candidate's runs (outcome.log_spread: one machine's noise)."""
        if not self.winner or not self.baseline or self.speedup is None or self.baseline_given_seconds is not None:
            return None, None
        return remeasure_interval(self.baseline.ttas, self.winner.ttas, REMEASURE_RUNS, CONFIDENCE,
                                  log_spread(c.ttas for c in self.candidates))

    @property
    def interval_note(self) -> str | None:
        """Why there is no interval (a given baseline, too few repeats, too many missed targets), else None."""
        if self.baseline_given_seconds is not None:
            return f"baseline TTA given ({self.baseline_note}), not measured here: no interval"
        if not self.winner or not self.baseline:
            return None
        return interval_note(self.baseline.ttas, self.winner.ttas, self.confidence)

    @property
    def runs(self) -> list[Candidate]:
        """Every group of runs the confirmation trained: each candidate's, then each compile way's."""
        return [*self.candidates, *self.compile_ways.values()]

    @property
    def compute_seconds(self) -> float:
        """Train-clock seconds of every confirmation run, the compile ways' included (missed targets at their whole
        budget)."""
        return sum(sum(c.train_seconds) for c in self.runs)

    @property
    def compute_baseline_runs(self) -> float | None:
        """compute_seconds in baseline runs (/ the baseline's median TTA, measured or given)."""
        return self.compute_seconds / self.baseline_tta_seconds if self.baseline_tta_seconds else None

    @property
    def compute_metrics(self) -> dict[str, float | None]:
        """The parent's metrics of what the confirmation's runs cost (search/confirm.py logs them)."""
        return {names.M_CONFIRM_COMPUTE_SECONDS: self.compute_seconds,
                names.M_CONFIRM_COMPUTE_BASELINE_RUNS: self.compute_baseline_runs}


def confirm_rounds(candidates: list[Candidate], repeats: int, max_repeats: int, run_round,
                   confidence: float = CONFIDENCE) -> int:
    """Run interleaved rounds (`run_round(r)` trains every candidate once): `repeats` of them, then more,
    up to `max_repeats` in all, while the winner is not separated from the runner-up at `confidence` per
    look (sequential_confidence). Returns the rounds run."""
    rounds = 0
    while rounds < repeats or (rounds < max_repeats and not separated(candidates, confidence)):
        run_round(rounds)
        rounds += 1
    return rounds


def separated(candidates: list[Candidate], confidence: float = CONFIDENCE) -> bool:
    """The winner's speed-up interval lies above the runner-up's (the baseline included, whose speed-up is
    1 by definition): the ranking would not change with more seeds, within that confidence. A winner whose
    interval is undefined at its low end (too few runs, too many missed targets) is not separated; a
    runner-up undefined at its high end is beaten. Without a baseline or a runner-up there is nothing to
    separate."""
    base = next((c for c in candidates if c.baseline), None)
    ranked = sorted((c for c in candidates if c.median is not None), key=lambda c: c.median)
    if len(ranked) < 2:
        return True
    if base is None:  # a given (or no) baseline: the winner against the runner-up itself
        winner_low, _ = speedup_interval(ranked[1].ttas, ranked[0].ttas, confidence)
        return winner_low is not None and winner_low > 1.0
    if base.median is None:
        return True
    winner_low, _ = speedup_interval(base.ttas, ranked[0].ttas, confidence)
    if ranked[1] is base:
        return winner_low is not None and winner_low > 1.0
    _, runner_up_high = speedup_interval(base.ttas, ranked[1].ttas, confidence)
    if winner_low is None:
        return False
    return runner_up_high is None or winner_low > runner_up_high


def decide(candidates: list[Candidate], repeats: int, confidence: float = CONFIDENCE, *,
           baseline: Candidate | None = None, given_seconds: float | None = None,
           given_note: str = "") -> ConfirmOutcome:
    """The winner on medians among the candidates run (the baseline may win when it ran). `baseline`: its
    candidate when it was not run (a given TTA), else found among `candidates`."""
    base = next((c for c in candidates if c.baseline), baseline)
    ranked = sorted((c for c in candidates if c.median is not None), key=lambda c: c.median)  # the baseline may win
    return ConfirmOutcome(candidates, repeats, ranked[0] if ranked else None, base, confidence,
                          baseline_given_seconds=given_seconds, baseline_note=given_note)
