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
    ablation.png    speed-up lost without each knob, and its share (when confirm.ablation ran)
    predicted.png   each trial that did not reach: its curve extrapolated to its predicted TTA, with the 80%
                    interval on the target line (when some trial's TTA is predicted)
    probe.png       steady-state samples/s per systems configuration and batch size, OOMs marked
                    (when the probe stage ran)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autospeed.show import leaderboard
from autospeed.show.report.data import SearchData, collect, experiment_dir
from autospeed.show.report.figures import (
    plot_ablation,
    plot_confirm,
    plot_curves,
    plot_importance,
    plot_predicted,
    plot_probes,
    plot_tradeoff,
    plot_tta,
)
from autospeed.show.report.page import render_html
from autospeed.track import names
from autospeed.yamlio import write_atomic

REPORT_ARTIFACT_DIR = "report"

__all__ = ["REPORT_ARTIFACT_DIR", "Report", "SearchData", "collect", "render_html", "write_report"]


@dataclass
class Report:
    html_path: Path
    figures: list[Path]
    leaderboard: str
    notes: list[str]


def write_report(client, name: str, out: str | os.PathLike | None = None, *,
                 searches: Path | None = None, log_to_mlflow: bool = True) -> Report:
    """Write report.html and the figures to `out` and log them under the parent run's `report/` artifacts."""
    d = collect(client, name, searches)
    if out is None:
        folder = experiment_dir(d.parent, searches, d.search_id)
        out = (folder if folder is not None else Path.cwd()) / REPORT_ARTIFACT_DIR
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, tuple[Path, str]] = {}
    if d.rows:
        figures["curves"] = (plot_curves(d, out / "curves.png"),
                             f"Time to target: {d.target_metric} against train-clock seconds for every trial; "
                             "the dotted red line is the target, the dot where the winner and baseline cross it "
                             "is their TTA")
        figures["tta"] = (plot_tta(d, out / "tta.png"),
                          "TTA per trial: sorted, coloured by status; the baseline has a black outline")
        figures["tradeoff"] = (plot_tradeoff(d, out / "tradeoff.png"),
                               f"Speed against {d.target_metric}: each trial's TTA (or train seconds used) "
                               f"and best {d.target_metric}")
        if d.predicted:
            figures["predicted"] = (plot_predicted(d, out / "predicted.png"),
                                    "Predicted TTAs: each trial that missed the target within its budget, its "
                                    "curve (solid) carried on by the fitted learning curve (dashed) to its "
                                    "predicted TTA, with the 80% interval as a bar on the target line; trials that "
                                    "reached are solid up to their measured TTA. A prediction ranks the trials; "
                                    "confirmation measures the winner")
    else:
        d.notes.append("the search has no trial runs yet")
    if d.importances:
        figures["importance"] = (plot_importance(d, out / "importance.png"),
                                 "Parameter importances: Optuna's PED-ANOVA evaluator over the search's study: "
                                 "how much each knob's values differ between the best trials and all trials "
                                 "(objective = TTA, censored for trials that missed the target)")
    if any(c.reached for c in d.confirmed):
        figures["confirm"] = (plot_confirm(d, out / "confirm.png"),
                              "Confirmation runs: median TTA with min and max over repeats with new seeds")
    if d.ablation:
        confirmed_speedup = d.parent.data.metrics.get(names.M_CONFIRM_SPEEDUP)
        figures["ablation"] = (plot_ablation(d, confirmed_speedup, out / "ablation.png"),
                               "Why it is faster: the winner re-timed with each knob that differs from the baseline "
                               "set back to the baseline's value, one at a time, in fresh processes beside the winner "
                               "itself (same seeds); the share is log(lost) / log(confirmed speed-up)")
    if d.probes:
        figures["probe"] = (plot_probes(d, out / "probe.png"),
                            "Probe: steady-state samples/s of each systems configuration at each batch size of the "
                            "space (OOM: out of memory); the probe fixed the maths-neutral knobs at the fastest")
    html_path = write_atomic(out / "report.html", render_html(d, figures))
    paths = [p for p, _ in figures.values()]
    if log_to_mlflow:
        for p in [html_path, *paths]:
            client.log_artifact(d.parent.info.run_id, str(p), REPORT_ARTIFACT_DIR)
    return Report(html_path, paths, leaderboard.table(d.rows), d.notes)
