"""Read a search back from MLflow: its parent run, its trials ranked, the speed-up (the leaderboard's text:
autospeed/show/leaderboard.py).

The MLflow store is the one source of truth for finished work: the search's
final summary, `autospeed export` and `autospeed report` all read it here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from autospeed.errors import RunFailure
from autospeed.outcome import Status
from autospeed.outcome import speedup as _ratio
from autospeed.recipe import Target, target_from
from autospeed.track import names
from autospeed.train.applied import Applied

# the note of a trial in a search without `predict` (autospeed/search/curve.py): nothing to say about it
PREDICT_OFF_NOTE = names.TTA_NOTE_PREDICT_OFF



@dataclass
class TrialRow:
    run_id: str
    trial_id: str
    kind: str
    baseline: bool
    status: str
    tta_seconds: float | None
    best_val_accuracy: float | None
    objective: float | None
    wall_seconds: float | None
    params: dict[str, str]
    start_ms: int = 0
    error: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    duplicate_of: str | None = None  # trial id of the earlier trial with the same recipe (not trained again)
    node: str | None = None  # autospeed.env.node: "host/<Ray node id>" under Ray, else the host name
    device: str | None = None  # autospeed.env.device_name: the GPU's or the CPU's name
    best_value: float | None = None  # best value of the target metric, in its direction
    applied: Applied = field(default_factory=dict)  # what took effect (the trainer's `applied`)
    # Long jobs (docs/design.md "Long jobs: predicted time to target"): where the TTA comes from, measured | predicted |
    # none (names.TTA_*); "" reads a run from before the tag: measured when it reached, else none
    tta_source: str = ""
    tta_predicted_seconds: float | None = None  # a prediction, never a measurement: tta_seconds stays None
    tta_predicted_low_seconds: float | None = None  # its 80% interval
    tta_predicted_high_seconds: float | None = None
    tta_note: str | None = None  # what the prediction rests on, or why there is none

    def __post_init__(self) -> None:
        if self.reached:  # a measurement is a measurement, whatever a tag says
            self.tta_source = names.TTA_MEASURED
        elif not self.tta_source:
            self.tta_source = names.TTA_NONE

    @property
    def predicted(self) -> bool:
        """Its TTA is a prediction (the curve extrapolated to the target), not a measurement."""
        return self.tta_source == names.TTA_PREDICTED and self.tta_predicted_seconds is not None

    @property
    def no_prediction_note(self) -> str | None:
        """Why a trial that did not reach has no prediction, under `predict` (None without predict)."""
        if self.reached or self.predicted or not self.tta_note or self.tta_note == PREDICT_OFF_NOTE:
            return None
        return self.tta_note

    @property
    def target(self) -> Target:
        """The target the run trained to, from its recipe params."""
        return target_of_params(self.params)

    @property
    def reached(self) -> bool:
        return self.status == Status.REACHED and self.tta_seconds is not None



def target_of_params(params: dict[str, str]) -> Target:
    """A run's target from its MLflow params (`target` as JSON, or the `target_accuracy` shorthand)."""
    if params.get("target"):
        return Target.model_validate(json.loads(params["target"]))
    accuracy = params.get("target_accuracy")
    return target_from(None, float(accuracy) if accuracy not in (None, "", "None") else None)


def find_parent(client, name: str, search_id: str | None = None):
    """The search's parent run: by search id, else the most recent search named `name`."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise RunFailure(f"no search named '{name}' in this tracking store; check --name and --tracking-uri")
    flt = f"tags.`{names.TAG_KIND}` = '{names.KIND_SEARCH}'"
    if search_id:
        flt += f" and tags.`{names.TAG_SEARCH_ID}` = '{search_id}'"
    runs = client.search_runs([exp.experiment_id], flt, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise RunFailure(f"experiment '{name}' holds no autospeed search run; run `autospeed search` first")
    return runs[0]


# an MLflow filter clause for `where`: a run that ended on its own (neither still RUNNING nor closed as KILLED)
ENDED = "attributes.status != 'RUNNING' and attributes.status != 'KILLED'"


def child_runs(client, parent, kind: str | None = None, tags: dict[str, str] | None = None, where: str = "") -> list:
    """Every child run of the search `parent` (paged: none left out), of one `kind` and with these `tags` values
    where given, and matching `where` (an MLflow filter clause, e.g. ENDED or "attributes.status = 'RUNNING'")."""
    clauses = [f"tags.`{names.TAG_PARENT}` = '{parent.info.run_id}'"]
    clauses += [f"tags.`{key}` = '{value}'" for key, value in ({names.TAG_KIND: kind} if kind else {}).items()]
    clauses += [f"tags.`{key}` = '{value}'" for key, value in (tags or {}).items()]
    flt = " and ".join(clauses + ([where] if where else []))
    out, token = [], None
    while True:
        page = client.search_runs([parent.info.experiment_id], flt, max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def trial_rows(client, parent, kind: str = names.KIND_TRIAL, runs: list | None = None) -> list[TrialRow]:
    """The search's child runs of one kind as rows; `runs` reuses an earlier child_runs() listing."""
    rows = []
    for run in child_runs(client, parent) if runs is None else runs:
        tags, m = run.data.tags, run.data.metrics
        if tags.get(names.TAG_KIND) != kind:
            continue
        rows.append(TrialRow(
            run_id=run.info.run_id, trial_id=tags.get(names.TAG_TRIAL_ID, ""), kind=kind,
            baseline=tags.get(names.TAG_BASELINE) == "true", status=tags.get(names.TAG_STATUS, Status.RUNNING.value),
            tta_seconds=m.get(names.M_TTA), best_val_accuracy=m.get(names.M_BEST_VAL_ACCURACY),
            objective=m.get(names.M_OBJECTIVE), wall_seconds=m.get(names.M_WALL_SECONDS),
            params=dict(run.data.params), start_ms=run.info.start_time or 0,
            error=tags.get(names.TAG_ERROR), metrics=dict(m), duplicate_of=tags.get(names.TAG_DUPLICATE_OF),
            node=tags.get(names.TAG_NODE), device=tags.get(names.TAG_DEVICE_NAME),
            # runs from before targets were general logged only best_val_accuracy
            best_value=m.get(names.M_BEST_VALUE, m.get(names.M_BEST_VAL_ACCURACY)),
            applied=json.loads(tags.get(names.TAG_APPLIED) or "{}"),
            tta_source=tags.get(names.TAG_TTA_SOURCE, ""), tta_predicted_seconds=m.get(names.M_TTA_PREDICTED),
            tta_predicted_low_seconds=m.get(names.M_TTA_PREDICTED_LOW),
            tta_predicted_high_seconds=m.get(names.M_TTA_PREDICTED_HIGH), tta_note=tags.get(names.TAG_TTA_NOTE),
        ))
    return rows


def ranked(rows: list[TrialRow]) -> list[TrialRow]:
    """Reached trials by TTA, then the rest by objective (closer to target first). A predicted trial's objective
    is its predicted TTA (capped at predict's cap, which censors the trials without a prediction above it), so it
    ranks after every measured TTA and before every censored trial.

    A trial that repeated an earlier trial's recipe (and took its result) is not ranked twice."""
    def key(r: TrialRow) -> tuple[bool, float]:
        if r.reached:
            return False, r.tta_seconds
        if r.objective is not None:
            return True, r.objective
        return True, r.tta_predicted_seconds if r.predicted else math.inf

    return sorted((r for r in rows if not r.duplicate_of), key=key)


def baseline_of(rows: list[TrialRow]) -> TrialRow | None:
    return next((r for r in rows if r.baseline), None)


def speedup(baseline: TrialRow | None, best: TrialRow | None) -> float | None:
    """The search's single-measurement speed-up of `best` over the baseline (None unless both reached)."""
    if baseline is None or best is None or not baseline.reached or not best.reached:
        return None
    return _ratio(baseline.tta_seconds, best.tta_seconds)


def predicted_speedup(baseline: TrialRow | None, row: TrialRow | None) -> float | None:
    """baseline / row TTA where either side is a prediction (its median) and the other measured or predicted;
    None otherwise (both measured: `speedup`). A predicted ratio: confirmation measures the real one."""
    if baseline is None or row is None or not (baseline.predicted or row.predicted):
        return None
    return _ratio(_tta_or_predicted(baseline), _tta_or_predicted(row))


def _tta_or_predicted(row: TrialRow) -> float | None:
    return row.tta_seconds if row.reached else row.tta_predicted_seconds if row.predicted else None


def placement(rows: list[TrialRow]) -> tuple[dict[str, int], dict[str, int]]:
    """(trials per node, trials per device) over the rows that recorded them."""
    nodes: dict[str, int] = {}
    devices: dict[str, int] = {}
    for r in rows:
        if r.node:
            nodes[r.node] = nodes.get(r.node, 0) + 1
        if r.device:
            devices[r.device] = devices.get(r.device, 0) + 1
    return nodes, devices


def summary_metrics(rows: list[TrialRow]) -> dict[str, Any]:
    order = ranked(rows)
    best = order[0] if order and order[0].reached else None
    base = baseline_of(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return {
        names.M_BEST_TTA: best.tta_seconds if best else None,
        names.M_BASELINE_TTA: base.tta_seconds if base and base.reached else None,
        names.M_SPEEDUP: speedup(base, best),
        "trials_total": len(rows),
        "trials_duplicate": sum(1 for r in rows if r.duplicate_of),
        **{f"trials_{s}": n for s, n in counts.items()},
    }
