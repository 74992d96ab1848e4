"""What tests/train/test_process.py asks a fresh process (autospeed.train.process.in_fresh_process) to report.

Module functions, pickled by name: the fresh process imports this module to run them, so it imports only the
standard library. Defined in the test file, they made each fresh process import the test's own imports (torch,
through autospeed.run_recipe) first, about 1.5 s a process on 2 cores, which none of them uses."""

from __future__ import annotations

import multiprocessing
import os


def start_method() -> str:
    """The start method the fresh process's own multiprocessing (its DataLoader workers) uses."""
    return multiprocessing.get_start_method()


def inductor_cache() -> tuple[str | None, list[str] | None, str | None]:
    """(TORCHINDUCTOR_CACHE_DIR, what that folder held at the start, TRITON_CACHE_DIR)."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    held = sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else None
    return folder, held, os.environ.get("TRITON_CACHE_DIR")


def imported(names: tuple[str, ...]) -> list[str]:
    """Which of `names` the fresh process has imported by the time it runs this."""
    import sys

    return [n for n in names if n in sys.modules]
