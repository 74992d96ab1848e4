"""The report's figures: PNGs drawn with matplotlib's Agg backend, written atomically."""

from __future__ import annotations

from pathlib import Path

from autospeed.outcome import Status
from autospeed.show import leaderboard
from autospeed.show.report.data import SearchData
from autospeed.track import runs as res
from autospeed.yamlio import atomic_path

STATUS_COLOURS = {
    Status.REACHED: "#2e7d32", Status.NOT_REACHED: "#f9a825", Status.STOPPED_EARLY: "#9e9e9e", Status.OOM: "#c62828",
    Status.DIVERGED: "#ad1457", Status.FAILED: "#b71c1c", Status.KILLED: "#6a1b9a", Status.RUNNING: "#1565c0",
}
BASELINE_COLOUR, WINNER_COLOUR = "#000000", "#1565c0"


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
        text = f"{w:.2f} s" if r.reached else f"{r.status} at {w:.2f} s" + (
            f", predicted TTA {leaderboard.tta_text(r)}" if r.predicted else "")
        ax.text(w, bar.get_y() + bar.get_height() / 2, f" {text}", va="center", fontsize=8)
    base = d.baseline
    if base is not None and base.reached:
        ax.axvline(base.tta_seconds, color=BASELINE_COLOUR, ls="--", lw=1,
                   label=f"baseline TTA {base.tta_seconds:.2f} s")
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


def plot_predicted(d: SearchData, path: Path, labelled: int = 10) -> Path:
    """Each trial that did not reach: its curve (solid), the refitted curve carried on to its predicted TTA
    (dashed), and that TTA with its 80% interval as an error bar on the target line; trials without a prediction
    thin grey; trials that reached solid up to their TTA. The `labelled` best predicted trials are named.
    Log train seconds: a long job's prediction lies 10x and more past the seconds a trial trained."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5))
    colours = plt.get_cmap("tab10")
    order = res.ranked(d.rows)
    predicted = [r for r in order if r.run_id in d.extrapolations]
    right, left = 1e-3, min([x for c in d.curves.values() for x in c.train_seconds if x > 0] + [1.0])
    for r in order:
        c = d.curves.get(r.run_id)
        if not c or not c.train_seconds or r.run_id in d.extrapolations:
            continue
        right = max(right, c.train_seconds[-1])
        if r.reached:
            xs = [x for x in c.train_seconds if x <= r.tta_seconds] or c.train_seconds[:1]
            ax.plot(xs, c.values[:len(xs)], color=STATUS_COLOURS[Status.REACHED], lw=1, alpha=0.6, marker="o", ms=2)
        else:
            ax.plot(c.train_seconds, c.values, color="#9e9e9e", lw=0.8, alpha=0.6)
    for i, r in enumerate(predicted):
        c, x = d.curves[r.run_id], d.extrapolations[r.run_id]
        colour = colours(i % 10)
        name = f"{d.label(r)}: {leaderboard.tta_text(r)}" if i < labelled else None
        ax.plot(c.train_seconds, c.values, color=colour, lw=1.6, marker="o", ms=3, label=name,
                ls="-", zorder=4)
        ax.plot(x.train_seconds, x.values, color=colour, lw=1.4, ls="--", zorder=4)
        if d.target is not None:
            low = x.seconds - x.low_seconds if x.low_seconds is not None else 0.0
            high = x.high_seconds - x.seconds if x.high_seconds is not None else 0.0
            ax.errorbar([x.seconds], [d.target], xerr=[[low], [high]], fmt="D", color=colour, ms=6, capsize=4,
                        lw=1.5, zorder=5)
        right = max(right, x.high_seconds or x.seconds, x.seconds)
    if d.target is not None:
        ax.axhline(d.target, color="#c62828", lw=1, ls=":", label=f"target {d.target:g}")
    ax.plot([], [], color=STATUS_COLOURS[Status.REACHED], lw=1, label="reached: measured, up to its TTA")
    ax.plot([], [], color="#555", ls="--", label="extrapolated (diamond: predicted TTA, bar: 80% interval)")
    if any(not r.reached and r.run_id not in d.extrapolations for r in d.rows):
        ax.plot([], [], color="#9e9e9e", lw=0.8, label="not reached, no prediction")
    ax.set_xscale("log")
    ax.set_xlim(left * 0.8, right * 1.25)
    ax.set_xlabel("train clock (s, evaluation excluded; log scale)")
    ax.set_ylabel(d.metric_label)
    ax.set_title("Predicted time to target: each curve carried on to the target (~: a prediction, not a measurement)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right" if d.target_mode == "max" else "upper right")
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


def plot_ablation(d: SearchData, speedup: float | None, path: Path) -> Path:
    """Speed-up lost without each knob (the winner with it set back to the baseline's value), and its share
    of the confirmed speed-up on the log scale."""
    plt = _pyplot()
    rows = sorted(d.ablation.items(), key=lambda kv: -(kv[1].get("share") or 0.0))
    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.5 * len(rows) + 1)))
    for i, (knob, r) in enumerate(rows[::-1]):
        lost = r.get("speedup_lost") or r.get("speedup_lost_at_least")
        if lost is None:
            ax.text(1.0, i, "  winner missed its target here", va="center", fontsize=8)
            continue
        at_least = r.get("speedup_lost") is None
        ax.barh(i, lost - 1.0, left=1.0, color=WINNER_COLOUR if lost >= 1.0 else BASELINE_COLOUR,
                hatch="//" if at_least else None)
        share = f", {r['share']:.0%} of the speed-up" if r.get("share") is not None else ""
        ax.text(max(lost, 1.0), i, f"  {'>=' if at_least else ''}{lost:.2f}x{share}", va="center", fontsize=8)
    def value(v) -> str:  # lr_scaling's mapping as its set fields
        return " ".join(f"{k}={x}" for k, x in v.items() if x is not None) if isinstance(v, dict) else f"{v:g}" \
            if isinstance(v, float) else str(v)

    ax.set_yticks(range(len(rows)), [f"{k}\n(back to {', '.join(value(v) for v in r['set_back'].values())})"
                                     for k, r in rows[::-1]], fontsize=7)
    ax.axvline(1.0, color="#555", lw=1)
    top = max([(r.get("speedup_lost") or r.get("speedup_lost_at_least") or 1.0) for _, r in rows] + [1.0])
    ax.set_xlim(min(0.8, *[(r.get("speedup_lost") or 1.0) for _, r in rows]), top * 1.6)
    ax.set_xlabel("TTA with the knob set back / the winner's TTA (medians, same seeds; 1 = no effect)")
    ax.set_title("Why it is faster: speed-up lost without each knob"
                 + (f" (confirmed speed-up {speedup:.2f}x)" if speedup else ""), fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)

