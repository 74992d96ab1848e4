"""The sections of a search-space file beside its knobs: each stage's settings (budget, ASHA, sampler,
confirmation, probe, prediction, tracking, resources), validated on load with unknown keys rejected. The file
itself, its knobs and their layers: space.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    """A section of the file: an unknown key is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


class Budget(Strict):
    trials: int = Field(24, ge=1)
    max_train_seconds: float = Field(30.0, gt=0)  # per trial, train clock
    # A cap on the whole exploration, in baseline runs (needs confirm.baseline_tta_seconds): once the trials' train
    # clock, summed, reaches this many times the baseline's TTA, no new trial starts, a running one but the baseline
    # ends at its next report, and the search goes on to confirmation with the trials it has. null: `trials` alone.
    exploration_baseline_runs: float | None = Field(None, gt=0)


class Asha(Strict):
    enabled: bool = True
    grace_seconds: float = Field(2.0, gt=0)  # first rung, train clock
    reduction_factor: float = Field(3.0, gt=1)
    # Also stop a trial whose train clock passed this many times the confirm.top_k-th best TTA so far without
    # reaching the target (it cannot be among the confirmed); null: ASHA's rungs only.
    incumbent_margin: float | None = Field(1.5, ge=1)


class Sampler(Strict):
    kind: Literal["tpe", "random"] = "tpe"
    seed: int = 0
    n_startup_trials: int = Field(6, ge=0)


class Confirm(Strict):
    top_k: int = Field(3, ge=1)
    # Runs per recipe, each in a fresh process; 0 turns confirmation off. A speed-up interval needs >= 3.
    repeats: int = Field(3, ge=0)
    # more interleaved rounds, up to this many in all, while the winner's speed-up interval overlaps the
    # runner-up's (0: exactly `repeats`); every look then uses a stricter level (outcome.sequential_confidence)
    max_repeats: int = Field(0, ge=0)
    # re-time the winner with each knob that differs from the baseline set back, one at a time (ablation.py)
    ablation: bool = False
    # the train-clock budget of every confirmation run (and of the exported recipe): a long job's production
    # length, far above the trials' budget. null: the recipe's own (the trials' budget; the baseline's own)
    max_train_seconds: float | None = Field(None, gt=0)
    # the baseline's TTA when it is known (from an earlier production run): confirmation then does not re-run
    # the baseline, and the speed-up is against this number; `baseline_tta_note` says where it came from
    baseline_tta_seconds: float | None = Field(None, gt=0)
    baseline_tta_note: str = ""
    # the inductor cache each confirmation and ablation run compiles from: cold, a new empty folder per run (the
    # compile a production run pays on a new machine); warm, the machine's shared one (what earlier runs left)
    compile_cache: Literal["cold", "warm"] = "cold"
    # a compiled winner confirmed cold also trains `repeats` times with its shipped cache and warm (compile_ways.py)
    compile_ways: bool = True
    # how many runs confirm (search/confirm_fewest.py): rounds, `repeats` interleaved rounds of every candidate and
    # the baseline; fewest (needs baseline_tta_seconds), one run per candidate in the leaderboard's order while an
    # unrun one could still beat the fastest measured; one (needs baseline_tta_seconds), the search's best, once.
    # null: fewest with baseline_tta_seconds, else rounds
    runs: Literal["rounds", "fewest", "one"] | None = None

    @property
    def runs_mode(self) -> str:
        """`runs` as it applies: its default resolved."""
        if self.runs is not None:
            return self.runs
        return "fewest" if self.baseline_tta_seconds is not None else "rounds"

    @model_validator(mode="after")
    def _runs_fit(self) -> "Confirm":
        mode = self.runs_mode
        if mode == "rounds":
            return self
        if self.baseline_tta_seconds is None:
            raise ValueError(f"runs: {mode} needs baseline_tta_seconds: without a known baseline TTA the baseline "
                             f"must be run too; give it (with baseline_tta_note) or set runs: rounds")
        if self.max_repeats:
            raise ValueError(self._once(mode, "max_repeats", self.max_repeats))
        if mode == "one" and self.ablation:
            raise ValueError("runs: one trains exactly one run, and ablation re-times the winner once per knob; drop "
                             "ablation, or set runs: fewest")
        return self

    def file_conflict(self) -> str | None:
        """What the file's own confirm keys ask that `runs` fewest or one cannot do: repeats above 1, top_k above 1
        with one. Checked where a space file is read (space.spec_from_dict), not as the model validates: only the
        file knows which keys it gave, and a spec read back from its JSON (a trial's) has every field set."""
        mode, given = self.runs_mode, self.model_fields_set
        if mode != "rounds" and "repeats" in given and self.repeats > 1:
            return self._once(mode, "repeats", self.repeats)
        if mode == "one" and "top_k" in given and self.top_k > 1:
            return (f"runs: one trains only the search's best, not top_k: {self.top_k}; drop top_k, or set runs: "
                    f"fewest")
        return None

    def _once(self, mode: str, key: str, value: int) -> str:
        default = "" if "runs" in self.model_fields_set else " (the default with baseline_tta_seconds)"
        return (f"runs: {mode}{default} trains each recipe at most once, not {key}: {value}; drop {key}, or set runs: "
                f"rounds for interleaved rounds")

    @model_validator(mode="after")
    def _note_with_tta(self) -> "Confirm":
        if self.baseline_tta_seconds is not None and not self.baseline_tta_note.strip():
            raise ValueError("baseline_tta_seconds needs baseline_tta_note: say where the number came from "
                             "(e.g. 'production run 2026-11-20, 8xA100, 52 h')")
        return self

    @model_validator(mode="after")
    def _at_least_repeats(self) -> "Confirm":
        if self.max_repeats and self.max_repeats < self.repeats:
            raise ValueError(f"max_repeats ({self.max_repeats}) must be >= repeats ({self.repeats}); raise it or "
                             f"set 0 for exactly `repeats`")
        return self


class Neutrality(Strict):
    """The maths-neutrality check (search/neutrality.py): before the probe fixes a systems knob, a trace of the
    baseline's loss with and without it, same seed and data order, against the spread of two seeds."""

    enabled: bool = False
    steps: int = Field(200, ge=2)  # optimizer steps of each loss trace
    window_steps: int = Field(20, ge=1)  # a trace's point: the mean train loss over this many steps
    # neutral when the knob's trace is within this fraction of the two seeds' distance (1: inside the band)
    band_fraction: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _two_points(self) -> "Neutrality":
        if self.steps < 2 * self.window_steps:
            raise ValueError(f"steps ({self.steps}) must be at least 2 x window_steps ({self.window_steps}) for a "
                             f"trace of two points or more; raise steps or lower window_steps")
        return self


class Probe(Strict):
    """The probe stage (search/probe.py): a few timed steps per systems configuration before the trials."""

    enabled: bool = True
    warmup_steps: int = Field(5, ge=0)  # optimizer steps before the timed ones (compilation, warm-up)
    steps: int = Field(20, ge=1)  # timed optimizer steps: steady-state samples/s
    max_configs: int = Field(24, ge=1)  # systems configurations probed, each at every batch size of the space
    # interleaved timing rounds of every configuration: the base's spread across them is the noise a
    # non-default value must beat
    rounds: int = Field(3, ge=2)
    # the maths-neutrality check of every systems knob value before it may be fixed (off: knobs assumed neutral)
    neutrality: Neutrality = Field(default_factory=Neutrality)


class Predict(Strict):
    """Predicted time to target (autospeed/predict.py, docs/design.md "Long jobs"): a trial that ends before its
    target is ranked by where its evaluation curve would meet it."""

    enabled: bool = False
    min_evaluations: int = Field(5, ge=3)  # fewer evaluations give no prediction
    # an 80% interval wider than high / low > this is no prediction ("too uncertain")
    max_interval_ratio: float = Field(4.0, gt=1)
    # cap on a predicted TTA; a trial without a prediction is censored at it (outcome.objective with this as its
    # budget). null: 20 x budget.max_train_seconds
    max_seconds: float | None = Field(None, gt=0)
    # end a trial once its predicted TTA's low bound is above the incumbent's high bound (learning-curve
    # early termination); ASHA's rungs stay on train seconds either way
    early_stop: bool = False
    # a wsd trial's cooldown branch (autospeed/train/cooldown.py): at its cut, a copy of its run decays the LR
    # linearly to 0 over this share of its steps so far and is evaluated; the ranking uses what it measured
    # instead of the typical decay factor. 0: no branch. `each_evaluation`: a branch at every stable-phase
    # evaluation (the ASHA-stopped trials get one too; costs about fraction x half the run per evaluation)
    cooldown_fraction: float = Field(0.2, ge=0, le=0.5)
    cooldown_each_evaluation: bool = False

    def cap_seconds(self, budget_seconds: float) -> float:
        return self.max_seconds if self.max_seconds is not None else 20.0 * budget_seconds


class Tracking(Strict):
    """How long the search waits for a tracking store that stopped answering (track/outbox.py): trials train on
    and their tracking writes are kept on disk meanwhile; past this the search stops as interrupted."""

    grace_seconds: float = Field(900.0, gt=0)


class Resources(Strict):
    gpus_per_trial: int = Field(0, ge=0)  # whole GPUs only: co-located trials corrupt timings
    cpus_per_trial: int | None = Field(None, ge=1)  # default: all cores on CPU, 4 per GPU trial
    max_concurrent_trials: int | None = Field(None, ge=1)  # default: 1 on CPU, one per GPU
    # Data-parallel workers of every trial (the recipes' `workers`, unless fixed/baseline/space set it):
    # one GPU each when gpus_per_trial is 1; on CPU they split the trial's cores.
    workers_per_trial: int = Field(1, ge=1)
