"""The driver of a search SIGKILLed at random moments, each time followed by `--resume`: does every search
resume to completion with every finished trial and every finished confirmation and ablation run kept once, and do
Optuna, MLflow and the ledger agree? (issues 30 and 40; docs/design.md "Crash anywhere, lose nothing"). The suite's
tests/reliability/test_kill_anywhere.py kills at points a hook chooses; here a clock chooses them, as the OOM killer
or a preemption would.

    python experiments/kill_anywhere.py                    # 10 searches x 6 kills, at least 50 landed (~30 min)
    python experiments/kill_anywhere.py --quick            # 2 searches x 2 kills: the script end to end
    python experiments/kill_anywhere.py --searches 10 --kills-per-search 6 --trials 5 --confirm-repeats 2 \\
        --seed 0 --min-kills 50 --out experiments/results/kill_anywhere.md

The workload is tiny on purpose, so that kills land everywhere in a search and not mostly inside one long trial:
the faulty plugin of tests/reliability/conftest.py (never failing: oom_above 10000), --trials trials of a
fraction of a second, probe off, ASHA off, random sampler, the top 1 and the baseline confirmed with
--confirm-repeats interleaved rounds (each run a fresh process) and the winner's ablation with as many rounds (0:
neither, the measurement before issue 40). A kill's phase (start-up and trials, confirmation, ablation, export
and close) is the last phase line the killed run printed (_kill_confirm.py); kills inside confirmation and the
ablation are counted apart.

First one unkilled search in a fresh folder is timed: its wall seconds are T, the kill window (--window: given
instead). Then, for each search, in a fresh folder (its own sqlite MLflow store and storage path):
- `python -m autospeed search --space S.yaml --tracking-uri sqlite:///... --storage-path ... --resume` is
  started in its own session (always with --resume, as a preemption wrapper does: the first run has nothing to
  resume and starts the search), and its driver process alone (not its group) is SIGKILLed at a moment drawn
  uniformly from [0, T] seconds after its start (random.Random(--seed)). What is left of its process group (the
  Ray processes it started) is then SIGKILLed too, and the next run starts. A run that ends by itself before
  its kill time "finished before the kill": not a kill; it completed the search, so its search gets no more
  kills (a non-zero exit there is a failure). This repeats until --kills-per-search kills landed.
- The search is run once more, unkilled, to its end: exit 0 expected.
- Checks at its end: exit 0; one search folder; one parent run (autospeed.kind = search) in the experiment;
  records.audit(...).agree (ledger = MLflow final trial runs = Optuna finished trials, each once); the ledger
  holds exactly --trials trials, one of them the baseline; no MLflow trial run left RUNNING or KILLED. Lost: a
  trial id in the ledger after some kill (the ledger is written once a trial's MLflow run is final) and not in
  it at the end, or whose entry changed since. Duplicated: a trial id twice among MLflow's trial runs or
  Optuna's finished trials, or more finished trials (ledger, MLflow, Optuna) than --trials. The same of the
  confirmation and ablation runs (_kill_confirm.py): none left RUNNING, one finished run per planned (recipe,
  knob, round), none FINISHED after a kill and missing or changed at the end.
- For every resume (a run after the first): whether it said it rebuilt the search from its own records
  (Ray Tune's state torn or missing: the `resume: ... rebuilt the search from its own records` line), restored
  Ray Tune's state, or started anew (killed before it wrote its state: `--resume: no earlier search ...
  starting it`); unknown when it was killed before it said. Time to resume: seconds from the command's start to
  the moment this script reads its `search 'NAME' (ID): ...` line (stdout read line by line, PYTHONUNBUFFERED=1).
  A search's wall: its first run's start to its last run's exit, the kills and the reaping included.
More searches than --searches run while fewer than --min-kills kills landed.

A failure (a run that fails, a check that does not hold) stops the experiment: its folder is kept and named,
and the results file shows what failed, with the last 30 lines of the failing run's stderr. Other folders are
deleted (--keep: kept). The CPU lock (/tmp/cpu.lock) is held shared: the searches' times are not a benchmark,
and other work (tests) on the machine slows them. Writes --out whole at the end, provenance header first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, cpu_lock, provenance, results_header, shown, write_results
from _kill_confirm import ProductionRecord, phase_of
from _kill_report import STDERR_TAIL_LINES, report

sys.path.insert(0, str(ROOT))
from tests.reliability.conftest import FAULTY_PLUGIN

NAME = "killed"
SEARCH_LINE = re.compile(r"^search '(.+)' \((.+)\): ")
REBUILT = "rebuilt the search from its own records"
STARTED = "--resume: no earlier search named"
FINAL_TIMEOUT_SECONDS = 600  # only guards against a hang: an unkilled search here takes tens of seconds


def space_file(folder: Path, trials: int, confirm_repeats: int) -> Path:
    """The search space (as tests/reliability/test_kill_anywhere.py's, with confirmation and ablation) and its
    plugin, written into `folder`."""
    (folder / "faulty_plugin.py").write_text(textwrap.dedent(FAULTY_PLUGIN))
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump({
        "name": NAME, "workload": "faulty_plugin:faulty", "workload_options": {"oom_above": 10_000},
        "target_accuracy": 0.9, "budget": {"trials": trials, "max_train_seconds": 60},
        "asha": {"enabled": False}, "sampler": {"kind": "random", "seed": 0},
        "confirm": {"top_k": 1, "repeats": confirm_repeats, "ablation": confirm_repeats > 0},
        "probe": {"enabled": False},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 20, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.02, 0.2]}, "batch_size": {"choice": [16, 32, 64]}},
    }, sort_keys=False))
    return path


def cli_env(plugin_dir: Path) -> dict[str, str]:
    """As tests/reliability/conftest.py's cli_env: no MLflow retries, no inherited tracking URI; the plugin
    importable; stdout unbuffered, so a line is read when it is printed."""
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")]))}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


@dataclass
class Run:
    """One `autospeed search --resume` process."""

    index: int
    kill_at: float | None  # seconds after its start; None: unkilled
    rc: int | None = None
    wall_seconds: float = 0.0
    search_line_seconds: float | None = None  # its start to the moment its `search '...' (...)` line was read
    said: str = "unknown"  # started, restored, rebuilt; unknown: killed before it said
    phase: str = ""  # where it was when it ended (_kill_confirm.phase_of)
    stdout: str = ""
    stderr_path: Path | None = None

    @property
    def killed(self) -> bool:
        return self.rc == -signal.SIGKILL

    def stderr_tail(self) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path and self.stderr_path.exists() else ""
        return "\n".join(text.splitlines()[-STDERR_TAIL_LINES:])


def reap(pgid: int, timeout_seconds: float = 30) -> None:
    """SIGKILL what is left of a process group (Ray processes a killed driver started), until none is left."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return  # the group is empty
        except PermissionError:
            return  # only zombies or a process that is not ours: nothing we may kill
        time.sleep(0.05)  # killed processes leave the group once their parents (or init) reap them


def run_once(args: list[str], folder: Path, env: dict[str, str], index: int, kill_at: float | None) -> Run:
    """Start `python -m autospeed ARGS` in its own session; SIGKILL its driver `kill_at` seconds after its start
    (None: let it end, within FINAL_TIMEOUT_SECONDS), then its process group. Its stdout is read line by line."""
    run = Run(index, kill_at, stderr_path=folder / f"run-{index:02d}.err")
    lines: list[str] = []
    with open(run.stderr_path, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "autospeed", *args], cwd=folder, env=env,
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True)

    def read() -> None:
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            if run.search_line_seconds is None and SEARCH_LINE.match(line):
                run.search_line_seconds = time.perf_counter() - start
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(kill_at if kill_at is not None else FINAL_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)  # the driver alone, as the OOM killer does
        proc.wait()
    run.wall_seconds = time.perf_counter() - start
    reap(proc.pid)  # its group id is its pid (its own session)
    reader.join(30)  # the pipe closes once every process holding it is gone
    run.rc = proc.returncode
    if kill_at is None and run.rc == -signal.SIGKILL:
        run.rc = None  # ran past FINAL_TIMEOUT_SECONDS: a hang, not a kill
    run.stdout = "\n".join(lines)
    (folder / f"run-{index:02d}.out").write_text(run.stdout + "\n")
    run.said, run.phase = what_it_said(run, lines), phase_of(lines)
    return run


def what_it_said(run: Run, lines: list[str]) -> str:
    """How a run of `search --resume` went on: `started` (nothing to resume: it said so), `rebuilt` (from the
    search's own records: it said so, right after its search line), `restored` (Ray Tune's state: said by
    nothing, so known only once the run got past that choice: it ended by itself, or printed a line after its
    search line, a trial's, which the search prints only once Tune runs), else `unknown` (killed before)."""
    if any(STARTED in line for line in lines):
        return "started"
    if any(REBUILT in line for line in lines):
        return "rebuilt"
    at = next((i for i, line in enumerate(lines) if SEARCH_LINE.match(line)), None)
    if at is None:
        return "unknown"
    later = [line for line in lines[at + 1:] if line.strip() and not line.startswith(("tracking:", "resume:"))]
    return "restored" if not run.killed or later else "unknown"


@dataclass
class SearchResult:
    index: int
    folder: Path
    runs: list[Run] = field(default_factory=list)
    wall_seconds: float = 0.0
    kills: int = 0
    finished_before_kill: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # checks that did not hold
    audit: str = ""
    ledger: int = 0
    production: ProductionRecord = field(default_factory=ProductionRecord)  # confirmation and ablation runs

    @property
    def ok(self) -> bool:
        return not self.problems


def ledger_snapshot(storage: Path) -> dict[str, bytes]:
    """{trial id: its ledger entry} of the latest search under `storage` (empty before it wrote its state)."""
    from autospeed.search.storage import latest_search_dir

    search_dir = latest_search_dir(str(storage), NAME)
    if search_dir is None:
        return {}
    return {i: search_dir.ledger(i).read_bytes() for i in search_dir.finished_ids()}


def check_search(result: SearchResult, storage: Path, uri: str, trials: int, seen: dict[str, bytes],
                 confirm_repeats: int) -> None:
    """The end-of-search checks (module docstring); what does not hold goes to result.problems."""
    from mlflow.tracking import MlflowClient

    from autospeed.search.records import audit
    from autospeed.search.storage import latest_search_dir, search_root

    last = result.runs[-1]
    if last.rc != 0:
        result.problems.append(f"the unkilled run exited {last.rc if last.rc is not None else 'never (a hang)'}")
    folders = [p for p in search_root(str(storage), NAME).iterdir() if p.is_dir()]
    if len(folders) != 1:
        result.problems.append(f"{len(folders)} search folders under the storage path: "
                               f"{sorted(p.name for p in folders)}")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(NAME)
    every = client.search_runs([experiment.experiment_id], max_results=5000) if experiment else []
    parents = [r for r in every if r.data.tags.get("autospeed.kind") == "search"]
    if len(parents) != 1:
        result.problems.append(f"{len(parents)} parent runs (autospeed.kind = search), not 1")
        if not parents:
            return
    trial_runs = [r for r in every if r.data.tags.get("autospeed.kind") == "trial"]
    left = [f"{r.data.tags.get('autospeed.trial_id')} {r.info.status}" for r in trial_runs
            if r.info.status in ("RUNNING", "KILLED")]
    if left:
        result.problems.append(f"MLflow trial runs left RUNNING or KILLED: {left}")
    search_dir = latest_search_dir(str(storage), NAME)
    records = audit(search_dir, NAME, client, parents[0].info.run_id)
    result.audit, result.ledger = records.describe(), len(records.ledger)
    if not records.agree:
        result.problems.append(f"the records disagree: {records.describe()}; ledger {sorted(records.ledger)}, "
                               f"MLflow {sorted(records.mlflow)}, Optuna {sorted(records.optuna)}")
    if len(records.ledger) != trials:
        result.problems.append(f"the ledger holds {len(records.ledger)} trials, the space {trials}")
    baselines = [r for r in trial_runs if r.data.tags.get("autospeed.baseline") == "true"
                 and r.info.status in ("FINISHED", "FAILED")]
    if len(baselines) != 1:
        result.problems.append(f"{len(baselines)} finished baseline trial runs, not 1")
    final = ledger_snapshot(storage)
    result.lost = sorted(i for i in seen if i not in final or final[i] != seen[i])
    all_trial_ids = [r.data.tags.get("autospeed.trial_id") for r in trial_runs]
    twice = {i for i in all_trial_ids if all_trial_ids.count(i) > 1} | {i for i in records.optuna
                                                                          if records.optuna.count(i) > 1}
    too_many = [f"{what} {n}" for what, n in (("ledger", len(records.ledger)), ("MLflow", len(records.mlflow)),
                                               ("Optuna", len(records.optuna))) if n > trials]
    result.duplicated = sorted(twice) + too_many
    if result.lost:
        result.problems.append(f"lost (in the ledger after a kill, missing or changed at the end): {result.lost}")
    if result.duplicated:
        result.problems.append(f"duplicated: {result.duplicated}")
    result.production.check(uri, confirm_repeats)
    result.problems += result.production.problems


def one_search(index: int, folder: Path, trials: int, confirm_repeats: int, kills: int, window_seconds: float,
               rng: random.Random) -> SearchResult:
    """One search killed `kills` times at random moments (unless it finishes first), then run to its end."""
    folder.mkdir(parents=True)
    space = space_file(folder, trials, confirm_repeats)
    storage, uri = folder / "store", f"sqlite:///{folder / 'mlflow.db'}"
    args = ["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(storage), "--resume"]
    env = cli_env(folder)
    result = SearchResult(index, folder)
    seen: dict[str, bytes] = {}  # ledger entries seen after some kill
    start = time.perf_counter()
    while result.kills < kills:
        kill_at = rng.uniform(0, window_seconds)
        run = run_once(args, folder, env, len(result.runs), kill_at)
        result.runs.append(run)
        if run.killed:
            result.kills += 1
            seen.update(ledger_snapshot(storage))
            result.production.after_kill(uri)
            print(f"  search {index} run {run.index}: killed at {kill_at:.1f} s in {run.phase} ({run.said}"
                  f"{'' if run.search_line_seconds is None else f', search line at {run.search_line_seconds:.1f} s'}"
                  f"), ledger {len(seen)}", flush=True)
            continue
        result.finished_before_kill += 1
        print(f"  search {index} run {run.index}: ended by itself with exit {run.rc} after {run.wall_seconds:.1f} s,"
              f" before its kill at {kill_at:.1f} s ({run.said})", flush=True)
        if run.rc != 0:
            result.problems.append(f"run {run.index} (to be killed at {kill_at:.1f} s) exited {run.rc} by itself")
            result.wall_seconds = time.perf_counter() - start
            return result
        break  # the search is complete: the unkilled run below resumes a finished search
    run = run_once(args, folder, env, len(result.runs), None)
    result.runs.append(run)
    result.wall_seconds = time.perf_counter() - start
    check_search(result, storage, uri, trials, seen, confirm_repeats)
    print(f"  search {index}: final run exit {run.rc} after {run.wall_seconds:.1f} s ({run.said}); "
          f"{result.kills} kills, {result.finished_before_kill} finished before the kill, {result.audit}, "
          f"{result.production.finished} confirmation and ablation runs; "
          f"{'ok' if result.ok else 'FAILED: ' + '; '.join(result.problems)}", flush=True)
    return result


def calibrate(folder: Path, trials: int, confirm_repeats: int) -> float:
    """The wall seconds of one unkilled search in a fresh folder (exit 0 required): the kill window."""
    folder.mkdir(parents=True)
    space = space_file(folder, trials, confirm_repeats)
    args = ["search", "--space", str(space), "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}",
            "--storage-path", str(folder / "store"), "--resume"]
    run = run_once(args, folder, cli_env(folder), 0, None)
    if run.rc != 0:
        raise SystemExit(f"kill_anywhere: the unkilled search exited {run.rc}; its folder is kept: {folder}\n"
                         f"{run.stdout}\n{run.stderr_tail()}")
    return run.wall_seconds


def code_line() -> str:
    """Which autospeed code the searches ran: its folder (a snapshot of the tree, run with PYTHONPATH, names its
    own) and a digest of its Python files, to tell it from the tree's later edits."""
    import hashlib

    import autospeed

    package = Path(autospeed.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return f"autospeed code: {package}, sha256 of its .py files {digest.hexdigest()[:16]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--searches", type=int, default=10, help="searches at least (more while --min-kills not met)")
    ap.add_argument("--kills-per-search", type=int, default=6, help="kills that land in each search")
    ap.add_argument("--min-kills", type=int, default=50, help="more searches run until this many kills landed")
    ap.add_argument("--trials", type=int, default=5, help="trials per search (the baseline included)")
    ap.add_argument("--confirm-repeats", type=int, default=2, help="confirmation and ablation rounds (0: neither)")
    ap.add_argument("--seed", type=int, default=0, help="of the kill moments' draw")
    ap.add_argument("--window", type=float, help="kill moments are drawn from [0, WINDOW] s (default: the wall "
                                                 "time of one unkilled search, measured first)")
    ap.add_argument("--quick", action="store_true", help="2 searches x 2 kills, no minimum: the script end to end")
    ap.add_argument("--keep", action="store_true", help="keep every search's folder, not only a failed one's")
    ap.add_argument("--out", default=None, help=f"results file (default: {RESULTS}/kill_anywhere.md; --quick: "
                                                f"/tmp/kill_anywhere_quick.md)")
    args = ap.parse_args()
    if args.quick:
        args.searches, args.kills_per_search, args.min_kills = 2, 2, 0
    out = Path(args.out or ("/tmp/kill_anywhere_quick.md" if args.quick else RESULTS / "kill_anywhere.md"))
    code = code_line()  # before any search: the code they run
    print(provenance(end=False), code, sep="\n", flush=True)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kill_anywhere-"))
    print(f"working in {work}", flush=True)
    results: list[SearchResult] = []
    failed = None
    with cpu_lock(exclusive=False):
        begun = time.perf_counter()
        measured = args.window is None
        window = args.window if args.window is not None else calibrate(work / "calibration", args.trials,
                                                                       args.confirm_repeats)
        print(f"kill window: [0, {window:.1f}] s ({'an unkilled search took' if measured else 'given'} "
              f"{window:.1f} s)", flush=True)
        while len(results) < args.searches or sum(s.kills for s in results) < args.min_kills:
            result = one_search(len(results), work / f"search-{len(results):02d}", args.trials,
                                args.confirm_repeats, args.kills_per_search, window, rng)
            results.append(result)
            if not result.ok:
                failed = result
                print(f"kill_anywhere: search {result.index} FAILED; its folder is kept: {result.folder}", flush=True)
                break
            if not args.keep:
                shutil.rmtree(result.folder)
        elapsed = time.perf_counter() - begun
    if failed is None and not args.keep:
        with contextlib.suppress(OSError):
            shutil.rmtree(work)
    text = results_header("Kill anywhere: a search's driver SIGKILLed at random moments, then --resume")
    text = text.replace("\n```\n\n", f"\n{code}\n```\n\n", 1) + report(results, window, measured, args, failed,
                                                                         elapsed)
    write_results(out, text)
    print()
    print(text)
    print(f"wrote {shown(out)}")
    return 1 if failed is not None else 0


if __name__ == "__main__":
    sys.exit(main())
