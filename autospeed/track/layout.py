"""MLflow layout (docs/design.md "Tracking layout"): names defined once, shared by
writers (search, train) and readers (export, report).

Everything goes through `MlflowClient` with explicit run ids (no fluent global
state), and metrics go out with `log_batch`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from typing import Any, Iterable

from autospeed.errors import RunFailure, UserError
from autospeed.outcome import Status, is_infeasible

# ---- tags ----
TAG_SEARCH_ID = "autospeed.search_id"
TAG_TRIAL_ID = "autospeed.trial_id"
TAG_KIND = "autospeed.kind"
TAG_STATUS = "autospeed.status"
TAG_BASELINE = "autospeed.baseline"
TAG_ERROR = "autospeed.error"
TAG_DUPLICATE_OF = "autospeed.duplicate_of"  # on a trial whose recipe an earlier trial already trained
TAG_RERUN_OF = "autospeed.rerun_of"  # on a trial that trains an unfinished trial's recipe again after a rebuilt resume
TAG_APPLIED = "autospeed.applied"  # on a trial: each knob and the value that took effect (JSON)
# and, for the MLflow UI's columns, the values the batch knobs resolved to (micro_batch_size auto, lr_scaling)
APPLIED_COLUMNS = ("micro_batch_size", "accumulation_steps", "effective_batch", "lr")
TAG_CONFIRMED_BEST = "autospeed.confirmed_best_trial"  # on the parent: the trial confirmation picked
TAG_CONFIRM_REPEAT = "autospeed.confirm_repeat"  # on each confirm run: 0 .. repeats-1
# on the parent: the baseline trial whose TTA is the baseline's first confirmation sample (confirm.py)
TAG_CONFIRM_CARRIED = "autospeed.confirm_carried_trial"
TAG_EXPERIMENT_DIR = "autospeed.experiment_dir"  # on the parent: Ray experiment and optuna.db of the search
TAG_TRIALS = "autospeed.trials"  # on the parent: trials asked for (the `trials` param is the count it began with)
TAG_CONFIRM_TRIALS = "autospeed.confirm_trials"  # on each confirm run: how many trials the confirmation chose from
TAG_PARENT = "mlflow.parentRunId"
# on every run, from its environment: where it ran ("host/<Ray node id>" under Ray, else the host name)
TAG_NODE = "autospeed.env.node"
TAG_DEVICE_NAME = "autospeed.env.device_name"
KIND_SEARCH, KIND_TRIAL, KIND_CONFIRM, KIND_TRAIN, KIND_PROBE = "search", "trial", "confirm", "train", "probe"
KIND_ABLATION = "ablation"  # the confirmed winner re-timed with one knob set back to the baseline's value
TAG_PROBE_CONFIG = "autospeed.probe_config"  # on each probe run: its systems configuration's number
TAG_PROBE_FIXED = "autospeed.probe_fixed"  # on the parent: the knob values the probe fixed (JSON)
TAG_PROBE_MARGIN = "autospeed.probe_margin"  # on the parent: why (speed-up vs the noise it had to beat)
TAG_PROBE_NEUTRALITY = "autospeed.probe_neutrality"  # on the parent: each knob change's maths-neutrality (JSON)

# ---- metrics ----
# per evaluation, step = optimizer step: these and every metric the workload reports (val_accuracy, val_loss, ...)
M_VAL_ACCURACY = "val_accuracy"
M_TRAIN_LOSS = "train_loss"
M_TRAIN_SECONDS = "train_seconds"
M_SAMPLES_PER_SECOND = "samples_per_second"
# where the workload counts tokens and model FLOPs (autospeed.train.throughput): a GPT's tokens/s and MFU
M_TOKENS_PER_SECOND, M_MFU = "tokens_per_second", "mfu"
EVAL_METRICS = (M_TRAIN_LOSS, M_TRAIN_SECONDS, M_SAMPLES_PER_SECOND, M_TOKENS_PER_SECOND, M_MFU)
METRIC_NAMES = "metric_names"  # key of a trial's report listing the workload's metrics in it
# final, once per run: these and best_<metric> for every metric the workload reports
M_TTA = "tta_seconds"
M_BEST_VALUE = "best_value"  # best value of the target metric, in its direction
M_BEST_VAL_ACCURACY = "best_val_accuracy"
M_OBJECTIVE = "objective"
M_WALL_SECONDS = "wall_seconds"
# reached runs: process start (a fresh process's first run; else train() entry) to the end of the evaluation
# that met the target (autospeed.train.result); the tag TAG_WALL_ORIGIN says which
M_WALL_TO_TARGET = "wall_to_target_seconds"
TAG_WALL_ORIGIN = "autospeed.wall_clock_origin"
# Long jobs (docs/design.md "Long jobs: predicted time to target"): a trial that did not reach its target, ranked by
# where its curve would meet it (autospeed.predict); never logged as tta_seconds, which stays for measurements
M_TTA_PREDICTED, M_TTA_PREDICTED_LOW, M_TTA_PREDICTED_HIGH = (
    "tta_predicted_seconds", "tta_predicted_low_seconds", "tta_predicted_high_seconds")
TAG_TTA_SOURCE = "autospeed.tta_source"  # measured | predicted | none
# `autospeed train` of an exported winner with a trajectory (autospeed.train.on_track): the predicted TTA it was
# checked against, measured TTA / predicted, pace (live seconds / predicted seconds to the same metric) at each
# checkpoint, the verdict and where the prediction came from
M_PREDICTION_TTA = "prediction_tta_seconds"
M_TTA_OVER_PREDICTION = "tta_over_prediction"
M_PACE_OVER_PREDICTION = "pace_over_prediction_{percent}pct"  # 10pct, 25pct, 50pct
TAG_PREDICTION_VERDICT = "autospeed.prediction_verdict"  # on track | behind/ahead of its prediction | not reached
TAG_PREDICTION_SOURCE = "autospeed.prediction_source"  # confirmation | trial | prediction
TAG_TTA_NOTE = "autospeed.tta_note"  # what a prediction rests on, or why there is none
TTA_MEASURED, TTA_PREDICTED, TTA_NONE = "measured", "predicted", "none"
TTA_NOTE_PREDICT_OFF = "predict is off"  # the note of a trial that missed in a search without predict
M_COMPILE_SECONDS = "compile_seconds"
M_PEAK_MEMORY_MB = "peak_memory_mb"
M_OOM = "oom"  # on a probe run: 1 when it ran out of memory
M_PROBE_SECONDS = "probe_seconds"  # on the parent: wall seconds of the probe stage (its whole cost)
M_PROBE_SPEEDUP = "probe_speedup"  # on the parent: the fixed configuration's speed / the default's
M_PROBE_NOISE = "probe_noise"  # on the parent: the timing noise a non-default value had to beat
# parent
M_BEST_TTA = "best_tta_seconds"
M_BASELINE_TTA = "baseline_tta_seconds"
M_SPEEDUP = "speedup_vs_baseline"
# confirmation (docs/design.md "Confirmation runs"), on the parent run; export and report read them
M_CONFIRM_MEDIAN = "confirm_tta_seconds_median"
M_CONFIRM_MIN = "confirm_tta_seconds_min"
M_CONFIRM_MAX = "confirm_tta_seconds_max"
M_CONFIRM_REPEATS = "confirm_repeats"
M_CONFIRM_BASELINE_MEDIAN = "confirm_baseline_tta_seconds_median"
M_CONFIRM_SPEEDUP = "confirm_speedup_vs_baseline"
M_CONFIRM_SPEEDUP_CI_LOW = "confirm_speedup_ci_low"  # bootstrap 90% interval over the seeds
M_CONFIRM_SPEEDUP_CI_HIGH = "confirm_speedup_ci_high"
# predicted range of a 7-a-side re-measurement's speed-up (outcome.remeasure_interval): a prediction
M_CONFIRM_REMEASURE_LOW, M_CONFIRM_REMEASURE_HIGH = "confirm_remeasure_speedup_low", "confirm_remeasure_speedup_high"
M_CONFIRM_CONFIDENCE = "confirm_speedup_ci_confidence"  # per-look level of the interval (sequential repeats)
M_CONFIRM_WALL_MEDIAN = "confirm_wall_to_target_seconds_median"  # process start to target, fresh processes
M_CONFIRM_BASELINE_WALL_MEDIAN = "confirm_baseline_wall_to_target_seconds_median"
M_CONFIRM_WALL_SPEEDUP = "confirm_wall_speedup_vs_baseline"
TAG_ABLATION = "autospeed.ablation"  # on the parent: JSON knob -> {baseline value, medians, speed-up lost}
TAG_ABLATION_KNOB = "autospeed.ablation_knob"  # on each ablation run: the knob set back (or "none": the winner)
M_CONFIRM_TRIALS = "confirm_trials_total"  # trials the confirmation chose from (an extended search confirms again)
# confirm.baseline_tta_seconds: on the parent, where the baseline's TTA came from (measured | given) and the note
TAG_CONFIRM_BASELINE_SOURCE = "autospeed.confirm_baseline_source"
TAG_CONFIRM_BASELINE_NOTE = "autospeed.confirm_baseline_note"
BASELINE_MEASURED, BASELINE_GIVEN = "measured", "given"
# confirm.compile_cache, on the parent: the inductor cache every confirmation and ablation run compiled from, so
# which compile cost the confirmed TTAs and speed-up include: cold (a new empty folder per run, as a new machine
# pays) or warm (the machine's shared folder). A search without the tag confirmed warm (before it existed).
TAG_CONFIRM_COMPILE_CACHE = "autospeed.confirm_compile_cache"
COMPILE_CACHE_COLD, COMPILE_CACHE_WARM = "cold", "warm"
# a compiled winner confirmed, trained again the two other ways production pays its compile (search/compile_ways.py)
KIND_COMPILE_WAY, TAG_COMPILE_WAY = "compile_way", "autospeed.compile_way"  # tag: new_machine_shipped_cache, ...
# what the search cost, on the parent: confirmation runs' train clock, and the probe and trials' wall seconds,
# each also in baseline runs (/ the baseline's median TTA, measured or given)
M_CONFIRM_COMPUTE_SECONDS = "confirm_compute_seconds"
M_CONFIRM_COMPUTE_BASELINE_RUNS = "confirm_compute_baseline_runs"
M_EXPLORATION_SECONDS = "exploration_seconds"
M_EXPLORATION_BASELINE_RUNS = "exploration_baseline_runs"

DEFAULT_TRAIN_EXPERIMENT = "autospeed-train"

_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def redact(text: str) -> str:
    """Hide user:password in any URI inside text (tracking URIs may carry them)."""
    return _CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", text)


def quiet_mlflow() -> None:
    """MLflow's SQL store logs schema migrations at INFO on first use, and with a tracking server
    every ended run prints "View run ... at: <url>" on stdout (one per trial); users did not ask
    for either: the search prints the server's link to its runs once, at the end."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent", "mlflow.store.sql"):
        logging.getLogger(name).setLevel(logging.WARNING)


def resolve_tracking_uri(arg: str | None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else MLflow's own default."""
    import mlflow

    uri = arg or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return mlflow.get_tracking_uri()


def connect(uri: str):
    """An MlflowClient for uri, checked to answer before anything runs.

    A malformed URI is bad input (exit 2); an unreachable or unwritable store is
    a runtime failure (exit 1).
    """
    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    shown = redact(uri)
    if "://" not in uri and not uri.startswith(("/", ".")) and ":" in uri:
        raise UserError(f"--tracking-uri: malformed URI '{shown}'; use e.g. sqlite:///mlflow.db or http://host:5000")
    # Fail fast on a dead server in this probe only; the search itself keeps MLflow's retries,
    # so a transient HTTP error hours into a search does not end it.
    fast = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    saved = {k: os.environ.get(k) for k in fast}
    os.environ.update({k: v for k, v in fast.items() if saved[k] is None})
    try:
        with _schema_lock(uri):  # two first-time writers of one SQLite file race on creating its tables
            _create_sqlite_whole(uri)
            client = _first_contact(lambda: MlflowClient(tracking_uri=uri))
    except Exception as e:
        first = redact(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        if "unsupported" in first.lower() or "invalid" in first.lower() or "could not find" in first.lower():
            raise UserError(f"--tracking-uri: '{shown}' is not a usable MLflow tracking URI ({first[:200]}); "
                            f"use e.g. sqlite:///mlflow.db or http://host:5000") from None
        raise RunFailure(f"tracking store '{shown}' is unreachable ({first[:200]}); start the server or "
                         f"pass a reachable --tracking-uri") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
    return client


# What MLflow's SQL store raises when another process (`mlflow ui`, a client listing runs, a
# second search) creates or migrates the same SQLite store at the same moment: a race, not an
# unreachable store. alembic: "Online migration expected to match one row when updating ...".
_CREATION_RACE = re.compile(r"online migration expected|database is locked|already exists|"
                            r"no such table|alembic_version", re.IGNORECASE)
CREATION_RACE_ATTEMPTS = 6  # 6.3 s of back-off in all


def _first_contact(make_client, attempts: int = CREATION_RACE_ATTEMPTS):
    """A client that has answered one call. Creating the client opens the store, which creates or
    migrates a SQLite schema; both are retried while another process is doing the same."""
    for attempt in range(attempts):
        try:
            client = make_client()
            client.search_experiments(max_results=1)
            return client
        except Exception as e:
            if attempt == attempts - 1 or not _CREATION_RACE.search(str(e)):
                raise
            time.sleep(0.1 * 2 ** attempt)  # the other process finishes its migration meanwhile


def _create_sqlite_whole(uri: str) -> None:
    """A new SQLite store is created whole or not at all: MLflow creates and migrates its schema (seconds of
    migrations) in a temporary file beside it, which is synced and then linked into place, never over a store
    another process (`mlflow ui`) made meanwhile. A process killed during the migrations used to leave a store
    MLflow refuses ("out-of-date database schema") and that `mlflow db upgrade` cannot mend; now it leaves only
    a temporary file. Where the file system has no hard links, MLflow creates the store in place, as before.
    Called under _schema_lock."""
    from mlflow.tracking import MlflowClient

    from autospeed.yamlio import fsync_folder

    path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else None
    folder = os.path.dirname(os.path.abspath(path)) if path and path != ":memory:" and "?" not in path else None
    if folder is None or os.path.exists(path) or not os.path.isdir(folder):
        return
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        _first_contact(lambda: MlflowClient(tracking_uri=f"sqlite:///{tmp}"))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        # made by another process meanwhile: that one stands; no hard links here: MLflow creates it in place
        with contextlib.suppress(OSError):
            os.link(tmp, path)
        fsync_folder(folder)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def _schema_lock(uri: str):
    """For a SQLite store, an exclusive lock on its folder while MLflow creates or migrates the tables."""
    path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else None
    folder = os.path.dirname(os.path.abspath(path)) if path and path != ":memory:" else None
    if folder is None or not os.path.isdir(folder):
        yield
        return
    fd = os.open(folder, os.O_RDONLY)  # flock on the folder itself: no lock file left behind
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def experiment_id(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # created concurrently by another search with the same name
        return client.get_experiment_by_name(name).experiment_id


def recipe_params(recipe_fields: dict[str, Any]) -> dict[str, str]:
    """Every recipe field as an MLflow param (nested values as compact JSON)."""
    out = {}
    for key, value in recipe_fields.items():
        if key == "measured" or value is None:
            continue
        out[key] = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, tuple)) else str(value)
    return out


def metrics(values: dict[str, float | None], step: int = 0, timestamp_ms: int | None = None) -> list:
    from mlflow.entities import Metric

    ts = timestamp_ms or int(time.time() * 1000)
    return [Metric(k, float(v), ts, step) for k, v in values.items() if v is not None]


def log_batch(client, run_id: str, metric_list: Iterable = (), params: dict[str, str] | None = None,
              tags: dict[str, str] | None = None) -> None:
    """MLflow's batch call, chunked to its limits (1000 metrics, 100 params per call)."""
    from mlflow.entities import Param, RunTag

    metric_list = list(metric_list)
    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, redact(str(v))) for k, v in (tags or {}).items()]
    while metric_list or param_list or tag_list:
        client.log_batch(run_id, metrics=metric_list[:1000], params=param_list[:100], tags=tag_list[:100])
        metric_list, param_list, tag_list = metric_list[1000:], param_list[100:], tag_list[100:]


def eval_metrics(event: dict[str, Any], names: Iterable[str] | None = None) -> list:
    """The per-evaluation metrics of one evaluation (a history row or a trial's report), at its optimizer
    step: train loss, train seconds, samples/s (tokens/s and MFU where counted) and the workload's metrics (`names`,
    else the event's `metric_names`, else val_accuracy)."""
    names = list(names if names is not None else event.get(METRIC_NAMES) or [M_VAL_ACCURACY])
    return metrics({k: event[k] for k in (*EVAL_METRICS, *names) if event.get(k) is not None},
                   step=int(event["step"]))


def final_metrics(result: dict[str, Any], objective: float | None = None) -> list:
    """tta_seconds and wall_to_target_seconds (reached only), best_value and best_<metric> of every metric,
    times, memory, objective."""
    best = {k: v for k, v in result.items() if k.startswith("best_") and isinstance(v, (int, float))
            and not isinstance(v, bool)}
    values = {
        M_TTA: result.get("tta_seconds"),
        **best,
        M_WALL_SECONDS: result.get("wall_seconds"),
        M_WALL_TO_TARGET: result.get("wall_to_target_seconds"),
        M_COMPILE_SECONDS: result.get("compile_seconds"),
        M_PEAK_MEMORY_MB: result.get("peak_memory_mb"),
        M_OBJECTIVE: objective,
        # a predicted trial's (search/curve.py); absent from every other run
        M_TTA_PREDICTED: result.get(M_TTA_PREDICTED),
        M_TTA_PREDICTED_LOW: result.get(M_TTA_PREDICTED_LOW),
        M_TTA_PREDICTED_HIGH: result.get(M_TTA_PREDICTED_HIGH),
    }
    return metrics(values)


TAG_ENVIRONMENT = "autospeed.environment"  # the whole environment as JSON


def environment_tags(env: dict[str, Any]) -> dict[str, str]:
    """The environment as one JSON tag (exact) and one tag per field (for the MLflow UI's columns)."""
    tags = {f"autospeed.env.{k}": str(v) for k, v in env.items() if v is not None}
    tags[TAG_ENVIRONMENT] = json.dumps(env, sort_keys=True)
    return tags


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # as the recipe's YAML writes it
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def not_applied_marks(applied: dict[str, Any] | None) -> list[str]:
    """Each knob a run's recipe set that did not act as set (the trainer's `applied["not_applied"]`), short:
    `attention=math (n/a)` where it cannot act, `optimizer=muon (ran adamw)` where another value acted."""
    marks = []
    for knob, v in sorted(((applied or {}).get("not_applied") or {}).items()):
        ran = "n/a" if v["ran"] in ("not_applicable", False) else f"ran {_shown(v['ran'])}"
        marks.append(f"{knob}={_shown(v['asked'])} ({ran})")
    return marks


def applied_tags(applied: dict[str, Any]) -> dict[str, str]:
    """What took effect: the whole of it as one JSON tag, `autospeed.applied.<knob>` for APPLIED_COLUMNS, and
    `autospeed.applied.not_applied` (the knobs set that did not act, for the MLflow UI's columns) when any."""
    tags = {f"{TAG_APPLIED}.{k}": str(applied[k]) for k in APPLIED_COLUMNS if k in applied}
    tags[TAG_APPLIED] = json.dumps(applied, sort_keys=True)
    marks = not_applied_marks(applied)
    if marks:
        tags[f"{TAG_APPLIED}.not_applied"] = ", ".join(marks)[:500]
    return tags


def log_train_run(client, experiment: str, recipe, result, prediction: dict | None = None) -> str:
    """One `autospeed train` run: params, per-evaluation and final metrics, recipe.yaml; with `prediction` (the
    record of autospeed.train.on_track), the measured TTA against the exported prediction."""
    with interrupts_held():
        run = client.create_run(experiment_id(client, experiment), tags={TAG_KIND: KIND_TRAIN},
                                run_name=f"train-{recipe.workload.split(':')[-1]}")
        log_batch(client, run.info.run_id, params=recipe_params(recipe.training_fields()))
        if prediction is not None:
            paces = {M_PACE_OVER_PREDICTION.format(percent=round(100 * c["fraction"])): c["pace"]
                     for c in prediction["checks"] if c["pace"] != float("inf")}
            log_batch(client, run.info.run_id,
                      metrics({M_PREDICTION_TTA: prediction["predicted_tta_seconds"],
                               M_TTA_OVER_PREDICTION: prediction["tta_over_prediction"], **paces}),
                      tags={TAG_PREDICTION_VERDICT: prediction["verdict"],
                            TAG_PREDICTION_SOURCE: prediction["source"]})
        finish_run(client, run.info.run_id, recipe, result)
    return run.info.run_id


def finish_run(client, run_id: str, recipe, result) -> None:
    """End a run with its TrainResult: per-evaluation and final metrics, status and environment tags,
    recipe.yaml; FAILED for an infeasible run. Shared by `autospeed train` and confirmation runs."""
    from mlflow.entities import RunStatus

    per_eval = [m for event in result.history for m in eval_metrics(event, result.best_metrics)]
    tags = {TAG_STATUS: str(result.status), **environment_tags(result.environment), **applied_tags(result.applied),
            TAG_WALL_ORIGIN: result.wall_clock_origin}
    if result.error:
        tags[TAG_ERROR] = result.error[:500]
    with interrupts_held():
        log_batch(client, run_id, per_eval + final_metrics(result.to_dict(), result.objective), tags=tags)
        client.log_text(run_id, recipe.to_yaml(), "recipe.yaml")
        failed = is_infeasible(result.status)
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED if failed else RunStatus.FINISHED))


def mark_killed(client, run_id: str) -> None:
    """A run whose process was interrupted or died: status tag `killed`, MLflow status KILLED."""
    from mlflow.entities import RunStatus

    with interrupts_held():
        client.set_tag(run_id, TAG_STATUS, Status.KILLED.value)
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.KILLED))


@contextlib.contextmanager
def interrupts_held():
    """Hold Ctrl-C and SIGTERM while a group of tracking writes runs, and deliver them after it.

    A KeyboardInterrupt raised inside a SQLite transaction leaves the store locked for the
    rest of the process ("database is locked"), so the interrupted runs could no longer be
    marked KILLED. Only the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])  # now to the handler that was installed before
