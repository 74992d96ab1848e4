"""`autospeed report`: the pictures people judge a speed search by.

Reads one search back from MLflow (and its Optuna study from the storage path),
draws PNG figures with matplotlib's Agg backend, writes a self-contained
`report.html` (figures embedded as data URIs: no network needed to view it), and
logs both under the search's parent run as artifacts in `report/`.

Figures:
    curves.png      the target metric against train seconds, every trial; target, baseline, winner
    tta.png         TTA per trial, sorted, coloured by status, baseline marked
    tradeoff.png    TTA (or train seconds used) against the best value of the target metric
    importance.png  Optuna's parameter importances over the search's study
    confirm.png     confirmation medians with min and max (when confirmation ran)
    probe.png       steady-state samples/s per systems configuration and batch size, OOMs marked
                    (when the probe stage ran)
"""

from __future__ import annotations

import base64
import html
import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autospeed import runs as res
from autospeed import tracking as t
from autospeed.outcome import Status
from autospeed.recipe import ACCURACY, Target, target_from
from autospeed.yamlio import atomic_path, write_atomic

REPORT_ARTIFACT_DIR = "report"
STATUS_COLOURS = {
    Status.REACHED: "#2e7d32", Status.NOT_REACHED: "#f9a825", Status.STOPPED_EARLY: "#9e9e9e", Status.OOM: "#c62828",
    Status.DIVERGED: "#ad1457", Status.FAILED: "#b71c1c", Status.KILLED: "#6a1b9a", Status.RUNNING: "#1565c0",
}
BASELINE_COLOUR, WINNER_COLOUR = "#000000", "#1565c0"


# ------------------------------------------------------------------ data
@dataclass
class Curve:
    train_seconds: list[float]
    values: list[float]  # of the search's target metric


@dataclass
class Confirmed:
    """One recipe's confirmation runs: TTAs in train-clock seconds, None where the target was missed."""

    label: str
    baseline: bool
    ttas: list[float | None]

    @property
    def reached(self) -> list[float]:
        return [x for x in self.ttas if x is not None]

    @property
    def median(self) -> float | None:  # a miss counts as infinitely slow, as in autospeed.confirm
        m = statistics.median([x if x is not None else math.inf for x in self.ttas]) if self.ttas else math.inf
        return m if math.isfinite(m) else None


@dataclass
class ProbeRow:
    """One probe run: a systems configuration at one batch size."""

    config: str  # its systems knobs, "k=v k=v"
    batch_size: int
    samples_per_second: float | None
    oom: bool


def probe_rows(children: list) -> list[ProbeRow]:
    rows = []
    for run in children:
        if run.data.tags.get(t.TAG_KIND) != t.KIND_PROBE:
            continue
        params = run.data.params
        config = " ".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "batch_size") or "baseline"
        rows.append(ProbeRow(config, int(params.get("batch_size", 0)), run.data.metrics.get(t.M_SAMPLES_PER_SECOND),
                             run.data.metrics.get(t.M_OOM) == 1.0))
    return sorted(rows, key=lambda r: (r.config, r.batch_size))


@dataclass
class SearchData:
    name: str
    search_id: str
    parent: Any
    rows: list[res.TrialRow]
    curves: dict[str, Curve]
    confirmed: list[Confirmed]
    target: float | None  # the target metric's value that counts as trained
    max_train_seconds: float | None
    importances: dict[str, float] | None
    environment: dict[str, str]
    run_names: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    target_metric: str = ACCURACY
    target_mode: str = "max"
    probes: list[ProbeRow] = field(default_factory=list)
    probe_fixed: str | None = None  # what the probe fixed (the parent's tag, JSON)

    @property
    def metric_label(self) -> str:
        """The target metric as an axis reads it, with its direction."""
        if self.target_metric == ACCURACY:
            return "validation accuracy"
        return f"{self.target_metric} ({'lower' if self.target_mode == 'min' else 'higher'} is better)"

    def label(self, row: res.TrialRow) -> str:
        """The trial's MLflow run name (what the MLflow UI lists), else its short trial id."""
        return self.run_names.get(row.run_id) or ("baseline" if row.baseline else row.trial_id.rsplit("_", 1)[-1])

    @property
    def winner(self) -> res.TrialRow | None:
        order = res.ranked(self.rows)
        return order[0] if order and order[0].reached else None

    @property
    def baseline(self) -> res.TrialRow | None:
        return res.baseline_of(self.rows)




def _last_attempt(history: list) -> list:
    """The metric values of a run's last attempt. A trial resumed after its search was
    killed trains again from the start in the same MLflow run (MLflow cannot delete
    metrics), so its history holds the killed attempt too: steps go back to the start
    where the new attempt begins."""
    ms = sorted(history, key=lambda m: (m.timestamp, m.step))
    start = 0
    for i in range(1, len(ms)):
        if ms[i].step <= ms[i - 1].step:
            start = i
    return ms[start:]


def curve(client, run_id: str, metric: str = ACCURACY) -> Curve:
    """`metric` against train_seconds, aligned by step (both are logged at each evaluation's
    step), of the run's last attempt."""
    acc = {m.step: m.value for m in _last_attempt(client.get_metric_history(run_id, metric))}
    secs = {m.step: m.value for m in _last_attempt(client.get_metric_history(run_id, t.M_TRAIN_SECONDS))}
    steps = sorted(set(acc) & set(secs))
    return Curve([secs[s] for s in steps], [acc[s] for s in steps])


def experiment_dir(parent, storage_path: str | None, name: str, search_id: str) -> Path:
    """Where the search kept its Ray experiment and optuna.db: as recorded on the parent run,
    unless --storage-path says otherwise (a store moved since)."""
    from autospeed.search import search_root

    recorded = parent.data.tags.get(t.TAG_EXPERIMENT_DIR)
    if recorded and storage_path is None:
        return Path(recorded)
    return search_root(storage_path, name) / search_id


def importances(path: Path, study_name: str) -> tuple[dict[str, float] | None, str | None]:
    """(Optuna's parameter importances for the objective, None) or (None, why not)."""
    if not path.exists():
        return None, (f"Optuna study not found at {path}; parameter importances are left out "
                      f"(pass --storage-path where the search ran)")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{path}")
        # PED-ANOVA, not fANOVA: fANOVA only weighs knobs every trial has, and the baseline trial
        # and conditional knobs (`when:`) leave that set empty.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            imp = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except Exception as e:  # too few complete trials, a single-valued space, another study name
        return None, f"parameter importances unavailable ({str(e).splitlines()[0][:200]})"
    if not imp:
        return None, "parameter importances unavailable (no knob varied across the study's complete trials)"
    few = any("less than 2 trials" in str(w.message) for w in caught)
    return dict(imp), ("parameter importances rest on few trials per value range; read them as a hint" if few else None)


def _search_target(rows: list[res.TrialRow], parent) -> Target:
    """The search's target: from its trials' recipe params, else the parent's (space file) params."""
    for r in rows:
        if r.params.get("target") or r.params.get("target_accuracy"):
            return r.target
    p = parent.data.params
    if p.get("target.metric"):
        return Target(metric=p["target.metric"], mode=p["target.mode"], value=float(p["target.value"]))
    accuracy = p.get("target_accuracy")
    return target_from(None, float(accuracy) if accuracy not in (None, "", "None") else None)


def _float_param(rows: list[res.TrialRow], parent, key: str, parent_key: str) -> float | None:
    for value in [parent.data.params.get(parent_key), *(r.params.get(key) for r in rows)]:
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None


def collect(client, name: str, storage_path: str | None = None) -> SearchData:
    parent = res.find_parent(client, name)
    search_id = parent.data.tags.get(t.TAG_SEARCH_ID, "")
    children = res.child_runs(client, parent)
    rows = res.trial_rows(client, parent, runs=children)
    names = {run.info.run_id: run.info.run_name for run in children}
    target = _search_target(rows, parent)
    curves = {r.run_id: curve(client, r.run_id, target.metric) for r in rows}
    by_recipe: dict[tuple[str, bool], list[float | None]] = {}
    # An extended search confirmed again: only the latest confirmation's runs count.
    latest = parent.data.metrics.get(t.M_CONFIRM_TRIALS)
    confirms = [run for run in children if latest is None
                or run.data.tags.get(t.TAG_CONFIRM_TRIALS) == str(int(latest))]
    base = res.baseline_of(rows)  # its trial is its first confirmation sample when confirm.py carried it
    if base is not None and parent.data.tags.get(t.TAG_CONFIRM_CARRIED) == base.trial_id:
        by_recipe[(base.trial_id, True)] = [base.tta_seconds if base.reached else None]
    for r in res.trial_rows(client, parent, kind=t.KIND_CONFIRM, runs=confirms):
        by_recipe.setdefault((r.trial_id, r.baseline), []).append(r.tta_seconds if r.reached else None)
    trial_names = {r.trial_id: names.get(r.run_id) for r in rows}  # the UI names confirm runs by trial id
    confirmed = [Confirmed("baseline" if b else f"{trial_names.get(tid) or 'trial'} ({tid})", b, ttas)
                 for (tid, b), ttas in by_recipe.items()]
    confirmed.sort(key=lambda c: c.median if c.median is not None else math.inf)
    imp, why = importances(experiment_dir(parent, storage_path, name, search_id) / "optuna.db", name)
    env: dict[str, str] = {}
    tags = {run.info.run_id: run.data.tags for run in children}
    for r in res.ranked(rows):  # the environment of the best trial that recorded one
        run_tags = tags[r.run_id]
        env = {k.removeprefix("autospeed.env."): v for k, v in run_tags.items() if k.startswith("autospeed.env.")}
        if env:
            break
    return SearchData(
        name=name, search_id=search_id, parent=parent, rows=rows, curves=curves, confirmed=confirmed,
        target=target.value, target_metric=target.metric, target_mode=target.mode,
        max_train_seconds=_float_param(rows, parent, "max_train_seconds", "budget.max_train_seconds"),
        importances=imp, environment=env, run_names=names, notes=[why] if why else [],
        probes=probe_rows(children), probe_fixed=parent.data.tags.get(t.TAG_PROBE_FIXED))


# ------------------------------------------------------------------ figures
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    finally:
        _pyplot().close(fig)
    return path


def plot_curves(d: SearchData, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    winner, base = d.winner, d.baseline
    for r in d.rows:
        c = d.curves.get(r.run_id)
        if not c or not c.train_seconds or r in (winner, base):
            continue
        ax.plot(c.train_seconds, c.values, color=STATUS_COLOURS.get(r.status, "#777"), alpha=0.55, lw=1,
                marker="o", ms=3)
    for r, colour, text in ((base, BASELINE_COLOUR, "baseline"), (winner, WINNER_COLOUR, "winner")):
        c = d.curves.get(r.run_id) if r is not None else None
        if c and c.train_seconds:
            tta = f", TTA {r.tta_seconds:.2f} s" if r.reached else f", {r.status}"
            who = "" if r.baseline else f"{d.label(r)}, "
            ax.plot(c.train_seconds, c.values, color=colour, lw=2.4, ls="--" if r.baseline else "-",
                    marker="o", ms=4, label=f"{text} ({who}{tta.removeprefix(', ')})", zorder=5)
            if r.reached:
                ax.plot([r.tta_seconds], [d.target], marker="o", color=colour, ms=8, zorder=6)
    if d.target is not None:
        ax.axhline(d.target, color="#c62828", lw=1, ls=":", label=f"target {d.target:g}")
    right = max([x for c in d.curves.values() for x in c.train_seconds] + [1e-3])
    if d.max_train_seconds and right >= 0.5 * d.max_train_seconds:  # far off to the right, it would squash the curves
        ax.axvline(d.max_train_seconds, color="#555", lw=0.8, ls="-.", label=f"budget {d.max_train_seconds:g} s")
        right = max(right, d.max_train_seconds)
    ax.set_xlim(0, right * 1.05)
    for status in sorted({r.status for r in d.rows if r not in (winner, base)}):
        ax.plot([], [], color=STATUS_COLOURS.get(status, "#777"), alpha=0.6, label=f"other trials: {status}")
    ax.set_xlabel("train clock (s, evaluation excluded)")
    ax.set_ylabel(d.metric_label)
    ax.set_title(f"Time to target: every trial of '{d.name}'")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right" if d.target_mode == "max" else "upper right")
    return _save(fig, path)


def plot_tta(d: SearchData, path: Path) -> Path:
    """Reached trials by TTA; the rest drawn hatched at the train seconds they used, without a TTA."""
    plt = _pyplot()
    order = res.ranked(d.rows)
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.32 * len(order) + 1.2)))
    names, widths, colours = [], [], []
    for r in order:
        c = d.curves.get(r.run_id)
        used = c.train_seconds[-1] if c and c.train_seconds else 0.0
        names.append(d.label(r))
        widths.append(r.tta_seconds if r.reached else used)
        colours.append(STATUS_COLOURS.get(r.status, "#777"))
    y = list(range(len(order)))[::-1]
    bars = ax.barh(y, widths, color=colours, edgecolor=["black" if r.baseline else "none" for r in order],
                   linewidth=[2 if r.baseline else 0 for r in order])
    for bar, r, w in zip(bars, order, widths):
        if not r.reached:
            bar.set_hatch("//")
            bar.set_alpha(0.55)
        text = f"{w:.2f} s" if r.reached else f"{r.status} at {w:.2f} s"
        ax.text(w, bar.get_y() + bar.get_height() / 2, f" {text}", va="center", fontsize=8)
    base = d.baseline
    if base is not None and base.reached:
        ax.axvline(base.tta_seconds, color=BASELINE_COLOUR, ls="--", lw=1, label=f"baseline TTA {base.tta_seconds:.2f} s")
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlabel("TTA, train-clock seconds (hatched: target not reached, seconds trained)")
    ax.set_title("Time to target per trial (fastest at the top)")
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(color=STATUS_COLOURS.get(s, "#777"), label=s) for s in sorted({r.status for r in order})]
    ax.legend(handles=handles, fontsize=8, loc="best")
    ax.set_xlim(0, max(widths + [1e-9]) * 1.35)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_tradeoff(d: SearchData, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in d.rows:
        c = d.curves.get(r.run_id)
        x = r.tta_seconds if r.reached else (c.train_seconds[-1] if c and c.train_seconds else None)
        if x is None or r.best_value is None:
            continue
        ax.scatter([x], [r.best_value], s=90 if r.baseline or r is d.winner else 40,
                   color=STATUS_COLOURS.get(r.status, "#777"), marker="o" if r.reached else ">",
                   edgecolor="black" if r.baseline else "none", linewidth=1.5, zorder=3)
        if r.baseline or r is d.winner:
            ax.annotate("baseline" if r.baseline else "winner", (x, r.best_value), fontsize=8,
                        xytext=(6, 4), textcoords="offset points")
    if d.target is not None:
        ax.axhline(d.target, color="#c62828", lw=1, ls=":", label=f"target {d.target:g}")
    for status in sorted({r.status for r in d.rows}):
        ax.scatter([], [], color=STATUS_COLOURS.get(status, "#777"), marker="o" if status == Status.REACHED else ">",
                   label=status)
    ax.set_xlabel("TTA in train-clock s (o); train seconds used when not reached (>)")
    ax.set_ylabel(f"best {d.metric_label}")
    ax.set_title(f"Speed against {d.target_metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right" if d.target_mode == "max" else "upper right")
    return _save(fig, path)


def plot_importance(d: SearchData, path: Path) -> Path:
    plt = _pyplot()
    items = sorted(d.importances.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.4 * len(items) + 1)))
    ax.barh([k for k, _ in items], [v for _, v in items], color="#1565c0")
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlabel("importance for the objective (Optuna PED-ANOVA, normalised to sum to 1)")
    ax.set_title("Which knobs mattered")
    ax.set_xlim(0, max([v for _, v in items] + [1e-9]) * 1.2)
    return _save(fig, path)


def plot_confirm(d: SearchData, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.5 * len(d.confirmed) + 1)))
    shown = d.confirmed
    for i, c in enumerate(shown[::-1]):
        colour = BASELINE_COLOUR if c.baseline else WINNER_COLOUR
        if not c.reached:
            ax.text(0, i, f"  target missed in all {len(c.ttas)} repeats", va="center", fontsize=8, color="#c62828")
            continue
        lo, hi = min(c.reached), max(c.reached)
        ax.plot([lo, hi], [i, i], color=colour, lw=2)
        if c.median is not None:
            ax.plot([c.median], [i], marker="D", color=colour, ms=8)
        med = f"median {c.median:.2f} s" if c.median is not None else "median: missed"
        ax.text(hi, i, f"  {med} ({len(c.reached)}/{len(c.ttas)} reached)", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), [c.label for c in shown[::-1]], fontsize=8)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_xlabel("TTA over confirmation repeats, train-clock s (line: min to max, diamond: median)")
    ax.set_title("Confirmation runs (new seeds, interleaved)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(0, max([max(c.reached) for c in shown if c.reached] + [1e-9]) * 1.5)
    return _save(fig, path)


def plot_probes(d: SearchData, path: Path) -> Path:
    """Samples/s of each systems configuration (a row) at each batch size (a bar); OOM where it did not fit."""
    plt = _pyplot()
    configs = sorted({r.config for r in d.probes})
    sizes = sorted({r.batch_size for r in d.probes})
    height = 0.8 / len(sizes)
    fig, ax = plt.subplots(figsize=(8, max(2.4, 0.5 * len(configs) * max(1, len(sizes) / 2) + 1)))
    colours = plt.get_cmap("viridis")
    top = max([r.samples_per_second or 0 for r in d.probes] + [1e-9])
    for r in d.probes:
        j = sizes.index(r.batch_size)
        y = configs.index(r.config) + (j - (len(sizes) - 1) / 2) * height
        if r.oom:
            ax.text(0, y, "  OOM", va="center", fontsize=7, color=STATUS_COLOURS[Status.OOM], fontweight="bold")
            continue
        ax.barh(y, r.samples_per_second or 0, height=height, color=colours(j / max(1, len(sizes) - 1)),
                label=f"batch {r.batch_size}")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    ax.set_yticks(range(len(configs)), configs, fontsize=7)
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel("steady-state samples/s (train clock, after the warm-up steps)")
    ax.set_title("Probe: systems configurations" + (f" (fixed: {d.probe_fixed})" if d.probe_fixed else ""),
                 fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


# ------------------------------------------------------------------ html
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
    cards = [("best TTA (search, 1 run)", _fmt(summary[t.M_BEST_TTA], " s")),
             ("baseline TTA (1 run)", _fmt(summary[t.M_BASELINE_TTA], " s")),
             ("speed-up (search)", _fmt(summary[t.M_SPEEDUP], "x")),
             ("trials", f"{summary['trials_total']}")]
    if t.M_CONFIRM_MEDIAN in m:
        cards += [("confirmed median TTA", _fmt(m.get(t.M_CONFIRM_MEDIAN), " s")),
                  ("confirmed speed-up", _fmt(m.get(t.M_CONFIRM_SPEEDUP), "x"))]
    env = d.environment
    where = ", ".join(f"{k} {env[k]}" for k in ("device_name", "cpu_count", "torch", "cuda", "autospeed") if k in env)
    placement = res.placement_note(d.rows)
    if placement:
        where += " (the best trial's)"
    nodes, devices = res.placement(d.rows)
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>autospeed report: {e(d.name)}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>autospeed report: {e(d.name)}</h1>",
           f"<p class='muted'>search {e(d.search_id)} &middot; parent run {e(d.parent.info.run_id)} &middot; "
           f"target {e(d.target_metric)} {'&ge;' if d.target_mode == 'max' else '&le;'} {e(str(d.target))} &middot; budget {e(str(d.max_train_seconds))} s per trial &middot; "
           f"generated {e(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>",
           f"<p class='muted'>TTA = train-clock seconds to the first evaluation that meets the target "
           f"(evaluation off the clock). Measured on: {e(where or 'unknown')}.</p>",
           *([f"<p class='note' id='placement'>Note: {e(placement)}.</p>"] if placement else []),
           "<div class='cards'>" + "".join(f"<div class='card'>{e(k)}<b>{e(v)}</b></div>" for k, v in cards)
           + "</div>",
           f"<p>Trial outcomes: {e(counts or 'none')}.</p>"]
    if winner is not None:
        out.append(f"<p>Winner: <b>{e(d.label(winner))} (trial {e(winner.trial_id)})</b> with {e(winner.knobs())}.</p>")
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
               f"<th>TTA s</th><th>best {e(d.target_metric)}</th><th>vs baseline</th>"
               + ("<th>node</th>" if len(nodes) > 1 else "") + ("<th>device</th>" if len(devices) > 1 else "")
               + "<th>knobs</th></tr>")
    base_row = d.baseline
    for i, r in enumerate(res.ranked(d.rows), 1):
        sp = res.speedup(base_row, r)
        out.append(f"<tr><td>{i}</td><td>{e(d.label(r))}</td><td>{e(r.trial_id)}</td>"
                   f"<td style='color:{STATUS_COLOURS.get(r.status, '#777')}'>{e(r.status)}</td>"
                   f"<td>{_fmt(r.tta_seconds if r.reached else None)}</td>"
                   f"<td>{'-' if r.best_value is None else f'{r.best_value:.4f}'}</td>"
                   f"<td>{_fmt(sp, 'x')}</td>"
                   + (f"<td>{e(res.short_node(r.node) if r.node else '-')}</td>" if len(nodes) > 1 else "")
                   + (f"<td>{e(r.device or '-')}</td>" if len(devices) > 1 else "")
                   + f"<td>{e(r.knobs())}</td></tr>")
    out.append("</table>")
    for note in d.notes:
        out.append(f"<p class='note'>Note: {e(note)}</p>")
    out.append("</body></html>")
    return "\n".join(out)


# ------------------------------------------------------------------ entry point
@dataclass
class Report:
    html_path: Path
    figures: list[Path]
    leaderboard: str
    notes: list[str]


def write_report(client, name: str, out: str | os.PathLike | None = None, *,
                 storage_path: str | None = None, log_to_mlflow: bool = True) -> Report:
    """Write report.html and the figures to `out` and log them under the parent run's `report/` artifacts."""
    d = collect(client, name, storage_path)
    if out is None:
        out = experiment_dir(d.parent, storage_path, name, d.search_id) / REPORT_ARTIFACT_DIR
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, tuple[Path, str]] = {}
    if d.rows:
        figures["curves"] = (plot_curves(d, out / "curves.png"),
                             f"Time to target: {d.target_metric} against train-clock seconds for every trial; "
                             "the dotted red line is the target, the dot where the winner and baseline cross it is their TTA")
        figures["tta"] = (plot_tta(d, out / "tta.png"),
                          "TTA per trial: sorted, coloured by status; the baseline has a black outline")
        figures["tradeoff"] = (plot_tradeoff(d, out / "tradeoff.png"),
                               f"Speed against {d.target_metric}: each trial's TTA (or train seconds used) "
                               f"and best {d.target_metric}")
    else:
        d.notes.append("the search has no trial runs yet")
    if d.importances:
        figures["importance"] = (plot_importance(d, out / "importance.png"),
                                 "Parameter importances: Optuna's PED-ANOVA evaluator over the search's study: how much each "
                                 "knob's values differ between the best trials and all trials (objective = TTA, "
                                 "censored for trials that missed the target)")
    if any(c.reached for c in d.confirmed):
        figures["confirm"] = (plot_confirm(d, out / "confirm.png"),
                              "Confirmation runs: median TTA with min and max over repeats with new seeds")
    if d.probes:
        figures["probe"] = (plot_probes(d, out / "probe.png"),
                            "Probe: steady-state samples/s of each systems configuration at each batch size of the "
                            "space (OOM: out of memory); the probe fixed the maths-neutral knobs at the fastest")
    html_path = write_atomic(out / "report.html", render_html(d, figures))
    paths = [p for p, _ in figures.values()]
    if log_to_mlflow:
        for p in [html_path, *paths]:
            client.log_artifact(d.parent.info.run_id, str(p), REPORT_ARTIFACT_DIR)
    return Report(html_path, paths, res.format_leaderboard(d.rows), d.notes)
