"""Shared by the experiments: the CPU lock every engineer's benchmarks respect, and the machine line."""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import statistics

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


def machine() -> str:
    import torch

    from autospeed.environment import cpu_model

    return (f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"Python {platform.python_version()}, {torch.get_num_threads()} torch threads")


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample stdev / mean)."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0
