"""Shared by the experiments: the CPU lock every engineer's benchmarks respect, the
provenance header every results file starts with (commit, command, machine, date, load average),
search-space variants (`dotted.key=value` overrides), a search run as a user runs it,
and recipes timed as production runs (fresh processes, interleaved, same seeds)."""

from __future__ import annotations

import contextlib
import copy
import datetime
import fcntl
import functools
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from autospeed.recipe import Recipe

LOCK_PATH = "/tmp/cpu.lock"
# `python -m experiments all --quick` sets this to 1 for its smoke runs, which measure nothing: where a script
# would hold the CPU lock exclusively it holds it shared, as the tests do (and waits, as they do, for a benchmark
# that holds it exclusively), and every results header says the file is a smoke run.
QUICK_ENV = "EXPERIMENTS_QUICK"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


# Set while a process holds the CPU lock, so that its children (a test's command, a benchmark's quick pass) are
# covered by it instead of queueing behind a benchmark that waits for their own parent: a deadlock.
HELD_ENV = "AUTOSPEED_CPU_LOCK_HELD"


@contextlib.contextmanager
def cpu_lock(exclusive: bool):
    """Exclusive for timing benchmarks (nothing else loads the cores), shared for searches and tests.
    In the quick pass (EXPERIMENTS_QUICK=1 in the environment), always shared.

    A benchmark waiting for the lock is not passed by later shared holders: flock alone lets a new shared
    request in while an exclusive one waits, so a benchmark of many timed parts starved between them while
    tests and analyses came and went. Every request first takes the gate (LOCK_PATH + ".gate") exclusively and
    keeps it until it holds the lock, so requests are served in turn and a waiting benchmark holds up the
    shared requests behind it. A process whose parent holds the lock (HELD_ENV in its environment) is covered by
    that hold and takes nothing. (`flock -s /tmp/cpu.lock cmd` in a shell skips the gate: it may still pass.)"""
    if os.environ.get(HELD_ENV):
        yield
        return
    exclusive = exclusive and not quick()
    with open(LOCK_PATH + ".gate", "a") as gate, open(LOCK_PATH, "a") as f:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        os.environ[HELD_ENV] = "exclusive" if exclusive else "shared"
        try:
            yield
        finally:
            del os.environ[HELD_ENV]
            fcntl.flock(f, fcntl.LOCK_UN)


def quick() -> bool:
    """Whether this run is part of the quick pass (`python -m experiments all --quick`): a smoke run."""
    return os.environ.get(QUICK_ENV, "") == "1"


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample stdev / mean)."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def machine_line(device: str = "cpu") -> str:
    """One line: the machine a benchmark ran on."""
    from autospeed.train.environment import environment

    env = environment(device)
    gpu = f", {env['device_name']}, CUDA {env['cuda']}, driver {env['driver']}" if env["device"] == "cuda" else ""
    return (f"machine: {env['cpu_model']}, {env['cpu_count']} CPUs, {env['torch_threads']} torch threads{gpu}, "
            f"torch {env['torch']}, Python {env['python']}, autospeed {env['autospeed']}, "
            f"{env['platform']}")


# The commit a run on the device machine measures, named by whoever sent the tree there (gpu_checks.sh).
COMMIT_ENV = "AUTOSPEED_COMMIT"


def commit() -> str:
    """`git describe --always --dirty` of the checkout, except that results files do not make it dirty
    (a run regenerating several of them in turn would otherwise call every later one dirty) while
    untracked source files do; a dirty tree names up to five of the paths that differ."""
    if os.environ.get(COMMIT_ENV):  # the device machine's copy of the tree has no current .git
        return f"{os.environ[COMMIT_ENV]} (as {COMMIT_ENV} named it)"
    git = ["git", "-C", str(ROOT)]
    try:
        described = subprocess.run([*git, "describe", "--always"], capture_output=True, text=True,
                                   check=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--", ".",
                                  f":(exclude){RESULTS.relative_to(ROOT)}"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError) as e:
        return f"unknown (git failed: {e})"
    if not changed:
        return described
    paths = [line[3:] for line in changed]
    return f"{described}-dirty ({', '.join(paths[:5])}{f' and {len(paths) - 5} more' if len(paths) > 5 else ''})"


def command() -> str:
    """The command line that ran this script, as typed from the repository root."""
    argv = list(sys.argv)
    with contextlib.suppress(ValueError):
        argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
    text = "python " + shlex.join(argv)
    return text if Path.cwd().resolve() == ROOT else f"cd {shlex.quote(os.getcwd())} && {text}"


def shown(path: str | os.PathLike) -> str:
    """A path as a reader of a results file finds it: relative to the repository when inside it."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(path)


# When the run started: every script imports this module first thing, before its work.
_START = (datetime.datetime.now().astimezone().isoformat(timespec="seconds"), os.getloadavg())


@functools.cache
def _started() -> tuple[str, str, str, tuple[float, float, float]]:
    """(commit, command, date, load average): the commit and command at the first call (a script's start, where it
    prints its provenance), the date and load average when this module was imported; cached for the whole run,
    whichever device is named."""
    return commit(), command(), *_START


def load_line(start: tuple[float, float, float], end: tuple[float, float, float] | None) -> str:
    """One line: the load average (os.getloadavg(): 1, 5 and 15 minutes) when the run started and, with `end`,
    when it wrote its results; with the CPU count, so a reader sees how busy the machine was meanwhile."""
    fmt = lambda load: " ".join(f"{x:.2f}" for x in load)  # noqa: E731
    return (f"load average (1, 5, 15 min; {os.cpu_count()} CPUs): {fmt(start)} at start"
            + (f", {fmt(end)} at end" if end is not None else ""))


def provenance(device: str = "cpu", end: bool = True) -> str:
    """Five lines: the commit, the exact command, the machine, the date and the load average (and a sixth in the
    quick pass, saying so). The commit, date and starting load are taken once per run, so a script that calls
    this when it starts names the commit and date it started at, however long it runs and whatever is committed
    meanwhile; with `end` (a results file's header, written when the run is over) the load average now is added
    as the run's end."""
    commit_, command_, date, load = _started()
    smoke = ("\nquick pass (python -m experiments all --quick): a smoke run of the script, CPU lock shared; "
             "not a measurement") if quick() else ""
    return (f"commit: {commit_}\ncommand: {command_}\n{machine_line(device)}\ndate: {date}\n"
            f"{load_line(load, os.getloadavg() if end else None)}{smoke}")


def results_header(title: str, device: str = "cpu") -> str:
    """The start of every results file: a title and the provenance block (the load average at start and now, at
    the end), then a blank line."""
    return f"# {title}\n\n```\n{provenance(device)}\n```\n\n"


def write_results(path: str | os.PathLike, text: str) -> None:
    """Write a whole results file atomically (temp file + rename), creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def emit_table(title: str, lines: list[str], out: str | None, device: str = "cpu") -> None:
    """Print a results table and, with `out`, write it whole under its provenance header."""
    text = results_header(title, device) + "\n".join(lines) + "\n"
    print()
    print(text)
    if out:
        write_results(out, text)


# ---------------------------------------------------------------- search-space variants
def apply_override(data: dict, override: str) -> dict:
    """A deep copy of a search-space mapping with one `dotted.key=value` merged in.

    The value is read as YAML (`false`, `6`, `[64, 128]`, `{enabled: false}`). A mapping merges
    into the mapping already at that key, key by key; any other value replaces what is there.
    Keys the file's schema does not know are left for load_spec to reject, naming the key."""
    path, sep, text = override.partition("=")
    keys = path.split(".")
    if not sep or not all(keys):
        raise ValueError(f"an override is `dotted.key=value`, e.g. budget.trials=6, but got {override!r}")
    out = copy.deepcopy(data)
    node = out
    for i, key in enumerate(keys[:-1]):
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {override!r}: {'.'.join(keys[:i + 1])} is {node!r}, not a mapping, "
                             f"so it has no key {keys[i + 1]!r}")
    value = yaml.safe_load(text)
    node[keys[-1]] = _merged(node.get(keys[-1]), value)
    return out


def _merged(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{k: _merged(old.get(k), v) for k, v in new.items()}}
    return new


def write_space_variant(space: str | os.PathLike, overrides: list[str], name: str, folder: Path) -> Path:
    """`space` with `overrides` applied and its `name` set, validated and written as <folder>/<name>.yaml:
    the file the search of this variant reads, as a user's own file. Raises SystemExit naming the
    variant when an override is malformed or makes the file invalid."""
    from autospeed.errors import UserError
    from autospeed.space import spec_from_dict

    data = yaml.safe_load(Path(space).read_text())
    try:
        for override in overrides:
            data = apply_override(data, override)
        data = apply_override(data, f"name={name}")
        spec_from_dict(data, f"{space} with {' '.join(overrides) or 'no overrides'}")
    except (ValueError, UserError) as e:
        raise SystemExit(f"search-space variant {name!r}: {e}") from None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------- a search, as a user runs it
@dataclass
class SearchRun:
    """One `autospeed search` command and its export."""

    name: str
    tracking_uri: str
    wall_seconds: float  # the whole `python -m autospeed search` process, start to exit
    best_path: Path | None  # the exported recipe; None when the export failed (no trial reached the target)
    export_error: str | None = None


def search_and_export(space: Path, work: Path, name: str, trials: int | None = None, *,
                      exclusive: bool) -> SearchRun:
    """Run `python -m autospeed search --space SPACE` in a fresh process, time it, then export its best recipe.

    `exclusive`: hold the CPU lock exclusively, when the search's wall time is itself a measurement;
    shared, when only its recipe is. Storage and the MLflow store live under `work`."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "autospeed", "search", "--space", str(space), "--tracking-uri", uri,
           "--storage-path", str(work / "runs"), "--name", name]
    if trials:
        cmd += ["--trials", str(trials)]
    with cpu_lock(exclusive=exclusive):
        start = time.perf_counter()
        code = subprocess.run(cmd).returncode
        wall_seconds = time.perf_counter() - start
    if code:
        raise SystemExit(f"`autospeed search --space {space}` exited {code} (its error is above)")
    best = work / f"{name}_best.yaml"
    export = subprocess.run([sys.executable, "-m", "autospeed", "export", "--name", name, "--tracking-uri", uri,
                             "--out", str(best)], capture_output=True, text=True)
    if export.returncode:
        said = export.stderr.strip().splitlines()
        return SearchRun(name, uri, wall_seconds, None, said[-1] if said else f"exit {export.returncode}")
    return SearchRun(name, uri, wall_seconds, best)


def search_compute(tracking_uri: str, name: str) -> dict[str, dict[str, float]]:
    """The latest search named `name`, per kind of child run (probe, trial, confirm, ...): how many runs
    and the train-clock and wall seconds they recorded (`train_seconds`, `wall_seconds`; a kind whose
    runs record neither shows 0). For probes, whose runs record neither, wall is the whole probe stage's
    (the parent's `probe_seconds`)."""
    from autospeed.track import names, runs
    from autospeed.track.store import connect

    client = connect(tracking_uri)
    out: dict[str, dict[str, float]] = {}
    parent = runs.find_parent(client, name)
    for run in runs.child_runs(client, parent):
        kind = out.setdefault(run.data.tags.get(names.TAG_KIND, "?"), {"runs": 0, "train_seconds": 0.0,
                                                                   "wall_seconds": 0.0})
        kind["runs"] += 1
        kind["train_seconds"] += run.data.metrics.get(names.M_TRAIN_SECONDS, 0.0)
        kind["wall_seconds"] += run.data.metrics.get(names.M_WALL_SECONDS, 0.0)
    if names.KIND_PROBE in out:  # probe runs record samples/s, not seconds: the stage's wall is on the parent
        out[names.KIND_PROBE]["wall_seconds"] = parent.data.metrics.get(names.M_PROBE_SECONDS, 0.0)
    return out


# ---------------------------------------------------------------- recipes timed as production runs
def add_timing_arguments(parser, baseline: bool) -> None:
    """The options of the production-run timing every comparison shares: --repeats, --seed-base and,
    with `baseline`, the room the baseline gets (--baseline-seconds, --baseline-epochs)."""
    parser.add_argument("--repeats", type=int, default=7, help="timed production runs per recipe, interleaved")
    parser.add_argument("--seed-base", type=int, default=500, help="repeat r trains with seed seed-base + r")
    if baseline:
        parser.add_argument("--baseline-seconds", type=float, default=60.0,
                            help="the baseline's train-clock budget, at least (searched recipes keep their own)")
        parser.add_argument("--baseline-epochs", type=float, default=60.0,
                            help="the baseline's planned epochs, at least (refused unless its schedule is constant)")


def train_fresh(recipe_yaml: dict, work: Path, label: str, seed: int) -> dict:
    """Train one recipe (YAML mapping) with `seed` in a fresh `autospeed train --json --no-track` process:
    its JSON result, plus `warnings` (its stderr's warning lines) and `process_wall_seconds` (the process,
    start to exit: interpreter, imports, data, training and evaluation)."""
    path = work / f"{label}-seed{seed}.yaml"
    path.write_text(yaml.safe_dump({**recipe_yaml, "seed": seed}, sort_keys=False))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autospeed", "train", "--config", str(path), "--json",
                           "--no-track"], capture_output=True, text=True, cwd=work)
    process_wall_seconds = time.perf_counter() - start
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{label} seed {seed}: `autospeed train` exited {proc.returncode} without a result:\n"
                         f"{proc.stderr[-2000:]}") from None
    result["warnings"] = [line.replace(str(path), f"the {label} recipe") for line in proc.stderr.splitlines()
                          if line.startswith("warning:")]
    result["process_wall_seconds"] = process_wall_seconds
    return result


def time_interleaved(recipes: dict[str, dict], seeds: list[int], work: Path) -> dict[str, list[dict]]:
    """Train every recipe once per seed, interleaved (A B C A B C ...: machine drift hits all alike), each
    in a fresh process, holding the CPU lock exclusively. {label: [result per seed]}."""
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {label: [] for label in recipes}
    with cpu_lock(exclusive=True):
        for seed in seeds:
            for label, recipe_yaml in recipes.items():
                r = train_fresh(recipe_yaml, work, label, seed)
                runs[label].append(r)
                print(f"seed {seed} {label}: {r['status']} TTA {r['tta_seconds']} s, "
                      f"{r['samples_per_second'] or 0:.0f} samples/s", flush=True)
    return runs


def recipes_as_timed(recipes: dict[str, dict]) -> list[str]:
    """Results-file lines that hold every timed recipe whole, as the YAML its runs trained (each with its run's
    seed), one folded block per label: the results file alone says what was timed, and the script leaves no
    copy beside it in experiments/results/ that `python -m experiments list` would have to declare."""
    lines = ["The recipes, as timed (each run trained this YAML with its own seed):", ""]
    for label, recipe in recipes.items():
        lines += [f"<details><summary>{label}</summary>", "", "```yaml",
                  yaml.safe_dump(recipe, sort_keys=False).rstrip("\n"), "```", "", "</details>", ""]
    return lines[:-1]


def describe_runs(runs: list[dict]) -> tuple[str, str, str, str]:
    """(median, min, max, every run) of TTAs as table cells; a run that missed the target shows its status."""
    from autospeed.outcome import median_tta

    ttas = [r["tta_seconds"] for r in runs]
    reached = [x for x in ttas if x is not None]
    median = median_tta(ttas)
    cell = lambda x: f"{x:.2f}" if x is not None else "-"  # noqa: E731
    every = ", ".join(f"{r['tta_seconds']:.2f}" if r["tta_seconds"] is not None else r["status"] for r in runs)
    return (cell(median) if median is not None else "missed", cell(min(reached) if reached else None),
            cell(max(reached) if reached else None), every)


def roomier_baseline(baseline: Recipe, seconds: float, epochs: float) -> tuple[Recipe, str]:
    """The baseline with a budget of at least `seconds` and `epochs`, and a sentence saying what changed.
    Refused (SystemExit) for more epochs when its learning rate depends on the planned epochs."""
    room = {"max_train_seconds": max(baseline.max_train_seconds, seconds), "epochs": max(baseline.epochs, epochs)}
    changed = {k: v for k, v in room.items() if v != getattr(baseline, k)}
    if not changed:
        return baseline, "The baseline runs as the space file defines it."
    if "epochs" in changed and (baseline.schedule != "constant" or baseline.warmup_fraction > 0):
        raise SystemExit(f"the baseline's schedule is {baseline.schedule} with warmup_fraction "
                         f"{baseline.warmup_fraction:g}: its learning rate depends on the planned epochs, so "
                         f"stretching them would time another recipe; pass --baseline-epochs {baseline.epochs:g}")
    was = ", ".join(f"{k} {getattr(baseline, k):g} -> {v:g}" for k, v in changed.items())
    return baseline.model_copy(update=changed), (
        f"The baseline gets more room so that it reaches the target ({was}). Its schedule is constant without "
        f"warm-up, so its learning rate at every step is the space file's: the longer budget moves only where a "
        f"run that has not reached the target would stop.")
