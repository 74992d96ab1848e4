"""Read a search back from MLflow: its parent run, its trials, the leaderboard.

The MLflow store is the one source of truth for finished work: the search's
final summary, `autospeed export` and `autospeed report` all read it here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from autospeed.track import layout as t
from autospeed.errors import RunFailure
from autospeed.outcome import Status
from autospeed.outcome import speedup as _ratio
from autospeed.recipe import Target, target_from

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
        marks = {m.split("=", 1)[0]: m for m in t.not_applied_marks(self.applied)}
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
    flt = f"tags.`{t.TAG_KIND}` = '{t.KIND_SEARCH}'"
    if search_id:
        flt += f" and tags.`{t.TAG_SEARCH_ID}` = '{search_id}'"
    runs = client.search_runs([exp.experiment_id], flt, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise RunFailure(f"experiment '{name}' holds no autospeed search run; run `autospeed search` first")
    return runs[0]


def child_runs(client, parent) -> list:
    flt = f"tags.`{t.TAG_PARENT}` = '{parent.info.run_id}'"
    out, token = [], None
    while True:
        page = client.search_runs([parent.info.experiment_id], flt, max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def trial_rows(client, parent, kind: str = t.KIND_TRIAL, runs: list | None = None) -> list[TrialRow]:
    """The search's child runs of one kind as rows; `runs` reuses an earlier child_runs() listing."""
    rows = []
    for run in child_runs(client, parent) if runs is None else runs:
        tags, m = run.data.tags, run.data.metrics
        if tags.get(t.TAG_KIND) != kind:
            continue
        rows.append(TrialRow(
            run_id=run.info.run_id, trial_id=tags.get(t.TAG_TRIAL_ID, ""), kind=kind,
            baseline=tags.get(t.TAG_BASELINE) == "true", status=tags.get(t.TAG_STATUS, Status.RUNNING.value),
            tta_seconds=m.get(t.M_TTA), best_val_accuracy=m.get(t.M_BEST_VAL_ACCURACY),
            objective=m.get(t.M_OBJECTIVE), wall_seconds=m.get(t.M_WALL_SECONDS),
            params=dict(run.data.params), start_ms=run.info.start_time or 0,
            error=tags.get(t.TAG_ERROR), metrics=dict(m), duplicate_of=tags.get(t.TAG_DUPLICATE_OF),
            node=tags.get(t.TAG_NODE), device=tags.get(t.TAG_DEVICE_NAME),
            # runs from before targets were general logged only best_val_accuracy
            best_value=m.get(t.M_BEST_VALUE, m.get(t.M_BEST_VAL_ACCURACY)),
            applied=json.loads(tags.get(t.TAG_APPLIED) or "{}"),
        ))
    return rows


def ranked(rows: list[TrialRow]) -> list[TrialRow]:
    """Reached trials by TTA, then the rest by objective (closer to target first).

    A trial that repeated an earlier trial's recipe (and took its result) is not ranked twice."""
    unique = [r for r in rows if not r.duplicate_of]
    return sorted(unique, key=lambda r: (not r.reached, r.tta_seconds if r.reached else (r.objective or math.inf)))


def baseline_of(rows: list[TrialRow]) -> TrialRow | None:
    return next((r for r in rows if r.baseline), None)


def speedup(baseline: TrialRow | None, best: TrialRow | None) -> float | None:
    """The search's single-measurement speed-up of `best` over the baseline (None unless both reached)."""
    if baseline is None or best is None or not baseline.reached or not best.reached:
        return None
    return _ratio(baseline.tta_seconds, best.tta_seconds)


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
    note below) when the trials ran on more than one."""
    order = ranked(rows)
    base = baseline_of(rows)
    shown = order[:top]
    if base is not None and base not in shown:
        shown.append(base)
    nodes, devices = placement(rows)
    extra = (["node"] if len(nodes) > 1 else []) + (["device"] if len(devices) > 1 else [])
    head = "".join(f" {'node':<18}" if c == "node" else f" {'device':<24}" for c in extra)
    metric = shown[0].target.metric if shown else "value"
    lines = [f"{'#':>3}  {'trial':<14} {'status':<13} {'TTA s':>8} {('best ' + metric)[:14]:>14} {'vs base':>8}{head}  knobs"]
    for i, r in enumerate(shown, 1):
        tta = f"{r.tta_seconds:.2f}" if r.reached else "-"
        acc = f"{r.best_value:.4f}" if r.best_value is not None else "-"
        sp = speedup(base, r)
        vs = f"{sp:.2f}x" if sp else "-"
        label = "baseline" if r.baseline else r.trial_id[-14:]
        where = "".join(f" {short_node(r.node) if r.node else '-':<18}" if c == "node" else f" {(r.device or '-')[:24]:<24}"
                        for c in extra)
        lines.append(f"{order.index(r) + 1:>3}  {label:<14} {r.status:<13} {tta:>8} {acc:>14} {vs:>8}{where}  {r.knobs()}")
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
                "objective", "wall_seconds", "duplicate_of", "node", "device", *knob_names])
    order = ranked(rows)
    for i, r in enumerate(order + [r for r in rows if r.duplicate_of], 1):
        w.writerow([i if i <= len(order) else "", r.trial_id, r.run_id, r.baseline, r.status, r.tta_seconds,
                    r.best_value, r.best_val_accuracy, r.objective, r.wall_seconds, r.duplicate_of or "",
                    r.node or "", r.device or "", *[r.params.get(k, "") for k in knob_names]])
    return buf.getvalue()


def summary_metrics(rows: list[TrialRow]) -> dict[str, Any]:
    order = ranked(rows)
    best = order[0] if order and order[0].reached else None
    base = baseline_of(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return {
        t.M_BEST_TTA: best.tta_seconds if best else None,
        t.M_BASELINE_TTA: base.tta_seconds if base and base.reached else None,
        t.M_SPEEDUP: speedup(base, best),
        "trials_total": len(rows),
        "trials_duplicate": sum(1 for r in rows if r.duplicate_of),
        **{f"trials_{s}": n for s, n in counts.items()},
    }
