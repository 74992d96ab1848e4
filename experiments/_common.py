"""Shared by the experiments: the CPU lock every engineer's benchmarks respect, and the machine line."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import statistics
import sys

LOCK_PATH = "/tmp/cpu.lock"


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
            f"torch {env['torch']}, Python {env['python']}, autospeed {env['autospeed']}, {env['platform']}\n"
            f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")


def emit_table(title: str, header: str, lines: list[str], out: str | None) -> None:
    """Print a results table and, with `out`, write it with its command and machine."""
    table = "\n".join(lines)
    print()
    print(table)
    if out:
        with open(out, "w") as f:
            f.write(f"# {title}\n\n`python {' '.join(sys.argv)}`\n\n```\n{header}\n```\n\n{table}\n")
