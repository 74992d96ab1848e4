"""The leaderboard as people read it: a search's trials ranked in a plain-text table (the search's end, `autospeed
report`), as CSV (the parent run's leaderboard.csv), and the cells the live view and the report share: a TTA
measured or predicted (`~412 s [300-560]`), a speed-up (`~3.1x` with a predicted side), a trial's knobs with
those that did not act marked, where the trials ran. The rows and their ranking: autospeed/track/runs.py."""

from __future__ import annotations

import math

from autospeed.predict import format_predicted
from autospeed.track.runs import TrialRow, baseline_of, placement, predicted_speedup, ranked, speedup
from autospeed.track.writers import not_applied_marks

KEY_KNOBS = ("batch_size", "accumulation_steps", "workers", "lr", "schedule", "precision", "compile", "optimizer")


def knobs_text(row: TrialRow) -> str:
    """The key knobs; `workers` (the devices a TTA used) only for a data-parallel trial. A knob set that
    did not act is marked, `optimizer=muon (ran adamw)` in place or `attention=math (n/a)` after them."""
    marks = {m.split("=", 1)[0]: m for m in not_applied_marks(row.applied)}
    shown = [marks.pop(k, f"{k}={_short(row.params[k])}") for k in KEY_KNOBS
             if k in row.params and not (k == "workers" and row.params[k] == "1")]
    return " ".join(shown + list(marks.values()))


def _short(value: str) -> str:
    try:
        f = float(value)
    except ValueError:
        return value
    return f"{f:.3g}" if not value.isdigit() and math.isfinite(f) else value


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


def table(rows: list[TrialRow], top: int = 10) -> str:
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
                     f"{vs:>8}{where}  {knobs_text(r)}")
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


def to_csv(rows: list[TrialRow]) -> str:
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
