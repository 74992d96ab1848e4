"""The record of a search's confirmation and ablation runs: written through the search's tracking journal, read
back when the search resumes (docs/design.md "Crash anywhere, lose nothing").

Each confirmation or ablation run is an MLflow child run of the search, created, ended and finished through the
journal (track/outbox.py) as soon as it trains: a tracking store that stops answering holds up no run, for up to
`tracking.grace_seconds`, as in the trials. A search killed in confirmation or ablation (SIGKILL, a lost machine:
nothing ran its `finally`) leaves its finished runs and at most one run still RUNNING. On `--resume`, the ledger
closes that one KILLED and keeps every finished run as a sample, so confirmation and ablation train only the
(recipe, knob, round) triples that have none, in their interleaved order and with their seeds: a kill costs the
run in flight, not the rounds before it, and the closing summary and export are the ones an uninterrupted search
gives from the same runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from autospeed.errors import Interrupted
from autospeed.outcome import Status
from autospeed.search.session import SearchSession
from autospeed.track import names, writers
from autospeed.track.runs import ENDED, child_runs, trial_rows

KINDS = (names.KIND_CONFIRM, names.KIND_ABLATION, names.KIND_COMPILE_WAY)
# a confirmation run's knob in the ledger's keys (an ablation's reference runs are knob "none"; a compile way's run
# has its way there)
NO_KNOB = ""


@dataclass(frozen=True)
class KeptResult:
    """A finished run's result as its MLflow run recorded it: what a Candidate's samples need."""

    run_id: str
    status: Status
    tta_seconds: float | None
    wall_to_target_seconds: float | None
    samples_per_second: float
    train_seconds: float

    @classmethod
    def of(cls, run) -> "KeptResult":
        metrics = run.data.metrics
        return cls(run.info.run_id, Status(run.data.tags[names.TAG_STATUS]), metrics.get(names.M_TTA),
                   metrics.get(names.M_WALL_TO_TARGET), metrics.get(names.M_SAMPLES_PER_SECOND, 0.0),
                   metrics.get(names.M_TRAIN_SECONDS, 0.0))


def finished_runs(client, parent, kind: str, trials_total: int) -> dict[tuple[str, str, int], KeptResult]:
    """This search's finished runs of `kind` from a confirmation over `trials_total` trials (an extended search
    confirms anew over all of its trials): {(trial id, ablated knob or NO_KNOB, round): result}. A run that ended
    KILLED (or never ended) is not a sample."""
    runs = child_runs(client, parent, kind, {names.TAG_CONFIRM_TRIALS: str(trials_total)}, where=ENDED)
    kept: dict[tuple[str, str, int], KeptResult] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):  # two for one triple: the later stands
        tags = run.data.tags
        if names.TAG_STATUS not in tags:  # ended by hand outside autospeed: not a result of its own
            continue
        key = (tags[names.TAG_TRIAL_ID], tags.get(names.TAG_ABLATION_KNOB, tags.get(names.TAG_COMPILE_WAY, NO_KNOB)),
               int(tags[names.TAG_CONFIRM_REPEAT]))
        kept[key] = KeptResult.of(run)
    return kept


class RunLedger:
    """A search's confirmation and ablation runs: read from the store once, as confirmation starts (the store
    answers then: the trials' writes were just delivered); from there on every write goes through the session's
    outbox (the search's journal, track/outbox.Outbox; outbox.Direct where there is none), and nothing reads the
    store. `trials_total`: the trials the confirmation chose from (None: counted from the store)."""

    def __init__(self, session: SearchSession, trials_total: int | None = None):
        client, parent = session.client, session.client.get_run(session.parent_id)
        self.session = session
        self.trials_total = len(trial_rows(client, parent)) if trials_total is None else trials_total
        self.out, self.console, self.told_down = session.outbox, session.console, False
        for kind in KINDS:  # a run a killed process left RUNNING: closed, trained again
            running = child_runs(client, parent, kind, where="attributes.status = 'RUNNING'")
            for run in running:
                writers.mark_killed(self.out, run.info.run_id)
        self.kept = {kind: finished_runs(client, parent, kind, self.trials_total) for kind in KINDS}

    def kept_result(self, kind: str, trial_id: str, round_: int, knob: str = NO_KNOB) -> KeptResult | None:
        """The finished run of this (trial, knob, round) an earlier session left, else None: to train."""
        return self.kept[kind].get((trial_id, knob, round_))

    def open_run(self, kind: str, c, repeat: int, recipe, tags: dict[str, str] | None = None) -> str:
        """Candidate `c`'s run of `repeat`, RUNNING, with its recipe's params; its id (local until sent)."""
        session = self.session
        run = self.out.create_run(
            session.experiment_id, run_name=f"{kind}-{c.label.replace(' ', '-')}-r{repeat}",
            tags={names.TAG_PARENT: session.parent_id, names.TAG_SEARCH_ID: session.search_id,
                  names.TAG_TRIAL_ID: c.trial_id, names.TAG_KIND: kind, names.TAG_BASELINE: str(c.baseline).lower(),
                  names.TAG_STATUS: Status.RUNNING.value, names.TAG_CONFIRM_REPEAT: str(repeat),
                  names.TAG_CONFIRM_TRIALS: str(self.trials_total), **(tags or {})})
        writers.log_batch(self.out, run.info.run_id, params=writers.recipe_params(recipe.training_fields()))
        return run.info.run_id

    def watch(self, phase: str) -> None:
        """Between runs: say when the store stops answering and when it answers again; past tracking.grace_seconds
        of silence, stop the search as interrupted (resumable: the journal holds every write)."""
        out = self.out
        down = out.down_seconds()
        if down and not self.told_down:
            self.told_down = True
            print(f"tracking: the store stopped answering ({out.last_error}); its writes are kept in {out.path} and "
                  f"sent in order when it answers; {phase} goes on, for up to tracking.grace_seconds "
                  f"({out.grace_seconds:g} s)", file=self.console, flush=True)
        elif not down and self.told_down:
            self.told_down = False
            seconds, held = out.outages[-1] if out.outages else (0.0, 0)
            print(f"tracking: the store answers again after {seconds:.0f} s; the {held} writes kept meanwhile are "
                  f"sent in order", file=self.console, flush=True)
        if out.past_grace():
            raise Interrupted(f"the tracking store has not answered for {down:.0f} s (tracking.grace_seconds: "
                              f"{out.grace_seconds:g}; last error: {out.last_error}); {out.pending} tracking writes "
                              f"are kept in {out.path} and are sent when the search resumes")
