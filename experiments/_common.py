"""Shared by the experiments: the CPU lock every engineer's benchmarks respect, and the
provenance header every results file starts with (commit, command, machine, date)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

LOCK_PATH = "/tmp/cpu.lock"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


@contextlib.contextmanager
def cpu_lock(exclusive: bool):
    """Exclusive for timing benchmarks (nothing else loads the cores), shared for searches and tests."""
    with open(LOCK_PATH, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample stdev / mean)."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def machine_header(device: str = "cpu") -> str:
    """Two lines: the machine a benchmark ran on and when."""
    from autospeed.environment import environment

    env = environment(device)
    gpu = f", {env['device_name']}, CUDA {env['cuda']}, driver {env['driver']}" if env["device"] == "cuda" else ""
    return (f"machine: {env['cpu_model']}, {env['cpu_count']} CPUs, {env['torch_threads']} torch threads{gpu}, "
            f"torch {env['torch']}, Python {env['python']}, autospeed {env['autospeed']}, "
            f"{env['platform']}\n"
            f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")


def commit() -> str:
    """`git describe --always --dirty` of the checkout, except that results files do not make it dirty
    (a run regenerating several of them in turn would otherwise call every later one dirty) while
    untracked source files do; a dirty tree names up to five of the paths that differ."""
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


@functools.cache
def provenance(device: str = "cpu") -> str:
    """Four lines: the commit, the exact command, the machine and the date. Taken once per run (cached), so
    a script that calls it when it starts names the commit and date it started at, however long it runs."""
    return f"commit: {commit()}\ncommand: {command()}\n{machine_header(device)}"


def results_header(title: str, device: str = "cpu") -> str:
    """The start of every results file: a title and the provenance block, then a blank line."""
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
