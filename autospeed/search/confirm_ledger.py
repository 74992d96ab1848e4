"""What an interrupted confirmation leaves behind, read back when the search resumes.

Each confirmation run is an MLflow child run of the search, finished as soon as it trains (track/layout.py
`finish_run`). A search killed in confirmation (SIGKILL, a lost machine: nothing ran its `finally`) leaves its
finished runs and at most one run still RUNNING. On `--resume`, confirmation closes that one KILLED and keeps
every finished run as a sample, training only the (recipe, round) pairs that have none: a kill costs the run in
flight, not the rounds before it (docs/design.md "Crash anywhere, lose nothing").
"""

from __future__ import annotations

from dataclasses import dataclass

from autospeed.outcome import Status
from autospeed.track import layout as t


@dataclass(frozen=True)
class KeptResult:
    """A finished confirmation run's result as its MLflow run recorded it: what a Candidate's samples need."""

    run_id: str
    status: Status
    tta_seconds: float | None
    wall_to_target_seconds: float | None
    samples_per_second: float
    train_seconds: float

    @classmethod
    def of(cls, run) -> "KeptResult":
        metrics = run.data.metrics
        return cls(run.info.run_id, Status(run.data.tags[t.TAG_STATUS]), metrics.get(t.M_TTA),
                   metrics.get(t.M_WALL_TO_TARGET), metrics.get(t.M_SAMPLES_PER_SECOND, 0.0),
                   metrics.get(t.M_TRAIN_SECONDS, 0.0))


def finished_runs(client, parent, kind: str, trials_total: int) -> dict[tuple[str, int], KeptResult]:
    """This search's finished runs of `kind` from a confirmation over `trials_total` trials (an extended search
    confirms anew over all of its trials): {(trial id, round): result}. A run that ended KILLED (or never ended)
    is not a sample."""
    runs = client.search_runs(
        [parent.info.experiment_id], max_results=5000,
        filter_string=f"tags.`{t.TAG_PARENT}` = '{parent.info.run_id}' and tags.`{t.TAG_KIND}` = '{kind}' and "
                      f"tags.`{t.TAG_CONFIRM_TRIALS}` = '{trials_total}' and attributes.status != 'RUNNING' and "
                      f"attributes.status != 'KILLED'")
    kept: dict[tuple[str, int], KeptResult] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):  # two for one pair: the later stands
        tags = run.data.tags
        if t.TAG_STATUS not in tags:  # ended by hand outside autospeed: not a result of its own
            continue
        kept[(tags[t.TAG_TRIAL_ID], int(tags[t.TAG_CONFIRM_REPEAT]))] = KeptResult.of(run)
    return kept
