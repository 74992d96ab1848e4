"""Does a search pay for itself? Its whole compute against what its recipe saves per production run.

    python experiments/payback.py                                  # every variant below, one table
    python experiments/payback.py --space search_spaces/lm.yaml    # today's vs the new search of one file
    python experiments/payback.py --variant a:search_spaces/fast.yaml \
                                  --variant b:search_spaces/fast.yaml:budget.trials=6
    python experiments/payback.py --merge A.md B.md --out experiments/results/payback.md

A variant is LABEL:SPACE[:KEY=VALUE]...: a search-space file and overrides merged into its YAML
(KEY a dotted path, VALUE read as YAML: `budget.trials=6`, `probe.enabled=false`,
`probe={enabled: false}`); `--set KEY=VALUE` applies to every variant, before its own. Without
--variant and --space: every variant of VARIANTS (today, new, before, lean, nocap, budget10, seed1
on fast.yaml, lm on lm.yaml), so one invocation regenerates experiments/results/payback.md whole.
With --space alone: `today` (the file with `probe.enabled=false`, the search without its probe
stage) and `new` (the file as it is). `--exported LABEL=FILE` times FILE, a recipe exported
earlier, as variant LABEL's instead of running its search (its payback is then unknown).

1. Each variant's search runs as a user runs it: `python -m autospeed search --space <variant file>`
   in a fresh process (probe stage, trials, confirmation runs, best.yaml), then `autospeed export`.
   Its compute is that command's wall seconds, process start to exit, exclusive CPU lock: the time
   the machine is busy with the search. Beside it, per kind of MLflow child run (probe, trial,
   confirm), the runs' summed train-clock and wall seconds.
2. Then each variant's exported recipe and the baseline of each space file (its `baseline`, with
   room to reach the target as in speedup.py) train --repeats times, interleaved, with the same
   seeds --seed-base.. (never a seed the searches used), each a fresh `autospeed train --json
   --no-track` process, exclusive CPU lock.
3. saving per run = baseline median TTA - exported recipe's median TTA, both re-timed in step 2
   (train clock); payback = search wall seconds / saving per run seconds: the number of production
   runs after which the search has paid for itself, with a bootstrap 90% interval over the seeds.
   The search's wall clock counts everything (Ray's start, evaluations, MLflow) and the saving only
   the train clock, so the payback errs long, not short. Goal: <= --goal-runs runs.
Writes --out whole, one table with a row per variant, and below it every recipe it timed (the baselines and
each variant's exported recipe), whole.

--merge FILE... measures nothing: it reads results files of this script (each one run, or a file
--merge wrote) and writes --out with one table of every run's rows, a column naming the run, and
below it each run whole under its own header (commit, command, machine, date): the provenance of
every row stays beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    ROOT,
    SearchRun,
    add_timing_arguments,
    describe_runs,
    provenance,
    recipes_as_timed,
    results_header,
    roomier_baseline,
    search_and_export,
    search_compute,
    shown,
    time_interleaved,
    write_results,
    write_space_variant,
)

LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
KINDS = ("probe", "trial", "confirm")  # child runs of a search, in the order they run
FAST = "search_spaces/fast.yaml"
# Every row of experiments/results/payback.md: (label, space file, overrides). `lean` is fast.yaml's own size
# today, and `nocap` differs from `new` only where ASHA's incumbent cap would bite: both measure run-to-run noise too.
VARIANTS = [
    ("today", FAST, ["probe.enabled=false"]),  # the search without its probe stage
    ("new", FAST, []),  # fast.yaml as it is
    ("before", FAST, ["budget.trials=20", "confirm.top_k=3", "confirm.repeats=3", "probe.enabled=false"]),
    ("lean", FAST, ["budget.trials=12", "confirm.top_k=2", "confirm.repeats=2"]),
    ("nocap", FAST, ["asha.incumbent_margin=null"]),
    ("budget10", FAST, ["budget.max_train_seconds=10"]),
    ("seed1", FAST, ["sampler.seed=1"]),
    ("lm", "search_spaces/lm.yaml", []),
]
# The table every run writes, and --merge gathers (with a `run` column first).
COLUMNS = ("variant", "search file", "workload, target", "search wall s", "trials", "baseline median TTA s",
           "winner median TTA s", "saving per run s (90% interval)", "payback runs (90% interval)")
TITLE = "Does a search pay for itself?"


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


def default_variants(space: str | None, common: list[str]) -> list[Variant]:
    """Without --variant: today and new of --space, or, without --space, every variant of VARIANTS."""
    if space:
        return [Variant("today", Path(space), [*common, "probe.enabled=false"]), Variant("new", Path(space), common)]
    return [Variant(label, ROOT / path, [*common, *overrides]) for label, path, overrides in VARIANTS]


def saving_interval(baseline_ttas: list[float | None], ttas: list[float | None], confidence: float = 0.9,
                    resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval of the saving per run, baseline median TTA - candidate median TTA (seconds),
    resampling each side on its own (as outcome.speedup_interval did before round 3; at the 7 runs a side
    payback.py times, experiments/results/interval_coverage.md measured that bootstrap covering 0.904-0.939 at
    nominal 0.90, wider than it claims); a miss counts as infinitely slow, so a bound is inf (the
    baseline's resampled median missed) or -inf (the candidate's did)."""
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


def table(rows: list[dict[str, str]], columns: tuple[str, ...] = COLUMNS) -> list[str]:
    """A Markdown table of `rows` (cells by column name; a missing cell shows `-`), numbers right-aligned."""
    left = {"run", "variant", "search file", "workload, target"}
    return ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " if c in left else " ---: " for c in columns)
            + "|", *("| " + " | ".join(row.get(c, "-") for c in columns) + " |" for row in rows)]


# ---------------------------------------------------------------- --merge: runs already measured, one table
HEADER_KEYS = ("commit:", "command:", "machine:", "date:")


@dataclass
class Run:
    """One run of payback.py as its results file shows it: its header block, its body, its rows."""

    header: str  # the provenance block's lines, without the fences
    body: str  # everything after the block, verbatim
    origin: str  # where it came from: the line under its section's title
    rows: list[dict[str, str]]

    @property
    def date(self) -> str:
        return next((line[5:].strip() for line in self.header.splitlines() if line.startswith("date:")), "")


def _header_block(text: str) -> tuple[str, str] | None:
    """(the first ``` block that starts with `commit:`, the text after it), or None."""
    m = re.search(r"^```\n(commit:.*?)\n```\n", text, re.S | re.M)
    return (m.group(1), text[m.end():]) if m else None


def _tables(body: str) -> list[list[list[str]]]:
    """Every Markdown table in `body`, as rows of cells (the header row first, the --- row left out)."""
    out: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in body.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            out.append(current)
            current = []
    return out


def _rows(body: str, source: str) -> list[dict[str, str]]:
    """The payback table's rows of one run, with `search file` and `workload, target` filled in for a file
    written before they were columns (from its variant list and its `Workload X, target Y.` line)."""
    found = [t for t in _tables(body) if t[0][:1] == ["variant"] and "payback runs (90% interval)" in t[0]]
    if not found:
        raise SystemExit(f"--merge: {source} has no payback table (| variant | ... | payback runs (90% interval) |)")
    header, *cells = found[-1]
    rows = [dict(zip(header, row)) for row in cells]
    files = dict(re.findall(r"^- `([^`]+)`: (`.+?`(?: with `[^`]*`)?)", body, re.M))
    workload = re.search(r"^Workload (\S+), target (.+?)\. ", body, re.M)
    for row in rows:
        row.setdefault("search file", files.get(row["variant"], "-"))
        if workload:
            row.setdefault("workload, target", f"{workload.group(1)}, {workload.group(2)}")
    return rows


def read_runs(path: Path) -> list[Run]:
    """The runs in one results file: one, or for a file --merge wrote, each of its sections."""
    text = path.read_text()
    first = _header_block(text)
    if first is None:
        raise SystemExit(f"--merge: {path} has no provenance block (```, commit:, command:, ...)")
    header, rest = first
    if not re.search(r"^## Run [A-Z]$", rest, re.M):  # one run, not a file --merge wrote
        rows = _rows(rest, str(path))
        origin = f"From `{path.name}`: {', '.join(row['variant'] for row in rows)}."
        return [Run(header, rest.strip("\n"), origin, rows)]
    runs = []
    for section in re.split(r"^## Run ", rest, flags=re.M)[1:]:
        title, _, section_text = section.partition("\n")
        block = _header_block(section_text)
        if block is None:
            raise SystemExit(f"--merge: {path}, section 'Run {title}' has no provenance block")
        origin = section_text[:section_text.index("```")].strip()
        runs.append(Run(block[0], block[1].strip("\n"), origin, _rows(block[1], f"{path}, Run {title}")))
    return runs


def merge(paths: list[Path], out: Path) -> str:
    """One results file from runs already measured: every run's rows in one table, then each run whole."""
    runs: list[Run] = []
    for run in (run for path in paths for run in read_runs(path)):
        if all(run.header != seen.header for seen in runs):  # a run given twice is one run
            runs.append(run)
    runs.sort(key=lambda run: run.date)
    if len(runs) > 26:
        raise SystemExit(f"--merge: {len(runs)} runs, at most 26 (runs are lettered A-Z)")
    letters = [chr(ord("A") + i) for i in range(len(runs))]
    rows = [{"run": letter, **row} for letter, run in zip(letters, runs) for row in run.rows]
    lines = [
        f"This command measured nothing: it gathered the rows of {len(runs)} runs of `experiments/payback.py` "
        f"(runs {letters[0]}-{letters[-1]} below, oldest first) into one table. Each run's section keeps its own "
        "header (the commit, command, machine and date it was measured at) and everything it wrote, verbatim; "
        "a row's numbers come from that run alone (its baseline, timed in the same interleaved runs). "
        "`python experiments/payback.py`, without arguments, measures every variant again in one invocation and "
        "rewrites this file as one run.", "",
        *table(rows, ("run", *COLUMNS)), ""]
    for letter, run in zip(letters, runs):
        lines += [f"## Run {letter}", "", run.origin, "", "```", run.header, "```", "", run.body, ""]
    text = results_header(f"{TITLE} Every variant measured, one table") + "\n".join(lines)
    write_results(out, text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", help="today (probe off) and new of this search-space file; default: every variant "
                   "of VARIANTS")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:SPACE[:KEY=VALUE]...",
                   help="a search to compare (repeat it); default: see --space")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for every variant, e.g. budget.trials=6 (repeat it)")
    p.add_argument("--exported", action="append", default=[], metavar="LABEL=FILE",
                   help="time FILE, a recipe exported earlier, as variant LABEL's instead of running its search")
    add_timing_arguments(p, baseline=True)
    p.add_argument("--goal-runs", type=float, default=10.0, help="the payback the verdict line checks")
    p.add_argument("--work", default="/tmp/autospeed-payback")
    p.add_argument("--out", default=str(RESULTS / "payback.md"))
    p.add_argument("--merge", nargs="+", metavar="FILE", help="measure nothing: gather these results files of "
                   "payback.py (runs already measured) into --out, one table")
    args = p.parse_args()
    if args.merge:
        if args.variant or args.space or args.exported or args.set:
            p.error("--merge measures nothing: it takes no --variant, --space, --set or --exported")
        print(merge([Path(f) for f in args.merge], Path(args.out)))
        return
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    try:
        variants = [parse_variant(v, args.set) for v in args.variant] or default_variants(args.space, args.set)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if any(v.label.startswith("baseline") for v in variants):
        p.error("--variant: labels starting with 'baseline' name the baseline's rows; pick another label")
    if len({v.label for v in variants}) < len(variants):
        p.error(f"--variant labels must differ, got {[v.label for v in variants]}")
    exported: dict[str, Path] = {}
    for text in args.exported:
        label, sep, file = text.partition("=")
        if not sep or label not in {v.label for v in variants}:
            p.error(f"--exported is LABEL=FILE with LABEL one of the variants {[v.label for v in variants]}; "
                    f"got {text!r}")
        exported[label] = Path(file)
    run(args, variants, exported)


def run(args: argparse.Namespace, variants: list[Variant], exported: dict[str, Path]) -> None:
    from autospeed.outcome import median_tta
    from autospeed.recipe import load_recipe
    from autospeed.space import load_spec

    work = Path(args.work)
    out = Path(args.out)
    # every variant is checked before any search starts
    files = {v.label: write_space_variant(v.space, v.overrides, f"payback-{v.label}", work / "spaces")
             for v in variants}
    specs = {label: load_spec(path) for label, path in files.items()}
    for label, path in exported.items():
        recipe = load_recipe(path)  # validates it
        for key in ("workload", "workload_options", "resolved_target"):
            if getattr(recipe, key) != getattr(specs[label], key):
                raise SystemExit(f"--exported {label}={path}: its {key} is {getattr(recipe, key)!r}, the variant's "
                                 f"space {getattr(specs[label], key)!r}: a recipe is timed against its space's "
                                 f"baseline, on the same workload and target")
    seeds = [args.seed_base + r for r in range(args.repeats)]
    print(provenance(end=False), flush=True)

    searched: dict[str, SearchRun | None] = {}
    compute: dict[str, dict] = {}
    best_paths: dict[str, Path | None] = {}
    for v in variants:
        if v.label in exported:
            searched[v.label], compute[v.label], best_paths[v.label] = None, {}, exported[v.label]
            print(f"\n== variant {v.label}: no search, its recipe is {exported[v.label]}", flush=True)
            continue
        print(f"\n== search of variant {v.label}: {files[v.label]}", flush=True)
        searched[v.label] = search_and_export(files[v.label], work, specs[v.label].name, exclusive=True)
        compute[v.label] = search_compute(searched[v.label].tracking_uri, specs[v.label].name)
        best_paths[v.label] = searched[v.label].best_path
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
        best = best_paths[v.label]
        if best is not None:
            best_yaml = yaml.safe_load(best.read_text())
            if best_yaml.get("seed") in seeds:
                raise SystemExit(f"--seed-base: seed {best_yaml['seed']} is variant {v.label}'s search seed; "
                                 f"pick another")
            recipes[v.label] = best_yaml
    runs = time_interleaved(recipes, seeds, work / "timed")

    ttas = {k: [r["tta_seconds"] for r in v] for k, v in runs.items()}
    medians = {k: median_tta(v) for k, v in ttas.items()}
    cell = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    aim = {v.label: f"{specs[v.label].workload}, {specs[v.label].resolved_target.describe()}" for v in variants}
    lines = ["Variants (each search's file is its space file with the overrides merged in, in order, a later one "
             "winning, and its `name` set):", ""]
    lines += [f"- `{v.label}`: {v.described} ({aim[v.label]})" + (
        f"; **no search ran**: its recipe is `{shown(exported[v.label])}` (--exported)" if v.label in exported else "")
        for v in variants]
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
        if s is None:
            lines.append(f"| {v.label} | not run (--exported) |" + " - |" * len(KINDS) + " - |")
            continue
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
        "recipe's (both re-timed above, the baseline of the variant's own space file); interval: bootstrap 90% "
        "over the seeds.", ""]
    rows, verdicts = [], []
    for v in variants:
        s = searched[v.label]
        wall = s.wall_seconds if s is not None else None
        base = baseline_of[v.label]
        row = {"variant": v.label, "search file": v.described, "workload, target": aim[v.label],
               "search wall s": f"{wall:.1f}" if wall is not None else "not run",
               "trials": str(compute[v.label].get("trial", {}).get("runs", 0)) if s is not None else "-",
               "baseline median TTA s": cell(medians[base])}
        rows.append(row)
        if v.label not in runs:
            row.update({"winner median TTA s": "no exported recipe", "payback runs (90% interval)": "never"})
            verdicts.append(f"{v.label}: no recipe to pay back with ({s.export_error if s else 'none given'})")
            continue
        mb, mw = medians[base], medians[v.label]
        low, high = saving_interval(ttas[base], ttas[v.label])

        def pays(saving_seconds: float, wall: float | None = wall) -> str:
            return runs_cell(payback_runs(wall, saving_seconds)) if wall is not None else "-"

        if mw is None:
            saving, pay = "- (its median run missed)", "never"
        elif mb is None:  # the baseline's median run missed: it needed more than its whole budget
            bound = recipes[base]["max_train_seconds"] - mw
            saving, pay = f"> {bound:.2f}", f"< {pays(bound)}"
        else:
            interval = f"{low:.2f} to {high:.2f}" if math.isfinite(low) and math.isfinite(high) else \
                f"{low:.2f} to {high:.2f} (a resampled median missed)"
            saving = f"{mb - mw:.2f} ({interval})"
            pay = f"{pays(mb - mw)} ({pays(high)} to {pays(low)})" if wall is not None else "- (no search ran)"
        row.update({"winner median TTA s": cell(mw), "saving per run s (90% interval)": saving,
                    "payback runs (90% interval)": pay})
        if mb is not None and mw is not None and wall is not None:
            runs_needed = payback_runs(wall, mb - mw)
            met = runs_needed <= args.goal_runs
            sure = met and payback_runs(wall, low) <= args.goal_runs
            verdicts.append(f"{v.label}: {runs_cell(runs_needed)} runs, goal <= {args.goal_runs:g}: "
                            f"{'met' if met else 'NOT met'}" + (", and by the interval's far end too" if sure else ""))
        else:
            verdicts.append(f"{v.label}: see the row above")
    lines += [*table(rows), "", "**Payback: " + "; ".join(verdicts) + ".**", ""]
    knobs = ("batch_size", "accumulation_steps", "optimizer", "lr", "schedule", "warmup_fraction", "precision",
             "compile", "max_train_seconds", "epochs")
    lines += [f"- {label}: `{json.dumps({k: r.get(k) for k in knobs})}`" for label, r in recipes.items()]
    lines += ["", *recipes_as_timed(recipes)]
    warnings = sorted({w for rs in runs.values() for r in rs for w in r["warnings"]})
    if warnings:
        lines += ["", "`autospeed train` warned: " + "; ".join(warnings)]

    device = next(iter(runs.values()))[0].get("environment", {}).get("device", "cpu")
    title = f"{TITLE} ({device}: {', '.join(v.label for v in variants)})"
    text = results_header(title, device) + "\n".join(lines) + "\n"
    write_results(out, text)
    print(text)


if __name__ == "__main__":
    main()
