"""The Ray Tune callback (driver side) that gives every trial one MLflow child run.

Child runs are found again by trial id after a resume, so a trial never gets two. When a
trial's run is final, the trial goes into the search's ledger (and its recipe into the
recipe index), which the trainable reads to replay it instead of training it again.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

from ray.tune import Callback

from autospeed.outcome import Status, ended_by_scheduler, is_infeasible, objective
from autospeed.search.curve import EXPONENT_KEY, PREDICTION_KEYS
from autospeed.search.records import RERUN_OF
from autospeed.search.session import SearchSession
from autospeed.search.storage import SearchDir, unwritable
from autospeed.search.trainable import FINAL, recipe_of
from autospeed.show import leaderboard
from autospeed.space import SearchSpec
from autospeed.track import names, runs, writers
from autospeed.train.applied import Applied


def _halts_on_write_errors(method):
    """A write the search's folder refuses (a full disk, a read-only mount) halts the search (stopped as
    interrupted, the path named) instead of ending Tune's loop with a traceback. The trial it was recording is
    not in the ledger, so a resume trains it again into the same run."""

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            self.halt = self.halt or unwritable(e)
    return wrapped


class TrialTracker(Callback):
    """Reads the store once (a resumed search's runs); writes through `outbox` (track/outbox.py), so a tracking
    store that stops answering never holds up the trials. `halt`: why the search must stop as interrupted (the
    store silent past its grace, storage that cannot be written); the stopper reads it."""

    def __init__(self, session: SearchSession, spec: SearchSpec, total: int, resumed: bool):
        from autospeed.show.live import SearchView

        client, console, search_dir = session.client, session.console, session.search_dir
        self.client, self.out, self.parent = client, session.outbox, session.parent_id
        self.search_id, self.experiment_id = session.search_id, session.experiment_id
        self.halt: str | None = None
        self.console, self.told_down = console, False
        self.spec, self.search_dir = spec, search_dir
        self.runs: dict[str, str] = {}  # trial id -> MLflow run id
        self.replayed: set[str] = set()
        self.history: dict[str, list[tuple[float, float]]] = {}  # trial id -> what ASHA saw: (train s, target metric)
        self.errors_in_a_row: list[str] = []
        self.stop_reason: str | None = None
        self.searcher = None  # tuner.LedgerFirstOptuna: told each result once the ledger holds it
        self.target = spec.resolved_target
        self.view = SearchView(total=total, stream=console, metric=self.target.metric)
        if resumed:  # a new search has no runs to read: it needs no answer from the store to start its trials
            self._read_past(client, search_dir)

    def _read_past(self, client, search_dir: SearchDir) -> None:
        """A resumed search's trial runs, found again by trial id, and its finished trials counted in the view."""
        parent = client.get_run(self.parent)
        children = runs.child_runs(client, parent)
        for run in children:
            if run.data.tags.get(names.TAG_KIND) == names.KIND_TRIAL:
                self.runs[run.data.tags.get(names.TAG_TRIAL_ID)] = run.info.run_id
        for r in runs.trial_rows(client, parent, runs=children):
            # only trials that finished: one killed mid-run (KILLED by the resume) trains again into its run
            if r.status != Status.RUNNING and search_dir.finished(r.trial_id) is not None:
                self.view.seed_finished("baseline" if r.baseline else r.trial_id, r.status, r.tta_seconds,
                                        r.best_value, r.baseline, leaderboard.knobs_text(r),
                                        predicted=leaderboard.predicted_text(r))

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles callbacks into its experiment state (tuner.pkl). The MLflow client,
        # console and live view belong to this process; --resume attaches a fresh tracker.
        return {}

    def on_step_end(self, iteration, trials, **info) -> None:
        """Each turn of Tune's loop: say when the tracking store stops and starts answering again; past the grace,
        halt (the stopper then stops the search as interrupted)."""
        down, out = self.out.down_seconds(), self.out
        if down and not self.told_down:
            self.told_down = True
            self.view.waiting = (f"waiting for the tracking store ({out.last_error}); {out.pending} writes kept in "
                                 f"{out.path}; trials train on")
            self.view.note(f"tracking: the store stopped answering ({out.last_error}); its writes are kept in "
                           f"{out.path} and sent in order when it answers; trials train on, for up to "
                           f"tracking.grace_seconds ({out.grace_seconds:g} s)")
        elif not down and self.told_down:
            self.say_tracking_back()
        if out.past_grace() and self.halt is None:
            self.halt = (f"the tracking store has not answered for {down:.0f} s (tracking.grace_seconds: "
                         f"{out.grace_seconds:g}; last error: {out.last_error}); {out.pending} tracking writes are "
                         f"kept in {out.path} and are sent when the search resumes")

    def say_tracking_back(self) -> None:
        """The line that ends an outage the view announced (also after the trials, when the last writes wait)."""
        self.told_down, self.view.waiting = False, None
        seconds, held = self.out.outages[-1] if self.out.outages else (0.0, 0)
        self.view.note(f"tracking: the store answers again after {seconds:.0f} s; the {held} writes kept meanwhile "
                       f"are sent in order")

    @_halts_on_write_errors
    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        from mlflow.entities import RunStatus

        baseline = bool(trial.config.get("baseline"))
        run_id = self.runs.get(trial.trial_id)
        if run_id is not None and self.search_dir.finished(trial.trial_id) is not None:
            self.replayed.add(trial.trial_id)  # its run is final already; the trainable replays it
            return
        rerun_of = trial.config.get(RERUN_OF)
        if run_id is None and rerun_of in self.runs and self.search_dir.finished(rerun_of) is None:
            # a rebuilt search trains an unfinished trial's recipe again as a new Tune trial: it takes over its run
            run_id = self.runs[trial.trial_id] = self.runs.pop(rerun_of)
            self.out.set_tag(run_id, names.TAG_TRIAL_ID, trial.trial_id)
            self.out.set_tag(run_id, names.TAG_RERUN_OF, rerun_of)
        if run_id is None:
            index = int(trial.trial_id.rsplit("_", 1)[-1]) if "_" in trial.trial_id else len(self.runs)
            run = self.out.create_run(self.experiment_id, run_name="baseline" if baseline else f"trial-{index:03d}",
                                         tags={names.TAG_PARENT: self.parent, names.TAG_SEARCH_ID: self.search_id,
                                               names.TAG_TRIAL_ID: trial.trial_id, names.TAG_KIND: names.KIND_TRIAL,
                                               names.TAG_BASELINE: str(baseline).lower()})
            run_id = self.runs[trial.trial_id] = run.info.run_id
            params = writers.recipe_params(recipe_of(self.spec, trial.config).training_fields())
            writers.log_batch(self.out, run_id, params=params)
        else:  # resumed: the same run continues
            self.out.update_run(run_id, RunStatus.to_string(RunStatus.RUNNING))
        self.out.set_tag(run_id, names.TAG_STATUS, Status.RUNNING.value)
        self.history[trial.trial_id] = []
        self.view.started(trial.trial_id, "baseline" if baseline else trial.trial_id)

    @_halts_on_write_errors
    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if trial.trial_id in self.replayed:
            return
        value = result.get(self.target.metric)
        if "train_seconds" in result and value is not None and not math.isnan(value):
            self.history.setdefault(trial.trial_id, []).append((result["train_seconds"], value))
        if result.get(FINAL) is False:
            # The first evaluation says where the trial runs: tagged now, so a trial ASHA stops has it too.
            tags = writers.environment_tags(json.loads(result["environment"])) if result.get("environment") else None
            writers.log_batch(self.out, self.runs[trial.trial_id], writers.eval_metrics(result), tags=tags)

    @_halts_on_write_errors
    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        if trial.trial_id in self.replayed:
            self._tell(trial.trial_id)
            return
        last = trial.last_result or {}
        if last.get(FINAL):
            status = Status(last["status"])
        else:
            status = ended_by_scheduler(last.get("best_value"), self.target.value, last.get("train_seconds", 0.0),
                                        self.spec.budget.max_train_seconds, self.target.mode)
            if status == Status.REACHED:
                last = {**last, "tta_seconds": last["train_seconds"]}
        self._finish(trial, status, last, last.get("error") or None)

    @_halts_on_write_errors
    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        message = "trial process failed"
        if getattr(trial, "error_file", None) and Path(trial.error_file).exists():
            lines = [ln for ln in Path(trial.error_file).read_text().splitlines() if ln.strip()]
            message = lines[-1] if lines else message
        last = trial.last_result or {}
        score = objective(Status.FAILED, None, None, self.target.value, self.spec.budget.max_train_seconds,
                          self.target.mode)
        self._finish(trial, Status.FAILED, {**last, "objective": score}, message)

    def _finish(self, trial, status: Status, last: dict[str, Any], error: str | None) -> None:
        from mlflow.entities import RunStatus

        run_id = self.runs[trial.trial_id]
        best = last.get("best_value")  # of the target metric; None before the first evaluation
        bests = {k: v for k, v in last.items() if k.startswith("best_") and v is not None}
        tta = last.get("tta_seconds") if status == Status.REACHED else None
        score = last.get("objective")  # the trainer's, valid as final at any moment
        if score is None:  # ended before its first evaluation
            score = objective(status, tta, best, self.target.value, self.spec.budget.max_train_seconds,
                              self.target.mode)
        final = {"tta_seconds": tta, **bests, "wall_seconds": last.get("wall_seconds"),
                 "wall_to_target_seconds": last.get("wall_to_target_seconds") if tta is not None else None,
                 "compile_seconds": last.get("compile_seconds"), "peak_memory_mb": last.get("peak_memory_mb"),
                 names.M_COOLDOWN_TOTAL_SECONDS: last.get(names.M_COOLDOWN_TOTAL_SECONDS)}
        tags = {names.TAG_STATUS: status.value, **_tta_source_tags(status, last)}
        is_predicted = tags[names.TAG_TTA_SOURCE] == names.TTA_PREDICTED
        predicted = {k: last.get(k) for k in PREDICTION_KEYS} if is_predicted else {}
        final.update(predicted)  # metrics of a predicted trial only: tta_seconds stays for measurements
        if last.get("wall_clock_origin"):
            tags[names.TAG_WALL_ORIGIN] = last["wall_clock_origin"]
        if error:
            tags[names.TAG_ERROR] = error[:500]
        if last.get("duplicate_of"):
            tags[names.TAG_DUPLICATE_OF] = last["duplicate_of"]
        if last.get("environment"):
            tags.update(writers.environment_tags(json.loads(last["environment"])))
        if last.get("node"):  # also a repeated recipe's trial, which trains nothing
            tags[names.TAG_NODE] = last["node"]
        if last.get("applied"):
            tags.update(writers.applied_tags(json.loads(last["applied"])))
        writers.log_batch(self.out, run_id, writers.final_metrics(final, score), tags=tags)
        recipe_yaml = last.get("recipe_yaml") or recipe_of(self.spec, trial.config).to_yaml()
        self.out.log_text(run_id, recipe_yaml, "recipe.yaml")
        if last.get("stderr_tail"):  # a user's script that failed: the end of what it printed (script.runner)
            self.out.log_text(run_id, last["stderr_tail"], "stderr_tail.txt")
        terminal = RunStatus.FAILED if is_infeasible(status) else RunStatus.FINISHED
        self.out.set_terminated(run_id, RunStatus.to_string(terminal))
        # the target metric's key holds its best value: what the scheduler reads from a replayed report
        # (NaN before any evaluation: Tune requires the key, ASHA ignores NaN)
        standing = {**bests, self.target.metric: best if best is not None else math.nan}
        self.search_dir.record_finished(trial.trial_id, {
            FINAL: True, "status": status.value, "tta_seconds": tta, "objective": score, **standing,
            "train_seconds": last.get("train_seconds", 0.0), "step": last.get("step", 0),
            "tta_source": tags[names.TAG_TTA_SOURCE], "tta_note": tags[names.TAG_TTA_NOTE], **predicted,
            EXPONENT_KEY: last.get(EXPONENT_KEY)},  # pooled by the trials after it (autospeed.horizon)
            baseline=bool(trial.config.get("baseline")), history=self.history.pop(trial.trial_id, []))
        # Index the recipe's first outcome for later repeats; not a crash of the trial process,
        # which says nothing about the recipe (only failures the trainer reported are indexed).
        key = last.get("recipe_key")
        if key and (status != Status.FAILED or last.get(FINAL)) and not last.get("duplicate_of"):
            self.search_dir.record_recipe(key, {
                "trial_id": trial.trial_id, "status": status.value, "tta_seconds": tta, "objective": score,
                **standing, "error": error or "",
                "compile_seconds": last.get("compile_seconds"), "peak_memory_mb": last.get("peak_memory_mb")})
        self._tell(trial.trial_id)
        self._progress(trial, status, tta, best, last.get("duplicate_of"), json.loads(last.get("applied") or "{}"),
                       _predicted_text(tags, predicted))
        self._count_errors(status, error)

    def _tell(self, trial_id: str) -> None:
        """The study hears a trial's result only once the ledger holds it (tuner.LedgerFirstOptuna)."""
        if self.searcher is not None:
            self.searcher.tell(trial_id)

    def _progress(self, trial, status: Status, tta: float | None, best: float | None,
                  duplicate_of: str | None, applied: Applied | None = None,
                  predicted: str | None = None) -> None:
        baseline = bool(trial.config.get("baseline"))
        label = "baseline" if baseline else trial.trial_id
        if duplicate_of:
            label += f" (repeats {duplicate_of}'s recipe: its result, not trained again)"
        knobs = {} if baseline else {k: v for k, v in trial.config.items() if k != RERUN_OF}
        self.view.finished(trial.trial_id, label, status.value, tta, best, baseline, knobs, applied,
                           predicted=predicted)

    def _count_errors(self, status: Status, error: str | None) -> None:
        """The same error N trials in a row means the search is broken, not the recipes."""
        if is_infeasible(status) and error:
            self.errors_in_a_row.append(error)
        else:
            self.errors_in_a_row.clear()
        n = self.spec.max_consecutive_errors
        if len(self.errors_in_a_row) >= n and len({error_kind(e) for e in self.errors_in_a_row[-n:]}) == 1:
            what = "the last trial failed" if n == 1 else f"the last {n} trials failed with the same error"
            self.stop_reason = f"{what}: {self.errors_in_a_row[-1]}"


def _tta_source_tags(status: Status, last: dict[str, Any]) -> dict[str, str]:
    """autospeed.tta_source and its note: measured (reached), predicted (search/curve.py said so), or none."""
    if status == Status.REACHED:
        return {names.TAG_TTA_SOURCE: names.TTA_MEASURED, names.TAG_TTA_NOTE: ""}
    source = last.get("tta_source") if status not in (Status.FAILED,) or last.get(FINAL) else None
    if source == names.TTA_PREDICTED and last.get(PREDICTION_KEYS[0]) is not None:
        return {names.TAG_TTA_SOURCE: names.TTA_PREDICTED, names.TAG_TTA_NOTE: last.get("tta_note") or ""}
    note = last.get("tta_note") if source == names.TTA_NONE else f"the run ended {status.value} before a prediction"
    return {names.TAG_TTA_SOURCE: names.TTA_NONE, names.TAG_TTA_NOTE: (note or "")[:500]}


def _predicted_text(tags: dict[str, str], predicted: dict[str, Any]) -> str | None:
    """What the live view shows for a trial that did not reach: `~412 s [300-560]` or `no prediction (why)`."""
    from autospeed.predict import format_predicted

    if tags[names.TAG_TTA_SOURCE] == names.TTA_MEASURED:
        return None
    if predicted:
        return format_predicted(*(predicted[k] for k in PREDICTION_KEYS))
    note = tags[names.TAG_TTA_NOTE]
    return f"no prediction ({note})" if note and note != names.TTA_NOTE_PREDICT_OFF else None


def error_kind(error: str) -> str:
    """An error's first line with its numbers masked: what makes two trials' errors 'the same'
    (OOM sizes, step counts and addresses differ between trials)."""
    return re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?", "#", error.strip().splitlines()[0] if error.strip() else "")
