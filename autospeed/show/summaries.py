"""What each command prints when it ends, for a person at the terminal: `autospeed train`'s start and result,
the search's outcome (best TTA, the confirmed winner, where to look next), `autospeed export`'s recipe, `autospeed
report`'s files, `autospeed validate`'s verdict and the workloads list. cli.py prints them; this module imports
nothing heavy at its top, so `autospeed train` starts without the search's imports."""

from __future__ import annotations

from pathlib import Path


# ---------------------------------------------------------------- train
def train_start_line(recipe, target, device_name: str, cpu_threads: int | None = None) -> str:
    """What is trained, to what target, on what device (a CPU's torch threads) and within what budget."""
    from autospeed.script.options import is_script

    on = f"{recipe.workers} data-parallel workers on " if recipe.workers > 1 else ""
    what = f"{recipe.workload_options['script']}" if is_script(recipe.workload) else recipe.workload
    threads = f", {cpu_threads} torch threads" if cpu_threads else ""
    return (f"training {what} to {target.describe()} on {on}{device_name}{threads} "
            f"(budget {recipe.max_train_seconds:g} s train clock, "
            f"{f'{recipe.max_steps} steps' if recipe.max_steps else f'{recipe.epochs:g} epochs'})")


def train_result_lines(result, target) -> list[str]:
    """The run's status, TTA, best value, clocks and speed, and the knobs set that did not act where any."""
    from autospeed.track.writers import not_applied_marks  # standard library only

    tta = f"{result.tta_seconds:.2f} s" if result.tta_seconds is not None else "-"
    best = f"{result.best_value:.4f}" if result.best_value is not None else "-"
    wall = (f", wall to target {result.wall_to_target_seconds:.2f} s (from {result.wall_clock_origin})"
            if result.wall_to_target_seconds is not None else "")
    lines = [f"status {result.status}  TTA {tta} (train clock){wall}  best {target.metric} {best}  "
             f"train {result.train_seconds:.2f} s  wall {result.wall_seconds:.2f} s  "
             f"compile {result.compile_seconds:.2f} s  {result.samples_per_second:.0f} samples/s"
             + (f" ({result.tokens_per_second:,.0f} tokens/s)" if result.tokens_per_second is not None else "")
             + (f"  MFU {result.mfu:.1%} of the dense bf16 peak" if result.mfu is not None else "")
             + (f"  peak {result.peak_memory_mb:.0f} MB" if result.peak_memory_mb is not None else "")]
    not_applied = not_applied_marks(result.applied)  # what the trainer saw act, not what the recipe asked
    if not_applied:
        lines.append(f"not applied on {result.applied['device']}: {', '.join(not_applied)}")
    return lines


# ---------------------------------------------------------------- search
def search_summary_lines(outcome, spec, confirmation_lines: list[str]) -> list[str]:
    """The search's end: its best TTA against the baseline, the confirmed winner (`confirmation_lines`, the
    confirmation's own text: search/confirm_text.py), where best.yaml is, how to ask why the winner is faster, what
    the search took and where to compare the trials."""
    from autospeed.track import names

    summary = outcome.summary
    lines = []
    if summary[names.M_BEST_TTA] is not None:
        sp, base = summary[names.M_SPEEDUP], summary[names.M_BASELINE_TTA]
        lines.append(f"\nbest TTA {summary[names.M_BEST_TTA]:.2f} s (train clock, one search measurement)"
                     + (f", baseline {base:.2f} s: {sp:.2f}x faster" if sp else ", baseline did not reach the target"))
    elif any(r.predicted for r in outcome.rows):
        lines.append("\nno trial reached the target inside its budget: ranked by predicted TTA (a prediction, "
                     "marked ~)")
    else:
        lines.append("\nno trial reached the target")
    confirmed = outcome.confirmation
    if confirmed is not None:  # the confirmed best, its speed-up and what confirmation cost in baseline runs
        lines.append("\n".join(confirmation_lines))
    if outcome.best_path is not None:
        lines.append(f"best recipe: {outcome.best_path}  (or: autospeed export --name {spec.name} --out best.yaml)")
    if confirmed is not None and confirmed.winner is not None and not confirmed.winner.baseline \
            and not spec.confirm.ablation:
        lines.append(f"why it is faster, knob by knob: autospeed explain --name {spec.name}  (the winner re-timed "
                     f"with each knob set back to the baseline's, {spec.confirm.repeats} fresh runs per knob and of "
                     f"the winner)")
    lines.append(f"search took {outcome.wall_seconds:.1f} s wall ({outcome.phases_text()}); "
                 f"{where_to_look(outcome.tracking_uri, spec.name)}")
    return lines


def where_to_look(uri: str, name: str) -> str:
    """Where the user compares the trials: the tracking server's page of the search's runs, or a UI
    to start on a local store."""
    from autospeed.track.store import redact

    shown = redact(uri)
    if uri.startswith(("http://", "https://")):  # a tracking server: its UI is up already
        from autospeed.show.ui import experiment_path

        return (f"compare trials: {shown.rstrip('/')}{experiment_path(uri, name)}  (the MLflow tracking server); "
                f"figures: autospeed report --name {name} --tracking-uri {shown}")
    return (f"compare trials: mlflow ui --backend-store-uri {shown}  (or: autospeed ui --name {name}); "
            f"figures: autospeed report --name {name}")


# ---------------------------------------------------------------- export, report, validate, workloads
def export_lines(path: Path, best, measured) -> list[str]:
    """The recipe written, from which trial, how to train it; its measured speed-up and compile costs; its
    shipped compile cache."""
    from autospeed.show.leaderboard import tta_text
    from autospeed.track.export import compile_lines, speedup_lines

    # the trial's own search TTA: measured, or predicted and marked ~ (leaderboard.tta_text)
    tta = f"{best.tta_seconds:.2f} s" if best.tta_seconds is not None else tta_text(best)
    lines = [f"wrote {path}: trial {best.trial_id}, search TTA {tta}; train it with: autospeed train --config {path}"]
    lines += speedup_lines(measured) + compile_lines(measured)
    if measured is not None and measured.compile_cache:
        cache = path.parent / measured.compile_cache
        lines.append(f"wrote {cache}: torch.compile's cache of this recipe ({cache.stat().st_size / 1e6:.1f} MB); "
                     f"autospeed train loads it before compiling (keep it beside {path.name})")
    return lines


def report_lines(report) -> list[str]:
    """The leaderboard, the page and figures written, and the report's notes."""
    return [report.leaderboard,
            f"\nwrote {report.html_path} ({len(report.figures)} figures: "
            f"{', '.join(p.name for p in report.figures)}); logged under the search run's artifacts 'report/'",
            *(f"note: {note}" for note in report.notes)]


def validate_line(space: str, spec) -> str:
    return (f"{space}: ok ({spec.name}: {len(spec.space)} parameters, {spec.budget.trials} trials, "
            f"workload {spec.workload})")


def workloads_lines() -> list[str]:
    """One line per built-in workload with its metrics, then how a plugin is named."""
    from autospeed.workloads import describe, offered_metrics

    lines = []
    for name, line in describe():
        metrics = ", ".join(f"{k} ({m.mode})" for k, m in offered_metrics(name).items())
        lines.append(f"{name:<10} {line} Metrics: {metrics}.")
    lines.append(f"{'<plugin>':<10} package.module:factory returning autospeed.workloads.Workload (see "
                 f"docs/workloads.md)")
    return lines
