"""The report's page: one self-contained report.html (figures embedded as data URIs: no network
needed to view it)."""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

from autospeed.show.leaderboard import knobs_text, placement_note, short_node, speedup_text, tta_cell, tta_text
from autospeed.show.report.data import SearchData
from autospeed.show.report.figures import STATUS_COLOURS
from autospeed.track import names
from autospeed.track import runs as res

_CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
.cards{display:flex;gap:1em;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em}
.card b{display:block;font-size:1.4em}table{border-collapse:collapse;font-size:.85em}
td,th{border-bottom:1px solid #eee;padding:.25em .6em;text-align:left}figure{margin:1em 0}
img{max-width:100%}figcaption{color:#555;font-size:.9em}.note{color:#8a6d00}.muted{color:#666}"""


def _fmt(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.2f}{unit}"


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(d: SearchData, figures: dict[str, tuple[Path, str]]) -> str:
    e = html.escape
    summary = res.summary_metrics(d.rows)
    m = d.parent.data.metrics
    winner = d.winner
    counts = ", ".join(f"{k.removeprefix('trials_')} {v}" for k, v in summary.items()
                       if k.startswith("trials_") and k != "trials_total")
    cards = [("best TTA (search, 1 run)", _fmt(summary[names.M_BEST_TTA], " s")),
             ("baseline TTA (1 run)", _fmt(summary[names.M_BASELINE_TTA], " s")),
             ("speed-up (search)", _fmt(summary[names.M_SPEEDUP], "x")),
             ("trials", f"{summary['trials_total']}")]
    if d.predicted:  # predictions get cards of their own, named so: never in a measured card
        first = next(r for r in res.ranked(d.rows) if r.predicted)
        if summary[names.M_BEST_TTA] is None:
            cards.insert(1, ("best TTA (predicted)", tta_text(first)))
        if d.baseline is not None and d.baseline.predicted:
            cards.insert(-1, ("baseline TTA (predicted)", tta_text(d.baseline)))
        top = res.ranked(d.rows)[0]
        if res.predicted_speedup(d.baseline, top):
            cards.insert(-1, ("speed-up (search, predicted)", speedup_text(d.baseline, top)))
    if names.M_CONFIRM_MEDIAN in m:
        low, high = m.get(names.M_CONFIRM_SPEEDUP_CI_LOW), m.get(names.M_CONFIRM_SPEEDUP_CI_HIGH)
        interval = (f"{low:.2f}x to {high:.2f}x" if low is not None and high is not None else
                    "too few repeats for an interval" if m.get(names.M_CONFIRM_REPEATS, 0) < 3 else "none")
        cards += [("confirmed median TTA", _fmt(m.get(names.M_CONFIRM_MEDIAN), " s")),
                  ("confirmed speed-up (train clock)", _fmt(m.get(names.M_CONFIRM_SPEEDUP), "x")),
                  ("its 90% interval", interval),
                  ("speed-up on the wall to target", _fmt(m.get(names.M_CONFIRM_WALL_SPEEDUP), "x"))]
    env = d.environment
    where = ", ".join(f"{k} {env[k]}" for k in ("device_name", "cpu_count", "torch", "cuda", "autospeed") if k in env)
    placement = placement_note(d.rows)
    if placement:
        where += " (the best trial's)"
    nodes, devices = res.placement(d.rows)
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>autospeed report: {e(d.name)}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>autospeed report: {e(d.name)}</h1>",
           f"<p class='muted'>search {e(d.search_id)} &middot; parent run {e(d.parent.info.run_id)} &middot; "
           f"target {e(d.target_metric)} {'&ge;' if d.target_mode == 'max' else '&le;'} {e(str(d.target))} &middot; "
           f"budget {e(str(d.max_train_seconds))} s per trial &middot; "
           f"generated {e(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>",
           f"<p class='muted'>TTA = train-clock seconds to the first evaluation that meets the target "
           f"(evaluation off the clock). Measured on: {e(where or 'unknown')}.</p>",
           *([f"<p class='note' id='predicted'>~ marks a predicted TTA, not a measurement: where a trial's "
              f"evaluation curve, extrapolated, meets the target, with its 80% interval in brackets "
              f"(e.g. {e(tta_text(next(r for r in res.ranked(d.rows) if r.predicted)))}); a speed-up with a "
              f"predicted side is predicted too. Confirmation measures the winner.</p>"] if d.predicted else []),
           *([f"<p class='note' id='placement'>Note: {e(placement)}.</p>"] if placement else []),
           "<div class='cards'>" + "".join(f"<div class='card'>{e(k)}<b>{e(v)}</b></div>" for k, v in cards)
           + "</div>",
           f"<p>Trial outcomes: {e(counts or 'none')}.</p>"]
    if winner is not None:
        out.append(f"<p>Winner: <b>{e(d.label(winner))} (trial {e(winner.trial_id)})</b> with "
                   f"{e(knobs_text(winner))}.</p>")
    elif d.predicted:
        best = next(r for r in res.ranked(d.rows) if r.predicted)
        out.append(f"<p class='note'>No trial reached the target within its budget. Best predicted: "
                   f"<b>{e(d.label(best))} (trial {e(best.trial_id)})</b>, TTA {e(tta_text(best))} (predicted), "
                   + (f"{e(sp)} over the baseline, " if (sp := speedup_text(d.baseline, best, long=True)) != "-"
                      else "no speed-up (the baseline has no TTA), ") + f"with "
                   f"{e(knobs_text(best))}.</p>")
    else:
        out.append("<p class='note'>No trial reached the target: raise budget.max_train_seconds or loosen "
                   "the target and search again.</p>")
    if d.confirmed:
        out.append("<h2>Confirmation runs</h2><table><tr><th>recipe</th><th>median TTA s</th><th>min</th>"
                   "<th>max</th><th>reached</th><th>vs baseline median</th></tr>")
        base = next((c for c in d.confirmed if c.baseline), None)
        for c in d.confirmed:
            vs = base.median / c.median if base and base.median and c.median else None
            out.append(f"<tr><td>{e(c.label)}</td><td>{_fmt(c.median)}</td>"
                       f"<td>{_fmt(min(c.reached) if c.reached else None)}</td>"
                       f"<td>{_fmt(max(c.reached) if c.reached else None)}</td>"
                       f"<td>{len(c.reached)}/{len(c.ttas)}</td><td>{_fmt(vs, 'x')}</td></tr>")
        out.append("</table>")
    for key, (path, caption) in figures.items():
        out.append(f"<h2>{e(caption.split(':')[0])}</h2><figure><img id='fig-{e(key)}' alt='{e(key)}' "
                   f"src='{_data_uri(path)}'><figcaption>{e(caption)}</figcaption></figure>")
    out.append("<h2>Leaderboard</h2><table><tr><th>#</th><th>MLflow run</th><th>trial id</th><th>status</th>"
               f"<th>TTA</th><th>best {e(d.target_metric)}</th><th>vs baseline</th>"
               + ("<th>node</th>" if len(nodes) > 1 else "") + ("<th>device</th>" if len(devices) > 1 else "")
               + "<th>knobs</th></tr>")
    base_row = d.baseline
    for i, r in enumerate(res.ranked(d.rows), 1):
        out.append(f"<tr><td>{i}</td><td>{e(d.label(r))}</td><td>{e(r.trial_id)}</td>"
                   f"<td style='color:{STATUS_COLOURS.get(r.status, '#777')}'>{e(r.status)}</td>"
                   f"<td>{e(tta_cell(r))}</td>"
                   f"<td>{'-' if r.best_value is None else f'{r.best_value:.4f}'}</td>"
                   f"<td>{e(speedup_text(base_row, r))}</td>"
                   + (f"<td>{e(short_node(r.node) if r.node else '-')}</td>" if len(nodes) > 1 else "")
                   + (f"<td>{e(r.device or '-')}</td>" if len(devices) > 1 else "")
                   + f"<td>{e(knobs_text(r))}</td></tr>")
    out.append("</table>")
    for note in d.notes:
        out.append(f"<p class='note'>Note: {e(note)}</p>")
    out.append("</body></html>")
    return "\n".join(out)


