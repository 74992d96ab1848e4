"""What a run logs to MLflow (docs/design.md "Tracking layout"): params from a recipe, per-evaluation and final
metrics, the environment and `applied` tags, in batches chunked to MLflow's limits; an `autospeed train` run
whole, a run ended with its result, a run marked killed. The names are names.py's; the store, store.py's.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from autospeed.outcome import Status, is_infeasible
from autospeed.track import names
from autospeed.track.store import experiment_id, interrupts_held, redact
from autospeed.train.applied import NOT_ACTED, Applied


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


def eval_metrics(event: dict[str, Any], metric_names: Iterable[str] | None = None) -> list:
    """The per-evaluation metrics of one evaluation (a history row or a trial's report), at its optimizer
    step: train loss, train seconds, samples/s (tokens/s and MFU where counted) and the workload's metrics
    (`metric_names`, else the event's `metric_names`, else val_accuracy)."""
    reported = list(metric_names if metric_names is not None
                    else event.get(names.METRIC_NAMES) or [names.M_VAL_ACCURACY])
    cooldown = [k for k in event if k.startswith(names.M_COOLDOWN_PREFIX) and k != names.M_COOLDOWN_TOTAL_SECONDS]
    return metrics({k: event[k] for k in (*names.EVAL_METRICS, *reported, *cooldown) if event.get(k) is not None},
                   step=int(event["step"]))


def final_metrics(result: dict[str, Any], objective: float | None = None) -> list:
    """tta_seconds and wall_to_target_seconds (reached only), best_value and best_<metric> of every metric,
    times, memory, objective."""
    best = {k: v for k, v in result.items() if k.startswith("best_") and isinstance(v, (int, float))
            and not isinstance(v, bool)}
    values = {
        names.M_TTA: result.get("tta_seconds"),
        **best,
        names.M_WALL_SECONDS: result.get("wall_seconds"),
        names.M_WALL_TO_TARGET: result.get("wall_to_target_seconds"),
        names.M_COMPILE_SECONDS: result.get("compile_seconds"),
        names.M_PEAK_MEMORY_MB: result.get("peak_memory_mb"),
        names.M_OBJECTIVE: objective,
        names.M_COOLDOWN_TOTAL_SECONDS: result.get(names.M_COOLDOWN_TOTAL_SECONDS) or None,  # only where it branched
        # a predicted trial's (search/curve.py); absent from every other run
        names.M_TTA_PREDICTED: result.get(names.M_TTA_PREDICTED),
        names.M_TTA_PREDICTED_LOW: result.get(names.M_TTA_PREDICTED_LOW),
        names.M_TTA_PREDICTED_HIGH: result.get(names.M_TTA_PREDICTED_HIGH),
    }
    return metrics(values)



def environment_tags(env: dict[str, Any]) -> dict[str, str]:
    """The environment as one JSON tag (exact) and one tag per field (for the MLflow UI's columns)."""
    tags = {f"autospeed.env.{k}": str(v) for k, v in env.items() if v is not None}
    tags[names.TAG_ENVIRONMENT] = json.dumps(env, sort_keys=True)
    return tags


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # as the recipe's YAML writes it
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def not_applied_marks(applied: Applied | None) -> list[str]:
    """Each knob a run's recipe set that did not act as set (the trainer's `applied["not_applied"]`), short:
    `attention=math (n/a)` where it cannot act, `optimizer=muon (ran adamw)` where another value acted."""
    marks = []
    for knob, v in sorted(((applied or {}).get("not_applied") or {}).items()):
        ran = "n/a" if v["ran"] in NOT_ACTED else f"ran {_shown(v['ran'])}"
        marks.append(f"{knob}={_shown(v['asked'])} ({ran})")
    return marks


def applied_tags(applied: Applied) -> dict[str, str]:
    """What took effect: the whole of it as one JSON tag, `autospeed.applied.<knob>` for APPLIED_COLUMNS, and
    `autospeed.applied.not_applied` (the knobs set that did not act, for the MLflow UI's columns) when any."""
    tags = {f"{names.TAG_APPLIED}.{k}": str(applied[k]) for k in names.APPLIED_COLUMNS if k in applied}
    tags[names.TAG_APPLIED] = json.dumps(applied, sort_keys=True)
    marks = not_applied_marks(applied)
    if marks:
        tags[f"{names.TAG_APPLIED}.not_applied"] = ", ".join(marks)[:500]
    return tags


def log_train_run(client, experiment: str, recipe, result, prediction: dict | None = None) -> str:
    """One `autospeed train` run: params, per-evaluation and final metrics, recipe.yaml; with `prediction` (the
    record of autospeed.train.on_track), the measured TTA against the exported prediction."""
    with interrupts_held():
        run = client.create_run(experiment_id(client, experiment), tags={names.TAG_KIND: names.KIND_TRAIN},
                                run_name=f"train-{recipe.workload.split(':')[-1]}")
        log_batch(client, run.info.run_id, params=recipe_params(recipe.training_fields()))
        if prediction is not None:
            paces = {names.M_PACE_OVER_PREDICTION.format(percent=round(100 * c["fraction"])): c["pace"]
                     for c in prediction["checks"] if c["pace"] != float("inf")}
            log_batch(client, run.info.run_id,
                      metrics({names.M_PREDICTION_TTA: prediction["predicted_tta_seconds"],
                               names.M_TTA_OVER_PREDICTION: prediction["tta_over_prediction"],
                               names.M_SAMPLES_OVER_PREDICTION: prediction.get("samples_over_prediction"),
                               names.M_THROUGHPUT_OVER_PREDICTION: prediction.get("throughput_over_prediction"),
                               **paces}),
                      tags={names.TAG_PREDICTION_VERDICT: prediction["verdict"],
                            names.TAG_PREDICTION_SOURCE: prediction["source"]})
        finish_run(client, run.info.run_id, recipe, result)
    return run.info.run_id


def finish_run(client, run_id: str, recipe, result) -> None:
    """End a run with its TrainResult: per-evaluation and final metrics, status and environment tags,
    recipe.yaml; FAILED for an infeasible run. Shared by `autospeed train` and confirmation runs."""
    from mlflow.entities import RunStatus

    per_eval = [m for event in result.history for m in eval_metrics(event, result.best_metrics)]
    tags = {names.TAG_STATUS: str(result.status), **environment_tags(result.environment),
            **applied_tags(result.applied), names.TAG_WALL_ORIGIN: result.wall_clock_origin}
    if result.error:
        tags[names.TAG_ERROR] = result.error[:500]
    with interrupts_held():
        log_batch(client, run_id, per_eval + final_metrics(result.to_dict(), result.objective), tags=tags)
        client.log_text(run_id, recipe.to_yaml(), "recipe.yaml")
        failed = is_infeasible(result.status)
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED if failed else RunStatus.FINISHED))


def mark_killed(client, run_id: str) -> None:
    """A run whose process was interrupted or died: status tag `killed`, MLflow status KILLED."""
    from mlflow.entities import RunStatus

    with interrupts_held():
        client.set_tag(run_id, names.TAG_STATUS, Status.KILLED.value)
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.KILLED))
