"""Does a search pay for itself? Its whole compute against what its recipe saves per production run.

    python experiments/payback.py                                  # today's vs the new search, fast.yaml
    python experiments/payback.py --space search_spaces/lm.yaml
    python experiments/payback.py --variant a:search_spaces/fast.yaml \
                                  --variant b:search_spaces/fast.yaml:budget.trials=6

A variant is LABEL:SPACE[:KEY=VALUE]...: a search-space file and overrides merged into its YAML
(KEY a dotted path, VALUE read as YAML: `budget.trials=6`, `probe.enabled=false`,
`probe={enabled: false}`); `--set KEY=VALUE` applies to every variant, before its own. Without
--variant: `today` (--space with `probe.enabled=false`, the search without its probe stage) and
`new` (--space as it is).

1. Each variant's search runs as a user runs it: `python -m autospeed search --space <variant file>`
   in a fresh process (probe stage, trials, confirmation runs, best.yaml), then `autospeed export`.
   Its compute is that command's wall seconds, process start to exit, exclusive CPU lock: the time
   the machine is busy with the search. Beside it, per kind of MLflow child run (probe, trial,
   confirm), the runs' summed train-clock and wall seconds.
2. Then each variant's exported recipe and the baseline (the space file's `baseline`, with room to
   reach the target as in speedup.py) train --repeats times, interleaved, with the same seeds
   --seed-base.. (never a seed the searches used), each a fresh `autospeed train --json --no-track`
   process, exclusive CPU lock.
3. saving per run = baseline median TTA - exported recipe's median TTA, both re-timed in step 2
   (train clock); payback = search wall seconds / saving per run seconds: the number of production
   runs after which the search has paid for itself, with a bootstrap 90% interval over the seeds.
   The search's wall clock counts everything (Ray's start, evaluations, MLflow) and the saving only
   the train clock, so the payback errs long, not short. Goal: <= --goal-runs runs.
Writes --out whole; the exported recipes go beside it (<out stem>_<variant>_best.yaml).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (RESULTS, ROOT, SearchRun, add_timing_arguments, describe_runs, provenance,  # noqa: E402
                     results_header, roomier_baseline, search_and_export, search_compute, shown,
                     time_interleaved, write_results, write_space_variant)

from autospeed.outcome import median_tta  # noqa: E402
from autospeed.space import load_spec  # noqa: E402

LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
KINDS = ("probe", "trial", "confirm")  # child runs of a search, in the order they run


@dataclass
class Variant:
    label: str
    space: Path
    overrides: list[str]  # `dotted.key=value`, the --set ones first

    @property
    def described(self) -> str:
        return f"`{shown(self.space)}`" + (f" with `{' '.join(self.overrides)}`" if self.overrides else "")


def parse_variant(text: str, common: list[str]) -> Variant:
    """`LABEL:SPACE[:KEY=VALUE]...`; an override starts at a `:` followed by `dotted.key=`, so a YAML value
    may hold colons (`probe={enabled: false}`)."""
    label, sep, rest = text.partition(":")
    if not sep or not rest or not LABEL.match(label):
        raise argparse.ArgumentTypeError(f"--variant is LABEL:SPACE[:KEY=VALUE]... with LABEL of letters, digits, "
                                         f"'_', '.', '-', e.g. today:search_spaces/fast.yaml:budget.trials=6; "
                                         f"got {text!r}")
    space, *overrides = re.split(r":(?=[A-Za-z_][\w.]*=)", rest)
    return Variant(label, Path(space), [*common, *overrides])


def saving_interval(baseline_ttas: list[float | None], ttas: list[float | None], confidence: float = 0.9,
                    resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval of the saving per run, baseline median TTA - candidate median TTA (seconds),
    resampling each side on its own as outcome.speedup_interval does; a miss counts as infinitely slow,
    so a bound is inf (the baseline's resampled median missed) or -inf (the candidate's did)."""
    rng = random.Random(seed)
    base = [math.inf if x is None else x for x in baseline_ttas]
    cand = [math.inf if x is None else x for x in ttas]
    savings = []
    for _ in range(resamples):
        b, c = statistics.median(rng.choices(base, k=len(base))), statistics.median(rng.choices(cand, k=len(cand)))
        savings.append(-math.inf if math.isinf(c) else b - c)
    savings.sort()
    tail = (1.0 - confidence) / 2.0
    return savings[int(tail * (resamples - 1))], savings[int((1.0 - tail) * (resamples - 1))]


def payback_runs(search_seconds: float, saving_seconds: float) -> float:
    """Production runs after which the search has paid for itself; inf when the recipe saves nothing."""
    return search_seconds / saving_seconds if saving_seconds > 0 else math.inf


def runs_cell(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", default=str(ROOT / "search_spaces" / "fast.yaml"),
                   help="search-space file of the default variants")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:SPACE[:KEY=VALUE]...",
                   help="a search to compare (repeat it); default: today:SPACE:probe.enabled=false and new:SPACE")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for every variant, e.g. budget.trials=6 (repeat it)")
    add_timing_arguments(p, baseline=True)
    p.add_argument("--goal-runs", type=float, default=10.0, help="the payback the verdict line checks")
    p.add_argument("--work", default="/tmp/autospeed-payback")
    p.add_argument("--out", default=str(RESULTS / "payback.md"))
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    texts = args.variant or [f"today:{args.space}:probe.enabled=false", f"new:{args.space}"]
    try:
        variants = [parse_variant(v, args.set) for v in texts]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if any(v.label.startswith("baseline") for v in variants):
        p.error("--variant: labels starting with 'baseline' name the baseline's rows; pick another label")
    if len({v.label for v in variants}) < len(variants):
        p.error(f"--variant labels must differ, got {[v.label for v in variants]}")

    work = Path(args.work)
    out = Path(args.out)
    # every variant is checked before any search starts
    files = {v.label: write_space_variant(v.space, v.overrides, f"payback-{v.label}", work / "spaces")
             for v in variants}
    specs = {label: load_spec(path) for label, path in files.items()}
    seeds = [args.seed_base + r for r in range(args.repeats)]
    print(provenance(), flush=True)

    searched: dict[str, SearchRun] = {}
    compute: dict[str, dict] = {}
    for v in variants:
        print(f"\n== search of variant {v.label}: {files[v.label]}", flush=True)
        searched[v.label] = search_and_export(files[v.label], work, specs[v.label].name, exclusive=True)
        compute[v.label] = search_compute(searched[v.label].tracking_uri, specs[v.label].name)
        print(f"== variant {v.label}: search took {searched[v.label].wall_seconds:.1f} s wall", flush=True)

    # The recipes to time: one baseline per distinct baseline recipe, each variant's exported recipe.
    recipes: dict[str, dict] = {}
    baseline_of: dict[str, str] = {}
    rooms: dict[str, str] = {}
    for v in variants:
        spec = specs[v.label]
        base, room = roomier_baseline(spec.recipe_for({}, baseline=True), args.baseline_seconds,
                                      args.baseline_epochs)
        base_yaml = yaml.safe_load(base.to_yaml())
        label = next((k for k, r in recipes.items() if r == base_yaml), None)
        if label is None:
            label = "baseline" if not recipes else f"baseline-{v.label}"
            recipes[label], rooms[label] = base_yaml, room
        baseline_of[v.label] = label
    for v in variants:
        best = searched[v.label].best_path
        if best is not None:
            best_yaml = yaml.safe_load(best.read_text())
            if best_yaml.get("seed") in seeds:
                p.error(f"--seed-base: seed {best_yaml['seed']} is variant {v.label}'s search seed; pick another")
            recipes[v.label] = best_yaml
    runs = time_interleaved(recipes, seeds, work / "timed")

    ttas = {k: [r["tta_seconds"] for r in v] for k, v in runs.items()}
    medians = {k: median_tta(v) for k, v in ttas.items()}
    cell = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    first = specs[variants[0].label]
    lines = [
        f"Workload {first.workload}, target {first.resolved_target.describe()}. Variants (each search's file is "
        f"its space file with the overrides merged in, in order, a later one winning, and its `name` set):", ""]
    lines += [f"- `{v.label}`: {v.described}" for v in variants]
    lines += [
        "", "Search compute: the whole `python -m autospeed search --space <variant file>` command, process start "
        "to exit, wall clock, exclusive CPU lock (Ray's start, the probe stage, every trial, the confirmation "
        "runs, MLflow); per kind of child run, the runs' count and summed train-clock / wall seconds as MLflow "
        "recorded them.", "",
        "| variant | search wall s | " + " | ".join(f"{k} runs (train s / wall s)" for k in KINDS) +
        " | search's claim: confirmed median TTA s (baseline's) |",
        "| --- | ---: |" + " ---: |" * len(KINDS) + " --- |"]
    for v in variants:
        c, s = compute[v.label], searched[v.label]
        cells = " | ".join(f"{c[k]['runs']} ({c[k]['train_seconds']:.1f} / {c[k]['wall_seconds']:.1f})" if k in c
                           else "0" for k in KINDS)
        measured = (yaml.safe_load(s.best_path.read_text()).get("measured") or {}) if s.best_path else {}
        claim = (f"{cell(measured.get('tta_seconds_median'))} ({cell(measured.get('baseline_tta_seconds_median'))})"
                 if measured.get("confirmed") else "no exported recipe" if s.best_path is None
                 else "not confirmed (one search trial)")
        lines.append(f"| {v.label} | {s.wall_seconds:.1f} | {cells} | {claim} |")
    other = sorted({k for c in compute.values() for k in c} - set(KINDS))
    if other:
        lines.append("\nOther child runs: " + "; ".join(f"{v.label}: " + ", ".join(
            f"{k} {compute[v.label][k]['runs']}" for k in other if k in compute[v.label]) for v in variants))

    lines += [
        "", f"Production runs, re-timed here: {args.repeats} per recipe, interleaved ({', '.join(recipes)}, ...), "
        f"seeds {seeds[0]}..{seeds[-1]} for every recipe; each a fresh `python -m autospeed train --config X --json "
        f"--no-track` process, exclusive CPU lock. Exported recipes train unchanged but for the seed. " +
        " ".join(f"{label}: {room}" if len(rooms) > 1 else room for label, room in rooms.items()),
        "TTA = train-clock seconds to the first evaluation that meets the target; a run that missed it counts as "
        "infinitely slow in a median. Process wall = the whole `autospeed train` process (interpreter, data, "
        "training, evaluations).", "",
        "| recipe | median TTA s | min | max | median process wall s | every run (TTA s, in order) |",
        "| --- | ---: | ---: | ---: | ---: | --- |"]
    for label, rs in runs.items():
        med, lo, hi, every = describe_runs(rs)
        wall = statistics.median(r["process_wall_seconds"] for r in rs)
        lines.append(f"| {label} | {med} | {lo} | {hi} | {wall:.2f} | {every} |")

    lines += [
        "", "Payback = search wall s / saving per run s, the saving = the baseline's median TTA - the exported "
        "recipe's (both re-timed above); interval: bootstrap 90% over the seeds.", "",
        "| variant | search wall s | trials | baseline median TTA s | winner median TTA s | saving per run s "
        "(90% interval) | payback runs (90% interval) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    verdicts = []
    for v in variants:
        wall = searched[v.label].wall_seconds
        trials = compute[v.label].get("trial", {}).get("runs", 0)
        base = baseline_of[v.label]
        if v.label not in runs:
            lines.append(f"| {v.label} | {wall:.1f} | {trials} | {cell(medians[base])} | no exported recipe | - | "
                         f"never |")
            verdicts.append(f"{v.label}: no recipe to pay back with ({searched[v.label].export_error})")
            continue
        mb, mw = medians[base], medians[v.label]
        low, high = saving_interval(ttas[base], ttas[v.label])
        if mw is None:
            saving, pay = "- (its median run missed)", "never"
        elif mb is None:  # the baseline's median run missed: it needed more than its whole budget
            bound = recipes[base]["max_train_seconds"] - mw
            saving, pay = f"> {bound:.2f}", f"< {runs_cell(payback_runs(wall, bound))}"
        else:
            interval = f"{low:.2f} to {high:.2f}" if math.isfinite(low) and math.isfinite(high) else \
                f"{low:.2f} to {high:.2f} (a resampled median missed)"
            saving = f"{mb - mw:.2f} ({interval})"
            pay = (f"{runs_cell(payback_runs(wall, mb - mw))} ({runs_cell(payback_runs(wall, high))} to "
                   f"{runs_cell(payback_runs(wall, low))})")
        lines.append(f"| {v.label} | {wall:.1f} | {trials} | {cell(mb)} | {cell(mw)} | {saving} | {pay} |")
        if mb is not None and mw is not None:
            runs_needed = payback_runs(wall, mb - mw)
            met = runs_needed <= args.goal_runs
            sure = met and payback_runs(wall, low) <= args.goal_runs
            verdicts.append(f"{v.label}: {runs_cell(runs_needed)} runs, goal <= {args.goal_runs:g}: "
                            f"{'met' if met else 'NOT met'}" + (", and by the interval's far end too" if sure else ""))
        else:
            verdicts.append(f"{v.label}: see the row above")
    lines += ["", "**Payback: " + "; ".join(verdicts) + ".**", ""]
    knobs = ("batch_size", "accumulation_steps", "optimizer", "lr", "schedule", "warmup_fraction", "precision",
             "compile", "max_train_seconds", "epochs")
    lines += [f"- {label}: `{json.dumps({k: r.get(k) for k in knobs})}`" for label, r in recipes.items()]
    warnings = sorted({w for rs in runs.values() for r in rs for w in r["warnings"]})
    if warnings:
        lines += ["", "`autospeed train` warned: " + "; ".join(warnings)]

    for v in variants:  # the measured recipes, kept beside the results
        if searched[v.label].best_path is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(searched[v.label].best_path, out.with_name(f"{out.stem}_{v.label}_best.yaml"))
    device = next(iter(runs.values()))[0].get("environment", {}).get("device", "cpu")
    title = f"Does a search pay for itself? ({first.workload}, {device}: {', '.join(v.label for v in variants)})"
    text = results_header(title, device) + "\n".join(lines) + "\n"
    write_results(out, text)
    print(text)


if __name__ == "__main__":
    main()
