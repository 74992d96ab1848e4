"""python -m experiments: list, run all, run one of the experiments, or check that the cited results are as new as
their code (see experiments/__init__.py)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import experiments
from experiments import EXPERIMENTS, QUICK, RESULTS, Experiment, Run, _stale, find

ROOT = Path(__file__).resolve().parents[1]
QUICK_ENV = "EXPERIMENTS_QUICK"  # as _common.QUICK_ENV: the CPU lock shared, headers say "quick pass"
# The quick pass's smoke runs train tiny models, one thread each: beside the test suite's other workers (or its
# own --jobs), more threads only wait on each other, and a waiting OpenMP thread spins a core at 100%.
QUICK_THREADS = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
# What the quick pass imports once, before it forks a child per script: each script would spend 2-3 s of its
# few seconds importing these. Importing them runs no torch op (no OpenMP thread pool) and touches no GPU, so a
# forked child starts as clean as a new interpreter; the parent must run nothing else before it forks.
PRELOAD = ("torch", "torch._dynamo", "yaml", "optuna", "matplotlib.pyplot", "autospeed.recipe", "autospeed.space",
           "autospeed.outcome", "autospeed.train.trainer", "autospeed.train.environment", "autospeed.workloads",
           "autospeed.search")


def argv_of(e: Experiment, args: tuple[str, ...] | list[str]) -> list[str]:
    """The command that runs script `e` with `args`, from the repository root."""
    return (["bash", e.path] if e.file.endswith(".sh") else [sys.executable, e.path]) + list(args)


def shown(argv: list[str]) -> str:
    return shlex.join(["python" if a == sys.executable else a for a in argv])


def quick_args(e: Experiment, out: Path) -> list[str]:
    return [a.replace("{out}", str(out)).replace("{quick}", QUICK) for a in e.quick or ()]


def gpu() -> str | None:
    """The first CUDA GPU nvidia-smi lists, or None (no nvidia-smi, or no GPU)."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((line.strip() for line in listed.splitlines() if line.startswith("GPU ")), None)


@dataclass
class Outcome:
    name: str
    status: str  # ok, failed (exit N), missing FILE, skipped: why
    seconds: float = 0.0
    cpu_seconds: float | None = None  # user + system, the command's own and its children's


def skipped(e: Experiment, has_gpu: str | None, quick: bool) -> str | None:
    """Why `all` leaves `e` out, or None."""
    if e.helper:
        return "a helper, not an experiment"
    if e.gpu and not has_gpu:
        return "needs a CUDA GPU and nvidia-smi lists none"
    if quick and e.quick is None:
        return e.note or "no quick pass"
    return None


def outcome(e: Experiment, code: int, seconds: float, expect: list[Path], log: Path | None,
            cpu_seconds: float | None = None) -> Outcome:
    """What a finished command amounts to; a failure shows the end of its log."""
    missing = [p for p in expect if not p.exists()]
    status = f"failed (exit {code})" if code else f"missing {missing[0]}" if missing else "ok"
    if status != "ok" and log is not None:
        tail = log.read_text().splitlines()[-40:]
        print(f"== {e.name}: {status}; the end of {log}:\n" + "\n".join(f"   {line}" for line in tail), flush=True)
    else:
        print(f"== {e.name}: {status} in {seconds:.1f} s", flush=True)
    return Outcome(e.name, status, seconds, cpu_seconds)


def run_full(e: Experiment, argv: list[str]) -> int:
    print(f"== {e.name}: {shown(argv)}", flush=True)
    return subprocess.run(argv, cwd=ROOT).returncode


def fork_script(e: Experiment, args: list[str], env: dict[str, str], log: Path) -> int:
    """Start `python experiments/<e.file> ARGS` as a forked child of this (preloaded) process, its output to `log`:
    the child runs the script as __main__ with the argv, sys.path[0] and environment that command would have.
    Returns the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [e.path, *args]
        sys.path[0] = str(ROOT / "experiments")
        runpy.run_path(e.path, run_name="__main__")
        code = 0
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the child reports everything and exits
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_quick(todo: list[Experiment], folder: Path, jobs: int, fresh: bool) -> list[Outcome]:
    """Every quick pass into `folder`, `jobs` at a time: forked from this process once PRELOAD is imported, or
    with `fresh` (and for a .sh) each in a new interpreter."""
    env = {**os.environ, QUICK_ENV: "1", "MPLBACKEND": "Agg", **QUICK_THREADS}
    if not fresh:
        os.environ.update({"MPLBACKEND": "Agg", **QUICK_THREADS})  # before torch loads: OpenMP reads them then
        for module in PRELOAD:  # imports only: a torch op here would start OpenMP's threads, and a child that
            importlib.import_module(module)  # trains after the fork would wait on them forever
    pending, running, done = list(todo), {}, []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            e = pending.pop(0)
            args, log = quick_args(e, folder), folder / f"{e.name}.log"
            print(f"== {e.name}: {shown(argv_of(e, args))}", flush=True)
            if fresh or e.file.endswith(".sh"):
                with open(log, "w") as f:
                    proc = subprocess.Popen(argv_of(e, args), cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
                pid = proc.pid
            else:
                pid = fork_script(e, args, env, log)
            running[pid] = (e, time.perf_counter(), log)
        pid, status, usage = os.wait4(-1, 0)  # usage: the child's CPU time and its waited-for children's
        if pid not in running:
            continue
        e, start, log = running.pop(pid)
        done.append(outcome(e, os.waitstatus_to_exitcode(status), time.perf_counter() - start,
                            [folder / w for w in e.quick_writes], log, usage.ru_utime + usage.ru_stime))
    return done


def run_all(chosen: list[Experiment], quick: bool, out_dir: str | None, jobs: int, fresh: bool) -> int:
    has_gpu = gpu() if any(e.gpu for e in chosen) else None
    outcomes: list[Outcome] = []
    start = time.perf_counter()
    todo = []
    for e in chosen:
        why = skipped(e, has_gpu, quick)
        if why:
            print(f"== {e.name}: skipped ({why})", flush=True)
            outcomes.append(Outcome(e.name, f"skipped: {why}"))
        else:
            todo.append(e)
    if quick:
        folder = Path(out_dir or tempfile.mkdtemp(prefix="experiments-quick-")).resolve()
        results = (ROOT / RESULTS).resolve()
        if folder == results or results in folder.parents:
            raise SystemExit(f"--out-dir {folder}: the quick pass never writes under {RESULTS}")
        folder.mkdir(parents=True, exist_ok=True)
        print(f"quick pass into {folder}" + (f", {jobs} at a time" if jobs > 1 else ""), flush=True)
        outcomes += run_quick(todo, folder, jobs, fresh)
    else:
        for e in todo:
            for r in e.runs:
                if r.at:
                    why = f"archived: the script at {r.at} wrote its files; today's writes others"
                    print(f"== {e.name}: {shown(argv_of(e, r.args))} skipped ({why})", flush=True)
                    outcomes.append(Outcome(e.name, f"skipped: {why}"))
                    continue
                t0 = time.perf_counter()
                code = run_full(e, argv_of(e, r.args))
                outcomes.append(outcome(e, code, time.perf_counter() - t0, [ROOT / w for w in r.writes], None))
    own = os.times()
    cpu = own.user + own.system + own.children_user + own.children_system
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{'quick pass' if quick else 'all'}: {time.perf_counter() - start:.1f} s wall, {cpu:.1f} s CPU (user + "
          f"system, this process and every child), load average now {load} on {os.cpu_count()} CPUs", flush=True)
    order = {e.name: i for i, e in enumerate(EXPERIMENTS)}
    for o in sorted(outcomes, key=lambda o: order[o.name]):
        print(f"  {o.name:<20} {o.status}" + (f" ({o.seconds:.1f} s" if o.seconds else "")
              + (f", CPU {o.cpu_seconds:.1f} s" if o.cpu_seconds is not None else "") + (")" if o.seconds else ""),
              flush=True)
    return 1 if any(o.status != "ok" and not o.status.startswith("skipped") for o in outcomes) else 0


def listing(as_json: bool) -> None:
    if as_json:
        print(json.dumps([{"name": e.name, "file": e.path, "what": e.what, "gpu": e.gpu, "helper": e.helper,
                           "measures": list(e.paths(Run((), ()))), "unmeasured": e.unmeasured,
                           "runs": [{"command": shown(argv_of(e, r.args)), "writes": list(r.writes),
                                     "measures": list(e.paths(r)), "at": r.at or None, "note": r.note}
                                    for r in e.runs],
                           "quick": None if e.quick is None else shown(argv_of(e, quick_args(e, Path("QUICK")))),
                           "quick_writes": list(e.quick_writes)} for e in EXPERIMENTS], indent=1))
        return
    for e in EXPERIMENTS:
        flags = " [needs a GPU]" if e.gpu else " [helper]" if e.helper else ""
        print(f"{e.name}{flags}: {e.what}")
        if e.measures:
            print(f"    measures: {', '.join(e.paths(Run((), ())))}")
        elif e.unmeasured:
            print(f"    measures: no paths ({e.unmeasured})")
        for r in e.runs:
            kind = f"archived ({e.file} at {r.at}, not rerun by all)" if r.at else "all"
            extra = [p for p in r.measures if p not in e.measures] if e.measures else []
            print(f"    {kind}:   {shown(argv_of(e, r.args))}\n           -> {', '.join(r.writes)}"
                  + (f"\n           measures also: {', '.join(extra)}" if extra else "")
                  + (f"\n           ({r.note})" if r.note else ""))
        if e.quick is not None:
            print(f"    quick: {shown(argv_of(e, quick_args(e, Path('QUICK'))))}\n"
                  f"           -> {', '.join(f'QUICK/{w}' for w in e.quick_writes)}")
        elif e.note:
            print(f"    quick: none ({e.note})")
        print()


def stale_entries() -> list[_stale.Cited]:
    """Every results file a listed command writes, with the paths its experiment measures, the command that
    regenerates it, and why it is skipped where it is (an archived run, an experiment that declares no paths)."""
    out = []
    for e in EXPERIMENTS:
        for r in e.runs:
            skip = (f"archived: {e.file} at {r.at}" if r.at else
                    "" if e.measures else f"{e.name} declares no paths (experiments/__init__.py says why)")
            out += [_stale.Cited(w, e.paths(r), shown(argv_of(e, r.args)), tuple(x for x in r.writes if x != w), skip)
                    for w in r.writes]
    return out


def stale() -> int:
    """Exit 1 with one line per cited results file older than the code it measures that the docs do not cite as
    an earlier measurement ("measured at C" on each citing line); 0 otherwise. Files cited as earlier are listed
    first, then a summary line."""
    if not _stale.has_history(ROOT):
        print(f"stale: skipped: {ROOT} has no git history here (a copy of the tree); a clone has it")
        return 0
    lines, earlier, summary = _stale.check(ROOT, stale_entries())
    for line in earlier + lines:
        print(line)
    print(summary)
    return 1 if lines else 0


def main(argv: list[str]) -> int:
    names = ", ".join(e.name for e in EXPERIMENTS)
    if not argv or argv[0] in ("-h", "--help"):
        print(experiments.__doc__ + f"\nExperiments: {names}.\n"
              "Options of `all` and `NAME`: --quick; --out-dir DIR (the quick pass's folder; default: a new temporary "
              "one); --jobs N (quick scripts N at a time; default 1); --fresh (each quick script in a new "
              "interpreter instead of forked from one that imported torch and autospeed once).")
        return 0
    os.chdir(ROOT)  # the scripts' commands and the results paths are from the repository root
    head, rest = argv[0], argv[1:]
    if head == "list":
        listing("--json" in rest)
        return 0
    if head == "stale":
        return stale()
    e = find(head)
    if head != "all" and e is None:
        print(f"python -m experiments: no experiment {head!r}; one of: all, list, stale, {names}", file=sys.stderr)
        return 2
    if head == "all" or (not e.helper and (not rest or rest[0] in ("--quick", "--out-dir", "--jobs", "--fresh"))):
        p = argparse.ArgumentParser(prog=f"python -m experiments {head}")
        p.add_argument("--quick", action="store_true", help="a smoke pass into a temporary folder")
        p.add_argument("--out-dir", help="the quick pass's folder (default: a new temporary one)")
        p.add_argument("--jobs", type=int, default=1, help="quick scripts run this many at a time")
        p.add_argument("--fresh", action="store_true", help="each quick script in a new interpreter")
        args = p.parse_args(rest)
        if (args.out_dir or args.fresh or args.jobs != 1) and not args.quick:
            p.error("--out-dir, --jobs and --fresh are the quick pass's: full runs run one at a time, as their "
                    "commands say")
        return run_all(list(EXPERIMENTS) if head == "all" else [e], args.quick, args.out_dir, args.jobs, args.fresh)
    return subprocess.run(argv_of(e, rest), cwd=ROOT).returncode  # NAME ARGS...: the script itself


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
