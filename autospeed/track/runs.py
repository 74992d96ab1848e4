"""Read a search back from MLflow: its parent run, its trials, the leaderboard.

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
from autospeed.predict import format_predicted
from autospeed.recipe import Target, target_from
from autospeed.track import names, writers

# the note of a trial in a search without `predict` (autospeed/search/curve.py): nothing to say about it
PREDICT_OFF_NOTE = names.TTA_NOTE_PREDICT_OFF

KEY_KNOBS = ("batch_size", "accumulation_steps", "workers", "lr", "schedule", "precision", "compile", "optimizer")


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
    applied: dict[str, Any] = field(default_factory=dict)  # what took effect (the trainer's `applied`)
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

    def knobs(self) -> str:
        """The key knobs; `workers` (the devices a TTA used) only for a data-parallel trial. A knob set that
        did not act is marked, `optimizer=muon (ran adamw)` in place or `attention=math (n/a)` after them."""
        marks = {m.split("=", 1)[0]: m for m in writers.not_applied_marks(self.applied)}
        shown = [marks.pop(k, f"{k}={_short(self.params[k])}") for k in KEY_KNOBS
                 if k in self.params and not (k == "workers" and self.params[k] == "1")]
        return " ".join(shown + list(marks.values()))


def target_of_params(params: dict[str, str]) -> Target:
    """A run's target from its MLflow params (`target` as JSON, or the `target_accuracy` shorthand)."""
    if params.get("target"):
        return Target.model_validate(json.loads(params["target"]))
    accuracy = params.get("target_accuracy")
    return target_from(None, float(accuracy) if accuracy not in (None, "", "None") else None)


def _short(value: str) -> str:
    try:
        f = float(value)
    except ValueError:
        return value
    return f"{f:.3g}" if not value.isdigit() and math.isfinite(f) else value


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


def speedup_text(baseline: TrialRow | None, row: TrialRow | None, long: bool = False) -> str:
    """A speed-up over the baseline as shown: measured `3.12x`, predicted `~3.1x` (long: `~3.1x (predicted;
    confirmation measures it)`), else `-`."""
    measured = speedup(baseline, row)
    if measured:
        return f"{measured:.2f}x"
    guess = predicted_speedup(baseline, row)
    if guess:
        return f"~{guess:.1f}x" + (" (predicted; confirmation measures it)" if long else "")
    return "-"


def tta_text(row: TrialRow) -> str:
    """What a TTA cell shows: measured `12.30 s`, predicted `~412 s [300-560]` (the ~ and the 80% interval mark
    a prediction: autospeed.predict.format_predicted), else `-`."""
    if row.reached:
        return f"{row.tta_seconds:.2f} s"
    if row.predicted:
        return format_predicted(row.tta_predicted_seconds, row.tta_predicted_low_seconds,
                                row.tta_predicted_high_seconds)
    return "-"


def predicted_text(row: TrialRow) -> str | None:
    """A trial that did not reach, as the live view shows it (Prediction.describe()'s form): `~412 s [300-560]`,
    or `no prediction (flat: ...)` when the run says why; None for a reached trial and for runs without either."""
    if row.reached:
        return None
    if row.predicted:
        return tta_text(row)
    return f"no prediction ({row.no_prediction_note})" if row.no_prediction_note else None


def tta_cell(row: TrialRow) -> str:
    """tta_text, and for a trial without a prediction its reason, short: `no prediction (flat)`."""
    note = row.no_prediction_note
    return f"no prediction ({note.split(':')[0].split(' (')[0].strip()})" if note else tta_text(row)


def short_node(node: str) -> str:
    """`host/<first 8 hex of the Ray node id>`: enough to tell a cluster's nodes apart in a table."""
    host, _, node_id = node.partition("/")
    return f"{host}/{node_id[:8]}" if node_id else host


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


def placement_note(rows: list[TrialRow]) -> str | None:
    """One sentence when the trials ran on more than one node or device (so their TTAs were not
    all measured on one machine), else None."""
    nodes, devices = placement(rows)
    parts = []
    if len(devices) > 1:
        parts.append(f"{len(devices)} devices (" + ", ".join(f"{d}: {n} trials" for d, n in sorted(devices.items()))
                     + ")")
    if len(nodes) > 1:
        parts.append(f"{len(nodes)} nodes (" + ", ".join(f"{short_node(k)}: {n} trials"
                                                       for k, n in sorted(nodes.items())) + ")")
    if not parts:
        return None
    return (f"trials ran on {' and on '.join(parts)}; TTAs measured on different nodes or devices compare only "
            f"as far as those are alike")


def format_leaderboard(rows: list[TrialRow], top: int = 10) -> str:
    """A plain-text table of the top trials and the baseline; a node and a device column (and a
    note below) when the trials ran on more than one. A predicted TTA shows as one (`~412 s [300-560]`),
    a speed-up with a predicted side as `~3.1x`, and a note below says what ~ means."""
    order = ranked(rows)
    base = baseline_of(rows)
    shown = order[:top]
    if base is not None and base not in shown:
        shown.append(base)
    nodes, devices = placement(rows)
    extra = (["node"] if len(nodes) > 1 else []) + (["device"] if len(devices) > 1 else [])
    head = "".join(f" {'node':<18}" if c == "node" else f" {'device':<24}" for c in extra)
    metric = shown[0].target.metric if shown else "value"
    ttas = {r.run_id: tta_cell(r) for r in shown}
    width = max([8, *(len(x) for x in ttas.values())])
    lines = [f"{'#':>3}  {'trial':<14} {'status':<13}  {'TTA':>{width}} {('best ' + metric)[:14]:>14} {'vs base':>8}"
             f"{head}  knobs"]
    for r in shown:
        acc = f"{r.best_value:.4f}" if r.best_value is not None else "-"
        vs = speedup_text(base, r)
        label = "baseline" if r.baseline else r.trial_id[-14:]
        where = "".join(f" {short_node(r.node) if r.node else '-':<18}" if c == "node"
                        else f" {(r.device or '-')[:24]:<24}" for c in extra)
        lines.append(f"{order.index(r) + 1:>3}  {label:<14} {r.status:<13}  {ttas[r.run_id]:>{width}} {acc:>14} "
                     f"{vs:>8}{where}  {r.knobs()}")
    if any(r.predicted for r in shown):
        lines.append("note: ~ marks a predicted TTA, not a measurement: where the trial's evaluation curve, "
                     "extrapolated, meets the target, with its 80% interval in brackets; a speed-up with a predicted "
                     "side (~) is predicted too")
        best = order[0]
        if predicted_speedup(base, best):
            who = "baseline" if best.baseline else best.trial_id
            lines.append(f"note: search speed-up of the best ({who}) over the baseline: "
                         f"{speedup_text(base, best, long=True)}")
    note = placement_note(rows)
    if note:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def leaderboard_csv(rows: list[TrialRow]) -> str:
    import csv
    import io

    buf = io.StringIO()
    knob_names = sorted({k for r in rows for k in r.params})
    w = csv.writer(buf)
    w.writerow(["rank", "trial_id", "run_id", "baseline", "status", "tta_seconds", "best_value", "best_val_accuracy",
                "objective", "wall_seconds", "duplicate_of", "node", "device", "tta_source", "tta_predicted_seconds",
                "tta_predicted_low_seconds", "tta_predicted_high_seconds", "tta_note", *knob_names])
    order = ranked(rows)
    for i, r in enumerate(order + [r for r in rows if r.duplicate_of], 1):
        w.writerow([i if i <= len(order) else "", r.trial_id, r.run_id, r.baseline, r.status, r.tta_seconds,
                    r.best_value, r.best_val_accuracy, r.objective, r.wall_seconds, r.duplicate_of or "",
                    r.node or "", r.device or "", r.tta_source, r.tta_predicted_seconds, r.tta_predicted_low_seconds,
                    r.tta_predicted_high_seconds, r.tta_note or "", *[r.params.get(k, "") for k in knob_names]])
    return buf.getvalue()


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
